//! The limit holds for real traffic shapes (issue 30), with real processes: one `grl
//! controller` and `grl aggregator`s at a 1 s interval, and `grl loadgen` offering the
//! shape: many instances at a few requests a second each, many procedures under one
//! prefix bucket, bursts once a second or every two, shadow beside deny, and an aggregator
//! killed or restarted under a surge. Each loadgen prints what its clients offered and
//! admitted every second; the controller's `/metrics` says what the tiers heard.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::binary::{BIN, Proc, spawn, wait_port};
use test_support::ports::free_port;

/// A second of one bucket as a loadgen saw it: offered, allowed, dropped, shadow-dropped.
pub(crate) type Counts = [f64; 4];

/// The pseudo-bucket of a loadgen's lines under which [`Region::loadgen`] keeps when each
/// period ended (`unix_ms`) and how late the loadgen was then (`late_ms`).
pub(crate) const WALL: &str = "__wall__";

/// A controller and one aggregator per zone, all at a 1 s interval, on free ports.
pub(crate) struct Region {
    pub(crate) dir: tempfile::TempDir,
    _ctl: Proc,
    pub(crate) ctl_metrics: u16,
    pub(crate) aggs: Vec<Aggregator>,
}

/// One zone's aggregator process and where it listens.
pub(crate) struct Aggregator {
    pub(crate) proc_: Option<Proc>,
    pub(crate) zone: String,
    pub(crate) port: u16,
    ctl_addr: String,
}

impl Aggregator {
    fn spawn(zone: &str, port: u16, ctl_addr: &str) -> Proc {
        let addr = format!("127.0.0.1:{port}");
        let p = spawn(&[
            "aggregator",
            "--listen",
            &addr,
            "--zone",
            zone,
            "--region",
            "eu",
            "--controller",
            ctl_addr,
            "--interval-ms",
            "1000",
        ]);
        wait_port(port);
        p
    }

    /// Starts the aggregator again on the same port (after it was stopped).
    pub(crate) fn restart(&mut self) {
        self.proc_ = Some(Self::spawn(&self.zone, self.port, &self.ctl_addr));
    }

    /// Sends `signal` to the aggregator and waits for it to exit.
    pub(crate) fn stop(&mut self, signal: &str) {
        if let Some(mut p) = self.proc_.take() {
            let _ = Command::new("kill")
                .args([signal, &p.0.id().to_string()])
                .status();
            let _ = p.0.wait();
        }
    }
}

