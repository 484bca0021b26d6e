//! Bearer tokens: the daemon's own (`svcd token issue`, published JWKS), an OpenID Connect
//! provider's (a real HTTP server started here, serving discovery and JWKS for a test-only
//! RSA key in `fixtures/`), and the auth matrix over every protected route.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::harness::Svcd;

/// Test-only key; its public half is `fixtures/idp-jwks.json`.
const IDP_KEY: &[u8] = include_bytes!("fixtures/idp-rsa.pem");
const IDP_JWKS: &str = include_str!("fixtures/idp-jwks.json");

/// A minimal identity provider: serves its discovery document and JWKS over HTTP until the
/// test process ends.
pub(crate) struct Provider {
    pub(crate) issuer: String,
    pub(crate) discovery: String,
}

impl Provider {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let issuer = format!("{base}/realms/test");
        let discovery_doc =
            json!({"issuer": issuer, "jwks_uri": format!("{base}/realms/test/certs")}).to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                let _ = reader.read_line(&mut request_line);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("");
                let (status, body) = match path {
                    "/realms/test/.well-known/openid-configuration" => {
                        ("200 OK", discovery_doc.as_str())
                    }
                    "/realms/test/certs" => ("200 OK", IDP_JWKS),
                    _ => ("404 Not Found", "{}"),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Provider {
            discovery: format!("{issuer}/.well-known/openid-configuration"),
            issuer,
        }
    }

