//! Time for `auto` to recommend one bucket's limit from 28 days of 5-minute data (8,064
//! points): the backtest of its five candidates over the window plus the chosen one's
//! recommendation. Target: at most 50 ms per bucket in release mode.
//!
//! Run: `cargo bench -p policies --bench auto`

use criterion::{Criterion, criterion_group, criterion_main};
use policies::auto::Auto;
use policies::{Context, Point, Policy, Series};
use std::hint::black_box;
use std::time::Duration;

const DAY: i64 = 86_400;
const STEP: i64 = 300;
/// A Monday 00:00 UTC.
const T0: i64 = 1_700_438_400;

/// 28 days at 5 minutes: +5 %/week growth, a daily and a weekly swing, and noise.
fn synthetic(now: i64) -> Series {
    let points = (0..28 * DAY / STEP)
        .map(|i| {
            let ts = now - 28 * DAY + i * STEP;
            let t = (ts - now) as f64 / DAY as f64;
            let value = 1_000.0
                * 1.05f64.powf(t / 7.0)
                * (1.0 + 0.3 * (std::f64::consts::TAU * t).sin())
                * (1.0 + 0.1 * (std::f64::consts::TAU * t / 7.0).cos())
                * (1.0 + 0.05 * ((i * 7919 % 101) as f64 / 50.0 - 1.0));
            Point { ts, value }
        })
        .collect();
    Series::new(STEP, points)
}

/// The last 28 days of the AAPL tweet series (bursty, heavy-tailed).
fn aapl() -> (Series, i64) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/traffic/Twitter_volume_AAPL.csv"
    );
    let s = Series::from_csv_str(&std::fs::read_to_string(path).expect("read AAPL")).expect("csv");
    let now = s.end().expect("non-empty");
    (s.window(now - 28 * DAY, now), now)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("auto 28d x 5min per bucket");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(10));
    let policy = Auto::default();
    let now = T0 + 28 * DAY;
    let cases = [("synthetic +5%/week", synthetic(now), now), {
        let (s, now) = aapl();
        ("Twitter_volume_AAPL", s, now)
    }];
    for (name, series, now) in &cases {
        let ctx = Context {
            now: *now,
            previous_limit: None,
        };
        let chosen = policy.recommend(series, &ctx).expect("auto");
        println!(
            "{name}: {} points, auto chose {}",
            series.len(),
            chosen.evidence["chosen"]
        );
        group.bench_function(*name, |b| {
            b.iter(|| policy.recommend(black_box(series), &ctx).expect("auto"));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
