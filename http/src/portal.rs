//! Data-portal routes (spec 2, endpoints 2, 3 and 6): thin calls into the daemon's stores.
//!
//! - `POST P/data-portal/zarr/convert`: a JSON body, or repeated query parameters when the
//!   body is empty; answers `{"urls": [...]}`, one store URL per source.
//! - `GET|HEAD P/data-portal/zarr/{token}.zarr/{key}`: a key of a store through
//!   `Stores::read`, the daemon's one read path. Metadata is `application/json`, chunks
//!   `application/octet-stream`; a chunk of a finished store carries an `ETag` (naming the
//!   store's conversion and the key) and `Cache-Control: private, no-cache`, and
//!   `If-None-Match` gives 304. `timeout` (seconds, 0 to 1500, default 30) bounds the wait
//!   for a chunk still being written.
//! - `GET P/data-portal/zarr-utils/status`: `{"status", "reason"}` of the store named by
//!   `url=<store URL>` or `token=<uuid>`.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use svc_daemon::{ConvertRequest, Error, Fault, KeyKind, Missing, ShareRequest};
use uuid::Uuid;

use crate::AppState;
use crate::auth::{Authenticated, MaybeAuthenticated};
use crate::error::{ApiError, Endpoint};
use crate::extract::{PathParams, QueryPairs, RawBody};

/// How long a key read waits for a chunk being written, unless `timeout` says otherwise.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The longest `timeout` accepted, in seconds.
const MAX_WAIT_SECONDS: u64 = 1500;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/data-portal/zarr/convert", post(convert))
        .route("/databrowser/load/{flavour}", get(load))
        .route("/data-portal/zarr/{store}/{*key}", get(read_key))
        .route("/data-portal/zarr-utils/status", get(status))
        .route("/data-portal/zarr-utils/html", get(html))
        .route("/data-portal/share-zarr", post(share))
        .route("/data-portal/share-zarr/", post(share))
        .route("/data-portal/share/{sig}/{store}/{*key}", get(read_shared))
}

/// The URL of a store.
fn store_url(state: &AppState, token: Uuid) -> String {
    format!("{}/data-portal/zarr/{token}.zarr", state.api_base)
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn convert(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    QueryPairs(pairs): QueryPairs,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    let max_ttl = state.daemon.config().stores.max_ttl_seconds;
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        ConvertRequest::from_pairs(&pairs, max_ttl)?
    } else if let Some((name, _)) = pairs.first() {
        // Nothing a request gives is dropped (DECISIONS): one with both would lose one.
        return Err(Error::invalid(
            name.clone(),
            Fault::Refused,
            format!(
                "Query parameter '{name}' given with a JSON body: give the request either as \
                 a JSON body or as query parameters, not both."
            ),
        )
        .into());
    } else {
        ConvertRequest::from_body(&body, max_ttl)?
    };
    let public = request.public.then_some(request.ttl_seconds);
    let shared = state
        .daemon
        .run(move |daemon| {
            let now = now();
            let records = daemon.stores().request(&caller, &request, now)?;
            shares(daemon, &caller, &records, public, now)
        })
        .await?;
    Ok(Json(json!({ "urls": urls(&state, &shared) })))
}

/// Each store with its share when the request was public (DECISIONS: a public request gets
/// share URLs, valid as long as the store is public).
fn shares(
    daemon: &svc_daemon::Daemon,
    caller: &svc_daemon::Caller,
    records: &[svc_daemon::StoreRecord],
    public: Option<u64>,
    now: i64,
) -> svc_daemon::Result<Vec<(Uuid, Option<svc_daemon::Share>)>> {
    records
        .iter()
        .map(|record| {
            let share = match public {
                Some(ttl) => Some(daemon.stores().share(caller, record.token, ttl, now)?),
                None => None,
            };
            Ok((record.token, share))
        })
        .collect()
}

/// The URLs of stores: share URLs where there is a share.
fn urls(state: &AppState, shared: &[(Uuid, Option<svc_daemon::Share>)]) -> Vec<String> {
    shared
        .iter()
        .map(|(token, share)| match share {
            Some(share) => share_url(state, &share.sig, *token),
            None => store_url(state, *token),
        })
        .collect()
}

