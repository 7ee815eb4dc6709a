//! `rlc demo --rollout`: a staged rollout on one machine, in well under two minutes.
//!
//! Creates a bare config repo with a `rollout.yaml` (waves `[r1]`, `[r2]`, short bakes), one
//! branch `regions/<r>` per region, and 28 days of a partner's history (the embedded NAB
//! series, a quiet partner); starts two regions in-process (a controller following its
//! region's branch, an aggregator, two clients each) with the partner now sending 200 rps
//! to each; then rolls out two commits of a person with the configurator's rollout driver:
//! a good one (the partner's quota raised, both waves pass) and a bad one (cut ten times
//! below today's traffic, predicted from yesterday's to drop next to nothing: r1 moves,
//! drops ~90 %, its gate fails, r1 goes back, r2 never moves). Prints what an operator sees
//! (`rlc rollout run`'s lines, each region every second, `rlc rollout status`) and whether
//! the demo behaved as described.

mod regions;

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use rlc::drive::rollout::outcome::short;
use rlc::drive::rollout::state::{RegionState, RolloutRecord};
use rlc::drive::rollout::status::StatusView;
use rlc::drive::rollout::{RolloutMetrics, RolloutOutcome, RolloutSettings};
use rlc::input::source::FileSource;
use rlc::run_log::RunLog;

use self::regions::{Regions, Watch};
use super::seed;

const SERVICE: &str = "payments";
const BUCKET: &str = "partner-acme";
const CALLER: &str = "partner-acme";
const REGIONS: [&str; 2] = ["r1", "r2"];
/// What the partner sends each region now.
const LIVE_RPS: f64 = 200.0;
/// The partner's median over the 28 days of history (it was quiet until today).
const HISTORY_MEDIAN_RPS: f64 = 4.0;
/// The partner's quota at the start.
const START_RPS: f64 = 300.0;
/// The quota after the good change (the contract raised).
const GOOD_RPS: f64 = 400.0;
/// The quota after the bad change: ten times below today's traffic.
const BAD_RPS: f64 = 20.0;
/// Each wave's bake.
const BAKE: &str = "5s";

fn services(rps: f64) -> String {
    format!(
        "# The payments service: one partner with a contract, a fixed quota per region.\n\
         service: {SERVICE}\nbuckets:\n  - name: {BUCKET}\n    match: {{ caller: {CALLER} }}\n    \
         scope: region\n    mode: deny\n    policy: {{ kind: fixed, rps: {rps} }}\n"
    )
}

fn plan() -> String {
    format!(
        "# Each change reaches r1 first; r2 only once r1 baked {BAKE} and passed its gates.\n\
         waves:\n  - regions: [r1]\n    bake: {BAKE}\n  - regions: [r2]\n    bake: {BAKE}\n\
         gates:\n  max_drop_over_prediction: 0.02\napply_timeout: 20s\n"
    )
}

/// Runs the rollout demo in `root`; whether it behaved as described.
pub(super) async fn run(root: &Path, interval: Duration) -> anyhow::Result<bool> {
    let now = chrono::Utc::now().timestamp();
    let repo_path = root.join("config.git");
    let repo = repo_path.display().to_string();
    println!("== 1. config repo {repo}: services/payments.yaml and rollout.yaml");
    let base = seed::bare_repo(
        &repo_path,
        &[
            ("services/payments.yaml", services(START_RPS).as_str()),
            ("limits/payments.yaml", "service: payments\nlimits: {}\n"),
            ("rollout.yaml", plan().as_str()),
        ],
        "payments: partner-acme 300 rps per region; staged rollouts",
    )?;
    for r in REGIONS {
        seed::set_branch(&repo_path, &format!("regions/{r}"), &base)?;
    }
    println!("{}", indent(&plan()));
    println!(
        "== 2. history: 28 days of {SERVICE}/{BUCKET} (NAB elb series, MIT licence), median {HISTORY_MEDIAN_RPS} rps: the predictions read it"
    );
    let history_dir =
        seed::history_of(&root.join("history"), now, &[(BUCKET, HISTORY_MEDIAN_RPS)])?;
    println!(
        "\n== 3. two regions in-process: a controller following regions/<r>, an aggregator, 2 clients each; {CALLER} now sends {LIVE_RPS:.0} rps to each"
    );
    let regions = Regions::start(&repo, &REGIONS, interval, LIVE_RPS).await?;
    let db = format!("sqlite://{}", root.join("rlc-history.db").display());
    let history = RunLog::connect(&db).await.context("run history")?;
    let source = FileSource::open(&history_dir)?;
    let settings = RolloutSettings {
        config_repo: repo.clone(),
        workdir: root.join("rollout-checkout"),
        controllers: regions.controllers(),
        auth: Default::default(),
        prometheus: None,
        poll: Duration::from_millis(250),
        now: Some(now),
        expedite: None,
        run_id: None,
        github: None,
        metrics: RolloutMetrics::default(),
    };
    let demo = Demo {
        repo_path: &repo_path,
        regions: &regions,
        history: &history,
        source: &source,
        settings: &settings,
    };

    println!(
        "\n== 4. a good change: the partner's contract raised, {BUCKET} {START_RPS:.0} → {GOOD_RPS:.0} rps"
    );
    let good = seed::commit(
        &repo_path,
        &[("services/payments.yaml", services(GOOD_RPS).as_str())],
        "payments: partner-acme 400 rps per region (contract raised)",
    )?;
    let (good_out, good_watch) = demo.roll_out(&good).await?;
    let good_record = demo.record(&good).await?;

    println!(
        "\n== 5. a bad change: {BUCKET} {GOOD_RPS:.0} → {BAD_RPS:.0} rps, ten times below today's traffic (yesterday's history says it drops next to nothing)"
    );
    let bad = seed::commit(
        &repo_path,
        &[("services/payments.yaml", services(BAD_RPS).as_str())],
        "payments: partner-acme 20 rps per region (tidy: about its usual peak)",
    )?;
    let (bad_out, bad_watch) = demo.roll_out(&bad).await?;
    let bad_record = demo.record(&bad).await?;

    println!("\n== verdict");
    let mut checks = vec![
        (
            "the good change passed both waves",
            good_out
                .iter()
                .any(|o| matches!(o, RolloutOutcome::Passed { commit, .. } if *commit == good))
                && waves(&good_record) == ["passed", "passed"],
        ),
        (
            "r1 moved before r2, a bake apart",
            moved_apart(&good_record, Duration::from_secs(5)),
        ),
        (
            "the bad change failed wave 1 on r1's dropped share of payments/partner-acme",
            failed_on_r1(&bad_out),
        ),
        (
            "r1 ran the bad change, then went back to the good one",
            bad_watch.ran("r1", &bad)
                && bad_record
                    .region("r1")
                    .is_some_and(|g| g.state == RegionState::RolledBack),
        ),
        (
            "r2 never moved",
            !bad_watch.ran("r2", &bad)
                && bad_record
                    .region("r2")
                    .is_some_and(|g| g.state == RegionState::Pending && g.moved_at_ms.is_none()),
        ),
    ];
    let mut both_good = true;
    for r in REGIONS {
        let v = regions.version(r).await;
        both_good &= v.split('+').next() == Some(good.as_str());
    }
    checks.push(("both regions run the good change at the end", both_good));
    checks.push((
        "both regions ran the good change during its rollout",
        REGIONS.iter().all(|r| good_watch.ran(r, &good)),
    ));
    let mut ok = true;
    for (what, held) in &checks {
        println!("  [{}] {what}", if *held { "ok" } else { "FAILED" });
        ok &= held;
    }
    println!(
        "{}",
        if ok {
            "the demo behaved as described"
        } else {
            "the demo did NOT behave as described"
        }
    );
    Ok(ok)
}

