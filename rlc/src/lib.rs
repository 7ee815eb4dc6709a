//! The Rate Limit Configurator: pulls weeks of per-bucket offered load from Prometheus, runs
//! each bucket's policy, guards the result, commits `limits/<service>.yaml` to the git config
//! repo (straight to `main` or as a review branch), records the run, and pushes the new
//! config to the GRL controller.
//!
//! Modules by stage, in the order a run uses them:
//! - [`input`]: what a run reads — the metrics sources ([`input::source`]), the history
//!   cache kept between runs ([`input::cache`]), planned capacity ([`input::capacity`]) and
//!   planned events ([`input::events`]);
//! - [`decide`]: from inputs to limits, without I/O — each bucket's plan
//!   ([`decide::plan`]), the guards, the shadow → deny lifecycle, the calendar of capacity
//!   and events, and why a limit is what it is ([`decide::explain`]);
//! - [`output`]: what a run writes — the limits files, the pull-request description, the
//!   git config store, GitHub, and the config pushed to controllers
//!   ([`output::to_controllers`]);
//! - [`drive`]: what runs the stages — one run ([`drive::run`]), the schedule of
//!   `rlc serve`, staged rollouts ([`drive::rollout`]), promotion, and `rlc serve`'s metrics.
//!
//! Beside the stages: [`run_log`], the database of runs and rollouts; [`secrets`], which
//! keeps passwords and tokens out of every output; [`https`], the one TLS stack of the
//! HTTP clients.
#![forbid(unsafe_code)]

pub mod decide;
pub mod drive;
pub mod https;
pub mod input;
pub mod logs;
pub mod output;
pub mod run_log;
pub mod secrets;
