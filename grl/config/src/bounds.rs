//! The limits a config repo must stay within, checked before and after YAML parsing, so a
//! hostile or broken file is refused quickly with a clear error instead of costing the
//! controller time or memory.
//!
//! [`prescan`] runs before any YAML parser sees the text: size and nesting depth in one
//! linear pass (a parser fed 100,000 nested `[` takes quadratic time). The other checks run
//! on parsed values: name length and characters, bucket counts and the range of a limit.

use crate::ConfigError;

/// Largest config file accepted, in bytes.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Largest sum of all config files of one snapshot, in bytes.
pub const MAX_TOTAL_BYTES: usize = 32 * 1024 * 1024;
/// Most config files in one snapshot.
pub const MAX_FILES: usize = 12_000;
/// Deepest nesting of flow collections (`[`, `{`) accepted.
pub const MAX_FLOW_DEPTH: usize = 32;
/// Deepest indentation (in columns, `- ` counted as two) accepted.
pub const MAX_INDENT: usize = 128;
/// Longest service, bucket, caller or procedure name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Most buckets one service may declare.
pub const MAX_BUCKETS_PER_SERVICE: usize = 1_000;
/// Most buckets one snapshot may hold over all services.
pub const MAX_BUCKETS: usize = 60_000;
/// Smallest limit accepted, in requests per second.
pub const MIN_LIMIT_RPS: f64 = 1e-3;
/// Largest limit accepted, in requests per second.
pub const MAX_LIMIT_RPS: f64 = 1e9;

/// Refuses `text` (the content of `file`) when it is too large or nested too deeply.
///
/// One pass over the bytes: flow depth counts `[`/`{` outside quotes and comments; block
/// depth is the indentation of a line plus two columns per leading `- `.
pub fn prescan(file: &str, text: &str) -> Result<(), ConfigError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(ConfigError::new(
            file,
            None,
            "",
            format!(
                "file is {} bytes, more than the {MAX_FILE_BYTES} allowed",
                text.len()
            ),
        ));
    }
    let mut flow = 0usize;
    // A quoted scalar may span lines, so the quote state is carried from line to line.
    let mut quote: Option<u8> = None;
    for (n, line) in text.lines().enumerate() {
        let lineno = n + 1;
        if quote.is_none() {
            let indent = block_indent(line);
            if indent > MAX_INDENT {
                return Err(ConfigError::new(
                    file,
                    Some(lineno),
                    "",
                    format!("nested {indent} columns deep, more than the {MAX_INDENT} allowed"),
                ));
            }
        }
        let bytes = line.as_bytes();
        let mut prev = b' ';
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match quote {
                Some(b'"') if b == b'\\' => i += 1,
                Some(b'\'') if b == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 1,
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None => match b {
                    b'#' if matches!(prev, b' ' | b'\t') => break,
                    // A quote opens a scalar only where a token starts; elsewhere it is
                    // part of a plain scalar (`it's`).
                    b'"' | b'\'' if matches!(prev, b' ' | b'\t' | b'[' | b'{' | b',') => {
                        quote = Some(b);
                    }
                    b'[' | b'{' => {
                        flow += 1;
                        if flow > MAX_FLOW_DEPTH {
                            return Err(ConfigError::new(
                                file,
                                Some(lineno),
                                "",
                                format!("brackets nested more than {MAX_FLOW_DEPTH} deep"),
                            ));
                        }
                    }
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = b;
            i += 1;
        }
    }
    Ok(())
}

/// The indentation of a line, counting each leading `- ` (a nested block sequence) as two.
fn block_indent(line: &str) -> usize {
    let bytes = line.as_bytes();
    let mut col = 0;
    while col < bytes.len() {
        match bytes[col] {
            b' ' => col += 1,
            b'-' if bytes.get(col + 1).is_none_or(|c| *c == b' ') => col += 2,
            _ => break,
        }
    }
    col
}

/// Why a name (service, bucket, caller, procedure) is refused, if it is.
pub fn name_problem(name: &str) -> Option<String> {
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "is {} bytes long, more than the {MAX_NAME_BYTES} allowed",
            name.len()
        ));
    }
    name.chars().find(|c| is_forbidden_char(*c)).map(|c| {
        format!(
            "contains the control or bidirectional character U+{:04X}",
            u32::from(c)
        )
    })
}

