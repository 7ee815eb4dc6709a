//! What `rlc` says when it is misused or asked for help (issue 40): a config repo with a
//! working tree refused at start, read-only commands that create no file, help that
//! matches the behaviour.

use std::process::{Command, Output};

fn rlc(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .current_dir(dir)
        .env_remove("RLC_DB")
        .env_remove("RLC_CONFIG_REPO")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_config_repo_with_a_working_tree_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("config");
    let ok = Command::new("git")
        .args(["init", "-q"])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(ok.success());
    let repo = repo.display().to_string();
    let o = rlc(
        dir.path(),
        &[
            "run",
            "--once",
            "--mode",
            "direct",
            "--config-repo",
            &repo,
            "--db",
            "sqlite::memory:",
            "--prometheus",
            "http://127.0.0.1:1",
        ],
    );
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{e}");
    assert!(e.contains("is a repository with a working tree"), "{e}");
    assert!(e.contains("--bare"), "{e}");
    assert!(!e.contains("local push"), "{e}");
    let o = rlc(
        dir.path(),
        &["promote", "payments", "b", "--config-repo", &repo],
    );
    assert!(text(&o.stderr).contains("working tree"), "{o:?}");
}

#[test]
fn rollout_status_without_a_database_creates_none() {
    let dir = tempfile::tempdir().unwrap();
    for action in [&["status"][..], &["pause"], &["abort"]] {
        let mut args = vec!["rollout"];
        args.extend(action);
        let o = rlc(dir.path(), &args);
        assert_eq!(o.status.code(), Some(5), "{o:?}");
        assert!(
            text(&o.stderr).contains("no run history at rlc-history.db"),
            "{o:?}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn help_matches_the_behaviour() {
    let dir = tempfile::tempdir().unwrap();
    let o = rlc(dir.path(), &["--help"]);
    let help = text(&o.stdout);
    let line = help.lines().find(|l| l.contains("rollout")).unwrap();
    for sub in [
        "run", "status", "pause", "resume", "expedite", "abort", "rollback",
    ] {
        assert!(line.contains(sub), "{line}");
    }
    let o = rlc(dir.path(), &["explain", "--help"]);
    let help = text(&o.stdout);
    for unused in ["--mode", "--github-token", "--workdir", "--controller"] {
        let listed = help
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{unused} ")));
        assert!(!listed, "explain delivers nothing: {help}");
    }
    assert!(
        help.contains("--config-repo") && help.contains("--prometheus"),
        "{help}"
    );
    let o = rlc(dir.path(), &["rollout", "rollback", "--help"]);
    let help = text(&o.stdout);
    for unused in ["--max-increase", "--min-coverage", "--progress"] {
        let listed = help
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{unused} ")));
        assert!(!listed, "a rollback computes no limit: {help}");
    }
    let o = rlc(dir.path(), &["promote", "--help"]);
    let help = text(&o.stdout);
    assert!(
        !help.contains("controller"),
        "promote pushes to no controller: {help}"
    );
}

#[test]
fn logs_to_a_pipe_have_no_colours() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing to roll out from an empty repo: the run logs, then fails; either way its log
    // lines reach a pipe here.
    let o = rlc(
        dir.path(),
        &[
            "run",
            "--once",
            "--mode",
            "direct",
            "--config-repo",
            "/nonexistent/repo.git",
            "--db",
            "sqlite::memory:",
            "--prometheus",
            "http://127.0.0.1:1",
        ],
    );
    let e = text(&o.stderr);
    assert!(
        e.contains("INFO") || e.contains("WARN") || e.contains("ERROR"),
        "{e}"
    );
    assert!(!e.contains('\x1b'), "{e}");
}

#[test]
fn a_negative_number_is_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let o = rlc(
        dir.path(),
        &[
            "run",
            "--once",
            "--config-repo",
            "/x",
            "--concurrency",
            "-1",
        ],
    );
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("invalid value '-1' for '--concurrency"), "{e}");
    assert!(!e.contains("unexpected argument"), "{e}");
}
