//! Three regions for the rollout tests: per region a real `grl controller` process that
//! follows `regions/<region>` of a bare config remote, an in-process zone aggregator and two
//! clients offering steady traffic; an offline history for the predictions; the `rlc`
//! binary run against all of it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use grl_client::{Client, ClientConfig};
use test_support::git_remote::BareRemote;
use test_support::ports::free_addr;
use test_support::process::{ChildGuard, spawn, target_bin, wait_for_tcp};

/// "Now" of the predictions: the history ends here.
pub(super) const NOW: i64 = 1_780_000_000;
/// The tiers' interval.
pub(super) const INTERVAL_MS: u64 = 200;
/// The regions, in the waves `[r1], [r2, r3]`.
pub(super) const REGIONS: [&str; 3] = ["r1", "r2", "r3"];

const SERVICES: &str = "\
service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway }
    scope: region
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: batch
    match: { caller: batch }
    scope: region
    mode: shadow
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
";

/// `limits/payments.yaml` with `gateway-pay` at `rps` (and the shadow bucket `batch` at 50).
pub(super) fn limits(rps: f64) -> String {
    format!("service: payments\nlimits:\n  gateway-pay: {{ rps: {rps} }}\n  batch: {{ rps: 50 }}\n")
}

/// `rollout.yaml`: waves `[r1], [r2, r3]`, each baked `bake`.
pub(super) fn plan(bake: &str) -> String {
    format!(
        "waves:\n  - regions: [r1]\n    bake: {bake}\n  - regions: [r2, r3]\n    bake: {bake}\n\
         gates:\n  max_drop_over_prediction: 0.02\napply_timeout: 20s\n"
    )
}

/// One region's tiers and traffic.
pub(super) struct Region {
    pub(super) name: &'static str,
    pub(super) addr: SocketAddr,
    pub(super) metrics: SocketAddr,
    pub(super) controller: ChildGuard,
    _aggregator: grl::tier::Running,
    clients: Vec<Client>,
}

/// The config remote, the three regions and the configurator's files.
pub(super) struct Fleet {
    pub(super) remote: BareRemote,
    pub(super) work: tempfile::TempDir,
    pub(super) regions: Vec<Region>,
    /// The commit every region runs at the start.
    pub(super) base: String,
    pub(super) db: String,
    traffic: tokio::task::JoinHandle<()>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.traffic.abort();
    }
}

