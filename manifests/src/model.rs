//! The manifest's types (schema v3) and the rules the JSON Schema cannot express.
//!
//! Reading goes through [`crate::schema::parse`]; writing through [`Manifest::to_json`].

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The only `schema_version` this crate reads and writes.
pub const SCHEMA_VERSION: u64 = 3;

/// Basenames that are metadata in every Zarr version: always hot, anywhere.
pub const METADATA_BASENAMES: [&str; 5] =
    ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// What the partitioner writes into `generated_by`.
pub const GENERATED_BY: &str = concat!("svc-manifests ", env!("CARGO_PKG_VERSION"));

const GIB: u64 = 1 << 30;

/// Blob definitions for one scope of a data store.
///
/// ```
/// let text = r#"{"schema_version": 3, "scope": "healpix/era5.zarr", "epoch": 4,
///   "hot_always": ["**/zarr.json", "time/**"],
///   "blobs": [{"id": "b_t2m", "prefixes": ["t2m"],
///              "bucket": {"index": 0, "width": 2048, "key_encoding": "v2_slash"}}]}"#;
/// let manifest = svc_manifests::parse(text.as_bytes()).unwrap();
/// assert_eq!(manifest.epoch, 4);
/// assert_eq!(manifest.policy, svc_manifests::Policy::default());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Prefix these definitions apply to, relative to the data store.
    pub scope: String,
    /// Content version, at least 1; increased whenever the definitions change.
    pub epoch: u64,
    /// ISO 8601 UTC time of the producing run (empty when absent).
    pub generated_at: String,
    /// Package and version that produced the file (empty when absent).
    pub generated_by: String,
    /// Thresholds used for this cut.
    pub policy: Policy,
    /// Patterns that are never archivable.
    pub hot_always: Vec<String>,
    /// Prefixes kept hot on purpose.
    pub pinned: Vec<Pin>,
    /// The blob definitions.
    pub blobs: Vec<Blob>,
    /// Measured numbers for debugging; never read by the resolver.
    pub provenance: serde_json::Map<String, serde_json::Value>,
}

/// Thresholds used to produce a cut.
///
/// Reading ignores keys other than these five (the schema allows any integer-valued key) and
/// gives missing keys their defaults; writing always writes exactly these five.
///
/// ```
/// let policy: svc_manifests::Policy =
///     serde_json::from_str(r#"{"t_max_bytes": 1280, "some_future_knob": 7}"#).unwrap();
/// assert_eq!(policy.t_max_bytes, 1280);
/// assert_eq!(policy.t_hot_bytes, 16 * 1024 * 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// Target upper bound for one blob. A scope at or under it becomes one blob; an array
    /// above it is bucketed. Default 100 GiB.
    pub t_max_bytes: u64,
    /// Floor for coalescing adjacent small arrays; 0 (the default) disables coalescing.
    pub t_min_bytes: u64,
    /// Arrays smaller than this stay hot. Default 16 MiB.
    pub t_hot_bytes: u64,
    /// A blob may not exceed `width_clamp * t_max_bytes` even uncompressed. Default 8.
    pub width_clamp: u64,
    /// Widths at or above this are rounded down to a power of two. Default 64.
    pub pow2_floor: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            t_max_bytes: 100 * GIB,
            t_min_bytes: 0,
            t_hot_bytes: 16 << 20,
            width_clamp: 8,
            pow2_floor: 64,
        }
    }
}

/// A prefix kept hot on purpose.
///
/// ```
/// let pin: svc_manifests::Pin = serde_json::from_str(
///     r#"{"prefix": "tas", "reason": "paper revision", "until": "2026-12-01T00:00:00+00:00"}"#,
/// ).unwrap();
/// assert!(pin.covers("tas/c/0"));
/// assert!(!pin.covers("tasmax/c/0"));
/// assert!(pin.is_expired("2027-01-01T00:00:00+00:00"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// What to keep hot, relative to the scope; empty pins the whole scope.
    pub prefix: String,
    /// Why the pin exists; never blank.
    pub reason: String,
    /// Who set it (empty when unknown).
    #[serde(default)]
    pub by: String,
    /// When it was set, ISO 8601 UTC (empty when unknown).
    #[serde(default)]
    pub at: String,
    /// Review date, ISO 8601 UTC; `None` is open-ended.
    #[serde(default)]
    pub until: Option<String>,
}

