//! `grl loadgen`: offers traffic from a CSV profile through N real clients (each with its
//! own connection to the aggregator) and prints one JSON line per bucket every report
//! period (`--report-ms`, 1 s by default; 100 ms shows rises and falls at that resolution).
//! A profile row may give the traffic's shape ([`Shape`]): evenly spaced and in step across
//! clients (the default), evenly spaced with each client's phase spread, Poisson arrivals,
//! or bursts (a period's requests all at its start).
//! A row may name the clients that offer it (a sixth column, `I` or `I-J`), so that one
//! instance of many can change its rate alone.
//! Each line carries `t` (the end of the period in whole seconds, rounded up), `t_ms` (the
//! same in milliseconds since the start), `unix_ms` (the wall clock when the counts
//! were read, to line up several loadgens) and `late_ms` (how far behind its schedule the
//! generator was at the period's end: a loadgen asked for more than it can offer says so).
//! With `--pair-lines` it also prints a line per (caller, procedure) every period with what
//! it sent and what `decide` answered, counted by the loadgen itself rather than read from
//! the clients' books.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use grl_client::{Client, ClientConfig};

/// Flags of `grl loadgen`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The zone aggregator's address.
    #[arg(long)]
    aggregator: String,
    /// The clients' zone.
    #[arg(long)]
    zone: String,
    /// The clients' region.
    #[arg(long, default_value = "")]
    region: String,
    /// Number of clients.
    #[arg(long, default_value_t = 4, value_parser = super::validate::clients)]
    clients: usize,
    /// CSV `second,caller,procedure,rps[,shape[,clients[,class]]]`: total rps over the clients from
    /// that second on; `shape` is `even` (default: evenly spaced, every client in step),
    /// `spread` (evenly spaced, the clients' phases spread over the spacing), `poisson`
    /// (random arrivals), or `burst:MS` (each client sends a period of MS milliseconds'
    /// requests at once at its start, every client at the same instant); `clients` is `I`
    /// or `I-J` (0-based, inclusive: only those clients offer the row; default all). Rows
    /// of one pair with different `clients` run side by side; `class` is the requests'
    /// priority class (decided with `decide_in_class`; rows of one pair with different
    /// classes run side by side).
    #[arg(long)]
    profile: PathBuf,
    /// How long to run, in seconds.
    #[arg(long)]
    duration: u64,
    /// The service the clients protect.
    #[arg(long, default_value = "payments")]
    service: String,
    /// Reporting interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = super::validate::interval_ms)]
    interval_ms: u64,
    /// How often each client recomputes its drop thresholds from its offered rate, in
    /// milliseconds.
    #[arg(long, default_value_t = 50)]
    window_ms: u64,
    /// Print a line per bucket every this many milliseconds (a multiple of 10).
    #[arg(long, default_value_t = 1000)]
    report_ms: u64,
    /// Start offering at this wall-clock time (Unix milliseconds), so that several loadgens
    /// step together; the clients connect meanwhile. Default: at once.
    #[arg(long)]
    start_unix_ms: Option<u64>,
    /// Also print, every period, a line per (caller, procedure): `pair` (`caller procedure`),
    /// `sent`, and the answers `allowed`, `dropped`, `shadow_dropped`, as the loadgen
    /// counted them.
    #[arg(long)]
    pair_lines: bool,
    /// Serve the clients' `/metrics` here (each client's series labelled `client="i"`).
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    tls: super::tls_args::ClientTlsArgs,
}

/// How a row's requests are spread over time.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// Evenly spaced, every client in step.
    Even,
    /// Evenly spaced, client `i` of `n` shifted by `i / n` of the spacing.
    Spread,
    /// Poisson arrivals.
    Poisson,
    /// A period's requests (milliseconds, a multiple of 10) all at its start.
    Burst(u64),
}

impl std::str::FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "even" => Ok(Shape::Even),
            "spread" => Ok(Shape::Spread),
            "poisson" => Ok(Shape::Poisson),
            _ => match s.strip_prefix("burst:").map(str::parse::<u64>) {
                Some(Ok(ms)) if ms >= 10 && ms.is_multiple_of(10) && ms <= 60_000 => {
                    Ok(Shape::Burst(ms))
                }
                _ => Err(format!(
                    "shape `{s}`: want even, spread, poisson or burst:MS (MS a multiple of 10 from 10 to 60000)"
                )),
            },
        }
    }
}

