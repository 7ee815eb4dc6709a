//! A headline bench's figures as one JSON file, for `cargo run -p e2e --bin figures` (which
//! renders README's headline table and BENCHMARKS.md's "Current figures" from them).
//!
//! When `GRL_FIGURES_OUT=<file.json>` is set, [`write`] writes
//! `{"row", "what", "figure", "command", "date", "machine", "figures"}` there; without it
//! a bench prints as it always did and [`write`] does nothing. Shared by the benches of
//! `grl`, `grl-client` and `rlc` (each includes this file with `#[path]`), so it needs no
//! dependency: the raw figures come in as JSON text the bench made.
// Each bench uses a part of it.
#![allow(dead_code)]

use std::fmt::Write as _;

/// Where the figures go (`GRL_FIGURES_OUT`), if anywhere.
pub(crate) fn wanted() -> Option<std::path::PathBuf> {
    std::env::var_os("GRL_FIGURES_OUT")
        .filter(|v| !v.is_empty())
        .map(Into::into)
}

/// A JSON string literal.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The command that reruns a bench: `sizes` (the env it ran at, every size given
/// explicitly, defaults included) before `cargo bench …`.
pub(crate) fn command(sizes: &[(&str, String)], cargo: &str) -> String {
    let mut out = String::new();
    for (k, v) in sizes {
        let plain = |c: char| c.is_ascii_alphanumeric() || ",._:/=+-@".contains(c);
        let v = if v.chars().all(plain) {
            v.clone()
        } else {
            format!("'{}'", v.replace('\'', r"'\''"))
        };
        let _ = write!(out, "{k}={v} ");
    }
    out + cargo
}

/// `n` rounded to a whole number, with thousands separated by commas (`22,000`).
pub(crate) fn thousands(n: f64) -> String {
    if !n.is_finite() {
        return format!("{n}");
    }
    let digits = format!("{:.0}", n.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

/// Now in UTC, RFC 3339 to the second.
pub(crate) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// This machine: cores, CPU model and kernel, e.g. `2 cores, AMD EPYC 7B13, Linux 6.1.0`.
pub(crate) fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown kernel".into(), |s| s.trim().to_string());
    format!("{cores} cores, {model}, Linux {kernel}")
}

/// A row's figures.
pub(crate) struct Row<'a> {
    /// The row's stable id (`decide`, `step`, …).
    pub(crate) row: &'a str,
    /// The table's left cell.
    pub(crate) what: String,
    /// The table's right cell: the figures, short.
    pub(crate) figure: String,
    /// The command that reruns it, with its sizes.
    pub(crate) command: String,
    /// The raw figures, a JSON object.
    pub(crate) figures_json: String,
}

/// Writes `row` to `GRL_FIGURES_OUT` if it is set (exits 1 when it cannot be written).
pub(crate) fn write(row: &Row<'_>) {
    let Some(path) = wanted() else {
        return;
    };
    let text = format!(
        "{{\n  \"row\": {},\n  \"what\": {},\n  \"figure\": {},\n  \"command\": {},\n  \"date\": {},\n  \"machine\": {},\n  \"figures\": {}\n}}\n",
        quote(row.row),
        quote(&row.what),
        quote(&row.figure),
        quote(&row.command),
        quote(&utc_now()),
        quote(&machine()),
        row.figures_json.trim()
    );
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("GRL_FIGURES_OUT={}: {e}", path.display());
        std::process::exit(1);
    }
    println!("figures written to {}", path.display());
}

/// The value of env `name` parsed, `default` when unset; exits 2 with a message when it
/// is set but does not parse (a bench runs the size asked or refuses it).
pub(crate) fn env_size<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            refuse(&format!("{name}={v} is not a valid value"));
        }),
    }
}

/// Refuses the run: prints `why` and exits 2.
pub(crate) fn refuse(why: &str) -> ! {
    eprintln!("refused: {why}");
    std::process::exit(2);
}
