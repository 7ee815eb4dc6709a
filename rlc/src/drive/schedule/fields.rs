//! The five fields of a cron expression as people write them (`minute hour day-of-month
//! month day-of-week`, or a nickname such as `@daily`), parsed into sets of values, with
//! errors that name the field.

use std::fmt;

/// One field of a 5-field cron expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `0-59`.
    Minute,
    /// `0-23`.
    Hour,
    /// `1-31`.
    DayOfMonth,
    /// `1-12` or `JAN`-`DEC`.
    Month,
    /// `0-7` (0 and 7 are Sunday) or `SUN`-`SAT`.
    DayOfWeek,
}

impl Field {
    /// The fields in the order they are written.
    pub const ALL: [Field; 5] = [
        Field::Minute,
        Field::Hour,
        Field::DayOfMonth,
        Field::Month,
        Field::DayOfWeek,
    ];

    /// The field's name as errors show it.
    pub fn name(self) -> &'static str {
        match self {
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    /// The field's place in the expression, from 1.
    pub fn position(self) -> usize {
        Field::ALL.iter().position(|f| *f == self).unwrap_or(0) + 1
    }

    /// The smallest and largest value written in this field.
    pub fn bounds(self) -> (u32, u32) {
        match self {
            Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
        }
    }

    /// The names accepted in this field and the value of the first one.
    fn names(self) -> (&'static [&'static str], u32) {
        const MONTHS: [&str; 12] = [
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ];
        const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
        match self {
            Field::Month => (&MONTHS, 1),
            Field::DayOfWeek => (&DAYS, 0),
            _ => (&[], 0),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (field {})", self.name(), self.position())
    }
}

/// What one field allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSet {
    /// Bit `v` is set when value `v` matches (day-of-week: 0 is Sunday, 7 is folded into 0).
    pub bits: u64,
    /// The field was written starting with `*` (`*` or `*/n`): Vixie cron's test for
    /// "unrestricted" in its day-of-month/day-of-week rule.
    pub star: bool,
}

impl FieldSet {
    /// The values that match, smallest first.
    pub fn values(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |v| self.bits & (1u64 << v) != 0)
    }

    /// Whether `v` matches.
    pub fn contains(self, v: u32) -> bool {
        v < 64 && self.bits & (1u64 << v) != 0
    }
}

/// The five parsed fields of an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    /// Minutes 0-59.
    pub minute: FieldSet,
    /// Hours 0-23.
    pub hour: FieldSet,
    /// Days of the month 1-31.
    pub day_of_month: FieldSet,
    /// Months 1-12.
    pub month: FieldSet,
    /// Days of the week 0-6, Sunday 0.
    pub day_of_week: FieldSet,
}

/// Why an expression was refused: the field (when one is at fault) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field at fault, if the problem is in one field.
    pub field: Option<Field>,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    fn whole(message: String) -> Self {
        Self {
            field: None,
            message,
        }
    }
}

const NICKNAMES: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Parses a 5-field expression or a nickname (`@daily`, …).
pub fn parse(expr: &str) -> Result<Fields, FieldError> {
    let trimmed = expr.trim();
    let expanded = if trimmed.starts_with('@') {
        let lower = trimmed.to_ascii_lowercase();
        match NICKNAMES.iter().find(|(n, _)| *n == lower) {
            Some((_, e)) => *e,
            None if lower == "@reboot" => {
                return Err(FieldError::whole(
                    "`@reboot` has no meaning for a schedule; `rlc serve` runs when a \
                     person's commit arrives and on the schedule"
                        .into(),
                ));
            }
            None => {
                return Err(FieldError::whole(format!(
                    "unknown nickname `{trimmed}` (known: {})",
                    NICKNAMES.map(|(n, _)| n).join(", ")
                )));
            }
        }
    } else {
        trimmed
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    if parts.len() != 5 {
        let seconds = if parts.len() == 6 {
            "; a seconds field is not supported"
        } else {
            ""
        };
        return Err(FieldError::whole(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or a nickname \
             such as @daily, got {}{seconds}",
            parts.len()
        )));
    }
    let mut sets = [FieldSet {
        bits: 0,
        star: false,
    }; 5];
    for ((set, field), text) in sets.iter_mut().zip(Field::ALL).zip(parts) {
        *set = parse_field(field, text).map_err(|message| FieldError {
            field: Some(field),
            message,
        })?;
    }
    let [minute, hour, day_of_month, month, day_of_week] = sets;
    let fields = Fields {
        minute,
        hour,
        day_of_month,
        month,
        day_of_week,
    };
    check_day_exists(&fields)?;
    Ok(fields)
}

