//! `rlc serve --schedule … --print-next N` and the refusal of bad schedules, through the
//! built binary.

use std::process::{Command, Output};

use chrono::{DateTime, Datelike, Duration, FixedOffset, Timelike, Weekday};

fn rlc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .env_remove("RLC_CONFIG_REPO")
        .output()
        .expect("the rlc binary runs")
}

/// Runs `rlc serve` with `args`, asserts it succeeded, and returns its stdout lines.
fn print_next(args: &[&str]) -> Vec<String> {
    let out = rlc(&[&["serve"], args].concat());
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Runs `rlc serve` with `args`, asserts it exited 2 (bad usage), and returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = rlc(&[&["serve"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "nothing printed on stdout");
    stderr
}

#[test]
fn print_next_lists_five_weekday_mornings() {
    let lines = print_next(&["--schedule", "0 6 * * 1-5", "--print-next", "5"]);
    assert_eq!(lines.len(), 5, "{lines:?}");
    let times: Vec<DateTime<FixedOffset>> = lines
        .iter()
        .map(|l| DateTime::parse_from_rfc3339(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    for (line, t) in lines.iter().zip(&times) {
        assert!(line.ends_with('Z'), "{line} is in UTC");
        assert!(
            !matches!(t.weekday(), Weekday::Sat | Weekday::Sun),
            "{line} is a weekend"
        );
        assert_eq!((t.hour(), t.minute(), t.second()), (6, 0, 0), "{line}");
    }
    for pair in times.windows(2) {
        let want = if pair[0].weekday() == Weekday::Fri {
            3
        } else {
            1
        };
        assert_eq!(
            pair[1] - pair[0],
            Duration::days(want),
            "{} follows {}: no weekday left out",
            pair[1],
            pair[0]
        );
    }
    let now = chrono::Utc::now();
    assert!(
        times[0] > now && times[0].with_timezone(&chrono::Utc) - now <= Duration::days(3),
        "{}",
        times[0]
    );
}

#[test]
fn print_next_from_a_given_time_is_exact() {
    // Friday 2026-01-30 07:00 UTC: after that day's run.
    let lines = print_next(&[
        "--schedule",
        "0 6 * * MON-FRI",
        "--now",
        "1769756400",
        "--print-next",
        "5",
    ]);
    assert_eq!(
        lines,
        [
            "2026-02-02T06:00:00Z",
            "2026-02-03T06:00:00Z",
            "2026-02-04T06:00:00Z",
            "2026-02-05T06:00:00Z",
            "2026-02-06T06:00:00Z"
        ]
    );
}

#[test]
fn print_next_in_a_zone_shows_its_wall_clock_across_dst() {
    // Thursday 2026-03-26 12:00 UTC; Berlin moves to summer time on Sunday the 29th.
    let lines = print_next(&[
        "--schedule",
        "0 6 * * 1-5",
        "--schedule-tz",
        "Europe/Berlin",
        "--now",
        "1774526400",
        "--print-next",
        "3",
    ]);
    assert_eq!(
        lines,
        [
            "2026-03-27T06:00:00+01:00",
            "2026-03-30T06:00:00+02:00",
            "2026-03-31T06:00:00+02:00"
        ]
    );
}

#[test]
fn sunday_is_zero_seven_and_sun() {
    let at = |dow: &str| {
        print_next(&[
            "--schedule",
            &format!("0 0 * * {dow}"),
            "--now",
            "1796126400", // Tuesday 2026-12-01 12:00 UTC
            "--print-next",
            "2",
        ])
    };
    let sundays = ["2026-12-06T00:00:00Z", "2026-12-13T00:00:00Z"];
    assert_eq!(at("0"), sundays);
    assert_eq!(at("7"), sundays);
    assert_eq!(at("SUN"), sundays);
    let daily = print_next(&[
        "--schedule",
        "@daily",
        "--now",
        "1796126400",
        "--print-next",
        "1",
    ]);
    assert_eq!(daily, ["2026-12-02T00:00:00Z"]);
}

#[test]
fn a_bad_schedule_is_refused_with_exit_2_naming_the_field() {
    let stderr = refused(&["--schedule", "0 6 * * 8", "--print-next", "1"]);
    assert!(stderr.contains("--schedule"), "{stderr}");
    assert!(
        stderr.contains("day-of-week (field 5): `8` is out of range 0-7 (0 and 7 are Sunday)"),
        "{stderr}"
    );
    // Refused before anything is touched, also in the long-running form.
    let stderr = refused(&[
        "--schedule",
        "0 25 * * *",
        "--config-repo",
        "/nonexistent/repo",
        "--prometheus",
        "http://127.0.0.1:1",
    ]);
    assert!(
        stderr.contains("hour (field 2): `25` is out of range 0-23"),
        "{stderr}"
    );
    let stderr = refused(&["--schedule", "0 0 6 * * 1-5", "--print-next", "1"]);
    assert!(
        stderr.contains("a seconds field is not supported"),
        "{stderr}"
    );
}

#[test]
fn a_bad_time_zone_is_refused_with_exit_2() {
    let stderr = refused(&["--schedule-tz", "Mars/Olympus", "--print-next", "1"]);
    assert!(stderr.contains("--schedule-tz"), "{stderr}");
    assert!(
        stderr.contains("`Mars/Olympus` is not an IANA time zone"),
        "{stderr}"
    );
}

#[test]
fn serving_still_needs_the_config_repo() {
    let stderr = refused(&["--schedule", "@hourly"]);
    assert!(stderr.contains("--config-repo"), "{stderr}");
}
