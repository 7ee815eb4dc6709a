//! The sidecar beside nginx, in one run: the same upstream (an nginx answering `200 ok`
//! from one worker), the same load generator (`wrk`, one thread), and nginx's
//! `proxy_pass` with upstream keep-alive against `grl sidecar` with a bucket that never
//! drops, both with one worker and then two (`worker_processes N` against `--threads N`),
//! in alternating rounds. Also the sidecar refusing: every request refused (`429`), and
//! half of them (the load generator alternates a caller whose bucket never drops with one
//! whose bucket refuses all: the per-request cost of a bucket dropping 50 %).
//!
//! Prints one row per round and path (requests/s, p50, p99 at 16 connections; p50 at one
//! connection), the medians, and the ratios the targets are stated in:
//! sidecar/nginx throughput, added p50 at one connection (over a direct call) for each,
//! p99 at 16 connections, and the refusing sidecar's throughput against nginx forwarding.
//! Run by `cargo bench -p grl --bench sidecar` (after its sections 1-3) or alone with
//! `ONLY_NGINX=1`; skipped, saying why, where `nginx` or `wrk` is not installed.

mod wrk;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wrk::Run;

/// The buckets of the sidecar under test: `checkout` never drops, `blocked` refuses all.
pub(crate) const CONFIG: &str = "service: orders
buckets:
  - name: checkout
    match: { caller: checkout }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 100000000 }
  - name: blocked
    match: { caller: blocked }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 0.001 }
";

/// A process stopped when dropped: with SIGTERM, so that an nginx master stops its
/// workers (SIGKILL would leave them running, holding the port).
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `bin` runs here.
fn installed(bin: &str, arg: &str) -> bool {
    Command::new(bin)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn wait_port(port: u16, what: &str) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what} did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An nginx in `dir` with `workers` worker processes serving `servers` (`server` blocks).