/// What the demo's rollouts need.
struct Demo<'a> {
    repo_path: &'a Path,
    regions: &'a Regions,
    history: &'a RunLog,
    source: &'a FileSource,
    settings: &'a RolloutSettings,
}

impl Demo<'_> {
    /// Rolls `commit` out as `rlc rollout run` does, printing the regions each second and
    /// what `rlc rollout run` and `rlc rollout status` print.
    async fn roll_out(&self, commit: &str) -> anyhow::Result<(Vec<RolloutOutcome>, Watch)> {
        println!(
            "$ rlc rollout run …            # commit {} on main",
            short(commit)
        );
        println!(
            "  (each region's controller, every second: version, {BUCKET}'s limit, offered and dropped)"
        );
        let mut watch = Watch::new();
        let rollout = rlc::drive::rollout::run(self.settings, self.history, self.source);
        tokio::pin!(rollout);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let outcomes = loop {
            tokio::select! {
                out = &mut rollout => break out.context("rollout")?,
                _ = tick.tick() => watch.line(self.regions).await,
            }
        };
        watch.line(self.regions).await;
        for o in &outcomes {
            for line in o.lines() {
                println!("{line}");
            }
        }
        let record = self.record(commit).await?;
        let views = rlc::drive::rollout::controllers::discover(
            &self.regions.controllers(),
            &self.settings.auth,
        )
        .await;
        println!("$ rlc rollout status --controller …");
        println!("{}", indent(&StatusView::new(&record, &views).render(true)));
        let tips: Vec<String> = REGIONS
            .iter()
            .map(|r| {
                let tip = git2::Repository::open_bare(self.repo_path)
                    .ok()
                    .and_then(|repo| repo.refname_to_id(&format!("refs/heads/regions/{r}")).ok())
                    .map(|id| id.to_string())
                    .unwrap_or_default();
                format!("regions/{r} → {}", short(&tip))
            })
            .collect();
        println!("  branches: {}", tips.join(", "));
        Ok((outcomes, watch))
    }

    async fn record(&self, commit: &str) -> anyhow::Result<RolloutRecord> {
        self.history
            .rollout_of_commit(commit)
            .await?
            .with_context(|| format!("no rollout of {} in the run history", short(commit)))
    }
}

fn waves(r: &RolloutRecord) -> Vec<&str> {
    r.waves.iter().map(|w| w.result.as_str()).collect()
}

/// Whether r2 moved at least `bake` after r1.
fn moved_apart(r: &RolloutRecord, bake: Duration) -> bool {
    let at = |name| r.region(name).and_then(|g| g.moved_at_ms);
    matches!((at("r1"), at("r2")), (Some(a), Some(b)) if b - a >= bake.as_millis() as i64)
}

/// Whether the outcome is wave 1 failing on r1's dropped share of the partner's bucket,
/// with r1 rolled back.
fn failed_on_r1(outcomes: &[RolloutOutcome]) -> bool {
    let Some(RolloutOutcome::Failed {
        wave: 1,
        failures,
        rolled_back,
        ..
    }) = outcomes.last()
    else {
        return false;
    };
    let bucket = format!("{SERVICE}/{BUCKET}");
    failures.iter().any(|f| {
        f.region == "r1"
            && f.gate == "max_drop_over_prediction"
            && f.bucket.as_deref() == Some(bucket.as_str())
            && f.observed
                .zip(f.predicted)
                .is_some_and(|(o, p)| o > p + 0.5)
    }) && rolled_back.iter().map(|(r, _)| r.as_str()).eq(["r1"])
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("  {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
