//! Time to fit and recommend with `forecast` on 28 days of 5-minute data (8064 points).
//! Target: at most 50 ms per fit in release mode; the bench exits non-zero above it.
//!
//! Run: `cargo bench -p policies --bench forecast`

use policies::forecast::Forecast;
use policies::{Context, Point, Policy, Series};
use std::time::{Duration, Instant};

const DAY: i64 = 86_400;
const STEP: i64 = 300;
const TARGET: Duration = Duration::from_millis(50);

fn synthetic(now: i64) -> Series {
    let points = (0..28 * DAY / STEP)
        .map(|i| {
            let ts = now - 28 * DAY + i * STEP;
            let t = ts as f64 / DAY as f64;
            let value = 1_000.0
                * (1.0 + 0.3 * (std::f64::consts::TAU * t).sin())
                * (1.0 + 0.1 * (std::f64::consts::TAU * t / 7.0).cos())
                * (1.0 + 0.05 * ((i * 7919 % 101) as f64 / 50.0 - 1.0));
            Point { ts, value }
        })
        .collect();
    Series::new(STEP, points)
}

fn real(now_out: &mut i64) -> Series {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/traffic/Twitter_volume_AAPL.csv"
    );
    let s = Series::from_csv_str(&std::fs::read_to_string(path).expect("read AAPL")).expect("csv");
    let now = s.end().expect("non-empty");
    *now_out = now;
    s.window(now - 28 * DAY, now)
}

fn bench(name: &str, series: &Series, now: i64) -> bool {
    let policy = Forecast::default();
    let ctx = Context {
        now,
        previous_limit: None,
    };
    for _ in 0..5 {
        std::hint::black_box(policy.recommend(series, &ctx).expect("fit"));
    }
    let runs = 100;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        std::hint::black_box(
            policy
                .recommend(std::hint::black_box(series), &ctx)
                .expect("fit"),
        );
        times.push(start.elapsed());
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / runs as u32;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "forecast fit+recommend {name}: {} points, mean {:.3} ms, median {:.3} ms, max {:.3} ms per fit (target <= {} ms)",
        series.len(),
        ms(mean),
        ms(times[runs / 2]),
        ms(times[runs - 1]),
        TARGET.as_millis()
    );
    mean <= TARGET
}

fn main() {
    let now = 1_700_438_400 + 28 * DAY;
    let mut ok = bench("synthetic 28d x 5min", &synthetic(now), now);
    let mut real_now = 0;
    let aapl = real(&mut real_now);
    ok &= bench("Twitter_volume_AAPL last 28d", &aapl, real_now);
    if !ok {
        eprintln!("forecast fit slower than {} ms", TARGET.as_millis());
        std::process::exit(1);
    }
}
