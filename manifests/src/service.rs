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

/// Policy fields given for a run (the CLI's `--t-max` and friends).
///
/// As in the reference CLI, giving any of them builds a new policy: the given fields over the
/// *defaults*, not over the previous manifest's policy. With none given, an additive run
/// inherits the previous manifest's policy and a recompute uses the defaults. Cuts are
/// frozen, so a policy change affects only arrays that no carried blob claims.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyFlags {
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

impl PolicyFlags {
    /// The policy these flags make: `None` when no field is set, else the defaults with the
    /// set fields replaced.
    #[must_use]
    pub fn policy(&self) -> Option<Policy> {
        if *self == Self::default() {
            return None;
        }
        let base = Policy::default();
        Some(Policy {
            t_max_bytes: self.t_max_bytes.unwrap_or(base.t_max_bytes),
            t_min_bytes: self.t_min_bytes.unwrap_or(base.t_min_bytes),
            t_hot_bytes: self.t_hot_bytes.unwrap_or(base.t_hot_bytes),
            width_clamp: self.width_clamp.unwrap_or(base.width_clamp),
            pow2_floor: self.pow2_floor.unwrap_or(base.pow2_floor),
        })
    }
}

/// Knobs of [`partition_store`].
#[derive(Debug, Clone)]
pub struct PartitionOptions {
    /// The policy fields given for this run.
    pub policy: PolicyFlags,
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
            policy: PolicyFlags::default(),
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
/// alone changes nothing, as cuts are frozen). [`Mode::Recompute`] keeps the pins and the
/// epoch sequence (it never moves backwards), takes the policy from the flags or the
/// defaults (see [`PolicyFlags`]), and logs what it orphaned. The
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
    let mut manifest = partition(
        scope,
        &arrays,
        options.policy.policy(),
        previous,
        options.mode,
    )?;
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
