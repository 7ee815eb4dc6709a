//! Symbolic links committed to the config repo (issue 24, item 7), with `rlc` as a process:
//! a link's blob is only the target's path, but a work tree checks it out as a real link,
//! and reading through it would hand `rlc` (and the commit it pushes) any file it can read.
//! `rlc run` and `rlc promote` refuse such a file by name, echo neither the target nor its
//! content, and change nothing.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use test_support::git_remote::BareRemote;

/// A secret no output and no commit may contain.
const PLANTED: &str = "planted-secret-41b7c9";

/// A file outside the repository that parses as a service file, with the secret in it.
fn secret_service(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("elsewhere.yaml");
    let text = super::ONE_BUCKET.replace("mode: deny", "mode: shadow")
        + &format!("description: {PLANTED}\n");
    std::fs::write(&path, text).unwrap();
    path
}

fn rlc(args: &[&str], work: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .arg("--workdir")
        .arg(work)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn rlc_promote_refuses_a_service_file_that_is_a_symlink() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let target = secret_service(dir.path());
    let remote = BareRemote::with_files(&[("services/payments.yaml", super::ONE_BUCKET)])?;
    remote.commit_symlink("services/payments.yaml", &target.display().to_string())?;
    let before = remote.log("main");
    let (code, out) = rlc(
        &[
            "promote",
            "payments",
            "gateway-pay",
            "--config-repo",
            &remote.url(),
            "--mode",
            "direct",
        ],
        &dir.path().join("work"),
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "promoted through the link:\n{out}"
    );
    assert!(out.contains("services/payments.yaml"), "{out}");
    assert!(out.contains("symbolic link"), "{out}");
    assert!(
        !out.contains(PLANTED),
        "the target's content was printed:\n{out}"
    );
    assert!(!out.contains(&target.display().to_string()), "{out}");
    assert_eq!(remote.log("main"), before, "a commit was pushed");
    Ok(())
}

#[test]
fn rlc_run_refuses_a_config_repo_with_a_symlink() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let target = secret_service(dir.path());
    let remote = BareRemote::with_files(&[("services/payments.yaml", super::ONE_BUCKET)])?;
    remote.commit_symlink("services/orders.yaml", &target.display().to_string())?;
    let before = remote.log("main");
    let down = format!("http://127.0.0.1:{}", test_support::ports::free_port());
    let db = format!("sqlite://{}", dir.path().join("history.db").display());
    let (code, out) = rlc(
        &[
            "run",
            "--once",
            "--config-repo",
            &remote.url(),
            "--prometheus",
            &down,
            "--mode",
            "direct",
            "--db",
            &db,
        ],
        &dir.path().join("work"),
    );
    assert_eq!(
        code,
        Some(4),
        "a config repo problem is a git failure (exit 4):\n{out}"
    );
    assert!(out.contains("services/orders.yaml"), "{out}");
    assert!(out.contains("symbolic link"), "{out}");
    assert!(!out.contains(PLANTED), "{out}");
    assert!(!out.contains(&target.display().to_string()), "{out}");
    assert_eq!(remote.log("main"), before);
    Ok(())
}
