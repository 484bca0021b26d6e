//! Bearer tokens: the daemon's own JWTs and those of trusted OpenID Connect providers.
//!
//! - Own tokens are signed EdDSA (Ed25519) with the key in `<data_dir>/auth/signing-key.pem`,
//!   created with mode 0600 on first use ([`key`]); `svcd token issue` signs with the same
//!   key, and `auth/v2/.well-known/jwks.json` publishes its public half. Their `iss` is
//!   `auth.issuer`.
//! - Tokens whose `iss` is a configured provider's issuer are verified with that provider's
//!   JWKS ([`oidc`]): fetched at start, cached, refetched when a token names an unknown `kid`
//!   (at most once per [`oidc::REFETCH_INTERVAL`], so no request triggers a fetch storm).
//!
//! On both, the signature algorithm is the key's own (a token cannot pick a weaker one), and
//! `exp`, `aud` (`auth.audience`) and `iss` are required and checked. The caller's name and
//! admin role come from the claims as DECISIONS.md sets out ([`Caller::from_claims`]).

/// How long a client is told to wait before asking again when a service the daemon needs
/// to answer (an identity provider) cannot be reached: the provider is fetched again at most
/// this often.
pub const SERVICE_RETRY: std::time::Duration = oidc::REFETCH_INTERVAL;

pub(crate) mod key;
mod oidc;

use std::collections::HashMap;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind as JwtErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};

use crate::config::{AuthConfig, Config};
use crate::error::{Error, Fault, Result};
pub(crate) use key::SigningKey;
use oidc::Provider;

/// Claims holding the caller's name, first present wins (then `sub`).
const USERNAME_CLAIMS: [&str; 4] = ["preferred_username", "user_name", "uid", "username"];

/// Tolerated clock difference on `exp`, `nbf` and `iat`.
const LEEWAY: Duration = Duration::from_secs(30);

/// User names that are refused: they would read as something else where names are shown
/// next to other values (`global` is the owner the flavour listing shows for global flavours).
const RESERVED_NAMES: [&str; 1] = ["global"];

/// Who is calling.
///
/// The user name is an identity: it owns user data and personal flavours and is compared byte
/// for byte wherever it is used. Names that would be ambiguous are refused when the token is
/// read ([`check_user_name`]): blank ones, ones with control characters, ones with `:` (which
/// separates owner and name in `owner:flavour`) and [`RESERVED_NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user name.
    pub user: String,
    /// Whether the token carries an admin role.
    pub admin: bool,
}

impl Caller {
    /// Reads name and role from verified claims: the name is the first present of
    /// `preferred_username`, `user_name`, `uid`, `username`, else `sub`; the caller is an
    /// admin when `roles`, `realm_access.roles` or `groups` contain one of `admin_roles`.
    ///
    /// # Errors
    /// [`Error::Unauthenticated`] when no claim names the user.
    pub fn from_claims(claims: &Value, admin_roles: &[String]) -> Result<Self> {
        let user = USERNAME_CLAIMS
            .iter()
            .chain(std::iter::once(&"sub"))
            // An empty claim names nobody: the next one is read (DECISIONS.md: the first
            // present, else `sub`).
            .find_map(|c| {
                claims
                    .get(*c)
                    .and_then(Value::as_str)
                    .filter(|u| !u.is_empty())
            })
            .ok_or_else(|| Error::unauthenticated("the token names no user"))?;
        check_user_name(user)?;
        let role_lists = [
            claims.get("roles"),
            claims.pointer("/realm_access/roles"),
            claims.get("groups"),
        ];
        let admin = role_lists
            .into_iter()
            .flatten()
            .filter_map(Value::as_array)
            .flatten()
            .filter_map(Value::as_str)
            .any(|role| admin_roles.iter().any(|a| a == role));
        Ok(Caller {
            user: user.to_string(),
            admin,
        })
    }
}

