//! When the configurator runs: on a cron schedule as people write it, in a time zone, and
//! right after a person's commit to `services/`, `capacity/` or `events.yaml` on `main`
//! (never after its own commits).
//!
//! # The expression
//! Five fields, `minute hour day-of-month month day-of-week`, read as Vixie cron reads them
//! (the `cron` of Debian and Red Hat, and what a Kubernetes CronJob documents):
//! - `*`, values, ranges `1-5`, lists `1,15`, steps `*/15` and `0-30/10`; `N/STEP` is
//!   `N-max/STEP`, as Kubernetes reads it;
//! - month names `JAN`-`DEC` and weekday names `SUN`-`SAT`, in any case, also in ranges
//!   and lists (`MON-FRI`); day-of-week `0` and `7` are both Sunday;
//! - `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`;
//! - when both day-of-month and day-of-week are restricted (neither is written starting with
//!   `*`), a day matching EITHER runs (`0 0 1 * MON`: the 1st and every Monday); when one of
//!   them starts with `*` a day must match both (so, as in Vixie cron, `*/2` in day-of-month
//!   with `MON` means Mondays that fall on odd days).
//!
//! Refused, with the field named: values out of range, backwards ranges, step 0, unknown
//! names, a seconds field, Quartz's `?`/`L`/`W`/`#`, `@reboot`, and a day-of-month that no
//! chosen month has (`0 0 30 2 *`, which would never run).
//!
//! # Time zone and daylight saving time
//! The fields are wall-clock time in the schedule's zone (an IANA name, default UTC). A wall
//! time that does not exist (spring forward: 02:30 on the last Sunday of March in
//! Europe/Berlin) runs at the first minute that exists after it (03:00), as Vixie cron runs
//! fixed-time jobs of a skipped hour right after the jump; several such times run once. A
//! wall time that occurs twice (fall back) runs once, at its first occurrence.
//!
//! # Why the `cron` crate still does the calendar walk
//! The `cron` crate counts Sunday as 1, has no `0`/`7`, always ANDs day-of-month with
//! day-of-week, skips wall times that do not exist and runs ambiguous ones twice. So
//! [`fields`] parses and checks every field itself; the crate gets explicit lists in its own
//! numbering (weekday + 1), evaluated over wall-clock time with no zone (so no DST), as one
//! schedule or, for the OR rule, two whose earlier time wins; this module then turns each wall
//! time into an instant by the rules above. The crate's calendar ends with the year 2100.
//!
//! [`clock`] and [`ticker`] wait for the times on an injectable clock.

pub mod clock;
pub mod fields;
pub mod ticker;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

pub use fields::Field;
use fields::FieldSet;

use crate::output::git_store::CommitInfo;

/// A cron expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ScheduleError {
    /// The expression as given.
    pub expr: String,
    /// The field at fault, when one is.
    pub field: Option<Field>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "schedule `{}`: {field}: {}", self.expr, self.message),
            None => write!(f, "schedule `{}`: {}", self.expr, self.message),
        }
    }
}

/// A parsed cron schedule in a time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    expr: String,
    zone: Tz,
    /// Wall-clock calendars (in the `cron` crate's numbering); a time of any one runs.
    calendars: Vec<cron::Schedule>,
}

/// How far past a wall time that does not exist the first existing minute is looked for
/// (the longest gap on record, Samoa's skipped 30 December 2011, is a day).
const LONGEST_GAP_MINUTES: i64 = 26 * 60;

/// How many wall times a look-up may pass over (wall times of a repeated hour that lie
/// before the asked instant) before giving up.
const MAX_WALL_STEPS: usize = 10_000;

