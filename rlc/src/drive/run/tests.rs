//! Runs against real parts: bare git remotes on disk, CSV history read by [`FileSource`]
//! (wrapped to count every fetch), SQLite for the run history.

use super::*;
use crate::drive::serve_metrics::RlcMetrics;
use crate::input::source::{BucketQuery, FetchFuture, FileSource, Measure};
use crate::output::git_store::{PR_BRANCH, RLC_AUTHOR_EMAIL};
use git2::{Oid, Repository, Signature};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tempfile::TempDir;

const NOW: i64 = 1_764_000_000;

fn services(buffer: &str) -> [(&'static str, String); 2] {
    let peak = |name: &str, m: &str, buffer: &str| {
        format!(
            "  - name: {name}\n    match: {{ {m} }}\n    scope: global\n    mode: deny\n    \
             policy: {{ kind: historical-peak, window: 28d, buffer: {buffer} }}\n"
        )
    };
    [
        (
            "services/payments.yaml",
            format!(
                "service: payments\nbuckets:\n{}{}",
                peak("gateway-pay", "caller: gateway", "0.25"),
                peak("refunds", "procedure: \"Refund/*\"", "0.25"),
            ),
        ),
        (
            "services/search.yaml",
            format!(
                "service: search\nbuckets:\n{}",
                peak("query", "caller: web", buffer)
            ),
        ),
    ]
}

/// 28 days at 5 minutes for each bucket, with one known peak.
fn write_history(dir: &Path) {
    for (svc, bucket, base, peak) in [
        ("payments", "gateway-pay", 100.0, 400.0),
        ("payments", "refunds", 50.0, 200.0),
        ("search", "query", 300.0, 1000.0),
    ] {
        std::fs::create_dir_all(dir.join(svc)).unwrap();
        let mut text = String::from("timestamp,rps\n");
        let start = NOW - 28 * 86_400 + 300;
        for (i, ts) in (start..=NOW).step_by(300).enumerate() {
            let v = if i == 5_000 {
                peak
            } else {
                base + (i % 288) as f64 * 0.1
            };
            text.push_str(&format!("{ts},{v}\n"));
        }
        std::fs::write(dir.join(svc).join(format!("{bucket}.csv")), text).unwrap();
    }
}

type Hook = Box<dyn FnOnce() + Send>;

/// A [`FileSource`] that counts fetches per (bucket, measure) and runs a hook (once) inside
/// the first fetch: between the run's git fetch and its push.
struct Counting {
    inner: FileSource,
    counts: Mutex<BTreeMap<(String, &'static str), usize>>,
    hook: Mutex<Option<Hook>>,
}

impl Counting {
    fn new(dir: &Path, hook: Option<Hook>) -> Arc<Counting> {
        Arc::new(Counting {
            inner: FileSource::open(dir).unwrap(),
            counts: Mutex::default(),
            hook: Mutex::new(hook),
        })
    }

    fn counts(&self) -> BTreeMap<(String, &'static str), usize> {
        self.counts.lock().unwrap().clone()
    }
}

impl MetricsSource for Counting {
    fn fetch<'a>(
        &'a self,
        q: &'a BucketQuery,
        m: Measure,
        start: i64,
        end: i64,
    ) -> FetchFuture<'a> {
        Box::pin(async move {
            *self
                .counts
                .lock()
                .unwrap()
                .entry((q.name(), m.as_str()))
                .or_default() += 1;
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                tokio::task::spawn_blocking(hook).await.unwrap();
            }
            self.inner.fetch(q, m, start, end).await
        })
    }

    fn describe(&self) -> String {
        format!("counting {}", self.inner.describe())
    }
}

/// A bare remote whose `main` holds `files`, committed by a person.
fn bare_remote(root: &Path, files: &[(&str, String)]) -> PathBuf {
    let path = root.join("config.git");
    let repo = Repository::init_bare(&path).unwrap();
    repo.set_head("refs/heads/main").unwrap();
    let tree = tree_with(&repo, None, files);
    let sig = person();
    repo.commit(Some("refs/heads/main"), &sig, &sig, "intent\n", &tree, &[])
        .unwrap();
    path
}

