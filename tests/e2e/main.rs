//! End-to-end tests across packages: the deployment assets (compose, [`kubernetes`]) checked
//! against the real binaries, the Grafana dashboard's queries against data the real tiers
//! export, and README's [`quick_start`] run as written.

mod dashboard_data;
mod deploy;
mod kubernetes;
mod quick_start;