/// The clients that offer a row: `first..=last`, or every client when `None`.
type Subset = Option<(usize, usize)>;

fn parse_subset(s: &str) -> Result<Subset, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let index = |x: &str| {
        x.parse::<usize>()
            .map_err(|_| format!("clients `{s}`: want I or I-J (0-based client indices)"))
    };
    let (first, last) = match s.split_once('-') {
        Some((a, b)) => (index(a)?, index(b)?),
        None => (index(s)?, index(s)?),
    };
    if first > last {
        return Err(format!("clients `{s}`: the first index is after the last"));
    }
    Ok(Some((first, last)))
}

/// One row of the profile.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    second: u64,
    pair: (String, String),
    rps: f64,
    shape: Shape,
    clients: Subset,
    class: String,
}

/// What offers traffic side by side: a pair, offered by a subset of the clients, in a
/// priority class ("": none).
type Lane = ((String, String), Subset, String);

fn parse_profile(text: &str) -> anyhow::Result<Vec<Step>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && line.starts_with("second")) {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if !(4..=7).contains(&f.len()) {
            bail!(
                "profile line {}: want second,caller,procedure,rps[,shape[,clients[,class]]]",
                i + 1
            );
        }
        let shape: Shape = f
            .get(4)
            .copied()
            .unwrap_or("")
            .parse()
            .map_err(|e| anyhow::anyhow!("profile line {}: {e}", i + 1))?;
        let clients = parse_subset(f.get(5).copied().unwrap_or(""))
            .map_err(|e| anyhow::anyhow!("profile line {}: {e}", i + 1))?;
        let rps: f64 = f[3]
            .parse()
            .with_context(|| format!("profile line {}: rps", i + 1))?;
        let rps = super::validate::profile_rps(rps)
            .map_err(|e| anyhow::anyhow!("profile line {}: {e}", i + 1))?;
        out.push(Step {
            second: f[0]
                .parse()
                .with_context(|| format!("profile line {}: second", i + 1))?,
            pair: (f[1].to_string(), f[2].to_string()),
            rps,
            shape,
            clients,
            class: f.get(6).copied().unwrap_or("").to_string(),
        });
    }
    out.sort_by_key(|s| s.second);
    Ok(out)
}

/// The total rps and shape of every lane at second `t`: the last row at or before `t`.
fn rates_at(profile: &[Step], t: u64) -> BTreeMap<Lane, (f64, Shape)> {
    let mut m = BTreeMap::new();
    for s in profile.iter().take_while(|s| s.second <= t) {
        m.insert(
            (s.pair.clone(), s.clients, s.class.clone()),
            (s.rps, s.shape),
        );
    }
    m
}

/// How many requests one client offers in 10 ms tick `tick` of a pair at `per_tick`
/// requests a tick with `shape`; `acc` carries the fraction between ticks.
fn due_in_tick(shape: Shape, per_tick: f64, tick: u64, acc: &mut f64, rng: &mut SplitMix) -> u64 {
    match shape {
        Shape::Even | Shape::Spread => {
            *acc += per_tick;
            let n = acc.floor();
            *acc -= n;
            n as u64
        }
        Shape::Poisson => rng.poisson(per_tick),
        Shape::Burst(ms) => {
            if (tick * 10).is_multiple_of(ms) {
                *acc += per_tick * (ms / 10) as f64;
                let n = acc.floor();
                *acc -= n;
                n as u64
            } else {
                0
            }
        }
    }
}

/// A small deterministic generator for Poisson arrivals (splitmix64).
struct SplitMix(u64);

