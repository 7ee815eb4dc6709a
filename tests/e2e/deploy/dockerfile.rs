//! `deploy/Dockerfile` and its `Dockerfile.dockerignore`: a multi-stage build on the pinned
//! toolchain that builds, by package, every binary the compose file runs and ships it in a slim
//! runtime with git, from a build context that is the whole workspace minus build output.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use anyhow::{Context, Result, anyhow, ensure};

use super::compose_file::Compose;
use super::{deploy_file, read_repo_file, repo_root};

/// The Dockerfile's instructions, continuation lines joined and comments dropped.
fn instructions() -> Result<Vec<String>> {
    let text = read_repo_file(&deploy_file("Dockerfile"))?;
    let mut instrs = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => cur.push_str(part),
            None => {
                cur.push_str(line);
                instrs.push(std::mem::take(&mut cur));
            }
        }
    }
    Ok(instrs)
}

/// The binary targets of each workspace package, from `cargo metadata`.
fn workspace_bins() -> Result<BTreeMap<String, BTreeSet<String>>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(repo_root())
        .output()
        .context("running cargo metadata")?;
    ensure!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata printed no JSON")?;
    let mut bins = BTreeMap::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        let name = pkg["name"]
            .as_str()
            .ok_or_else(|| anyhow!("a package without a name in cargo metadata"))?;
        let targets = pkg["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
            })
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        bins.insert(name.to_string(), targets);
    }
    Ok(bins)
}

/// The packages a `cargo build` command line selects with `-p`/`--package`.
fn selected_packages(cargo: &str) -> BTreeSet<String> {
    let words: Vec<&str> = cargo.split_whitespace().collect();
    let mut out = BTreeSet::new();
    for (i, w) in words.iter().enumerate() {
        if let Some(p) = w.strip_prefix("--package=") {
            out.insert(p.to_string());
        } else if (*w == "-p" || *w == "--package")
            && let Some(p) = words.get(i + 1)
        {
            out.insert(p.to_string());
        }
    }
    out
}

#[test]
fn dockerfile_builds_every_binary_compose_runs() -> Result<()> {
    let instrs = instructions()?;
    let froms: Vec<&String> = instrs.iter().filter(|i| i.starts_with("FROM ")).collect();
    ensure!(
        froms.len() >= 2,
        "expected a multi-stage build, found {} stages",
        froms.len()
    );
    let first: Vec<&str> = froms[0].split_whitespace().collect();
    ensure!(
        first.len() == 4 && first[1].starts_with("rust:1.95") && first[2] == "AS",
        "the builder must be `FROM rust:1.95... AS <name>`: {}",
        froms[0]
    );
    let builder = first[3];
    let runtime = froms.last().expect("two stages");
    ensure!(
        runtime.split_whitespace().nth(1) == Some("debian:bookworm-slim"),
        "the runtime stage must be debian:bookworm-slim: {runtime}"
    );
    // glibc: a builder on a newer Debian than bookworm makes binaries that do not start.
    ensure!(
        first[1].contains("bookworm"),
        "the builder must be bookworm-based like the runtime: {}",
        first[1]
    );

    let last_from = instrs
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    let (build_stage, runtime_stage) = instrs.split_at(last_from);
    let cargo = build_stage
        .iter()
        .find(|i| i.contains("cargo build"))
        .ok_or_else(|| anyhow!("the builder stage runs no `cargo build`"))?;
    ensure!(
        cargo.contains("--release"),
        "cargo build must use --release"
    );
    ensure!(
        runtime_stage
            .iter()
            .any(|i| i.starts_with("RUN") && i.contains("install") && i.contains(" git")),
        "the runtime image must install git"
    );

    let bins: BTreeSet<String> = Compose::load()?
        .invocations()?
        .into_iter()
        .map(|i| i.bin)
        .collect();
    ensure!(
        bins.contains("grl") && bins.contains("rlc"),
        "compose should run both grl and rlc, runs {bins:?}"
    );
    // Binaries are built by package name, so moving a crate in the workspace changes nothing.
    let packages = workspace_bins()?;
    let selected = selected_packages(cargo);
    ensure!(
        !selected.is_empty(),
        "cargo build must name its packages with -p: {cargo}"
    );
    for pkg in &selected {
        ensure!(
            packages.contains_key(pkg),
            "cargo build -p {pkg}: no such workspace package (has {:?})",
            packages.keys()
        );
    }
    let words: Vec<&str> = cargo.split_whitespace().collect();
    for bin in &bins {
        ensure!(
            words.windows(2).any(|w| w == ["--bin", bin.as_str()])
                || selected.iter().any(|p| packages[p].contains(bin)),
            "cargo build does not build the binary {bin} (no --bin {bin}, and none of the \
             packages {selected:?} has it): {cargo}"
        );
        ensure!(
            words.contains(&format!("target/release/{bin}").as_str()),
            "the builder stage does not take {bin} from target/release: {cargo}"
        );
        ensure!(
            runtime_stage.iter().any(|i| {
                i.starts_with(&format!("COPY --from={builder} "))
                    && i.split_whitespace()
                        .any(|w| w.rsplit('/').next() == Some(bin.as_str()))
            }),
            "the runtime stage does not copy {bin} from the {builder} stage"
        );
    }

    // The build context is the repo root: target/ (GBs) must not be sent to the daemon.
    let ignore = read_repo_file(&deploy_file("Dockerfile.dockerignore"))?;
    ensure!(
        ignore.lines().any(|l| l.trim() == "target"),
        "Dockerfile.dockerignore must exclude target"
    );
    Ok(())
}

