//! Where manifests live: a separate object store, one `manifest.json` per scope at a key
//! mirroring the data path, written with conditional puts.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use tracing::warn;

use crate::error::{Error, Result};
use crate::model::Manifest;
use crate::schema::parse;

/// The fixed file name of every manifest.
pub const MANIFEST_NAME: &str = "manifest.json";

/// How many manifests [`ManifestStore::load_all`] reads at once.
const READ_CONCURRENCY: usize = 16;

/// A manifest as read, with the etag to make the next write conditional on.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The parsed manifest.
    pub manifest: Manifest,
    /// The object's etag, verbatim (quotes included where the backend returns them).
    pub etag: Option<String>,
}

/// The condition a write is made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Create only if no manifest exists yet (the first partition of a scope).
    Create,
    /// Replace only if the stored manifest still has this etag. Backends without
    /// conditional updates (the local filesystem) overwrite instead, with a warning.
    IfMatch(Option<String>),
}

/// What a conditional write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written; the new etag if the backend returned one.
    Yes(Option<String>),
    /// Another writer got there first; nothing was written.
    Conflict,
}

/// Manifests in an object store, at `[<prefix>/]<scope stripped of slashes>/manifest.json`.
///
/// ```
/// use std::sync::Arc;
/// let store = svc_manifests::ManifestStore::new(Arc::new(object_store::memory::InMemory::new()), "blobmap");
/// assert_eq!(store.key("/cordex/a.zarr/").as_ref(), "blobmap/cordex/a.zarr/manifest.json");
/// ```
#[derive(Debug, Clone)]
pub struct ManifestStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

impl ManifestStore {
    /// Manifests in `store` under `prefix` (slashes stripped; empty for the store root).
    #[must_use]
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            store,
            prefix: prefix.trim_matches('/').to_owned(),
        }
    }

    /// The underlying store.
    #[must_use]
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key of a scope's manifest.
    #[must_use]
    pub fn key(&self, scope: &str) -> Path {
        let parts = [self.prefix.as_str(), scope.trim_matches('/'), MANIFEST_NAME];
        let joined: Vec<&str> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        let joined = joined.join("/");
        Path::parse(&joined).unwrap_or_else(|_| Path::from(joined.as_str()))
    }

    /// Reads a scope's manifest, or `None` when there is none.
    ///
    /// # Errors
    /// Store errors; [`Error::StoredManifest`] when the object is not a valid manifest.
    pub async fn read(&self, scope: &str) -> Result<Option<Stored>> {
        let key = self.key(scope);
        let result = match self.store.get(&key).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let etag = result.meta.e_tag.clone();
        let bytes = result.bytes().await?;
        let manifest = parse(&bytes).map_err(|e| Error::StoredManifest {
            key: key.to_string(),
            source: Box::new(e),
        })?;
        Ok(Some(Stored { manifest, etag }))
    }

    /// The scopes that have a manifest, from their keys.
    ///
    /// # Errors
    /// Store errors.
    pub async fn scopes(&self) -> Result<Vec<String>> {
        let base = (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()));
        let skip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        let mut scopes = Vec::new();
        let mut listing = self.store.list(base.as_ref());
        while let Some(meta) = listing.try_next().await? {
            let key = meta.location.as_ref();
            if meta.location.filename() != Some(MANIFEST_NAME) {
                continue;
            }
            let scope = &key[skip.min(key.len())..key.len() - MANIFEST_NAME.len()];
            scopes.push(scope.trim_matches('/').to_owned());
        }
        Ok(scopes)
    }

    /// Every manifest in the store, parents before the scopes below them
    /// ([`sort_parents_first`]), whatever order the store lists them in. One whose declared
    /// scope does not match its location is skipped with a warning: it would otherwise claim
    /// keys it has no business claiming.
    ///
    /// # Errors
    /// Store errors; an invalid manifest fails the whole load, so that a resolver keeps the
    /// definitions it has rather than silently dropping a scope.
    pub async fn load_all(&self) -> Result<Vec<Manifest>> {
        let scopes = self.scopes().await?;
        // Built up front rather than mapped inside the stream, which keeps the future `Send`
        // (a closure in the stream would need to be general over lifetimes).
        let pending: Vec<_> = scopes.iter().map(|s| self.read(s)).collect();
        let reads = futures::stream::iter(pending)
            .buffered(READ_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        let mut out = Vec::with_capacity(reads.len());
        for (scope, stored) in scopes.iter().zip(reads) {
            let Some(stored) = stored else { continue };
            if stored.manifest.scope.trim_matches('/') != scope {
                warn!(
                    location = %scope,
                    declared = %stored.manifest.scope,
                    "manifest declares a different scope than its location; ignored"
                );
                continue;
            }
            out.push(stored.manifest);
        }
        sort_parents_first(&mut out);
        Ok(out)
    }

    /// Validates and writes a manifest under a condition.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the manifest breaks a rule; store errors other than a failed
    /// condition (which is [`Written::Conflict`]).
    pub async fn write(&self, manifest: &Manifest, mode: WriteMode) -> Result<Written> {
        manifest.validate()?;
        let key = self.key(&manifest.scope);
        let body = PutPayload::from(manifest.to_json().into_bytes());
        let put_mode = match &mode {
            WriteMode::Create => PutMode::Create,
            WriteMode::IfMatch(None) => PutMode::Overwrite,
            WriteMode::IfMatch(Some(etag)) => PutMode::Update(UpdateVersion {
                e_tag: Some(etag.clone()),
                version: None,
            }),
        };
        let options = PutOptions {
            mode: put_mode,
            ..PutOptions::default()
        };
        match self.store.put_opts(&key, body.clone(), options).await {
            Ok(result) => Ok(Written::Yes(result.e_tag)),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Written::Conflict),
            Err(object_store::Error::NotImplemented { .. }) => {
                warn!(
                    store = %self.store,
                    "no conditional update on this store; concurrent writers of the same scope \
                     will last-writer-win"
                );
                let result = self.store.put(&key, body).await?;
                Ok(Written::Yes(result.e_tag))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Orders manifests parents first: by scope depth, then by scope. A [`crate::Trie`] built in
/// this order lets the deeper scope's marker win where a parent and a child mark the same
/// node (a parent's blob on `b` and the scope `b`'s own `b_root`): the more specific manifest
/// decides.
pub fn sort_parents_first(manifests: &mut [Manifest]) {
    manifests.sort_by_cached_key(|m| {
        let scope = m.scope.trim_matches('/');
        (
            scope.split('/').filter(|s| !s.is_empty()).count(),
            scope.to_owned(),
        )
    });
}

#[cfg(test)]
#[path = "store_test.rs"]
mod tests;
