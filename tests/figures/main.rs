//! `figures`: reruns the benches behind README's headline table and rewrites that table and
//! BENCHMARKS.md's "Current figures" section from their JSON.
//!
//! ```text
//! cargo run -p e2e --bin figures -- [--only ROW,ROW] [--render-only] [--check] [--list]
//!     [--env KEY=VALUE]... [--figures-dir DIR] [--readme FILE] [--benchmarks FILE]
//! ```
//!
//! Each headline row has a stable id and a bench command ([`ROWS`]). The command runs the
//! selected rows' benches (all of them without `--only`; none with `--render-only`), each with
//! `GRL_FIGURES_OUT` pointing at a scratch file; a bench that succeeds writes its row there
//! (what, figure, the command with the sizes it ran at, date, machine, raw figures) and
//! the file replaces `docs/figures/<row>.json`. Rows not rerun keep their last JSON, date
//! and machine. Then it renders, from every row's JSON:
//!
//! - README.md, between `<!-- figures:begin -->` and `<!-- figures:end -->`: a table
//!   `| what | figure | measured |`, the last cell the date and machine, linked to the row
//!   in BENCHMARKS.md;
//! - BENCHMARKS.md, between the same markers: "Current figures", per row what, figure, the
//!   command, date and machine.
//!
//! A row without its JSON, a JSON of no known row, or a file without its markers is an
//! error (exit 1), and nothing is written. `--check` renders without writing and fails if a
//! file would change. `--env KEY=VALUE` adds to (or overrides) the benches' environment,
//! e.g. a smaller size; the bench records the sizes it ran at in its row's command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;

/// The line before the generated part of a file.
pub(crate) const BEGIN: &str = "<!-- figures:begin -->";
/// The line after it.
pub(crate) const END: &str = "<!-- figures:end -->";

/// A headline row: its id and the bench that measures it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowSpec {
    /// The stable id: `docs/figures/<id>.json`, anchor `figures-<id>` in BENCHMARKS.md.
    pub(crate) id: &'static str,
    /// The bench's environment (its sizes).
    pub(crate) env: &'static [(&'static str, &'static str)],
    /// `cargo` arguments.
    pub(crate) cargo: &'static [&'static str],
}

/// The headline rows, in the table's order.
pub(crate) const ROWS: &[RowSpec] = &[
    RowSpec {
        id: "decide",
        env: &[
            ("DECIDE_ROUNDS", "41"),
            ("GRL_TEST_REDIS_SERVER", "/usr/bin/redis-server"),
        ],
        cargo: &["bench", "-p", "grl-client", "--bench", "decision"],
    },
    RowSpec {
        id: "step",
        env: &[
            ("SURGE_LIMIT", "2000"),
            ("SURGE_CLIENTS", "20"),
            ("SURGE_FACTOR", "15"),
        ],
        cargo: &["bench", "-p", "grl", "--bench", "surge"],
    },
    RowSpec {
        id: "precision",
        env: &[],
        cargo: &["bench", "-p", "grl", "--bench", "precision"],
    },
    RowSpec {
        id: "region",
        env: &[
            ("REGION_ZONES", "50"),
            ("REGION_BUCKETS", "22000"),
            ("REGION_SERVICES", "1100"),
            ("REGION_SECONDS", "10"),
        ],
        cargo: &["bench", "-p", "grl", "--bench", "region"],
    },
    RowSpec {
        id: "scale",
        env: &[("SCALE_CLIENTS", "2000,5000"), ("SCALE_SECONDS", "60")],
        cargo: &["bench", "-p", "grl", "--bench", "scale"],
    },
    RowSpec {
        id: "fleet",
        env: &[
            ("FLEET_SERVICES", "1100"),
            ("FLEET_BUCKETS_PER_SERVICE", "20"),
            ("FLEET_SERVE_SLOTS", "2"),
        ],
        cargo: &["bench", "-p", "rlc", "--bench", "fleet"],
    },
    RowSpec {
        id: "rlc_run",
        env: &[
            ("SOURCE_MODE", "run"),
            ("SOURCE_RUN_BUCKETS", "1000"),
            ("SOURCE_RUN_POLICY", "historical-peak"),
        ],
        cargo: &["bench", "-p", "rlc", "--bench", "source"],
    },
    RowSpec {
        id: "sidecar",
        env: &[
            ("RATE", "2000"),
            ("SECONDS", "5"),
            ("ROUNDS", "5"),
            ("CONCURRENCY", "32"),
        ],
        cargo: &["bench", "-p", "grl", "--bench", "sidecar"],
    },
];