/// `.dockerignore` patterns as (negated, path components), in file order.
fn ignore_patterns(text: &str) -> Vec<(bool, Vec<String>)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (negated, pat) = l.strip_prefix('!').map_or((false, l), |p| (true, p));
            let comps = pat
                .trim_matches('/')
                .split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .map(str::to_string)
                .collect();
            (negated, comps)
        })
        .collect()
}

/// `*` and `?` wildcards within one path component.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    match pat.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((b'?', rest)) => !s.is_empty() && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// Pattern components against path components; `**` stands for any number of components.
fn matches(pat: &[String], path: &[&str]) -> bool {
    match pat.split_first() {
        None => path.is_empty(),
        Some((p, rest)) if p == "**" => (0..=path.len()).any(|i| matches(rest, &path[i..])),
        Some((p, rest)) => path
            .split_first()
            .is_some_and(|(c, tail)| glob(p.as_bytes(), c.as_bytes()) && matches(rest, tail)),
    }
}

/// Whether the build context leaves out `path` (relative, `/`-separated): the last pattern
/// matching it or one of its parent directories decides, as Docker does.
fn excluded(patterns: &[(bool, Vec<String>)], path: &str) -> bool {
    let comps: Vec<&str> = path.split('/').collect();
    let mut out = false;
    for (negated, pat) in patterns {
        if (1..=comps.len()).any(|n| matches(pat, &comps[..n])) {
            out = !negated;
        }
    }
    out
}

/// The files git tracks in this repository, relative to its root.
fn tracked_files() -> Result<Vec<String>> {
    let root = repo_root();
    let repo = git2::Repository::discover(&root)
        .context("the repository is not a git checkout: cannot list its files")?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| anyhow!("the git repository has no work tree"))?
        .canonicalize()?;
    let root = root.canonicalize()?;
    let mut out = Vec::new();
    for entry in repo.index()?.iter() {
        let path = workdir.join(String::from_utf8_lossy(&entry.path).as_ref());
        if let Ok(rel) = path.strip_prefix(&root)
            && path.exists()
        {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(out)
}

#[test]
fn dockerfile_build_context_is_the_whole_workspace() -> Result<()> {
    let instrs = instructions()?;
    let last_from = instrs
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    let build_stage = &instrs[..last_from];
    let cargo = build_stage
        .iter()
        .position(|i| i.contains("cargo build"))
        .ok_or_else(|| anyhow!("the builder stage runs no `cargo build`"))?;
    ensure!(
        build_stage[..cargo].iter().any(|i| {
            let words: Vec<&str> = i.split_whitespace().collect();
            words.len() == 3 && words[0] == "COPY" && words[1] == "."
        }),
        "the builder must `COPY . <dir>` (the whole workspace) before cargo build"
    );

    // The matcher can fail: it follows Docker's rules on these patterns.
    let sample = ignore_patterns("target\n**/*.db\n!keep.db\n# comment\n/.git\n");
    ensure!(excluded(&sample, "target/release/grl") && excluded(&sample, ".git/HEAD"));
    ensure!(excluded(&sample, "rlc/x.db") && !excluded(&sample, "keep.db"));
    ensure!(!excluded(&sample, "grl/target/x") && !excluded(&sample, "Cargo.lock"));

    // Every crate, Cargo.lock, migrations/ and config-repo/ (embedded at compile time) reach the
    // builder: the dockerignore leaves out no file that git tracks.
    let patterns = ignore_patterns(&read_repo_file(&deploy_file("Dockerfile.dockerignore"))?);
    let files = tracked_files()?;
    ensure!(
        files.iter().any(|f| f == "Cargo.lock"),
        "git tracks no Cargo.lock (listed {} files)",
        files.len()
    );
    let left_out: Vec<&String> = files.iter().filter(|f| excluded(&patterns, f)).collect();
    ensure!(
        left_out.is_empty(),
        "Dockerfile.dockerignore leaves tracked files out of the build: {left_out:?}"
    );
    Ok(())
}
