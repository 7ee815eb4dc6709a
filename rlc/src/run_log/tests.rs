//! Round trips against real SQLite files and a real PostgreSQL server.

use super::*;
use futures::FutureExt;
use serde_json::json;
use sqlx::Connection;

fn rec(
    service: &str,
    bucket: &str,
    prev: Option<f64>,
    applied: Option<f64>,
) -> RecommendationRecord {
    RecommendationRecord {
        service: service.into(),
        bucket: bucket.into(),
        policy: "peak-buffer".into(),
        previous_limit: prev,
        proposed_limit: applied.map(|a| a * 1.5),
        applied_limit: applied,
        outcome: if prev.is_none() {
            "changed".into()
        } else {
            "kept-previous".into()
        },
        evidence: json!({ "peak_rps": 812.5, "coverage": 0.97, "guards": ["step"], "note": "ü |x|" }),
    }
}

/// Exercises every operation; shared by the SQLite and PostgreSQL tests.
async fn round_trip(h: &RunLog) {
    let before = Utc::now() - chrono::Duration::seconds(1);
    let first = h.start_run("cron", "pr").await.unwrap();
    let second = h.start_run("commit", "direct").await.unwrap();
    assert_ne!(first, second);
    let id_shape = regex_like_run_id(&first);
    assert!(id_shape, "run id {first} is not like 20261129T201500Z-ab12");

    let running = h.run(&first).await.unwrap().expect("first run stored");
    assert_eq!(running.status, RunStatus::Running);
    assert_eq!(
        (running.trigger.as_str(), running.mode.as_str()),
        ("cron", "pr")
    );
    assert!(running.started_at >= before && running.started_at <= Utc::now());
    assert_eq!(
        (
            running.finished_at,
            running.commit.clone(),
            running.error.clone()
        ),
        (None, None, None)
    );

    let a = rec("search", "query", Some(100.0), Some(125.5));
    let b = rec("auth", "login", None, None);
    let mut c = rec("auth", "token", Some(7.0), Some(9.0));
    // NULL limits first: regression for sqlx's Any driver, which binds a NULL f64 as float4 and
    // (with a cached statement) makes the next non-NULL f64 fail on PostgreSQL.
    h.record_recommendation(&first, &b).await.unwrap();
    h.record_recommendation(&first, &a).await.unwrap();
    h.record_recommendation(&first, &c).await.unwrap();
    c.outcome = "refused".into();
    c.applied_limit = Some(7.0);
    h.record_recommendation(&first, &c).await.unwrap(); // replaces, does not duplicate
    assert_eq!(h.recommendations(&first).await.unwrap(), vec![b, c, a]);
    assert!(h.recommendations(&second).await.unwrap().is_empty());

    h.finish_run(&first, RunStatus::Committed, Some("0123abcd"), None)
        .await
        .unwrap();
    h.finish_run(
        &second,
        RunStatus::Failed,
        None,
        Some("git remote refused push"),
    )
    .await
    .unwrap();
    let done = h.run(&first).await.unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Committed);
    assert_eq!(done.commit.as_deref(), Some("0123abcd"));
    assert!(done.finished_at.unwrap() >= done.started_at);
    let failed = h.run(&second).await.unwrap().unwrap();
    assert_eq!(
        (failed.status, failed.error.as_deref()),
        (RunStatus::Failed, Some("git remote refused push"))
    );

    let recent = h.recent_runs(10).await.unwrap();
    let ids: Vec<&str> = recent.iter().map(|r| r.id.as_str()).collect();
    let mut expect = [
        (done.started_at, first.as_str()),
        (failed.started_at, second.as_str()),
    ];
    expect.sort_by(|x, y| y.cmp(x)); // newest first, ties broken by id
    assert_eq!(ids, expect.iter().map(|e| e.1).collect::<Vec<_>>());
    assert_eq!(h.recent_runs(1).await.unwrap()[0].id, expect[0].1);

    assert_eq!(h.run("20000101T000000Z-0000").await.unwrap(), None);
    let err = h
        .finish_run("nope", RunStatus::NoChange, None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, RunLogError::UnknownRun { .. }), "{err}");
}