/// One row's JSON, as a bench writes it (`grl/server/benches/common/figures_out.rs`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Figures {
    /// The row's id.
    pub(crate) row: String,
    /// The table's left cell.
    pub(crate) what: String,
    /// The table's right cell.
    pub(crate) figure: String,
    /// The command that reruns it.
    pub(crate) command: String,
    /// When it ran (UTC, RFC 3339; a date alone for seeded rows).
    pub(crate) date: String,
    /// Cores, CPU model, kernel.
    pub(crate) machine: String,
    /// The raw figures.
    #[serde(default)]
    pub(crate) figures: serde_json::Value,
    /// Where a row that no run has measured yet took its figures from.
    #[serde(default)]
    pub(crate) seeded_from: Option<String>,
}

/// Reads every row's JSON from `dir`: an error for a row without one, for a JSON of no
/// known row, or for one whose `row` is not its file name.
pub(crate) fn load(dir: &Path, rows: &[RowSpec]) -> Result<Vec<Figures>> {
    let mut out = Vec::new();
    for r in rows {
        let path = dir.join(format!("{}.json", r.id));
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "row `{}` has no figures: {} (run `cargo run -p e2e --bin figures -- --only {}`)",
                r.id,
                path.display(),
                r.id
            )
        })?;
        let f: Figures = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a row's figures", path.display()))?;
        ensure!(
            f.row == r.id,
            "{}: says it is row `{}`",
            path.display(),
            f.row
        );
        ensure!(
            f.figures.is_object(),
            "{}: `figures` (the raw figures) is not an object",
            path.display()
        );
        out.push(f);
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let path = entry?.path();
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if path.extension().is_some_and(|e| e == "json") && !rows.iter().any(|r| r.id == stem) {
            bail!(
                "{}: no headline row `{stem}` (known: {})",
                path.display(),
                ids(rows)
            );
        }
    }
    Ok(out)
}

fn ids(rows: &[RowSpec]) -> String {
    rows.iter().map(|r| r.id).collect::<Vec<_>>().join(", ")
}

/// A table cell: one line, `|` escaped.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A code span holding `s` (a longer fence when `s` has backticks).
fn code(s: &str) -> String {
    let ticks = s
        .chars()
        .fold((0usize, 0usize), |(run, best), c| {
            let run = if c == '`' { run + 1 } else { 0 };
            (run, best.max(run))
        })
        .1;
    let fence = "`".repeat(ticks + 1);
    if ticks > 0 {
        format!("{fence} {s} {fence}")
    } else {
        format!("{fence}{s}{fence}")
    }
}

/// The anchor of row `id` in BENCHMARKS.md (its heading is `Figures: <id>`).
pub(crate) fn anchor(id: &str) -> String {
    format!("figures-{id}")
}

/// The day of a row's date.
fn day(date: &str) -> &str {
    date.get(..10).unwrap_or(date)
}

fn seeded_note(f: &Figures) -> String {
    f.seeded_from
        .as_ref()
        .map_or_else(String::new, |s| format!(" (seeded from {s})"))
}

/// README's block: the headline table.
pub(crate) fn readme_block(rows: &[Figures]) -> String {
    let mut out = String::from(
        "<!-- generated by `cargo run -p e2e --bin figures` from docs/figures/*.json: rerun the benches with it, do not edit this table -->\n\n| what | figure | measured |\n|---|---|---|\n",
    );
    for f in rows {
        out.push_str(&format!(
            "| {} | {} | [{}, {}{}](BENCHMARKS.md#{}) |\n",
            cell(&f.what),
            cell(&f.figure),
            day(&f.date),
            cell(&f.machine),
            if f.seeded_from.is_some() {
                ", seeded"
            } else {
                ""
            },
            anchor(&f.row)
        ));
    }
    out
}

