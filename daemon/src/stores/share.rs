//! Pre-signed share URLs (spec 2, endpoints 4 and 5): `share/<sig>/<token>.zarr/<key>` lets
//! anyone who holds it read a store until it expires, with no token.
//!
//! `sig` is `<expires>.<mac>`: the expiry in Unix seconds and an HMAC-SHA256, base64url, over
//! the store's token, the expiry and the method (`GET`), keyed with a secret the daemon
//! creates in its data directory (mode 0600) on first start. So a link survives a restart;
//! it dies at its expiry and with its store (the store must still be readable). A forged,
//! truncated, altered or expired signature is 403.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

use crate::error::{Error, Result};

/// The one method a share URL allows.
pub const SHARE_METHOD: &str = "GET";

/// Signs and checks share URLs.
pub(crate) struct ShareKey {
    key: Vec<u8>,
}

impl ShareKey {
    /// The key in `path`, created on first use.
    ///
    /// # Errors
    /// The file cannot be read or created, or others may read it.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let key = crate::secret::load_or_create(path, || rand::random::<[u8; 32]>().to_vec())?;
        Ok(ShareKey { key })
    }

    fn mac(&self, token: Uuid, expires: i64) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(format!("{token}\n{expires}\n{SHARE_METHOD}").as_bytes());
        mac
    }

    /// The signature of a share of `token` until `expires`.
    pub(crate) fn sign(&self, token: Uuid, expires: i64) -> String {
        let tag = self.mac(token, expires).finalize().into_bytes();
        format!("{expires}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Checks a signature for `token` at `now`.
    ///
    /// # Errors
    /// [`Error::ShareDenied`] for a signature that is malformed, not ours, or expired.
    pub(crate) fn verify(&self, sig: &str, token: Uuid, now: i64) -> Result<()> {
        let denied = |reason: &'static str| Error::ShareDenied { reason };
        let (expires, tag) = sig
            .split_once('.')
            .ok_or_else(|| denied("The share link is not valid."))?;
        // As signed: digits without a sign or leading zeros, one spelling per link.
        let expires: i64 = expires
            .parse()
            .ok()
            .filter(|parsed: &i64| parsed.to_string() == expires)
            .ok_or_else(|| denied("The share link is not valid."))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| denied("The share link is not valid."))?;
        self.mac(token, expires)
            .verify_slice(&tag)
            .map_err(|_| denied("The share link is not valid."))?;
        if now >= expires {
            return Err(denied("The share link has expired."));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_unexpired_signatures_pass() {
        let dir = tempfile::tempdir().unwrap();
        let key = ShareKey::open(&dir.path().join("portal/share.key")).unwrap();
        let token = Uuid::new_v4();
        let sig = key.sign(token, 1_000);
        assert!(key.verify(&sig, token, 999).is_ok());
        let expired = key.verify(&sig, token, 1_000).unwrap_err();
        assert!(expired.to_string().contains("expired"), "{expired}");
        assert_eq!(expired.kind(), crate::ErrorKind::Forbidden);
        // Another store, a later expiry, a truncated or altered tag, garbage.
        assert!(key.verify(&sig, Uuid::new_v4(), 0).is_err());
        let (_, tag) = sig.split_once('.').unwrap();
        assert!(key.verify(&format!("2000.{tag}"), token, 0).is_err());
        // The same expiry spelled otherwise is not the link that was signed.
        for spelling in ["+1000", "01000", "1000 "] {
            let respelled = format!("{spelling}.{tag}");
            assert!(key.verify(&respelled, token, 0).is_err(), "{respelled}");
        }
        assert!(key.verify(&sig[..sig.len() - 2], token, 0).is_err());
        let mut altered = sig.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert!(
            key.verify(std::str::from_utf8(&altered).unwrap(), token, 0)
                .is_err()
        );
        for junk in ["", ".", "x.y", "1000", "-1.AAAA", "1000.!!!"] {
            assert!(key.verify(junk, token, 0).is_err(), "{junk:?}");
        }
        // Another daemon's key does not verify ours; the same file does, after a restart.
        let other = ShareKey::open(&tempfile::tempdir().unwrap().path().join("k")).unwrap();
        assert!(other.verify(&sig, token, 0).is_err());
        let again = ShareKey::open(&dir.path().join("portal/share.key")).unwrap();
        assert!(again.verify(&sig, token, 0).is_ok());
    }
}
