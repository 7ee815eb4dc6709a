//! The generated wire protocol (`proto/grl/v1/grl.proto`).
#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("grl.v1");
