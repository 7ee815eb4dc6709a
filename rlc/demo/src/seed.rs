//! The demo's inputs: a bare config repo from the `config-repo/` template and offline
//! history files made from the embedded real traffic series.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use policies::Series;

/// The template files, embedded so the demo needs nothing but the binary.
const TEMPLATE: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../config-repo/README.md")),
    (
        "services/payments.yaml",
        include_str!("../../../config-repo/services/payments.yaml"),
    ),
    (
        "limits/payments.yaml",
        include_str!("../../../config-repo/limits/payments.yaml"),
    ),
];

/// The embedded real series: AWS ELB request counts from the Numenta Anomaly Benchmark (MIT
/// licence), the repository's one copy in `tests/data/traffic/` (see its README).
const TRAFFIC: &str = include_str!("../../../tests/data/traffic/elb_request_count_8c0756.csv");

/// Median request rate the demo gives each computed bucket.
pub(super) const MEDIANS: &[(&str, f64)] = &[("gateway-pay", 200.0), ("refunds", 40.0)];

/// Creates a bare repo at `path` with the template on `main`; returns its URL.
pub(super) fn config_repo(path: &Path) -> anyhow::Result<String> {
    bare_repo(path, TEMPLATE, "config repo from the template")?;
    Ok(path.display().to_string())
}

/// Creates a bare repo at `path` (replacing any) with `files` committed on `main`; returns
/// the commit.
pub(super) fn bare_repo(
    path: &Path,
    files: &[(&str, &str)],
    message: &str,
) -> anyhow::Result<String> {
    if path.exists() {
        std::fs::remove_dir_all(path)?;
    }
    git2::Repository::init_opts(
        path,
        git2::RepositoryInitOptions::new()
            .bare(true)
            .initial_head("main"),
    )?;
    commit(path, files, message)
}

/// Commits `files` (added or replaced) on `main` of the bare repo at `path`, as a person
/// would; returns the commit.
pub(super) fn commit(path: &Path, files: &[(&str, &str)], message: &str) -> anyhow::Result<String> {
    let repo = git2::Repository::open_bare(path)?;
    let parent = repo
        .find_reference("refs/heads/main")
        .ok()
        .and_then(|r| r.peel_to_commit().ok());
    let base = match &parent {
        Some(c) => c.tree()?,
        None => repo.find_tree(repo.treebuilder(None)?.write()?)?,
    };
    let mut update = git2::build::TreeUpdateBuilder::new();
    for (p, content) in files {
        update.upsert(*p, repo.blob(content.as_bytes())?, git2::FileMode::Blob);
    }
    let tree = repo.find_tree(update.create_updated(&repo, &base)?)?;
    let sig = git2::Signature::now("demo", "demo@grl.local")?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let id = repo.commit(
        Some("refs/heads/main"),
        &sig,
        &sig,
        message,
        &tree,
        &parents,
    )?;
    Ok(id.to_string())
}

/// Points branch `name` of the bare repo at `path` at `commit`.
pub(super) fn set_branch(path: &Path, name: &str, commit: &str) -> anyhow::Result<()> {
    let repo = git2::Repository::open_bare(path)?;
    let c = repo.find_commit(git2::Oid::from_str(commit)?)?;
    repo.branch(name, &c, true)?;
    Ok(())
}

/// Writes `<dir>/payments/<bucket>.csv` for each computed bucket: the real series stretched
/// to 28 days, scaled to the bucket's median, ending at `now`.
pub(super) fn history(dir: &Path, now: i64) -> anyhow::Result<PathBuf> {
    history_of(dir, now, MEDIANS)
}

/// [`history`] for the buckets and medians given.
pub(super) fn history_of(dir: &Path, now: i64, medians: &[(&str, f64)]) -> anyhow::Result<PathBuf> {
    let series = Series::from_csv_str(TRAFFIC).map_err(|e| anyhow::anyhow!("demo traffic: {e}"))?;
    let first = series.points.first().context("empty demo traffic")?.ts;
    let last = series.points.last().context("empty demo traffic")?.ts;
    let span = last - first + series.step_secs;
    let mut values: Vec<f64> = series.points.iter().map(|p| p.value).collect();
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2].max(1.0);
    let out = dir.join("payments");
    std::fs::create_dir_all(&out)?;
    for (bucket, target) in medians {
        let mut text = String::from("timestamp,value\n");
        for copy in (0..2).rev() {
            for p in &series.points {
                let ts = now - (last - p.ts) - copy * span;
                let rps = p.value / median * target;
                text.push_str(&format!("{ts},{rps:.3}\n"));
            }
        }
        std::fs::write(out.join(format!("{bucket}.csv")), text)?;
    }
    Ok(dir.to_path_buf())
}
