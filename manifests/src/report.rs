//! What is archivable and what is not: every object of a prefix classified against the
//! manifests. Unmanaged is the column to watch: data nothing claims grows silently.

use std::collections::HashSet;

use futures::TryStreamExt;
use object_store::ObjectStore;

use crate::error::Result;
use crate::hierarchy::{Progress, scope_path};
use crate::model::Manifest;
use crate::resolve::{Resolution, Trie};

/// Byte and object counts for one prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// What was counted (`.` for everything).
    pub scope: String,
    /// Bytes a tiering policy may move.
    pub archivable_bytes: u64,
    /// Metadata, coordinates, small arrays.
    pub hot_bytes: u64,
    /// Held back by pins.
    pub pinned_bytes: u64,
    /// Claimed by nothing.
    pub unmanaged_bytes: u64,
    /// Distinct blob instances seen, as `(scope, instance id)`.
    pub blobs: HashSet<(String, String)>,
    /// Objects counted.
    pub objects: u64,
    /// Pins of all manifests.
    pub pins: u64,
    /// Pins of all manifests whose review date has passed.
    pub expired_pins: u64,
}

impl Report {
    /// All four categories together.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.archivable_bytes + self.hot_bytes + self.pinned_bytes + self.unmanaged_bytes
    }

    /// Everything no policy can move.
    #[must_use]
    pub fn held_bytes(&self) -> u64 {
        self.hot_bytes + self.pinned_bytes + self.unmanaged_bytes
    }

    /// The share tiering cannot touch, 0 to 1 (0 for an empty prefix).
    #[must_use]
    pub fn held_fraction(&self) -> f64 {
        match self.total_bytes() {
            0 => 0.0,
            total => self.held_bytes() as f64 / total as f64,
        }
    }

    /// Counts one object.
    pub fn add(&mut self, resolution: &Resolution<'_>, size: u64) {
        self.objects += 1;
        match resolution {
            Resolution::Blob { rule, n } => {
                self.archivable_bytes += size;
                self.blobs
                    .insert((rule.scope.to_string(), rule.blob.instance(*n)));
            }
            Resolution::Hot => self.hot_bytes += size,
            Resolution::Pinned => self.pinned_bytes += size,
            Resolution::Unmanaged => self.unmanaged_bytes += size,
        }
    }
}

/// Lists every object under `root` and classifies it with a trie of `manifests`. Costs a full
/// listing: run it nightly or on demand.
///
/// # Errors
/// Store errors.
pub async fn report(
    data: &dyn ObjectStore,
    manifests: &[Manifest],
    root: &str,
    now: &str,
    progress: Option<Progress<'_>>,
) -> Result<Report> {
    let trie = Trie::from_manifests(manifests);
    let root = root.trim_matches('/');
    let mut out = Report {
        scope: if root.is_empty() {
            ".".into()
        } else {
            root.to_owned()
        },
        ..Report::default()
    };
    for manifest in manifests {
        out.pins += manifest.pinned.len() as u64;
        out.expired_pins += manifest.pinned.iter().filter(|p| p.is_expired(now)).count() as u64;
    }
    let mut listing = data.list(scope_path(root).as_ref());
    while let Some(meta) = listing.try_next().await? {
        out.add(&trie.lookup(meta.location.as_ref()), meta.size);
        if let Some(report) = progress
            && out.objects.is_multiple_of(1000)
        {
            report(out.objects);
        }
    }
    Ok(out)
}

/// The top-level child prefixes of `root` (one delimited LIST), for one report each.
///
/// # Errors
/// Store errors.
pub async fn child_prefixes(data: &dyn ObjectStore, root: &str) -> Result<Vec<String>> {
    let listing = data.list_with_delimiter(scope_path(root).as_ref()).await?;
    Ok(listing
        .common_prefixes
        .iter()
        .map(|p| p.as_ref().trim_matches('/').to_owned())
        .collect())
}

#[cfg(test)]
#[path = "report_test.rs"]
mod tests;