    /// A token signed with the provider's key; `claims` override the defaults.
    pub(crate) fn token(&self, claims: &Value) -> String {
        let mut all = json!({
            "iss": self.issuer,
            "aud": "svc-nextgen",
            "exp": now() + 600,
            "sub": "f81d4fae",
            "preferred_username": "carl",
        });
        for (k, v) in claims.as_object().unwrap() {
            all[k] = v.clone();
        }
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("idp-key-1".into());
        jsonwebtoken::encode(&header, &all, &EncodingKey::from_rsa_pem(IDP_KEY).unwrap()).unwrap()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A daemon that trusts a freshly started provider.
pub(crate) fn with_provider() -> (Svcd, Provider) {
    let provider = Provider::start();
    let svcd = Svcd::start_with(&[("SVCD_AUTH_OIDC_DISCOVERY_URLS", &provider.discovery)]);
    (svcd, provider)
}

fn flavour_body(name: &str) -> Value {
    json!({"flavour_name": name, "mapping": {"model": "source"}})
}

#[test]
fn own_tokens_verify_against_the_published_key() {
    let svcd = Svcd::start();
    let token = svcd.token("jane", false);
    let jwks = svcd.get("/auth/v2/.well-known/jwks.json").json();
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!(jwks["keys"][0]["kid"].as_str(), header.kid.as_deref());
    assert_eq!(jwks["keys"][0]["alg"], "EdDSA");
    let key = jsonwebtoken::DecodingKey::from_ed_components(jwks["keys"][0]["x"].as_str().unwrap())
        .unwrap();
    let mut validation = jsonwebtoken::Validation::new(Algorithm::EdDSA);
    validation.set_audience(&["svc-nextgen"]);
    let claims = jsonwebtoken::decode::<Value>(&token, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(claims["preferred_username"], "jane");

    let key_file = svcd.data_dir.join("auth/signing-key.pem");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    let reply = svcd.send(
        "POST",
        "/databrowser/flavours",
        Some(&token),
        Some(&flavour_body("mine")),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        svcd.get("/auth/v2/auth-ports").json()["valid_ports"][0],
        53100
    );
}

#[test]
fn provider_tokens_are_verified_with_its_jwks() {
    let (svcd, provider) = with_provider();
    let admin = provider.token(&json!({"realm_access": {"roles": ["admin"]}}));
    let body = json!({"flavour_name": "idp", "mapping": {}, "is_global": true});
    let reply = svcd.send("POST", "/databrowser/flavours", Some(&admin), Some(&body));
    assert_eq!(reply.status, 201, "{}", reply.text());
    let listed = svcd.get("/databrowser/flavours?flavour_name=idp").json();
    assert_eq!(listed["flavours"][0]["owner"], "global");

    let user = provider.token(&json!({"preferred_username": "dora"}));
    let reply = svcd.send("POST", "/databrowser/flavours", Some(&user), Some(&body));
    assert_eq!(reply.status, 403, "{}", reply.text());

    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rotated-away".into());
    let claims =
        json!({"iss": provider.issuer, "aud": "svc-nextgen", "exp": now() + 60, "sub": "x"});
    let unknown_kid = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_rsa_pem(IDP_KEY).unwrap(),
    )
    .unwrap();
    let reply = svcd.send(
        "POST",
        "/databrowser/flavours",
        Some(&unknown_kid),
        Some(&flavour_body("k")),
    );
    assert_eq!(reply.status, 401);
    assert!(reply.detail().contains("unknown key"), "{}", reply.detail());
}

#[test]
fn every_protected_route_checks_the_token() {
    let (svcd, provider) = with_provider();
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    let admin = svcd.token("ada", true);
    // Jane's personal flavour and user data, the targets of the other users' attempts.
    let reply = svcd.send(
        "POST",
        "/databrowser/flavours",
        Some(&jane),
        Some(&flavour_body("janes")),
    );
    assert_eq!(reply.status, 201);
    let entry = json!({"file": "/home/jane/a.nc", "variable": "tas", "time_frequency": "mon",
                       "time": "[2000-01-01T00:00:00Z TO 2000-12-31T00:00:00Z]"});
    let add = json!({"user_metadata": [entry], "facets": {"project": "janes"}});
    assert_eq!(
        svcd.send("POST", "/databrowser/userdata", Some(&jane), Some(&add))
            .status,
        202
    );

    // Jane's token with the payload changed to name another user: the signature no longer fits.
    let tampered = {
        use base64::Engine;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let parts: Vec<&str> = jane.split('.').collect();
        let mut claims: Value = serde_json::from_slice(&engine.decode(parts[1]).unwrap()).unwrap();
        claims["preferred_username"] = json!("ada");
        let payload = engine.encode(claims.to_string());
        format!("{}.{payload}.{}", parts[0], parts[2])
    };
    let bad_tokens: Vec<(&str, String, &str)> = vec![
        ("tampered", tampered, "signature"),
        ("malformed", "not-a-jwt".into(), "not a JWT"),
        (
            "expired",
            provider.token(&json!({"exp": now() - 3600})),
            "expired",
        ),
        (
            "wrong audience",
            provider.token(&json!({"aud": "someone-else"})),
            "audience",
        ),
        (
            "unknown issuer",
            provider.token(&json!({"iss": "https://elsewhere"})),
            "not trusted",
        ),
        // Claims to be the daemon's own token but is signed with the provider's key.
        (
            "wrong signature",
            provider.token(&json!({"iss": "svcd"})),
            "key",
        ),
    ];
    let routes: Vec<(&str, &str, Option<Value>)> = vec![
        ("POST", "/databrowser/userdata", Some(add.clone())),
        ("DELETE", "/databrowser/userdata", Some(json!({}))),
        ("POST", "/databrowser/flavours", Some(flavour_body("other"))),
        (
            "PUT",
            "/databrowser/flavours/janes",
            Some(json!({"mapping": {"project": "p"}})),
        ),
        ("DELETE", "/databrowser/flavours/janes", None),
    ];
    for (method, path, body) in &routes {
        let reply = svcd.send(method, path, None, body.as_ref());
        assert_eq!(reply.status, 401, "{method} {path} without token");
        assert_eq!(reply.detail(), "Not authenticated");
        assert_eq!(reply.header("www-authenticate"), "Bearer");
        for (what, token, reason) in &bad_tokens {
            let reply = svcd.send(method, path, Some(token), body.as_ref());
            assert_eq!(
                reply.status,
                401,
                "{method} {path} with {what} token: {}",
                reply.text()
            );
            assert!(
                reply.detail().contains(reason),
                "{what}: {}",
                reply.detail()
            );
        }
    }

    // Other users: cannot see, change or delete Jane's flavour, nor delete her data.
    for other in [&john, &admin] {
        let update = svcd.send(
            "PUT",
            "/databrowser/flavours/janes",
            Some(other),
            Some(&json!({"mapping": {}})),
        );
        assert_eq!(update.status, 404, "{}", update.text());
        assert_eq!(
            svcd.send("DELETE", "/databrowser/flavours/janes", Some(other), None)
                .status,
            404
        );
        assert_eq!(
            svcd.send(
                "DELETE",
                "/databrowser/flavours/jane:janes",
                Some(other),
                None
            )
            .status,
            404
        );
        let listed = svcd
            .send("GET", "/databrowser/flavours", Some(other), None)
            .json();
        assert!(!listed.to_string().contains("janes"), "{listed}");
        let overview = svcd
            .send("GET", "/databrowser/overview", Some(other), None)
            .json();
        assert!(!overview.to_string().contains("janes"));
        let search = svcd.send(
            "GET",
            "/databrowser/data-search/janes/file",
            Some(other),
            None,
        );
        assert_eq!(search.status, 422);
        let delete = svcd.send(
            "DELETE",
            "/databrowser/userdata",
            Some(other),
            Some(&json!({})),
        );
        assert_eq!(delete.status, 202);
        assert!(
            delete.json()["status"]
                .as_str()
                .unwrap()
                .contains(" 0 files removed")
        );
    }
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?project=janes")
            .lines(),
        ["/home/jane/a.nc"]
    );
    assert!(!svcd.get("/databrowser/flavours").text().contains("janes"));

    // Jane herself: sees and uses her flavour; an invalid token on an optional route is anonymous.
    let listed = svcd
        .send("GET", "/databrowser/flavours?owner=jane", Some(&jane), None)
        .json();
    assert_eq!(listed["total"], 1);
    let search = svcd.send(
        "GET",
        "/databrowser/data-search/janes/file",
        Some(&jane),
        None,
    );
    assert_eq!(search.status, 200);
    let anonymous = svcd.send("GET", "/databrowser/flavours", Some("garbage"), None);
    assert_eq!(anonymous.status, 200);
    assert_eq!(
        svcd.send(
            "PUT",
            "/databrowser/flavours/janes",
            Some(&jane),
            Some(&json!({"mapping": {"project": "p"}}))
        )
        .status,
        200
    );
    assert_eq!(
        svcd.send("DELETE", "/databrowser/flavours/janes", Some(&jane), None)
            .status,
        200
    );
    let delete = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&jane),
        Some(&json!({"project": "janes"})),
    );
    assert!(
        delete.json()["status"]
            .as_str()
            .unwrap()
            .contains(" 1 files removed"),
        "{}",
        delete.text()
    );
    assert_eq!(svcd.get("/databrowser/data-search/user/file").text(), "");
}

