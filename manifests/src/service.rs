//! The partition step for one scope: read the manifest, read the arrays, cut, diff, and
//! write conditionally.

use object_store::ObjectStore;
use tracing::warn;

use crate::array::Array;
use crate::diff::Diff;
use crate::error::{Error, Result};
use crate::hierarchy::{Progress, read_arrays};
use crate::model::{Manifest, Policy};
use crate::partition::{Mode, partition};
use crate::store::{ManifestStore, WriteMode, Written};

/// Policy fields to change; each one set overrides only that field of the inherited policy
/// (the previous manifest's, else the defaults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyOverrides {
    /// New `t_max_bytes`.
    pub t_max_bytes: Option<u64>,
    /// New `t_min_bytes`.
    pub t_min_bytes: Option<u64>,
    /// New `t_hot_bytes`.
    pub t_hot_bytes: Option<u64>,
    /// New `width_clamp`.
    pub width_clamp: Option<u64>,
    /// New `pow2_floor`.
    pub pow2_floor: Option<u64>,
}

impl PolicyOverrides {
    /// Whether any field is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `base` with the set fields replaced.
    #[must_use]
    pub fn apply(&self, base: Policy) -> Policy {
        Policy {
            t_max_bytes: self.t_max_bytes.unwrap_or(base.t_max_bytes),
            t_min_bytes: self.t_min_bytes.unwrap_or(base.t_min_bytes),
            t_hot_bytes: self.t_hot_bytes.unwrap_or(base.t_hot_bytes),
            width_clamp: self.width_clamp.unwrap_or(base.width_clamp),
            pow2_floor: self.pow2_floor.unwrap_or(base.pow2_floor),
        }
    }
}

/// Knobs of [`partition_store`].
#[derive(Debug, Clone)]
pub struct PartitionOptions {
    /// Policy changes over the inherited policy.
    pub policy: PolicyOverrides,
    /// Carry existing blobs ([`Mode::Additive`]) or recompute them ([`Mode::Recompute`]).
    pub mode: Mode,
    /// Compute and diff, but write nothing.
    pub dry_run: bool,
    /// Path segments to ignore in the data store.
    pub exclude: Vec<String>,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        Self {
            policy: PolicyOverrides::default(),
            mode: Mode::Additive,
            dry_run: false,
            exclude: crate::hierarchy::DEFAULT_EXCLUDE
                .iter()
                .map(|&s| s.to_owned())
                .collect(),
        }
    }
}

/// What [`partition_store`] decided.
#[derive(Debug, Clone)]
pub struct PartitionOutcome {
    /// The manifest now in effect (the previous one, unchanged, when nothing changed).
    pub manifest: Manifest,
    /// The blob changes against the previous manifest.
    pub diff: Diff,
    /// Whether the manifest was written.
    pub written: bool,
    /// The arrays that were read (for the decision table).
    pub arrays: Vec<Array>,
}

/// Partitions one scope and writes its manifest.
///
/// # Epochs and writes
/// The first write has epoch 1. A later run writes `epoch + 1` when the blobs or
/// `hot_always` changed, and nothing otherwise (a second run is a no-op; a policy change
/// alone changes nothing, as cuts are frozen). [`Mode::Recompute`] keeps the pins, the
/// policy and the epoch sequence (it never moves backwards), and logs what it orphaned. The
/// write is conditional (create-if-absent, then if-match on the read etag); losing the race
/// to another writer returns `written: false`.
///
/// # Errors
/// [`Error::NotAZarrStore`], [`Error::NotAdditive`] (cannot happen in additive mode; kept as
/// an assertion), invalid stored manifests and store errors.
pub async fn partition_store(
    data: &dyn ObjectStore,
    manifests: &ManifestStore,
    scope: &str,
    options: &PartitionOptions,
    progress: Option<Progress<'_>>,
) -> Result<PartitionOutcome> {
    let stored = manifests.read(scope).await?;
    let previous = stored.as_ref().map(|s| &s.manifest);
    let arrays = read_arrays(data, scope, &options.exclude, progress).await?;
    let policy = (!options.policy.is_empty()).then(|| {
        let base = previous.map(|m| m.policy).unwrap_or_default();
        options.policy.apply(base)
    });
    let mut manifest = partition(scope, &arrays, policy, previous, options.mode)?;
    let diff = Diff::between(previous, &manifest);
    if let Some(previous) = previous
        && diff.is_empty()
        && previous.hot_always == manifest.hot_always
    {
        return Ok(PartitionOutcome {
            manifest: previous.clone(),
            diff,
            written: false,
            arrays,
        });
    }
    if !diff.is_additive() {
        if options.mode == Mode::Additive {
            return Err(Error::NotAdditive {
                scope: scope.to_owned(),
                changes: diff.describe(),
            });
        }
        warn!(
            scope,
            moved = diff.modified.len(),
            dropped = diff.removed.len(),
            changes = %diff.describe(),
            "forced repartition; any tape copies held against those ids are now orphaned"
        );
    }
    if previous.is_some() {
        manifest = manifest.bumped();
    }
    if options.dry_run {
        return Ok(PartitionOutcome {
            manifest,
            diff,
            written: false,
            arrays,
        });
    }
    let mode = match &stored {
        None => WriteMode::Create,
        Some(stored) => WriteMode::IfMatch(stored.etag.clone()),
    };
    let written = match manifests.write(&manifest, mode).await? {
        Written::Yes(_) => true,
        Written::Conflict => {
            warn!(scope, "manifest changed underneath us, skipping");
            false
        }
    };
    Ok(PartitionOutcome {
        manifest,
        diff,
        written,
        arrays,
    })
}

#[cfg(test)]
#[path = "service_test.rs"]
mod tests;
