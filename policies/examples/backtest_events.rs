//! Prints the event table of `POLICIES.md`: each series in `tests/data/traffic/` of at
//! least 35 days with planned events injected — its traffic times 3 for 4 hours from 17:00
//! UTC on day 30 and every 11 days after (so they fall on other weekdays) — scored against
//! historical-peak (buffer 0.25), peak-trend, forecast and auto (window 28d, horizon 7d).
//!
//! For each event: the policy's limit at the window's start from the history before it,
//! the event's limit (that limit × 3, what `events.yaml` with `multiplier: 3` gives), the
//! points of the window above each, and the event's limit over the window's peak. Then the
//! week after the event: the limit computed at its end with the surge in the history, and
//! with the window left out (what `rlc` does for an event in `events.yaml`), each over the
//! week's peak.
//!
//! Run: `cargo run --release -p policies --example backtest_events [DIR]`.

use policies::event::{Raise, score_event};
use policies::{Context, Point, Policy, Series, from_spec};
use std::path::PathBuf;

const DAY: i64 = 86_400;
const EVENT_SECS: i64 = 4 * 3_600;
const MULTIPLIER: f64 = 3.0;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/traffic"),
        PathBuf::from,
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    println!(
        "| series | policy | events | points in windows | over the limit | over the event's limit | event's limit / window peak | week after: limit / peak, surge kept | surge left out |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for path in &files {
        let name = path.file_stem().unwrap_or_default().to_string_lossy();
        let Ok(series) = Series::from_csv_str(&std::fs::read_to_string(path)?) else {
            continue;
        };
        let (Some(start), Some(end)) = (series.start(), series.end()) else {
            continue;
        };
        if end - start < 35 * DAY {
            continue;
        }
        let first = start - start.rem_euclid(DAY) + 30 * DAY + 17 * 3_600;
        let windows: Vec<(i64, i64)> = (0..)
            .map(|k| first + k * 11 * DAY)
            .take_while(|from| from + EVENT_SECS + 7 * DAY <= end)
            .map(|from| (from, from + EVENT_SECS))
            .collect();
        let injected = series.map_values(|ts, v| {
            if windows.iter().any(|(f, u)| (*f..*u).contains(&ts)) {
                v * MULTIPLIER
            } else {
                v
            }
        });
        for kind in ["historical-peak", "peak-trend", "forecast", "auto"] {
            let spec = match kind {
                "historical-peak" => serde_json::json!({ "window": "28d", "buffer": 0.25 }),
                _ => serde_json::json!({ "window": "28d", "horizon": "7d" }),
            };
            let policy = from_spec(kind, spec.as_object().expect("a map"))?;
            let mut row = Row::default();
            for (i, &(from, until)) in windows.iter().enumerate() {
                let Ok(s) = score_event(
                    &*policy,
                    &injected,
                    &format!("event-{i}"),
                    from,
                    until,
                    Raise::Multiplier(MULTIPLIER),
                ) else {
                    continue;
                };
                row.events += 1;
                row.points += s.points;
                row.over += s.over_limit;
                row.over_event += s.over_event_limit;
                row.event_headroom.push(s.event_limit / s.actual_peak);
                let week_peak = injected
                    .range(until, until + 7 * DAY)
                    .iter()
                    .map(|p| p.value)
                    .fold(0.0, f64::max);
                let kept = limit_at(&*policy, &injected, until, &[]);
                let left_out = limit_at(&*policy, &injected, until, &windows);
                if let (Some(k), Some(l)) = (kept, left_out)
                    && week_peak > 0.0
                {
                    row.after_kept.push(k / week_peak);
                    row.after_left_out.push(l / week_peak);
                }
            }
            println!(
                "| {name} | {kind} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                row.events,
                row.points,
                row.over,
                row.over_event,
                mean(&row.event_headroom),
                mean(&row.after_kept),
                mean(&row.after_left_out)
            );
        }
    }
    Ok(())
}

#[derive(Default)]
struct Row {
    events: usize,
    points: usize,
    over: usize,
    over_event: usize,
    event_headroom: Vec<f64>,
    after_kept: Vec<f64>,
    after_left_out: Vec<f64>,
}

/// The policy's limit at `now` from the history before it, without the points that fell
/// in `left_out` windows.
fn limit_at(
    policy: &dyn Policy,
    series: &Series,
    now: i64,
    left_out: &[(i64, i64)],
) -> Option<f64> {
    let window = policy.window().as_secs() as i64;
    let points: Vec<Point> = series
        .range(now - window, now)
        .iter()
        .copied()
        .filter(|p| !left_out.iter().any(|(f, u)| (*f..*u).contains(&p.ts)))
        .collect();
    let history = Series::new(series.step_secs, points);
    policy
        .recommend(
            &history,
            &Context {
                now,
                previous_limit: None,
            },
        )
        .ok()
        .map(|r| r.rps)
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        f64::NAN
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}
