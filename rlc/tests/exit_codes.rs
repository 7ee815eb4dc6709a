//! Every exit code of `rlc run --once` that the README states, through the real binary with
//! a real failing part: 0 committed or nothing to change, 2 bad usage, 3 metrics source,
//! 4 config repo, 5 run history database, 6 invalid config, 7 controller not updated after
//! the commit, 1 anything else.

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::Result;
use test_support::git_remote::{BareRemote, GitDaemon};
use test_support::ports::free_port;

const NOW: i64 = 1_780_000_000;

use crate::ONE_BUCKET as SERVICES;

/// A config remote, an offline history with 28 days for `gateway-pay`, and a work dir.
struct Case {
    remote: BareRemote,
    work: tempfile::TempDir,
}

impl Case {
    fn new(files: &[(&str, &str)]) -> Result<Case> {
        let work = tempfile::tempdir()?;
        let dir = work.path().join("history/payments");
        std::fs::create_dir_all(&dir)?;
        let csv: String = (0..=28 * 288)
            .map(|i| {
                let ts = NOW - 28 * 86_400 + i * 300;
                format!("{ts},{}\n", 800 + (i % 288))
            })
            .collect();
        std::fs::write(dir.join("gateway-pay.csv"), csv)?;
        Ok(Case {
            remote: BareRemote::with_files(files)?,
            work,
        })
    }

    fn valid() -> Result<Case> {
        Case::new(&[("services/payments.yaml", SERVICES)])
    }

    fn db(&self) -> String {
        format!("sqlite://{}", self.work.path().join("runs.db").display())
    }

    fn history(&self) -> PathBuf {
        self.work.path().join("history")
    }

    /// `rlc run --once --mode direct` with these flags; `extra` comes last (with its own
    /// `--workdir`, the case's is left out).
    fn run(&self, repo: &str, db: &str, extra: &[&str]) -> Result<Output> {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"));
        cmd.args(["run", "--once", "--mode", "direct", "--config-repo", repo])
            .args(["--db", db, "--now", &NOW.to_string()]);
        if !extra.contains(&"--workdir") {
            cmd.arg("--workdir").arg(self.work.path().join("checkout"));
        }
        Ok(cmd.args(extra).output()?)
    }

    fn run_ok_parts(&self, extra: &[&str]) -> Result<Output> {
        let history = self.history();
        let mut args = vec!["--history-dir", history.to_str().unwrap()];
        args.extend(extra);
        self.run(&self.remote.url(), &self.db(), &args)
    }
}

fn assert_code(out: &Output, code: i32, names: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(names),
        "the error names {names:?}:\n{stderr}"
    );
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn exit_0_committed_then_0_nothing_to_change() -> Result<()> {
    let case = Case::valid()?;
    let out = case.run_ok_parts(&[])?;
    assert_code(&out, 0, "");
    assert!(String::from_utf8_lossy(&out.stdout).contains("committed"));
    assert_eq!(case.remote.log("main").len(), 2, "one commit by the run");
    let again = case.run_ok_parts(&[])?;
    assert_code(&again, 0, "");
    assert!(String::from_utf8_lossy(&again.stdout).contains("no-change"));
    assert_eq!(case.remote.log("main").len(), 2, "nothing committed again");
    Ok(())
}

#[test]
fn exit_2_on_bad_usage() -> Result<()> {
    let case = Case::valid()?;
    let out = case.run_ok_parts(&["--concurrency", "lots"])?;
    assert_code(&out, 2, "lots");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(["run", "--config-repo", &case.remote.url()])
        .arg("--history-dir")
        .arg(case.history())
        .output()?;
    assert_code(&out, 2, "--once");
    assert_eq!(case.remote.log("main").len(), 1);
    Ok(())
}

#[test]
fn exit_3_when_prometheus_is_unreachable() -> Result<()> {
    let case = Case::valid()?;
    let down = format!("http://127.0.0.1:{}", free_port());
    let out = case.run(&case.remote.url(), &case.db(), &["--prometheus", &down])?;
    assert_code(&out, 3, &down);
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

#[test]
fn exit_4_when_the_config_remote_is_unreachable_or_refuses() -> Result<()> {
    let case = Case::valid()?;
    let history = path_str(&case.history());
    let unreachable = format!("git://127.0.0.1:{}/config.git", free_port());
    let out = case.run(&unreachable, &case.db(), &["--history-dir", &history])?;
    assert_code(&out, 4, "127.0.0.1");

    let refusing = GitDaemon::serve(&case.remote, true)?;
    let other = tempfile::tempdir()?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(["run", "--once", "--mode", "direct"])
        .args(["--config-repo", refusing.url(), "--db", &case.db()])
        .args(["--history-dir", &history, "--now", &NOW.to_string()])
        .arg("--workdir")
        .arg(other.path())
        .output()?;
    assert_code(&out, 4, "refs/heads/main");
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

#[test]
fn exit_5_when_the_database_cannot_be_opened() -> Result<()> {
    let case = Case::valid()?;
    let not_a_db = case.work.path().join("not-a-database");
    std::fs::write(&not_a_db, "this is a text file, not SQLite\n".repeat(200))?;
    let db = format!("sqlite://{}", not_a_db.display());
    let history = path_str(&case.history());
    let out = case.run(&case.remote.url(), &db, &["--history-dir", &history])?;
    assert_code(&out, 5, "not-a-database");
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

#[test]
fn exit_6_when_the_services_yaml_is_invalid() -> Result<()> {
    let case = Case::new(&[("services/payments.yaml", "service: payments\nbuckets: [\n")])?;
    let out = case.run_ok_parts(&[])?;
    assert_code(&out, 6, "services/payments.yaml");
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

#[test]
fn exit_7_when_the_controller_is_unreachable_after_the_commit() -> Result<()> {
    let case = Case::valid()?;
    let controller = format!("127.0.0.1:{}", free_port());
    let out = case.run_ok_parts(&["--controller", &controller])?;
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("controller push failed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        case.remote.log("main").len(),
        2,
        "the commit landed; the controller picks it up from the repo later"
    );
    Ok(())
}

#[test]
fn exit_1_for_anything_else() -> Result<()> {
    // The work directory is a regular file: a problem of this machine, not of the config
    // repo, the metrics source, the database or the config.
    let case = Case::valid()?;
    let blocker = case.work.path().join("not-a-dir");
    std::fs::write(&blocker, "a file where the clone should go\n")?;
    let workdir = blocker.join("checkout");
    let out = case.run_ok_parts(&["--workdir", workdir.to_str().unwrap()])?;
    assert_code(&out, 1, "work directory");
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

/// `rlc demo` is the `rlc-demo` binary beside `rlc`, run with its arguments (`bash
/// tests/run.sh` builds every binary); without it, exit 2 and the command that builds it.
#[test]
fn rlc_demo_runs_the_demo_binary_beside_it_or_says_what_to_build() -> Result<()> {
    let rlc = PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    test_support::process::target_bin("rlc-demo")?;
    let out = std::process::Command::new(&rlc)
        .args(["demo", "--help"])
        .output()?;
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(
        help.contains("rlc-demo") && help.contains("--rollout"),
        "rlc-demo's own help: {help}"
    );

    let alone = tempfile::tempdir()?;
    let copy = alone.path().join("rlc");
    std::fs::copy(&rlc, &copy)?;
    let out = std::process::Command::new(&copy)
        .args(["demo", "--seconds", "12"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cargo build --release -p rlc-demo"),
        "says what to build: {stderr}"
    );
    Ok(())
}
