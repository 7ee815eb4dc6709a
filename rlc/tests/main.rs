//! Integration tests of the configurator with real parts: a real Prometheus backfilled with
//! weeks of history, bare git remotes on disk, SQLite and PostgreSQL, a real controller,
//! and the `rlc` binary as a process.

mod demo;
mod run;
mod schedule;
