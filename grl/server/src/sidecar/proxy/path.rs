//! The request path the proxy matches and forwards: one canonical spelling per route, so
//! that `//orders.Orders/Get`, `/./orders.Orders/Get` or `/%6frders.Orders/Get` cannot
//! escape the bucket of `/orders.Orders/Get` while the upstream routes them to its handler.
//!
//! [`normalise`] decodes percent-escapes of unreserved characters (RFC 3986 §2.3) and
//! writes the others' hex digits in upper case, drops empty segments (`//` → `/`) and
//! resolves dot segments (§5.2.4); the proxy forwards the result. An escaped `/` or `\`
//! (`%2F`, `%5C`) and a `%` not followed by two hex digits are refused: upstreams disagree
//! on whether `%2F` separates segments (Flask decodes it, Express does not, Spring refuses
//! it), so no one spelling is safe to forward. [`procedure`] is the normalised path without
//! its leading and trailing `/`: `/orders.Orders/Get/` counts as `orders.Orders/Get` (many
//! frameworks route both alike) but is forwarded with its slash, which some frameworks
//! (Django's `APPEND_SLASH`) tell apart. Matching is case-sensitive: `/Orders.orders/GET`
//! is another procedure, forwarded as written.

use std::borrow::Cow;

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// `%2F` or `%5C`: an escaped separator.
    #[error("an escaped `/` or `\\` (%2F, %5C) in the path is refused")]
    EscapedSeparator,
    /// A `%` not followed by two hex digits.
    #[error("a `%` not followed by two hex digits in the path is refused")]
    BadEscape,
}

/// The canonical spelling of `path` (without query): borrowed when it already is.
pub fn normalise(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.contains('%') && !path.contains("//") && !path.contains("/.") {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(path)?;
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing = false;
    for seg in decoded.split('/') {
        trailing = false;
        match seg {
            "" => trailing = true,
            "." => trailing = true,
            ".." => {
                segments.pop();
                trailing = true;
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if trailing || segments.is_empty() {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

/// The procedure of a normalised path: without its leading and trailing `/`.
pub fn procedure(normalised: &str) -> &str {
    let p = normalised.strip_prefix('/').unwrap_or(normalised);
    p.strip_suffix('/').unwrap_or(p)
}

/// `path` with escapes of unreserved characters decoded and the others' hex upper-cased.
fn decode_unreserved(path: &str) -> Result<String, PathError> {
    let b = path.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(char::from(b[i]));
            i += 1;
            continue;
        }
        let (Some(hi), Some(lo)) = (
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) else {
            return Err(PathError::BadEscape);
        };
        let c = hi << 4 | lo;
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(c));
        } else if matches!(c, b'/' | b'\\') {
            return Err(PathError::EscapedSeparator);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(hi)]));
            out.push(char::from(HEX[usize::from(lo)]));
        }
        i += 3;
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn hex(c: u8) -> Option<u8> {
    char::from(c).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &str) -> String {
        normalise(p).unwrap().into_owned()
    }

    #[test]
    fn the_bypass_spellings_become_the_canonical_path() {
        let canonical = "/orders.Orders/Get";
        for p in [
            canonical,
            "//orders.Orders/Get",
            "/orders.Orders//Get",
            "/./orders.Orders/Get",
            "/x/../orders.Orders/Get",
            "/../orders.Orders/Get",
            "/%6frders.Orders/Get",
            "/%6Frders%2EOrders/G%65t",
            "/%2e/orders.Orders/Get",
            "/x/%2E%2e/orders.Orders/Get",
        ] {
            assert_eq!(norm(p), canonical, "{p}");
            assert_eq!(procedure(&norm(p)), "orders.Orders/Get", "{p}");
        }
        assert_eq!(norm("/orders.Orders/Get/"), "/orders.Orders/Get/");
        assert_eq!(procedure("/orders.Orders/Get/"), "orders.Orders/Get");
        assert!(matches!(normalise(canonical), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn dot_segments_resolve_as_rfc_3986_says() {
        assert_eq!(norm("/a/b/.."), "/a/");
        assert_eq!(norm("/a/b/."), "/a/b/");
        assert_eq!(norm("/.."), "/");
        assert_eq!(norm("//"), "/");
        assert_eq!(norm("/.well-known/x"), "/.well-known/x");
        assert_eq!(norm("/a..b/c"), "/a..b/c");
    }

    #[test]
    fn reserved_escapes_stay_upper_cased_and_separators_are_refused() {
        assert_eq!(norm("/a%3fb%20c"), "/a%3Fb%20c");
        assert_eq!(norm("/caf%c3%a9"), "/caf%C3%A9");
        for p in ["/orders.Orders%2FGet", "/a%2fb", "/a%5Cb", "/a%5c..%5cb"] {
            assert_eq!(normalise(p), Err(PathError::EscapedSeparator), "{p}");
        }
        for p in ["/a%", "/a%2", "/a%zz", "/a%%41"] {
            assert_eq!(normalise(p), Err(PathError::BadEscape), "{p}");
        }
    }

    #[test]
    fn case_is_kept() {
        assert_eq!(norm("/ORDERS.orders//get"), "/ORDERS.orders/get");
    }

    proptest::proptest! {
        #[test]
        fn normalising_is_idempotent_and_has_no_dot_or_empty_segments(
            p in "(/(|\\.|\\.\\.|[a-zA-Z.~_-]{1,4}|%[0-9a-fA-F]{2})){1,8}"
        ) {
            if let Ok(n) = normalise(&p) {
                proptest::prop_assert_eq!(normalise(&n).unwrap(), n.clone());
                proptest::prop_assert!(n.starts_with('/'));
                let inner = procedure(&n);
                for seg in inner.split('/').filter(|_| !inner.is_empty()) {
                    proptest::prop_assert!(!seg.is_empty() && seg != "." && seg != "..", "{n}");
                }
            }
        }
    }
}
