//! The network and security pieces that every server role imports and none owns: TLS on a
//! listening port ([`tls`], its accept loop [`tls_accept`]), who may report or make admin
//! calls ([`auth`], bearer tokens `token`, credential files re-read when they change
//! [`cred_file`]), the admin HTTP server for `/metrics` and `/status` ([`admin`], its
//! connections [`admin_conn`]), a log rate limiter for refusals ([`log_limit`]), and the
//! writes of a wrapped byte stream ([`delegate`]). The tiers and the sidecar both use them.

pub mod admin;
pub mod admin_conn;
pub mod auth;
pub mod cred_file;
pub(crate) mod delegate;
pub mod log_limit;
pub mod tls;
pub mod tls_accept;
mod token;
