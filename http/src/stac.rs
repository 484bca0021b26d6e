//! STAC API routes (spec 2, endpoints 8-17) under `P/stacapi` and, with a collection axis,
//! `P/stacapi/<axis>`. Handlers read the path and parameters, call the daemon's
//! [`svc_daemon::StacApi`] and set the media type.

use std::collections::BTreeSet;

use axum::Router;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;
use svc_daemon::{Error, Fault};
use svc_daemon::{GEO_JSON, Method, SCHEMA_JSON, Scope, SearchRequest, StacApi};

use crate::AppState;
use crate::error::{ApiError, Endpoint, RequestError};
use crate::extract::{QueryPairs, RawBody};

pub(crate) fn routes() -> Router<AppState> {
    let mut router = Router::new();
    for root in ["/stacapi", "/stacapi/{axis}"] {
        router = router
            .route(root, get(landing))
            .route(&format!("{root}/"), get(landing))
            .route(&format!("{root}/conformance"), get(conformance))
            .route(&format!("{root}/collections"), get(collections))
            .route(&format!("{root}/collections/{{cid}}"), get(collection))
            .route(&format!("{root}/collections/{{cid}}/items"), get(items))
            .route(
                &format!("{root}/collections/{{cid}}/items/{{item_id}}"),
                get(item),
            )
            .route(
                &format!("{root}/collections/{{cid}}/queryables"),
                get(queryables),
            )
            .route(&format!("{root}/queryables"), get(queryables))
            .route(&format!("{root}/search"), get(search_get).post(search_post));
    }
    router
}

/// An error of a STAC handler, answered with the STAC API's statuses ([`Endpoint::Stac`]).
#[derive(Debug)]
struct StacError(ApiError);

impl<E: Into<ApiError>> From<E> for StacError {
    fn from(error: E) -> Self {
        StacError(error.into())
    }
}

impl IntoResponse for StacError {
    fn into_response(self) -> Response {
        self.0.at(Endpoint::Stac).into_response()
    }
}

/// What every STAC handler reads: the daemon, the path parameters (`axis`, `cid`,
/// `item_id`, each optional) and the query pairs.
struct StacCall {
    state: AppState,
    path: Vec<(String, String)>,
    pairs: Vec<(String, String)>,
}

impl FromRequestParts<AppState> for StacCall {
    type Rejection = StacError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| RequestError::PathUnreadable {
                reason: e.body_text(),
            })?;
        let QueryPairs(pairs) = QueryPairs::from_request_parts(parts, state).await?;
        Ok(StacCall {
            state: state.clone(),
            path: raw
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pairs,
        })
    }
}

impl StacCall {
    fn param(&self, name: &str) -> Option<&str> {
        self.path
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn cid(&self) -> &str {
        self.param("cid").unwrap_or_default()
    }

    /// The scope with an explicit view.
    fn scope_with(&self, view: Vec<String>) -> Result<Scope, StacError> {
        Ok(Scope::new(&self.state.api_base, self.param("axis"))?.with_view(view))
    }

    /// The scope with the view of `visible_collections`; other parameters of these read-only
    /// documents are ignored.
    fn scope(&self) -> Result<Scope, StacError> {
        let view = self
            .pairs
            .iter()
            .filter(|(k, _)| k == "visible_collections")
            .flat_map(|(_, v)| svc_daemon::split_list(v))
            .collect();
        self.scope_with(view)
    }
}

fn typed(media: &'static str, document: &Value) -> Response {
    ([(header::CONTENT_TYPE, media)], document.to_string()).into_response()
}

fn json(document: &Value) -> Response {
    typed("application/json", document)
}

async fn landing(call: StacCall) -> Result<Response, StacError> {
    let scope = call.scope()?;
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().landing(&scope))
        .await?;
    Ok(json(&document))
}

async fn conformance(call: StacCall) -> Result<Response, StacError> {
    call.scope_with(Vec::new())?;
    Ok(json(&StacApi::conformance()))
}

async fn collections(call: StacCall) -> Result<Response, StacError> {
    let scope = call.scope()?;
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().collections(&scope))
        .await?;
    Ok(json(&document))
}

async fn collection(call: StacCall) -> Result<Response, StacError> {
    let (scope, cid) = (call.scope()?, call.cid().to_string());
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().collection(&scope, &cid))
        .await?;
    Ok(json(&document))
}

async fn items(call: StacCall) -> Result<Response, StacError> {
    let request = SearchRequest::from_pairs(&call.pairs, false)?;
    let scope = call.scope_with(request.view.clone())?;
    let cid = call.cid().to_string();
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().items(&scope, &cid, &request))
        .await?;
    Ok(typed(GEO_JSON, &document))
}

async fn item(call: StacCall) -> Result<Response, StacError> {
    let id = call.param("item_id").unwrap_or_default().to_string();
    let (scope, cid) = (call.scope()?, call.cid().to_string());
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().item(&scope, &cid, &id))
        .await?;
    Ok(typed(GEO_JSON, &document))
}

async fn queryables(call: StacCall) -> Result<Response, StacError> {
    let cid = call.param("cid").map(str::to_string);
    let scope = call.scope()?;
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().queryables(&scope, cid.as_deref()))
        .await?;
    Ok(typed(SCHEMA_JSON, &document))
}

async fn search_get(call: StacCall) -> Result<Response, StacError> {
    let request = SearchRequest::from_pairs(&call.pairs, true)?;
    let scope = call.scope_with(request.view.clone())?;
    let document = call
        .state
        .daemon
        .run_expensive(move |d| d.stac().search(&scope, &request, Method::Get))
        .await?;
    Ok(typed(GEO_JSON, &document))
}

/// Largest POST search body: a generous GeoJSON geometry fits (its vertex count is capped
/// where it is parsed).
const SEARCH_BODY_LIMIT: usize = 1024 * 1024;

async fn search_post(call: StacCall, RawBody(body): RawBody) -> Result<Response, StacError> {
    if body.len() > SEARCH_BODY_LIMIT {
        return Err(Error::invalid(
            "body",
            Fault::Refused,
            format!(
                "The search body has {} bytes; at most {SEARCH_BODY_LIMIT} are accepted.",
                body.len()
            ),
        )
        .into());
    }
    let scope = call.scope()?;
    let query_view = scope.view().to_vec();
    let document = call
        .state
        .daemon
        .run_expensive(move |d| {
            let mut request = SearchRequest::from_body(&body)?;
            if !query_view.is_empty() {
                let as_set = |v: &[String]| v.iter().cloned().collect::<BTreeSet<_>>();
                if !request.view.is_empty() && as_set(&request.view) != as_set(&query_view) {
                    return Err(Error::invalid(
                        "visible_collections",
                        Fault::Refused,
                        "Conflicting 'visible_collections' in query string and body.",
                    ));
                }
                request.view = query_view;
            }
            let scope = scope.with_view(request.view.clone());
            d.stac().search(&scope, &request, Method::Post)
        })
        .await?;
    Ok(typed(GEO_JSON, &document))
}
