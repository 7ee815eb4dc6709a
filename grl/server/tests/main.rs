//! Integration tests of the tiers: aggregators, controllers and real clients on 127.0.0.1
//! in one process ([`enforce`], [`config`]), and the `grl` binary as real processes
//! ([`binary`], and [`follow`]: enforcement that follows the load up and down).

mod binary;
mod config;
mod enforce;
mod follow;
mod support;