impl Region {
    /// Tiers holding `services/payments.yaml` = `service_yaml`, one aggregator per zone.
    pub(crate) fn start(service_yaml: &str, zones: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("services")).unwrap();
        std::fs::write(dir.path().join("services/payments.yaml"), service_yaml).unwrap();
        let (cp, cm) = (free_port(), free_port());
        let ctl_addr = format!("127.0.0.1:{cp}");
        let config = dir.path().display().to_string();
        let ctl = spawn(&[
            "controller",
            "--listen",
            &ctl_addr,
            "--config",
            &config,
            "--interval-ms",
            "1000",
            "--metrics-listen",
            &format!("127.0.0.1:{cm}"),
        ]);
        wait_port(cp);
        wait_port(cm);
        let aggs = zones
            .iter()
            .map(|z| {
                let port = free_port();
                Aggregator {
                    proc_: Some(Aggregator::spawn(z, port, &ctl_addr)),
                    zone: z.to_string(),
                    port,
                    ctl_addr: ctl_addr.clone(),
                }
            })
            .collect();
        Self {
            dir,
            _ctl: ctl,
            ctl_metrics: cm,
            aggs,
        }
    }

    /// A wall-clock instant `secs` from now, for loadgens that start together.
    pub(crate) fn start_in(secs: u64) -> u64 {
        (SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_secs(secs))
            .as_millis() as u64
    }

    /// `grl loadgen` with `clients` in zone `zone` (an index into the aggregators) offering
    /// the profile rows `rows` (`second,caller,procedure,rps[,shape]`) for `duration` s from
    /// `start_ms`; its lines are read on a thread: (second, bucket) → counts.
    pub(crate) fn loadgen(
        &self,
        zone: usize,
        clients: usize,
        rows: &str,
        duration: u64,
        start_ms: u64,
    ) -> std::thread::JoinHandle<BTreeMap<(u64, String), Counts>> {
        let agg = &self.aggs[zone];
        let profile = self
            .dir
            .path()
            .join(format!("profile-{}-{}.csv", agg.zone, free_port()));
        std::fs::write(
            &profile,
            format!("second,caller,procedure,rps,shape\n{rows}"),
        )
        .unwrap();
        let mut child: Child = Command::new(BIN)
            .args(["loadgen", "--aggregator"])
            .arg(format!("127.0.0.1:{}", agg.port))
            .args(["--zone", &agg.zone, "--region", "eu"])
            .args(["--clients", &clients.to_string()])
            .args(["--duration", &duration.to_string()])
            .args(["--interval-ms", "1000", "--start-unix-ms"])
            .arg(start_ms.to_string())
            .arg("--profile")
            .arg(&profile)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut guard = Proc(child);
            let mut seconds = BTreeMap::new();
            for line in BufReader::new(out).lines() {
                let l: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
                let f = |k: &str| l[k].as_f64().unwrap();
                // When each period ended on the wall clock, and how late the loadgen was.
                seconds.insert(
                    (l["t"].as_u64().unwrap(), WALL.to_string()),
                    [f("unix_ms"), f("late_ms"), 0.0, 0.0],
                );
                seconds.insert(
                    (
                        l["t"].as_u64().unwrap(),
                        l["bucket"].as_str().unwrap().to_string(),
                    ),
                    [
                        f("offered"),
                        f("allowed"),
                        f("dropped"),
                        f("shadow_dropped"),
                    ],
                );
            }
            assert!(guard.0.wait().unwrap().success(), "loadgen failed");
            seconds
        })
    }

    /// The controller's `grl_tier_offered_rps` of bucket `bucket` (global scope).
    pub(crate) fn controller_offered(&self, bucket: &str) -> f64 {
        let key = format!(
            "grl_tier_offered_rps{{service=\"payments\",bucket=\"{bucket}\",scope=\"global\"}}"
        );
        scrape(self.ctl_metrics).get(&key).copied().unwrap_or(0.0)
    }
}

/// `/metrics` of 127.0.0.1:`port` as `name{labels}` → value.
pub(crate) fn scrape(port: u16) -> BTreeMap<String, f64> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The counts of `bucket` summed over the seconds `from..=to` of every loadgen's lines.
pub(crate) fn total(
    runs: &[BTreeMap<(u64, String), Counts>],
    bucket: &str,
    from: u64,
    to: u64,
) -> Counts {
    let mut sum = [0.0; 4];
    for run in runs {
        for t in from..=to {
            if let Some(c) = run.get(&(t, bucket.to_string())) {
                for (s, x) in sum.iter_mut().zip(c) {
                    *s += x;
                }
            }
        }
    }
    sum
}

/// A per-second table of `bucket` over every loadgen, for failure messages.
pub(crate) fn table(runs: &[BTreeMap<(u64, String), Counts>], bucket: &str, to: u64) -> String {
    (1..=to)
        .map(|t| {
            let c = total(runs, bucket, t, t);
            format!(
                "t={t}: offered {:.0} admitted {:.0} dropped {:.0} shadow {:.0}\n",
                c[0], c[1], c[2], c[3]
            )
        })
        .collect()
}

