//! Running cells on real processes: one `grl controller` and one `grl aggregator` (1 s
//! interval, a config dir with a bucket per cell), and for each batch of cells of the same
//! instances and shape one `grl loadgen` offering all of them at once (and, for join
//! cells, a second loadgen of one client started at the step: the new instance). The
//! controller's `/metrics` is read every second for its offered estimates.
//!
//! A loadgen offers from one thread, so a batch is split until each part asks no more
//! than [`Capacity`] of it; a cell that alone asks more is refused, as is a cell that
//! cannot be measured at all ([`Cell::refusal`]).
// Shared by the precision bench and the test suite; each uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use test_support::ports::free_port;

use super::cell::{Cell, Shape, Timeline};
use super::judge::{Counts, Observed};

/// The `grl` binary: release under `cargo bench`, debug under `cargo test`.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_grl");

/// Most buckets one service may hold (`grl_config::bounds::MAX_BUCKETS_PER_SERVICE`).
const MAX_CELLS: usize = 1_000;

/// What one loadgen can offer on this machine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capacity {
    /// Requests per second over all its cells.
    pub(crate) rps: f64,
    /// Lanes x clients x 100 ticks a second: the generator visits each client of each lane
    /// every 10 ms tick, whether it sends or not.
    pub(crate) visits: f64,
}

/// Cells one loadgen offers together.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) clients: usize,
    pub(crate) shape: Shape,
    pub(crate) cells: Vec<Cell>,
}

impl Batch {
    /// The most the batch asks of its loadgen at any second, requests per second.
    pub(crate) fn peak_rps(&self, tl: &Timeline) -> f64 {
        [0, tl.warm, tl.step]
            .iter()
            .map(|&t| self.cells.iter().map(|c| c.rps_at(t, tl)).sum::<f64>())
            .fold(0.0, f64::max)
    }

    fn visits(&self) -> f64 {
        self.cells.iter().map(Cell::lanes).sum::<usize>() as f64 * self.clients as f64 * 100.0
    }

    fn fits(&self, tl: &Timeline, cap: &Capacity) -> bool {
        self.peak_rps(tl) <= cap.rps && self.visits() <= cap.visits
    }
}

/// The batches to run and the cells refused, with why.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) batches: Vec<Batch>,
    pub(crate) refused: Vec<(Cell, String)>,
}

/// Groups `cells` into batches of the same instances and shape, each within `cap`.
pub(crate) fn plan(cells: &[Cell], tl: &Timeline, cap: &Capacity) -> Plan {
    let mut out = Plan::default();
    let mut groups: Vec<Batch> = Vec::new();
    for &cell in cells {
        let alone = Batch {
            clients: cell.clients,
            shape: cell.shape,
            cells: vec![cell],
        };
        if let Some(why) = cell.refusal() {
            out.refused.push((cell, why));
        } else if !alone.fits(tl, cap) {
            out.refused.push((
                cell,
                format!(
                    "asks one loadgen for {:.0} rps and {:.0} client visits a second; one offers at most {:.0} and {:.0} here",
                    alone.peak_rps(tl),
                    alone.visits(),
                    cap.rps,
                    cap.visits
                ),
            ));
        } else {
            match groups
                .iter_mut()
                .find(|g| (g.clients, g.shape) == (cell.clients, cell.shape))
            {
                Some(g) => g.cells.push(cell),
                None => groups.push(alone),
            }
        }
    }
    // First fit, largest first: a group that is too much for one loadgen becomes several.
    for g in groups {
        let mut by_size = g.cells.clone();
        by_size.sort_by(|a, b| b.peak_rps(tl).total_cmp(&a.peak_rps(tl)));
        let mut parts: Vec<Batch> = Vec::new();
        for cell in by_size {
            let fit = parts.iter_mut().find(|p| {
                let mut with = (*p).clone();
                with.cells.push(cell);
                with.fits(tl, cap)
            });
            match fit {
                Some(p) => p.cells.push(cell),
                None => parts.push(Batch {
                    clients: g.clients,
                    shape: g.shape,
                    cells: vec![cell],
                }),
            }
        }
        for p in &mut parts {
            p.cells
                .sort_by_key(|c| g.cells.iter().position(|x| x == c).unwrap_or(0));
        }
        out.batches.extend(parts);
    }
    out
}

