//! Finding Zarr stores under a prefix with delimited LISTs, and which of them have a manifest.

use std::collections::HashSet;

use object_store::ObjectStore;

use crate::error::Result;
use crate::hierarchy::{ZarrFormat, detect_format, is_excluded, scope_path};
use crate::store::ManifestStore;

/// How deep a scan descends before giving up on a branch.
pub const DEFAULT_MAX_DEPTH: usize = 6;

/// A store found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The store prefix, relative to the data store root.
    pub scope: String,
    /// Its Zarr format.
    pub format: ZarrFormat,
    /// Whether it already has a manifest.
    pub has_manifest: bool,
}

/// Walks `root` and returns the Zarr stores under it. Descent stops at a store (a datatree
/// may hold a whole bucket, and walking into it would list every chunk to no purpose), at an
/// excluded segment, and after `max_depth` levels.
///
/// # Errors
/// Store errors.
pub async fn scan(
    data: &dyn ObjectStore,
    manifests: &ManifestStore,
    root: &str,
    max_depth: usize,
    exclude: &[String],
) -> Result<Vec<Candidate>> {
    let known: HashSet<String> = manifests.scopes().await?.into_iter().collect();
    let mut found = Vec::new();
    // Depth-first in listing order, like a recursive descent, without async recursion.
    let mut stack = vec![(root.trim_matches('/').to_owned(), max_depth)];
    while let Some((scope, depth)) = stack.pop() {
        if is_excluded(&scope, exclude) {
            continue;
        }
        if let Some(format) = detect_format(data, &scope).await? {
            found.push(Candidate {
                has_manifest: known.contains(&scope),
                scope,
                format,
            });
            continue;
        }
        if depth == 0 {
            continue;
        }
        let listing = data
            .list_with_delimiter(scope_path(&scope).as_ref())
            .await?;
        for child in listing.common_prefixes.iter().rev() {
            stack.push((child.as_ref().trim_matches('/').to_owned(), depth - 1));
        }
    }
    Ok(found)
}

#[cfg(test)]
#[path = "scan_test.rs"]
mod tests;
