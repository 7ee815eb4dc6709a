//! The caller and procedure names that Envoy hands the sidecar's rate limit services
//! (descriptor entries, bucket ids), bounded before they become pair keys and metric labels,
//! so that a 900 KB `source_cluster` costs what a short one does; and the short form in
//! which a peer's value is echoed in an error.
//!
//! A name may be at most [`MAX_NAME_BYTES`] long (the longest a config may name):
//!
//! * a longer caller is [`OVERFLOW_LABEL`]: no bucket names so long a caller, so the bucket
//!   the request falls in is unchanged, and every such caller counts under one caller;
//! * a longer procedure is cut to its first [`MAX_NAME_BYTES`] bytes (up to a character
//!   boundary) followed by `…`: a bucket's procedure prefix is shorter than that and an
//!   exact procedure no longer, so the bucket is again unchanged (a long path cannot slip
//!   out of its `Pay/*` bucket), and the label stays short.

use std::borrow::Cow;

pub use grl_config::bounds::MAX_NAME_BYTES;
use grl_core::metric_names::OVERFLOW_LABEL;

/// The most characters of a peer's value echoed in an error.
pub const SHOWN_CHARS: usize = 64;

/// `caller`, or [`OVERFLOW_LABEL`] when it is longer than [`MAX_NAME_BYTES`].
pub fn caller(caller: &str) -> &str {
    if caller.len() > MAX_NAME_BYTES {
        OVERFLOW_LABEL
    } else {
        caller
    }
}

/// `procedure`, cut to [`MAX_NAME_BYTES`] and `…` when it is longer.
pub fn procedure(procedure: &str) -> Cow<'_, str> {
    if procedure.len() <= MAX_NAME_BYTES {
        return Cow::Borrowed(procedure);
    }
    let mut end = MAX_NAME_BYTES;
    while !procedure.is_char_boundary(end) {
        end += 1;
    }
    Cow::Owned(format!("{}…", &procedure[..end]))
}

/// Whether either name had to be bounded.
pub fn is_long(caller: &str, procedure: &str) -> bool {
    caller.len() > MAX_NAME_BYTES || procedure.len() > MAX_NAME_BYTES
}

/// `value` as an error shows it: at most [`SHOWN_CHARS`] characters, control characters
/// replaced, `…` when cut, quoted.
pub fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(SHOWN_CHARS)
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect();
    if value.chars().nth(SHOWN_CHARS).is_some() {
        out.push('…');
    }
    format!("{out:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_bounded_and_keep_their_bucket() {
        assert_eq!(caller("gateway"), "gateway");
        assert_eq!(caller(&"c".repeat(MAX_NAME_BYTES)).len(), MAX_NAME_BYTES);
        assert_eq!(caller(&"c".repeat(900_000)), OVERFLOW_LABEL);
        assert_eq!(procedure("pay.Pay/Card"), "pay.Pay/Card");
        let long = format!("api/{}", "é".repeat(1000));
        let cut = procedure(&long);
        assert!(
            cut.len() > MAX_NAME_BYTES && cut.len() <= MAX_NAME_BYTES + 4,
            "{cut}"
        );
        assert!(cut.starts_with("api/") && cut.ends_with('…'));
        // Every prefix a config can name (at most 255 bytes before its `*`) still matches.
        assert!(long.starts_with(cut.trim_end_matches('…')));
        assert!(cut.trim_end_matches('…').len() >= MAX_NAME_BYTES);
        assert!(is_long("a", &long) && !is_long("a", "b"));
    }

    #[test]
    fn echoed_values_are_short_and_printable() {
        assert_eq!(shown("orders"), "\"orders\"");
        let s = shown(&format!("a\nb{}", "x".repeat(10_000)));
        assert!(s.chars().count() <= SHOWN_CHARS + 3, "{s}");
        assert!(s.ends_with("…\"") && !s.contains('\n'), "{s}");
    }
}