/// A service with one global bucket `name` (caller `caller`, procedure `procedure` if
/// not empty) in `mode` at `limit`.
pub(crate) fn bucket(name: &str, caller: &str, procedure: &str, mode: &str, limit: f64) -> String {
    let mut m = Vec::new();
    if !caller.is_empty() {
        m.push(format!("caller: {caller}"));
    }
    if !procedure.is_empty() {
        m.push(format!("procedure: \"{procedure}\""));
    }
    format!(
        "  - name: {name}\n    match: {{ {} }}\n    scope: global\n    mode: {mode}\n    policy: {{ kind: fixed, rps: {limit} }}\n",
        m.join(", ")
    )
}

/// `service: payments` with `buckets`.
pub(crate) fn service(buckets: &[String]) -> String {
    format!("service: payments\nbuckets:\n{}", buckets.concat())
}

const WARM: u64 = 5;
const MEASURE: u64 = 20;

/// Runs `clients` in one zone at `per_client` rps each (shape `shape`) against a global
/// bucket of `limit`; asserts the admitted rate over 20 s after a 5 s warm-up is the
/// limit within `tolerance`.
fn low_rate(clients: usize, per_client: f64, limit: f64, tolerance: f64, shape: &str) {
    let region = Region::start(
        &service(&[bucket("b", "gateway", "", "deny", limit)]),
        &["a"],
    );
    let total_rps = clients as f64 * per_client;
    let run = region
        .loadgen(
            0,
            clients,
            &format!("0,gateway,Pay/Card,{total_rps},{shape}\n"),
            WARM + MEASURE,
            Region::start_in(2),
        )
        .join()
        .unwrap();
    let runs = [run];
    let c = total(&runs, "b", WARM + 1, WARM + MEASURE);
    let admitted = c[1] / MEASURE as f64;
    let report = table(&runs, "b", WARM + MEASURE);
    eprintln!("{clients} x {per_client} rps against {limit}: admitted {admitted:.2}/s\n{report}");
    assert!(
        (admitted - limit).abs() <= tolerance * limit,
        "{clients} clients x {per_client} rps against {limit}: admitted {admitted:.2}/s, not within ±{:.0} %\n{report}",
        tolerance * 100.0
    );
}

#[test]
fn ten_clients_at_2_rps_are_held_to_5_rps() {
    low_rate(10, 2.0, 5.0, 0.2, "even");
}

#[test]
fn forty_clients_at_half_a_request_a_second_are_held_to_5_rps() {
    low_rate(40, 0.5, 5.0, 0.2, "even");
}

#[test]
fn a_hundred_clients_at_2_rps_are_held_to_100_rps() {
    low_rate(100, 2.0, 100.0, 0.1, "spread");
}

/// 20 clients at 5 rps against 25: the issue saw seconds repeat 20, 20, 27, 33, 20, 20,
/// 24, 36 (worst +44 %); every second from the 5th is held to ±25 % and the mean to ±5 %.
#[test]
fn a_thousand_clients_at_1_rps_are_held_to_200_rps() {
    low_rate(1000, 1.0, 200.0, 0.1, "even");
}

#[test]
fn twenty_clients_at_5_rps_admit_a_steady_25_every_second() {
    let region = Region::start(
        &service(&[bucket("b", "gateway", "", "deny", 25.0)]),
        &["a"],
    );
    let runs = [region
        .loadgen(
            0,
            20,
            "0,gateway,Pay/Card,100,even\n",
            WARM + MEASURE,
            Region::start_in(2),
        )
        .join()
        .unwrap()];
    let report = table(&runs, "b", WARM + MEASURE);
    eprintln!("{report}");
    for t in WARM..=WARM + MEASURE {
        let a = total(&runs, "b", t, t)[1];
        assert!(
            (a - 25.0).abs() <= 0.25 * 25.0,
            "second {t} admitted {a}\n{report}"
        );
    }
    let mean = total(&runs, "b", WARM, WARM + MEASURE)[1] / (MEASURE + 1) as f64;
    assert!((mean - 25.0).abs() <= 0.05 * 25.0, "mean {mean}\n{report}");
}

