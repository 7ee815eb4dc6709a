//! Integration tests of the client: its control stream against real gRPC servers on
//! 127.0.0.1, the tower layer in front of real tonic and axum services, its metrics and its
//! memory bound.

mod in_addition;
mod layer;
mod memory;
mod metrics;
mod stream;
