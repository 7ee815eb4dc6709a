//! What an operator sees, against real processes under load: `grl status` (table and the
//! JSON contract), `grl explain`, `grl top` in a real terminal (tmux: keys sent, pane
//! captured), and the controller's `/status` page in a real browser (headless chromium) and
//! behind the admin token. One bucket is driven over its limit (deny), one over its limit
//! in shadow, one stays under.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use test_support::ports::free_port;

use super::binary::{BIN, Proc, spawn, wait_port};

const ORDERS: &str = "service: orders
buckets:
  - name: checkout
    match: { caller: web, procedure: \"Orders/Checkout\" }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: LIMIT }
  - name: web-all
    match: { caller: web }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 5000 }
  - name: reads
    match: { procedure: \"Orders/Get*\" }
    scope: global
    mode: shadow
    policy: { kind: fixed, rps: 100 }
";

/// Per zone: web checks out at 600/s (limit 200 over two zones' 1,200), mobile reads at
/// 300/s (shadow limit 100), web lists at 50/s (under web-all's 5,000).
const PROFILE: &str = "second,caller,procedure,rps\n0,web,Orders/Checkout,600\n\
                       0,mobile,Orders/GetOrder,300\n0,web,Orders/List,50\n";

/// A controller (with `/metrics` and `/status`), aggregators in zones a and b, and a
/// load generator under each, at a 200 ms interval.
pub(crate) struct Tiers {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) ctl: String,
    pub(crate) page: String,
    /// The aggregators of zones a and b.
    aggs: Vec<String>,
    _procs: Vec<Proc>,
}

pub(crate) fn write_config(dir: &Path, limit: u32) {
    std::fs::create_dir_all(dir.join("services")).unwrap();
    let tmp = dir.join("orders.yaml.tmp");
    std::fs::write(&tmp, ORDERS.replace("LIMIT", &limit.to_string())).unwrap();
    std::fs::rename(tmp, dir.join("services/orders.yaml")).unwrap();
}

