//! All YAML handling of the project: typed parsing with located errors and a line index.
//!
//! `serde_yaml` is archived by its author; keeping every use of it here makes moving to a
//! maintained fork a one-line change. Semantic checks (duplicates, unknown references) need
//! the line of a value that parsed fine, which serde does not keep, so [`LineIndex`] walks
//! the same text with `yaml-rust2`'s event parser and records the line of every field path.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

use crate::ConfigError;

/// Parses `text` (the content of `file`) into `T`, mapping serde errors to [`ConfigError`].
pub fn parse<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, ConfigError> {
    serde_yaml::from_str(text).map_err(|e| located(file, &e))
}

/// Serialises `value` as YAML.
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(value)
}

/// A YAML value, for free-form fields (policy parameters, evidence).
pub type Value = serde_yaml::Value;

/// Converts a YAML value into JSON (policy parameters and evidence are handled as JSON).
pub fn to_json(value: &Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

fn located(file: &str, e: &serde_yaml::Error) -> ConfigError {
    let text = e.to_string();
    let line = e.location().map(|l| l.line());
    let without_location = match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => text.as_str(),
    };
    let (field, message) = match without_location.split_once(": ") {
        Some((field, message)) if looks_like_path(field) => (field.to_string(), message),
        _ => (String::new(), without_location),
    };
    ConfigError::new(file, line, field, without_value(message))
}

/// A serde message without the value it quotes: `invalid type: string "hunter2", expected
/// f64` becomes `invalid type: a string, expected f64`, so an error names file, line and
/// field but never repeats what the file holds (it may not be a config file at all).
fn without_value(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some(i) = rest.rfind(", expected ")
        {
            return format!("{prefix}{}{}", kind_of(&rest[..i]), &rest[i..]);
        }
    }
    // An unknown value is not repeated, nor an unknown key unless it is a misspelling of
    // an expected field: a line of a password file parses as a key (`root:x:0:0::`), a
    // misspelled field (`scpoe`) must be named to be found.
    for prefix in ["unknown variant", "unknown field"] {
        if let Some(rest) = message
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix(' '))
        {
            let Some(i) = rest
                .rfind(", expected ")
                .or_else(|| rest.rfind(", there are no"))
            else {
                return prefix.into();
            };
            let expected = &rest[i..];
            return match misspelling(prefix, &rest[..i], expected) {
                Some((given, meant)) => {
                    format!("{prefix} `{given}` (did you mean `{meant}`?){expected}")
                }
                None => format!("{prefix}{expected}"),
            };
        }
    }
    if message.starts_with("duplicate entry ") {
        return "duplicate entry in a YAML map".into();
    }
    message.to_string()
}

/// The unknown key serde quotes (`` `scpoe` ``) and the expected field it misspells, when
/// it is one: a plain name at most two edits from one of the names `expected` lists.
fn misspelling<'a>(prefix: &str, quoted: &'a str, expected: &'a str) -> Option<(&'a str, &'a str)> {
    if prefix != "unknown field" {
        return None;
    }
    let given = quoted.strip_prefix('`')?.strip_suffix('`')?;
    if given.len() > 40 || !given.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|name| (edits(given, name), name))
        .filter(|&(d, name)| d <= 2 && d < name.len().min(given.len()) / 2 + 1)
        .min_by_key(|&(d, _)| d)
        .map(|(_, name)| (given, name))
}

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// What serde's description of an unexpected value says about its type, without the value.
fn kind_of(unexpected: &str) -> &'static str {
    const KINDS: [(&str, &str); 6] = [
        ("string ", "a string"),
        ("integer ", "an integer"),
        ("floating point ", "a number"),
        ("boolean ", "a boolean"),
        ("character ", "a character"),
        ("byte array", "a byte array"),
    ];
    for (prefix, kind) in KINDS {
        if unexpected.starts_with(prefix) {
            return kind;
        }
    }
    match unexpected {
        "sequence" => "a sequence",
        "map" => "a map",
        "unit value" => "null",
        _ => "a value",
    }
}

fn looks_like_path(s: &str) -> bool {
    !s.is_empty()
        && !s.contains(' ')
        && s.chars()
            .all(|c| c.is_alphanumeric() || "._-[]".contains(c))
}

/// Line numbers of every field path in a YAML document, e.g. `buckets[1].name` → 7.
#[derive(Debug, Default, Clone)]
pub struct LineIndex {
    lines: HashMap<String, usize>,
}