fn person() -> Signature<'static> {
    Signature::now("Pat Person", "pat@example.com").unwrap()
}

fn tree_with<'r>(
    repo: &'r Repository,
    base: Option<&git2::Tree<'_>>,
    files: &[(&str, String)],
) -> git2::Tree<'r> {
    let mut index = git2::Index::new().unwrap();
    if let Some(b) = base {
        index.read_tree(b).unwrap();
    }
    for (path, content) in files {
        let id = repo.blob(content.as_bytes()).unwrap();
        index
            .add(&git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100_644,
                uid: 0,
                gid: 0,
                file_size: content.len() as u32,
                id,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            })
            .unwrap();
    }
    repo.find_tree(index.write_tree_to(repo).unwrap()).unwrap()
}

/// A person's commit of `files` on top of `branch`, pushed from their own clone.
fn person_push(remote: &Path, branch: &str, files: &[(&str, String)]) -> Oid {
    let dir = TempDir::new().unwrap();
    let repo = Repository::clone(remote.to_str().unwrap(), dir.path()).unwrap();
    let parent = repo
        .find_commit(
            repo.refname_to_id(&format!("refs/remotes/origin/{branch}"))
                .unwrap(),
        )
        .unwrap();
    let tree = tree_with(&repo, Some(&parent.tree().unwrap()), files);
    let sig = person();
    let id = repo
        .commit(None, &sig, &sig, "person edit\n", &tree, &[&parent])
        .unwrap();
    repo.find_remote("origin")
        .unwrap()
        .push(&[format!("{id}:refs/heads/{branch}")], None)
        .unwrap();
    id
}

fn read(remote: &Path, branch: &str, path: &str) -> Option<String> {
    let repo = Repository::open_bare(remote).unwrap();
    let commit = repo
        .find_commit(repo.refname_to_id(&format!("refs/heads/{branch}")).ok()?)
        .ok()?;
    let entry = commit.tree().unwrap().get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).unwrap();
    Some(String::from_utf8(blob.content().to_vec()).unwrap())
}

fn tip(remote: &Path, branch: &str) -> git2::Oid {
    Repository::open_bare(remote)
        .unwrap()
        .refname_to_id(&format!("refs/heads/{branch}"))
        .unwrap()
}

fn limit(remote: &Path, branch: &str, service: &str, bucket: &str) -> f64 {
    let text = read(remote, branch, &format!("limits/{service}.yaml")).unwrap();
    let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    v["limits"][bucket]["rps"].as_f64().unwrap()
}

struct Env {
    tmp: TempDir,
    remote: PathBuf,
    history: PathBuf,
}

fn setup() -> Env {
    let tmp = TempDir::new().unwrap();
    let files = services("0.25");
    let remote = bare_remote(
        tmp.path(),
        &[
            (files[0].0, files[0].1.clone()),
            (files[1].0, files[1].1.clone()),
            ("README.md", "config repo\n".into()),
        ],
    );
    let history = tmp.path().join("history");
    write_history(&history);
    Env {
        tmp,
        remote,
        history,
    }
}

impl Env {
    fn settings(&self, mode: PublishMode) -> RunSettings {
        RunSettings {
            config_repo: self.remote.to_str().unwrap().to_string(),
            workdir: self.tmp.path().join("checkout"),
            mode,
            db: format!("sqlite://{}", self.tmp.path().join("runs.db").display()),
            controllers: Vec::new(),
            controller_auth: Default::default(),
            guards: GuardSettings::default(),
            concurrency: 4,
            now: Some(NOW),
            trigger: "test".into(),
            max_attempts: 3,
            github: None,
            history_cache: None,
            history_retention: None,
            progress: crate::drive::run::ProgressMode::Off,
            metrics: None,
        }
    }
}

