//! The headers that describe one connection rather than the message (RFC 9110 §7.6.1),
//! which a proxy must not forward in either direction.

use http::header::{self, HeaderMap, HeaderName};

/// Removes the headers that describe one connection rather than the message (RFC 9110
/// §7.6.1), keeping `te: trailers`, which gRPC needs end to end.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

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
    }
}