/// BENCHMARKS.md's block: "Current figures".
pub(crate) fn benchmarks_block(rows: &[Figures]) -> String {
    let mut out = String::from(
        "## Current figures\n\n\
         Generated by `cargo run -p e2e --bin figures` from `docs/figures/<row>.json`, which each \
         bench writes when run with `GRL_FIGURES_OUT`; `--only ROW` reruns one row, \
         `--render-only` rewrites this section and README's headline table from the JSON. \
         Do not edit this section: rerun the bench. Earlier runs are in \
         [docs/benchmarks-history.md](docs/benchmarks-history.md) and in the git history of \
         `docs/figures/`.\n",
    );
    for f in rows {
        out.push_str(&format!(
            "\n### Figures: {}\n\n**{}**\n\n{}\n\n- command: {}\n- measured: {}, {}{}\n",
            f.row,
            f.what.trim(),
            f.figure.trim(),
            code(&f.command),
            f.date,
            f.machine,
            seeded_note(f)
        ));
    }
    out
}

/// `text` with the lines between its markers replaced by `block`; an error naming `file`
/// when a marker is missing, repeated or out of order.
pub(crate) fn splice(text: &str, block: &str, file: &str) -> Result<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let at = |m: &str| -> Vec<usize> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.trim() == m)
            .map(|(i, _)| i)
            .collect()
    };
    let (begin, end) = (at(BEGIN), at(END));
    match (begin.as_slice(), end.as_slice()) {
        ([b], [e]) if b < e => {
            let mut out: String = lines[..=*b].concat();
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(block);
            if !block.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&lines[*e..].concat());
            Ok(out)
        }
        ([], _) | (_, []) => bail!(
            "{file}: the lines `{BEGIN}` and `{END}` mark where the figures go; {} missing",
            if begin.is_empty() && end.is_empty() {
                "both are"
            } else if begin.is_empty() {
                "the first is"
            } else {
                "the second is"
            }
        ),
        _ => bail!("{file}: `{BEGIN}` must appear once, before the one `{END}`"),
    }
}

/// The files to render and where the JSON is.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    /// `docs/figures`.
    pub(crate) figures: PathBuf,
    /// README.md.
    pub(crate) readme: PathBuf,
    /// BENCHMARKS.md.
    pub(crate) benchmarks: PathBuf,
}

impl Paths {
    /// The repository's own.
    pub(crate) fn repo() -> Paths {
        let root = repo_root();
        Paths {
            figures: root.join("docs/figures"),
            readme: root.join("README.md"),
            benchmarks: root.join("BENCHMARKS.md"),
        }
    }
}

/// The workspace root.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
        .to_path_buf()
}

/// Renders both files from the JSON: (path, old text, new text) of each, nothing written.
pub(crate) fn render(paths: &Paths, rows: &[RowSpec]) -> Result<Vec<(PathBuf, String, String)>> {
    let figures = load(&paths.figures, rows)?;
    let mut out = Vec::new();
    for (path, block) in [
        (&paths.readme, readme_block(&figures)),
        (&paths.benchmarks, benchmarks_block(&figures)),
    ] {
        let old = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
        let new = splice(&old, &block, &path.display().to_string())?;
        out.push((path.clone(), old, new));
    }
    Ok(out)
}