/// A prefix bucket of 200 rps (of caller `caller`, or every caller when empty) over
/// `procedures` procedures, each offered `per_pair` rps by each of `clients` clients:
/// admitted within ±10 % of the limit.
fn many_procedures(caller: &str, clients: usize, procedures: usize, per_pair: f64) {
    let region = Region::start(
        &service(&[bucket("orders", caller, "Orders/*", "deny", 200.0)]),
        &["a"],
    );
    let rows: String = (0..procedures)
        .map(|p| {
            format!(
                "0,gateway,Orders/Get{p},{},even\n",
                per_pair * clients as f64
            )
        })
        .collect();
    let runs = [region
        .loadgen(0, clients, &rows, WARM + MEASURE, Region::start_in(2))
        .join()
        .unwrap()];
    let c = total(&runs, "orders", WARM + 1, WARM + MEASURE);
    let admitted = c[1] / MEASURE as f64;
    let report = table(&runs, "orders", WARM + MEASURE);
    eprintln!("{report}");
    assert!(
        (admitted - 200.0).abs() <= 0.1 * 200.0,
        "{clients} clients x {procedures} procedures x {per_pair} rps: admitted {admitted:.1}/s\n{report}"
    );
}

#[test]
fn fifty_procedures_under_one_prefix_bucket_are_held_to_its_limit() {
    many_procedures("", 5, 50, 2.0);
}

#[test]
fn fifty_procedures_under_one_caller_and_prefix_bucket_are_held_to_its_limit() {
    many_procedures("gateway", 5, 50, 2.0);
}

#[test]
fn a_hundred_thin_procedures_under_one_prefix_bucket_are_held_to_its_limit() {
    many_procedures("", 10, 100, 1.0);
}

/// Shadow counts what deny drops: two buckets with the same limit and the same traffic,
/// one in each mode, at `per_client` rps from each of `clients` clients.
fn shadow_beside_deny(clients: usize, per_client: f64, limit: f64) {
    let region = Region::start(
        &service(&[
            bucket("d", "deny-caller", "", "deny", limit),
            bucket("s", "shadow-caller", "", "shadow", limit),
        ]),
        &["a"],
    );
    let rps = clients as f64 * per_client;
    let rows =
        format!("0,deny-caller,Pay/Card,{rps},spread\n0,shadow-caller,Pay/Card,{rps},spread\n");
    let runs = [region
        .loadgen(0, clients, &rows, WARM + MEASURE, Region::start_in(2))
        .join()
        .unwrap()];
    let d = total(&runs, "d", WARM + 1, WARM + MEASURE);
    let s = total(&runs, "s", WARM + 1, WARM + MEASURE);
    let report = format!(
        "deny:\n{}shadow:\n{}",
        table(&runs, "d", WARM + MEASURE),
        table(&runs, "s", WARM + MEASURE)
    );
    eprintln!("{report}");
    assert_eq!(s[2], 0.0, "a shadow bucket dropped\n{report}");
    assert!(d[2] > 0.0, "the deny bucket dropped nothing\n{report}");
    assert!(
        (s[3] - d[2]).abs() <= 0.1 * d[2],
        "{per_client} rps per client: deny dropped {}, shadow counted {} virtual drops\n{report}",
        d[2],
        s[3]
    );
}

#[test]
fn shadow_counts_what_deny_drops_at_2_rps_per_client() {
    shadow_beside_deny(20, 2.0, 10.0);
}

#[test]
fn shadow_counts_what_deny_drops_at_5_and_100_rps_per_client() {
    shadow_beside_deny(10, 5.0, 20.0);
    shadow_beside_deny(5, 100.0, 200.0);
}