/// `load/{flavour}` (spec 2, endpoint 1): one store URL per file the search finds, as text,
/// or with `catalogue-type=intake` an intake-esm catalogue of the stores.
async fn load(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    PathParams(flavour): PathParams<String>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Response, ApiError> {
    let intake = match pairs.iter().rev().find(|(k, _)| k == "catalogue-type") {
        None => false,
        Some((_, kind)) if kind == "intake" => true,
        Some((_, kind)) => {
            return Err(ApiError::from(Error::invalid(
                "catalogue-type",
                Fault::Refused,
                format!("catalogue-type must be 'intake' or left out for the URLs, got {kind:?}."),
            ))
            .at(Endpoint::Intake));
        }
    };
    if intake && pairs.iter().any(|(k, _)| k == "aggregate") {
        // An intake catalogue has a row, and a store, per file.
        return Err(ApiError::from(Error::invalid(
            "aggregate",
            Fault::Refused,
            "catalogue-type=intake gives one store per file; leave out aggregate for it.",
        ))
        .at(Endpoint::Intake));
    }
    let (load, shared) = state
        .daemon
        .run(move |daemon| {
            let now = now();
            let load = daemon.load(&caller, &flavour, &pairs, now)?;
            let public = load.request.public.then_some(load.request.ttl_seconds);
            let shared = shares(daemon, &caller, &load.stores, public, now)?;
            Ok((load, shared))
        })
        .await
        .map_err(|e| ApiError::from(e).at(Endpoint::Intake))?;
    let urls = urls(&state, &shared);
    if !intake {
        let mut body = urls.join("\n");
        body.push('\n');
        return Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response());
    }
    let located = load
        .request
        .sources
        .iter()
        .cloned()
        .zip(urls)
        .collect::<std::collections::HashMap<_, _>>();
    let search = load.search;
    let (place, slot) = state.daemon.stream_slots().await?;
    let (catalogue, slot) = state
        .daemon
        .run_in_slot(slot, move |daemon| {
            daemon
                .databrowser()
                .intake(&search, svc_daemon::VERSION, Some(located))
        })
        .await
        .map_err(|e| ApiError::from(e).at(Endpoint::Intake))?;
    Ok(crate::databrowser::intake_download(
        &state, place, slot, catalogue, "uri",
    ))
}

/// The token of a `<uuid>.zarr` path segment, the UUID as the service writes it (lower-case,
/// hyphenated, as the mount names stores too); anything else names no store.
fn store_token(segment: &str) -> Result<Uuid, ApiError> {
    segment
        .strip_suffix(".zarr")
        .and_then(svc_daemon::parse_token)
        .ok_or_else(|| Error::NotFound(Missing::Store(segment.to_string())).into())
}

/// The wait a `timeout` query parameter asks for.
fn wait(pairs: &[(String, String)]) -> Result<Duration, ApiError> {
    let Some((_, value)) = pairs.iter().rev().find(|(k, _)| k == "timeout") else {
        return Ok(DEFAULT_WAIT);
    };
    match value.trim().parse::<u64>() {
        Ok(seconds) if seconds <= MAX_WAIT_SECONDS => Ok(Duration::from_secs(seconds)),
        _ => Err(Error::invalid(
            "timeout",
            Fault::Refused,
            format!("Parameter 'timeout' must be whole seconds from 0 to {MAX_WAIT_SECONDS}, got {value:?}."),
        )
        .into()),
    }
}

async fn read_key(
    State(state): State<AppState>,
    MaybeAuthenticated(caller): MaybeAuthenticated,
    PathParams((store, key)): PathParams<(String, String)>,
    QueryPairs(pairs): QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    answer_key(
        &state,
        &store,
        &pairs,
        &headers,
        move |stores, token, now, wait| stores.read(caller.as_ref(), token, &key, now, wait),
    )
    .await
}

/// The answer of both key routes: the store and the wait the request names, `read` on the
/// blocking pool, and its bytes as [`key_response`]; errors as a store key's.
async fn answer_key(
    state: &AppState,
    store: &str,
    pairs: &[(String, String)],
    headers: &HeaderMap,
    read: impl FnOnce(
        &svc_daemon::Stores,
        Uuid,
        i64,
        Duration,
    ) -> svc_daemon::Result<svc_daemon::KeyBytes>
    + Send
    + 'static,
) -> Result<Response, ApiError> {
    let answer = async {
        let token = store_token(store)?;
        let wait = wait(pairs)?;
        let bytes = state
            .daemon
            .run(move |daemon| read(daemon.stores(), token, now(), wait))
            .await?;
        Ok(key_response(bytes, headers))
    };
    answer.await.map_err(|e: ApiError| e.at(Endpoint::StoreKey))
}

