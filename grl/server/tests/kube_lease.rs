//! The Kubernetes Lease election backend (`election::kube`) against the stand-in API server
//! ([`crate::kube_api`]): candidates campaign in this process, so that every change of
//! role is seen with its instant. One leads and the other follows and takes over a dead
//! leader's lease; a leader whose API server hangs steps down on its own clock before its
//! lease can be taken; a rotated service-account token is used from the next round.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grl::tier::election::kube::KubeLease;
use grl::tier::election::{ElectionStats, Event};
use grl::tier::engine::leadership::Leadership;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::kube_api::KubeApi;

/// The default `--election-ttl`.
const TTL: Duration = Duration::from_secs(3);

struct Candidate {
    role: watch::Receiver<Leadership>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// Every change of `leading` seen, with when it was seen.
    changes: Arc<Mutex<Vec<(Instant, bool)>>>,
    stats: Arc<ElectionStats>,
}

impl Candidate {
    fn start(api: &str, me: &str, token: Option<&Path>, ttl: Duration) -> Self {
        let (tx, role) = watch::channel(Leadership {
            leading: false,
            leader: None,
        });
        let (stop, rx) = watch::channel(false);
        let stats = Arc::new(ElectionStats::default());
        let lease = KubeLease::new(api, "grl", token, None).unwrap();
        let task =
            tokio::spawn(lease.run("region-1".into(), ttl, me.into(), tx, rx, stats.clone()));
        let changes = Arc::new(Mutex::new(Vec::new()));
        let (mut seen, log) = (role.clone(), changes.clone());
        tokio::spawn(async move {
            let mut leading = false;
            while seen.changed().await.is_ok() {
                let now = seen.borrow_and_update().leading;
                if now != leading {
                    leading = now;
                    log.lock().unwrap().push((Instant::now(), now));
                }
            }
        });
        Self {
            role,
            stop,
            task,
            changes,
            stats,
        }
    }

    /// When it was first seen not leading after `t`.
    fn stepped_down_after(&self, t: Instant) -> Option<Instant> {
        let c = self.changes.lock().unwrap();
        c.iter().find(|(at, l)| *at >= t && !l).map(|(at, _)| *at)
    }
}

/// Polls until `f` holds for the candidates' roles, asserting meanwhile that no two lead
/// at once.
async fn until(cs: &[&Candidate], limit: Duration, f: impl Fn(&[Leadership]) -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let roles: Vec<Leadership> = cs.iter().map(|c| c.role.borrow().clone()).collect();
        assert!(
            roles.iter().filter(|r| r.leading).count() <= 1,
            "two leaders: {roles:?}"
        );
        if f(&roles) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

const A: &str = "10.0.0.1:7300";
const B: &str = "10.0.0.2:7300";

#[tokio::test]
async fn one_candidate_leads_the_other_follows_and_takes_over_when_it_dies() {
    let api = KubeApi::start(None).await;
    let ttl = Duration::from_secs(2);
    let a = Candidate::start(&api.url, A, None, ttl);
    let s = Duration::from_secs(5);
    assert!(
        until(&[&a], s, |r| r[0].leading).await,
        "the first candidate never took the free lease"
    );
    let b = Candidate::start(&api.url, B, None, ttl);
    assert!(
        until(&[&a, &b], s, |r| r[1].leader.as_deref() == Some(A)).await,
        "the second candidate does not follow the holder"
    );
    let writes = api.writes().len();
    assert!(
        until(&[&a, &b], s, |_| api.writes().len() >= writes + 2).await,
        "the leader does not renew"
    );
    assert!(!b.role.borrow().leading);

    // Killed: no more renewals, no release.
    a.task.abort();
    let killed = Instant::now();
    assert!(
        until(&[&b], Duration::from_secs(10), |r| r[0].leading).await,
        "the follower never took over the expired lease"
    );
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "took over a live lease after {took:?}"
    );
    assert_eq!(api.holder().as_deref(), Some(B));
    assert_eq!(api.lease().unwrap()["spec"]["leaseTransitions"], 1);

    // A graceful stop releases the lease: the next candidate takes it at once.
    b.stop.send_replace(true);
    let released = until(&[&b], s, |_| api.holder().as_deref() == Some("")).await;
    assert!(released, "the lease was not released on shutdown");
    let c = Candidate::start(&api.url, "10.0.0.3:7300", None, ttl);
    assert!(
        until(&[&b, &c], Duration::from_secs(2), |r| r[1].leading).await,
        "a released lease was not taken at once"
    );
}

