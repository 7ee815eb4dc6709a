//! One `wrk` run (one thread, `--latency`) and what it printed: requests/s, p50, p99 and
//! the responses that were not 2xx.

use std::fmt;
use std::path::Path;
use std::process::Command;

/// Which caller each request names (the `rpc-caller` header).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Callers {
    /// Every request the same.
    One(&'static str),
    /// Every other request the second (a Lua script of wrk's).
    Alternate(&'static str, &'static str),
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) rps: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) non_2xx: u64,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>11.0}  {:>8.0}  {:>8.0}  {:>7}",
            self.rps, self.p50_us, self.p99_us, self.non_2xx
        )
    }
}

/// Runs wrk against `url` with `conns` connections for `secs` seconds; `script` is where
/// the Lua script for [`Callers::Alternate`] is written.
pub(crate) fn run(url: &str, callers: &Callers, conns: u64, secs: u64, script: &Path) -> Run {
    let mut cmd = Command::new("wrk");
    cmd.args(["-t1", "--latency"])
        .arg(format!("-c{conns}"))
        .arg(format!("-d{secs}s"));
    match callers {
        Callers::One(c) => {
            cmd.args(["-H", &format!("rpc-caller: {c}")]);
        }
        Callers::Alternate(a, b) => {
            std::fs::write(
                script,
                format!(
                    "local n = 0\nrequest = function()\n  n = n + 1\n  \
                     if n % 2 == 0 then wrk.headers[\"rpc-caller\"] = \"{a}\" \
                     else wrk.headers[\"rpc-caller\"] = \"{b}\" end\n  \
                     return wrk.format()\nend\n"
                ),
            )
            .unwrap();
            cmd.arg("-s").arg(script);
        }
    }
    let out = cmd.arg(url).output().expect("wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    parse(&text).unwrap_or_else(|| panic!("wrk printed nothing to read:\n{text}"))
}

/// Reads wrk's summary.
fn parse(text: &str) -> Option<Run> {
    let mut run = Run {
        rps: f64::NAN,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        non_2xx: 0,
    };
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Requests/sec:"), Some(v)) => run.rps = v.parse().ok()?,
            (Some("50%"), Some(v)) => run.p50_us = micros(v)?,
            (Some("99%"), Some(v)) => run.p99_us = micros(v)?,
            _ => {}
        }
        if let Some(n) = line.strip_prefix("Non-2xx or 3xx responses:") {
            run.non_2xx = n.trim().parse().ok()?;
        }
    }
    (run.rps.is_finite() && run.p50_us.is_finite() && run.p99_us.is_finite()).then_some(run)
}

/// `250.00us`, `1.20ms` or `1.00s` in microseconds.
fn micros(v: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|x| x * scale)
}
