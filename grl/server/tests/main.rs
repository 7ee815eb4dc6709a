//! Integration tests of the tiers: aggregators, controllers and real clients on 127.0.0.1
//! in one process ([`enforce`], [`config`], and faults on their links: [`faults`]), and the `grl` binary as real processes
//! ([`binary`], and the sidecar with clients from other ecosystems: [`sidecar`], [`rls`]).

mod bad_input;
mod binary;
mod config;
mod enforce;
mod fault_proxy;
mod faults;
mod rls;
mod sidecar;
mod support;
