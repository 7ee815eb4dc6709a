//! Surge: a step from 1x to 15x of a global limit at a 1 s interval, then down to 0.9x,
//! through a real controller, aggregator and clients in one process. Prints the time until
//! the admitted rate is within ±5 % of the limit, the admitted rate of each whole second
//! after the step up (x the limit) and after the step down (share of the offered), and the
//! control-plane bytes per client per second.
//!
//! `SURGE_LIMIT` (default 2000 rps), `SURGE_CLIENTS` (20), `SURGE_FACTOR` (15); a value
//! that does not parse or is not > 0 is refused (exit 2). With `GRL_FIGURES_OUT=<file>` the
//! figures also go to that file as the headline row `step` (see `common/figures_out.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use grl::tier::aggregator::{self, AggregatorOptions};
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use grl_client::{Client, ClientConfig};

#[path = "common/figures_out.rs"]
mod figures_out;

fn env(name: &str, dflt: f64) -> f64 {
    let v: f64 = figures_out::env_size(name, dflt);
    if !(v.is_finite() && v > 0.0) {
        figures_out::refuse(&format!("{name}={v}: a number > 0"));
    }
    v
}

fn admitted(clients: &[Client]) -> (u64, u64) {
    clients
        .iter()
        .flat_map(grl_client::Client::bucket_totals)
        .filter(|b| b.bucket == "gateway-pay")
        .fold((0, 0), |(o, a), b| (o + b.offered, a + b.allowed))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let limit = env("SURGE_LIMIT", 2000.0);
    let clients_asked = env("SURGE_CLIENTS", 20.0);
    if clients_asked.fract() != 0.0 {
        figures_out::refuse(&format!("SURGE_CLIENTS={clients_asked}: a whole number"));
    }
    let n = clients_asked as usize;
    let factor = env("SURGE_FACTOR", 15.0);
    let iv = Duration::from_secs(1);
    let (warm, surge, calm) = (8u64, 12u64, 5u64);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::write(
        dir.path().join("services/payments.yaml"),
        format!("service: payments\nbuckets:\n  - name: gateway-pay\n    match: {{ caller: gateway }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: {limit} }}\n"),
    )
    .unwrap();
    let bind = || async { tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let ctl_opts = ControllerOptions {
        region: "eu".into(),
        parents: Vec::new(),
        election: None,
        interval: iv,
        config: ConfigSource::Dir(dir.path().into()),
        poll: Duration::from_secs(2),
        security: Default::default(),
    };
    let (ctl, _c) = controller::start(ctl_opts, bind().await, None)
        .await
        .unwrap();
    let agg_opts = AggregatorOptions {
        zone: "a".into(),
        region: "eu".into(),
        controllers: vec![ctl.addr.to_string()],
        interval: iv,
        security: Default::default(),
    };
    let agg = aggregator::start(agg_opts, bind().await, None).unwrap();
    let clients: Vec<Client> = (0..n)
        .map(|i| {
            let mut cfg = ClientConfig::new("payments", format!("http://{}", agg.addr));
            cfg.zone = "a".into();
            cfg.region = "eu".into();
            cfg.id = format!("surge-{i}");
            let c = Client::new(cfg);
            c.spawn();
            c
        })
        .collect();

    // Traffic: `limit` rps for `warm` s, then `factor` x limit, spread over the clients in
    // 10 ms ticks, on its own thread.
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let generator = {
        let (clients, stop) = (clients.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut carry = vec![0.0; clients.len()];
            let mut tick = 0u64;
            while !stop.load(Relaxed) {
                tick += 1;
                let due = start + Duration::from_millis(tick * 10);
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
                let total = if tick * 10 < warm * 1000 {
                    limit
                } else if tick * 10 < (warm + surge) * 1000 {
                    limit * factor
                } else {
                    limit * 0.9
                };
                for (i, c) in clients.iter().enumerate() {
                    carry[i] += total / clients.len() as f64 / 100.0;
                    while carry[i] >= 1.0 {
                        carry[i] -= 1.0;
                        c.decide("gateway", "Pay/Charge");
                    }
                }
            }
        })
    };

    // Sample cumulative offered and admitted counts every 100 ms.
    let step = Duration::from_millis(100);
    let mut samples: Vec<(f64, u64, u64)> = Vec::new();
    let mut bytes_at_step = None;
    let mut bytes_at_end = None;
    let bytes = |n: &grl::tier::engine::node::Node| {
        n.bytes.reports_in.load(Relaxed) + n.bytes.instructions_out.load(Relaxed)
    };
    let mut next = tokio::time::Instant::now() + step;
    while start.elapsed() < Duration::from_secs(warm + surge + calm) {
        tokio::time::sleep_until(next).await;
        next += step;
        let (o, a) = admitted(&clients);
        let t = start.elapsed().as_secs_f64() - warm as f64;
        samples.push((t, o, a));
        if bytes_at_step.is_none() && t >= 2.0 {
            bytes_at_step = Some((Instant::now(), bytes(&agg.node), bytes(&ctl.node)));
        }
        if t >= surge as f64 && bytes_at_end.is_none() {
            bytes_at_end = Some((Instant::now(), bytes(&agg.node), bytes(&ctl.node)));
        }
    }
    stop.store(true, Relaxed);
    generator.join().unwrap();
    let (t0, b_agg0, b_ctl0) = bytes_at_step.unwrap();
    let (t1, b_agg1, b_ctl1) = bytes_at_end.unwrap();
    let secs = (t1 - t0).as_secs_f64();
    let per_client = (b_agg1 - b_agg0) as f64 / secs / n as f64;
    let agg_up = (b_ctl1 - b_ctl0) as f64 / secs;

    // Whole seconds after each step, from the 100 ms samples nearest to the boundaries.
    let at = |t: f64| {
        samples
            .iter()
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .copied()
            .unwrap()
    };
    let second = |from: f64| {
        let (a, b) = (at(from), at(from + 1.0));
        ((b.1 - a.1) as f64, (b.2 - a.2) as f64)
    };
    let up_x: Vec<f64> = (0..4).map(|k| second(k as f64).1 / limit).collect();
    let down_share: Vec<f64> = (0..4)
        .map(|k| {
            let (o, a) = second(surge as f64 + k as f64);
            a / o.max(1.0)
        })
        .collect();
    let up: Vec<String> = up_x.iter().map(|x| format!("{x:.2}x")).collect();
    let down: Vec<String> = down_share
        .iter()
        .map(|s| format!("{:.1} %", 100.0 * s))
        .collect();

    // Rates over the 1 s window starting at each sample.
    let windows: Vec<(f64, f64, f64)> = samples
        .iter()
        .filter(|s| s.0 < surge as f64 - 1.0)
        .enumerate()
        .filter_map(|(i, s)| {
            let e = samples
                .iter()
                .filter(|s| s.0 < surge as f64 - 1.0)
                .nth(i + 10)?;
            let dt = e.0 - s.0;
            Some((s.0, (e.1 - s.1) as f64 / dt, (e.2 - s.2) as f64 / dt))
        })
        .collect();
    let within = |a: f64| (a - limit).abs() <= 0.05 * limit;
    let settled = windows
        .iter()
        .rposition(|w| w.0 > 0.0 && !within(w.2))
        .and_then(|i| windows.get(i + 1))
        .map(|w| w.0);
    // The same, judged on the admitted share (robust to the generator falling behind on a
    // busy machine): admitted / offered x the nominal offered rate.
    let nominal = limit * factor;
    let settled_share = windows
        .iter()
        .rposition(|w| w.0 > 0.0 && !within(w.2 / w.1 * nominal))
        .and_then(|i| windows.get(i + 1))
        .map(|w| w.0);
    for (t, o, a) in windows.iter().step_by(2) {
        println!("window from t={t:+.1}s: offered={o:.0}/s admitted={a:.0}/s");
    }
    let peak = windows
        .iter()
        .filter(|w| w.0 > 1.0)
        .map(|w| w.1)
        .fold(0.0, f64::max);
    let pre = windows
        .iter()
        .filter(|w| w.0 < -1.5)
        .map(|w| w.1 - w.2)
        .fold(0.0, f64::max);
    println!(
        "surge: limit {limit} rps, {n} clients, 1x -> {factor}x (measured peak offered {peak:.0}/s)"
    );
    println!("before the step: at most {pre:.0}/s dropped in any 1 s window");
    println!(
        "time to within ±5% of the limit: every 1 s window starting {settled:.1?} s or more after the step admits limit ±5%"
    );
    println!(
        "same, judged on the admitted share (admitted/offered x nominal): from {settled_share:.1?} s"
    );
    println!(
        "step up, admitted in each whole second after it (x the limit): {}",
        up.join(", ")
    );
    println!(
        "step down to 0.9x, admitted / offered in each whole second after it: {}",
        down.join(", ")
    );
    println!(
        "control-plane bytes per client per second (client<->aggregator, reports + instructions): {per_client:.0}"
    );
    println!("aggregator<->controller bytes per second (one zone): {agg_up:.0}");
    let secs = |s: Option<f64>| s.map_or_else(|| "never".into(), |s| format!("{s:.1} s"));
    let figure = format!(
        "1st second after the step **{}** the limit, then {}; every 1 s window within ±5 % of the limit from {} after the step ({} judged on the admitted share); 1st second after the step down **{}** admitted, then {}; {per_client:.0} control-plane bytes per client per second",
        up[0],
        up[1..].join(", "),
        secs(settled),
        secs(settled_share),
        down[0],
        down[1..].join(", "),
    );
    figures_out::write(&figures_out::Row {
        row: "step",
        what: format!(
            "{factor}x step up and down at a 1 s interval, {limit} rps limit, {n} clients (controller, aggregator and clients in one process)"
        ),
        figure,
        command: figures_out::command(
            &[
                ("SURGE_LIMIT", limit.to_string()),
                ("SURGE_CLIENTS", n.to_string()),
                ("SURGE_FACTOR", factor.to_string()),
            ],
            "cargo bench -p grl --bench surge",
        ),
        figures_json: serde_json::json!({
            "limit_rps": limit,
            "clients": n,
            "factor": factor,
            "peak_offered_rps": peak.round(),
            "dropped_before_step_max_rps": pre.round(),
            "settled_s": settled,
            "settled_share_s": settled_share,
            "up_admitted_over_limit": up_x.iter().map(|x| (x * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
            "down_admitted_share": down_share.iter().map(|x| (x * 10000.0).round() / 10000.0).collect::<Vec<_>>(),
            "control_bytes_per_client_s": per_client.round(),
            "aggregator_controller_bytes_s": agg_up.round(),
        })
        .to_string(),
    });
}