impl SplitMix {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A Poisson draw of mean `mean` (Knuth's product of uniforms; means here are small).
    fn poisson(&mut self, mean: f64) -> u64 {
        if mean <= 0.0 {
            return 0;
        }
        if mean > 30.0 {
            let u1 = self.next_f64().max(1e-300);
            let u2 = self.next_f64();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            return (mean + z * mean.sqrt()).round().max(0.0) as u64;
        }
        let (limit, mut p, mut k) = ((-mean).exp(), 1.0, 0u64);
        loop {
            p *= self.next_f64();
            if p <= limit {
                return k;
            }
            k += 1;
        }
    }
}

/// Cumulative (offered, allowed, dropped, shadow) per bucket of one client.
fn totals(c: &Client) -> BTreeMap<String, [u64; 4]> {
    c.bucket_totals()
        .into_iter()
        .map(|b| {
            (
                b.bucket,
                [b.offered, b.allowed, b.dropped, b.shadow_dropped],
            )
        })
        .collect()
}

/// Runs the profile for `duration` seconds.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.profile)
        .with_context(|| format!("cannot read {}", a.profile.display()))?;
    let profile = parse_profile(&text)
        .map_err(|e| super::validate::Usage(format!("--profile {}: {e:#}", a.profile.display())))?;
    if let Some(s) = profile
        .iter()
        .find(|s| s.clients.is_some_and(|(_, last)| last >= a.clients))
    {
        return Err(super::validate::Usage(format!(
            "--profile {}: a row of {}/{} names clients up to {} but --clients is {}",
            a.profile.display(),
            s.pair.0,
            s.pair.1,
            s.clients.map_or(0, |c| c.1),
            a.clients
        ))
        .into());
    }
    let (url, tls) = (a.aggregator.clone(), a.tls.tls());
    if a.report_ms < 10 || !a.report_ms.is_multiple_of(10) {
        return Err(super::validate::Usage(format!(
            "--report-ms must be a multiple of 10 (got {})",
            a.report_ms
        ))
        .into());
    }
    let clients: Vec<Client> = (0..a.clients)
        .map(|i| {
            let mut cfg = ClientConfig::new(a.service.clone(), url.clone());
            cfg.zone.clone_from(&a.zone);
            cfg.region.clone_from(&a.region);
            cfg.interval = Duration::from_millis(a.interval_ms);
            cfg.window = Duration::from_millis(a.window_ms);
            cfg.id = format!("loadgen-{}-{}-{i}", a.zone, std::process::id());
            cfg.tls.clone_from(&tls);
            Client::new(cfg)
        })
        .collect();
    let tasks: Vec<_> = clients.iter().map(Client::spawn).collect();
    let _metrics = match a.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}"))?;
            let (tx, rx) = tokio::sync::watch::channel(false);
            let cs = clients.clone();
            let render: grl::net::admin::Render = std::sync::Arc::new(move || render_all(&cs));
            tokio::spawn(grl::net::admin::serve(listener, render, rx));
            Some(tx)
        }
        None => None,
    };
    if let Some(at) = a.start_unix_ms {
        let now = unix_ms();
        if at > now {
            tokio::time::sleep(Duration::from_millis(at - now)).await;
        }
    }
    let (duration, report_ms, pair_lines) = (a.duration, a.report_ms, a.pair_lines);
    tokio::task::spawn_blocking(move || {
        generate(&clients, &profile, duration, report_ms, pair_lines)
    })
    .await??;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// The wall clock in Unix milliseconds.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every client's metrics in one exposition: each sample gets a `client="i"` label so the
/// series of different clients stay distinct; `# HELP`/`# TYPE` lines come once.
fn render_all(clients: &[Client]) -> String {
    let mut out = String::new();
    for (i, c) in clients.iter().enumerate() {
        let mut text = String::new();
        c.encode_metrics(&mut text);
        for line in text.lines() {
            if line.starts_with('#') {
                if i == 0 && !line.starts_with("# EOF") {
                    out.push_str(line);
                    out.push('\n');
                }
                continue;
            }
            match line.find('{') {
                Some(b) => {
                    out.push_str(&line[..=b]);
                    out.push_str(&format!("client=\"{i}\","));
                    out.push_str(&line[b + 1..]);
                }
                None => match line.split_once(' ') {
                    Some((name, rest)) => out.push_str(&format!("{name}{{client=\"{i}\"}} {rest}")),
                    None => out.push_str(line),
                },
            }
            out.push('\n');
        }
    }
    out
}