impl Fleet {
    /// Starts the fleet on a config with `gateway-pay` at 300 rps and `rollout.yaml` baking
    /// `bake` (none: no `rollout.yaml`); the history says the bucket saw `history_rps` over
    /// the last day, and each region's clients offer `live_rps`.
    pub(super) async fn start(
        bake: Option<&str>,
        history_rps: f64,
        live_rps: f64,
    ) -> Result<Fleet> {
        let mut files = vec![
            ("services/payments.yaml".to_string(), SERVICES.to_string()),
            ("limits/payments.yaml".to_string(), limits(300.0)),
        ];
        if let Some(bake) = bake {
            files.push(("rollout.yaml".into(), plan(bake)));
        }
        let remote = BareRemote::with_files(&files)?;
        let base = remote.tip("main").context("main")?;
        for r in REGIONS {
            remote.set_branch(&format!("regions/{r}"), &base)?;
        }
        let work = tempfile::tempdir()?;
        write_history(&work.path().join("history"), history_rps)?;
        let db = format!("sqlite://{}", work.path().join("runs.db").display());
        let mut regions = Vec::new();
        for name in REGIONS {
            regions.push(start_region(&remote, name).await?);
        }
        let feeds: Vec<(Vec<Client>, f64)> = regions
            .iter()
            .map(|r| (r.clients.clone(), live_rps))
            .collect();
        let traffic = tokio::spawn(offer(feeds));
        let fleet = Fleet {
            remote,
            work,
            regions,
            base,
            db,
            traffic,
        };
        for r in &fleet.regions {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while r
                .clients
                .iter()
                .any(|c| c.status().config_version.is_empty())
            {
                if tokio::time::Instant::now() > deadline {
                    bail!("{}'s clients got no config", r.name);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(fleet)
    }

    /// The region called `name`.
    pub(super) fn region(&self, name: &str) -> &Region {
        self.regions
            .iter()
            .find(|r| r.name == name)
            .expect("region")
    }

    /// A person's commit on `main` setting `gateway-pay` to `rps`.
    pub(super) fn commit_limit(&self, rps: f64) -> Result<String> {
        self.remote.commit_files(
            "main",
            &[("limits/payments.yaml", limits(rps))],
            &format!("gateway-pay: {rps} rps"),
        )
    }

    /// The flags every `rlc rollout` subcommand that drives takes here.
    pub(super) fn drive_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--config-repo".into(),
            self.remote.url(),
            "--history-dir".into(),
            self.work.path().join("history").display().to_string(),
            "--db".into(),
            self.db.clone(),
            "--now".into(),
            NOW.to_string(),
            "--rollout-poll-ms".into(),
            "200".into(),
            "--workdir".into(),
            self.work.path().join("checkout").display().to_string(),
        ];
        for r in &self.regions {
            a.push("--controller".into());
            a.push(r.addr.to_string());
        }
        a
    }

    /// `rlc rollout <args…>` as a command.
    pub(super) fn rlc(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlc"));
        cmd.arg("rollout")
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1");
        cmd
    }

    /// `rlc rollout run` with the fleet's flags and `extra`, as a child process.
    pub(super) fn spawn_run(&self, extra: &[&str]) -> Result<ChildGuard> {
        let mut cmd = self.rlc(&["run"]);
        cmd.args(self.drive_args()).args(extra);
        spawn(&mut cmd)
    }

    /// Watches `run` (rolling out `cut` over `base`) to its end: r2 and r3 never move, r1
    /// runs `cut` at some point, and the run exits 9 (a gate failed); the line of its
    /// output saying wave 1 failed.
    pub(super) async fn wave_1_failed(
        &self,
        run: &mut ChildGuard,
        base: &str,
        cut: &str,
    ) -> Result<String> {
        let mut r1_moved = false;
        let code = loop {
            for r in ["r2", "r3"] {
                assert_eq!(self.version(r).await?, base, "{r} never moves");
            }
            r1_moved |= self.version("r1").await? == cut;
            if let Some(st) = run.try_exited() {
                break st.code();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let out = run.output();
        assert!(r1_moved, "r1 ran the cut before it was rolled back: {out}");
        assert_eq!(code, Some(9), "{out}");
        let line = out
            .lines()
            .find(|l| l.contains("wave 1 failed"))
            .unwrap_or_else(|| panic!("no failure line: {out}"));
        Ok(line.to_string())
    }

    /// `rlc rollout run` with the fleet's flags, run to its end.
    pub(super) async fn run_to_end(&self) -> Result<Output> {
        self.rollout(
            std::iter::once("run".to_string())
                .chain(self.drive_args())
                .collect(),
        )
        .await
    }

    /// `rlc rollout <sub>` with `args`, run to its end.
    pub(super) async fn rollout(&self, args: Vec<String>) -> Result<Output> {
        let mut cmd = self.rlc(&[]);
        cmd.args(args);
        Ok(tokio::task::spawn_blocking(move || cmd.output()).await??)
    }

    /// The config version region `name`'s controller runs.
    pub(super) async fn version(&self, name: &str) -> Result<String> {
        let addr = self.region(name).addr.to_string();
        Ok(rlc::output::to_controllers::config_version(&addr, &Default::default()).await?)
    }

    /// Every region's version, by region.
    pub(super) async fn versions(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for r in REGIONS {
            out.push(self.version(r).await?);
        }
        Ok(out)
    }

    /// `rlc rollout status --json` (asking the controllers too).
    pub(super) async fn status_json(&self) -> Result<serde_json::Value> {
        let mut args = vec![
            "status".to_string(),
            "--json".into(),
            "--db".into(),
            self.db.clone(),
        ];
        for r in &self.regions {
            args.push("--controller".into());
            args.push(r.addr.to_string());
        }
        let out = self.rollout(args).await?;
        anyhow::ensure!(out.status.success(), "{}", text(&out));
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

/// Polls `check` every 50 ms until it holds, for at most `within`.
pub(super) async fn until<F, Fut>(within: Duration, what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await.unwrap_or(false) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A finished process's stdout and stderr, for messages.
pub(super) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for a child to exit (at most `within`) and returns its exit code.
pub(super) async fn wait_exit(child: &mut ChildGuard, within: Duration) -> Result<i32> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(st) = child.try_exited() {
            return st.code().context("killed by a signal");
        }
        if tokio::time::Instant::now() > deadline {
            bail!("did not exit within {within:?}:\n{}", child.output_tail(60));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One day of `gateway-pay` history at `rps` (±5 %), a point every 5 minutes.
fn write_history(dir: &std::path::Path, rps: f64) -> Result<()> {
    let svc = dir.join("payments");
    std::fs::create_dir_all(&svc)?;
    let mut csv = String::from("timestamp,value\n");
    let mut ts = NOW - 2 * 86_400;
    let mut i = 0;
    while ts <= NOW {
        let wobble = if i % 2 == 0 { 1.05 } else { 0.95 };
        csv.push_str(&format!("{ts},{:.3}\n", rps * wobble));
        ts += 300;
        i += 1;
    }
    std::fs::write(svc.join("gateway-pay.csv"), csv)?;
    Ok(())
}

async fn start_region(remote: &BareRemote, name: &'static str) -> Result<Region> {
    let (addr, metrics) = (free_addr(), free_addr());
    let controller = spawn(
        Command::new(target_bin("grl")?)
            .args(["controller", "--listen", &addr.to_string()])
            .args(["--metrics-listen", &metrics.to_string()])
            .args(["--region", name, "--config-git", &remote.url()])
            .args(["--config-ref", &format!("regions/{name}")])
            .args([
                "--interval-ms",
                &INTERVAL_MS.to_string(),
                "--poll-ms",
                "200",
            ]),
    )?;
    wait_for_tcp(addr, Duration::from_secs(60))
        .await
        .with_context(|| controller.output_tail(20))?;
    let interval = Duration::from_millis(INTERVAL_MS);
    let aggregator = grl::tier::aggregator::start(
        grl::tier::aggregator::AggregatorOptions {
            zone: format!("{name}-a"),
            region: name.into(),
            controllers: vec![addr.to_string()],
            interval,
            security: Default::default(),
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        None,
    )?;
    let clients = (0..2)
        .map(|i| {
            let mut cfg = ClientConfig::new("payments", format!("http://{}", aggregator.addr));
            cfg.zone = format!("{name}-a");
            cfg.region = name.into();
            cfg.interval = interval;
            cfg.id = format!("{name}-client-{i}");
            let c = Client::new(cfg);
            c.spawn();
            c
        })
        .collect();
    Ok(Region {
        name,
        addr,
        metrics,
        controller,
        _aggregator: aggregator,
        clients,
    })
}

/// Offers `rps` a second to each region's clients (caller `gateway`), until aborted.
async fn offer(feeds: Vec<(Vec<Client>, f64)>) {
    let tick = Duration::from_millis(10);
    let mut ticker = tokio::time::interval(tick);
    let mut carry = vec![0.0f64; feeds.len()];
    let mut next = 0usize;
    loop {
        ticker.tick().await;
        for ((clients, rps), carry) in feeds.iter().zip(carry.iter_mut()) {
            *carry += rps * tick.as_secs_f64();
            while *carry >= 1.0 {
                *carry -= 1.0;
                next += 1;
                let _ = clients[next % clients.len()].decide("gateway", "Pay/Charge");
            }
        }
    }
}

/// The `/metrics` of a tier, as `name{labels}` → value.
pub(super) async fn scrape(addr: SocketAddr) -> Result<std::collections::BTreeMap<String, f64>> {
    let text = test_support::process::http_client_builder()
        .build()?
        .get(format!("http://{addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect())
}

/// Where the configurator's work files go.
pub(super) fn path(fleet: &Fleet, name: &str) -> PathBuf {
    fleet.work.path().join(name)
}
