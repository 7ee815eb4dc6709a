//! Active/standby controllers: which of a region's controllers leads, decided by an
//! existing engine (etcd's election API: [`etcd`]; or a Kubernetes `Lease`: [`kube`]),
//! never by the controllers themselves.
//! The leader serves children; a follower refuses them with the leader's address (see
//! [`super::tier_service`]) and, when it is elected, learns for one interval before it sends
//! ratios (see [`super::engine::node::Node::set_role`]).

pub mod etcd;
pub mod kube;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::engine::leadership::Leadership;
use super::engine::node::Node;

/// Why an election could not be set up or a call to its engine failed.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The flags are wrong.
    #[error("election: {0}")]
    Config(String),
    /// The engine could not be reached or answered an error.
    #[error("{0}")]
    Backend(String),
    /// The engine took too long to answer: the request may have been carried out.
    #[error("{0}")]
    Unanswered(String),
}

/// Which engine decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// etcd at this `http://host:port` endpoint.
    Etcd(String),
    /// A Kubernetes `Lease` named by the election key in this namespace, through the API
    /// server of the pod's service account, or the one at `api` (no credentials: a local
    /// proxy such as `kubectl proxy`, or a test's stand-in).
    KubeLease {
        /// The lease's namespace.
        namespace: String,
        /// The API server's URL, if not the in-cluster one.
        api: Option<String>,
    },
}

impl std::str::FromStr for Backend {
    type Err = ElectionError;

    /// Parses `etcd=http://HOST:PORT`, `kubernetes=NAMESPACE` or
    /// `kubernetes=NAMESPACE@http://API`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some(("etcd", url)) => {
                etcd::Etcd::new(url)?;
                Ok(Self::Etcd(url.to_string()))
            }
            Some(("kubernetes", ns)) => {
                let (namespace, api) = match ns.split_once('@') {
                    Some((n, a)) => (n, Some(a.to_string())),
                    None => (ns, None),
                };
                if namespace.is_empty()
                    || !namespace
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                {
                    return Err(ElectionError::Config(format!(
                        "{s:?}: the namespace must be a DNS label"
                    )));
                }
                Ok(Self::KubeLease {
                    namespace: namespace.to_string(),
                    api,
                })
            }
            _ => Err(ElectionError::Config(format!(
                "{s:?}: expected etcd=http://HOST:PORT or kubernetes=NAMESPACE[@API-URL]"
            ))),
        }
    }
}

/// How a controller takes part in an election.
#[derive(Debug, Clone)]
pub struct ElectionOptions {
    /// The engine.
    pub backend: Backend,
    /// The election's name: one per region (e.g. `/grl/region-1`).
    pub key: String,
    /// How long leadership outlives a leader that stopped renewing it (whole seconds; etcd
    /// leases are at least 2 s): the longest a takeover waits after a leader dies.
    pub ttl: Duration,
    /// The address children reach this controller at (sent to them by followers).
    pub advertise: String,
}

/// What the election did, counted for `/metrics`
/// (`grl_controller_election_events_total{event}`).
#[derive(Debug, Default)]
pub struct ElectionStats {
    elected: AtomicU64,
    stepped_down: AtomicU64,
    backend_errors: AtomicU64,
    stale_leases_revoked: AtomicU64,
    token_changes: AtomicU64,
}

/// One kind of [`ElectionStats`] event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// This controller became the leader.
    Elected,
    /// It stopped leading (lease lost, expired on its clock, or taken).
    SteppedDown,
    /// A call to the engine failed or was cut short.
    BackendError,
    /// The lease of an ended term, which the engine still held, was revoked once the
    /// engine answered again (etcd).
    StaleLeaseRevoked,
    /// The bearer token file's content changed and the new token is in use (Kubernetes).
    TokenChanged,
}

impl ElectionStats {
    /// Counts one `event`.
    pub fn count(&self, event: Event) {
        self.counter(event).fetch_add(1, Ordering::Relaxed);
    }

    /// How many `event`s were counted.
    pub fn get(&self, event: Event) -> u64 {
        self.counter(event).load(Ordering::Relaxed)
    }

