//! `deploy/seed-config-repo.sh`: creates the bare config repo and its checkout from the
//! `config-repo/` template, and leaves them alone on a second run.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};

use super::{deploy_file, repo_root};

#[test]
fn seed_script_creates_the_config_repo_once() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (bare, checkout) = (
        tmp.path().join("git/config.git"),
        tmp.path().join("checkout"),
    );
    let run = || -> Result<String> {
        let out = Command::new("sh")
            .arg(repo_root().join(deploy_file("seed-config-repo.sh")))
            .env("SEED_DIR", repo_root().join("config-repo"))
            .env("BARE_REPO", &bare)
            .env("CHECKOUT_DIR", &checkout)
            .output()
            .context("running seed-config-repo.sh")?;
        ensure!(
            out.status.success(),
            "seed-config-repo.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let repo = git2::Repository::open_bare(&bare)?;
        let head = repo.find_reference("refs/heads/main")?.peel_to_commit()?;
        for file in [
            "services/payments.yaml",
            "limits/payments.yaml",
            "README.md",
        ] {
            head.tree()?
                .get_path(Path::new(file))
                .with_context(|| format!("{file} is not on main"))?;
            ensure!(
                checkout.join(file).is_file(),
                "{file} is not in the checkout"
            );
        }
        Ok(head.id().to_string())
    };
    let first = run()?;
    let again = run()?;
    ensure!(
        first == again,
        "a second run must leave the seeded repo as it is"
    );
    Ok(())
}
