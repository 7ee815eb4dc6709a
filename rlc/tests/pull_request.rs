//! The PR path end to end: `rlc run --once --mode pr --github-repo …` against a stand-in that
//! checks every request against GitHub's published REST description, over HTTPS with a test
//! CA, with a real bare git remote and an offline history directory.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;
use test_support::git_remote::BareRemote;
use test_support::github::GitHubStandIn;

const OWNER: &str = "acme";
const REPO: &str = "config";
const TOKEN: &str = "ghp_standin_token_0123456789";
const BRANCH: &str = "rlc/limits";
const NOW: i64 = 1_780_000_000;

use crate::ONE_BUCKET as SERVICES;

/// 28 days of a daily wave at 5 min, scaled by `scale` (median ~1000 rps at 1.0).
fn write_history(dir: &Path, scale: f64) -> Result<()> {
    let svc = dir.join("payments");
    std::fs::create_dir_all(&svc)?;
    let mut csv = String::from("timestamp,value\n");
    let mut ts = NOW - 28 * 86_400;
    while ts <= NOW {
        let phase = (ts % 86_400) as f64 / 86_400.0 * std::f64::consts::TAU;
        csv.push_str(&format!(
            "{ts},{:.3}\n",
            scale * 1000.0 * (1.0 + 0.5 * phase.sin())
        ));
        ts += 300;
    }
    std::fs::write(svc.join("gateway-pay.csv"), csv)?;
    Ok(())
}

struct Rig {
    remote: BareRemote,
    gh: GitHubStandIn,
    work: tempfile::TempDir,
}

/// What one `rlc run` did: its exit code, the review text it printed, and the API requests
/// the stand-in saw during it.
struct RunSeen {
    code: Option<i32>,
    description: String,
    requests: Vec<Value>,
    output: String,
}

impl Rig {
    async fn run(&self, scale: f64) -> Result<RunSeen> {
        let history = self.work.path().join("history");
        write_history(&history, scale)?;
        let before = self.gh.log().await?.0.len();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args(["run", "--once", "--mode", "pr", "--print-table"])
            .args(["--config-repo", &self.remote.url()])
            .arg("--history-dir")
            .arg(&history)
            .args(["--now", &NOW.to_string()])
            .arg("--db")
            .arg(format!(
                "sqlite://{}",
                self.work.path().join("runs.db").display()
            ))
            .arg("--workdir")
            .arg(self.work.path().join("checkout"))
            .args(["--github-repo", &format!("{OWNER}/{REPO}")])
            .args(["--github-api", &self.gh.api_url()])
            .arg("--github-ca")
            .arg(self.gh.ca_file())
            .env("RLC_GITHUB_TOKEN", TOKEN)
            .env("RUST_LOG", "info")
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "the token must never be logged"
        );
        let description = stdout
            .split_once('\n')
            .map(|(_, rest)| rest.trim_end().to_string())
            .unwrap_or_default();
        let requests = self.gh.log().await?.0.split_off(before);
        Ok(RunSeen {
            code: out.status.code(),
            description,
            requests,
            output: format!("{stdout}\n{stderr}"),
        })
    }

    /// Pull requests from the review branch into `main`, as the stand-in holds them.
    async fn review_pulls(&self) -> Result<Vec<Value>> {
        Ok(self
            .gh
            .pulls()
            .await?
            .into_iter()
            .filter(|p| p["head"] == BRANCH && p["base"] == "main")
            .collect())
    }
}

