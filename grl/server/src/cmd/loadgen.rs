//! `grl loadgen`: offers traffic from a CSV profile through N real clients (each with its
//! own connection to the aggregator) and prints one JSON line per bucket every report
//! period (`--report-ms`, 1 s by default; 100 ms shows rises and falls at that resolution).
//! Each line carries `t` (the end of the period in whole seconds, rounded up), `t_ms` (the
//! same in milliseconds since the start) and `unix_ms` (the wall clock when the counts
//! were read, to line up several loadgens).

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
    /// CSV `second,caller,procedure,rps`: total rps over all clients from that second on.
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
    /// Serve the clients' `/metrics` here (each client's series labelled `client="i"`).
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    tls: super::tls_args::ClientTlsArgs,
}

/// One row of the profile.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    second: u64,
    pair: (String, String),
    rps: f64,
}

fn parse_profile(text: &str) -> anyhow::Result<Vec<Step>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && line.starts_with("second")) {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 4 {
            bail!("profile line {}: want second,caller,procedure,rps", i + 1);
        }
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
        });
    }
    out.sort_by_key(|s| s.second);
    Ok(out)
}

/// The total rps of every pair at second `t`: the last row at or before `t`.
fn rates_at(profile: &[Step], t: u64) -> BTreeMap<(String, String), f64> {
    let mut m = BTreeMap::new();
    for s in profile.iter().take_while(|s| s.second <= t) {
        m.insert(s.pair.clone(), s.rps);
    }
    m
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
            let render: grl::tier::admin::Render = std::sync::Arc::new(move || render_all(&cs));
            tokio::spawn(grl::tier::admin::serve(listener, render, rx));
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
    let (duration, report_ms) = (a.duration, a.report_ms);
    tokio::task::spawn_blocking(move || generate(&clients, &profile, duration, report_ms))
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

/// Offers the traffic in 10 ms ticks and prints a line per bucket every `report_ms`.
fn generate(
    clients: &[Client],
    profile: &[Step],
    duration: u64,
    report_ms: u64,
) -> anyhow::Result<()> {
    const TICKS: u64 = 100;
    let per_report = report_ms / 10;
    let n = clients.len();
    let start = Instant::now();
    let mut carry: BTreeMap<(usize, (String, String)), f64> = BTreeMap::new();
    let mut prev: Vec<BTreeMap<String, [u64; 4]>> = clients.iter().map(totals).collect();
    let stdout = std::io::stdout();
    for period in 0..(duration * 1000).div_ceil(report_ms) {
        for tick in period * per_report..((period + 1) * per_report).min(duration * TICKS) {
            let rates = rates_at(profile, tick / TICKS);
            let due = start + Duration::from_millis(tick * 10);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            for (pair, rps) in &rates {
                let per_tick = rps / n as f64 / TICKS as f64;
                for (i, c) in clients.iter().enumerate() {
                    let acc = carry.entry((i, pair.clone())).or_insert(0.0);
                    *acc += per_tick;
                    while *acc >= 1.0 {
                        *acc -= 1.0;
                        c.decide(&pair.0, &pair.1);
                    }
                }
            }
        }
        let now: Vec<_> = clients.iter().map(totals).collect();
        let unix_ms = unix_ms();
        let t_ms = ((period + 1) * report_ms).min(duration * 1000);
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
                "t": t_ms.div_ceil(1000), "t_ms": t_ms, "unix_ms": unix_ms, "bucket": b, "offered": s[0], "allowed": s[1], "dropped": s[2],
                "shadow_dropped": s[3], "client_drop_fractions": fr,
            });
            writeln!(out, "{line}")?;
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
        assert_eq!(rates_at(&p, 0)[&("gw".into(), "Pay/A".into())], 100.0);
        assert_eq!(rates_at(&p, 4).len(), 2);
        assert_eq!(rates_at(&p, 9)[&("gw".into(), "Pay/A".into())], 1500.0);
        assert!(parse_profile("1,2\n").is_err());
    }
}
