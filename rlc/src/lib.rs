//! The Rate Limit Configurator: pulls weeks of per-bucket offered load from Prometheus, runs
//! each bucket's policy, guards the result, commits `limits/<service>.yaml` to the git config
//! repo (straight to `main` or as a review branch), records the run, and pushes the new
//! config to the GRL controller.
//!
//! Modules, in the order a run uses them: [`source`] (history) through [`cache`] (the
//! history kept between runs), [`plan`] (policies +
//! [`guards`] → limits; [`capacity`] and [`events`]: planned capacity and the calendar),
//! [`limits_file`] and [`pr_description`] (output), [`git_store`]
//! (commit and push), [`history`] (run records), [`push`] (controller), [`run`] (one run),
//! [`schedule`] (when to run), [`rollout`] (a commit region by region, gated),
//! [`serve_metrics`]; [`explain`] says why a bucket's limit is what it is (`rlc explain`, and
//! the pull request's sections); [`secrets`] keeps passwords and tokens out of every output.
#![forbid(unsafe_code)]

pub mod cache;
pub mod capacity;
pub mod events;
pub mod explain;
pub mod git_store;
pub mod github;
pub mod guards;
pub mod history;
pub mod https;
pub mod lifecycle;
pub mod limits_file;
pub mod plan;
pub mod pr_description;
pub mod promote;
pub mod push;
pub mod rollout;
pub mod run;
pub mod schedule;
pub mod secrets;
pub mod serve_metrics;
pub mod source;