fn close(got: f64, want: f64) -> bool {
    (got / want - 1.0).abs() < 0.01
}

/// Every (bucket, measure) the run needs, fetched exactly once.
fn assert_each_fetched_once(counts: &BTreeMap<(String, &'static str), usize>) {
    let keys: Vec<_> = counts.keys().cloned().collect();
    let mut want = Vec::new();
    for b in ["payments/gateway-pay", "payments/refunds", "search/query"] {
        for m in ["dropped", "offered"] {
            want.push((b.to_string(), m));
        }
    }
    assert_eq!(keys, want, "{counts:?}");
    assert!(
        counts.values().all(|&n| n == 1),
        "fetched again: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_moving_under_the_run_replans_only_changed_services_without_refetching() {
    let env = setup();
    let remote = env.remote.clone();
    let theirs: Arc<Mutex<Option<Oid>>> = Arc::default();
    let seen = theirs.clone();
    // A person raises search's buffer after the run fetched main, before it pushes.
    let hook: Hook = Box::new(move || {
        let bumped = services("0.5")[1].1.clone();
        let id = person_push(&remote, "main", &[("services/search.yaml", bumped)]);
        *seen.lock().unwrap() = Some(id);
    });
    let source = Counting::new(&env.history, Some(hook));
    let report = run_once(&env.settings(PublishMode::Direct), source.clone())
        .await
        .unwrap();

    assert_eq!(
        report.status,
        RunStatus::Committed,
        "{}",
        report.description
    );
    assert_eq!((report.attempts, report.push_conflicts), (2, 1));
    assert_eq!(report.replanned, vec!["search".to_string()]);
    assert_each_fetched_once(&source.counts());

    let theirs = theirs.lock().unwrap().expect("the hook ran");
    let repo = Repository::open_bare(&env.remote).unwrap();
    let head = repo.find_commit(tip(&env.remote, "main")).unwrap();
    assert_eq!(head.author().email().ok(), Some(RLC_AUTHOR_EMAIL));
    assert_eq!(
        head.parent_ids().collect::<Vec<_>>(),
        vec![theirs],
        "on top of theirs"
    );
    assert!(close(limit(&env.remote, "main", "search", "query"), 1500.0));
    assert!(close(
        limit(&env.remote, "main", "payments", "gateway-pay"),
        500.0
    ));
    assert!(close(
        limit(&env.remote, "main", "payments", "refunds"),
        250.0
    ));
    let search = report.plans.iter().find(|p| p.service == "search").unwrap();
    assert!(close(search.guarded.limit.unwrap(), 1500.0), "{search:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviewer_commit_during_a_run_is_kept_and_the_change_lands_on_top() {
    let env = setup();
    let first = run_once(
        &env.settings(PublishMode::Pr),
        Counting::new(&env.history, None),
    )
    .await
    .unwrap();
    assert_eq!(first.status, RunStatus::Committed);
    let first_tip = tip(&env.remote, PR_BRANCH);

    // main changes (search gets more headroom); during the next run, after its fetch, a
    // reviewer fixes payments' limits on the open pull request.
    person_push(
        &env.remote,
        "main",
        &[("services/search.yaml", services("0.5")[1].1.clone())],
    );
    let remote = env.remote.clone();
    let fix = "service: payments\nlimits:\n  gateway-pay: { rps: 450 }\n  refunds: { rps: 240 }\n";
    let theirs: Arc<Mutex<Option<Oid>>> = Arc::default();
    let seen = theirs.clone();
    let hook: Hook = Box::new(move || {
        let id = person_push(&remote, PR_BRANCH, &[("limits/payments.yaml", fix.into())]);
        *seen.lock().unwrap() = Some(id);
    });
    let source = Counting::new(&env.history, Some(hook));
    let report = run_once(&env.settings(PublishMode::Pr), source.clone())
        .await
        .unwrap();

    let theirs = theirs.lock().unwrap().expect("the hook ran");
    assert_eq!(
        report.status,
        RunStatus::Committed,
        "{}",
        report.description
    );
    assert_eq!((report.attempts, report.push_conflicts), (2, 1));
    assert!(
        report.replanned.is_empty(),
        "main did not move: {:?}",
        report.replanned
    );
    assert_each_fetched_once(&source.counts());

    let repo = Repository::open_bare(&env.remote).unwrap();
    let head = repo.find_commit(tip(&env.remote, PR_BRANCH)).unwrap();
    assert_eq!(head.parent_ids().collect::<Vec<_>>(), vec![theirs]);
    assert!(repo.graph_descendant_of(theirs, first_tip).unwrap());
    assert_eq!(
        read(&env.remote, PR_BRANCH, "limits/payments.yaml").as_deref(),
        Some(fix),
        "the reviewer's fix is kept"
    );
    assert!(close(
        limit(&env.remote, PR_BRANCH, "search", "query"),
        1500.0
    ));

    let metrics = RlcMetrics::default();
    metrics.observe(Ok(&report), 1.0);
    let text = metrics.encode();
    assert!(text.contains("rlc_push_conflicts_total 1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_that_keeps_moving_fails_the_run_as_a_git_error() {
    let env = setup();
    let remote = env.remote.clone();
    let mut settings = env.settings(PublishMode::Direct);
    settings.max_attempts = 1;
    let hook: Hook = Box::new(move || {
        person_push(&remote, "main", &[("README.md", "edited\n".into())]);
    });
    let err = run_once(&settings, Counting::new(&env.history, Some(hook)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            RunError::Git(GitStoreError::Contended { attempts: 1, .. })
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), exit::GIT);
    assert_eq!(
        read(&env.remote, "main", "README.md").as_deref(),
        Some("edited\n")
    );
    assert_eq!(read(&env.remote, "main", "limits/payments.yaml"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_maps_to_its_exit_code() {
    // The metrics source: a CSV line that is not a number.
    let env = setup();
    std::fs::write(env.history.join("search/query.csv"), "1764000000,many\n").unwrap();
    let err = run_once(
        &env.settings(PublishMode::Direct),
        Counting::new(&env.history, None),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RunError::Source(_)), "{err:?}");
    assert!(err.to_string().contains("query.csv:1"), "{err}");
    assert_eq!(err.exit_code(), exit::SOURCE);

    // The config repo: no repository there.
    let env = setup();
    let mut settings = env.settings(PublishMode::Direct);
    settings.config_repo = env.tmp.path().join("nowhere.git").display().to_string();
    let err = run_once(&settings, Counting::new(&env.history, None))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Git(_)), "{err:?}");
    assert_eq!(err.exit_code(), exit::GIT);

    // The run history database: an unsupported URL.
    let env = setup();
    let mut settings = env.settings(PublishMode::Direct);
    settings.db = "mysql://127.0.0.1/runs".into();
    let err = run_once(&settings, Counting::new(&env.history, None))
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Database(_)), "{err:?}");
    assert_eq!(err.exit_code(), exit::DATABASE);

    // The config: a bucket with an unknown scope; nothing fetched, nothing committed.
    let env = setup();
    let bad = services("0.25")[1]
        .1
        .replace("scope: global", "scope: planet");
    person_push(&env.remote, "main", &[("services/search.yaml", bad)]);
    let before = tip(&env.remote, "main");
    let source = Counting::new(&env.history, None);
    let err = run_once(&env.settings(PublishMode::Direct), source.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("services/search.yaml"), "{err}");
    assert_eq!(err.exit_code(), exit::CONFIG);
    assert!(source.counts().is_empty());
    assert_eq!(tip(&env.remote, "main"), before);

    // A task of the run panicked.
    let join = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
    assert_eq!(RunError::from(join).exit_code(), exit::OTHER);

    // Committed, but the controller is not there: the run succeeds with exit code 7.
    let env = setup();
    let mut settings = env.settings(PublishMode::Direct);
    let port = test_support::ports::free_port();
    settings.controllers = vec![format!("127.0.0.1:{port}")];
    let report = run_once(&settings, Counting::new(&env.history, None))
        .await
        .unwrap();
    assert_eq!(report.status, RunStatus::Committed);
    assert!(
        matches!(report.push_error, Some(DeliveryError::Controller(_))),
        "{:?}",
        report.push_error
    );
    assert_eq!(report.exit_code(), exit::DELIVERY);
    let again = run_once(
        &env.settings(PublishMode::Direct),
        Counting::new(&env.history, None),
    )
    .await
    .unwrap();
    assert_eq!(again.status, RunStatus::NoChange);
    assert_eq!(again.exit_code(), exit::OK);
}

/// `events.yaml` with `events` (name, from, until, target, raise) in YAML.
fn events_yaml(events: &[(&str, i64, i64, &str)]) -> String {
    let mut out = String::from("events:\n");
    for (name, from, until, rest) in events {
        out.push_str(&format!(
            "  - name: {name}\n    from: \"{}\"\n    until: \"{}\"\n    {rest}\n",
            crate::input::capacity::utc(*from),
            crate::input::capacity::utc(*until)
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_write_scheduled_limits_keep_past_surges_out_and_are_removed_with_their_event() {
    let env = setup();
    // The one 400 rps point of gateway-pay fell in a past event: its limit comes from the
    // usual traffic (100 + 28.7 at most: 160.9), not from the sale's surge (500).
    let surge = NOW - 28 * 86_400 + 300 + 5_000 * 300;
    let (from, until) = (NOW + 86_400, NOW + 86_400 + 2 * 3_600);
    let events = events_yaml(&[
        (
            "last-sale",
            surge - 600,
            surge + 600,
            "buckets: [payments/gateway-pay]\n    multiplier: 4",
        ),
        (
            "launch",
            from,
            until,
            "services: [payments]\n    multiplier: 3",
        ),
    ]);
    person_push(&env.remote, "main", &[("events.yaml", events)]);
    let report = run_once(
        &env.settings(PublishMode::Direct),
        Counting::new(&env.history, None),
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunStatus::Committed);
    assert!(close(
        limit(&env.remote, "main", "payments", "gateway-pay"),
        160.9
    ));
    let text = read(&env.remote, "main", "limits/payments.yaml").unwrap();
    let snap = grl_config::from_files(
        "v",
        [
            (
                "services/payments.yaml".to_string(),
                services("0.25")[0].1.clone(),
            ),
            ("limits/payments.yaml".to_string(), text.clone()),
        ],
    )
    .unwrap();
    let svc = snap.service("payments").unwrap();
    for b in ["gateway-pay", "refunds"] {
        let bucket = svc.bucket(b).unwrap();
        let s = &bucket.scheduled;
        assert_eq!(s.len(), 1, "{text}");
        assert_eq!((s[0].from, s[0].until), (from, until));
        assert!(close(s[0].rps, 3.0 * bucket.limit.unwrap()), "{text}");
        assert_eq!(s[0].reason, "events.yaml: launch");
    }
    assert!(
        report.description.contains("### Scheduled limits\n"),
        "{}",
        report.description
    );

    // The launch is called off: its scheduled limits go, and the review says so.
    let events = events_yaml(&[(
        "last-sale",
        surge - 600,
        surge + 600,
        "buckets: [payments/gateway-pay]\n    multiplier: 4",
    )]);
    person_push(&env.remote, "main", &[("events.yaml", events)]);
    let report = run_once(
        &env.settings(PublishMode::Direct),
        Counting::new(&env.history, None),
    )
    .await
    .unwrap();
    assert_eq!(
        report.status,
        RunStatus::Committed,
        "{}",
        report.description
    );
    let text = read(&env.remote, "main", "limits/payments.yaml").unwrap();
    assert!(!text.contains("scheduled"), "{text}");
    assert!(
        report
            .description
            .contains("event launch no longer affects this bucket in events.yaml"),
        "{}",
        report.description
    );
}
