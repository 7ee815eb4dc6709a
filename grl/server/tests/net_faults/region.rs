//! The setup on real hosts: a controller, three zones' aggregators and three
//! loadgens, each `grl` process in its own network namespace; the zones on one subnet, the
//! controller on another behind a router (see `test_support::netns`). A global deny bucket
//! of 600 rps, 1,200 rps offered over the three zones, every tier at a 1 s interval.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use test_support::netns::{Host, Lan};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_grl");

/// The global bucket's limit (the retry storm's: [`STORM_LIMIT`]).
pub(crate) const LIMIT: f64 = 600.0;
/// The retry storm's limit.
pub(crate) const STORM_LIMIT: f64 = 300.0;
/// What each zone offers: 2x the limit over three zones.
pub(crate) const PER_ZONE: f64 = 400.0;
pub(crate) const ZONES: [&str; 3] = ["a", "b", "c"];
pub(crate) const TIER_PORT: u16 = 7300;
const METRICS_PORT: u16 = 9300;

/// A process in a namespace, killed (SIGKILL, also when stopped) when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Sends `signal` (`-STOP`, `-CONT`) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        let ok = std::process::Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal} failed");
    }
}

/// The hosts and the tiers running on them. Field order is drop order: processes first,
/// then their namespaces.
pub(crate) struct Region {
    pub(crate) ctl_proc: Proc,
    _agg_procs: Vec<Proc>,
    pub(crate) ctl: Host,
    pub(crate) aggs: Vec<Host>,
    pub(crate) lgs: Vec<Host>,
    pub(crate) lan: Lan,
    pub(crate) dir: tempfile::TempDir,
}

/// Why the suite cannot run here, printed by every test that then skips.
pub(crate) fn skip() -> bool {
    match Lan::unavailable() {
        Some(why) => {
            eprintln!("SKIPPED: network-fault tests need network namespaces: {why}");
            true
        }
        None => false,
    }
}