impl Schedule {
    /// Parses a 5-field expression or a nickname; the schedule is in UTC until
    /// [`Schedule::in_zone`].
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        let f = fields::parse(expr).map_err(|e| ScheduleError {
            expr: expr.into(),
            field: e.field,
            message: e.message,
        })?;
        let every = |lo: u32, hi: u32| FieldSet {
            bits: (lo..=hi).fold(0, |b, v| b | (1u64 << v)),
            star: true,
        };
        let mut pairs = vec![(f.day_of_month, f.day_of_week)];
        if !f.day_of_month.star && !f.day_of_week.star {
            pairs = vec![(f.day_of_month, every(0, 6)), (every(1, 31), f.day_of_week)];
        }
        let calendars = pairs
            .into_iter()
            .map(|(dom, dow)| {
                let text = format!(
                    "0 {} {} {} {} {}",
                    list(f.minute, 0),
                    list(f.hour, 0),
                    list(dom, 0),
                    list(f.month, 0),
                    list(dow, 1)
                );
                cron::Schedule::from_str(&text).map_err(|e| ScheduleError {
                    expr: expr.into(),
                    field: None,
                    message: format!("internal translation `{text}` refused: {e}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            expr: expr.into(),
            zone: Tz::UTC,
            calendars,
        })
    }

    /// The same schedule read in `zone`'s wall-clock time.
    pub fn in_zone(mut self, zone: Tz) -> Self {
        self.zone = zone;
        self
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The time zone of the fields.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first run time strictly after `after`, or `None` past the calendar's end (2100).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.zone).naive_local();
        let mut wall = local.with_second(0)?.with_nanosecond(0)?;
        for _ in 0..MAX_WALL_STEPS {
            wall = self.next_wall(wall)?;
            if let Some(at) = self.instant_of(wall)
                && at > after
            {
                return Some(at);
            }
        }
        None
    }

    /// The run times after `after`, in order.
    pub fn upcoming(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), |t| self.next_after(*t))
    }

    /// The first wall time of any calendar strictly after `wall`.
    fn next_wall(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        let after = wall.and_utc();
        self.calendars
            .iter()
            .filter_map(|c| c.after(&after).next())
            .min()
            .map(|t| t.naive_utc())
    }