/// Refuses user names that cannot serve as an unambiguous identity (see [`Caller`]).
///
/// # Errors
/// [`Error::Unauthenticated`] naming the user name and what is wrong with it.
pub(crate) fn check_user_name(user: &str) -> Result<()> {
    let problem = if user.trim().is_empty() {
        Some("it is blank")
    } else if user.chars().any(char::is_control) {
        Some("it contains control characters")
    } else if user.chars().any(is_invisible) {
        Some(
            "it contains characters that show nothing or turn text around (a name would look like another)",
        )
    } else if user.contains(':') {
        Some("it contains ':', which separates owner and flavour names")
    } else if RESERVED_NAMES.contains(&user) {
        Some("it is reserved for global flavours")
    } else {
        None
    };
    match problem {
        Some(why) => Err(Error::unauthenticated(format!(
            "the token's user name {user:?} cannot be used: {why}"
        ))),
        None => Ok(()),
    }
}

/// Whether `c` shows nothing between letters or turns the text around it (zero-width spaces,
/// the word joiner, direction marks, embeddings, overrides and isolates, the byte order mark,
/// the soft hyphen): `"\u{200b}jane"` looks like `jane`. The joiners (U+200C, U+200D) and
/// variation selectors are not among them: Persian, Indic scripts and emoji spell names with
/// them.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}' | '\u{200E}' | '\u{200F}'
        | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}'
        | '\u{FEFF}')
}

/// Issues and verifies tokens.
pub struct Auth {
    config: AuthConfig,
    own: SigningKey,
    providers: Vec<Provider>,
    /// Tokens verified lately: a client reading a store sends one token with every chunk,
    /// and checking its signature each time was a fifth of the daemon's work.
    verified: VerifiedTokens,
}

/// How long a verified token is taken as verified without checking its signature again:
/// short, so that a provider's key rotation or a changed admin role takes effect soon.
const VERIFIED_FOR: Duration = Duration::from_secs(60);

/// The most tokens remembered; when full, all are forgotten.
const VERIFIED_CAPACITY: usize = 4096;

/// Verified tokens by the SHA-256 of the whole token: its holder, its expiry and when it was
/// verified (Unix seconds).
#[derive(Default)]
struct VerifiedTokens(parking_lot::Mutex<HashMap<[u8; 32], (Caller, u64, u64)>>);

impl VerifiedTokens {
    fn digest(token: &str) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(token.as_bytes()).into()
    }

    /// The holder of `token` if it was verified less than [`VERIFIED_FOR`] ago and has not
    /// expired at `now`.
    fn get(&self, token: &str, now: u64) -> Option<Caller> {
        let verified = self.0.lock();
        let (caller, exp, at) = verified.get(&Self::digest(token))?;
        (now < *exp && now < at + VERIFIED_FOR.as_secs()).then(|| caller.clone())
    }

    fn insert(&self, token: &str, caller: &Caller, exp: u64, now: u64) {
        let mut verified = self.0.lock();
        if verified.len() >= VERIFIED_CAPACITY {
            verified.clear();
        }
        verified.insert(Self::digest(token), (caller.clone(), exp, now));
    }
}

impl Auth {
    /// Loads (or creates) the signing key. Providers are not contacted yet: see [`Auth::start`].
    ///
    /// # Errors
    /// The key file cannot be read, created or is not private.
    pub fn open(config: &Config) -> Result<Self> {
        let own = SigningKey::load_or_create(&config.signing_key_file())?;
        let providers = config
            .auth
            .oidc_discovery_urls
            .iter()
            .map(|url| Provider::new(url))
            .collect::<Result<_>>()?;
        Ok(Auth {
            config: config.auth.clone(),
            own,
            providers,
            verified: VerifiedTokens::default(),
        })
    }

    /// Fetches every provider's discovery document and keys. A provider that cannot be
    /// reached is logged and tried again when a token needs it.
    pub async fn start(&self) {
        for provider in &self.providers {
            if let Err(e) = provider.refresh().await {
                tracing::warn!(provider = provider.discovery_url(), error = %e, "OIDC provider not reachable yet");
            }
        }
    }

