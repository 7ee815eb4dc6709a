//! Integration tests of the configurator with real parts: a real Prometheus backfilled with
//! weeks of history, bare git remotes on disk, SQLite and PostgreSQL, a real controller,
//! a GitHub stand-in checked against GitHub's REST description, and the `rlc` binary as a
//! process; HTTP stand-ins only where a server must misbehave on demand (`standin`).

mod demo;
mod exit_codes;
mod pull_request;
mod push_auth;
mod reliability;
mod run;
mod schedule;
mod standin;
