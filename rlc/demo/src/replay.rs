//! The demo's traffic: GRL tiers and clients in-process, a replay with a 15x surge on one
//! caller, a live per-second table and the closing summary.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use grl::tier::aggregator::{self, AggregatorOptions};
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use grl_client::{Client, ClientConfig, Decision};
use serde::Serialize;

use super::table::LiveTable;
use tokio::net::TcpListener;

const SERVICE: &str = "payments";
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const CLIENTS_PER_ZONE: usize = 2;
const SURGE_CALLER: &str = "gateway";

/// One (caller, procedure) stream of the replay.
struct Stream {
    caller: &'static str,
    procedure: &'static str,
    bucket: &'static str,
    rps: f64,
    surge_rps: f64,
}

/// What the demo shows at the end.
#[derive(Debug, Serialize)]
pub(super) struct Summary {
    /// Limit of the surging bucket.
    pub surge_limit: f64,
    /// Offered rate during the surge (over the wall time of its settled seconds).
    pub surge_offered: f64,
    /// Admitted rate during the surge (over the wall time of its settled seconds).
    pub surge_admitted: f64,
    /// `surge_admitted / surge_limit - 1`.
    pub surge_error: f64,
    /// The surging caller's requests offered in the second after the surge ended.
    pub step_down_offered: u64,
    /// The surging caller's requests admitted in the second after the surge ended.
    pub step_down_admitted: u64,
    /// Requests dropped from callers under their limits (must be 0).
    pub others_dropped: u64,
    /// Requests offered by those callers.
    pub others_offered: u64,
}

impl Summary {
    /// The demo's claim: the surge held within ±5% of its limit, the others untouched.
    pub(super) fn ok(&self) -> bool {
        self.surge_error.abs() <= 0.05 && self.others_dropped == 0
    }

    /// Prints the closing summary.
    pub(super) fn print(&self) {
        println!("\n== summary");
        println!(
            "surge on caller `{SURGE_CALLER}`: offered {:.0} rps, admitted {:.0} rps, limit {:.0} rps ({:+.1}%) → {}",
            self.surge_offered,
            self.surge_admitted,
            self.surge_limit,
            self.surge_error * 100.0,
            if self.surge_error.abs() <= 0.05 {
                "held"
            } else {
                "NOT held"
            }
        );
        println!(
            "step down: the second after the surge admitted {} of {} requests of `{SURGE_CALLER}` ({:.1}%)",
            self.step_down_admitted,
            self.step_down_offered,
            100.0 * self.step_down_admitted as f64 / self.step_down_offered.max(1) as f64
        );
        println!(
            "other callers: {} offered, {} dropped → {}",
            self.others_offered,
            self.others_dropped,
            if self.others_dropped == 0 {
                "untouched"
            } else {
                "DROPPED"
            }
        );
        println!("{}", self.verdict());
    }

    /// The closing line, as `rlc demo --rollout` ends: what the demo proved, or did not.
    pub(super) fn verdict(&self) -> String {
        if self.ok() {
            "verdict: the demo behaved as described: the surge was held within ±5% of its \
             limit and no other caller was dropped"
                .to_string()
        } else {
            "verdict: the demo did NOT behave as described (see the lines above)".to_string()
        }
    }
}