    /// Signs a token for `user` valid for `ttl`.
    ///
    /// # Errors
    /// A user name that cannot be used ([`check_user_name`]); signing failed (a bug).
    pub fn issue(&self, user: &str, admin: bool, ttl: Duration) -> Result<(String, u64)> {
        check_user_name(user).map_err(|e| Error::invalid("user", Fault::Refused, e.to_string()))?;
        let now = jsonwebtoken::get_current_timestamp();
        let exp = now + ttl.as_secs();
        let roles: Vec<&str> = if admin {
            self.config
                .admin_roles
                .first()
                .map(String::as_str)
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        let claims = json!({
            "sub": user,
            "preferred_username": user,
            "roles": roles,
            "iss": self.config.issuer,
            "aud": self.config.audience,
            "iat": now,
            "exp": exp,
            "jti": uuid::Uuid::new_v4().to_string(),
        });
        Ok((self.own.sign(&claims)?, exp))
    }

    /// The JWKS document of the daemon's own key.
    pub fn jwks(&self) -> Value {
        json!({ "keys": [self.own.jwk()] })
    }

    /// Verifies a bearer token and names its holder.
    ///
    /// # Errors
    /// [`Error::Unauthenticated`] saying what is wrong with the token.
    pub async fn verify(&self, token: &str) -> Result<Caller> {
        let now = jsonwebtoken::get_current_timestamp();
        if let Some(caller) = self.verified.get(token, now) {
            return Ok(caller);
        }
        // Header and claims unverified, only to choose the key; `decode` below verifies.
        let unverified = jsonwebtoken::dangerous::insecure_decode::<Value>(token)
            .map_err(|_| Error::unauthenticated("the token is not a JWT"))?;
        let header = unverified.header;
        let issuer = unverified
            .claims
            .get("iss")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| Error::unauthenticated("the token has no \"iss\" claim"))?;
        let (key, algorithm): (DecodingKey, Algorithm) = if issuer == self.config.issuer {
            if header.kid.as_deref().is_some_and(|k| k != self.own.kid()) {
                return Err(Error::unauthenticated(
                    "the token is signed with an unknown key",
                ));
            }
            (self.own.decoding_key().clone(), Algorithm::EdDSA)
        } else {
            let provider = self.provider_for(&issuer).await?.ok_or_else(|| {
                Error::unauthenticated(format!("the token issuer {issuer:?} is not trusted"))
            })?;
            provider.key(header.kid.as_deref()).await?
        };
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY.as_secs();
        // Off by default in jsonwebtoken: a token is not valid before its `nbf`.
        validation.validate_nbf = true;
        validation.set_audience(&[&self.config.audience]);
        validation.set_issuer(&[&issuer]);
        validation.set_required_spec_claims(&["exp", "aud", "iss"]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| {
            Error::unauthenticated(match e.kind() {
                JwtErrorKind::ExpiredSignature => "the token has expired".to_string(),
                JwtErrorKind::InvalidAudience => format!(
                    "the token is not meant for this service (audience is not {:?})",
                    self.config.audience
                ),
                JwtErrorKind::InvalidSignature => "the token signature is invalid".to_string(),
                JwtErrorKind::InvalidAlgorithm => {
                    "the token is signed with the wrong algorithm".to_string()
                }
                JwtErrorKind::ImmatureSignature => "the token is not valid yet".to_string(),
                JwtErrorKind::MissingRequiredClaim(claim) => {
                    format!("the token has no {claim:?} claim")
                }
                _ => format!("invalid token: {e}"),
            })
        })?;
        let caller = Caller::from_claims(&data.claims, &self.config.admin_roles)?;
        if let Some(exp) = data.claims.get("exp").and_then(Value::as_u64) {
            self.verified.insert(token, &caller, exp, now);
        }
        Ok(caller)
    }