impl Tiers {
    pub(crate) fn start(admin_token: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), 200);
        std::fs::write(dir.path().join("profile.csv"), PROFILE).unwrap();
        let (cp, mp) = (free_port(), free_port());
        let (ctl, page) = (format!("127.0.0.1:{cp}"), format!("127.0.0.1:{mp}"));
        let config = dir.path().display().to_string();
        let mut args = vec![
            "controller",
            "--listen",
            &ctl,
            "--config",
            &config,
            "--metrics-listen",
            &page,
            "--interval-ms",
            "200",
            "--poll-ms",
            "200",
            "--region",
            "eu",
        ];
        let token_file = dir.path().join("admin-token");
        let token_path = token_file.display().to_string();
        if let Some(t) = admin_token {
            std::fs::write(&token_file, t).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
            args.extend(["--admin-token-file", &token_path]);
        }
        let mut procs = vec![spawn(&args)];
        wait_port(cp);
        wait_port(mp);
        let profile = dir.path().join("profile.csv").display().to_string();
        let mut aggs = Vec::new();
        for zone in ["a", "b"] {
            let ap = free_port();
            let agg = format!("127.0.0.1:{ap}");
            procs.push(spawn(&[
                "aggregator",
                "--listen",
                &agg,
                "--zone",
                zone,
                "--region",
                "eu",
                "--controller",
                &ctl,
                "--interval-ms",
                "200",
            ]));
            wait_port(ap);
            aggs.push(agg.clone());
            procs.push(spawn(&[
                "loadgen",
                "--service",
                "orders",
                "--aggregator",
                &agg,
                "--zone",
                zone,
                "--region",
                "eu",
                "--clients",
                "3",
                "--duration",
                "600",
                "--interval-ms",
                "200",
                "--profile",
                &profile,
            ]));
        }
        Self {
            dir,
            ctl,
            page,
            aggs,
            _procs: procs,
        }
    }

    /// `grl ARGS…`, its output collected.
    pub(crate) fn grl(&self, args: &[&str]) -> Output {
        Command::new(BIN).args(args).output().unwrap()
    }

    /// `grl status --controller … --json`, parsed.
    pub(crate) fn status_json(&self) -> Value {
        let out = self.grl(&["status", "--controller", &self.ctl, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Polls `grl status --json` until `ok` holds of it (up to 30 s); the last answer.
    pub(crate) fn status_until(&self, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let v = self.status_json();
            if ok(&v) {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never saw {what}: {v:#}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub(crate) fn bucket<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["bucket"] == name)
        .unwrap_or_else(|| panic!("no bucket {name} in {v:#}"))
}

pub(crate) fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {v:#}"))
}

/// The surge has reached the controller and the ratio holds the checkout bucket.
pub(crate) fn held(v: &Value) -> bool {
    let c = bucket(v, "checkout");
    f(c, "offered_rps") > 1000.0
        && f(c, "drop_ratio") > 0.7
        && (f(c, "admitted_rps") - 200.0).abs() < 50.0
        && f(bucket(v, "reads"), "shadow_dropped_rps") > 300.0
}

#[test]
fn status_json_gives_each_buckets_rates_zones_and_role() {
    let t = Tiers::start(None);
    let v = t.status_until("the checkout bucket held at its limit", held);
    assert!(!v["config_version"].as_str().unwrap().is_empty());
    assert_eq!(v["leading"], true);
    let zones: Vec<&str> = v["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["zone"].as_str().unwrap())
        .collect();
    assert_eq!(zones, ["a", "b"]);
    for z in v["zones"].as_array().unwrap() {
        assert!(f(z, "seconds_since_report") < 2.0, "{z}");
    }

    let c = bucket(&v, "checkout");
    assert_eq!(
        (c["service"].as_str(), c["mode"].as_str()),
        (Some("orders"), Some("deny"))
    );
    assert_eq!(
        (c["scope"].as_str(), f(c, "limit_rps")),
        (Some("global"), 200.0)
    );
    let (offered, admitted, dropped) = (
        f(c, "offered_rps"),
        f(c, "admitted_rps"),
        f(c, "dropped_rps"),
    );
    assert!((offered - (admitted + dropped)).abs() < 1.0, "{c}");
    let top: Vec<&str> = c["top_zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["zone"].as_str().unwrap())
        .collect();
    assert_eq!(top.len(), 2, "both zones offer: {c}");
    for z in c["top_zones"].as_array().unwrap() {
        assert!(
            (f(z, "offered_rps") - 600.0).abs() < 120.0,
            "each zone offers 600/s: {c}"
        );
    }

    let r = bucket(&v, "reads");
    assert_eq!(r["mode"], "shadow");
    assert_eq!(f(r, "dropped_rps"), 0.0, "shadow never refuses: {r}");
    assert!((f(r, "admitted_rps") - f(r, "offered_rps")).abs() < 1e-6);
    let w = bucket(&v, "web-all");
    assert_eq!((f(w, "drop_ratio"), f(w, "dropped_rps")), (0.0, 0.0), "{w}");

    // An aggregator answers too, from its clients' rows (sent by name).
    let out = t.grl(&["status", "--aggregator", &t.aggs[0], "--json"]);
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (a["level"].as_str(), a["zone"].as_str()),
        (Some("zone"), Some("a"))
    );
    assert_eq!(a["zones"][0]["children"], 3, "three clients: {a}");
    let ac = bucket(&a, "checkout");
    assert!(
        f(ac, "dropped_rps") > 200.0 && (f(ac, "offered_rps") - 600.0).abs() < 120.0,
        "{ac}"
    );
    assert_eq!(ac["top_zones"][0]["zone"], "a");

    let only = t.grl(&[
        "status",
        "--controller",
        &t.ctl,
        "--service",
        "billing",
        "--json",
    ]);
    let only: Value = serde_json::from_slice(&only.stdout).unwrap();
    assert_eq!(
        only["buckets"].as_array().unwrap().len(),
        0,
        "--service filters"
    );

    let table = t.grl(&["status", "--controller", &t.ctl]);
    let table = String::from_utf8(table.stdout).unwrap();
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{table}"))
            .to_string()
    };
    assert!(line("checkout").contains("DROPPING"), "{table}");
    assert!(line("reads").contains("shadow-dropping"), "{table}");
    assert!(!line("web-all").contains("DROPPING"), "{table}");
    assert!(table.contains("leading"), "{table}");
}

#[test]
fn explain_names_the_winning_bucket_and_every_rule_considered() {
    let t = Tiers::start(None);
    t.status_until("the checkout bucket held at its limit", held);
    let explain = |caller: &str, procedure: &str, service: &str| -> Value {
        let out = t.grl(&[
            "explain",
            "--controller",
            &t.ctl,
            "--service",
            service,
            "--caller",
            caller,
            "--procedure",
            procedure,
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let e = explain("web", "Orders/Checkout", "orders");
    assert_eq!(e["bucket"], "checkout");
    assert_eq!(e["mode"], "deny");
    assert_eq!(e["shadow"], false);
    assert!(f(&e, "drop_ratio") > 0.6, "the ratio in force: {e}");
    let considered: Vec<(&str, bool, &str)> = e["considered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["bucket"].as_str().unwrap(),
                c["matched"].as_bool().unwrap(),
                c["role"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        considered,
        [
            ("checkout", true, "wins"),
            ("web-all", true, "less_specific"),
            ("reads", false, "no_match"),
        ]
    );
    let reasons: Vec<&str> = e["considered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["reason"].as_str().unwrap())
        .collect();
    assert!(reasons[0].contains("exact procedure"), "{reasons:?}");
    assert!(
        reasons[2].contains("does not match `Orders/Get*`"),
        "{reasons:?}"
    );

    let shadow = explain("mobile", "Orders/GetOrder", "orders");
    assert_eq!(
        (shadow["bucket"].as_str(), shadow["shadow"].as_bool()),
        (Some("reads"), Some(true))
    );
    let none = explain("mobile", "Orders/Cancel", "orders");
    assert!(none["bucket"].is_null(), "no rule takes it: {none}");
    assert!(
        none["considered"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["matched"] == false)
    );
    // A service the config does not know is refused, naming those it does (issue 40).
    let unknown = t.grl(&["explain", "--controller", &t.ctl, "--service", "billing"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("(services: orders)"),
        "{unknown:?}"
    );

    let text = t.grl(&[
        "explain",
        "--controller",
        &t.ctl,
        "--service",
        "orders",
        "--caller",
        "web",
        "--procedure",
        "Orders/Checkout",
    ]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("bucket orders/checkout: deny mode"), "{text}");
}

/// `tmux ARGS…` on the test's own server socket.
fn tmux(socket: &Path, args: &[&str]) -> Output {
    let bin = std::env::var("GRL_TEST_TMUX").unwrap_or_else(|_| "tmux".into());
    Command::new(bin)
        .arg("-S")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tmux runs (tests/run.sh installs it; GRL_TEST_TMUX names it)")
}

#[test]
fn top_in_a_terminal_refreshes_in_place_and_quits_on_q() {
    let t = Tiers::start(None);
    t.status_until("the checkout bucket held at its limit", held);
    let socket = t.dir.path().join("tmux.sock");
    let cmd = format!("{BIN} top --controller {} --interval-ms 300", t.ctl);
    let started = tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "180",
            "-y",
            "30",
            &cmd,
        ],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let pane =
        || String::from_utf8(tmux(&socket, &["capture-pane", "-p", "-t", "top"]).stdout).unwrap();
    let until = |what: &str, ok: &dyn Fn(&str) -> bool| -> String {
        let start = Instant::now();
        loop {
            let p = pane();
            if ok(&p) {
                return p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never saw {what}:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let row = |p: &str, name: &str| {
        p.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .map(str::to_string)
    };
    let first = until("the dropping buckets", &|p| {
        row(p, "checkout").is_some_and(|l| l.contains("DROPPING")) && row(p, "reads").is_some()
    });
    let (checkout, reads) = (
        first.find("checkout").unwrap(),
        first.find(" reads ").unwrap(),
    );
    assert!(
        checkout < reads,
        "sorted by dropped rate, the refusing bucket first:\n{first}"
    );
    assert!(
        row(&first, "web-all").is_none(),
        "a bucket under its limit has no line:\n{first}"
    );
    assert!(
        first.contains("2 dropping or shadow-dropping, 1 under their limits"),
        "{first}"
    );

    // The limit changes in the config the controller follows: the same screen shows it.
    write_config(t.dir.path(), 900);
    until("the new limit in place", &|p| {
        row(p, "checkout").is_some_and(|l| l.split_whitespace().nth(4) == Some("900"))
    });

    tmux(&socket, &["send-keys", "-t", "top", "q"]);
    let start = Instant::now();
    while tmux(&socket, &["has-session", "-t", "top"])
        .status
        .success()
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "q did not quit:\n{}",
            pane()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let piped = t.grl(&["top", "--controller", &t.ctl]);
    assert!(piped.status.success());
    let snapshot = String::from_utf8(piped.stdout).unwrap();
    assert!(
        row(&snapshot, "checkout").is_some() && !snapshot.contains("\x1b["),
        "{snapshot}"
    );
}

/// `curl -s -i ARGS…`: (HTTP code, lower-cased head, body); code 0 when no answer came.
pub(crate) fn curl(args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_string())
}

/// `GET http://ADDR/status` with an optional `authorization` header: (code, headers, body).
fn get_status(addr: &str, authorization: Option<&str>) -> (u16, String, String) {
    let url = format!("http://{addr}/status");
    match authorization {
        Some(a) => curl(&["-H", &format!("authorization: {a}"), &url]),
        None => curl(&[&url]),
    }
}

#[test]
fn status_page_is_behind_the_admin_token() {
    let token = "status-page-token-0123456789";
    let t = Tiers::start(Some(token));
    let (code, head, body) = get_status(&t.page, None);
    assert_eq!(code, 401, "{head}{body}");
    assert!(head.contains("www-authenticate: basic"), "{head}");
    let (code, _, _) = get_status(&t.page, Some("Bearer wrong-token-wrong-token"));
    assert_eq!(code, 403);
    let (code, head, body) = get_status(&t.page, Some(&format!("Bearer {token}")));
    assert_eq!(code, 200, "{body}");
    assert!(head.contains("content-type: text/html"), "{head}");
    for b in ["checkout", "web-all", "reads"] {
        assert!(
            body.contains(&format!("data-bucket=\"orders/{b}\"")),
            "{b}: {body}"
        );
    }
    assert!(!body.contains(token), "the page never shows the token");
    // `/` is the page's address as typed: a redirect to `/status` (the query kept), which
    // a browser follows to the page.
    let (code, head, body) = curl(&[&format!("http://{}/", t.page)]);
    assert!(
        matches!(code, 303 | 308),
        "GET / answered {code}: {head}{body}"
    );
    let location = |head: &str| {
        head.lines()
            .find_map(|l| l.trim().strip_prefix("location: "))
            .map(str::to_string)
    };
    assert_eq!(location(&head).as_deref(), Some("/status"), "{head}");
    let (_, head, _) = curl(&[&format!("http://{}/?service=orders", t.page)]);
    assert_eq!(
        location(&head).as_deref(),
        Some("/status?service=orders"),
        "{head}"
    );
    let bearer = format!("authorization: Bearer {token}");
    let (code, _, body) = curl(&["-L", "-H", &bearer, &format!("http://{}/", t.page)]);
    assert_eq!(code, 303, "the redirect first");
    assert!(
        body.contains("HTTP/1.1 200") && body.contains("data-bucket=\"orders/checkout\""),
        "`/` followed leads to the page: {body}"
    );
    let metrics = Command::new("curl")
        .args(["-s", &format!("http://{}/metrics", t.page)])
        .output()
        .unwrap();
    let metrics = String::from_utf8(metrics.stdout).unwrap();
    assert!(
        metrics.contains("reason=\"no_credentials\"} 1")
            && metrics.contains("reason=\"wrong_token\"} 1"),
        "refusals are counted: {metrics}"
    );
}

/// Where test artefacts go: `target/test-artifacts`.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Headless chromium on `url` with a fresh profile and `extra` flags.
fn chromium(url: &str, extra: &[String]) -> Output {
    let bin = std::env::var("GRL_TEST_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let profile = tempfile::tempdir().unwrap();
    Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs (tests/run.sh installs it; GRL_TEST_CHROMIUM names it)")
}

#[test]
fn status_page_in_a_browser_lists_every_bucket_and_highlights_the_dropping_one() {
    let t = Tiers::start(None);
    t.status_until("the checkout bucket held at its limit", held);
    let url = format!("http://{}/status", t.page);
    // The history samples every five intervals: wait for a line of two points or more.
    let start = Instant::now();
    loop {
        let (_, _, body) = get_status(&t.page, None);
        let points = body
            .split("points=\"")
            .nth(1)
            .map_or(0, |p| p.split('"').next().unwrap_or("").split(' ').count());
        if points >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no history on the page:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = chromium(
        &url,
        &["--virtual-time-budget=5000".into(), "--dump-dom".into()],
    );
    let dom = String::from_utf8(out.stdout).unwrap();
    let refreshes: u32 = dom
        .split("data-refreshes=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no refresh counter in the DOM:\n{dom}"));
    assert!(
        refreshes >= 1,
        "the page refreshed itself in the browser: {refreshes}"
    );
    let class_of = |b: &str| {
        let at = dom
            .find(&format!("data-bucket=\"orders/{b}\""))
            .unwrap_or_else(|| panic!("no row for {b}:\n{dom}"));
        let start = dom[..at].rfind("<tr").unwrap();
        dom[start..at].to_string()
    };
    assert!(
        class_of("checkout").contains("class=\"dropping\""),
        "{}",
        class_of("checkout")
    );
    assert!(class_of("reads").contains("class=\"shadow-dropping\""));
    assert!(class_of("web-all").contains("class=\"ok\""));
    assert_eq!(
        dom.matches("<polyline").count(),
        3,
        "a sparkline per bucket"
    );

    let shot = artifacts().join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &url,
        &[
            "--hide-scrollbars".into(),
            "--window-size=1300,400".into(),
            format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).expect("chromium saved a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "{} bytes",
        png.len()
    );
}
