//! Secrets kept out of every output of the configurator.
//!
//! Two layers:
//! - URLs are shown without their password ([`redact_url`]): the Prometheus, git and
//!   database URLs in messages, logs and the run history name user, host and path only.
//! - A process-wide list of secret strings ([`register`], [`register_url`]): the passwords
//!   of every URL given on the command line, and tokens. Everything that leaves the process
//!   — each log line (through [`ScrubbingWriter`]), printed messages, the error stored in the
//!   run history, a code host's error body — is passed through [`scrub`], which replaces
//!   each of them with `***`. This catches secrets that a library puts in its own error text
//!   (an HTTP client naming the URL it failed on, for example), which the first layer cannot
//!   see.
//!
//! Secrets shorter than [`MIN_SECRET_LEN`] bytes are not scrubbed from free text (replacing
//! every `a` would garble every message); [`redact_url`] still removes them from URLs.

use std::borrow::Cow;
use std::io::Write;
use std::sync::RwLock;

/// Shortest secret that [`scrub`] replaces in free text.
pub const MIN_SECRET_LEN: usize = 4;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// The registered secrets, longest first (so that a secret containing another is replaced
/// whole).
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds `secret` to the strings [`scrub`] removes. Empty and short strings are ignored.
pub fn register(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_SECRET_LEN {
        return;
    }
    let mut all = SECRETS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !all.iter().any(|s| s == secret) {
        all.push(secret.to_string());
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Registers the password of `url` (as written and percent-decoded), if it has one, and the
/// values of its query string (they often carry tokens).
pub fn register_url(url: &str) {
    let Some(parts) = UrlParts::split(url) else {
        return;
    };
    if let Some(password) = parts.password {
        register(password);
        register(&percent_decode(password));
    }
    for pair in parts.query.split('&') {
        if let Some((_, value)) = pair.split_once('=') {
            register(value);
            register(&percent_decode(value));
        }
    }
}

/// `text` with every registered secret replaced by [`MASK`].
pub fn scrub(text: &str) -> Cow<'_, str> {
    let all = SECRETS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !all.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in all.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    Cow::Owned(out)
}

/// A URL without its password and query string: `https://u:p@h/x?t=1` → `https://u@h/x`.
/// Text that is not a URL is returned unchanged.
pub fn redact_url(url: &str) -> String {
    let Some(parts) = UrlParts::split(url) else {
        return url.to_string();
    };
    let user = parts.user.map(|u| format!("{u}@")).unwrap_or_default();
    format!("{}://{user}{}{}", parts.scheme, parts.host, parts.path)
}

/// At most `max` characters of `body` (a remote server's answer), scrubbed, on one line.
pub fn excerpt(body: &str, max: usize) -> String {
    let flat: String = body
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let scrubbed = scrub(&flat);
    let mut out: String = scrubbed.chars().take(max).collect();
    if scrubbed.chars().count() > max {
        out.push_str(" … (truncated)");
    }
    out
}

/// The pieces of `scheme://[user[:password]@]host[/path][?query]`.
struct UrlParts<'a> {
    scheme: &'a str,
    user: Option<&'a str>,
    password: Option<&'a str>,
    host: &'a str,
    path: &'a str,
    query: &'a str,
}

impl<'a> UrlParts<'a> {
    fn split(url: &'a str) -> Option<UrlParts<'a>> {
        let (scheme, rest) = url.trim().split_once("://")?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo.map(|u| u.split_once(':')) {
            Some(Some((u, p))) => (Some(u), Some(p)),
            Some(None) => (userinfo, None),
            None => (None, None),
        };
        Some(UrlParts {
            scheme,
            user,
            password,
            host,
            path,
            query,
        })
    }
}

/// `%XX` sequences decoded (invalid ones kept as written).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A log writer that scrubs each write of registered secrets before passing it on; for
/// `tracing_subscriber::fmt().with_writer(...)` (each event is written in one call).
#[derive(Debug, Clone, Copy)]
pub struct ScrubbingWriter<W> {
    inner: W,
}

impl<W> ScrubbingWriter<W> {
    /// Wraps `make_writer` (e.g. `std::io::stderr`).
    pub fn new(inner: W) -> Self {
        ScrubbingWriter { inner }
    }
}

/// One write target of a [`ScrubbingWriter`].
#[derive(Debug)]
pub struct Scrubbed<T: Write> {
    inner: T,
}

impl<T: Write> Write for Scrubbed<T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.inner.write_all(scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<'a, W> tracing_subscriber::fmt::MakeWriter<'a> for ScrubbingWriter<W>
where
    W: tracing_subscriber::fmt::MakeWriter<'a>,
{
    type Writer = Scrubbed<W::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Scrubbed {
            inner: self.inner.make_writer(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_password_and_query() {
        assert_eq!(
            redact_url("http://admin:pw@prom:9090/base?token=abc"),
            "http://admin@prom:9090/base"
        );
        assert_eq!(redact_url("http://prom:9090"), "http://prom:9090");
        assert_eq!(redact_url("/srv/git/config.git"), "/srv/git/config.git");
        assert_eq!(
            redact_url("https://x-access-token:tok@github.com/o/r.git"),
            "https://x-access-token@github.com/o/r.git"
        );
    }

    #[test]
    fn registered_secrets_are_scrubbed_in_any_text() {
        register_url("postgres://u:Sup%40rSecret1@db/rlc?sslpassword=QueryTok9");
        register("ghp_TokenValue42");
        let text = "failed for postgres://u:Sup%40rSecret1@db and Sup@rSecret1, \
                    token ghp_TokenValue42, QueryTok9";
        let out = scrub(text);
        for s in [
            "Sup%40rSecret1",
            "Sup@rSecret1",
            "ghp_TokenValue42",
            "QueryTok9",
        ] {
            assert!(!out.contains(s), "{s} in {out}");
        }
        assert!(out.contains("postgres://u:***@db"), "{out}");
        assert_eq!(scrub("nothing here"), "nothing here");
    }

    #[test]
    fn short_secrets_are_not_scrubbed_from_free_text() {
        register("ab");
        assert_eq!(scrub("a cab"), "a cab");
    }

    #[test]
    fn excerpts_are_short_single_line_and_scrubbed() {
        register("ExcerptSecret77");
        let body = format!("line1\nExcerptSecret77\n{}", "x".repeat(1000));
        let e = excerpt(&body, 100);
        assert!(!e.contains("ExcerptSecret77") && !e.contains('\n'), "{e}");
        assert!(e.ends_with("(truncated)") && e.chars().count() < 130, "{e}");
    }
}