/// Starts the tiers, replays `seconds` of traffic, returns the summary.
pub(super) async fn run(remote: &str, interval: Duration, seconds: u64) -> anyhow::Result<Summary> {
    let (_controller, ctl) = controller::start(
        ControllerOptions {
            region: "region-1".into(),
            parents: Vec::new(),
            election: None,
            interval,
            config: ConfigSource::Git(remote.to_string(), "main".into()),
            poll: Duration::from_secs(2),
            security: Default::default(),
        },
        TcpListener::bind("127.0.0.1:0").await?,
        None,
    )
    .await?;
    let snapshot = ctl.snapshot();
    let svc = snapshot
        .service(SERVICE)
        .context("payments service in config")?;
    let limit = |b: &str| svc.bucket(b).and_then(|b| b.limit);
    let gateway_limit = limit("gateway-pay").context("gateway-pay has no limit")?;
    let acme_limit = limit("partner-acme").unwrap_or(500.0);
    let refunds_limit = limit("refunds").unwrap_or(100.0);
    for b in &svc.buckets {
        println!(
            "  bucket {:<14} scope {:<6} mode {:<6} limit {}",
            b.name,
            b.scope,
            b.mode,
            b.limit.map_or("none".into(), |l| format!("{l:.0} rps"))
        );
    }
    let controller_addr = _controller.addr;
    let mut aggregators = Vec::new();
    let mut clients = Vec::new();
    for zone in ZONES {
        let agg = aggregator::start(
            AggregatorOptions {
                zone: zone.into(),
                region: "region-1".into(),
                controllers: vec![controller_addr.to_string()],
                interval,
                security: Default::default(),
            },
            TcpListener::bind("127.0.0.1:0").await?,
            None,
        )?;
        for i in 0..CLIENTS_PER_ZONE {
            let mut cfg = ClientConfig::new(SERVICE, format!("http://{}", agg.addr));
            cfg.zone = zone.into();
            cfg.region = "region-1".into();
            cfg.interval = interval;
            cfg.id = format!("demo-{zone}-{i}");
            let c = Client::new(cfg);
            c.spawn();
            clients.push(c);
        }
        aggregators.push(agg);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while clients.iter().any(|c| c.status().config_version.is_empty()) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "clients got no config"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let streams = [
        Stream {
            caller: SURGE_CALLER,
            procedure: "Pay/Charge",
            bucket: "gateway-pay",
            rps: gateway_limit * 0.6,
            surge_rps: gateway_limit * 15.0,
        },
        Stream {
            caller: "partner-acme",
            procedure: "Pay/Charge",
            bucket: "partner-acme",
            rps: acme_limit * 0.6,
            surge_rps: acme_limit * 0.6,
        },
        Stream {
            caller: "web",
            procedure: "Refund/Full",
            bucket: "refunds",
            rps: refunds_limit * 0.5,
            surge_rps: refunds_limit * 0.5,
        },
        Stream {
            caller: "mobile",
            procedure: "Search/Query",
            bucket: "",
            rps: 300.0,
            surge_rps: 300.0,
        },
    ];
    let (surge_from, surge_to) = (seconds / 3, 2 * seconds / 3);
    println!(
        "\n== 5. replay: {seconds} s, caller `{SURGE_CALLER}` surges to 15x its limit from second {surge_from} to {surge_to}"
    );
    println!(
        "{:>3}  {:<14} {:>9} {:>9} {:>9} {:>9}",
        "t", "bucket", "offered", "admitted", "dropped", "shadow"
    );
    let mut last = totals(&clients);
    // Offered, admitted, and the wall seconds they took: a busy machine stretches the
    // replay's seconds, and the limit is a rate per wall second.
    let mut surge = (0.0, 0.0, 0.0f64);
    let mut step_down = (0u64, 0u64);
    let (mut others_offered, mut others_dropped) = (0u64, 0u64);
    let mut carry = vec![0.0f64; streams.len()];
    let tick = Duration::from_millis(10);
    let mut ticker = tokio::time::interval(tick);
    // A tick this process was too busy to run is skipped, not made up for: catching up
    // would offer seconds of steady traffic as one burst, which is not the traffic the
    // demo describes (and a budget rightly rations a burst).
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut next_client = 0usize;
    let mut table = LiveTable::stdout();
    for second in 0..seconds {
        let surging = (surge_from..surge_to).contains(&second);
        let began = std::time::Instant::now();
        for _ in 0..100 {
            ticker.tick().await;
            for (s, carry) in streams.iter().zip(carry.iter_mut()) {
                let rps = if surging { s.surge_rps } else { s.rps };
                *carry += rps * tick.as_secs_f64();
                while *carry >= 1.0 {
                    *carry -= 1.0;
                    let c = &clients[next_client % clients.len()];
                    next_client += 1;
                    let _: Decision = c.decide(s.caller, s.procedure);
                }
            }
        }
        let now = totals(&clients);
        let mut rows = Vec::with_capacity(streams.len());
        for s in &streams {
            let (o, a, d, sh) = delta(&now, &last, s.bucket);
            let label = if s.bucket.is_empty() {
                "(unmatched)"
            } else {
                s.bucket
            };
            rows.push(format!(
                "{second:>3}  {label:<14} {o:>9} {a:>9} {d:>9} {sh:>9}"
            ));
            if s.caller == SURGE_CALLER {
                if second == surge_to {
                    step_down = (o, a);
                }
                if surging && second >= surge_from + 3 {
                    surge.0 += o as f64;
                    surge.1 += a as f64;
                    surge.2 += began.elapsed().as_secs_f64();
                }
            } else {
                others_offered += o;
                others_dropped += d;
            }
        }
        table.second(&rows);
        last = now;
    }
    let n = surge.2.max(1e-3);
    let (surge_offered, surge_admitted) = (surge.0 / n, surge.1 / n);
    Ok(Summary {
        surge_limit: gateway_limit,
        surge_offered,
        surge_admitted,
        surge_error: surge_admitted / gateway_limit - 1.0,
        step_down_offered: step_down.0,
        step_down_admitted: step_down.1,
        others_dropped,
        others_offered,
    })
}

type Totals = BTreeMap<String, (u64, u64, u64, u64)>;

fn totals(clients: &[Client]) -> Totals {
    let mut out = Totals::new();
    for c in clients {
        for t in c.bucket_totals() {
            let e = out.entry(t.bucket).or_default();
            e.0 += t.offered;
            e.1 += t.allowed;
            e.2 += t.dropped;
            e.3 += t.shadow_dropped;
        }
    }
    out
}

fn delta(now: &Totals, last: &Totals, bucket: &str) -> (u64, u64, u64, u64) {
    let n = now.get(bucket).copied().unwrap_or_default();
    let l = last.get(bucket).copied().unwrap_or_default();
    (n.0 - l.0, n.1 - l.1, n.2 - l.2, n.3 - l.3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(surge_error: f64, others_dropped: u64) -> Summary {
        Summary {
            surge_limit: 100.0,
            surge_offered: 1500.0,
            surge_admitted: 100.0 * (1.0 + surge_error),
            surge_error,
            step_down_offered: 10,
            step_down_admitted: 10,
            others_dropped,
            others_offered: 1000,
        }
    }

    #[test]
    fn the_summary_ends_with_a_verdict() {
        assert!(
            summary(0.01, 0)
                .verdict()
                .starts_with("verdict: the demo behaved as described")
        );
        assert!(summary(0.2, 0).verdict().contains("did NOT behave"));
        assert!(summary(0.0, 3).verdict().contains("did NOT behave"));
    }
}