fn regex_like_run_id(id: &str) -> bool {
    let b = id.as_bytes();
    id.len() == 21
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[16] == b'-'
        && id[..8]
            .bytes()
            .chain(id[9..15].bytes())
            .all(|c| c.is_ascii_digit())
        && id[17..].bytes().all(|c| c.is_ascii_hexdigit())
}

#[tokio::test]
async fn sqlite_round_trip_in_new_nested_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/history/rlc.db");
    let url = format!("sqlite://{}", path.display());
    let h = RunLog::connect(&url).await.unwrap();
    round_trip(&h).await;
    h.close().await;
    assert!(path.exists());

    // Reopening keeps the data and does not re-apply migrations.
    let again = RunLog::connect(&url).await.unwrap();
    assert_eq!(again.recent_runs(10).await.unwrap().len(), 2);
}

/// Three runs after everything `h` holds: the first records `search/query` at 125.5, the
/// second records nothing new for it, the third fails. Each run shows the value it left.
async fn bucket_runs_carry_the_last_recorded_decision(h: &RunLog) {
    let t0 = Utc::now() + chrono::Duration::hours(1);
    let mut ids = Vec::new();
    for i in 0..3 {
        let at = t0 + chrono::Duration::minutes(5 * i);
        ids.push(h.start_run_at("cron", "direct", at).await.unwrap());
    }
    let mut first = rec("search", "query", Some(100.0), Some(125.5));
    first.outcome = "changed".into();
    first.evidence = json!({ "guards": [{ "guard": "max-increase", "detail": "raised", "before": 300.0, "after": 125.5 }] });
    let summary = json!({});
    for (id, recs) in [(&ids[0], vec![first.clone()]), (&ids[1], vec![first])] {
        h.finish_run_recording_changes(id, &recs, &summary, RunStatus::Committed, None, None)
            .await
            .unwrap();
    }
    h.finish_run(&ids[2], RunStatus::Failed, None, Some("source down"))
        .await
        .unwrap();
    let runs = h.bucket_runs("search", "query", 3).await.unwrap();
    let got: Vec<(&str, RunStatus, bool, Option<f64>)> = runs
        .iter()
        .map(|r| {
            let limit = r.decision.as_ref().and_then(|d| d.applied_limit);
            (r.run_id.as_str(), r.status, r.recorded, limit)
        })
        .collect();
    assert_eq!(
        got,
        [
            (ids[2].as_str(), RunStatus::Failed, false, None),
            (ids[1].as_str(), RunStatus::Committed, false, Some(125.5)),
            (ids[0].as_str(), RunStatus::Committed, true, Some(125.5)),
        ]
    );
    let d = runs[1].decision.as_ref().unwrap();
    assert_eq!(d.run_id, ids[0], "carried from the run that recorded it");
    assert_eq!(
        (d.previous_limit, d.proposed_limit, d.outcome.as_str()),
        (Some(100.0), Some(125.5 * 1.5), "changed")
    );
    assert_eq!(d.guards, ["max-increase: raised"]);
    assert!(
        h.bucket_runs("search", "other", 3)
            .await
            .unwrap()
            .iter()
            .all(|r| r.decision.is_none())
    );
}

#[tokio::test]
async fn sqlite_bucket_runs() {
    let dir = tempfile::tempdir().unwrap();
    let h = RunLog::connect(&format!("sqlite://{}", dir.path().join("h.db").display()))
        .await
        .unwrap();
    bucket_runs_carry_the_last_recorded_decision(&h).await;
}

#[tokio::test]
async fn run_status_names_round_trip() {
    for st in [
        RunStatus::Running,
        RunStatus::Committed,
        RunStatus::NoChange,
        RunStatus::Failed,
        RunStatus::NoData,
        RunStatus::Aborted,
    ] {
        assert_eq!(RunStatus::parse(st.as_str()), Some(st));
    }
    assert_eq!(RunStatus::parse("done"), None);
}

