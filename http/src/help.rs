//! `ping`, the OpenAPI document and a readable help page.

use axum::Json;
use axum::Router;
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use serde_json::{Value, json};

use crate::AppState;

/// The OpenAPI 3 document of the API (paths relative to the server's prefix).
const OPENAPI: &str = include_str!("openapi.json");

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ping", get(ping))
        .route("/help", get(help_page))
        .route("/help/openapi.json", get(openapi))
}

async fn ping() -> Json<Value> {
    Json(json!({"ping": "pong"}))
}

/// The OpenAPI document, as `application/json` or, when the client asks for it (as the STAC
/// landing page's `service-desc` link tells it to), as the OpenAPI 3.0 media type.
async fn openapi(headers: HeaderMap) -> impl IntoResponse {
    let mut doc: Value =
        serde_json::from_str(OPENAPI).expect("the embedded OpenAPI document is JSON");
    doc["info"]["version"] = Value::String(svc_daemon::VERSION.to_string());
    let wants_openapi_type = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/vnd.oai.openapi+json"));
    let media = if wants_openapi_type {
        svc_daemon::OPENAPI_JSON
    } else {
        "application/json"
    };
    ([(header::CONTENT_TYPE, media)], doc.to_string())
}

async fn help_page() -> Html<String> {
    let doc: Value = serde_json::from_str(OPENAPI).expect("the embedded OpenAPI document is JSON");
    let mut rows = String::new();
    if let Some(paths) = doc["paths"].as_object() {
        for (path, ops) in paths {
            for (method, op) in ops.as_object().into_iter().flatten() {
                let summary = op["summary"].as_str().unwrap_or("");
                rows.push_str(&format!(
                    "<tr><td><code>{}</code></td><td><code>{path}</code></td><td>{summary}</td></tr>\n",
                    method.to_uppercase()
                ));
            }
        }
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>svc-nextgen API</title></head><body>\
         <h1>svc-nextgen API {}</h1><p>Machine-readable: <a href=\"help/openapi.json\">openapi.json</a></p>\
         <table border=\"1\" cellpadding=\"4\"><tr><th>Method</th><th>Path</th><th>What</th></tr>{rows}</table></body></html>",
        svc_daemon::VERSION
    ))
}
