//! Integration tests of the tiers: aggregators, controllers and real clients on 127.0.0.1
//! in one process ([`enforce`], [`config`], and faults on their links: [`faults`]), and the
//! `grl` binary as real processes ([`binary`], and the sidecar with clients from other
//! ecosystems: [`sidecar`], [`rls`], [`rlqs`]; what its refusals say: [`sidecar_refusals`];
//! its proxy port under hostile connections
//! and callers, [`sidecar_port`] and [`sidecar_callers`], with raw clients from
//! [`raw_http`]), bad input ([`bad_input`]), TLS with authorised admin calls
//! ([`security`]), credential files ([`creds`]), config files that are links out of their
//! directory ([`config_links`]), the caps of a TLS port ([`tls_caps`]), and active/standby controllers elected through etcd
//! ([`failover`]; an etcd outage: [`election`]) or a Kubernetes Lease ([`kube_lease`],
//! against a stand-in API server: [`kube_api`]), enforcement that follows the load up
//! and down ([`follow`]) and holds for real traffic shapes ([`shapes`]) and across issue
//! 38's matrix of instances, shapes, loads and transitions ([`precision`]), priority
//! classes inside a bucket ([`priorities`]), the config
//! and message size bounds at their figures ([`size_bounds`]), what an operator sees
//! (`grl status`/`top`/`explain`, the `/status` page in a browser: [`operator`]) and
//! limits scheduled for a window ([`scheduled_limits`]), and the wire versions of the
//! links: zone tier → controller ([`wire`]), client → aggregator ([`client_wire`]).

mod bad_input;
mod binary;
mod client_wire;
mod config;
mod config_links;
mod creds;
mod election;
mod enforce;
mod failover;
mod fault_proxy;
mod faults;
mod follow;
mod kube_api;
mod kube_lease;
mod messages;
mod operator;
mod precision;
mod priorities;
mod raw_http;
mod raw_stream;
mod rlqs;
mod rls;
mod scheduled_limits;
mod security;
mod shapes;
mod sidecar;
mod sidecar_callers;
mod sidecar_port;
mod sidecar_ready;
mod sidecar_refusals;
mod size_bounds;
mod status_page_tls;
mod support;
mod tls_caps;
mod wire;
mod zone_split;