/// A lane in flight: which clients offer it, at what rate and shape, and each one's
/// fraction of a request carried between ticks.
struct Offering {
    caller: String,
    procedure: String,
    class: String,
    first: usize,
    rps: f64,
    shape: Shape,
    carry: Vec<f64>,
    /// Sent, allowed, dropped, shadow-dropped since the last report.
    answers: [u64; 4],
}

/// Offers the traffic in 10 ms ticks and prints a line per bucket every `report_ms`.
fn generate(
    clients: &[Client],
    profile: &[Step],
    duration: u64,
    report_ms: u64,
    pair_lines: bool,
) -> anyhow::Result<()> {
    const TICKS: u64 = 100;
    let per_report = report_ms / 10;
    let n = clients.len();
    let start = Instant::now();
    // Lanes keep their carries for the whole run (a row changing a lane's rate continues
    // its spacing); `rates` is recomputed once a second, not every tick.
    let mut lanes: BTreeMap<Lane, Offering> = BTreeMap::new();
    let mut second = None;
    let mut rng = SplitMix(u64::from(std::process::id()));
    let mut prev: Vec<BTreeMap<String, [u64; 4]>> = clients.iter().map(totals).collect();
    let stdout = std::io::stdout();
    for period in 0..(duration * 1000).div_ceil(report_ms) {
        for tick in period * per_report..((period + 1) * per_report).min(duration * TICKS) {
            if second != Some(tick / TICKS) {
                second = Some(tick / TICKS);
                for r in lanes.values_mut() {
                    r.rps = 0.0;
                }
                for (lane, (rps, shape)) in rates_at(profile, tick / TICKS) {
                    let (first, last) = lane.1.unwrap_or((0, n - 1));
                    let m = last - first + 1;
                    let r = lanes.entry(lane.clone()).or_insert_with(|| Offering {
                        caller: lane.0.0.clone(),
                        procedure: lane.0.1.clone(),
                        class: lane.2.clone(),
                        first,
                        rps,
                        shape,
                        carry: (0..m)
                            .map(|j| {
                                if shape == Shape::Spread {
                                    j as f64 / m as f64
                                } else {
                                    0.0
                                }
                            })
                            .collect(),
                        answers: [0; 4],
                    });
                    r.rps = rps;
                    r.shape = shape;
                }
            }
            let due = start + Duration::from_millis(tick * 10);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            for r in lanes.values_mut().filter(|r| r.rps > 0.0) {
                let per_tick = r.rps / r.carry.len() as f64 / TICKS as f64;
                let cs = &clients[r.first..r.first + r.carry.len()];
                for (c, acc) in cs.iter().zip(&mut r.carry) {
                    for _ in 0..due_in_tick(r.shape, per_tick, tick, acc, &mut rng) {
                        let d = if r.class.is_empty() {
                            c.decide(&r.caller, &r.procedure)
                        } else {
                            c.decide_in_class(&r.caller, &r.procedure, &r.class)
                        };
                        r.answers[0] += 1;
                        r.answers[1 + d as usize] += 1;
                    }
                }
            }
        }
        let now: Vec<_> = clients.iter().map(totals).collect();
        let unix_ms = unix_ms();
        let t_ms = ((period + 1) * report_ms).min(duration * 1000);
        let late_ms = (start.elapsed().as_millis() as u64).saturating_sub(t_ms);
        let mut buckets: BTreeMap<&str, ([u64; 4], Vec<f64>)> = BTreeMap::new();
        for (cur, old) in now.iter().zip(&prev) {
            for (b, v) in cur {
                let o = old.get(b).copied().unwrap_or_default();
                let d: [u64; 4] = std::array::from_fn(|k| v[k] - o[k]);
                let e = buckets.entry(b.as_str()).or_default();
                for (sum, x) in e.0.iter_mut().zip(d) {
                    *sum += x;
                }
                e.1.push(if d[0] > 0 {
                    d[2] as f64 / d[0] as f64
                } else {
                    0.0
                });
            }
        }
        let mut out = stdout.lock();
        for (b, (s, fr)) in buckets {
            let line = serde_json::json!({
                "t": t_ms.div_ceil(1000), "t_ms": t_ms, "unix_ms": unix_ms, "late_ms": late_ms,
                "bucket": b, "offered": s[0], "allowed": s[1], "dropped": s[2],
                "shadow_dropped": s[3], "client_drop_fractions": fr,
            });
            writeln!(out, "{line}")?;
        }
        if pair_lines {
            let mut pairs: BTreeMap<(&str, &str), [u64; 4]> = BTreeMap::new();
            for r in lanes.values_mut() {
                let e = pairs.entry((&r.caller, &r.procedure)).or_default();
                for (sum, x) in e.iter_mut().zip(r.answers) {
                    *sum += x;
                }
                r.answers = [0; 4];
            }
            for ((caller, procedure), s) in pairs {
                let line = serde_json::json!({
                    "t": t_ms.div_ceil(1000), "t_ms": t_ms, "unix_ms": unix_ms, "late_ms": late_ms,
                    "pair": format!("{caller} {procedure}"), "sent": s[0], "allowed": s[1],
                    "dropped": s[2], "shadow_dropped": s[3],
                });
                writeln!(out, "{line}")?;
            }
        }
        out.flush()?;
        prev = now;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_rows_hold_until_the_next() {
        let p = parse_profile(
            "second,caller,procedure,rps\n0,gw,Pay/A,100\n5,gw,Pay/A,1500\n2,x,Y,7\n",
        )
        .unwrap();
        let all = |c: &str, p: &str| ((c.to_string(), p.to_string()), None, String::new());
        assert_eq!(rates_at(&p, 0)[&all("gw", "Pay/A")].0, 100.0);
        assert_eq!(rates_at(&p, 4).len(), 2);
        assert_eq!(rates_at(&p, 9)[&all("gw", "Pay/A")].0, 1500.0);
        assert!(parse_profile("1,2\n").is_err());
    }

    #[test]
    fn rows_of_client_subsets_run_beside_the_rest() {
        let p = parse_profile("0,gw,A,1,even,0\n0,gw,A,9,even,1-9\n5,gw,A,5,even,0\n").unwrap();
        assert_eq!(p[1].clients, Some((1, 9)));
        let pair = ("gw".to_string(), "A".to_string());
        let at = rates_at(&p, 6);
        assert_eq!(at[&(pair.clone(), Some((0, 0)), String::new())].0, 5.0);
        assert_eq!(at[&(pair.clone(), Some((1, 9)), String::new())].0, 9.0);
        let p = parse_profile("0,gw,A,3,even,,critical\n0,gw,A,4,poisson,,sheddable\n").unwrap();
        let at = rates_at(&p, 0);
        assert_eq!(at[&(pair.clone(), None, "critical".to_string())].0, 3.0);
        assert_eq!(at[&(pair, None, "sheddable".to_string())].1, Shape::Poisson);
        for bad in [
            "0,gw,A,1,even,x\n",
            "0,gw,A,1,even,3-1\n",
            "0,gw,A,1,even,1-\n",
        ] {
            assert!(parse_profile(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shapes_parse_and_offer_their_rate() {
        let p =
            parse_profile("0,gw,A,10,burst:1000\n0,gw,B,10,poisson\n0,gw,C,1,spread\n").unwrap();
        assert_eq!(p[0].shape, Shape::Burst(1000));
        assert_eq!(p[1].shape, Shape::Poisson);
        assert_eq!(p[2].shape, Shape::Spread);
        assert!(parse_profile("0,gw,A,10,burst:15\n").is_err());
        assert!(parse_profile("0,gw,A,10,square\n").is_err());
        let mut rng = SplitMix(7);
        for shape in [
            Shape::Even,
            Shape::Poisson,
            Shape::Burst(1000),
            Shape::Burst(100),
        ] {
            let (mut acc, mut total, mut ticks_with) = (0.0, 0u64, 0u64);
            for tick in 0..10_000 {
                let n = due_in_tick(shape, 0.4, tick, &mut acc, &mut rng);
                total += n;
                ticks_with += u64::from(n > 0);
            }
            assert!((3_800..=4_200).contains(&total), "{shape:?}: {total}");
            if let Shape::Burst(ms) = shape {
                assert_eq!(ticks_with, 100_000 / ms, "{shape:?}: one burst a period");
            }
        }
    }
}
