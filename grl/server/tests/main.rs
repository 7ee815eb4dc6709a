//! Integration tests of the tiers: aggregators, controllers and real clients on 127.0.0.1
//! in one process ([`enforce`], [`config`]), and the `grl` binary as real processes
//! ([`binary`], and the sidecar with clients from other ecosystems: [`sidecar`], [`rls`]),
//! and TLS with authorised admin calls ([`security`]).

mod binary;
mod config;
mod enforce;
mod rls;
mod security;
mod sidecar;
mod support;