impl Region {
    /// The hosts and the tiers, each tier serving (the aggregators with `agg_flags`, the
    /// controller with `ctl_flags`), the bucket's limit `limit`.
    pub(crate) fn start(limit: f64, ctl_flags: &[&str], agg_flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("services")).unwrap();
        std::fs::write(
            dir.path().join("services/payments.yaml"),
            format!(
                "service: payments\nbuckets:\n  - name: gateway-pay\n    match: {{ caller: gateway }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: {limit} }}\n"
            ),
        )
        .unwrap();
        let mut lan = Lan::new().unwrap();
        let ctl = lan.host("ctl", 2).unwrap();
        let aggs: Vec<Host> = ZONES
            .iter()
            .map(|z| lan.host(&format!("agg-{z}"), 1).unwrap())
            .collect();
        let lgs: Vec<Host> = ZONES
            .iter()
            .map(|z| lan.host(&format!("lg-{z}"), 1).unwrap())
            .collect();
        let config = dir.path().display().to_string();
        let mut args = vec![
            "controller".to_string(),
            "--listen".into(),
            ctl.at(TIER_PORT),
            "--config".into(),
            config,
            "--interval-ms".into(),
            "1000".into(),
            "--metrics-listen".into(),
            ctl.at(METRICS_PORT),
            // Admin calls open on a non-loopback address: these hosts are the test's own.
            "--insecure-admin".into(),
        ];
        args.extend(ctl_flags.iter().map(ToString::to_string));
        let ctl_proc = spawn(&ctl, &args, dir.path().join("ctl.log"));
        wait_port(&ctl, TIER_PORT);
        wait_port(&ctl, METRICS_PORT);
        let agg_procs = ZONES
            .iter()
            .zip(&aggs)
            .map(|(z, h)| {
                let mut args = vec![
                    "aggregator".to_string(),
                    "--listen".into(),
                    h.at(TIER_PORT),
                    "--zone".into(),
                    z.to_string(),
                    "--region".into(),
                    "eu".into(),
                    "--controller".into(),
                    ctl.at(TIER_PORT),
                    "--interval-ms".into(),
                    "1000".into(),
                ];
                args.extend(agg_flags.iter().map(ToString::to_string));
                let p = spawn(h, &args, dir.path().join(format!("agg-{z}.log")));
                wait_port(h, TIER_PORT);
                p
            })
            .collect();
        Self {
            ctl_proc,
            _agg_procs: agg_procs,
            ctl,
            aggs,
            lgs,
            lan,
            dir,
        }
    }

    /// The log of the aggregator of zone `i`.
    pub(crate) fn agg_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("agg-{}.log", ZONES[i])))
            .unwrap_or_default()
    }

    /// How often the aggregator of zone `i` lost its controller so far (its log's "parent
    /// unreachable" and "parent closed the stream").
    pub(crate) fn uplink_losses(&self, i: usize) -> usize {
        self.agg_log(i)
            .lines()
            .filter(|l| l.contains("parent unreachable") || l.contains("parent closed the stream"))
            .count()
    }

    /// Seconds from `after_ms` (Unix milliseconds) to each "connected" of zone `i`'s
    /// loadgen clients after it, from their log's timestamps (one a client while none
    /// flaps).
    pub(crate) fn lg_connected_after(&self, i: usize, after_ms: u64) -> Vec<f64> {
        let log = std::fs::read_to_string(self.dir.path().join(format!("lg-{}.log", ZONES[i])))
            .unwrap_or_default();
        log.lines()
            .map(strip_ansi)
            .filter(|l| l.contains(" connected"))
            .filter_map(|l| {
                let at = chrono::DateTime::parse_from_rfc3339(l.split_whitespace().next()?).ok()?;
                let ms = u64::try_from(at.timestamp_millis()).ok()?;
                (ms >= after_ms).then(|| (ms - after_ms) as f64 / 1000.0)
            })
            .collect()
    }

    /// The controller's `/metrics` as `name{labels}` → value.
    pub(crate) fn ctl_metrics(&self) -> BTreeMap<String, f64> {
        let addr = SocketAddr::from((self.ctl.addr, METRICS_PORT));
        let body = self
            .ctl
            .ns
            .enter(move || {
                use std::io::{Read, Write};
                let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
                    .ok()?;
                let mut body = String::new();
                let _ = s.read_to_string(&mut body);
                Some(body)
            })
            .unwrap()
            .unwrap_or_default();
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    /// Reports refused by the controller so far, over every reason.
    pub(crate) fn ctl_refusals(&self) -> f64 {
        self.ctl_metrics()
            .iter()
            .filter(|(k, _)| k.starts_with("grl_tier_reports_refused_total"))
            .map(|(_, v)| v)
            .sum()
    }

    /// Starts a loadgen of 4 clients in every zone offering [`PER_ZONE`] for `duration`
    /// seconds from `start_ms` (Unix milliseconds); join it for its admitted rate by second.
    pub(crate) fn loadgens(&self, duration: u64, start_ms: u64) -> Loadgens {
        let profile = self.dir.path().join("profile.csv");
        std::fs::write(
            &profile,
            format!("second,caller,procedure,rps\n0,gateway,Pay/Charge,{PER_ZONE}\n"),
        )
        .unwrap();
        let threads = ZONES
            .iter()
            .enumerate()
            .map(|(i, z)| {
                let args: Vec<String> = [
                    "loadgen",
                    "--aggregator",
                    &format!("http://{}", self.aggs[i].at(TIER_PORT)),
                    "--zone",
                    z,
                    "--region",
                    "eu",
                    "--clients",
                    "4",
                    "--duration",
                    &duration.to_string(),
                    "--interval-ms",
                    "1000",
                    "--start-unix-ms",
                    &start_ms.to_string(),
                    "--profile",
                    &profile.display().to_string(),
                ]
                .iter()
                .map(ToString::to_string)
                .collect();
                let mut child = self.lgs[i]
                    .ns
                    .command(BIN)
                    .args(&args)
                    .stdout(Stdio::piped())
                    .stderr(
                        std::fs::File::create(self.dir.path().join(format!("lg-{z}.log"))).unwrap(),
                    )
                    .spawn()
                    .unwrap();
                let out = child.stdout.take().unwrap();
                std::thread::spawn(move || {
                    let guard = Proc(child);
                    let mut seconds = BTreeMap::new();
                    for line in BufReader::new(out).lines() {
                        let Ok(line) = line else { break };
                        let Ok(l) = serde_json::from_str::<serde_json::Value>(&line) else {
                            continue;
                        };
                        if l["bucket"] == "gateway-pay" {
                            seconds.insert(
                                l["t"].as_u64().unwrap(),
                                [
                                    l["offered"].as_f64().unwrap(),
                                    l["allowed"].as_f64().unwrap(),
                                ],
                            );
                        }
                    }
                    drop(guard);
                    seconds
                })
            })
            .collect();
        Loadgens(threads)
    }
}

