//! Pins: prefixes kept hot on purpose, added and removed deliberately, reported worst first.

use crate::error::{Error, Result};
use crate::model::{Manifest, Pin, now};
use crate::store::{ManifestStore, WriteMode, Written};

/// One pin with the scope of its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinRecord {
    /// The manifest scope.
    pub scope: String,
    /// The pin.
    pub pin: Pin,
}

impl PinRecord {
    /// `<scope>/<prefix>` without a trailing slash.
    #[must_use]
    pub fn location(&self) -> String {
        format!("{}/{}", self.scope, self.pin.prefix)
            .trim_end_matches('/')
            .to_owned()
    }
}

/// What to record for a new pin.
#[derive(Debug, Clone, Default)]
pub struct NewPin {
    /// Why; must not be blank.
    pub reason: String,
    /// Who sets it.
    pub by: String,
    /// Review date (ISO 8601 UTC), or `None` for open-ended.
    pub until: Option<String>,
}

/// Pins `prefix` (slashes stripped) in `scope`'s manifest and writes it with epoch + 1.
///
/// # Errors
/// [`Error::NotPartitioned`] without a manifest, [`Error::AlreadyPinned`], [`Error::Invalid`]
/// for a blank reason, [`Error::ManifestChanged`] when another writer got in between, store
/// errors.
pub async fn add(
    store: &ManifestStore,
    scope: &str,
    prefix: &str,
    pin: NewPin,
) -> Result<Manifest> {
    let stored = read(store, scope).await?;
    let prefix = prefix.trim_matches('/');
    if stored.manifest.pinned.iter().any(|p| p.prefix == prefix) {
        return Err(Error::AlreadyPinned {
            scope: scope.to_owned(),
            prefix: prefix.to_owned(),
        });
    }
    let mut updated = stored.manifest.bumped();
    updated.pinned.push(Pin {
        prefix: prefix.to_owned(),
        reason: pin.reason,
        by: pin.by,
        at: now(),
        until: pin.until,
    });
    write(store, &updated, stored.etag).await?;
    Ok(updated)
}

/// Removes the pin on `prefix` (slashes stripped) and writes the manifest with epoch + 1.
/// Nothing is archived by this; the prefix only becomes eligible again.
///
/// # Errors
/// [`Error::NotPartitioned`], [`Error::NotPinned`], store errors.
pub async fn remove(store: &ManifestStore, scope: &str, prefix: &str) -> Result<Manifest> {
    let stored = read(store, scope).await?;
    let prefix = prefix.trim_matches('/');
    let mut updated = stored.manifest.bumped();
    updated.pinned.retain(|p| p.prefix != prefix);
    if updated.pinned.len() == stored.manifest.pinned.len() {
        return Err(Error::NotPinned {
            scope: scope.to_owned(),
            prefix: prefix.to_owned(),
        });
    }
    write(store, &updated, stored.etag).await?;
    Ok(updated)
}

/// Pins of every manifest, or of one scope (none when it has no manifest), worst first:
/// expired ones by review date, then open-ended ones by scope, then the rest by review date.
/// The first two groups are how a hot pool quietly fills.
///
/// # Errors
/// Store errors and invalid manifests.
pub async fn show(
    store: &ManifestStore,
    scope: Option<&str>,
    expired_only: bool,
    now: &str,
) -> Result<Vec<PinRecord>> {
    let sources = match scope {
        None => store.load_all().await?,
        Some(scope) => store
            .read(scope)
            .await?
            .map(|s| s.manifest)
            .into_iter()
            .collect(),
    };
    let mut records: Vec<PinRecord> = sources
        .into_iter()
        .flat_map(|m| {
            let scope = m.scope;
            m.pinned.into_iter().map(move |pin| PinRecord {
                scope: scope.clone(),
                pin,
            })
        })
        .filter(|r| !expired_only || r.pin.is_expired(now))
        .collect();
    records.sort_by_cached_key(|r| rank(r, now));
    Ok(records)
}

fn rank(record: &PinRecord, now: &str) -> (u8, String) {
    match &record.pin.until {
        Some(until) if record.pin.is_expired(now) => (0, until.clone()),
        None => (1, record.scope.clone()),
        Some(until) => (2, until.clone()),
    }
}

async fn read(store: &ManifestStore, scope: &str) -> Result<crate::store::Stored> {
    store
        .read(scope)
        .await?
        .ok_or_else(|| Error::NotPartitioned {
            scope: scope.to_owned(),
        })
}

async fn write(store: &ManifestStore, manifest: &Manifest, etag: Option<String>) -> Result<()> {
    match store.write(manifest, WriteMode::IfMatch(etag)).await? {
        Written::Yes(_) => Ok(()),
        Written::Conflict => Err(Error::ManifestChanged {
            scope: manifest.scope.clone(),
        }),
    }
}

#[cfg(test)]
#[path = "pins_test.rs"]
mod tests;
