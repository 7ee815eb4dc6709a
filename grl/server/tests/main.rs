//! Integration tests of the tiers: aggregators, controllers and real clients on 127.0.0.1
//! in one process ([`enforce`], [`config`], and faults on their links: [`faults`]), and the
//! `grl` binary as real processes ([`binary`], and the sidecar with clients from other
//! ecosystems: [`sidecar`], [`rls`], [`rlqs`]; its proxy port under hostile connections
//! and callers, [`sidecar_port`] and [`sidecar_callers`], with raw clients from
//! [`raw_http`]), bad input ([`bad_input`]), and TLS with authorised
//! admin calls ([`security`]), and active/standby controllers elected through etcd
//! ([`failover`]), and enforcement that follows the load up and down ([`follow`]).

mod bad_input;
mod binary;
mod config;
mod enforce;
mod failover;
mod fault_proxy;
mod faults;
mod follow;
mod raw_http;
mod rlqs;
mod rls;
mod security;
mod sidecar;
mod sidecar_callers;
mod sidecar_port;
mod support;
