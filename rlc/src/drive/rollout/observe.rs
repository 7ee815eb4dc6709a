//! What a region's controllers show: the baseline read just before a wave moves the region,
//! and the observation summed over the bake from the controllers' `Status` (each bucket's
//! offered and dropped rates, and when each zone last reported), taken every poll.

use std::collections::BTreeMap;
use std::time::Duration;

use grl_core::proto::{Mode as ProtoMode, StatusResponse};
use serde::{Deserialize, Serialize};

use crate::output::to_controllers::ControllerAuth;

/// The region's state before the wave moved it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Each deny bucket's dropped rate then, by `service/bucket`.
    pub dropped: BTreeMap<String, f64>,
    /// The zones reporting to the region's controllers then.
    pub zones: Vec<String>,
}

impl Baseline {
    /// The baseline a `Status` answer shows.
    pub fn from_status(st: &StatusResponse) -> Baseline {
        Baseline {
            dropped: st
                .buckets
                .iter()
                .filter(|b| !b.is_override)
                .map(|b| (format!("{}/{}", b.service, b.bucket), b.dropped))
                .collect(),
            zones: st
                .children
                .iter()
                .filter(|c| !c.stale)
                .map(|c| c.zone.clone())
                .collect(),
        }
    }
}

/// One bucket's load summed over the samples of a bake.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BucketTotals {
    /// Whether the bucket denies (`false`: shadow).
    pub deny: bool,
    /// Σ offered rate over the samples.
    pub offered: f64,
    /// Σ dropped rate over the samples.
    pub dropped: f64,
}

impl BucketTotals {
    /// The dropped share of the offered load (`None` without load).
    pub fn dropped_share(&self) -> Option<f64> {
        (self.offered > 0.0).then(|| self.dropped / self.offered)
    }
}

/// What a region's controllers showed over a bake.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Samples taken while the region ran the version rolled out.
    pub samples: u32,
    /// Polls that got no usable answer (no controller answered, none leads, or another
    /// version ran).
    pub missed: u32,
    /// Each bucket's totals, by `service/bucket`.
    pub buckets: BTreeMap<String, BucketTotals>,
    /// Each zone seen, and whether it reported after the bake started.
    pub zones: BTreeMap<String, bool>,
    /// The last reason a poll was missed.
    pub last_miss: Option<String>,
}

impl Observation {
    /// Starts an observation expecting the zones the baseline saw.
    pub fn expecting(baseline: &Baseline) -> Observation {
        Observation {
            zones: baseline.zones.iter().map(|z| (z.clone(), false)).collect(),
            ..Observation::default()
        }
    }

    /// Adds one `Status` answer taken `since_start` after the bake started.
    pub fn add(&mut self, st: &StatusResponse, since_start: Duration) {
        self.samples += 1;
        for b in st.buckets.iter().filter(|b| !b.is_override) {
            let t = self
                .buckets
                .entry(format!("{}/{}", b.service, b.bucket))
                .or_default();
            t.deny = b.mode == ProtoMode::Deny as i32;
            t.offered += b.offered;
            t.dropped += b.dropped;
        }
        for c in &st.children {
            let reported = !c.stale && c.seconds_since_report <= since_start.as_secs_f64();
            *self.zones.entry(c.zone.clone()).or_default() |= reported;
        }
    }

    /// Counts a poll without a usable answer.
    pub fn miss(&mut self, why: String) {
        self.missed += 1;
        self.last_miss = Some(why);
    }
}

/// The answer of the controller that leads among `addrs` (the first answer when none
/// says it leads), or why there is none. Each call is cut short after `timeout`.
pub async fn leader_status(
    addrs: &[String],
    auth: &ControllerAuth,
    detail: bool,
    timeout: Duration,
) -> Result<StatusResponse, String> {
    let mut answers = Vec::new();
    let mut errors = Vec::new();
    for addr in addrs {
        match tokio::time::timeout(
            timeout,
            crate::output::to_controllers::status(addr, auth, detail),
        )
        .await
        {
            Ok(Ok(st)) if st.leading => return Ok(st),
            Ok(Ok(st)) => answers.push(st),
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(_) => errors.push(format!(
                "controller at {addr}: no answer within {timeout:?}"
            )),
        }
    }
    answers.into_iter().next().ok_or_else(|| {
        if errors.is_empty() {
            "no controller of the region is known".into()
        } else {
            errors.join("; ")
        }
    })
}

/// The commit part of a controller's config version (overrides and scheduled limits add
/// `+o<n>`, `+s<n>`).
pub fn commit_of(version: &str) -> &str {
    version.split('+').next().unwrap_or(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use grl_core::proto::{BucketStatus, ChildStatus};

    fn status(offered: f64, dropped: f64, zones: &[(&str, f64)]) -> StatusResponse {
        StatusResponse {
            config_version: "c1+o1".into(),
            buckets: vec![BucketStatus {
                service: "pay".into(),
                bucket: "a".into(),
                mode: ProtoMode::Deny as i32,
                offered,
                dropped,
                ..Default::default()
            }],
            children: zones
                .iter()
                .map(|(z, s)| ChildStatus {
                    zone: (*z).into(),
                    seconds_since_report: *s,
                    ..Default::default()
                })
                .collect(),
            leading: true,
            ..Default::default()
        }
    }

    #[test]
    fn samples_sum_into_shares_and_zones_count_once_they_report_in_the_bake() {
        let baseline = Baseline::from_status(&status(100.0, 0.0, &[("a", 0.1), ("b", 0.1)]));
        assert_eq!(baseline.zones, ["a", "b"]);
        assert_eq!(baseline.dropped["pay/a"], 0.0);
        let mut o = Observation::expecting(&baseline);
        o.add(
            &status(100.0, 50.0, &[("a", 0.2)]),
            Duration::from_millis(100),
        );
        o.add(&status(300.0, 250.0, &[("a", 0.1)]), Duration::from_secs(2));
        o.miss("down".into());
        assert_eq!(o.samples, 2);
        assert_eq!(o.missed, 1);
        assert_eq!(o.buckets["pay/a"].dropped_share(), Some(0.75));
        assert!(o.zones["a"], "zone a reported after the bake started");
        assert!(!o.zones["b"], "zone b never reported");
        assert_eq!(commit_of("c1+o1"), "c1");
        assert_eq!(commit_of("c1"), "c1");
    }
}
