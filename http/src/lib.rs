//! `svc-http`: the HTTP facade of `svcd` (axum on hyper). It owns routing, extraction,
//! response shaping and the mapping of daemon errors to status codes (`error.rs`, the only
//! place a status is chosen). It holds no domain logic: every handler calls the daemon.
//!
//! Entry points: [`router`] builds the application for a daemon; [`serve`] runs it on a
//! listener until a shutdown future completes.

mod auth;
mod databrowser;
mod error;
mod extract;
mod help;
mod portal;
#[cfg(test)]
mod router_tests;
mod stac;
mod userdata;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Response};
use svc_daemon::{API_PREFIX, Daemon};
use tokio::net::TcpListener;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{DefaultPredicate, NotForContentType, Predicate};
use tower_http::cors::CorsLayer;
use tower_http::trace::TraceLayer;

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct AppState {
    daemon: Arc<Daemon>,
    /// Absolute base URL of the API, for links the server emits.
    api_base: String,
}

/// The application: the API under `/api/svc-nextgen` and every configured compat prefix.
pub fn router(daemon: &Arc<Daemon>, public_base: &str) -> Router {
    let state = AppState {
        api_base: format!("{public_base}{API_PREFIX}"),
        daemon: Arc::clone(daemon),
    };
    let api = Router::new()
        .merge(help::routes())
        .merge(databrowser::routes())
        .merge(userdata::routes())
        .merge(auth::routes())
        .merge(stac::routes())
        .merge(portal::routes())
        .with_state(state);
    let mut app = Router::new().nest(API_PREFIX, api.clone());
    for prefix in &daemon.config().http.compat_prefixes {
        app = app.nest(prefix, api.clone());
    }
    app.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Zarr chunks are compressed already: gzip would cost CPU and save nothing.
        .layer(CompressionLayer::new().gzip(true).compress_when(
            DefaultPredicate::new().and(NotForContentType::const_new("application/octet-stream")),
        ))
        .layer(CorsLayer::permissive())
        .layer(TraceLayer::new_for_http())
}

async fn not_found() -> Response {
    error::ApiError::from(error::RequestError::NoRoute).into_response()
}

async fn method_not_allowed() -> Response {
    error::ApiError::from(error::RequestError::MethodNotAllowed).into_response()
}

/// Serves the application on `listener` until `shutdown` completes, then drains requests.
///
/// # Errors
/// An I/O error of the listener.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
