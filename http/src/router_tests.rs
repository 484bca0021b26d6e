//! The status mapping of the whole router, request by request (`tower::ServiceExt::oneshot`,
//! no socket): each error kind reaches the client with the status spec 1 names, a `detail`,
//! and the headers that go with it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use svc_daemon::{Config, Daemon, Overrides};
use tower::ServiceExt;

const API: &str = "/api/svc-nextgen";

struct App {
    router: Router,
    daemon: Arc<Daemon>,
    _dir: tempfile::TempDir,
}

fn app(env: &[(&str, &str)]) -> App {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    let overrides = Overrides {
        data_dir: Some(dir.path().to_path_buf()),
        listen: None,
    };
    let config = Config::from_sources(None, &env, &overrides).unwrap();
    let daemon = Arc::new(Daemon::open(config).unwrap());
    App {
        router: crate::router(&daemon, "http://test"),
        daemon,
        _dir: dir,
    }
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

impl App {
    fn token(&self, user: &str) -> String {
        let (token, _) = self
            .daemon
            .auth()
            .issue(user, false, Duration::from_secs(600))
            .unwrap();
        token
    }

    async fn send(&self, method: &str, uri: &str, token: Option<&str>, body: &str) -> Answer {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn get(&self, uri: &str) -> Answer {
        self.send("GET", uri, None, "").await
    }
}

impl Answer {
    fn detail(&self) -> &str {
        self.body["detail"].as_str().unwrap_or_default()
    }
}

#[tokio::test]
async fn unknown_paths_are_404_with_a_detail() {
    let app = app(&[]);
    let answer = app.get("/nowhere").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.detail(), "Not Found");
}

#[tokio::test]
async fn invalid_parameters_are_422_naming_them() {
    let app = app(&[]);
    let answer = app
        .get(&format!("{API}/databrowser/data-search/cmipx/file"))
        .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.detail().starts_with("Invalid flavour 'cmipx'"),
        "{}",
        answer.detail()
    );
    let answer = app
        .get(&format!("{API}/databrowser/data-search/svc/file?foo=bar"))
        .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer.detail().contains("'foo'"), "{}", answer.detail());
}

/// The one per-endpoint rule of spec 1: an intake catalogue without results is 400, while
/// a missing STAC item is 404.
#[tokio::test]
async fn no_results_is_400_for_the_intake_catalogue_and_404_elsewhere() {
    let app = app(&[]);
    let intake = app
        .get(&format!("{API}/databrowser/intake-catalogue/svc/file"))
        .await;
    assert_eq!(intake.status, StatusCode::BAD_REQUEST, "{:?}", intake.body);
    assert!(!intake.detail().is_empty());
    // The collection exists; the item, well-formed, does not.
    let mut record = svc_daemon::Record::new("/arch/cmip6/tas.nc");
    record.facets.insert("project".into(), vec!["cmip6".into()]);
    app.daemon.catalog().add(&[record]).unwrap();
    let collection = app.get(&format!("{API}/stacapi/collections/cmip6")).await;
    assert_eq!(collection.status, StatusCode::OK, "{:?}", collection.body);
    let absent = "0123456789abcdef0123456789abcdef";
    let item = app
        .get(&format!("{API}/stacapi/collections/cmip6/items/{absent}"))
        .await;
    assert_eq!(item.status, StatusCode::NOT_FOUND, "{:?}", item.body);
    assert_eq!(
        item.detail(),
        format!("Item {absent} not found in collection cmip6.")
    );
}

#[tokio::test]
async fn missing_or_malformed_tokens_are_401_with_a_bearer_challenge() {
    let app = app(&[]);
    let body = r#"{"flavour_name": "x", "mapping": {}}"#;
    let uri = format!("{API}/databrowser/flavours");
    for token in [None, Some("not-a-jwt")] {
        let answer = app.send("POST", &uri, token, body).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(answer.headers[header::WWW_AUTHENTICATE], "Bearer");
        assert!(!answer.detail().is_empty());
    }
}

#[tokio::test]
async fn conflicts_are_409_and_bad_bodies_422() {
    let app = app(&[]);
    let jane = app.token("jane");
    let uri = format!("{API}/databrowser/flavours");
    let body = r#"{"flavour_name": "mine", "mapping": {"model": "m"}}"#;
    assert_eq!(
        app.send("POST", &uri, Some(&jane), body).await.status,
        StatusCode::CREATED
    );
    let again = app.send("POST", &uri, Some(&jane), body).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(again.detail().contains("mine"), "{}", again.detail());
    let broken = app.send("POST", &uri, Some(&jane), "{").await;
    assert_eq!(broken.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(!broken.detail().is_empty());
}

#[tokio::test]
async fn compat_prefixes_serve_the_same_api() {
    let app = app(&[("SVCD_HTTP_COMPAT_PREFIXES", "/api/freva-nextgen")]);
    let answer = app.get("/api/freva-nextgen/ping").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, serde_json::json!({"ping": "pong"}));
}