/// Refuses a day-of-month that no chosen month has (`0 0 30 2 *`), which would never run.
/// With a restricted day-of-week too, Vixie's OR rule lets the weekdays run, so that is fine.
fn check_day_exists(f: &Fields) -> Result<(), FieldError> {
    const LONGEST: [u32; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let or_rule = !f.day_of_month.star && !f.day_of_week.star;
    let exists = f
        .month
        .values()
        .any(|m| f.day_of_month.values().any(|d| d <= LONGEST[m as usize]));
    if or_rule || exists {
        return Ok(());
    }
    Err(FieldError {
        field: Some(Field::DayOfMonth),
        message: "none of these days occurs in the chosen months, so it would never run".into(),
    })
}

/// Parses one field: a comma-separated list of `*`, `N`, `A-B`, each with an optional `/STEP`
/// (`N/STEP` means `N-max/STEP`, as Kubernetes reads it).
fn parse_field(field: Field, text: &str) -> Result<FieldSet, String> {
    let (lo, hi) = field.bounds();
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("`{text}` has an empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(parse_step(item, step)?)),
            None => (item, None),
        };
        let (start, end) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(field, a)?, value(field, b)?);
            if a > b {
                return Err(format!(
                    "range `{range}` runs backwards (write it as two ranges or a list)"
                ));
            }
            (a, b)
        } else {
            let a = value(field, range)?;
            (a, if step.is_some() { hi } else { a })
        };
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1u64 << v;
            let Some(n) = v.checked_add(step) else { break };
            v = n;
        }
    }
    if field == Field::DayOfWeek && bits & (1 << 7) != 0 {
        bits = (bits & !(1 << 7)) | 1;
    }
    Ok(FieldSet {
        bits,
        star: text.starts_with('*'),
    })
}

fn parse_step(item: &str, step: &str) -> Result<u32, String> {
    match step.parse::<u32>() {
        Ok(0) => Err(format!("`{item}`: a step must be at least 1")),
        Ok(n) if step.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!("`{item}`: step `{step}` is not a number")),
    }
}

