//! What runs the stages: the exit codes ([`exit`]), one configurator run ([`run`]), when `rlc serve` runs
//! ([`schedule`]), staged rollouts of a commit region by region ([`rollout`]), a bucket's
//! promotion from shadow to deny ([`promote`]), and `rlc serve`'s own metrics
//! ([`serve_metrics`]).

pub mod exit;
pub mod promote;
pub mod rollout;
pub mod run;
pub mod schedule;
pub mod serve_metrics;