/// A child process, killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a tier; its log goes where `PRECISION_LOG_DIR` asks (as `<role>-<pid>.log`,
/// with `RUST_LOG=grl=debug` it says every urgent report and round), else nowhere.
fn spawn(args: &[&str]) -> Proc {
    let log = std::env::var_os("PRECISION_LOG_DIR").and_then(|dir| {
        let name = format!("{}-{}.log", args[0], std::process::id());
        std::fs::File::create(std::path::Path::new(&dir).join(name)).ok()
    });
    Proc(
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log.map_or_else(Stdio::null, Stdio::from))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {BIN}: {e}")),
    )
}

fn wait_port(port: u16) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "port {port} never opened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn sleep_until_unix_ms(at: u64) {
    let now = unix_ms();
    if at > now {
        std::thread::sleep(Duration::from_millis(at - now));
    }
}

/// The controller and the aggregator, holding a bucket per cell.
pub(crate) struct Tiers {
    dir: tempfile::TempDir,
    _ctl: Proc,
    _agg: Proc,
    ctl_metrics: u16,
    agg_port: u16,
}

impl Tiers {
    /// Starts the tiers with a bucket for each of `cells`.
    pub(crate) fn start(cells: &[Cell]) -> Result<Tiers, String> {
        if cells.len() > MAX_CELLS {
            return Err(format!(
                "{} cells selected: one service holds at most {MAX_CELLS} buckets; select fewer",
                cells.len()
            ));
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("services")).unwrap();
        let yaml: String = cells.iter().map(Cell::bucket_yaml).collect();
        std::fs::write(
            dir.path().join("services/payments.yaml"),
            format!("service: payments\nbuckets:\n{yaml}"),
        )
        .unwrap();
        let (cp, cm, ap) = (free_port(), free_port(), free_port());
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
        let agg = spawn(&[
            "aggregator",
            "--listen",
            &format!("127.0.0.1:{ap}"),
            "--zone",
            "a",
            "--region",
            "eu",
            "--controller",
            &ctl_addr,
            "--interval-ms",
            "1000",
        ]);
        wait_port(ap);
        Ok(Tiers {
            dir,
            _ctl: ctl,
            _agg: agg,
            ctl_metrics: cm,
            agg_port: ap,
        })
    }

