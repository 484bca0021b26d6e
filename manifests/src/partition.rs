//! The cut: a pure function from a scope's arrays (and the previous manifest) to a new
//! manifest. No IO; [`crate::partition_store`] wraps it with reading and writing.

use std::collections::HashSet;

use serde_json::{Value, json};
use tracing::warn;

use crate::array::Array;
use crate::error::Result;
use crate::model::{Blob, Bucket, GENERATED_BY, Manifest, Policy, covers, default_hot_always, now};

/// Whether existing blob definitions are carried into the new cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Carry every previous blob verbatim and cut only what none of them claims, so ids and
    /// the tape copies behind them survive.
    #[default]
    Additive,
    /// Recompute every blob from scratch (`--force`): the only way to move or drop a blob.
    /// Pins and epoch are still taken from the previous manifest; the policy is not (it is
    /// the one passed in, else the defaults), as in the reference's forced run.
    Recompute,
}

/// Computes the blob definitions for `scope`.
///
/// The policy is `policy`, else (in [`Mode::Additive`]) the previous manifest's, else the
/// defaults. Pins are carried
/// from `previous` unchanged and the epoch is the previous one (the caller bumps it when it
/// writes). Metadata basenames, coordinates, arrays under `t_hot_bytes` and arrays under a
/// pin go into `hot_always` and get no blob.
///
/// # Errors
/// The result breaks a manifest rule; it cannot, as ids are sanitised and made unique.
pub fn partition(
    scope: &str,
    arrays: &[Array],
    policy: Option<Policy>,
    previous: Option<&Manifest>,
    mode: Mode,
) -> Result<Manifest> {
    let inherited = match mode {
        Mode::Additive => previous.map(|m| m.policy),
        Mode::Recompute => None,
    };
    let policy = policy.or(inherited).unwrap_or_default();
    let pinned = previous.map(|m| m.pinned.clone()).unwrap_or_default();
    let mut hot_always = default_hot_always();
    let mut payload = Vec::new();
    for array in arrays {
        let small = array.is_coordinate || array.total_bytes() < policy.t_hot_bytes;
        // A newly seen array under a pin gets no blob, so that removing the pin does not
        // make it archivable the moment after.
        if small || pinned.iter().any(|pin| pin.covers(&array.path)) {
            hot_always.push(hot_pattern(&array.path));
        } else {
            payload.push(array);
        }
    }
    let carried = match (mode, previous) {
        (Mode::Additive, Some(previous)) => previous.blobs.clone(),
        _ => Vec::new(),
    };
    let unclaimed: Vec<&Array> = payload
        .into_iter()
        .filter(|a| !claimed(a, &carried))
        .collect();
    let mut taken: HashSet<String> = carried.iter().map(|b| b.id.clone()).collect();
    let fresh = carried.is_empty();
    let mut blobs = carried;
    blobs.extend(cut(&unclaimed, &policy, &mut taken, fresh));
    let manifest = Manifest {
        scope: scope.to_owned(),
        epoch: previous.map_or(1, |m| m.epoch),
        generated_at: now(),
        generated_by: GENERATED_BY.to_owned(),
        policy,
        hot_always,
        pinned,
        blobs,
        provenance: provenance(arrays),
    };
    manifest.validate()?;
    Ok(manifest)
}

/// Objects along dimension 0 per blob instance.
///
/// `ideal` hits `t_max_bytes` at today's compression; `hard` bounds the worst case if
/// compression disappears (`width_clamp * t_max_bytes` uncompressed); the smaller wins, and
/// widths at or above `pow2_floor` are rounded down to a power of two so that small drift in
/// the compression ratio does not renumber blobs.
///
/// # Dimension 0 only
/// The width counts dimension-0 chunk indices but is sized as if each index were one object.
/// When other dimensions are chunked too, one instance holds `width * prod(grid[1..])`
/// objects and exceeds the target by that factor. This is the published formula, kept so
/// that ids agree with manifests other producers wrote; chunk the other dimensions at full
/// extent (as the common layouts do) to stay on target.
#[must_use]
pub fn bucket_width(array: &Array, policy: &Policy) -> u64 {
    let avg = array.avg_object_bytes();
    let ideal = (policy.t_max_bytes / avg).max(1);
    let clamp = u128::from(policy.width_clamp) * u128::from(policy.t_max_bytes);
    let uncompressed = u128::from(array.uncompressed_object_bytes().max(1));
    let hard = u64::try_from(clamp / uncompressed)
        .unwrap_or(u64::MAX)
        .max(1);
    let mut width = ideal.min(hard).max(1);
    if width >= policy.pow2_floor {
        width = 1 << (63 - width.leading_zeros());
    }
    if width == 1 && avg > policy.t_max_bytes {
        warn!(
            array = %display_path(&array.path),
            object_gib = avg as f64 / f64::from(1u32 << 30),
            "a single object is above t_max; cannot cut finer than one object"
        );
    }
    width
}

