//! [`GrlService`]: decides each request, answers drops itself, forwards the rest.

use std::task::{Context, Poll};

use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use tower::Service;

use crate::{Client, Decision};

use super::ResponseFuture;

/// The service made by [`GrlLayer`](super::GrlLayer).
#[derive(Clone, Debug)]
pub struct GrlService<S> {
    inner: S,
    client: Client,
    caller_header: HeaderName,
    priority_header: HeaderName,
    retry_after: HeaderValue,
}

impl<S> GrlService<S> {
    pub(crate) fn new(
        inner: S,
        client: Client,
        caller_header: HeaderName,
        priority_header: HeaderName,
    ) -> Self {
        // A ratio changes at the next interval at the earliest: suggest waiting that long.
        let secs = client.config().interval.as_secs_f64().ceil().max(1.0) as u64;
        Self {
            inner,
            client,
            caller_header,
            priority_header,
            retry_after: HeaderValue::from(secs),
        }
    }
}

const GRPC_RESOURCE_EXHAUSTED: HeaderValue = HeaderValue::from_static("8");
const GRPC_MESSAGE: HeaderValue = HeaderValue::from_static("rate%20limited%20by%20GRL");
const TEXT_MESSAGE: &str = "rate limited by GRL";

/// The response to a dropped request.
fn refusal<B: Default>(
    grpc: bool,
    retry_after: &HeaderValue,
    by: Option<&crate::RefusingBucket>,
) -> Response<B> {
    let mut res = Response::new(B::default());
    if !grpc {
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    }
    let h = res.headers_mut();
    if grpc {
        // Trailers-only: status and message in the headers of an empty HTTP 200.
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        h.insert("grpc-status", GRPC_RESOURCE_EXHAUSTED);
        h.insert("grpc-message", GRPC_MESSAGE);
    } else {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert("x-grl-reason", HeaderValue::from_static(TEXT_MESSAGE));
    }
    h.insert(header::RETRY_AFTER, retry_after.clone());
    for (name, value) in by.into_iter().flat_map(crate::RefusingBucket::headers) {
        h.insert(name, value.clone());
    }
    res
}

impl<S, B, ResBody> Service<Request<B>> for GrlService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let caller = req
            .headers()
            .get(&self.caller_header)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let procedure = super::procedure_of(req.uri().path());
        let class = match req.extensions().get::<super::Priority>() {
            Some(p) => p.0.as_ref(),
            None => req
                .headers()
                .get(&self.priority_header)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        };
        let explained = self
            .client
            .decide_explained_in_class(caller, procedure, class);
        match explained.decision {
            Decision::Allow | Decision::ShadowDrop => ResponseFuture::inner(self.inner.call(req)),
            Decision::Drop => {
                let grpc = req
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
                let by = explained.refused_by.as_deref();
                ResponseFuture::refused(refusal(grpc, &self.retry_after, by))
            }
        }
    }
}