#[test]
fn a_provider_that_cannot_be_reached_is_503_not_a_bad_token() {
    // A port nothing listens on: the provider is down from the start.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let issuer = format!("http://127.0.0.1:{port}/realms/test");
    let discovery = format!("{issuer}/.well-known/openid-configuration");
    let svcd = Svcd::start_with(&[("SVCD_AUTH_OIDC_DISCOVERY_URLS", &discovery)]);
    let provider = Provider {
        issuer,
        discovery: discovery.clone(),
    };
    let token = provider.token(&json!({}));
    let reply = svcd.send(
        "POST",
        "/databrowser/flavours",
        Some(&token),
        Some(&flavour_body("x")),
    );
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(reply.detail().contains(&discovery), "{}", reply.detail());
    assert_eq!(reply.header("retry-after"), "10");
    // A token of another issuer is not that provider's (its discovery URL names its
    // issuer): not trusted, whatever providers are down.
    let stranger = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": "https://elsewhere.invalid", "aud": "svc-nextgen", "exp": now() + 60}),
        &EncodingKey::from_secret(b"x"),
    )
    .unwrap();
    let reply = svcd.send(
        "POST",
        "/databrowser/flavours",
        Some(&stranger),
        Some(&flavour_body("y")),
    );
    assert_eq!(reply.status, 401, "{}", reply.text());
}