/// The id stem for a path: ASCII letters and digits kept (lower-cased), every other
/// character becomes `_`, runs collapsed, `_` trimmed; `root` when nothing is left.
///
/// Non-ASCII letters become `_` too, so every id matches the schema's `^[a-z0-9_]+$`.
///
/// ```
/// assert_eq!(svc_manifests::ident("multiscales/zoom_9/tas/c"), "multiscales_zoom_9_tas_c");
/// assert_eq!(svc_manifests::ident("/A-b//"), "a_b");
/// assert_eq!(svc_manifests::ident("température"), "temp_rature");
/// assert_eq!(svc_manifests::ident("//"), "root");
/// ```
#[must_use]
pub fn ident(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.trim_matches('/').chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let trimmed = out.trim_matches('_');
    if trimmed.is_empty() {
        "root".to_owned()
    } else {
        trimmed.to_owned()
    }
}

fn hot_pattern(path: &str) -> String {
    if path.is_empty() {
        "**".to_owned()
    } else {
        format!("{path}/**")
    }
}

fn claimed(array: &Array, carried: &[Blob]) -> bool {
    let key = array.chunk_prefix();
    carried
        .iter()
        .flat_map(|b| &b.prefixes)
        .any(|prefix| covers(prefix, &key))
}

fn cut(arrays: &[&Array], policy: &Policy, taken: &mut HashSet<String>, fresh: bool) -> Vec<Blob> {
    if arrays.is_empty() {
        return Vec::new();
    }
    let total: u64 = arrays.iter().map(|a| a.total_bytes()).sum();
    if fresh && total <= policy.t_max_bytes {
        // The common case, and the best one for tape: a small store is read whole.
        return vec![Blob {
            id: unique("b_root", taken),
            prefixes: vec![String::new()],
            bucket: None,
        }];
    }
    let mut out = Vec::new();
    let mut small = Vec::new();
    for &array in arrays {
        if array.total_bytes() > policy.t_max_bytes {
            out.push(Blob {
                id: unique(&format!("b_{}", ident(&array.path)), taken),
                prefixes: vec![array.chunk_prefix()],
                bucket: Some(Bucket {
                    index: 0,
                    width: bucket_width(array, policy),
                    key_encoding: array.key_encoding,
                }),
            });
        } else {
            small.push(array);
        }
    }
    out.extend(coalesce(&small, policy, taken));
    out
}

/// Groups adjacent small arrays until a group reaches `t_min_bytes`; a trailing group below
/// it is folded into the last blob. With `t_min_bytes = 0` every array is its own blob.
fn coalesce(arrays: &[&Array], policy: &Policy, taken: &mut HashSet<String>) -> Vec<Blob> {
    let mut out: Vec<Blob> = Vec::new();
    let mut group: Vec<String> = Vec::new();
    let mut size = 0u64;
    for array in arrays {
        group.push(array.chunk_prefix());
        size += array.total_bytes();
        if size >= policy.t_min_bytes {
            let prefixes = std::mem::take(&mut group);
            out.push(group_blob(prefixes, taken));
            size = 0;
        }
    }
    if !group.is_empty() {
        match out.pop() {
            Some(last) => {
                taken.remove(&last.id);
                let mut prefixes = last.prefixes;
                prefixes.extend(group);
                out.push(group_blob(prefixes, taken));
            }
            None => out.push(group_blob(group, taken)),
        }
    }
    out
}

fn group_blob(prefixes: Vec<String>, taken: &mut HashSet<String>) -> Blob {
    let stem: Vec<String> = prefixes.iter().map(|p| ident(p)).collect();
    Blob {
        id: unique(&format!("b_{}", stem.join("_")), taken),
        prefixes,
        bucket: None,
    }
}

/// `stem`, or `stem_2`, `stem_3`, ... when taken. The suffix depends on allocation order, so
/// it is not stable across repartitions: hence the warning.
fn unique(stem: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = stem.to_owned();
    let mut n = 1;
    while taken.contains(&candidate) {
        n += 1;
        candidate = format!("{stem}_{n}");
    }
    if candidate != stem {
        warn!(
            id = stem,
            using = %candidate,
            "blob id collides; the suffix depends on listing order and is not stable across \
             repartitions -- check for array paths that differ only in punctuation"
        );
    }
    taken.insert(candidate.clone());
    candidate
}

fn provenance(arrays: &[Array]) -> serde_json::Map<String, Value> {
    arrays
        .iter()
        .map(|a| {
            let record = json!({
                "objects": a.nobjects(),
                "objects_seen": a.nobjects_seen,
                "stored_bytes": a.total_bytes(),
                "uncompressed_object_bytes": a.uncompressed_object_bytes(),
                "sharded": a.shards.is_some(),
                "key_encoding": a.key_encoding.as_str(),
            });
            (display_path(&a.path).to_owned(), record)
        })
        .collect()
}

/// An array path for display: `.` for the scope root.
pub(crate) fn display_path(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

#[cfg(test)]
#[path = "partition_test.rs"]
mod tests;
