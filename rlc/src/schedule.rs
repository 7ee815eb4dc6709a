//! When the configurator runs: a cron schedule, and right after a person's commit to
//! `services/` on `main` (never after its own commits).

use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::git_store::CommitInfo;

/// A cron expression was refused.
#[derive(Debug, thiserror::Error)]
#[error("schedule `{expr}`: {message}")]
pub struct ScheduleError {
    /// The expression as given.
    pub expr: String,
    /// What is wrong.
    pub message: String,
}

/// A parsed cron schedule. Accepts the usual 5-field form (`*/15 * * * *`) as well as the
/// `cron` crate's 6/7-field form with seconds.
#[derive(Debug, Clone)]
pub struct Schedule {
    inner: cron::Schedule,
    expr: String,
}

impl Schedule {
    /// Parses `expr`.
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        let fields = expr.split_whitespace().count();
        let full = match fields {
            5 => format!("0 {expr}"),
            6 | 7 => expr.to_string(),
            n => {
                return Err(ScheduleError {
                    expr: expr.into(),
                    message: format!("expected 5 fields (min hour day month weekday), got {n}"),
                });
            }
        };
        let inner = cron::Schedule::from_str(&full).map_err(|e| ScheduleError {
            expr: expr.into(),
            message: e.to_string(),
        })?;
        Ok(Self {
            inner,
            expr: expr.into(),
        })
    }

    /// The next time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.inner.after(&after).next()
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }
}

/// The first commit among `commits` that should trigger a run: made by a person (not the
/// configurator) and touching `services/`.
pub fn triggering_commit(commits: &[CommitInfo]) -> Option<&CommitInfo> {
    commits
        .iter()
        .find(|c| !c.by_rlc && c.paths.iter().any(|p| p.starts_with("services/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn five_field_cron_is_accepted() {
        let s = Schedule::parse("*/15 * * * *").unwrap();
        let t = Utc.with_ymd_and_hms(2026, 11, 29, 20, 7, 30).unwrap();
        assert_eq!(s.next_after(t), Some(Utc.with_ymd_and_hms(2026, 11, 29, 20, 15, 0).unwrap()));
        let s = Schedule::parse("0 3 * * *").unwrap();
        assert_eq!(s.next_after(t), Some(Utc.with_ymd_and_hms(2026, 11, 30, 3, 0, 0).unwrap()));
    }

    #[test]
    fn six_field_cron_with_seconds_is_accepted() {
        let s = Schedule::parse("*/10 * * * * *").unwrap();
        let t = Utc.with_ymd_and_hms(2026, 11, 29, 20, 7, 31).unwrap();
        assert_eq!(s.next_after(t), Some(Utc.with_ymd_and_hms(2026, 11, 29, 20, 7, 40).unwrap()));
    }

    #[test]
    fn bad_cron_is_refused_with_the_expression() {
        let e = Schedule::parse("* * *").unwrap_err();
        assert!(e.to_string().contains("expected 5 fields"), "{e}");
        let e = Schedule::parse("99 * * * *").unwrap_err();
        assert!(e.to_string().contains("99 * * * *"), "{e}");
    }

    fn commit(by_rlc: bool, paths: &[&str]) -> CommitInfo {
        CommitInfo {
            id: "c".into(),
            author_name: "a".into(),
            author_email: "a@x".into(),
            message: "m".into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            by_rlc,
        }
    }

    #[test]
    fn only_a_persons_services_commit_triggers() {
        assert!(triggering_commit(&[commit(true, &["limits/a.yaml"])]).is_none());
        assert!(triggering_commit(&[commit(true, &["services/a.yaml"])]).is_none());
        assert!(triggering_commit(&[commit(false, &["README.md"])]).is_none());
        assert!(triggering_commit(&[commit(false, &["services/a.yaml"])]).is_some());
    }
}
