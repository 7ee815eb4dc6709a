//! End-to-end tests across packages: the deployment assets (compose, [`kubernetes`]) checked
//! against the real binaries, and the Grafana dashboard's queries against data the real tiers export.

mod dashboard_data;
mod deploy;
mod kubernetes;