fn nginx(dir: &Path, name: &str, workers: u64, servers: &str) -> Proc {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("logs")).unwrap();
    let conf = root.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes {workers};\ndaemon off;\nmaster_process on;\n\
             error_log {err} warn;\npid {pid};\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {tmp};\n  proxy_temp_path {tmp};\n{servers}\n}}\n",
            err = root.join("logs/error.log").display(),
            pid = root.join("nginx.pid").display(),
            tmp = root.display(),
        ),
    )
    .unwrap();
    Proc(
        Command::new("nginx")
            .args(["-c", &conf.display().to_string()])
            .args(["-p", &root.display().to_string()])
            .args(["-e", &root.join("logs/error.log").display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx"),
    )
}

/// The paths measured, in the order of a round.
const PATHS: [&str; 5] = [
    "direct",
    "nginx",
    "sidecar",
    "sidecar, half refused",
    "sidecar, all refused",
];

/// Runs the comparison: `secs` per run, `rounds` alternating rounds, for 1 and 2 workers;
/// the sidecars report to the aggregator at `aggregator` (whose controller serves
/// [`CONFIG`]).
pub(crate) fn run(
    grl: &str,
    aggregator: &str,
    secs: u64,
    rounds: u64,
) -> Option<serde_json::Value> {
    if !installed("nginx", "-v") || !installed("wrk", "-v") {
        println!(
            "\n== beside nginx: skipped: needs `nginx` and `wrk` on PATH (apt-get install nginx-light wrk) =="
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let up_port = test_support::ports::free_port();
    let _upstream = nginx(
        dir.path(),
        "upstream",
        1,
        &format!(
            "  server {{ listen 127.0.0.1:{up_port} backlog=4096; location / {{ return 200 \"ok\\n\"; }} }}"
        ),
    );
    wait_port(up_port, "the upstream nginx");
    let mut out = serde_json::Map::new();
    for workers in [1u64, 2] {
        let ng_port = test_support::ports::free_port();
        let _proxy = nginx(
            dir.path(),
            &format!("proxy{workers}"),
            workers,
            &format!(
                "  upstream up {{ server 127.0.0.1:{up_port}; keepalive 64; }}\n  \
                 server {{ listen 127.0.0.1:{ng_port} backlog=4096; location / {{ proxy_pass http://up; \
                 proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}"
            ),
        );
        let (sc_port, ready_port) = (
            test_support::ports::free_port(),
            test_support::ports::free_port(),
        );
        let _sidecar = Proc(
            Command::new(grl)
                .args(["sidecar", "--listen", &format!("127.0.0.1:{sc_port}")])
                .args(["--upstream", &format!("http://127.0.0.1:{up_port}")])
                .args(["--service", "orders", "--zone", "a", "--region", "eu"])
                .args(["--aggregator", aggregator])
                .args(["--metrics-listen", &format!("127.0.0.1:{ready_port}")])
                .args(["--threads", &workers.to_string()])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the grl binary"),
        );
        wait_port(ng_port, "the proxy nginx");
        wait_ready(ready_port);
        let url = |port: u16| format!("http://127.0.0.1:{port}/pay.Pay/Card");
        let targets: [(String, wrk::Callers); 5] = [
            (url(up_port), wrk::Callers::One("checkout")),
            (url(ng_port), wrk::Callers::One("checkout")),
            (url(sc_port), wrk::Callers::One("checkout")),
            (url(sc_port), wrk::Callers::Alternate("checkout", "blocked")),
            (url(sc_port), wrk::Callers::One("blocked")),
        ];
        let script = dir.path().join("alternate.lua");
        // Warm-up: connections, pools, the sidecar's pair table and its first allowance.
        for (u, c) in &targets {
            wrk::run(u, c, 16, 1, &script);
        }
        println!(
            "\n== beside nginx, {workers} worker(s) each: wrk -t1, {rounds} rounds x {secs} s per path =="
        );
        println!(
            "round  path                      conns   requests/s    p50 µs    p99 µs  non-2xx"
        );
        let mut c16: Vec<Vec<Run>> = vec![Vec::new(); PATHS.len()];
        let mut c1: Vec<Vec<Run>> = vec![Vec::new(); PATHS.len()];
        for round in 1..=rounds {
            for (i, (u, callers)) in targets.iter().enumerate() {
                let r = wrk::run(u, callers, 16, secs, &script);
                println!("{round:>5}  {:<24}  {:>5}  {r}", PATHS[i], 16);
                c16[i].push(r);
            }
            for (i, (u, callers)) in targets.iter().enumerate().take(3) {
                let r = wrk::run(u, callers, 1, secs, &script);
                println!("{round:>5}  {:<24}  {:>5}  {r}", PATHS[i], 1);
                c1[i].push(r);
            }
        }
        let med = |runs: &[Run], f: fn(&Run) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let rps = |i: usize| med(&c16[i], |r| r.rps);
        let p50_16 = |i: usize| med(&c16[i], |r| r.p50_us);
        let p99 = |i: usize| med(&c16[i], |r| r.p99_us);
        let p50_1 = |i: usize| med(&c1[i], |r| r.p50_us);
        // Ratios per round, then their median: the two proxies ran seconds apart.
        let per_round = |a: usize, b: usize| {
            let mut v: Vec<f64> = (0..rounds as usize)
                .map(|k| c16[a][k].rps / c16[b][k].rps)
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let added_ng = p50_1(1) - p50_1(0);
        let added_sc = p50_1(2) - p50_1(0);
        println!("medians, {workers} worker(s):");
        for (i, path) in PATHS.iter().enumerate() {
            println!(
                "  {path:<24} {:>10.0} rps  p50 {:>6.0} µs  p99 {:>6.0} µs{}",
                rps(i),
                p50_16(i),
                p99(i),
                if i < 3 {
                    format!("  p50 at 1 conn {:>4.0} µs", p50_1(i))
                } else {
                    String::new()
                }
            );
        }
        let fwd = per_round(2, 1);
        println!(
            "  sidecar/nginx throughput at 16 connections: {fwd:.2}x (target >= 1.0x)\n  \
             added p50 at 1 connection: nginx {added_ng:.0} µs, sidecar {added_sc:.0} µs \
             (target: sidecar <= nginx + 10 µs)\n  \
             p99 at 16 connections: nginx {:.0} µs, sidecar {:.0} µs (target: sidecar <= nginx)\n  \
             half refused / nginx forwarding: {:.2}x; all refused / nginx forwarding: {:.2}x \
             (target: refusing >= 1.5x)",
            p99(1),
            p99(2),
            per_round(3, 1),
            per_round(4, 1)
        );
        out.insert(
            format!("workers_{workers}"),
            serde_json::json!({
                "nginx_rps": rps(1).round(),
                "sidecar_rps": rps(2).round(),
                "sidecar_over_nginx": (fwd * 100.0).round() / 100.0,
                "added_p50_1conn_us": { "nginx": added_ng.round(), "sidecar": added_sc.round() },
                "p99_16conn_us": { "nginx": p99(1).round(), "sidecar": p99(2).round() },
                "half_refused_over_nginx": (per_round(3, 1) * 100.0).round() / 100.0,
                "all_refused_over_nginx": (per_round(4, 1) * 100.0).round() / 100.0,
            }),
        );
    }
    Some(serde_json::Value::Object(out))
}

/// Waits for the sidecar's `/ready`: it enforces once it holds instructions.
fn wait_ready(port: u16) {
    use std::io::{Read, Write};
    let start = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /ready HTTP/1.0\r\n\r\n");
            let mut got = String::new();
            let _ = s.read_to_string(&mut got);
            if got.starts_with("HTTP/1.0 200") || got.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sidecar did not become ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
