//! Rate Limit Configurator (RLC): computes rate limits from Prometheus history, writes them to
//! the git config repo, records each run and pushes the result to the GRL controller.
//!
//! Modules in this crate:
//! - [`git_store`]: the git config repo (clone, fetch, propose/commit limits, push safely);
//! - [`history`]: run history in SQLite or PostgreSQL;
//! - [`pr_description`]: the Markdown body of a limits pull request;
//! - [`github`]: opening or updating that pull request on GitHub.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod git_store;
pub mod github;
pub mod history;
pub mod pr_description;