/// Runs row `spec`'s bench; on success its JSON replaces `<figures>/<id>.json`.
fn run_row(spec: &RowSpec, extra: &[(String, String)], figures: &Path) -> Result<()> {
    std::fs::create_dir_all(figures)?;
    let scratch = figures.join(format!(".{}.json.new", spec.id));
    let _ = std::fs::remove_file(&scratch);
    let scratch_abs = std::path::absolute(&scratch)?;
    let mut env: BTreeMap<String, String> = spec
        .env
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!(
        "figures: {}: {} cargo {}",
        spec.id,
        shown.join(" "),
        spec.cargo.join(" ")
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(spec.cargo)
        .envs(&env)
        .env("GRL_FIGURES_OUT", &scratch_abs)
        .current_dir(repo_root())
        .status()
        .context("running cargo")?;
    ensure!(
        status.success(),
        "row `{}`: the bench failed ({status}); its figures are unchanged",
        spec.id
    );
    let text = std::fs::read_to_string(&scratch).with_context(|| {
        format!(
            "row `{}`: the bench wrote no figures to {}",
            spec.id,
            scratch.display()
        )
    })?;
    let f: Figures = serde_json::from_str(&text)
        .with_context(|| format!("row `{}`: {}", spec.id, scratch.display()))?;
    ensure!(
        f.row == spec.id,
        "row `{}`: the bench wrote row `{}`",
        spec.id,
        f.row
    );
    std::fs::rename(&scratch, figures.join(format!("{}.json", spec.id)))?;
    eprintln!("figures: {}: {}", spec.id, f.figure);
    Ok(())
}

/// The command line.
#[derive(Debug, Default)]
struct Args {
    only: Option<Vec<String>>,
    render_only: bool,
    check: bool,
    list: bool,
    env: Vec<(String, String)>,
    figures: Option<PathBuf>,
    readme: Option<PathBuf>,
    benchmarks: Option<PathBuf>,
}

const USAGE: &str = "usage: figures [--only ROW,ROW] [--render-only] [--check] [--list] [--env KEY=VALUE]... [--figures-dir DIR] [--readme FILE] [--benchmarks FILE]";

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args> {
    let mut out = Args::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--only" => {
                let list: Vec<String> = value("--only")?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                for id in &list {
                    ensure!(
                        ROWS.iter().any(|r| r.id == id),
                        "--only {id}: no such row (rows: {})",
                        ids(ROWS)
                    );
                }
                out.only = Some(list);
            }
            "--render-only" => out.render_only = true,
            "--check" => out.check = true,
            "--list" => out.list = true,
            "--env" => {
                let kv = value("--env")?;
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("--env {kv}: KEY=VALUE"))?;
                out.env.push((k.to_string(), v.to_string()));
            }
            "--figures-dir" => out.figures = Some(value("--figures-dir")?.into()),
            "--readme" => out.readme = Some(value("--readme")?.into()),
            "--benchmarks" => out.benchmarks = Some(value("--benchmarks")?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(out)
}

fn main() {
    let result = parse(std::env::args().skip(1)).and_then(|args| {
        if args.list {
            for r in ROWS {
                let env: Vec<String> = r.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("{:<10} {} cargo {}", r.id, env.join(" "), r.cargo.join(" "));
            }
            return Ok(());
        }
        let repo = Paths::repo();
        let paths = Paths {
            figures: args.figures.clone().unwrap_or(repo.figures),
            readme: args.readme.clone().unwrap_or(repo.readme),
            benchmarks: args.benchmarks.clone().unwrap_or(repo.benchmarks),
        };
        if !args.render_only && !args.check {
            for spec in ROWS.iter().filter(|r| {
                args.only
                    .as_ref()
                    .is_none_or(|o| o.iter().any(|id| id == r.id))
            }) {
                run_row(spec, &args.env, &paths.figures)?;
            }
        }
        let rendered = render(&paths, ROWS)?;
        let mut stale = Vec::new();
        for (path, old, new) in &rendered {
            if old == new {
                println!("{}: up to date", path.display());
            } else if args.check {
                stale.push(path.display().to_string());
            } else {
                std::fs::write(path, new).with_context(|| format!("{}", path.display()))?;
                println!("{}: rewritten", path.display());
            }
        }
        ensure!(
            stale.is_empty(),
            "not up to date with {}: {} (run `cargo run -p e2e --bin figures -- --render-only`)",
            paths.figures.display(),
            stale.join(", ")
        );
        Ok(())
    });
    if let Err(e) = result {
        eprintln!("figures: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests;
