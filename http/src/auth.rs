//! Bearer authentication for handlers, and the `auth/v2` routes freva-client calls.
//!
//! [`Authenticated`] requires a valid token: otherwise 401 with `WWW-Authenticate: Bearer`
//! and a detail starting "Not authenticated". [`MaybeAuthenticated`] treats a missing or
//! invalid token as anonymous, as DECISIONS.md asks of optional routes.

use axum::Json;
use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::routing::get;
use serde_json::{Value, json};
use svc_daemon::Error;
use svc_daemon::auth::Caller;

use crate::AppState;
use crate::error::ApiError;

/// The caller of a route that requires a token.
pub(crate) struct Authenticated(pub(crate) Caller);

/// The caller of a route where a token is optional.
pub(crate) struct MaybeAuthenticated(pub(crate) Option<Caller>);

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(token) = bearer(parts) else {
            return Err(Error::unauthenticated("Not authenticated").into());
        };
        match state.daemon.auth().verify(token).await {
            Ok(caller) => Ok(Authenticated(caller)),
            Err(e) => Err(Error::unauthenticated(format!("Not authenticated: {e}.")).into()),
        }
    }
}

impl FromRequestParts<AppState> for MaybeAuthenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = match bearer(parts) {
            Some(token) => state.daemon.auth().verify(token).await.ok(),
            None => None,
        };
        Ok(MaybeAuthenticated(caller))
    }
}

impl MaybeAuthenticated {
    /// The caller's user name, if authenticated.
    pub(crate) fn user(&self) -> Option<&str> {
        self.0.as_ref().map(|c| c.user.as_str())
    }
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/auth/v2/.well-known/jwks.json", get(jwks))
        .route("/auth/v2/auth-ports", get(auth_ports))
}

async fn jwks(State(state): State<AppState>) -> Json<Value> {
    Json(state.daemon.auth().jwks())
}

async fn auth_ports(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "valid_ports": state.daemon.config().auth.auth_ports }))
}
