//! User data and flavour routes (spec 1, endpoints 6-11): authenticate, hand the body to the
//! daemon, answer with its status message.

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{post, put};
use serde_json::{Value, json};
use svc_daemon::{FlavourRequest, flavour_delete_is_global, flavour_list_filter};

use crate::AppState;
use crate::auth::{Authenticated, MaybeAuthenticated};
use crate::error::ApiError;
use crate::extract::{PathParams, QueryPairs, RawBody};

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
    let message = state
        .daemon
        .run_expensive(move |daemon| daemon.add_user_data(&body, &caller))
        .await?;
    Ok(status(StatusCode::ACCEPTED, &message))
}

async fn delete_user_data(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let message = state
        .daemon
        .run_expensive(move |daemon| daemon.delete_user_data(&body, &caller))
        .await?;
    Ok(status(StatusCode::ACCEPTED, &message))
}

async fn list_flavours(
    State(state): State<AppState>,
    caller: MaybeAuthenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let filter = flavour_list_filter(&pairs)?;
    let caller = caller.0;
    let list = state
        .daemon
        .run(move |daemon| Ok(daemon.flavours().list(caller.as_ref(), &filter)))
        .await?;
    Ok(Json(list))
}

async fn create_flavour(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request = FlavourRequest::parse(&body)?;
    let message = state
        .daemon
        .run(move |daemon| daemon.flavours().create(&caller, &request))
        .await?;
    Ok(status(StatusCode::CREATED, &message))
}

async fn update_flavour(
    State(state): State<AppState>,
    PathParams(name): PathParams<String>,
    Authenticated(caller): Authenticated,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request = FlavourRequest::parse(&body)?;
    let message = state
        .daemon
        .run(move |daemon| daemon.flavours().update(&caller, &name, &request))
        .await?;
    Ok(status(StatusCode::OK, &message))
}

async fn delete_flavour(
    State(state): State<AppState>,
    PathParams(name): PathParams<String>,
    Authenticated(caller): Authenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let global = flavour_delete_is_global(&pairs)?;
    let message = state
        .daemon
        .run(move |daemon| daemon.flavours().delete(&caller, &name, global))
        .await?;
    Ok(status(StatusCode::OK, &message))
}
