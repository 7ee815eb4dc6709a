//! [`ResponseFuture`]: the inner service's future, or a ready refusal.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

pin_project! {
    /// The response future of [`GrlService`](super::GrlService).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B>,
        _error: PhantomData<fn() -> E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B> {
        Inner { #[pin] future: F },
        Refused { response: Option<Response<B>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
            _error: PhantomData,
        }
    }

    pub(crate) fn refused(response: Response<B>) -> Self {
        Self {
            kind: Kind::Refused {
                response: Some(response),
            },
            _error: PhantomData,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => future.poll(cx),
            KindProj::Refused { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}