    /// `grl loadgen` of `clients` offering `rows` for `duration` s from `start_ms`,
    /// printing every `report_ms`; its lines are read on a thread.
    fn loadgen(
        &self,
        name: &str,
        clients: usize,
        rows: &str,
        duration: u64,
        start_ms: u64,
        report_ms: u64,
    ) -> std::thread::JoinHandle<Vec<serde_json::Value>> {
        let profile = self.dir.path().join(format!("{name}.csv"));
        let stderr = self.dir.path().join(format!("{name}.err"));
        std::fs::write(
            &profile,
            format!("second,caller,procedure,rps,shape,clients\n{rows}"),
        )
        .unwrap();
        let mut child = Command::new(BIN)
            .args(["loadgen", "--aggregator"])
            .arg(format!("127.0.0.1:{}", self.agg_port))
            .args(["--zone", "a", "--region", "eu"])
            .args(["--clients", &clients.to_string()])
            .args(["--duration", &duration.to_string()])
            .args(["--interval-ms", "1000"])
            .args(["--report-ms", &report_ms.to_string()])
            .arg("--pair-lines")
            .args(["--start-unix-ms", &start_ms.to_string()])
            .arg("--profile")
            .arg(&profile)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let name = name.to_string();
        std::thread::spawn(move || {
            let mut guard = Proc(child);
            let lines: Vec<serde_json::Value> = BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str(&l).ok())
                .collect();
            let status = guard.0.wait().unwrap();
            let mut err = String::new();
            let _ = std::fs::File::open(&stderr).and_then(|mut f| f.read_to_string(&mut err));
            // With `RUST_LOG=grl_client=trace`, the loadgen's log says what every
            // client's window and budget did: kept where the run is asked to keep it.
            if let Some(dir) = std::env::var_os("PRECISION_LOG_DIR") {
                let _ =
                    std::fs::write(std::path::Path::new(&dir).join(format!("{name}.log")), &err);
            }
            assert!(status.success(), "loadgen {name} failed ({status}): {err}");
            lines
        })
    }

    /// `name{labels}` → value of the controller's `/metrics`.
    fn scrape(&self) -> BTreeMap<String, f64> {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.ctl_metrics)) else {
            return BTreeMap::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
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

    /// Runs `batch` on `tl`; what was seen of each of its cells, in its order.
    pub(crate) fn run(&self, batch: &Batch, tl: &Timeline) -> Vec<Observed> {
        let duration = tl.duration();
        // Clients connect meanwhile (a thousand take a few seconds here).
        let start_ms = unix_ms() + 2_000 + 3 * batch.clients as u64;
        let rows: String = batch.cells.iter().map(|c| c.rows(tl)).collect();
        let ids: Vec<String> = batch.cells.iter().map(Cell::id).collect();
        // Named by the batch's first cell: batches of tests running at once keep their logs.
        let first = ids.first().map_or("", String::as_str);
        let main = self.loadgen(
            &format!("batch-{first}"),
            batch.clients,
            &rows,
            duration,
            start_ms,
            1000,
        );
        let joiner_rows: String = batch.cells.iter().filter_map(Cell::joiner_rows).collect();

        // The controller's estimates, sampled in the middle of every loadgen second.
        let mut estimates: BTreeMap<String, BTreeMap<u64, f64>> = BTreeMap::new();
        let mut joiner = None;
        for t in 1..=duration {
            if !joiner_rows.is_empty() && t == tl.step {
                // The new instance starts a second before the step (it connects) and offers
                // from the step on.
                let at = start_ms + tl.step * 1000;
                sleep_until_unix_ms(at - 1000);
                joiner = Some(self.loadgen(
                    &format!("joiner-{first}"),
                    1,
                    &joiner_rows,
                    tl.after,
                    at,
                    100,
                ));
            }
            sleep_until_unix_ms(start_ms + (t - 1) * 1000 + 500);
            let m = self.scrape();
            for id in &ids {
                let key = format!(
                    "grl_tier_offered_rps{{service=\"payments\",bucket=\"{id}\",scope=\"global\"}}"
                );
                if let Some(v) = m.get(&key) {
                    estimates.entry(id.clone()).or_default().insert(t, *v);
                }
            }
        }
        let lines = main.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        let joined = joiner
            .map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .unwrap_or_default();

        let counts = |l: &serde_json::Value| -> Counts {
            let f = |k: &str| l[k].as_f64().unwrap_or(0.0);
            [f("offered"), f("allowed"), f("dropped")]
        };
        // What the loadgen sent and `decide` answered (`pair` lines) is what is judged;
        // the clients' books (`bucket` lines) are kept to compare.
        let pair_id = |l: &serde_json::Value| {
            l["pair"]
                .as_str()
                .and_then(|p| p.split_once(' '))
                .map(|(caller, _)| caller.to_string())
        };
        let mut seen: BTreeMap<String, Observed> = BTreeMap::new();
        for l in &lines {
            let Some(t) = l["t"].as_u64() else {
                continue;
            };
            if let Some(id) = pair_id(l) {
                let c = [
                    l["sent"].as_f64().unwrap_or(0.0),
                    counts(l)[1],
                    counts(l)[2],
                ];
                seen.entry(id).or_default().seconds.insert(t, c);
            } else if let Some(b) = l["bucket"].as_str() {
                seen.entry(b.to_string())
                    .or_default()
                    .books
                    .insert(t, counts(l));
            }
        }
        // Every cell is judged on the loadgen's lateness, the same for all of them.
        let late: BTreeMap<u64, u64> = lines
            .iter()
            .filter_map(|l| Some((l["t"].as_u64()?, l["late_ms"].as_u64().unwrap_or(0))))
            .fold(BTreeMap::new(), |mut m, (t, ms)| {
                let e = m.entry(t).or_insert(0);
                *e = (*e).max(ms);
                m
            });
        for l in &joined {
            if let Some(id) = pair_id(l) {
                let c = [
                    l["sent"].as_f64().unwrap_or(0.0),
                    counts(l)[1],
                    counts(l)[2],
                ];
                seen.entry(id).or_default().joiner.push(c);
            }
        }
        ids.iter()
            .map(|id| {
                let mut o = seen.remove(id).unwrap_or_default();
                o.late_ms.clone_from(&late);
                o.estimates = estimates.remove(id).unwrap_or_default();
                o
            })
            .collect()
    }
}
