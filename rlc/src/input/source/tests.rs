//! [`PrometheusSource`] against a real Prometheus holding 28 days of synthetic history.
//!
//! One Prometheus serves every check (starting one costs seconds and CPU is shared); each
//! check is its own function and names itself in its assertions.

use super::{
    BatchedPrometheusSource, BucketQuery, Measure, MetricsSource, PromSettings, PrometheusSource,
    RangeSeries, SourceError, fetch_all,
};
use std::f64::consts::PI;
use std::time::{Duration, Instant};
use test_support::prometheus::{Prometheus, backfill_file};
use test_support::traffic::{CounterSpec, write_counters_file};

const DAY: i64 = 86_400;
/// Rate of (gw, Pay/Card, allowed) during the burst.
const BURST: f64 = 45.0;

struct World {
    start: i64,
    end: i64,
    prom: Prometheus,
    url: String,
    _dir: tempfile::TempDir,
}

fn series(labels: &str, rate: impl Fn(i64) -> f64 + Send + Sync + 'static) -> CounterSpec {
    CounterSpec {
        labels: labels.to_owned(),
        rate: Box::new(rate),
    }
}

/// 28 days at 1-minute spacing ending 4 hours ago. (gw, Pay/Card, allowed) follows a daily
/// sine 5..15 rps with a 10-minute burst at 45 rps on day 10; the other series are constant.
async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let end = (now - 4 * 3600) / 60 * 60;
    let start = end - 28 * DAY;
    // Also in `covers_the_window_and_keeps_the_peak`.
    let burst = start + 10 * DAY + 12 * 3600;
    let p = |c: &str, proc_: &str, d: &str| {
        format!(r#"service="payments",caller="{c}",procedure="{proc_}",decision="{d}""#)
    };
    let specs = vec![
        series(&p("gw", "Pay/Card", "allowed"), move |t| {
            if t > burst && t <= burst + 600 {
                BURST
            } else {
                10.0 * (1.0 + 0.5 * (2.0 * PI * t as f64 / DAY as f64).sin())
            }
        }),
        series(&p("gw", "Pay/Card", "shadow_dropped"), |_| 2.0),
        series(&p("gw", "Pay/Bank", "allowed"), |_| 5.0),
        series(&p("gw", "Refund/All", "allowed"), |_| 7.0),
        series(&p("batch", "Pay/Card", "dropped"), |_| 1.0),
        series(
            r#"service="other",caller="gw",procedure="Pay/Card",decision="allowed""#,
            |_| 100.0,
        ),
    ];
    let om = dir.path().join("history.om");
    write_counters_file(&om, &specs, start, end, 60).unwrap();
    let data = dir.path().join("data");
    backfill_file(&om, &data).await.unwrap();
    let prom = Prometheus::start_on_data(&data).await.unwrap();
    let url = prom.url();
    World {
        start,
        end,
        prom,
        url,
        _dir: dir,
    }
}

fn bucket(caller: Option<&str>, procedure: Option<&str>) -> BucketQuery {
    BucketQuery {
        service: "payments".into(),
        bucket: format!("{}-{}", caller.unwrap_or("any"), procedure.unwrap_or("any")),
        caller: caller.map(Into::into),
        procedure: procedure.map(Into::into),
    }
}

/// The whole window of one bucket's `measure`.
async fn window(
    w: &World,
    src: &impl MetricsSource,
    caller: Option<&str>,
    procedure: Option<&str>,
    measure: Measure,
) -> RangeSeries {
    src.fetch(&bucket(caller, procedure), measure, w.start, w.end)
        .await
        .unwrap()
}

fn assert_near(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 0.02 * want,
        "{what}: got {got}, want {want} ± 2%"
    );
}

