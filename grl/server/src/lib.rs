//! GRL's tiers: the zone aggregator and the regional/global controller, with the config
//! follower, incident overrides, their admin endpoints and metrics ([`tier`]). The `grl`
//! binary (in `main.rs`) runs them, generates load through real clients and manages
//! overrides. The client itself is `grl-client`; the contract is `grl-core`.

pub mod tier;