/// The API server accepts the leader's requests and never answers them (the standby still
/// gets answers): the leader must stop leading two thirds of a lease after its last renewal,
/// on its own clock, before the standby can take the lease (a whole lease after it saw that
/// renewal). Rounds bounded only by the HTTP timeout (2 s for the GET, 2 s for the PUT) kept
/// such a leader leading for up to 6 s, while the standby took over after 3 to 4 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_api_server_hangs_steps_down_before_its_lease_can_be_taken() {
    let api = KubeApi::start(Some(&["token-a", "token-b"])).await;
    let dir = tempfile::tempdir().unwrap();
    for t in ["a", "b"] {
        std::fs::write(dir.path().join(t), format!("token-{t}\n")).unwrap();
    }
    let a = Candidate::start(&api.url, A, Some(&dir.path().join("a")), TTL);
    let s = Duration::from_secs(10);
    assert!(until(&[&a], s, |r| r[0].leading).await, "A never led");
    let b = Candidate::start(&api.url, B, Some(&dir.path().join("b")), TTL);
    assert!(
        until(&[&a, &b], s, |r| r[1].leader.as_deref() == Some(A)).await,
        "B does not follow A"
    );
    let by = |token: &str| {
        api.writes()
            .into_iter()
            .filter(|w| w.token == token)
            .collect::<Vec<_>>()
    };
    let renewals = by("token-a").len();
    assert!(
        until(&[&a, &b], s, |_| by("token-a").len() > renewals).await,
        "A does not renew"
    );

    api.hang("token-a");
    let hung = Instant::now();
    assert!(
        until(&[&a, &b], Duration::from_secs(15), |r| r[1].leading).await,
        "B never took over from a leader its API server stopped answering"
    );
    let last_renewal = by("token-a").last().unwrap().at;
    let taken = by("token-b").first().expect("B leads without a write").at;
    let down = a
        .stepped_down_after(hung)
        .expect("A never stepped down while its API server hung");
    println!(
        "kube lease, API server hanging for the leader (lease {TTL:?}): the leader stepped down \
         {:.2} s after its last renewal was stored, the standby took the lease {:.2} s after it",
        (down - last_renewal).as_secs_f64(),
        (taken - last_renewal).as_secs_f64()
    );
    assert!(
        down < taken,
        "A still led when B's takeover was stored ({:?} later)",
        down - taken
    );
    assert!(
        down < last_renewal + TTL,
        "A led {:?} after its last renewal: the lease could be taken after {TTL:?}",
        down - last_renewal
    );
    assert!(
        down <= last_renewal + TTL.mul_f64(2.0 / 3.0) + Duration::from_millis(500),
        "A stepped down {:?} after its last renewal, not two thirds of the lease",
        down - last_renewal
    );
    assert!(
        taken >= last_renewal + TTL,
        "B took the lease {:?} after A's last renewal, within the lease",
        taken - last_renewal
    );
    assert!(!a.role.borrow().leading);
    assert_eq!(api.holder().as_deref(), Some(B));
    assert!(a.stats.get(Event::BackendError) >= 1);
    assert_eq!(b.stats.get(Event::BackendError), 0);
}

/// The kubelet swaps a projected token's directory through a symlink (`..data`); the API
/// server then refuses the old token. The leader must use the file's new content from its
/// next round on and keep leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_service_account_token_is_used_from_the_next_round() {
    let api = KubeApi::start(Some(&["token-1"])).await;
    let dir = tempfile::tempdir().unwrap();
    let projected = |n: u32| {
        let d = dir.path().join(format!("..2026_12_03_0{n}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("token"), format!("token-{n}")).unwrap();
        let tmp = dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&d, &tmp).unwrap();
        std::fs::rename(&tmp, dir.path().join("..data")).unwrap();
    };
    projected(1);
    let token = dir.path().join("token");
    std::os::unix::fs::symlink("..data/token", &token).unwrap();

    let a = Candidate::start(&api.url, A, Some(&token), TTL);
    assert!(
        until(&[&a], Duration::from_secs(10), |r| r[0].leading).await,
        "A never led"
    );
    let led = Instant::now();
    projected(2);
    api.accept_only(&["token-2"]);
    let with_new = || {
        api.writes()
            .iter()
            .filter(|w| w.token == "token-2" && w.holder == A)
            .count()
    };
    assert!(
        until(&[&a], Duration::from_secs(10), |_| with_new() >= 3).await,
        "the rotated token was not used: {} renewals bore it",
        with_new()
    );
    assert_eq!(
        a.stepped_down_after(led),
        None,
        "A stepped down after the rotation"
    );
    assert!(a.role.borrow().leading);
    assert_eq!(a.stats.get(Event::TokenChanged), 1);
}
