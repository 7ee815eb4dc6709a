//! The serve loop fired on tokio's paused time: which slots run, across weekends, month
//! ends and DST changes, and what happens when a run outlasts the interval.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use chrono::{Datelike, TimeZone, Timelike, Weekday};
use chrono_tz::Tz;

use super::*;
use crate::drive::schedule::clock::TokioClock;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

/// A started run: what started it and the clock's time then.
type Started = (Trigger, DateTime<Utc>);

/// Runs the serve loop from `start` to `end` on a paused tokio clock; each run takes
/// `took(n)` for the `n`-th run (from 0). Returns the runs started and the metrics.
async fn fire(
    expr: &str,
    zone: Tz,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    commits: impl Stream<Item = String> + Unpin,
    took: impl Fn(usize) -> Duration,
) -> (Vec<Started>, RlcMetrics) {
    let clock = TokioClock::starting_at(start);
    let schedule = Schedule::parse(expr).unwrap().in_zone(zone);
    let mut ticker = Ticker::new(schedule, clock);
    let metrics = RlcMetrics::default();
    let started = Rc::new(RefCell::new(Vec::new()));
    let running = Rc::new(RefCell::new(false));
    let log = started.clone();
    drive(
        &mut ticker,
        commits,
        clock.sleep_until(end),
        &metrics,
        |trigger| {
            let (log, running) = (log.clone(), running.clone());
            let n = log.borrow().len();
            let length = took(n);
            async move {
                assert!(!running.replace(true), "a run started on top of another");
                log.borrow_mut().push((trigger, clock.now()));
                tokio::time::sleep(length).await;
                running.replace(false);
            }
        },
    )
    .await;
    assert_eq!(clock.now(), end, "the loop stopped when asked");
    let started = started.borrow().clone();
    (started, metrics)
}

fn quick(_: usize) -> Duration {
    Duration::from_secs(300)
}

fn no_commits() -> futures::stream::Pending<String> {
    futures::stream::pending()
}