/// The answer to a key read: its media type, and for a chunk of a finished store an `ETag`,
/// caching and 304 for a matching `If-None-Match`.
///
/// A client may keep a chunk but asks again before it uses it (`no-cache`): a conversion's
/// chunks never change, but its URL is the store's, and a store converted again (a reload,
/// or removed and asked for again) serves other bytes under it. Asking again costs a 304
/// while the store's conversion is the same; `immutable` let browsers mix a new conversion's
/// metadata with an old one's chunks for a year.
fn key_response(key_bytes: svc_daemon::KeyBytes, headers: &HeaderMap) -> Response {
    let media = match key_bytes.kind {
        KeyKind::Metadata => "application/json",
        KeyKind::Chunk => "application/octet-stream",
    };
    let mut response_headers = HeaderMap::new();
    response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    if let Some(etag) = &key_bytes.etag {
        let etag = HeaderValue::from_str(etag).expect("hex digits are a header value");
        response_headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache"),
        );
        let matched = headers
            .get(header::IF_NONE_MATCH)
            .is_some_and(|sent| sent == etag);
        response_headers.insert(header::ETAG, etag);
        if matched {
            return (StatusCode::NOT_MODIFIED, response_headers).into_response();
        }
    }
    (response_headers, key_bytes.bytes).into_response()
}

/// The share URL of a store.
fn share_url(state: &AppState, sig: &str, token: Uuid) -> String {
    format!("{}/data-portal/share/{sig}/{token}.zarr", state.api_base)
}

async fn share(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    QueryPairs(pairs): QueryPairs,
    RawBody(body): RawBody,
) -> Result<Json<Value>, ApiError> {
    let request =
        ShareRequest::parse(&pairs, &body).map_err(|e| ApiError::from(e).at(Endpoint::Share))?;
    let share = state
        .daemon
        .run(move |daemon| {
            daemon
                .stores()
                .share(&caller, request.token, request.ttl_seconds, now())
        })
        .await?;
    Ok(Json(json!({
        "url": share_url(&state, &share.sig, share.token),
        "sig": share.sig,
        "token": share.token.to_string(),
        "expires": share.expires,
        "method": svc_daemon::SHARE_METHOD,
    })))
}

async fn read_shared(
    State(state): State<AppState>,
    PathParams((sig, store, key)): PathParams<(String, String, String)>,
    QueryPairs(pairs): QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    answer_key(
        &state,
        &store,
        &pairs,
        &headers,
        move |stores, token, now, wait| stores.read_shared(&sig, token, &key, now, wait),
    )
    .await
}

/// The store a `zarr-utils` request names: `token=<uuid>` or `url=<store URL>` (both, or
/// either again, when they name the same store; nothing given is dropped).
fn named_store(pairs: &[(String, String)]) -> Result<Uuid, ApiError> {
    let named = pairs
        .iter()
        .filter(|(k, _)| k == "token" || k == "url")
        .map(|(k, v)| {
            let segment = match k.as_str() {
                "token" => format!("{}.zarr", v.trim()),
                _ => v
                    .trim()
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            };
            store_token(&segment)
        })
        .collect::<Result<Vec<Uuid>, ApiError>>()?;
    match named.as_slice() {
        [] => Err(Error::invalid(
            "url",
            Fault::WrongType,
            "Name the store with url=<store URL> or token=<uuid>.",
        )
        .into()),
        [first, rest @ ..] if rest.iter().all(|other| other == first) => Ok(*first),
        _ => Err(Error::invalid(
            "url",
            Fault::Refused,
            "The request names more than one store (url, token): name one.",
        )
        .into()),
    }
}

async fn status(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let token = named_store(&pairs)?;
    let record = state
        .daemon
        .run(move |daemon| daemon.stores().readable(Some(&caller), token, now()))
        .await?;
    Ok(Json(json!({
        "status": u8::from(record.status),
        "reason": record.reason,
    })))
}

async fn html(
    State(state): State<AppState>,
    Authenticated(caller): Authenticated,
    QueryPairs(pairs): QueryPairs,
) -> Result<Response, ApiError> {
    let token = named_store(&pairs)?;
    let wait = wait(&pairs)?;
    let page = state
        .daemon
        .run(move |daemon| daemon.stores().html(&caller, token, now(), wait))
        .await?;
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response())
}