/// Bursts against a 2,000 rps global bucket from `loadgens` loadgens of one client each
/// (each standing for one sidecar), each sending `per_burst` requests every `period_ms`:
/// from the 3rd second the controller's offered rate is the true average ±10 %, and the
/// admitted total over 10 s is within +5 % of the limit (and not far under it).
fn bursts(loadgens: usize, per_burst: f64, period_ms: u64) {
    let region = Region::start(
        &service(&[bucket("b", "gateway", "", "deny", 2000.0)]),
        &["a"],
    );
    let rps = per_burst * 1000.0 / period_ms as f64;
    let start = Region::start_in(2);
    let duration = 14;
    let runs: Vec<_> = (0..loadgens)
        .map(|_| {
            region.loadgen(
                0,
                1,
                &format!("0,gateway,Pay/Card,{rps},burst:{period_ms}\n"),
                duration,
                start,
            )
        })
        .collect();
    let truth = rps * loadgens as f64;
    let started = Instant::now() + Duration::from_millis(start - Region::start_in(0));
    // From the 3rd second on, whatever the period (bursts two seconds apart included: the
    // second burst tells how often they come, at once).
    let settle = Duration::from_secs(3);
    std::thread::sleep(started.saturating_duration_since(Instant::now()) + settle);
    let mut seen = Vec::new();
    while seen.len() < 40 && started.elapsed() < Duration::from_secs(duration - 1) {
        seen.push(region.controller_offered("b"));
        std::thread::sleep(Duration::from_millis(250));
    }
    let runs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let report = table(&runs, "b", duration);
    eprintln!("{loadgens} x {per_burst} every {period_ms} ms: controller saw {seen:.0?}\n{report}");
    for o in &seen {
        assert!(
            (o - truth).abs() <= 0.1 * truth,
            "the controller's offered rate was {o:.0} against a true {truth:.0}: {seen:.0?}\n{report}"
        );
    }
    let admitted = total(&runs, "b", 4, 13)[1];
    assert!(
        (0.9 * 2000.0 * 10.0..=1.05 * 2000.0 * 10.0).contains(&admitted),
        "admitted {admitted:.0} over 10 s against 20,000\n{report}"
    );
}

/// A bursty and a steady instance of the same caller, each offering 1,500 rps on average
/// against 1,000: the allowances follow the average offered loads, so each admits half the
/// limit over 10 s (±10 %), the bursty one no less for sending all at once.
#[test]
fn a_bursty_and_a_steady_instance_share_by_their_average_load() {
    let region = Region::start(
        &service(&[bucket("b", "gateway", "", "deny", 1000.0)]),
        &["a"],
    );
    let start = Region::start_in(2);
    let runs: Vec<_> = ["burst:1000", "even"]
        .iter()
        .map(|shape| {
            region.loadgen(
                0,
                1,
                &format!("0,gateway,Pay/Card,1500,{shape}\n"),
                15,
                start,
            )
        })
        .collect();
    let runs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    for (run, shape) in runs.iter().zip(["bursty", "steady"]) {
        let one = std::slice::from_ref(run);
        let admitted = total(one, "b", 5, 14)[1];
        assert!(
            (admitted - 5000.0).abs() <= 500.0,
            "the {shape} instance admitted {admitted:.0} over 10 s where 5,000 were its share\n{}",
            table(one, "b", 15)
        );
    }
}

#[test]
fn a_burst_of_4000_once_a_second_is_seen_and_held() {
    bursts(1, 4000.0, 1000);
}

#[test]
fn three_bursting_clients_are_seen_and_held() {
    bursts(3, 4000.0, 1000);
}

#[test]
fn a_burst_every_2_s_is_seen_and_held() {
    bursts(1, 8000.0, 2000);
}

#[test]
fn bursts_every_100_ms_are_seen_and_held() {
    bursts(1, 400.0, 100);
}

