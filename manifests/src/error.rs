//! The crate's error type: one enum, variants named after the domain fact that failed.

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in reading, partitioning, pinning or storing manifests.
///
/// Resolving a key never fails; a key nothing claims is [`crate::Kind::Unmanaged`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The document is not JSON.
    #[error("not valid JSON: {source}")]
    Json {
        /// The parser's error, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The document declares a `schema_version` this crate does not speak.
    #[error(
        "schema_version {found} is not supported: only version 3 is understood, and guessing \
         would misroute chunks"
    )]
    UnsupportedVersion {
        /// The declared version, as written.
        found: String,
    },
    /// The document breaks a schema or cross-field rule.
    #[error("{}{reason}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Invalid {
        /// Where, like `blobs[1].bucket.width`; empty for the document itself.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// No Zarr metadata object exists under the scope.
    #[error("{scope}: no zarr metadata found")]
    NotAZarrStore {
        /// The scope that was listed.
        scope: String,
    },
    /// A pin operation named a scope that has no manifest.
    #[error(
        "{scope} has no manifest. Partition it first; pinning an unpartitioned scope is usually \
         a mistyped scope"
    )]
    NotPartitioned {
        /// The scope as given.
        scope: String,
    },
    /// `pin add` on a prefix that is already pinned.
    #[error(
        "{scope}: {} is already pinned; remove it first to change the reason",
        show_prefix(prefix)
    )]
    AlreadyPinned {
        /// The manifest scope.
        scope: String,
        /// The pinned prefix (slashes stripped).
        prefix: String,
    },
    /// `pin remove` on a prefix that is not pinned.
    #[error("{scope}: {} is not pinned", show_prefix(prefix))]
    NotPinned {
        /// The manifest scope.
        scope: String,
        /// The prefix (slashes stripped).
        prefix: String,
    },
    /// A repartition without `force` would change or drop existing blobs.
    #[error(
        "{scope}: repartition would modify existing blobs, invalidating tape addresses\n{changes}"
    )]
    NotAdditive {
        /// The scope being partitioned.
        scope: String,
        /// The diff, described one change per line.
        changes: String,
    },
    /// Another writer changed the manifest between our read and our write.
    #[error("{scope}: manifest changed underneath us; run again")]
    ManifestChanged {
        /// The manifest scope.
        scope: String,
    },
    /// A store URL or option could not be turned into a store.
    #[error("{url}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The object store failed (unreachable, denied, missing bucket, ...).
    #[error("store: {source}")]
    Store {
        /// The backend's error.
        #[from]
        source: object_store::Error,
    },
    /// A manifest read from the manifest store is invalid.
    #[error("{key}: {source}")]
    StoredManifest {
        /// The manifest's key in the manifest store.
        key: String,
        /// Why it was refused.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Whether this error comes from the storage backend rather than from the data or the
    /// request (the CLI exits 2 for these: the store could not be reached or used).
    #[must_use]
    pub fn is_store(&self) -> bool {
        matches!(self, Self::Store { .. } | Self::BadUrl { .. })
    }

    pub(crate) fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

fn show_prefix(prefix: &str) -> &str {
    if prefix.is_empty() {
        "(whole scope)"
    } else {
        prefix
    }
}
