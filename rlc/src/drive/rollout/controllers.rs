//! The regions' controllers: found by asking each `--controller` its region (`Status`), and
//! sent a version of the config (`ApplyConfig`) right after the region's branch moved, so a
//! region changes at once rather than at its controllers' next fetch.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use serde::Serialize;
use tracing::{info, warn};

use crate::output::to_controllers::ControllerAuth;

/// What one controller said when asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControllerView {
    /// The address asked.
    pub addr: String,
    /// Its region (`None`: it did not answer).
    pub region: Option<String>,
    /// The config version it runs.
    pub version: Option<String>,
    /// Whether it leads its region.
    pub leading: bool,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// Asks every controller in `addrs` its region and version, all at once.
pub async fn discover(addrs: &[String], auth: &ControllerAuth) -> Vec<ControllerView> {
    join_all(addrs.iter().map(|addr| async move {
        let asked = tokio::time::timeout(
            Duration::from_secs(10),
            crate::output::to_controllers::status(addr, auth, false),
        )
        .await;
        match asked {
            Ok(Ok(st)) => ControllerView {
                addr: addr.clone(),
                region: Some(st.region),
                version: Some(st.config_version),
                leading: st.leading,
                error: None,
            },
            Ok(Err(e)) => ControllerView {
                addr: addr.clone(),
                region: None,
                version: None,
                leading: false,
                error: Some(e.to_string()),
            },
            Err(_) => ControllerView {
                addr: addr.clone(),
                region: None,
                version: None,
                leading: false,
                error: Some(format!("controller at {addr}: no answer within 10s")),
            },
        }
    }))
    .await
}

/// The addresses of each region's controllers among `views` (those that answered).
pub fn by_region(views: &[ControllerView]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in views {
        if let Some(r) = &v.region {
            out.entry(r.clone()).or_default().push(v.addr.clone());
        }
    }
    out
}

/// Sends `files` as version `commit` to each of `addrs`; the addresses that refused or
/// could not be reached are logged (they still pick the commit up from their branch).
pub async fn apply(
    addrs: &[String],
    auth: &ControllerAuth,
    commit: &str,
    files: &[(String, String)],
) {
    for addr in addrs {
        match crate::output::to_controllers::apply_config(addr, commit, files.to_vec(), auth).await
        {
            Ok(resp) => info!(controller = %addr, version = %resp.version, "controller updated"),
            Err(e) => {
                warn!(controller = %addr, error = %e, "controller push failed; it follows its branch");
            }
        }
    }
}
