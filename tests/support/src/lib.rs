//! Helpers for the end-to-end tests: real servers on free ports, cleaned up on drop.
//!
//! - [`ports`]: free TCP ports on 127.0.0.1.
//! - [`process`]: child processes killed on drop, waits for TCP and HTTP readiness.
//! - [`traffic`]: the real traffic series in `tests/data/traffic/` and an OpenMetrics
//!   writer for `promtool` backfills.
//! - [`prometheus`]: a real Prometheus, optionally backfilled with weeks of history.
//! - [`postgres`]: a fresh PostgreSQL database per test.
//! - [`etcd`]: a real etcd for the controllers' leader election.
//! - [`git_remote`]: a bare git repository standing in for the config repo's remote.
//! - [`netns`]: hosts in network namespaces on one bridge, made and removed by a test, with
//!   `iptables` drops at a receiver; [`delay_router`]: a user-space delay-and-loss router on
//!   a tun device between two of their networks (the kernel here has no `netem`).
//! - [`import_circles`]: counts a crate's import circles (modules importing each other).
//! - [`unit_test_files`]: the one convention for where unit tests live, checked.
//! - [`github`]: a stand-in for GitHub's pull-request API over HTTPS with a test CA, checking
//!   each request against GitHub's published OpenAPI description.
//!
//! The external programs come from environment variables that `bash tests/run.sh` sets
//! after installing and starting them: `GRL_TEST_PROMETHEUS`, `GRL_TEST_PROMTOOL`,
//! `GRL_TEST_REDIS_SERVER`, `GRL_TEST_ETCD`, `GRL_TEST_PG_URL`, `GRL_TEST_GITHUB_PYTHON`,
//! `GRL_TEST_GITHUB_OPENAPI`. A helper whose program is missing fails
//! with a message pointing there; nothing is skipped silently.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use test_support::prometheus::Prometheus;
//! use test_support::traffic::{OpenMetricsWriter, backfill_end, load_series, scale_and_shift, take_last};
//!
//! let rates = scale_and_shift(&load_series("Twitter_volume_AAPL"), 1000.0, backfill_end());
//! let mut om = OpenMetricsWriter::new();
//! om.add_counter_series("grl_requests_total", &[("bucket", "b")], &take_last(&rates, 28 * 86400), 60);
//! let prom = Prometheus::start_with_backfill(&om.finish()).await?;
//! let peak = prom.query_scalar("max_over_time(rate(grl_requests_total[5m])[28d:5m])").await?;
//! # let _ = peak; Ok(()) }
//! ```

// Denied, not forbidden: `netns` and `delay_router` reach setns, TUNSETIFF and poll only
// through `unsafe`, allowed at those calls alone (test code, never shipped).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod delay_router;
pub mod etcd;
pub mod git_remote;
pub mod github;
pub mod import_circles;
pub mod netns;
pub mod ports;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod traffic;
pub mod unit_test_files;