#[tokio::test]
async fn requests_refused_before_the_daemon_get_their_own_statuses() {
    let app = app(&[]);
    let jane = app.token("jane");
    let flavours = format!("{API}/databrowser/flavours");
    let huge = format!("{{\"flavour_name\": \"{}\"}}", "x".repeat(128 * 1024));
    let too_large = app.send("POST", &flavours, Some(&jane), &huge).await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(too_large.detail(), "Request body: length limit exceeded.");

    let long = format!(
        "{API}/databrowser/data-search/svc/file?project={}",
        "a".repeat(40 * 1024)
    );
    let too_long = app.get(&long).await;
    assert_eq!(too_long.status, StatusCode::URI_TOO_LONG);
    assert!(
        too_long
            .detail()
            .contains("exceeds the limit of 32768 bytes"),
        "{}",
        too_long.detail()
    );

    let not_utf8 = app
        .get(&format!(
            "{API}/databrowser/data-search/svc/file?project=%FF"
        ))
        .await;
    assert_eq!(not_utf8.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        not_utf8.detail(),
        "Query parameter \"%FF\" is not valid UTF-8 after percent-decoding."
    );
}

#[tokio::test]
async fn a_busy_server_is_503_with_retry_after() {
    let app = app(&[("SVCD_HTTP_MAX_EXPENSIVE_REQUESTS", "1")]);
    let held = app.daemon.expensive_slot().await.unwrap();
    let answer = app
        .get(&format!("{API}/databrowser/metadata-search/svc/file"))
        .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.headers[header::RETRY_AFTER], "2");
    assert!(answer.detail().contains("busy"), "{}", answer.detail());
    drop(held);
    let answer = app
        .get(&format!("{API}/databrowser/metadata-search/svc/file"))
        .await;
    assert_eq!(answer.status, StatusCode::OK);
}

/// The STAC API answers parameter faults with 400 except an invalid body or a body field of
/// the wrong JSON type (422), while the databrowser answers the same faults with 422.
#[tokio::test]
async fn the_stac_api_answers_syntax_with_400_and_wrong_types_with_422() {
    let app = app(&[]);
    let search = format!("{API}/stacapi/search");
    for (uri, parameter) in [
        (format!("{search}?bbox=1,2,3"), "bbox"),
        (format!("{search}?datetime=yesterday"), "datetime"),
        (format!("{search}?limit=0"), "limit"),
        (format!("{search}?token=sideways"), "token"),
        (format!("{search}?colections=cmip6"), "colections"),
    ] {
        let answer = app.get(&uri).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(answer.detail().contains(parameter), "{}", answer.detail());
    }
    let wrong_type = app
        .send("POST", &search, None, r#"{"collections":"cmip6"}"#)
        .await;
    assert_eq!(wrong_type.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(wrong_type.detail().contains("'collections'"));
    // A body that is not JSON is an invalid body: 422 (spec 2, endpoint 15).
    let not_json = app.send("POST", &search, None, "{").await;
    assert_eq!(not_json.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        not_json.detail().contains("not JSON"),
        "{}",
        not_json.detail()
    );
    let databrowser = app
        .get(&format!(
            "{API}/databrowser/data-search/svc/file?time=yesterday"
        ))
        .await;
    assert_eq!(databrowser.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        databrowser.detail().contains("'time'"),
        "{}",
        databrowser.detail()
    );
}

/// A wrong method and an unreadable path get our statuses with a `detail`, on every router.
#[tokio::test]
async fn wrong_methods_and_unreadable_paths_get_a_detail() {
    let app = app(&[]);
    for (method, uri) in [
        ("PUT", format!("{API}/stacapi/search")),
        ("DELETE", format!("{API}/databrowser/data-search/svc/file")),
        ("PATCH", format!("{API}/data-portal/zarr/convert")),
    ] {
        let answer = app.send(method, &uri, None, "").await;
        assert_eq!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {uri}"
        );
        assert_eq!(answer.detail(), "Method Not Allowed");
    }
    for uri in [
        format!("{API}/databrowser/data-search/%FF/file"),
        format!("{API}/data-portal/zarr/%FF.zarr/.zmetadata"),
    ] {
        let answer = app.get(&uri).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(
            answer.detail().starts_with("Request path:"),
            "{uri}: {:?}",
            answer.body
        );
    }
}