impl LineIndex {
    /// Indexes `text`; an unparsable text yields an empty index (parse errors come from serde).
    pub fn new(text: &str) -> Self {
        let mut builder = IndexBuilder::default();
        let mut parser = Parser::new_from_str(text);
        let _ = parser.load(&mut builder, false);
        Self {
            lines: builder.lines,
        }
    }

    /// The 1-based line of `path`, or of its closest indexed ancestor.
    pub fn line(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p) {
                return Some(*l);
            }
            p = &p[..p.rfind(['.', '['])?];
        }
    }
}

enum Frame {
    Mapping { key: Option<String> },
    Sequence { index: usize },
}

#[derive(Default)]
struct IndexBuilder {
    stack: Vec<Frame>,
    lines: HashMap<String, usize>,
}

impl IndexBuilder {
    fn path(&self) -> String {
        let mut p = String::new();
        for frame in &self.stack {
            match frame {
                Frame::Mapping { key: Some(k) } => {
                    if !p.is_empty() {
                        p.push('.');
                    }
                    p.push_str(k);
                }
                Frame::Mapping { key: None } => {}
                Frame::Sequence { index } => p.push_str(&format!("[{index}]")),
            }
        }
        p
    }

    fn record(&mut self, line: usize) {
        let path = self.path();
        if !path.is_empty() {
            self.lines.entry(path).or_insert(line);
        }
    }

    /// Called after a complete value: the parent moves to its next key or index.
    fn advance(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Mapping { key }) => *key = None,
            Some(Frame::Sequence { index }) => *index += 1,
            None => {}
        }
    }

    fn expecting_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Mapping { key: None }))
    }
}

impl MarkedEventReceiver for IndexBuilder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(value, ..) => {
                if self.expecting_key() {
                    if let Some(Frame::Mapping { key }) = self.stack.last_mut() {
                        *key = Some(value);
                    }
                    self.record(line);
                } else {
                    self.record(line);
                    self.advance();
                }
            }
            Event::Alias(_) => {
                self.record(line);
                self.advance();
            }
            Event::MappingStart(..) => {
                self.record(line);
                self.stack.push(Frame::Mapping { key: None });
            }
            Event::SequenceStart(..) => {
                self.record(line);
                self.stack.push(Frame::Sequence { index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.advance();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_finds_nested_fields() {
        let text = "service: a\nbuckets:\n  - name: x\n    match: { caller: gw }\n  - name: y\n    policy:\n      kind: fixed\n      rps: 5\n";
        let idx = LineIndex::new(text);
        assert_eq!(idx.line("service"), Some(1));
        assert_eq!(idx.line("buckets[0].name"), Some(3));
        assert_eq!(idx.line("buckets[0].match.caller"), Some(4));
        assert_eq!(idx.line("buckets[1].name"), Some(5));
        assert_eq!(idx.line("buckets[1].policy.rps"), Some(8));
        assert_eq!(idx.line("buckets[1].policy.missing"), Some(6));
    }

    #[test]
    fn serde_errors_keep_field_and_line() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct T {
            a: u32,
        }
        let e = parse::<T>("f.yaml", "\na: nope\n").unwrap_err();
        assert_eq!(e.file, "f.yaml");
        assert_eq!(e.line, Some(2));
        assert_eq!(e.field, "a");
        assert_eq!(e.message, "invalid type: a string, expected u32");
    }

    #[test]
    fn serde_messages_lose_the_values_they_quote() {
        for (given, want) in [
            (
                "invalid type: string \"hunter2, expected x\", expected f64",
                "invalid type: a string, expected f64",
            ),
            (
                "invalid value: integer `123456`, expected a port",
                "invalid value: an integer, expected a port",
            ),
            (
                "unknown variant `hunter2`, expected one of `global`, `zone`",
                "unknown variant, expected one of `global`, `zone`",
            ),
            (
                "duplicate entry with key \"hunter2\"",
                "duplicate entry in a YAML map",
            ),
            (
                "invalid type: map, expected f64",
                "invalid type: a map, expected f64",
            ),
            ("missing field `service`", "missing field `service`"),
            (
                "unknown field `root:hunter2:19000::`, expected `service`",
                "unknown field, expected `service`",
            ),
            (
                "unknown field `scpoe`, expected one of `name`, `scope`",
                "unknown field `scpoe` (did you mean `scope`?), expected one of `name`, `scope`",
            ),
            (
                "unknown field `hunter2`, expected one of `name`, `scope`",
                "unknown field, expected one of `name`, `scope`",
            ),
        ] {
            assert_eq!(without_value(given), want);
        }
    }
}
