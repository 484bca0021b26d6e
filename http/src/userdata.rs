//! User data and flavour routes (spec 1, endpoints 6-11): authenticate, hand the body to the
//! daemon, answer with its status message.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{post, put};
use serde_json::{Value, json};
use svc_daemon::Error;
use svc_daemon::flavours::{FlavourRequest, ListFilter};
use svc_daemon::userdata;

use crate::AppState;
use crate::auth::{Authenticated, MaybeAuthenticated};
use crate::error::ApiError;
use crate::extract::{QueryPairs, RawBody};

/// Largest user-data request body: about 300,000 entries of typical size. Axum's default
/// (2 MiB, about 10,000 entries) is too small for a directory of files.
const USER_DATA_BODY_LIMIT: usize = 64 * 1024 * 1024;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/databrowser/userdata",
            post(add_user_data)
                .delete(delete_user_data)
                .layer(DefaultBodyLimit::max(USER_DATA_BODY_LIMIT)),
        )
        .route(
            "/databrowser/flavours",
            post(create_flavour).get(list_flavours),
        )
        .route(
            "/databrowser/flavours/{flavour_name}",
            put(update_flavour).delete(delete_flavour),
        )
}

fn status(code: StatusCode, message: &str) -> (StatusCode, Json<Value>) {
    (code, Json(json!({ "status": message })))
}

async fn add_user_data(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let records = userdata::parse_add(&body, &caller)?;
    let daemon = Arc::clone(&state.daemon);
    let message = tokio::task::spawn_blocking(move || userdata::add(daemon.catalog(), &records))
        .await
        .expect("adding user data does not panic")?;
    Ok(status(StatusCode::ACCEPTED, &message))
}

async fn delete_user_data(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let daemon = Arc::clone(&state.daemon);
    let message =
        tokio::task::spawn_blocking(move || userdata::delete(daemon.catalog(), &body, &caller))
            .await
            .expect("deleting user data does not panic")?;
    Ok(status(StatusCode::ACCEPTED, &message))
}

/// The multi-version flag freva-client sends with every request, also to flavour routes;
/// accepted and ignored there.
const CLIENT_FLAGS: [&str; 2] = ["multi-version", "multi_version"];

async fn list_flavours(
    State(state): State<AppState>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let mut filter = ListFilter::default();
    for (key, value) in pairs {
        match key.as_str() {
            "flavour_name" => filter.flavour_name = Some(value),
            "owner" => filter.owner = Some(value),
            k if CLIENT_FLAGS.contains(&k) => {}
            _ => {
                return Err(Error::invalid(format!(
                    "Invalid parameter '{key}'. Valid parameters: flavour_name, owner"
                ))
                .into());
            }
        }
    }
    Ok(Json(
        state.daemon.flavours().list(caller.0.as_ref(), &filter),
    ))
}

async fn create_flavour(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request = FlavourRequest::parse(&body)?;
    let message = state.daemon.flavours().create(&caller, &request)?;
    Ok(status(StatusCode::CREATED, &message))
}

async fn update_flavour(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request = FlavourRequest::parse(&body)?;
    let message = state.daemon.flavours().update(&caller, &name, &request)?;
    Ok(status(StatusCode::OK, &message))
}

async fn delete_flavour(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Authenticated(caller): Authenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut global = false;
    for (key, value) in &pairs {
        if CLIENT_FLAGS.contains(&key.as_str()) {
            continue;
        }
        if key != "is_global" {
            return Err(Error::invalid(format!(
                "Invalid parameter '{key}'. Valid parameters: is_global"
            ))
            .into());
        }
        global = svc_daemon::catalog::query::parse_bool(key, value)?;
    }
    let message = state.daemon.flavours().delete(&caller, &name, global)?;
    Ok(status(StatusCode::OK, &message))
}
