//! Integration tests of the configurator with real parts: a real Prometheus backfilled with
//! weeks of history, bare git remotes on disk, SQLite and PostgreSQL, a real controller,
//! a GitHub stand-in checked against GitHub's REST description, and the `rlc` binary as a
//! process; HTTP stand-ins only where a server must misbehave on demand (`standin`).

mod cadence;
mod capacity;
mod capacity_events;
mod exit_codes;
mod explain;
mod fleet;
mod fleet_history;
mod messages;
mod pull_request;
mod push_auth;
mod reliability;
mod repo_links;
mod rollout;
mod run;
mod schedule;
mod standin;

/// The service file most tests start from: one global deny bucket, `gateway-pay`, on
/// historical-peak over 28 days with a 25 % buffer.
const ONE_BUCKET: &str = "\
service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
";
