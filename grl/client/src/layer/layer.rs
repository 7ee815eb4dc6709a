//! [`GrlLayer`]: wraps services in [`GrlService`].

use http::HeaderName;
use tower::Layer;

use crate::Client;

use super::{DEFAULT_CALLER_HEADER, DEFAULT_PRIORITY_HEADER, GrlService};

/// Applies a GRL client's decisions to every request of the wrapped service.
#[derive(Clone, Debug)]
pub struct GrlLayer {
    client: Client,
    caller_header: HeaderName,
    priority_header: HeaderName,
}

impl GrlLayer {
    /// A layer deciding with `client`, reading the caller from `rpc-caller`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            caller_header: HeaderName::from_static(DEFAULT_CALLER_HEADER),
            priority_header: HeaderName::from_static(DEFAULT_PRIORITY_HEADER),
        }
    }

    /// Reads the caller from header `name` instead.
    ///
    /// # Panics
    /// If `name` is not a valid header name (a programming error).
    pub fn caller_header(mut self, name: &str) -> Self {
        self.caller_header = HeaderName::try_from(name).expect("valid header name");
        self
    }

    /// Reads the priority class from header `name` instead of `grl-priority` (a
    /// [`Priority`](super::Priority) extension still comes first).
    ///
    /// # Panics
    /// If `name` is not a valid header name (a programming error).
    pub fn priority_header(mut self, name: &str) -> Self {
        self.priority_header = HeaderName::try_from(name).expect("valid header name");
        self
    }
}

impl<S> Layer<S> for GrlLayer {
    type Service = GrlService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrlService::new(
            inner,
            self.client.clone(),
            self.caller_header.clone(),
            self.priority_header.clone(),
        )
    }
}