/// The smallest value once the data has been there 10 minutes: at the very start `rate()`
/// sees a single sample and extrapolates low (2.5 for a constant 5), depending on where the
/// step grid falls against the first sample.
fn min(w: &World, s: &RangeSeries) -> f64 {
    s.points
        .iter()
        .filter(|p| p.0 >= w.start + 600)
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_real_prometheus() {
    let w = world().await;
    let src = PrometheusSource::new(&w.url, PromSettings::default()).unwrap();
    covers_the_window_and_keeps_the_peak(&w, &src).await;
    prefix_rules_sum_the_right_series(&w, &src).await;
    decision_measures_select_only_their_decision(&w, &src).await;
    long_window_at_fine_step_is_chunked(&w).await;
    bad_template_is_rejected_without_retry(&w).await;
    fetch_all_returns_in_order(&w, &src).await;
    batched_matches_per_bucket(&w, &src).await;
    long_answers_are_split_then_refused(&w, &src).await;
    too_many_samples_halve_the_chunk(&w, &src).await;
}

async fn covers_the_window_and_keeps_the_peak(w: &World, src: &PrometheusSource) {
    let s = window(w, src, Some("gw"), Some("Pay/*"), Measure::Offered).await;
    assert_eq!(s.step_secs, 300);
    let n = s.points.len() as i64;
    assert!(
        (8_060..=8_065).contains(&n),
        "(a) 28 days at 300 s is ~8064 points, got {n}"
    );
    assert!(
        s.points[0].0 - w.start <= 600,
        "(a) first point {} too late after {}",
        s.points[0].0,
        w.start
    );
    assert!(
        w.end - s.points[n as usize - 1].0 < 300,
        "(a) last point too early"
    );
    assert!(
        s.points.windows(2).all(|p| p[1].0 - p[0].0 == 300),
        "(a) no gaps at the step"
    );
    // Peak: burst 45 + shadow 2 + Pay/Bank 5.
    assert_near("(b) peak of gw Pay/*", s.max().unwrap(), BURST + 7.0);
    // Outside the burst the sine peaks at 15 + 7. Points within two steps of the burst are
    // left out by time, not by value: depending on where the 300 s grid falls, a point there
    // holds part of the burst (a value between 22 and 45).
    let burst = w.start + 10 * DAY + 12 * 3600;
    let near_burst = (burst - 600)..=(burst + 600 + 600);
    let second = s
        .points
        .iter()
        .filter(|p| !near_burst.contains(&p.0))
        .map(|p| p.1)
        .fold(0.0, f64::max);
    assert_near("(b) daily peak of gw Pay/*", second, 22.0);
}

async fn prefix_rules_sum_the_right_series(w: &World, src: &PrometheusSource) {
    let bank = window(w, src, Some("gw"), Some("Pay/B*"), Measure::Offered).await;
    assert_near("(c) gw Pay/B* max", bank.max().unwrap(), 5.0);
    assert_near("(c) gw Pay/B* min", min(w, &bank), 5.0);
    let refund = window(w, src, None, Some("Re*"), Measure::Offered).await;
    assert_near(
        "(c) Re* excludes other services",
        refund.max().unwrap(),
        7.0,
    );
    let card = window(w, src, None, Some("Pay/Card"), Measure::Offered).await;
    assert_near(
        "(c) exact Pay/Card, all callers",
        card.max().unwrap(),
        BURST + 2.0 + 1.0,
    );
    let none = window(w, src, Some("nobody"), None, Measure::Offered).await;
    assert!(none.is_empty(), "(c) no matching series is an empty series");
}

async fn decision_measures_select_only_their_decision(w: &World, src: &PrometheusSource) {
    let shadow = window(w, src, Some("gw"), Some("Pay/*"), Measure::ShadowDropped).await;
    assert_near("(d) shadow_dropped max", shadow.max().unwrap(), 2.0);
    assert_near("(d) shadow_dropped min", min(w, &shadow), 2.0);
    let dropped = window(w, src, Some("gw"), Some("Pay/*"), Measure::Dropped).await;
    assert!(
        dropped.is_empty(),
        "(d) gw has no dropped series, got {} points",
        dropped.points.len()
    );
    let dropped = window(w, src, None, Some("Pay/Card"), Measure::Dropped).await;
    assert_near("(d) dropped of Pay/Card", dropped.max().unwrap(), 1.0);
}

async fn long_window_at_fine_step_is_chunked(w: &World) {
    let settings = PromSettings {
        step_secs: 60,
        ..PromSettings::default()
    };
    let src = PrometheusSource::new(&w.url, settings).unwrap();
    let s = window(w, &src, Some("gw"), Some("Pay/*"), Measure::Offered).await;
    let n = s.points.len();
    assert!(
        (40_310..=40_321).contains(&n),
        "(f) 28 days at 60 s needs 4 chunks of <= 11000; got {n} points"
    );
    assert!(
        s.points.windows(2).all(|p| p[1].0 - p[0].0 == 60),
        "(f) chunks join without gaps or overlaps"
    );
    assert_near("(f) peak at 60 s", s.max().unwrap(), BURST + 7.0);
}

/// A 28-day answer (about 200 KB) under a 64 KiB limit: asked again in quarters, the same
/// series; under 1 KiB, refused once halved 3 times.
async fn long_answers_are_split_then_refused(w: &World, src: &PrometheusSource) {
    let limited = |max_answer_bytes| {
        PrometheusSource::new(
            &w.url,
            PromSettings {
                max_answer_bytes,
                ..PromSettings::default()
            },
        )
        .unwrap()
    };
    let whole = window(w, src, Some("gw"), Some("Pay/*"), Measure::Offered).await;
    let split = window(
        w,
        &limited(64 * 1024),
        Some("gw"),
        Some("Pay/*"),
        Measure::Offered,
    )
    .await;
    assert_eq!(whole.points, split.points, "(l) split answers join");
    let err = limited(1024)
        .fetch(&bucket(Some("gw"), None), Measure::Offered, w.start, w.end)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SourceError::Rejected { .. })
            && err.to_string().contains("answer longer than 1024 bytes")
            && err.to_string().contains("after halving the range 3 times"),
        "(l) {err}"
    );
}