/// Control characters, and the Unicode formatting characters that reorder or hide text
/// (bidirectional overrides and isolates, zero-width characters, byte order mark).
pub fn is_forbidden_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// Whether `rps` is a limit this system accepts: finite, in [`MIN_LIMIT_RPS`]..=[`MAX_LIMIT_RPS`].
pub fn limit_in_range(rps: f64) -> bool {
    (MIN_LIMIT_RPS..=MAX_LIMIT_RPS).contains(&rps)
}

/// The refusal text for a limit outside the range. It does not repeat the value: errors
/// name file, line and field, never what the file holds.
pub fn limit_problem(_rps: f64) -> String {
    format!("the limit must be a finite number between {MIN_LIMIT_RPS} and {MAX_LIMIT_RPS} rps")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_brackets_are_refused_fast_and_quoted_ones_ignored() {
        let deep = "[".repeat(100_000);
        let start = std::time::Instant::now();
        let e = prescan("services/x.yaml", &deep).unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(e.line, Some(1));
        assert!(e.message.contains("nested more than 32"), "{e}");
        let quoted = format!(
            "a: \"{}\"\nb: '{}' # [[[[\n",
            "[".repeat(100),
            "{".repeat(100)
        );
        prescan("f", &quoted).unwrap();
        prescan("f", "a: { b: [1, 2], c: { d: x } }\n").unwrap();
        // Closing brackets inside quotes (with their escapes) do not hide real nesting.
        let hidden = "[ 'x'' ]' ".repeat(40) + &"[ \"\\\" ]\" ".repeat(40);
        assert!(prescan("f", &hidden).is_err());
        let multi_line = format!("a: [ \"x\n{}\"\n", "]".repeat(50)) + &"[".repeat(32);
        assert!(prescan("f", &multi_line).is_err());
    }

    #[test]
    fn deep_indentation_and_big_files_are_refused() {
        let mut text = String::new();
        for i in 0..80 {
            text.push_str(&" ".repeat(i * 2));
            text.push_str("k:\n");
        }
        let e = prescan("f", &text).unwrap_err();
        assert!(e.message.contains("columns deep"), "{e}");
        let nested_dashes = format!("a:\n{}x\n", "- ".repeat(70));
        assert!(prescan("f", &nested_dashes).is_err());
        let big = "#".repeat(MAX_FILE_BYTES + 1);
        assert!(prescan("f", &big).unwrap_err().message.contains("bytes"));
    }

    /// Each figure README.md states is the edge: accepted at it, refused one past it.
    #[test]
    fn every_prescan_and_name_bound_holds_at_its_figure() {
        let file = |n: usize| "#".repeat(n - 1) + "\n";
        prescan("f", &file(MAX_FILE_BYTES)).unwrap();
        assert!(prescan("f", &file(MAX_FILE_BYTES + 1)).is_err());
        let indented = |n: usize| format!("a:\n{}b: 1\n", " ".repeat(n));
        prescan("f", &indented(MAX_INDENT)).unwrap();
        let e = prescan("f", &indented(MAX_INDENT + 1)).unwrap_err();
        assert!(e.message.contains("129 columns deep"), "{e}");
        prescan("f", &"[".repeat(MAX_FLOW_DEPTH)).unwrap();
        assert!(prescan("f", &"[".repeat(MAX_FLOW_DEPTH + 1)).is_err());
        assert!(name_problem(&"a".repeat(MAX_NAME_BYTES)).is_none());
        assert!(
            name_problem(&"a".repeat(MAX_NAME_BYTES + 1))
                .unwrap()
                .contains("257 bytes")
        );
        assert_eq!(
            (MAX_FILE_BYTES, MAX_INDENT, MAX_FLOW_DEPTH, MAX_NAME_BYTES),
            (1024 * 1024, 128, 32, 256),
            "README.md states these figures"
        );
    }

    #[test]
    fn names_and_limits() {
        assert!(name_problem("gateway").is_none());
        assert!(
            name_problem(&"a".repeat(10_000))
                .unwrap()
                .contains("10000 bytes")
        );
        assert!(name_problem("pay\u{202E}yap").unwrap().contains("U+202E"));
        assert!(name_problem("a\u{0}b").is_some());
        for ok in [1e-3, 1.0, 1e9] {
            assert!(limit_in_range(ok), "{ok}");
        }
        for bad in [1e300, 1e-300, 0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(!limit_in_range(bad), "{bad}");
        }
    }
}