    fn counter(&self, event: Event) -> &AtomicU64 {
        match event {
            Event::Elected => &self.elected,
            Event::SteppedDown => &self.stepped_down,
            Event::BackendError => &self.backend_errors,
            Event::StaleLeaseRevoked => &self.stale_leases_revoked,
            Event::TokenChanged => &self.token_changes,
        }
    }

    /// Every event's label and count.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        [
            ("elected", Event::Elected),
            ("stepped_down", Event::SteppedDown),
            ("backend_error", Event::BackendError),
            ("stale_lease_revoked", Event::StaleLeaseRevoked),
            ("token_changed", Event::TokenChanged),
        ]
        .into_iter()
        .map(|(l, e)| (l, self.get(e)))
        .collect()
    }
}

/// The default lease: a dead leader is replaced within about 3 s, and a leader cut off
/// from etcd steps down after 2 s without renewal.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3);

/// Starts campaigning: `node` follows (refusing children) until elected, then leads, and
/// follows again whenever leadership is lost; events are counted in `stats`. Ends when
/// `shutdown` turns true.
pub fn spawn(
    opts: ElectionOptions,
    node: Arc<Node>,
    shutdown: watch::Receiver<bool>,
    stats: Arc<ElectionStats>,
) -> Result<Vec<JoinHandle<()>>, ElectionError> {
    let (tx, mut rx) = watch::channel(Leadership {
        leading: false,
        leader: None,
    });
    node.set_role(rx.borrow().clone(), Instant::now());
    let campaign = match &opts.backend {
        Backend::Etcd(url) => {
            let etcd = etcd::Etcd::new(url)?;
            tokio::spawn(etcd.run(
                opts.key,
                opts.ttl,
                opts.advertise,
                tx,
                shutdown,
                stats.clone(),
            ))
        }
        Backend::KubeLease { namespace, api } => {
            let lease = match api {
                Some(api) => kube::KubeLease::new(api, namespace, None, None)?,
                None => kube::KubeLease::in_cluster(namespace)?,
            };
            tokio::spawn(lease.run(
                opts.key,
                opts.ttl,
                opts.advertise,
                tx,
                shutdown,
                stats.clone(),
            ))
        }
    };
    let apply = tokio::spawn(async move {
        let mut leading = false;
        while rx.changed().await.is_ok() {
            let role = rx.borrow_and_update().clone();
            if role.leading != leading {
                leading = role.leading;
                stats.count(if leading {
                    Event::Elected
                } else {
                    Event::SteppedDown
                });
            }
            node.set_role(role, Instant::now());
        }
    });
    Ok(vec![campaign, apply])
}

/// Whether two tier addresses name the same endpoint (`host:port`, with or without an
/// `http://`/`https://` scheme and a trailing slash).
pub fn same_endpoint(a: &str, b: &str) -> bool {
    fn bare(s: &str) -> &str {
        s.trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
    }
    bare(a) == bare(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_backend_flag() {
        assert_eq!(
            "etcd=http://127.0.0.1:2379".parse::<Backend>().unwrap(),
            Backend::Etcd("http://127.0.0.1:2379".into())
        );
        assert_eq!(
            "kubernetes=grl".parse::<Backend>().unwrap(),
            Backend::KubeLease {
                namespace: "grl".into(),
                api: None
            }
        );
        assert_eq!(
            "kubernetes=grl@http://127.0.0.1:8001"
                .parse::<Backend>()
                .unwrap(),
            Backend::KubeLease {
                namespace: "grl".into(),
                api: Some("http://127.0.0.1:8001".into())
            }
        );
        for bad in [
            "etcd",
            "zk=http://x:1",
            "etcd=127.0.0.1:2379",
            "",
            "kubernetes=",
            "kubernetes=A/b",
        ] {
            assert!(bad.parse::<Backend>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn endpoints_compare_without_scheme_or_slash() {
        assert!(same_endpoint("127.0.0.1:7300", "http://127.0.0.1:7300/"));
        assert!(same_endpoint("https://c:1", "c:1"));
        assert!(!same_endpoint("127.0.0.1:7300", "127.0.0.1:7301"));
    }
}
