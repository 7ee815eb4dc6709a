//! The headers that describe one connection rather than the message (RFC 9110 §7.6.1),
//! which a proxy must not forward in either direction.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Whether the header `n: v` describes the connection (`te` only when it asks for more than
/// trailers).
fn is_hop(n: &HeaderName, v: &HeaderValue) -> bool {
    n == header::CONNECTION
        || n == header::PROXY_AUTHORIZATION
        || n == header::TRANSFER_ENCODING
        || n == header::UPGRADE
        || (n == header::TE && !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
        || n.as_str() == "keep-alive"
        || n.as_str() == "proxy-connection"
}

/// Removes the headers that describe one connection rather than the message (RFC 9110
/// §7.6.1), keeping `te: trailers`, which gRPC needs end to end. Runs twice per forwarded
/// request: one pass over the headers finds whether there is anything to remove (most
/// requests carry none; a response usually carries `connection: keep-alive`), and only
/// then are they removed.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let (mut any, mut lists_others) = (false, false);
    for (n, v) in h.iter() {
        if is_hop(n, v) {
            any = true;
            lists_others |= n == header::CONNECTION && lists_other_names(v);
        }
    }
    if !any {
        return;
    }
    if lists_others {
        let named: Vec<HeaderName> = h
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|n| HeaderName::try_from(n.trim()).ok())
            .collect();
        for n in named {
            h.remove(n);
        }
    }
    for n in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
    if h.get(header::TE)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        h.remove(header::TE);
    }
}

/// Whether a `connection` value names headers beyond the options `close` and `keep-alive`.
fn lists_other_names(v: &HeaderValue) -> bool {
    v.as_bytes().split(|b| *b == b',').any(|t| {
        let t = t.trim_ascii();
        !t.is_empty() && !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_and_te_trailers_stays() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("close, x-one"));
        h.insert("x-one", HeaderValue::from_static("1"));
        h.insert("x-two", HeaderValue::from_static("2"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-one").is_none() && h.get("keep-alive").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h["x-two"], "2");
        assert_eq!(h[header::TE], "trailers");
        h.insert(header::TE, HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut h);
        assert!(h.get(header::TE).is_none());
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Keep-Alive"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-two", HeaderValue::from_static("2"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        let mut h = HeaderMap::new();
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("x-two", HeaderValue::from_static("2"));
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before, "nothing to strip");
    }
}
