//! Tower middleware that puts a [`Client`](crate::Client) in front of any HTTP
//! service (tonic, axum, hyper).
//!
//! The caller comes from a request header (`rpc-caller` by default, missing → `""`), the
//! procedure from the URI path without its leading `/` (for gRPC, `pkg.Service/Method`),
//! and the request's priority class from a [`Priority`] extension set by an earlier layer,
//! else from the header `grl-priority` (missing: the bucket's default class).
//! A dropped request never reaches the inner service: gRPC requests (content type
//! `application/grpc*`) get a trailers-only `RESOURCE_EXHAUSTED` response, others HTTP 429;
//! both carry `Retry-After`.
//!
//! ```no_run
//! # async fn f(client: grl_client::Client) {
//! let layer = grl_client::layer::GrlLayer::new(client).caller_header("x-caller");
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hi" }))
//!     .layer(layer);
//! # }
//! ```

mod future;
// Tower's folder style: `layer.rs` holds the `Layer` of the middleware of the same name.
#[allow(clippy::module_inception)]
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::GrlLayer;
pub use service::GrlService;

/// The default header naming the caller.
pub const DEFAULT_CALLER_HEADER: &str = "rpc-caller";

/// The default header naming a request's priority class.
pub const DEFAULT_PRIORITY_HEADER: &str = "grl-priority";

/// A request's priority class (e.g. `critical`), as a request extension: set by a layer
/// before [`GrlLayer`] that knows what the request is (a checkout, a prefetch), it takes
/// precedence over the priority header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priority(pub std::borrow::Cow<'static, str>);

/// The procedure a request path names: the path without its query and its leading `/`
/// (`/pkg.Service/Method?x=1` → `pkg.Service/Method`). The layer, `grl sidecar` and its Envoy
/// rate limit service all name procedures this way, so one config serves all three.
pub fn procedure_of(path: &str) -> &str {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    path.strip_prefix('/').unwrap_or(path)
}