#[tokio::test]
async fn postgres_round_trip() {
    let admin_url = std::env::var("GRL_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "GRL_TEST_PG_URL is not set: run `bash tests/run.sh`, which starts PostgreSQL and \
             sets it (e.g. postgres://grl:grl@127.0.0.1:5432/postgres)"
        )
    });
    let name = format!("rlc_test_{:08x}", rand::rng().random::<u32>());
    let mut admin = sqlx::postgres::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("cannot reach GRL_TEST_PG_URL ({e}); run `bash tests/run.sh`"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(&admin_url).unwrap();
    url.set_path(&name);

    let outcome = std::panic::AssertUnwindSafe(async {
        let h = RunLog::connect(url.as_str()).await.unwrap();
        assert!(!h.database().contains(":grl@"), "{}", h.database());
        round_trip(&h).await;
        bucket_runs_carry_the_last_recorded_decision(&h).await;
        h.close().await;
    })
    .catch_unwind()
    .await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test]
async fn unreachable_database_error_names_host_without_password() {
    let err = RunLog::connect("postgres://grl:hunter2@127.0.0.1:1/x")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RunLogError::Connect { .. }), "{err:?}");
    assert!(msg.contains("postgres://grl@127.0.0.1:1/x"), "{msg}");
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(
        !msg.contains("pool timed out"),
        "the cause is shown, not the pool's timeout: {msg}"
    );
}

#[tokio::test]
async fn unwritable_sqlite_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let url = format!("sqlite://{}/h.db", file.display());
    let msg = RunLog::connect(&url).await.unwrap_err().to_string();
    assert!(msg.contains("not-a-dir"), "{msg}");
}

/// Inserts a `running` row as another process would have left it.
async fn insert_running(h: &RunLog, id: &str, owner: &str, beat_ms: i64) {
    sqlx::query(
        "INSERT INTO rlc_runs (id, trigger_source, mode, started_at_ms, status, owner, \
         heartbeat_at_ms) VALUES ($1, 'cron', 'pr', $2, 'running', $3, $4)",
    )
    .bind(id)
    .bind(beat_ms)
    .bind(owner)
    .bind(beat_ms)
    .execute(&h.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn runs_left_running_by_dead_processes_are_marked_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let h = RunLog::connect(&format!("sqlite://{}", dir.path().join("h.db").display()))
        .await
        .unwrap();
    let now = Utc::now().timestamp_millis();
    let here = Owner::current();
    // A pid above Linux's pid_max: no such process.
    let dead = Owner {
        host: here.host.clone(),
        pid: 4_194_999,
    };
    insert_running(&h, "dead-local", &dead.to_string(), now).await;
    insert_running(&h, "other-host-fresh", "elsewhere:1", now).await;
    insert_running(&h, "other-host-silent", "elsewhere:2", now - 11 * 60_000).await;
    let live = h.start_run("manual", "direct").await.unwrap();

    let mut aborted = h.abort_stale_runs().await.unwrap();
    aborted.sort();
    assert_eq!(aborted, vec!["dead-local", "other-host-silent"]);
    for id in ["dead-local", "other-host-silent"] {
        let r = h.run(id).await.unwrap().unwrap();
        assert_eq!(r.status, RunStatus::Aborted, "{id}");
        assert!(r.finished_at.is_some() && r.error.unwrap().contains("aborted"));
    }
    for id in ["other-host-fresh", live.as_str()] {
        assert_eq!(
            h.run(id).await.unwrap().unwrap().status,
            RunStatus::Running,
            "{id}"
        );
    }
    assert!(h.abort_stale_runs().await.unwrap().is_empty(), "only once");
    h.heartbeat(&live).await.unwrap();
}

/// Several configurators (a `rlc rollout expedite` beside a running `rlc rollout run`)
/// opening one fresh SQLite history at the same moment each find its tables ready.
#[tokio::test]
async fn processes_opening_a_fresh_sqlite_history_at_once_all_get_it() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        let opened = futures::future::join_all((0..6).map(|_| RunLog::connect(&url))).await;
        for h in opened {
            if let Err(e) = h {
                panic!("round {round}: {e}");
            }
        }
    }
}