    /// The trusted provider whose issuer is `issuer`, or none.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the provider whose discovery URL belongs to `issuer`
    /// (`<issuer>/.well-known/openid-configuration`, as OpenID Connect discovery defines it)
    /// has not been reached yet and cannot be reached now: the token may well be its. A token
    /// of any other issuer is simply not trusted, whatever other providers are down.
    async fn provider_for(&self, issuer: &str) -> Result<Option<&Provider>> {
        if let Some(p) = self
            .providers
            .iter()
            .find(|p| p.issuer().as_deref() == Some(issuer))
        {
            return Ok(Some(p));
        }
        // A provider unreachable at start has no issuer yet: try those again (rate-limited).
        // Another request may have fetched it meanwhile, so its issuer is compared whatever
        // this attempt did.
        for provider in self.providers.iter().filter(|p| p.issuer().is_none()) {
            provider.refresh_if_due().await;
            if provider.issuer().as_deref() == Some(issuer) {
                return Ok(Some(provider));
            }
            let own_issuer = provider
                .discovery_url()
                .strip_suffix("/.well-known/openid-configuration")
                .is_some_and(|base| base == issuer);
            if own_issuer
                && provider.issuer().is_none()
                && let Some(unreachable) = provider.unreachable()
            {
                return Err(unreachable);
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(dir: &std::path::Path) -> Auth {
        let mut config = Config::from_sources(None, &[], &Default::default()).unwrap();
        config.data_dir = dir.to_path_buf();
        Auth::open(&config).unwrap()
    }

    #[test]
    fn names_and_roles_follow_the_claim_precedence() {
        let admins = vec!["admin".to_string()];
        let c = Caller::from_claims(&json!({"sub": "s", "uid": "u"}), &admins).unwrap();
        assert_eq!(c.user, "u");
        let c = Caller::from_claims(
            &json!({"sub": "s", "preferred_username": "p", "realm_access": {"roles": ["admin"]}}),
            &admins,
        )
        .unwrap();
        assert_eq!((c.user.as_str(), c.admin), ("p", true));
        let c = Caller::from_claims(&json!({"sub": "s", "groups": ["administrators"]}), &admins)
            .unwrap();
        assert_eq!((c.user.as_str(), c.admin), ("s", false));
        assert!(Caller::from_claims(&json!({"roles": ["admin"]}), &admins).is_err());
        // An empty claim names nobody; the next is read.
        let c =
            Caller::from_claims(&json!({"preferred_username": "", "sub": "s"}), &admins).unwrap();
        assert_eq!(c.user, "s");
        // Names that would look like another's: invisible or direction-turning characters.
        for bad in [
            "global",
            " ",
            "",
            "a:b",
            "x\ny",
            "\u{200b}jane",
            "\u{202e}enaj",
            "ja\u{2060}ne",
        ] {
            let err = Caller::from_claims(&json!({"sub": bad}), &admins);
            assert!(err.is_err(), "{bad:?} was accepted");
        }
        for fine in [
            "*",
            "-jane",
            "JANE",
            "not jane",
            "Global",
            "jürgen",
            "山田",
            "علی\u{200c}رضا",
            "\u{0915}\u{094d}\u{200d}\u{0937}",
            "\u{2764}\u{fe0f}jane",
        ] {
            assert_eq!(
                Caller::from_claims(&json!({"sub": fine}), &admins)
                    .unwrap()
                    .user,
                fine
            );
        }
    }

    #[test]
    fn verified_tokens_are_remembered_until_expiry_and_only_briefly() {
        let verified = VerifiedTokens::default();
        let jane = Caller {
            user: "jane".into(),
            admin: false,
        };
        verified.insert("token-a", &jane, 1_000, 500);
        assert_eq!(verified.get("token-a", 501), Some(jane.clone()));
        assert_eq!(
            verified.get("token-b", 501),
            None,
            "an exact token, not a prefix"
        );
        assert_eq!(verified.get("token-", 501), None);
        assert_eq!(verified.get("token-a", 500 + VERIFIED_FOR.as_secs()), None);
        verified.insert("token-c", &jane, 600, 590);
        assert_eq!(verified.get("token-c", 600), None, "expired");
        for n in 0..VERIFIED_CAPACITY {
            verified.insert(&format!("t{n}"), &jane, 1_000, 500);
        }
        assert!(verified.0.lock().len() <= VERIFIED_CAPACITY);
    }

    #[tokio::test]
    async fn issued_tokens_verify_and_tampering_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let auth = auth(dir.path());
        let (token, _) = auth.issue("jane", true, Duration::from_secs(60)).unwrap();
        let caller = auth.verify(&token).await.unwrap();
        assert_eq!(
            caller,
            Caller {
                user: "jane".into(),
                admin: true
            }
        );

        // Same key after a restart.
        let again = super::tests::auth(dir.path());
        assert_eq!(again.verify(&token).await.unwrap().user, "jane");

        // Jane's header and claims with the signature of John's token.
        let (john, _) = auth.issue("john", false, Duration::from_secs(60)).unwrap();
        let spliced = format!(
            "{}.{}",
            token.rsplit_once('.').unwrap().0,
            john.rsplit_once('.').unwrap().1
        );
        let err = auth.verify(&spliced).await.unwrap_err();
        assert!(err.to_string().contains("signature"), "{err}");

        let now = jsonwebtoken::get_current_timestamp();
        let expired = auth
            .own
            .sign(&json!({"sub": "jane", "iss": "svcd", "aud": "svc-nextgen", "exp": now - 120}))
            .unwrap();
        let err = auth.verify(&expired).await.unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");

        // A daemon configured for another audience (its own cache: none of the above).
        let mut strict = super::tests::auth(dir.path());
        strict.config.audience = "other".into();
        let err = strict.verify(&token).await.unwrap_err();
        assert!(err.to_string().contains("audience"), "{err}");
        assert!(strict.verify("not a token").await.is_err());
    }

    const NAMES: &[&str] = &[
        "jane", "*", "-jane", "global", "Global", "a:b", "", " ", "j\u{0}",
    ];

    /// Claims a token may carry: our issuer and audience or others, any expiry and any name.
    fn hostile_claims() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let text = || crate::hostile::text(NAMES, &[":", " ", "*", "-"]);
        (
            prop_oneof![
                Just(json!("svcd")),
                text().prop_map(Value::from),
                Just(Value::Null)
            ],
            prop_oneof![Just(json!("svc-nextgen")), text().prop_map(Value::from)],
            prop_oneof![
                Just(json!(jsonwebtoken::get_current_timestamp() + 600)),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(
                    |f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
                ),
                text().prop_map(Value::from),
            ],
            prop_oneof![Just(Value::Null), any::<i64>().prop_map(Value::from)],
            proptest::sample::select(&["sub", "preferred_username", "uid", "name"][..]),
            prop_oneof![
                text().prop_map(Value::from),
                any::<i64>().prop_map(Value::from)
            ],
            prop_oneof![
                Just(json!(["admin"])),
                Just(json!("admin")),
                Just(Value::Null)
            ],
        )
            .prop_map(|(iss, aud, exp, nbf, name_claim, name, roles)| {
                json!({"iss": iss, "aud": aud, "exp": exp, "nbf": nbf,
                       name_claim: name, "roles": roles})
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Tokens signed with our own key but hostile claims verify only to a usable name;
        /// anything else is refused with a reason, never a panic.
        #[test]
        fn hostile_claims_verify_to_a_usable_name_or_a_reason(claims in hostile_claims()) {
            let dir = tempfile::tempdir().unwrap();
            let auth = auth(dir.path());
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let token = auth.own.sign(&claims).unwrap();
            match runtime.block_on(auth.verify(&token)) {
                Ok(caller) => {
                    proptest::prop_assert!(check_user_name(&caller.user).is_ok());
                    proptest::prop_assert_eq!(claims["iss"].as_str(), Some("svcd"));
                }
                Err(e) => proptest::prop_assert_eq!(e.kind(), crate::ErrorKind::Unauthenticated),
            }
            // The same header and claims under any other signature are refused.
            let (unsigned, _) = token.rsplit_once('.').unwrap();
            for signature in ["", "AAAA", "e30", "\u{e9}"] {
                let forged = format!("{unsigned}.{signature}");
                proptest::prop_assert!(runtime.block_on(auth.verify(&forged)).is_err());
            }
        }

        #[test]
        fn any_text_as_a_token_is_refused(
            text in crate::hostile::text(&["a.b.c", "eyJhbGciOiJub25lIn0.e30.", "..", "."], &[".", "=", "-", "_"]),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let auth = auth(dir.path());
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let err = runtime.block_on(auth.verify(&text)).unwrap_err();
            proptest::prop_assert_eq!(err.kind(), crate::ErrorKind::Unauthenticated);
        }
    }
}