/// 10 clients offering 1,500 rps against 500 while their aggregator is stopped with
/// `signal` and started again after `down`: no second admits more than 1.2x the limit,
/// and from 2 s after the restart every second is the limit again (±10 %).
fn aggregator_restart(signal: &str, down: Duration) {
    let mut region = Region::start(
        &service(&[bucket("b", "gateway", "", "deny", 500.0)]),
        &["a"],
    );
    let start = Region::start_in(2);
    let duration = 24;
    let run = region.loadgen(0, 10, "0,gateway,Pay/Card,1500,spread\n", duration, start);
    let started = Instant::now() + Duration::from_millis(start - Region::start_in(0));
    std::thread::sleep(started.saturating_duration_since(Instant::now()) + Duration::from_secs(8));
    region.aggs[0].stop(signal);
    let stopped_at = started.elapsed().as_secs_f64();
    std::thread::sleep(down);
    region.aggs[0].restart();
    let back_at = started.elapsed().as_secs_f64();
    let runs = [run.join().unwrap()];
    let report = table(&runs, "b", duration);
    eprintln!("stopped at {stopped_at:.1} s, back at {back_at:.1} s\n{report}");
    for t in 5..=duration {
        let a = total(&runs, "b", t, t)[1];
        assert!(
            a <= 1.2 * 500.0,
            "second {t} admitted {a:.0} > 1.2x the limit\n{report}"
        );
        if t as f64 >= back_at + 3.0 {
            assert!(
                (a - 500.0).abs() <= 0.1 * 500.0,
                "second {t}, 2 s after the restart, admitted {a:.0}\n{report}"
            );
        }
    }
}

#[test]
fn an_aggregator_killed_for_3_s_lets_no_surge_through_when_it_returns() {
    aggregator_restart("-KILL", Duration::from_secs(3));
}

#[test]
fn an_aggregator_restarted_at_once_lets_no_surge_through() {
    aggregator_restart("-TERM", Duration::from_millis(0));
}

