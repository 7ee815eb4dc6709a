//! The answers the proxy makes itself, in HTTP or, for gRPC requests
//! (`content-type: application/grpc*`), as trailers-only gRPC statuses: drops (429 with
//! `Retry-After` and the headers naming the bucket, gRPC RESOURCE_EXHAUSTED with the same
//! headers), upstream failures (502/504, gRPC UNAVAILABLE) and requests refused before any
//! decision (400/403, gRPC INVALID_ARGUMENT / PERMISSION_DENIED).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};

use grl_client::RefusingBucket;

use super::ProxyBody;

pub(super) const GRPC_INVALID_ARGUMENT: u8 = 3;
pub(super) const GRPC_PERMISSION_DENIED: u8 = 7;
pub(super) const GRPC_RESOURCE_EXHAUSTED: u8 = 8;
pub(super) const GRPC_UNAVAILABLE: u8 = 14;

/// Whether the request is gRPC (`application/grpc`, `application/grpc+proto`, ...).
pub(super) fn is_grpc(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The answer to a dropped request: 429 (gRPC: RESOURCE_EXHAUSTED) with `Retry-After` and,
/// when the bucket is known, `grl-bucket` and `RateLimit-Policy` ([`RefusingBucket`]).
pub(super) fn dropped(
    grpc: bool,
    retry_after: &HeaderValue,
    by: Option<&RefusingBucket>,
) -> Response<ProxyBody> {
    const REASON: &str = "rate limited by GRL";
    let mut res = if grpc {
        grpc_status(GRPC_RESOURCE_EXHAUSTED, REASON)
    } else {
        let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "rate limited by GRL\n");
        r.headers_mut()
            .insert("x-grl-reason", HeaderValue::from_static(REASON));
        r
    };
    let h = res.headers_mut();
    h.insert(header::RETRY_AFTER, retry_after.clone());
    for (name, value) in by.into_iter().flat_map(RefusingBucket::headers) {
        h.insert(name, value.clone());
    }
    res
}

/// A request refused before any decision: `status` with `message` for HTTP, `grpc_code`
/// for gRPC.
pub(super) fn refused(
    grpc: bool,
    status: StatusCode,
    grpc_code: u8,
    message: &str,
) -> Response<ProxyBody> {
    if grpc {
        grpc_status(grpc_code, message)
    } else {
        plain(status, &format!("{message}\n"))
    }
}

/// A response with a text body.
pub(super) fn plain(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::from(text.to_owned()))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// A trailers-only gRPC response: HTTP 200, status and message in the headers, no body.
pub(super) fn grpc_status(code: u8, message: &str) -> Response<ProxyBody> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::new())));
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(u16::from(code)));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        h.insert("grpc-message", v);
    }
    res
}

/// The answer when the upstream failed: `status` for HTTP, UNAVAILABLE for gRPC.
pub(super) fn failure(grpc: bool, status: StatusCode, message: &str) -> Response<ProxyBody> {
    if grpc {
        grpc_status(GRPC_UNAVAILABLE, message)
    } else {
        plain(status, &format!("{message}\n"))
    }
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII and `%`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An error and its sources, `a: b: c`.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(percent_encode("a b%c"), "a b%25c");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
