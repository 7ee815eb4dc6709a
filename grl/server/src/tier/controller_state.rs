//! A controller's own state beside its node ([`Controller`]): the config snapshot in force
//! and the incident overrides, published together to the node as its rules (again when a
//! scheduled limit starts or ends), who may make admin calls, and the counters of its
//! config changes. The `Control` service acts on it; [`super::controller::start`] makes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tracing::info;

use super::election::ElectionStats;
use super::engine::node::Node;
use super::engine::rules::Rules;
use super::observe::metrics::Counters;
use super::overrides::Overrides;
use super::tier_service::StatusHook;
use grl_config::Snapshot;
use grl_core::proto;

/// The controller's own state beside its node.
pub struct Controller {
    /// The tier state.
    pub node: Arc<Node>,
    pub(super) snapshot: Mutex<Arc<Snapshot>>,
    pub(super) overrides: Mutex<Overrides>,
    pub(super) apply_ok: AtomicU64,
    pub(super) apply_invalid: AtomicU64,
    pub(super) config_refused: AtomicU64,
    pub(super) security: super::Security,
    pub(super) election: Option<Arc<ElectionStats>>,
    /// The schedule epoch of the rules last published (`u64::MAX`: no limit scheduled).
    pub(super) published_epoch: AtomicU64,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("version", &self.snapshot().version)
            .finish_non_exhaustive()
    }
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Controller {
    /// The snapshot in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts a new snapshot in force.
    pub fn set_snapshot(&self, s: Snapshot) {
        *self
            .snapshot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(s);
        self.publish();
    }

    /// Who may make admin calls.
    pub fn admin(&self) -> &crate::net::auth::AdminAuth {
        &self.security.admin
    }

    /// Counts an `ApplyConfig` result.
    pub fn count_apply(&self, ok: bool) {
        let c = if ok {
            &self.apply_ok
        } else {
            &self.apply_invalid
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `f` on the overrides, then republishes the rules if they changed.
    pub fn with_overrides<T>(&self, f: impl FnOnce(&mut Overrides) -> T) -> T {
        let (out, changed) = {
            let mut o = self
                .overrides
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let g = o.generation();
            let out = f(&mut o);
            (out, o.generation() != g)
        };
        if changed {
            self.publish();
        }
        out
    }

    /// Hands snapshot + overrides to the node (unless the config comes from a parent).
    pub(super) fn publish(&self) {
        if self.node.cfg.has_parent {
            return;
        }
        let snap = self.snapshot();
        let now = now_unix() as i64;
        let rules = {
            let o = self
                .overrides
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Rules::from_snapshot(&snap, &o.rules(), o.generation(), now)
        };
        let epoch = snap.schedule_epoch(now).unwrap_or(u64::MAX);
        self.published_epoch.store(epoch, Ordering::Relaxed);
        self.node.set_rules(rules, Instant::now());
    }

    /// Republishes the rules when a scheduled limit started or ended since they were
    /// published; returns when the next one does (Unix seconds), if any.
    pub(super) fn follow_schedule(&self) -> Option<i64> {
        if self.node.cfg.has_parent {
            return None;
        }
        let snap = self.snapshot();
        let now = now_unix() as i64;
        let epoch = snap.schedule_epoch(now).unwrap_or(u64::MAX);
        if epoch != self.published_epoch.load(Ordering::Relaxed) {
            info!(version = %snap.version, epoch, "a scheduled limit started or ended");
            self.publish();
        }
        snap.buckets()
            .filter_map(|(_, b)| b.next_change(now))
            .map(|c| c.at)
            .min()
    }

    pub(super) fn expire_overrides(&self) {
        for o in self.with_overrides(|o| o.expire(now_unix())) {
            info!(id = %o.id, service = %o.service, who = %o.who, "override expired");
        }
    }

    pub(super) fn status_hook(self: &Arc<Self>) -> StatusHook {
        let me = self.clone();
        Arc::new(move |st: &mut proto::StatusResponse| {
            st.overrides = me.with_overrides(|o| o.list());
            let snap = me.snapshot();
            let now = now_unix() as i64;
            for b in st.buckets.iter_mut().filter(|b| !b.is_override) {
                let next = snap
                    .service(&b.service)
                    .and_then(|s| s.bucket(&b.bucket))
                    .and_then(|c| c.next_change(now));
                if let Some(next) = next {
                    b.next_change_unix = Some(next.at);
                    b.next_limit_rps = next.rps;
                }
            }
        })
    }

    pub(super) fn counters(&self) -> Counters {
        Counters {
            apply_ok: Some(self.apply_ok.load(Ordering::Relaxed)),
            apply_invalid: self.apply_invalid.load(Ordering::Relaxed),
            config_refused: self.config_refused.load(Ordering::Relaxed),
            election: self
                .election
                .as_ref()
                .map(|e| e.snapshot())
                .unwrap_or_default(),
            ..super::aggregator::counters(&self.node, &self.security)
        }
    }
}