/// A Prometheus whose `--query.max-samples` is far below what one chunk of 11,000 steps
/// loads (its default is 50,000,000): each refused chunk is asked again in halves, and the
/// series joined from them is the one an unbounded Prometheus answers.
async fn too_many_samples_halve_the_chunk(w: &World, src: &PrometheusSource) {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(w.prom.data_dir()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        // Only the persisted blocks: the head and its lock belong to the running server.
        if !entry.file_type().unwrap().is_dir() || name == "wal" || name == "chunks_head" {
            continue;
        }
        let to = copy.path().join(&name);
        std::fs::create_dir_all(&to).unwrap();
        copy_dir(&entry.path(), &to);
    }
    let bounded = Prometheus::start_on_data_with(copy.path(), &["--query.max-samples=5000"])
        .await
        .unwrap();
    let refused = bounded
        .query(r#"count_over_time(grl_requests_total{caller="gw",procedure="Pay/Card",decision="allowed"}[28d])"#)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("too many samples"),
        "(m) the bounded Prometheus loads a whole window: {refused}"
    );
    let through = PrometheusSource::new(&bounded.url(), PromSettings::default()).unwrap();
    let whole = window(w, src, Some("gw"), Some("Pay/*"), Measure::Offered).await;
    let halved = window(w, &through, Some("gw"), Some("Pay/*"), Measure::Offered).await;
    assert_eq!(whole.points, halved.points, "(m) halved chunks join");
    bounded.stop();
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

async fn bad_template_is_rejected_without_retry(w: &World) {
    let settings = PromSettings {
        query_template: r#"sum(rate(grl_requests_total{service="{{service}}"}[{{rate_window}}])"#
            .into(),
        backoff_base: Duration::from_secs(10),
        backoff_max: Duration::from_secs(20),
        ..PromSettings::default()
    };
    let src = PrometheusSource::new(&w.url, settings).unwrap();
    let t = Instant::now();
    let err = src
        .fetch(&bucket(Some("gw"), None), Measure::Offered, w.start, w.end)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SourceError::Rejected { .. }),
        "bad PromQL is rejected, not retried: {err}"
    );
    assert!(
        err.to_string().contains("payments/gw-any") && err.to_string().contains(&w.url),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "no retry on bad_data");
}

