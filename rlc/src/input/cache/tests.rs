//! The cache on a real directory: round trips, torn writes at every byte, the bound.

use super::*;

const STEP: i64 = 300;

fn series(from: i64, to: i64, f: impl Fn(i64) -> f64) -> RangeSeries {
    RangeSeries {
        step_secs: STEP,
        points: (0..)
            .map(|i| from + i * STEP)
            .take_while(|t| *t <= to)
            .filter(|t| t % 900 != 0)
            .map(|t| (t, f(t)))
            .collect(),
        invalid: 0,
    }
}

fn live() -> BTreeSet<String> {
    ["b".to_string()].into()
}

#[test]
fn a_tail_extends_the_entry_and_survives_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let cache = HistoryCache::open(dir.path()).unwrap();
    let mut log = cache.load("svc/a").unwrap();
    let v = |t: i64| t as f64 / 7.0;
    assert!(log.store(
        "b",
        Measure::Offered,
        9,
        &series(3000, 6000, v),
        (3000, 6000),
        false
    ));
    log.save(6000, DAY, &live()).unwrap();
    let mut log = cache.load("svc/a").unwrap();
    // A tail from 5700 (two cached steps again) to 7200.
    assert!(log.store(
        "b",
        Measure::Offered,
        9,
        &series(5700, 7200, v),
        (5700, 7200),
        true
    ));
    assert!(
        !log.store(
            "b",
            Measure::Offered,
            8,
            &series(6900, 7200, v),
            (6900, 7200),
            true
        ),
        "another fingerprint is refused"
    );
    log.save(7200, DAY, &live()).unwrap();
    let log = cache.load("svc/a").unwrap();
    assert_eq!(
        log.series("b", Measure::Offered, 9, 3000, 7200).unwrap(),
        series(3000, 7200, v),
        "cached = fetched in one go"
    );
    assert!(log.series("b", Measure::Offered, 8, 3000, 7200).is_none());
    assert!(
        log.series("b", Measure::Offered, 9, 2700, 7200).is_none(),
        "not cached from 2700"
    );
    assert!(
        log.series("b", Measure::Offered, 9, 3000, 7500).is_none(),
        "nor up to 7500"
    );
    assert!(log.series("b", Measure::Dropped, 9, 3000, 7200).is_none());
}

#[test]
fn a_log_cut_anywhere_in_its_last_write_reads_as_before_that_write_and_heals() {
    let dir = tempfile::tempdir().unwrap();
    let cache = HistoryCache::open(dir.path()).unwrap();
    let v = |t: i64| (t % 7) as f64;
    let mut log = cache.load("s").unwrap();
    log.store(
        "b",
        Measure::Offered,
        1,
        &series(0, 3000, v),
        (0, 3000),
        false,
    );
    log.save(3000, DAY, &live()).unwrap();
    let before = std::fs::read(cache.path("s")).unwrap();
    let mut log = cache.load("s").unwrap();
    log.store(
        "b",
        Measure::Offered,
        1,
        &series(2700, 4500, v),
        (2700, 4500),
        true,
    );
    log.save(4500, DAY, &live()).unwrap();
    let after = std::fs::read(cache.path("s")).unwrap();
    let old = series(0, 3000, v);
    for cut in before.len()..after.len() {
        std::fs::write(cache.path("s"), &after[..cut]).unwrap();
        let log = cache.load("s").unwrap();
        assert_eq!(
            log.series("b", Measure::Offered, 1, 0, 3000).as_ref(),
            Some(&old),
            "cut {cut}"
        );
        assert!(
            log.series("b", Measure::Offered, 1, 0, 3300).is_none(),
            "cut {cut}"
        );
    }
    // The next write cuts the torn bytes off and appends after the whole records.
    std::fs::write(cache.path("s"), &after[..after.len() - 3]).unwrap();
    let mut log = cache.load("s").unwrap();
    log.store(
        "b",
        Measure::Offered,
        1,
        &series(2700, 4800, v),
        (2700, 4800),
        true,
    );
    log.save(4800, DAY, &live()).unwrap();
    let log = cache.load("s").unwrap();
    assert_eq!(
        log.series("b", Measure::Offered, 1, 0, 4800),
        Some(series(0, 4800, v))
    );
    // A file cut inside its magic, or of another format, reads as empty.
    std::fs::write(cache.path("s"), &after[..3]).unwrap();
    assert!(
        cache
            .load("s")
            .unwrap()
            .entry("b", Measure::Offered)
            .is_none()
    );
}

#[test]
fn the_log_keeps_the_longest_window_plus_at_most_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let cache = HistoryCache::open(dir.path()).unwrap();
    let window = 2 * DAY;
    let v = |t: i64| (t / STEP % 13) as f64;
    let mut now = 10 * DAY;
    let mut log = cache.load("s").unwrap();
    log.store(
        "b",
        Measure::Offered,
        1,
        &series(now - window, now, v),
        (now - window, now),
        false,
    );
    log.store(
        "gone",
        Measure::Offered,
        1,
        &series(now - window, now, v),
        (now - window, now),
        false,
    );
    log.save(now, window, &live()).unwrap();
    let full = std::fs::metadata(cache.path("s")).unwrap().len();
    let mut compactions = 0;
    // Three days of runs every hour.
    for _ in 0..72 {
        let prev = now;
        now += 3600;
        let mut log = cache.load("s").unwrap();
        let from = prev - STEP;
        assert!(log.store(
            "b",
            Measure::Offered,
            1,
            &series(from, now, v),
            (from, now),
            true
        ));
        compactions += usize::from(log.save(now, window, &live()).unwrap());
        let oldest = cache
            .load("s")
            .unwrap()
            .entry("b", Measure::Offered)
            .unwrap()
            .from;
        assert!(
            oldest >= now - window - DAY,
            "{} s too old",
            now - window - DAY - oldest
        );
        let size = std::fs::metadata(cache.path("s")).unwrap().len();
        assert!(
            size < full * 3 / 2 + 64 * 1024,
            "{size} bytes against {full}"
        );
    }
    assert!(compactions >= 2, "{compactions} compactions");
    let log = cache.load("s").unwrap();
    assert!(
        log.entry("gone", Measure::Offered).is_none(),
        "a bucket gone from the config is dropped"
    );
    assert_eq!(
        log.series("b", Measure::Offered, 1, now - window, now),
        Some(series(now - window, now, v))
    );
    assert_eq!(cache.retain_services(["other"]).unwrap(), 1);
    assert!(!cache.path("s").exists());
}