impl Pin {
    /// Whether this pin covers a scope-relative key: whole segments, and an empty prefix
    /// covers everything.
    #[must_use]
    pub fn covers(&self, key: &str) -> bool {
        covers(&self.prefix, key)
    }

    /// Whether the review date has passed.
    ///
    /// # Text comparison
    /// Dates are compared as text, as they are written (`2026-12-01T00:00:00+00:00`), so a
    /// date-only `until` counts as expired from its own day on. The CLI expands date-only
    /// input to midnight UTC before storing it.
    #[must_use]
    pub fn is_expired(&self, now: &str) -> bool {
        self.until.as_deref().is_some_and(|until| now > until)
    }
}

/// One blob definition: a rule that maps keys under its prefixes to blob instances.
///
/// ```
/// let blob: svc_manifests::Blob = serde_json::from_str(
///     r#"{"id": "b_pr_c", "prefixes": ["pr/c"], "bucket": null}"#,
/// ).unwrap();
/// assert_eq!(blob.instance(0), "b_pr_c_0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blob {
    /// Definition id, `[a-z0-9_]+`.
    pub id: String,
    /// Key prefixes claimed, relative to the scope; at least one.
    pub prefixes: Vec<String>,
    /// Cutting inside one array, or `None` for a single instance `<id>_0`.
    pub bucket: Option<Bucket>,
}

impl Blob {
    /// The instance id for bucket number `n`: `<id>_<n>`.
    #[must_use]
    pub fn instance(&self, n: u128) -> String {
        format!("{}_{n}", self.id)
    }
}

/// Arithmetic for cutting inside one array: instance `n = chunk index / width`.
///
/// ```
/// let bucket: svc_manifests::Bucket = serde_json::from_str(
///     r#"{"index": 0, "width": 2048, "key_encoding": "v3_slash"}"#,
/// ).unwrap();
/// assert_eq!(bucket.key_encoding, svc_manifests::KeyEncoding::V3Slash);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    /// Which segment after the prefix holds the chunk index (for `v2_flat`: which field).
    pub index: u64,
    /// Chunk indices per instance, at least 1.
    pub width: u64,
    /// How the index is spelled in a key.
    pub key_encoding: KeyEncoding,
}

/// How chunk keys of an array are spelled.
///
/// ```
/// use svc_manifests::KeyEncoding;
/// let all: Vec<KeyEncoding> =
///     serde_json::from_str(r#"["v3_slash", "v2_slash", "v2_flat"]"#).unwrap();
/// assert_eq!(all, [KeyEncoding::V3Slash, KeyEncoding::V2Slash, KeyEncoding::V2Flat]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeyEncoding {
    /// Zarr v3 default: `tas/c/137/0/0`; the prefix includes the `c`.
    #[serde(rename = "v3_slash")]
    V3Slash,
    /// Zarr v2 with `/` separator (or v3 with v2 keys): `tas/137/0/0`.
    #[serde(rename = "v2_slash")]
    V2Slash,
    /// Zarr v2 with `.` separator: `tas/137.0.0`; the index is a dot-separated field.
    #[serde(rename = "v2_flat")]
    V2Flat,
}

impl KeyEncoding {
    /// The name written in manifests.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V3Slash => "v3_slash",
            Self::V2Slash => "v2_slash",
            Self::V2Flat => "v2_flat",
        }
    }
}

impl std::fmt::Display for KeyEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Manifest {
    /// An empty manifest for a scope with the default `hot_always`, epoch 1.
    #[must_use]
    pub fn new(scope: impl Into<String>) -> Self {
        Self {
            scope: scope.into(),
            epoch: 1,
            generated_at: now(),
            generated_by: GENERATED_BY.to_owned(),
            policy: Policy::default(),
            hot_always: default_hot_always(),
            pinned: Vec::new(),
            blobs: Vec::new(),
            provenance: serde_json::Map::new(),
        }
    }

