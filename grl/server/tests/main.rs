//! Integration tests of the tiers: aggregators, controllers and real clients on 127.0.0.1
//! in one process ([`enforce`], [`config`], and faults on their links: [`faults`]), and the
//! `grl` binary as real processes ([`binary`], and the sidecar with clients from other
//! ecosystems: [`sidecar`], [`rls`], [`rlqs`]), bad input ([`bad_input`]), TLS with authorised
//! admin calls ([`security`]), credential files ([`creds`]), config files that are links out
//! of their directory ([`config_links`]), the caps of a TLS port ([`tls_caps`]),
//! active/standby controllers elected through etcd ([`failover`]), and enforcement that
//! follows the load up and down ([`follow`]).

mod bad_input;
mod binary;
mod config;
mod config_links;
mod creds;
mod enforce;
mod failover;
mod fault_proxy;
mod faults;
mod follow;
mod rlqs;
mod rls;
mod security;
mod sidecar;
mod support;
mod tls_caps;