/// The loadgens of every zone: per zone, second → [offered, allowed].
pub(crate) struct Loadgens(Vec<JoinHandle<BTreeMap<u64, [f64; 2]>>>);

impl Loadgens {
    /// Waits for them to end; per zone, second → [offered, allowed].
    pub(crate) fn join(self) -> Vec<BTreeMap<u64, [f64; 2]>> {
        self.0.into_iter().map(|t| t.join().unwrap()).collect()
    }
}

/// Admitted over every zone by second.
pub(crate) fn admitted(zones: &[BTreeMap<u64, [f64; 2]>]) -> BTreeMap<u64, f64> {
    let mut out = BTreeMap::new();
    for z in zones {
        for (t, [_, allowed]) in z {
            *out.entry(*t).or_insert(0.0) += allowed;
        }
    }
    out
}

/// The mean of `by_second` over seconds `from..=to`.
pub(crate) fn mean(by_second: &BTreeMap<u64, f64>, from: u64, to: u64) -> f64 {
    let v: Vec<f64> = by_second.range(from..=to).map(|(_, x)| *x).collect();
    assert!(!v.is_empty(), "no seconds in {from}..={to}");
    v.iter().sum::<f64>() / v.len() as f64
}

/// The seconds of `from..=to` outside `LIMIT ± share`.
pub(crate) fn outside(
    by_second: &BTreeMap<u64, f64>,
    from: u64,
    to: u64,
    share: f64,
) -> Vec<(u64, f64)> {
    by_second
        .range(from..=to)
        .filter(|(_, x)| (**x - LIMIT).abs() > LIMIT * share)
        .map(|(t, x)| (*t, *x))
        .collect()
}

/// The figures of `from..=to` for a test's output: each second as a multiple of the limit.
pub(crate) fn show(by_second: &BTreeMap<u64, f64>, from: u64, to: u64) -> String {
    by_second
        .range(from..=to)
        .map(|(t, x)| format!("{t}:{:.2}", x / LIMIT))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each zone's admitted rate by second over `from..=to`, for a test's output.
pub(crate) fn show_zones(zones: &[BTreeMap<u64, [f64; 2]>], from: u64, to: u64) -> String {
    zones
        .iter()
        .zip(ZONES)
        .map(|(z, name)| {
            let s: Vec<String> = z
                .range(from..=to)
                .map(|(t, [_, a])| format!("{t}:{a:.0}"))
                .collect();
            format!("{name} [{}]", s.join(" "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `line` without its terminal colour codes.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Unix milliseconds `secs` from now.
pub(crate) fn unix_ms_in(secs: u64) -> u64 {
    (SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_secs(secs)).as_millis()
        as u64
}

/// Sleeps until second `secs` of a run that started at `start_ms` (Unix milliseconds): the
/// moment loadgen second `secs + 1` begins.
pub(crate) fn at_second(start_ms: u64, secs: u64) {
    let due = start_ms + secs * 1000;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    if due > now {
        std::thread::sleep(Duration::from_millis(due - now));
    }
}

/// `grl ARGS…` on `host`, its stderr (the log) in `log`.
pub(crate) fn spawn(host: &Host, args: &[String], log: PathBuf) -> Proc {
    Proc(
        host.ns
            .command(BIN)
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Waits (up to 10 s) until something listens on `port` of `host`.
pub(crate) fn wait_port(host: &Host, port: u16) {
    let addr = SocketAddr::from((host.addr, port));
    let start = Instant::now();
    let up = host
        .ns
        .enter(move || {
            while start.elapsed() < Duration::from_secs(10) {
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        })
        .unwrap();
    assert!(up, "{addr} never opened");
}