fn value(field: Field, text: &str) -> Result<u32, String> {
    let (lo, hi) = field.bounds();
    let sunday = if field == Field::DayOfWeek {
        " (0 and 7 are Sunday)"
    } else {
        ""
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<u32>() {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(format!("`{text}` is out of range {lo}-{hi}{sunday}")),
        };
    }
    let (names, first) = field.names();
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(first + i as u32);
    }
    if text.is_empty() {
        return Err("a value is missing".into());
    }
    Err(match (names.first(), names.last()) {
        (Some(a), Some(z)) => {
            format!("`{text}` is not a number {lo}-{hi}{sunday} nor a name {a}-{z}")
        }
        _ => format!("`{text}` is not a number {lo}-{hi}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(expr: &str, field: Field) -> Vec<u32> {
        let f = parse(expr).unwrap();
        let s = match field {
            Field::Minute => f.minute,
            Field::Hour => f.hour,
            Field::DayOfMonth => f.day_of_month,
            Field::Month => f.month,
            Field::DayOfWeek => f.day_of_week,
        };
        s.values().collect()
    }

    fn refused(expr: &str) -> FieldError {
        parse(expr).expect_err(expr)
    }

    #[test]
    fn weekdays_are_monday_to_friday_by_number_and_by_name() {
        assert_eq!(set("0 6 * * 1-5", Field::DayOfWeek), [1, 2, 3, 4, 5]);
        assert_eq!(set("0 6 * * MON-FRI", Field::DayOfWeek), [1, 2, 3, 4, 5]);
        assert_eq!(set("0 6 * * mon-fri", Field::DayOfWeek), [1, 2, 3, 4, 5]);
        assert_eq!(set("0 6 * * mon,wed,FRI", Field::DayOfWeek), [1, 3, 5]);
        assert_eq!(set("0 6 * * 1-5", Field::Hour), [6]);
        assert_eq!(set("0 6 * * 1-5", Field::Minute), [0]);
    }

    #[test]
    fn sunday_is_zero_and_seven() {
        assert_eq!(set("0 0 * * 0", Field::DayOfWeek), [0]);
        assert_eq!(set("0 0 * * 7", Field::DayOfWeek), [0]);
        assert_eq!(set("0 0 * * SUN", Field::DayOfWeek), [0]);
        assert_eq!(set("0 0 * * 5-7", Field::DayOfWeek), [0, 5, 6]);
        assert_eq!(set("0 0 * * 0-7", Field::DayOfWeek), [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(set("0 0 * * */2", Field::DayOfWeek), [0, 2, 4, 6]);
    }

    #[test]
    fn steps_ranges_and_lists() {
        assert_eq!(set("*/15 * * * *", Field::Minute), [0, 15, 30, 45]);
        assert_eq!(set("5-20/5 * * * *", Field::Minute), [5, 10, 15, 20]);
        assert_eq!(set("50/5 * * * *", Field::Minute), [50, 55]);
        assert_eq!(set("1,2,40-42 * * * *", Field::Minute), [1, 2, 40, 41, 42]);
        assert_eq!(set("0 */6 * * *", Field::Hour), [0, 6, 12, 18]);
        assert_eq!(set("0 0 */10 * *", Field::DayOfMonth), [1, 11, 21, 31]);
        assert_eq!(set("0 0 1 jan,Jul *", Field::Month), [1, 7]);
        assert_eq!(set("0 0 1 MAR-MAY *", Field::Month), [3, 4, 5]);
        assert_eq!(set("0 0 1 */3 *", Field::Month), [1, 4, 7, 10]);
    }

    #[test]
    fn nicknames_are_their_five_fields() {
        for (nick, five) in NICKNAMES {
            assert_eq!(parse(nick).unwrap(), parse(five).unwrap(), "{nick}");
        }
        assert_eq!(parse("@DAILY").unwrap(), parse("0 0 * * *").unwrap());
    }

    #[test]
    fn star_marks_follow_the_written_text() {
        let f = parse("0 0 */2 * 1").unwrap();
        assert!(f.day_of_month.star && !f.day_of_week.star);
        let f = parse("0 0 1-31 * *").unwrap();
        assert!(!f.day_of_month.star && f.day_of_week.star);
    }

    #[test]
    fn refusals_name_the_field() {
        let cases: [(&str, Option<Field>, &str); 17] = [
            (
                "0 6 * * 8",
                Some(Field::DayOfWeek),
                "`8` is out of range 0-7 (0 and 7 are Sunday)",
            ),
            (
                "60 * * * *",
                Some(Field::Minute),
                "`60` is out of range 0-59",
            ),
            ("0 24 * * *", Some(Field::Hour), "`24` is out of range 0-23"),
            (
                "0 0 0 * *",
                Some(Field::DayOfMonth),
                "`0` is out of range 1-31",
            ),
            (
                "0 0 1 13 *",
                Some(Field::Month),
                "`13` is out of range 1-12",
            ),
            ("0 0 * * FRI-MON", Some(Field::DayOfWeek), "runs backwards"),
            (
                "*/0 * * * *",
                Some(Field::Minute),
                "step must be at least 1",
            ),
            (
                "*/x * * * *",
                Some(Field::Minute),
                "step `x` is not a number",
            ),
            ("1,,2 * * * *", Some(Field::Minute), "empty list item"),
            (
                "0 0 * * MONDAY",
                Some(Field::DayOfWeek),
                "nor a name SUN-SAT",
            ),
            ("0 0 * FOO *", Some(Field::Month), "nor a name JAN-DEC"),
            (
                "0 MON * * *",
                Some(Field::Hour),
                "`MON` is not a number 0-23",
            ),
            ("0 0 ? * *", Some(Field::DayOfMonth), "`?` is not a number"),
            ("0 0 30 2 *", Some(Field::DayOfMonth), "never run"),
            ("* * *", None, "expected 5 fields"),
            ("0 0 6 * * 1-5", None, "a seconds field is not supported"),
            ("@reboot", None, "`@reboot` has no meaning"),
        ];
        for (expr, field, needle) in cases {
            let e = refused(expr);
            assert_eq!(e.field, field, "{expr}: {e:?}");
            assert!(e.message.contains(needle), "{expr}: {}", e.message);
        }
        assert!(refused("@fortnightly").message.contains("unknown nickname"));
        assert!(refused("").message.contains("got 0"));
        assert!(refused("0 0 1- * *").message.contains("a value is missing"));
    }

    #[test]
    fn a_missing_day_is_fine_when_weekdays_also_run() {
        assert!(parse("0 0 30 2 MON").is_ok());
        assert!(parse("0 0 29 2 *").is_ok(), "leap years have it");
        assert!(parse("0 0 31 4,6 *").is_err());
    }

    #[test]
    fn field_display_names_and_numbers_it() {
        assert_eq!(Field::DayOfWeek.to_string(), "day-of-week (field 5)");
        assert_eq!(Field::Minute.to_string(), "minute (field 1)");
    }
}
