//! The daemon's Ed25519 signing key, stored as a PKCS#8 PEM file readable by its owner only.
//!
//! Creation is race-free (see [`crate::secret`]): when `svcd serve` and `svcd token issue`
//! start together one key wins and both use it. A key file that others can read is refused,
//! as `ssh` refuses such a private key.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The PKCS#8 DER prefix of an Ed25519 private key (RFC 8410): the 32-byte seed follows.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

/// The daemon's token signing key.
pub(crate) struct SigningKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// Public key, base64url (the JWK `x`).
    x: String,
    kid: String,
}

impl SigningKey {
    fn from_seed(seed: [u8; 32]) -> Result<Self> {
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let mut der = PKCS8_ED25519_PREFIX.to_vec();
        der.extend_from_slice(&seed);
        let x = URL_SAFE_NO_PAD.encode(public);
        let decoding = DecodingKey::from_ed_components(&x)
            .map_err(|e| Error::Config(format!("signing key: {e}")))?;
        let digest = Sha256::digest(public);
        let kid = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Ok(SigningKey {
            encoding: EncodingKey::from_ed_der(&der),
            decoding,
            x,
            kid,
        })
    }

    /// Reads the key at `path`, creating it (and its directory, mode 0700) if absent.
    ///
    /// # Errors
    /// The file cannot be read or written, is not an Ed25519 PKCS#8 key, or others can read it.
    pub(crate) fn load_or_create(path: &Path) -> Result<Self> {
        let bytes = crate::secret::load_or_create(path, || {
            let seed: [u8; 32] = rand::random();
            let mut der = PKCS8_ED25519_PREFIX.to_vec();
            der.extend_from_slice(&seed);
            let encoded = STANDARD.encode(&der);
            format!("{PEM_BEGIN}\n{encoded}\n{PEM_END}\n").into_bytes()
        })
        .map_err(|e| match e {
            Error::Config(why) => Error::Config(format!("signing key {why}")),
            other => other,
        })?;
        let text = String::from_utf8_lossy(&bytes);
        let bad = || {
            Error::Config(format!(
                "{} is not an Ed25519 private key in PKCS#8 PEM form",
                path.display()
            ))
        };
        let body: String = text
            .lines()
            .skip_while(|l| l.trim() != PEM_BEGIN)
            .skip(1)
            .take_while(|l| l.trim() != PEM_END)
            .collect();
        let der = STANDARD.decode(body.trim()).map_err(|_| bad())?;
        let seed: [u8; 32] = der
            .strip_prefix(&PKCS8_ED25519_PREFIX[..])
            .and_then(|s| s.try_into().ok())
            .ok_or_else(bad)?;
        Self::from_seed(seed)
    }

    /// The key id published in the JWKS and set in token headers.
    pub(crate) fn kid(&self) -> &str {
        &self.kid
    }

    pub(crate) fn decoding_key(&self) -> &DecodingKey {
        &self.decoding
    }

    /// The public key as a JWK.
    pub(crate) fn jwk(&self) -> Value {
        json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self.x,
            "kid": self.kid,
            "use": "sig",
            "alg": "EdDSA",
        })
    }

    /// Signs claims into a compact JWT.
    ///
    /// # Errors
    /// Signing failed (a bug: the key was validated on load).
    pub(crate) fn sign(&self, claims: &Value) -> Result<String> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding)
            .map_err(|e| Error::Config(format!("cannot sign a token: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn key_is_created_private_and_reloads_identically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth/signing-key.pem");
        let first = SigningKey::load_or_create(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let second = SigningKey::load_or_create(&path).unwrap();
        assert_eq!(first.jwk(), second.jwk());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = SigningKey::load_or_create(&path).err().unwrap();
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn garbage_is_refused_with_the_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        fs::write(&path, "hello").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = SigningKey::load_or_create(&path).err().unwrap();
        assert!(err.to_string().contains("k.pem"), "{err}");
    }
}