async fn fetch_all_returns_in_order(w: &World, src: &PrometheusSource) {
    let qs = vec![
        bucket(Some("gw"), Some("Pay/B*")),
        bucket(None, Some("Re*")),
        bucket(Some("nobody"), None),
    ];
    let out = fetch_all(src, &qs, Measure::Offered, w.start, w.end, 2, |_, _| {}).await;
    assert_near("fetch_all[0]", out[0].as_ref().unwrap().max().unwrap(), 5.0);
    assert_near("fetch_all[1]", out[1].as_ref().unwrap().max().unwrap(), 7.0);
    assert!(out[2].as_ref().unwrap().is_empty());
}

async fn batched_matches_per_bucket(w: &World, src: &PrometheusSource) {
    let batched = BatchedPrometheusSource::new(&w.url, PromSettings::default()).unwrap();
    let qs = [
        (bucket(Some("gw"), Some("Pay/*")), Measure::Offered),
        (bucket(None, Some("Pay/Card")), Measure::Offered),
        (bucket(Some("gw"), Some("Pay/*")), Measure::ShadowDropped),
        (bucket(Some("gw"), Some("Pay/*")), Measure::Dropped),
    ];
    for (q, m) in qs {
        let a = src.fetch(&q, m, w.start, w.end).await.unwrap();
        let b = batched.fetch(&q, m, w.start, w.end).await.unwrap();
        let what = format!("batched {} {m:?}", q.name());
        assert_eq!(a.is_empty(), b.is_empty(), "{what}: emptiness");
        if a.is_empty() {
            continue;
        }
        assert_near(&format!("{what}: peak"), b.max().unwrap(), a.max().unwrap());
        assert!(
            a.points.len().abs_diff(b.points.len()) <= 1,
            "{what}: {} vs {} points",
            a.points.len(),
            b.points.len()
        );
        let bm: std::collections::HashMap<i64, f64> = b.points.iter().copied().collect();
        let differ = a
            .points
            .iter()
            .filter(|(t, v)| bm.get(t).is_none_or(|x| (x - v).abs() > 0.02 * v.max(1.0)));
        let differ = differ.count();
        assert!(
            differ <= a.points.len() / 100,
            "{what}: {differ} points differ beyond boundary effects"
        );
    }
}

#[tokio::test]
async fn prometheus_down_fails_fast_naming_url_and_bucket() {
    let url = format!("http://{}", test_support::ports::free_addr());
    let settings = PromSettings {
        timeout: Duration::from_secs(1),
        retries: 2,
        backoff_base: Duration::from_millis(10),
        ..PromSettings::default()
    };
    let src = PrometheusSource::new(&url, settings).unwrap();
    let q = BucketQuery {
        service: "payments".into(),
        bucket: "gateway-pay".into(),
        caller: None,
        procedure: None,
    };
    let t = Instant::now();
    let err = src.fetch(&q, Measure::Offered, 0, 3_600).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, SourceError::Exhausted { attempts: 3, .. }),
        "{msg}"
    );
    assert!(
        msg.starts_with(&format!(
            "prometheus at {url}: query for payments/gateway-pay failed after 3 attempts: "
        )),
        "{msg}"
    );
    assert!(
        msg.to_lowercase().contains("connect"),
        "root cause reaches the message: {msg}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}