fn calls(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["status"],
                r["method"].as_str().unwrap_or(""),
                r["operation"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// A pull request's body as the run printed it (without the trailing newline).
fn body(pr: &Value) -> &str {
    pr["body"].as_str().unwrap_or("").trim_end()
}

fn open_one(pulls: &[Value]) -> Result<&Value> {
    let open: Vec<&Value> = pulls.iter().filter(|p| p["state"] == "open").collect();
    anyhow::ensure!(open.len() == 1, "exactly one open review PR: {pulls:#?}");
    Ok(open[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_mode_opens_updates_and_after_merge_or_close_opens_a_fresh_pull_request() -> Result<()> {
    let remote = BareRemote::with_files(&[
        ("services/payments.yaml", SERVICES),
        ("README.md", "config repo\n"),
    ])?;
    let gh = GitHubStandIn::start(remote.path(), OWNER, REPO, TOKEN).await?;
    // The review branch is also open against 120 release branches: the open one into main
    // is only found on the second page of the lookup.
    for i in 0..120 {
        gh.seed(BRANCH, &format!("release/{i}"), "backport").await?;
    }
    let rig = Rig {
        remote,
        gh,
        work: tempfile::tempdir()?,
    };

    // 1. First proposal: the branch is pushed and the pull request opened.
    let first = rig.run(1.0).await?;
    assert_eq!(first.code, Some(0), "{}", first.output);
    assert_eq!(
        calls(&first.requests),
        [
            "200 GET pulls/list",
            "200 GET pulls/list",
            "201 POST pulls/create"
        ],
        "lookup pages through both pages, then creates"
    );
    let page2 = first.requests[1]["query"].as_str().unwrap_or("");
    assert!(page2.contains("page=2"), "followed rel=next: {page2}");
    let pulls = rig.review_pulls().await?;
    let pr = open_one(&pulls)?;
    let number = pr["number"].as_u64().context("number")?;
    assert!(first.description.contains("| bucket | old | new |"));
    assert_eq!(body(pr), first.description, "the body is the review table");
    assert_eq!(pr["title"], "rlc: rate limit changes");
    assert!(rig.remote.branch_exists(BRANCH));

    // 2. A new proposal updates the same pull request.
    let second = rig.run(1.5).await?;
    assert_eq!(second.code, Some(0), "{}", second.output);
    assert_eq!(
        calls(&second.requests),
        [
            "200 GET pulls/list",
            "200 GET pulls/list",
            "200 PATCH pulls/update"
        ]
    );
    assert_eq!(
        second.requests[2]["path"],
        format!("/repos/{OWNER}/{REPO}/pulls/{number}")
    );
    let pulls = rig.review_pulls().await?;
    let pr = open_one(&pulls)?;
    assert_eq!(pr["number"], number, "no second pull request");
    assert_ne!(second.description, first.description);
    assert_eq!(body(pr), second.description, "body table updated");
    assert_eq!(
        second.requests[2]["body"]["title"], "rlc: rate limit changes",
        "title sent with the update"
    );

    // 3. The lookup misses the open pull request: create meets GitHub's 422 "already
    //    exists", and the run looks again and updates it.
    rig.gh.stale_list_once().await?;
    let third = rig.run(2.2).await?;
    assert_eq!(third.code, Some(0), "{}", third.output);
    assert_eq!(
        calls(&third.requests),
        [
            "200 GET pulls/list",
            "422 POST pulls/create",
            "200 GET pulls/list",
            "200 GET pulls/list",
            "200 PATCH pulls/update"
        ]
    );
    let pulls = rig.review_pulls().await?;
    assert_eq!(open_one(&pulls)?["number"], number);
    assert_eq!(body(open_one(&pulls)?), third.description);

    // 4. Merged: the next proposal goes on a branch rebuilt from the new main, in a new PR.
    rig.gh.merge(number).await?;
    let merged_main = rig.remote.log("main");
    assert_eq!(
        merged_main[0],
        rig.remote.log(BRANCH)[0],
        "fast-forward merge"
    );
    let fourth = rig.run(3.2).await?;
    assert_eq!(fourth.code, Some(0), "{}", fourth.output);
    assert_eq!(
        calls(&fourth.requests),
        [
            "200 GET pulls/list",
            "200 GET pulls/list",
            "201 POST pulls/create"
        ]
    );
    let pulls = rig.review_pulls().await?;
    let fresh = open_one(&pulls)?;
    let second_number = fresh["number"].as_u64().context("number")?;
    assert_ne!(second_number, number, "a merged PR is not reused");
    assert_eq!(body(fresh), fourth.description);
    let old = pulls.iter().find(|p| p["number"] == number).unwrap();
    assert!(
        old["state"] == "closed" && !old["merged_at"].is_null(),
        "{old}"
    );
    let branch = rig.remote.log(BRANCH);
    assert_eq!(
        branch[1], merged_main[0],
        "branch rebuilt on the merged main"
    );

    // 5. Closed without merging: again a fresh pull request for the next proposal. The
    //    branch is never force-pushed: the new commit descends from the closed one's tip and
    //    carries main's files plus the new limits.
    rig.gh.close(second_number).await?;
    let closed_tip = rig.remote.log(BRANCH)[0].clone();
    let fifth = rig.run(4.7).await?;
    assert_eq!(fifth.code, Some(0), "{}", fifth.output);
    assert_eq!(
        calls(&fifth.requests),
        [
            "200 GET pulls/list",
            "200 GET pulls/list",
            "201 POST pulls/create"
        ]
    );
    let pulls = rig.review_pulls().await?;
    let third_pr = open_one(&pulls)?;
    assert!(third_pr["number"] != number && third_pr["number"] != second_number);
    assert_eq!(body(third_pr), fifth.description);
    assert_eq!(rig.remote.log(BRANCH)[1], closed_tip, "no force push");
    for path in ["services/payments.yaml", "README.md"] {
        assert_eq!(
            rig.remote.read_file_at(BRANCH, path),
            rig.remote.read_file_at("main", path),
            "{path} on the branch is main's"
        );
    }

    let (requests, violations) = rig.gh.log().await?;
    assert!(
        violations.is_empty(),
        "requests outside GitHub's REST description: {violations:#?}"
    );
    assert_eq!(requests.len(), 3 + 3 + 5 + 3 + 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_pull_request_exits_7_with_the_branch_pushed() -> Result<()> {
    let remote = BareRemote::with_files(&[
        ("services/payments.yaml", SERVICES),
        ("README.md", "config repo\n"),
    ])?;
    let gh = GitHubStandIn::start(remote.path(), OWNER, "other-repo", TOKEN).await?;
    let rig = Rig {
        remote,
        gh,
        work: tempfile::tempdir()?,
    };
    let run = rig.run(1.0).await?;
    assert_eq!(run.code, Some(7), "{}", run.output);
    assert!(run.output.contains("404"), "{}", run.output);
    assert!(
        rig.remote.branch_exists(BRANCH),
        "the branch is pushed anyway"
    );
    let (_, violations) = rig.gh.log().await?;
    assert!(violations.is_empty(), "{violations:#?}");
    Ok(())
}