    /// When `wall` happens in the zone: its only or first occurrence, or for a wall time in
    /// a gap the first minute after it that exists.
    fn instant_of(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        (0..=LONGEST_GAP_MINUTES).find_map(|m| {
            self.zone
                .from_local_datetime(&(wall + Duration::minutes(m)))
                .earliest()
                .map(|t| t.with_timezone(&Utc))
        })
    }
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// The values of `set` as a comma-separated list, each plus `shift`.
fn list(set: FieldSet, shift: u32) -> String {
    set.values()
        .map(|v| (v + shift).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The first commit among `commits` that should trigger a run: made by a person (not the
/// configurator) and touching the configurator's inputs: `services/`, `capacity/` or
/// `events.yaml`.
pub fn triggering_commit(commits: &[CommitInfo]) -> Option<&CommitInfo> {
    commits.iter().find(|c| {
        !c.by_rlc
            && c.paths.iter().any(|p| {
                p.starts_with("services/")
                    || crate::input::capacity::is_capacity_file(p)
                    || p == crate::input::events::file::PATH
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, Weekday};

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    fn next_n(expr: &str, zone: Tz, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        Schedule::parse(expr)
            .unwrap()
            .in_zone(zone)
            .upcoming(after)
            .take(n)
            .collect()
    }

    #[test]
    fn every_fifteen_minutes_and_a_daily_hour() {
        let t = utc(2026, 11, 29, 20, 7, 30);
        assert_eq!(
            next_n("*/15 * * * *", Tz::UTC, t, 3),
            [
                utc(2026, 11, 29, 20, 15, 0),
                utc(2026, 11, 29, 20, 30, 0),
                utc(2026, 11, 29, 20, 45, 0)
            ]
        );
        assert_eq!(
            next_n("0 3 * * *", Tz::UTC, t, 1),
            [utc(2026, 11, 30, 3, 0, 0)]
        );
    }

    #[test]
    fn next_is_strictly_after() {
        let s = Schedule::parse("0 6 * * *").unwrap();
        let six = utc(2026, 12, 1, 6, 0, 0);
        assert_eq!(s.next_after(six), Some(utc(2026, 12, 2, 6, 0, 0)));
        assert_eq!(
            s.next_after(six - Duration::seconds(1)),
            Some(six),
            "a second before the slot"
        );
    }

    #[test]
    fn weekdays_at_six_run_monday_to_friday_by_number_and_by_name() {
        // Friday 2026-01-30 07:00: the next five are Mon 2 .. Fri 6 February.
        let friday = utc(2026, 1, 30, 7, 0, 0);
        let want: Vec<_> = (2..=6).map(|d| utc(2026, 2, d, 6, 0, 0)).collect();
        assert_eq!(next_n("0 6 * * 1-5", Tz::UTC, friday, 5), want);
        assert_eq!(next_n("0 6 * * MON-FRI", Tz::UTC, friday, 5), want);
        for t in next_n("0 6 * * 1-5", Tz::UTC, friday, 200) {
            assert!(
                !matches!(t.weekday(), Weekday::Sat | Weekday::Sun),
                "{t} is a weekend"
            );
        }
    }

    #[test]
    fn sunday_is_zero_and_seven() {
        let t = utc(2026, 12, 1, 12, 0, 0); // a Tuesday
        let sundays = [utc(2026, 12, 6, 0, 0, 0), utc(2026, 12, 13, 0, 0, 0)];
        assert_eq!(next_n("0 0 * * 0", Tz::UTC, t, 2), sundays);
        assert_eq!(next_n("0 0 * * 7", Tz::UTC, t, 2), sundays);
        assert_eq!(next_n("@weekly", Tz::UTC, t, 2), sundays);
    }

    #[test]
    fn nicknames_run_when_crontab_runs_them() {
        let t = utc(2026, 12, 1, 12, 30, 0);
        assert_eq!(next_n("@daily", Tz::UTC, t, 1), [utc(2026, 12, 2, 0, 0, 0)]);
        assert_eq!(
            next_n("@hourly", Tz::UTC, t, 1),
            [utc(2026, 12, 1, 13, 0, 0)]
        );
        assert_eq!(
            next_n("@monthly", Tz::UTC, t, 1),
            [utc(2027, 1, 1, 0, 0, 0)]
        );
        assert_eq!(next_n("@yearly", Tz::UTC, t, 1), [utc(2027, 1, 1, 0, 0, 0)]);
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 13th and every Friday: Dec 2026 has Fridays 4, 11, 18, 25; the 13th is a Sunday.
        let t = utc(2026, 12, 1, 0, 0, 0);
        let days: Vec<u32> = next_n("0 0 13 * FRI", Tz::UTC, t, 5)
            .iter()
            .map(chrono::Datelike::day)
            .collect();
        assert_eq!(days, [4, 11, 13, 18, 25]);
        // A day-of-month written with `*` keeps Vixie's AND: odd days that are Fridays.
        let odd_fridays: Vec<u32> = next_n("0 0 */2 * FRI", Tz::UTC, t, 2)
            .iter()
            .map(chrono::Datelike::day)
            .collect();
        assert_eq!(odd_fridays, [11, 25]);
        // Only day-of-month restricted: only that day.
        assert_eq!(
            next_n("0 0 13 * *", Tz::UTC, t, 1),
            [utc(2026, 12, 13, 0, 0, 0)]
        );
    }

    #[test]
    fn refusals_name_the_expression_and_field() {
        let e = Schedule::parse("0 6 * * 8").unwrap_err();
        assert_eq!(
            e.to_string(),
            "schedule `0 6 * * 8`: day-of-week (field 5): `8` is out of range 0-7 \
             (0 and 7 are Sunday)"
        );
        let e = Schedule::parse("* * *").unwrap_err();
        assert!(e.to_string().contains("expected 5 fields"), "{e}");
        assert!("99 * * * *".parse::<Schedule>().is_err());
    }

    #[test]
    fn a_zone_moves_the_wall_clock() {
        // 06:00 in New York on a winter weekday is 11:00 UTC.
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            next_n("0 6 * * 1-5", ny, utc(2026, 12, 1, 12, 0, 0), 1),
            [utc(2026, 12, 2, 11, 0, 0)]
        );
    }

    #[test]
    fn a_wall_time_in_the_spring_gap_runs_at_the_first_minute_after_it() {
        // Europe/Berlin jumps from 02:00 CET to 03:00 CEST on Sunday 2026-03-29 (01:00 UTC).
        let berlin = chrono_tz::Europe::Berlin;
        let runs = next_n("30 2 * * *", berlin, utc(2026, 3, 27, 12, 0, 0), 3);
        assert_eq!(
            runs,
            [
                utc(2026, 3, 28, 1, 30, 0),
                utc(2026, 3, 29, 1, 0, 0),
                utc(2026, 3, 30, 0, 30, 0)
            ]
        );
        // Every 15 minutes: the four slots of the missing hour run once, at 03:00 CEST.
        let runs = next_n("*/15 * * * *", berlin, utc(2026, 3, 29, 0, 30, 0), 4);
        assert_eq!(
            runs,
            [
                utc(2026, 3, 29, 0, 45, 0),
                utc(2026, 3, 29, 1, 0, 0),
                utc(2026, 3, 29, 1, 15, 0),
                utc(2026, 3, 29, 1, 30, 0)
            ]
        );
    }

    #[test]
    fn a_wall_time_that_occurs_twice_runs_once() {
        // Europe/Berlin goes from 03:00 CEST back to 02:00 CET on 2026-10-25 (01:00 UTC).
        let berlin = chrono_tz::Europe::Berlin;
        let runs = next_n("30 2 * * *", berlin, utc(2026, 10, 24, 12, 0, 0), 2);
        assert_eq!(
            runs,
            [utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0)]
        );
        // Asked from inside the repeated hour (02:10 CET), the next run is 03:00 CET.
        let runs = next_n("*/15 * * * *", berlin, utc(2026, 10, 25, 1, 10, 0), 1);
        assert_eq!(runs, [utc(2026, 10, 25, 2, 0, 0)]);
        let runs = next_n("0 * * * *", berlin, utc(2026, 10, 24, 23, 30, 0), 3);
        assert_eq!(
            runs,
            [
                utc(2026, 10, 25, 0, 0, 0),
                utc(2026, 10, 25, 2, 0, 0),
                utc(2026, 10, 25, 3, 0, 0)
            ],
            "02:00 CEST runs, 02:00 CET does not"
        );
    }

    fn commit(by_rlc: bool, paths: &[&str]) -> CommitInfo {
        CommitInfo {
            id: "c".into(),
            author_name: "a".into(),
            author_email: "a@x".into(),
            message: "m".into(),
            paths: paths.iter().map(std::string::ToString::to_string).collect(),
            by_rlc,
        }
    }

    #[test]
    fn only_a_persons_services_commit_triggers() {
        assert!(triggering_commit(&[commit(true, &["limits/a.yaml"])]).is_none());
        assert!(triggering_commit(&[commit(true, &["services/a.yaml"])]).is_none());
        assert!(triggering_commit(&[commit(false, &["README.md"])]).is_none());
        assert!(triggering_commit(&[commit(false, &["services/a.yaml"])]).is_some());
        assert!(triggering_commit(&[commit(false, &["capacity/a.yaml"])]).is_some());
        assert!(triggering_commit(&[commit(false, &["events.yaml"])]).is_some());
        assert!(triggering_commit(&[commit(true, &["events.yaml"])]).is_none());
    }
}
