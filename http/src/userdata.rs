//! User data and flavour routes (spec 1, endpoints 6-11): authenticate, hand the body to the
//! daemon, answer with its status message.

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
use crate::blocking::blocking;
use crate::error::ApiError;
use crate::extract::{QueryPairs, RawBody};

/// Largest user-data request body: room for the 100,000 entries one add may hold
/// ([`userdata::MAX_ENTRIES`]) at about 300 bytes each. Axum's default (2 MiB, about 10,000
/// entries) is too small for a directory of files.
const USER_DATA_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// Largest flavour request body: a mapping of every standard facet fits many times over.
const FLAVOUR_BODY_LIMIT: usize = 64 * 1024;

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
            post(create_flavour)
                .get(list_flavours)
                .layer(DefaultBodyLimit::max(FLAVOUR_BODY_LIMIT)),
        )
        .route(
            "/databrowser/flavours/{flavour_name}",
            put(update_flavour)
                .delete(delete_flavour)
                .layer(DefaultBodyLimit::max(FLAVOUR_BODY_LIMIT)),
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
    let message = blocking(&state, move |daemon| {
        userdata::add(daemon.catalog(), &body, &caller)
    })
    .await?;
    Ok(status(StatusCode::ACCEPTED, &message))
}

async fn delete_user_data(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let message = blocking(&state, move |daemon| {
        userdata::delete(daemon.catalog(), &body, &caller)
    })
    .await?;
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
    let caller = caller.0;
    let list = blocking(&state, move |daemon| {
        Ok(daemon.flavours().list(caller.as_ref(), &filter))
    })
    .await?;
    Ok(Json(list))
}

async fn create_flavour(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request = FlavourRequest::parse(&body)?;
    let message = blocking(&state, move |daemon| {
        daemon.flavours().create(&caller, &request)
    })
    .await?;
    Ok(status(StatusCode::CREATED, &message))
}

async fn update_flavour(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request = FlavourRequest::parse(&body)?;
    let message = blocking(&state, move |daemon| {
        daemon.flavours().update(&caller, &name, &request)
    })
    .await?;
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
    let message = blocking(&state, move |daemon| {
        daemon.flavours().delete(&caller, &name, global)
    })
    .await?;
    Ok(status(StatusCode::OK, &message))
}
