//! One trusted OpenID Connect provider: its issuer and signing keys, from its discovery
//! document and JWKS.
//!
//! Keys are read from a snapshot without waiting; only a token naming an unknown `kid` (or
//! an issuer not yet known because the provider was down) leads to a fetch, and fetches are
//! serialised and spaced by [`REFETCH_INTERVAL`].

use std::collections::HashMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use parking_lot::RwLock;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The shortest time between two fetches from one provider.
pub(crate) const REFETCH_INTERVAL: Duration = Duration::from_secs(10);

/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

#[derive(Default)]
struct Snapshot {
    issuer: Option<String>,
    keys: HashMap<String, (DecodingKey, Algorithm)>,
    /// The key used for tokens without `kid`, when the JWKS has exactly one.
    only: Option<(DecodingKey, Algorithm)>,
}

pub(crate) struct Provider {
    discovery_url: String,
    client: reqwest::Client,
    snapshot: RwLock<Snapshot>,
    /// Held while fetching; the instant of the last fetch attempt.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    /// Why the last fetch failed; none after one that succeeded.
    failure: parking_lot::Mutex<Option<String>>,
}

impl Provider {
    pub(crate) fn new(discovery_url: &str) -> Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| Error::Config(format!("HTTP client for {discovery_url}: {e}")))?;
        Ok(Provider {
            discovery_url: discovery_url.to_string(),
            client,
            snapshot: RwLock::default(),
            fetching: tokio::sync::Mutex::new(None),
            failure: parking_lot::Mutex::new(None),
        })
    }

    pub(crate) fn discovery_url(&self) -> &str {
        &self.discovery_url
    }

    pub(crate) fn issuer(&self) -> Option<String> {
        self.snapshot.read().issuer.clone()
    }

    /// Fetches discovery document and keys now.
    pub(crate) async fn refresh(&self) -> Result<()> {
        let mut last = self.fetching.lock().await;
        *last = Some(Instant::now());
        self.fetch().await
    }

    /// The provider, when its last fetch failed, as the error of a token it must check:
    /// [`Error::Unavailable`] (503), not a verdict on the token. A client told 401 would take
    /// a good token for a bad one; told 503, it asks again.
    /// The detail says no more than that: why the fetch failed is logged when it fails.
    pub(crate) fn unreachable(&self) -> Option<Error> {
        self.failure.lock().is_some().then(|| Error::Unavailable {
            service: self.discovery_url.clone(),
            reason: "the identity provider cannot be reached to check the token".into(),
        })
    }

    /// Fetches unless the last attempt is recent; tells whether it fetched successfully.
    pub(crate) async fn refresh_if_due(&self) -> bool {
        let mut last = self.fetching.lock().await;
        if last.is_some_and(|t| t.elapsed() < REFETCH_INTERVAL) {
            return false;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(provider = self.discovery_url, error = %e, "OIDC refresh failed");
                false
            }
        }
    }

    /// The key for a token header's `kid`, refetching the JWKS once if it is unknown.
    pub(crate) async fn key(&self, kid: Option<&str>) -> Result<(DecodingKey, Algorithm)> {
        if let Some(found) = self.lookup(kid) {
            return Ok(found);
        }
        self.refresh_if_due().await;
        self.lookup(kid).ok_or_else(|| {
            self.unreachable().unwrap_or_else(|| {
                Error::unauthenticated("the token is signed with an unknown key")
            })
        })
    }

    fn lookup(&self, kid: Option<&str>) -> Option<(DecodingKey, Algorithm)> {
        let snapshot = self.snapshot.read();
        match kid {
            Some(kid) => snapshot.keys.get(kid).cloned(),
            None => snapshot.only.clone(),
        }
    }

    /// Fetches discovery document and keys, and notes whether that failed.
    async fn fetch(&self) -> Result<()> {
        let fetched = self.fetch_keys().await;
        *self.failure.lock() = fetched.as_ref().err().map(ToString::to_string);
        fetched
    }

    async fn fetch_keys(&self) -> Result<()> {
        let discovery: Discovery = self.get_json(&self.discovery_url).await?;
        let set: JwkSet = self.get_json(&discovery.jwks_uri).await?;
        let mut keys = HashMap::new();
        let mut usable = Vec::new();
        for jwk in &set.keys {
            let Some(key) = decoding_key(jwk) else {
                continue;
            };
            if let Some(kid) = &jwk.common.key_id {
                keys.insert(kid.clone(), key.clone());
            }
            usable.push(key);
        }
        let only = (usable.len() == 1).then(|| usable.remove(0));
        *self.snapshot.write() = Snapshot {
            issuer: Some(discovery.issuer),
            keys,
            only,
        };
        Ok(())
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T> {
        let unavailable = |e: reqwest::Error| Error::Unavailable {
            service: url.to_string(),
            reason: e.to_string(),
        };
        self.client
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(unavailable)?
            .json()
            .await
            .map_err(unavailable)
    }
}

/// A signature key of the JWKS with the one algorithm it may be used with; encryption keys
/// and keys of unsupported types are skipped.
fn decoding_key(jwk: &Jwk) -> Option<(DecodingKey, Algorithm)> {
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != jsonwebtoken::jwk::PublicKeyUse::Signature)
    {
        return None;
    }
    let declared = jwk
        .common
        .key_algorithm
        .and_then(|a| serde_json::to_value(a).ok())
        .and_then(|v| v.as_str().and_then(|s| Algorithm::from_str(s).ok()));
    let algorithm = declared.or(match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(Algorithm::ES256),
            EllipticCurve::P384 => Some(Algorithm::ES384),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Some(Algorithm::EdDSA),
        AlgorithmParameters::OctetKey(_) => None,
    })?;
    DecodingKey::from_jwk(jwk).ok().map(|k| (k, algorithm))
}
