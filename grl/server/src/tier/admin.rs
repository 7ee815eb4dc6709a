//! The admin HTTP server of a tier: `GET /metrics` in Prometheus text format.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Produces the `/metrics` body.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `/metrics` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    render: Render,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    render(),
                )
                    .into_response()
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
}
