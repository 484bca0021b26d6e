//! Bearer authentication for handlers, and the `auth/v2` routes freva-client calls.
//!
//! [`Authenticated`] requires a valid token: otherwise 401 with `WWW-Authenticate: Bearer`
//! and a detail starting "Not authenticated". [`MaybeAuthenticated`] treats a missing or
//! invalid token as anonymous, as DECISIONS.md asks of optional routes.
//!
//! A token that cannot be checked because its identity provider cannot be reached is
//! neither: both answer 503 naming the provider, so a client keeps its token and asks again
//! (a 401 would tell it the token is bad; anonymous answers would silently show less).

use axum::Json;
use axum::Router;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::routing::get;
use serde_json::{Value, json};
use svc_daemon::{Caller, Error};

use crate::AppState;
use crate::error::ApiError;

/// The caller of a route that requires a token.
pub(crate) struct Authenticated(pub(crate) Caller);

/// The caller of a route where a token is optional.
pub(crate) struct MaybeAuthenticated(pub(crate) Option<Caller>);

/// The token of an `Authorization: Bearer <token>` header: `Ok(None)` without the header,
/// an error saying what is wrong with a header that is not `Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, &'static str> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header holds characters other than visible ASCII")?;
    match value.trim().split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => match token.trim() {
            "" => Err("the Authorization header has no token after 'Bearer'"),
            token => Ok(Some(token)),
        },
        _ => Err("the Authorization header is not 'Bearer <token>'"),
    }
}

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = match bearer(&parts.headers) {
            Ok(Some(token)) => token,
            Ok(None) => return Err(Error::unauthenticated("Not authenticated").into()),
            Err(why) => {
                return Err(Error::unauthenticated(format!("Not authenticated: {why}.")).into());
            }
        };
        match state.daemon.auth().verify(token).await {
            Ok(caller) => Ok(Authenticated(caller)),
            Err(e @ Error::Unavailable { .. }) => Err(e.into()),
            Err(e) => Err(Error::unauthenticated(format!("Not authenticated: {e}.")).into()),
        }
    }
}

impl FromRequestParts<AppState> for MaybeAuthenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = match bearer(&parts.headers) {
            Ok(Some(token)) => match state.daemon.auth().verify(token).await {
                Ok(caller) => Some(caller),
                Err(e @ Error::Unavailable { .. }) => return Err(e.into()),
                Err(_) => None,
            },
            Ok(None) | Err(_) => None,
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

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_bytes(value).unwrap(),
        );
        headers
    }

    #[test]
    fn only_bearer_headers_carry_a_token() {
        assert_eq!(bearer(&HeaderMap::new()), Ok(None));
        assert_eq!(bearer(&with(b"Bearer abc")), Ok(Some("abc")));
        assert_eq!(bearer(&with(b"bearer  abc ")), Ok(Some("abc")));
        for bad in [
            &b"Bearer"[..],
            b"Bearer   ",
            b"Basic abc",
            b"abc",
            b"Bearer \xc3\xa9",
        ] {
            let why = bearer(&with(bad)).unwrap_err();
            assert!(why.starts_with("the Authorization header"), "{why}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_header_value_gives_a_token_or_a_reason(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            // Header values cannot hold control characters other than tab.
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                let mut headers = HeaderMap::new();
                headers.insert(header::AUTHORIZATION, value);
                if let Ok(Some(token)) = bearer(&headers) {
                    proptest::prop_assert!(!token.is_empty() && token.trim() == token);
                }
            }
        }
    }
}