    /// The blob with this definition id.
    #[must_use]
    pub fn blob(&self, id: &str) -> Option<&Blob> {
        self.blobs.iter().find(|b| b.id == id)
    }

    /// A copy with the epoch increased by one and a fresh `generated_at`.
    #[must_use]
    pub fn bumped(&self) -> Self {
        Self {
            epoch: self.epoch + 1,
            generated_at: now(),
            ..self.clone()
        }
    }

    /// The first pin covering a scope-relative key.
    #[must_use]
    pub fn pin_for(&self, key: &str) -> Option<&Pin> {
        self.pinned.iter().find(|p| p.covers(key))
    }

    /// Definition ids of blobs with a prefix at or below a pin. A pin *below* a blob's prefix
    /// does not mark the blob: its other keys stay archivable.
    #[must_use]
    pub fn pinned_blob_ids(&self) -> Vec<&str> {
        self.blobs
            .iter()
            .filter(|b| {
                b.prefixes
                    .iter()
                    .any(|prefix| self.pinned.iter().any(|pin| pin.covers(prefix)))
            })
            .map(|b| b.id.as_str())
            .collect()
    }

    /// Checks the rules the JSON Schema cannot express (and the ones it can, for manifests
    /// built in memory): unique ASCII ids, at least one prefix, one prefix and a width of at
    /// least 1 for a bucketed blob, non-blank pin reasons, unique pin prefixes.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first offending field.
    pub fn validate(&self) -> Result<()> {
        if self.epoch < 1 {
            return Err(Error::invalid("epoch", "must be at least 1"));
        }
        let mut ids = std::collections::HashSet::new();
        for (i, blob) in self.blobs.iter().enumerate() {
            if !is_blob_id(&blob.id) {
                return Err(Error::invalid(
                    format!("blobs[{i}].id"),
                    format!("{:?} is not [a-z0-9_]+", blob.id),
                ));
            }
            if !ids.insert(blob.id.as_str()) {
                return Err(Error::invalid(
                    format!("blobs[{i}].id"),
                    format!("duplicate blob id {:?}", blob.id),
                ));
            }
            if blob.prefixes.is_empty() {
                return Err(Error::invalid(
                    format!("blobs[{i}].prefixes"),
                    "no prefixes",
                ));
            }
            let Some(bucket) = blob.bucket else { continue };
            if blob.prefixes.len() != 1 {
                return Err(Error::invalid(
                    format!("blobs[{i}].prefixes"),
                    format!(
                        "a bucketed blob needs exactly one prefix, got {}",
                        blob.prefixes.len()
                    ),
                ));
            }
            if bucket.width < 1 {
                return Err(Error::invalid(
                    format!("blobs[{i}].bucket.width"),
                    "must be at least 1",
                ));
            }
        }
        let mut prefixes = std::collections::HashSet::new();
        for (i, pin) in self.pinned.iter().enumerate() {
            if pin.reason.trim().is_empty() {
                return Err(Error::invalid(
                    format!("pinned[{i}].reason"),
                    format!(
                        "pin on {:?} has no reason; a pin nobody can explain is one nobody \
                         removes",
                        pin.prefix
                    ),
                ));
            }
            if !prefixes.insert(pin.prefix.as_str()) {
                return Err(Error::invalid(
                    format!("pinned[{i}].prefix"),
                    format!("duplicate pin on {:?}", pin.prefix),
                ));
            }
        }
        Ok(())
    }
}

/// The five metadata basename patterns every manifest starts `hot_always` with.
#[must_use]
pub fn default_hot_always() -> Vec<String> {
    METADATA_BASENAMES
        .iter()
        .map(|n| format!("**/{n}"))
        .collect()
}

/// Whether `id` matches `^[a-z0-9_]+$` (ASCII only).
#[must_use]
pub fn is_blob_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Segment-wise coverage: `prefix` is empty, equals `key`, or is an ancestor of it.
pub(crate) fn covers(prefix: &str, key: &str) -> bool {
    prefix.is_empty()
        || key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The current UTC time as the manifests write it: seconds, `+00:00` suffix.
#[must_use]
pub fn now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S+00:00")
        .to_string()
}