/// Asserts every run was a schedule slot that started on time, 06:00 on a weekday in `zone`,
/// and returns the slots.
fn weekday_mornings(started: &[Started], zone: Tz) -> Vec<DateTime<Utc>> {
    started
        .iter()
        .map(|(trigger, at)| {
            assert_eq!(trigger, &Trigger::Schedule(*at), "started on its slot");
            let local = at.with_timezone(&zone);
            assert!(
                !matches!(local.weekday(), Weekday::Sat | Weekday::Sun),
                "{local} is a weekend"
            );
            assert_eq!((local.hour(), local.minute()), (6, 0), "{local}");
            *at
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn weekdays_fire_monday_to_friday_across_spring_dst_and_a_month_end() {
    // Berlin: CET (UTC+1) until Sunday 29 March 2026, CEST (UTC+2) after; March has 31 days.
    let berlin = chrono_tz::Europe::Berlin;
    let (started, metrics) = fire(
        "0 6 * * 1-5",
        berlin,
        utc(2026, 3, 20, 12, 0), // a Friday, after its 06:00
        utc(2026, 4, 4, 12, 0),  // a Saturday
        no_commits(),
        quick,
    )
    .await;
    let mut want: Vec<_> = (23..=27).map(|d| utc(2026, 3, d, 5, 0)).collect();
    want.extend([30, 31].map(|d| utc(2026, 3, d, 4, 0)));
    want.extend((1..=3).map(|d| utc(2026, 4, d, 4, 0)));
    assert_eq!(weekday_mornings(&started, berlin), want);
    assert!(
        metrics
            .encode()
            .contains("rlc_next_run_timestamp_seconds 1775448000.0"),
        "next run is Monday 6 April 04:00 UTC:\n{}",
        metrics.encode()
    );
    assert!(metrics.encode().contains("rlc_schedule_skipped_total 0"));
}

#[tokio::test(start_paused = true)]
async fn weekdays_fire_monday_to_friday_across_autumn_dst_and_a_month_end() {
    // Berlin: CEST until Sunday 25 October 2026, CET after; 31 October is a Saturday.
    let berlin = chrono_tz::Europe::Berlin;
    let (started, _) = fire(
        "0 6 * * MON-FRI",
        berlin,
        utc(2026, 10, 22, 0, 0), // a Thursday
        utc(2026, 11, 3, 12, 0), // a Tuesday, after its 06:00
        no_commits(),
        quick,
    )
    .await;
    let mut want: Vec<_> = [22, 23].map(|d| utc(2026, 10, d, 4, 0)).to_vec();
    want.extend((26..=30).map(|d| utc(2026, 10, d, 5, 0)));
    want.extend([2, 3].map(|d| utc(2026, 11, d, 5, 0)));
    assert_eq!(weekday_mornings(&started, berlin), want);
}

#[tokio::test(start_paused = true)]
async fn a_run_longer_than_the_interval_is_not_overlapped_and_the_slot_it_covered_is_counted() {
    // Every 15 minutes; the first run takes 20 minutes (00:15-00:35), covering the 00:30 slot.
    let (started, metrics) = fire(
        "*/15 * * * *",
        Tz::UTC,
        utc(2026, 12, 1, 0, 5),
        utc(2026, 12, 1, 1, 20),
        no_commits(),
        |n| Duration::from_secs(if n == 0 { 20 * 60 } else { 60 }),
    )
    .await;
    let starts: Vec<_> = started.iter().map(|(_, at)| *at).collect();
    assert_eq!(
        starts,
        [15, 45, 60, 75].map(|m| utc(2026, 12, 1, 0, 0) + chrono::Duration::minutes(m)),
        "00:30 is skipped; the next run is the first slot after 00:35"
    );
    assert!(
        metrics.encode().contains("rlc_schedule_skipped_total 1\n"),
        "{}",
        metrics.encode()
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_that_outlasts_several_slots_skips_them_all_and_counts_each() {
    let (started, metrics) = fire(
        "*/10 * * * *",
        Tz::UTC,
        utc(2026, 12, 1, 0, 5),
        utc(2026, 12, 1, 1, 15),
        no_commits(),
        |n| Duration::from_secs(if n == 0 { 35 * 60 } else { 60 }),
    )
    .await;
    let starts: Vec<_> = started.iter().map(|(_, at)| *at).collect();
    assert_eq!(
        starts,
        [10, 50, 60, 70].map(|m| utc(2026, 12, 1, 0, 0) + chrono::Duration::minutes(m)),
    );
    assert!(
        metrics.encode().contains("rlc_schedule_skipped_total 3\n"),
        "00:20, 00:30 and 00:40 passed during the first run:\n{}",
        metrics.encode()
    );
}

#[tokio::test(start_paused = true)]
async fn a_commit_runs_between_slots_and_a_slot_it_covers_is_skipped() {
    let start = utc(2026, 12, 1, 0, 0);
    let clock = TokioClock::starting_at(start);
    // A person's commit is seen at 00:50; its run takes 15 minutes and covers the 01:00 slot.
    let commits = Box::pin(futures::stream::once(async move {
        clock.sleep_until(utc(2026, 12, 1, 0, 50)).await;
        "c0ffee".to_string()
    }));
    let (started, metrics) = fire(
        "0 * * * *",
        Tz::UTC,
        start,
        utc(2026, 12, 1, 2, 30),
        commits,
        |n| Duration::from_secs(if n == 0 { 15 * 60 } else { 60 }),
    )
    .await;
    assert_eq!(
        started,
        [
            (Trigger::Commit("c0ffee".into()), utc(2026, 12, 1, 0, 50)),
            (
                Trigger::Schedule(utc(2026, 12, 1, 2, 0)),
                utc(2026, 12, 1, 2, 0)
            ),
        ]
    );
    assert!(metrics.encode().contains("rlc_schedule_skipped_total 1\n"));
}

#[tokio::test(start_paused = true)]
async fn a_schedule_past_its_last_time_waits_for_commits_only() {
    // 2100 is the calendar's last year: from 2101 there is no slot.
    let start = utc(2101, 1, 1, 0, 0);
    let clock = TokioClock::starting_at(start);
    let commits = Box::pin(futures::stream::once(async move {
        clock.sleep_until(utc(2101, 1, 2, 0, 0)).await;
        "abc".to_string()
    }));
    let (started, metrics) = fire(
        "@daily",
        Tz::UTC,
        start,
        utc(2101, 1, 10, 0, 0),
        commits,
        quick,
    )
    .await;
    assert_eq!(
        started,
        [(Trigger::Commit("abc".into()), utc(2101, 1, 2, 0, 0))]
    );
    assert!(
        metrics
            .encode()
            .contains("rlc_next_run_timestamp_seconds 0.0"),
        "{}",
        metrics.encode()
    );
}

#[test]
fn trigger_labels_are_what_run_history_records() {
    assert_eq!(Trigger::Schedule(utc(2026, 1, 1, 0, 0)).label(), "schedule");
    assert_eq!(Trigger::Commit("ab12".into()).label(), "commit ab12");
    assert_eq!(
        Trigger::Schedule(utc(2026, 1, 1, 0, 0)).to_string(),
        "schedule 2026-01-01T00:00:00+00:00"
    );
}