/// Envoy's traffic arrives in batches: one `ShouldRateLimit` a period with a large
/// `hits_addend` (the issue saw one call of 5,000 hits a second never enforced and never
/// seen by the tiers). Through a real sidecar's rate limit service, by Python `grpcio`
/// with Envoy's stubs, against a 2,000 rps global bucket, for `seconds`: the controller
/// sees the true offered rate ±10 % from the 6th second on, and over the calls from the
/// 8th second on the share answered `OVER_LIMIT` is what the limit requires ±0.1, and
/// refusing every call does not pass: the calls admitted carry what the budget refilled
/// over those seconds, within half a batch (a batch is admitted once the budget holds
/// half of it, and charged whole). A batch larger than the limit's 10 s needs a run of
/// at least the half batch's refill, so that one admission is due in it.
fn rls_batches(hits: u64, every: f64, seconds: f64) {
    let region = Region::start(
        &service(&[bucket("b", "envoy", "", "deny", 2000.0)]),
        &["a"],
    );
    let (p, r, m) = (free_port(), free_port(), free_port());
    let rls = format!("127.0.0.1:{r}");
    let _sidecar = spawn(&[
        "sidecar",
        "--listen",
        &format!("127.0.0.1:{p}"),
        "--upstream",
        "http://127.0.0.1:9",
        "--service",
        "payments",
        "--aggregator",
        &format!("127.0.0.1:{}", region.aggs[0].port),
        "--zone",
        "a",
        "--region",
        "eu",
        "--rls-listen",
        &rls,
        "--metrics-listen",
        &format!("127.0.0.1:{m}"),
        "--interval-ms",
        "1000",
    ]);
    for port in [p, r, m] {
        wait_port(port);
    }
    let caller = std::thread::spawn(move || {
        super::sidecar::rls_client(&[
            "--target",
            &rls,
            "--descriptor",
            r#"{"entries": [["source_cluster", "envoy"], ["path", "/pay.Pay/Card"]]}"#,
            "--hits",
            &hits.to_string(),
            "--every",
            &every.to_string(),
            "--min-seconds",
            &seconds.to_string(),
            "--deadline",
            &(seconds + 10.0).to_string(),
        ])
    });
    let started = Instant::now();
    let truth = hits as f64 / every;
    // From the 6th second on (the interpreter starts and the first calls may reach the
    // sidecar before its config does).
    std::thread::sleep(Duration::from_secs(6));
    let mut seen = Vec::new();
    while started.elapsed() < Duration::from_secs_f64(seconds - 1.0) {
        seen.push(region.controller_offered("b"));
        std::thread::sleep(Duration::from_millis(250));
    }
    let (s, _) = caller.join().unwrap();
    let timeline = s["timeline"].as_array().unwrap().clone();
    let from = 8.0;
    let window: Vec<(f64, &str)> = timeline
        .iter()
        .map(|e| (e[0].as_f64().unwrap(), e[1].as_str().unwrap()))
        .filter(|(t, _)| *t >= from)
        .collect();
    let span = window.last().map_or(0.0, |(t, _)| t - from) + every;
    let over = window.iter().filter(|(_, c)| *c == "OVER_LIMIT").count() as f64;
    let ok = window.iter().filter(|(_, c)| *c == "OK").count() as f64;
    let ok_at: Vec<f64> = window
        .iter()
        .filter(|(_, c)| *c == "OK")
        .map(|(t, _)| *t)
        .collect();
    let share = over / window.len() as f64;
    let want = 1.0 - 2000.0 / truth;
    eprintln!(
        "{hits} hits every {every} s: controller saw {seen:.0?}; over {span:.1} s from the \
         {from}th second {over} of {} calls OVER_LIMIT, {ok} OK (at {ok_at:?} s; {want:.2} due refused)",
        window.len()
    );
    for o in &seen {
        assert!(
            (o - truth).abs() <= 0.1 * truth,
            "the controller's offered rate was {o:.0} against a true {truth:.0}: {seen:.0?}"
        );
    }
    assert_eq!(
        over + ok,
        window.len() as f64,
        "every call answered OK or OVER_LIMIT: {timeline:?}"
    );
    // The issue's target: the share of calls the limit requires refused, ±0.1.
    assert!(
        (share - want).abs() <= 0.1 + 1e-9,
        "{over} of {} calls OVER_LIMIT ({share:.2}) where {want:.2} were due: {timeline:?}",
        window.len()
    );
    // Refusing everything is within ±0.1 of a due share over 0.9, so the hits admitted
    // are held to what the budget refilled over the window: within one batch, as the
    // budget holds from minus half a batch (just charged one) to half a batch (about to
    // admit one) at either end. And one admission at least is due: over a refill of more
    // than a batch by that bound; over a refill of half a batch if no batch can have been
    // admitted before the window (that takes half a batch of refill), as the budget then
    // starts it owing nothing.
    let refill = 2000.0 * span;
    let batch = hits as f64;
    let admitted = ok * batch;
    let fresh = batch / 2.0 > 2000.0 * from;
    assert!(
        refill > batch || (fresh && refill >= batch / 2.0),
        "the window ({span:.1} s) is too short for a batch of {hits} to be due in it"
    );
    assert!(
        ok >= 1.0 && (admitted - refill).abs() <= batch + 1e-9,
        "{ok} calls of {hits} hits admitted over {span:.1} s ({admitted:.0} hits) where \
         the limit refilled {refill:.0}: {timeline:?}"
    );
}

#[test]
fn one_call_of_5000_hits_a_second_is_seen_and_held() {
    rls_batches(5000, 1.0, 18.0);
}

#[test]
fn one_call_of_200000_hits_a_second_is_seen_and_held() {
    rls_batches(200_000, 1.0, 70.0);
}

#[test]
fn one_call_of_2500_hits_every_half_second_is_seen_and_held() {
    rls_batches(2500, 0.5, 18.0);
}
