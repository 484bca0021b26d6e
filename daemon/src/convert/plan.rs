//! The chunk plan of a store: how long a chunk is along each dimension, from the request's
//! `access_pattern`, `chunk_size` (MiB) and `map_primary_chunksize`. It is the reference
//! service's algorithm, so a store chunks as users of that service expect:
//!
//! - The primary axis is `time`, else `step`, else none.
//! - Data variables are grouped by their exact dimensions; a group's chunk estimate is the
//!   product of its dimensions' chunk lengths times its largest item size. The plan's "worst"
//!   is the largest estimate.
//! - Every dimension starts at 1; with `map` the primary axis starts at
//!   `map_primary_chunksize` (clamped to its length) and never grows.
//! - Dimensions grow in priority order: with `map`, the spatial names
//!   (`y, x, lat, lon, latitude, longitude, rlon, rlat, long, X, Y`) first, then the other
//!   dimensions in dataset order; with `time_series`, the primary axis first, then the others
//!   in dataset order. A dimension no data variable uses does not grow.
//! - A dimension doubles (capped at its length) until the worst estimate reaches the target.
//!   When one doubling jumps from below the target to more than 1.25 times it, the dimension
//!   goes back to half of that step and stops. Once the target is reached no further
//!   dimension grows.
//!
//! Coordinates (a variable named like its only dimension) are one chunk each, whatever the
//! plan, as the reference serves them.

use crate::stores::request::{AccessPattern, Chunking};

/// Spatial dimension names, in the order they grow with [`AccessPattern::Map`].
const SPATIAL: [&str; 11] = [
    "y",
    "x",
    "lat",
    "lon",
    "latitude",
    "longitude",
    "rlon",
    "rlat",
    "long",
    "X",
    "Y",
];

/// A worst estimate may overshoot the target by this factor before a step is taken back.
const OVERSHOOT: f64 = 1.25;

/// A dimension of a dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dim {
    /// Its name.
    pub(crate) name: String,
    /// Its length.
    pub(crate) len: u64,
}

/// What the plan needs to know of a data variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DataVar {
    /// Indexes into the dataset's dimensions, in the variable's order.
    pub(crate) dims: Vec<usize>,
    /// Bytes per element.
    pub(crate) item_size: u64,
}

/// The chunk estimate of every group of data variables, and the largest (the plan's worst),
/// kept up to date as dimensions grow: a group's estimate is looked at again only when one
/// of its dimensions changes, so a plan costs little more than its steps however many
/// variables and dimensions a file has (a file may have a hundred thousand of each).
struct Estimates<'g> {
    /// Each group's dimensions (with repeats) and item size.
    groups: &'g [(Vec<usize>, u64)],
    /// The groups each dimension is in.
    groups_of: Vec<Vec<usize>>,
    /// Each group's estimate.
    estimate: Vec<u64>,
    /// How many groups have each estimate.
    counts: std::collections::BTreeMap<u64, usize>,
}

impl<'g> Estimates<'g> {
    fn new(groups: &'g [(Vec<usize>, u64)], dims: usize, chunks: &[u64]) -> Self {
        let mut groups_of = vec![Vec::new(); dims];
        for (g, (group, _)) in groups.iter().enumerate() {
            for &d in group {
                if groups_of[d].last() != Some(&g) {
                    groups_of[d].push(g);
                }
            }
        }
        let mut estimates = Estimates {
            groups,
            groups_of,
            estimate: vec![0; groups.len()],
            counts: std::collections::BTreeMap::new(),
        };
        *estimates.counts.entry(0).or_default() += groups.len();
        for g in 0..groups.len() {
            estimates.update(g, chunks);
        }
        estimates
    }

    /// Whether a data variable runs along dimension `d`.
    fn used(&self, d: usize) -> bool {
        !self.groups_of[d].is_empty()
    }

    /// The largest estimate.
    fn worst(&self) -> u64 {
        self.counts.last_key_value().map_or(0, |(&worst, _)| worst)
    }

    /// Estimates again the groups dimension `d` is in, its chunk length changed.
    fn changed(&mut self, d: usize, chunks: &[u64]) {
        for at in 0..self.groups_of[d].len() {
            self.update(self.groups_of[d][at], chunks);
        }
    }

    fn update(&mut self, g: usize, chunks: &[u64]) {
        let (group, size) = &self.groups[g];
        let estimate = group
            .iter()
            .fold(*size, |bytes, &d| bytes.saturating_mul(chunks[d]));
        let old = std::mem::replace(&mut self.estimate[g], estimate);
        if let Some(count) = self.counts.get_mut(&old) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&old);
            }
        }
        *self.counts.entry(estimate).or_default() += 1;
    }
}

/// The chunk size a plan aims at, in bytes.
fn target_bytes(chunking: &Chunking) -> u64 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "at most 512 MiB"
    )]
    let target = (chunking.chunk_size_mib * 1024.0 * 1024.0) as u64;
    target
}

/// The primary axis (`time`, else `step`) and the chunk lengths a plan starts from: 1, and
/// the primary axis pinned at `map_primary_chunksize` with `map`.
fn start(dims: &[Dim], chunking: &Chunking) -> (Option<usize>, Vec<u64>) {
    let primary = ["time", "step"]
        .iter()
        .find_map(|name| dims.iter().position(|d| d.name == *name));
    let mut chunks = vec![1; dims.len()];
    if chunking.access_pattern == AccessPattern::Map
        && let Some(p) = primary
    {
        chunks[p] = u64::from(chunking.map_primary_chunksize).clamp(1, dims[p].len.max(1));
    }
    (primary, chunks)
}

/// Chunk lengths per dimension of a dataset, in the dataset's dimension order.
pub(crate) fn plan(dims: &[Dim], vars: &[DataVar], chunking: &Chunking) -> Vec<u64> {
    let target = target_bytes(chunking);
    let mut groups: Vec<(Vec<usize>, u64)> = Vec::new();
    let mut group_of: std::collections::HashMap<&[usize], usize> = std::collections::HashMap::new();
    for var in vars {
        match group_of.get(var.dims.as_slice()) {
            Some(&g) => groups[g].1 = groups[g].1.max(var.item_size),
            None => {
                group_of.insert(&var.dims, groups.len());
                groups.push((var.dims.clone(), var.item_size));
            }
        }
    }
    let (primary, mut chunks) = start(dims, chunking);
    let map = chunking.access_pattern == AccessPattern::Map;
    let mut order: Vec<usize> = Vec::with_capacity(dims.len());
    let mut ordered = vec![false; dims.len()];
    let mut put = |d: usize, order: &mut Vec<usize>| {
        if !ordered[d] {
            ordered[d] = true;
            order.push(d);
        }
    };
    if map {
        for name in SPATIAL {
            if let Some(d) = dims.iter().position(|dim| dim.name == name)
                && Some(d) != primary
            {
                put(d, &mut order);
            }
        }
    } else if let Some(p) = primary {
        put(p, &mut order);
    }
    for d in 0..dims.len() {
        let pinned = map && Some(d) == primary;
        if !pinned {
            put(d, &mut order);
        }
    }
    let mut estimates = Estimates::new(&groups, dims.len(), &chunks);
    #[expect(clippy::cast_precision_loss, reason = "a ratio of byte counts")]
    let overshoots = |bytes: u64| bytes as f64 > OVERSHOOT * target as f64;
    for d in order {
        if !estimates.used(d) {
            continue;
        }
        while chunks[d] < dims[d].len {
            let before = estimates.worst();
            let grown = chunks[d].saturating_mul(2).min(dims[d].len);
            if grown == chunks[d] {
                break;
            }
            chunks[d] = grown;
            estimates.changed(d, &chunks);
            let after = estimates.worst();
            if overshoots(after) && before < target {
                chunks[d] = (grown / 2).clamp(1, dims[d].len);
                estimates.changed(d, &chunks);
                break;
            }
            if after >= target {
                break;
            }
        }
        if estimates.worst() >= target {
            break;
        }
    }
    for (chunk, dim) in chunks.iter_mut().zip(dims) {
        *chunk = (*chunk).clamp(1, dim.len.max(1));
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(list: &[(&str, u64)]) -> Vec<Dim> {
        list.iter()
            .map(|(name, len)| Dim {
                name: (*name).to_string(),
                len: *len,
            })
            .collect()
    }

    fn chunking(access_pattern: AccessPattern, primary: u32) -> Chunking {
        Chunking {
            access_pattern,
            map_primary_chunksize: primary,
            chunk_size_mib: 16.0,
        }
    }

    fn f4(dims: &[usize]) -> DataVar {
        DataVar {
            dims: dims.to_vec(),
            item_size: 4,
        }
    }

    /// The reference's worked examples (16 MiB).
    #[test]
    fn the_reference_examples() {
        let tas = dims(&[("time", 3650), ("lat", 192), ("lon", 384)]);
        let vars = [f4(&[0, 1, 2])];
        assert_eq!(
            plan(&tas, &vars, &chunking(AccessPattern::Map, 1)),
            [1, 192, 384]
        );
        assert_eq!(
            plan(&tas, &vars, &chunking(AccessPattern::Map, 24)),
            [24, 192, 384]
        );
        assert_eq!(
            plan(&tas, &vars, &chunking(AccessPattern::TimeSeries, 1)),
            [3650, 192, 4],
            "lon overshoots at 8 and goes back to 4"
        );
        let era5 = dims(&[("valid_time", 8760), ("latitude", 721), ("longitude", 1440)]);
        assert_eq!(
            plan(&era5, &vars, &chunking(AccessPattern::Map, 1)),
            [4, 721, 1440],
            "no primary axis: valid_time grows last"
        );
        assert_eq!(
            plan(&era5, &vars, &chunking(AccessPattern::TimeSeries, 1)),
            [8760, 512, 1]
        );
    }

    #[test]
    fn bounds_and_unused_dimensions() {
        // time_bnds uses bnds; a dimension no data variable uses stays at 1.
        let ds = dims(&[
            ("time", 100),
            ("bnds", 2),
            ("lat", 10),
            ("lon", 20),
            ("spare", 7),
        ]);
        let vars = [f4(&[0, 2, 3]), f4(&[0, 1])];
        let chunks = plan(&ds, &vars, &chunking(AccessPattern::Map, 1));
        assert_eq!(chunks, [1, 2, 10, 20, 1]);
    }

    #[test]
    fn degenerate_datasets_plan_without_panicking() {
        assert!(plan(&[], &[], &chunking(AccessPattern::Map, 1)).is_empty());
        let empty = dims(&[("time", 0), ("lat", 3)]);
        assert_eq!(
            plan(&empty, &[f4(&[0, 1])], &chunking(AccessPattern::Map, 5)),
            [1, 3]
        );
        let huge = dims(&[("time", u64::MAX), ("lat", u64::MAX)]);
        let chunks = plan(
            &huge,
            &[f4(&[0, 1])],
            &chunking(AccessPattern::TimeSeries, 1),
        );
        assert_eq!(chunks.len(), 2);
        let primary = plan(&huge, &[f4(&[0, 1])], &chunking(AccessPattern::Map, 1024));
        assert_eq!(primary[0], 1024);
    }

    /// The plan as first written: every estimate recomputed at every step (quadratic in
    /// the variables), the oracle of the kept estimates.
    fn plan_by_rescanning(dims: &[Dim], vars: &[DataVar], chunking: &Chunking) -> Vec<u64> {
        let target = target_bytes(chunking);
        let mut groups: Vec<(Vec<usize>, u64)> = Vec::new();
        for var in vars {
            match groups.iter_mut().find(|(dims, _)| *dims == var.dims) {
                Some((_, size)) => *size = (*size).max(var.item_size),
                None => groups.push((var.dims.clone(), var.item_size)),
            }
        }
        let worst = |chunks: &[u64]| -> u64 {
            groups
                .iter()
                .map(|(dims, size)| {
                    dims.iter()
                        .fold(*size, |bytes, &d| bytes.saturating_mul(chunks[d]))
                })
                .max()
                .unwrap_or(0)
        };
        let (primary, mut chunks) = start(dims, chunking);
        let map = chunking.access_pattern == AccessPattern::Map;
        let mut order: Vec<usize> = Vec::new();
        if map {
            for name in SPATIAL {
                if let Some(d) = dims.iter().position(|dim| dim.name == name)
                    && Some(d) != primary
                {
                    order.push(d);
                }
            }
        } else if let Some(p) = primary {
            order.push(p);
        }
        for d in 0..dims.len() {
            let pinned = map && Some(d) == primary;
            if !pinned && !order.contains(&d) {
                order.push(d);
            }
        }
        let used = |d: usize| groups.iter().any(|(group, _)| group.contains(&d));
        #[expect(clippy::cast_precision_loss, reason = "a ratio of byte counts")]
        let overshoots = |bytes: u64| bytes as f64 > OVERSHOOT * target as f64;
        for d in order {
            if !used(d) {
                continue;
            }
            while chunks[d] < dims[d].len {
                let before = worst(&chunks);
                let grown = chunks[d].saturating_mul(2).min(dims[d].len);
                if grown == chunks[d] {
                    break;
                }
                chunks[d] = grown;
                let after = worst(&chunks);
                if overshoots(after) && before < target {
                    chunks[d] = (grown / 2).clamp(1, dims[d].len);
                    break;
                }
                if after >= target {
                    break;
                }
            }
            if worst(&chunks) >= target {
                break;
            }
        }
        for (chunk, dim) in chunks.iter_mut().zip(dims) {
            *chunk = (*chunk).clamp(1, dim.len.max(1));
        }
        chunks
    }

    proptest::proptest! {
        #[test]
        fn kept_estimates_plan_as_rescanning_does(
            lens in proptest::collection::vec(0u64..5000, 1..7),
            names in proptest::collection::vec(0usize..8, 7),
            vars in proptest::collection::vec(
                (proptest::collection::vec(0usize..7, 0..5), 0usize..4),
                0..8,
            ),
            time_series in proptest::bool::ANY,
            primary in 1u32..64,
            mib in 1u32..64,
        ) {
            const NAMES: [&str; 8] = ["time", "step", "lat", "lon", "x", "depth", "y", "bnds"];
            let dims: Vec<Dim> = lens
                .iter()
                .enumerate()
                .map(|(n, &len)| Dim { name: NAMES[names[n]].to_string(), len })
                .collect();
            let vars: Vec<DataVar> = vars
                .into_iter()
                .map(|(on, size)| DataVar {
                    dims: on.into_iter().map(|d| d % dims.len()).collect(),
                    item_size: [1, 2, 4, 8][size],
                })
                .collect();
            let chunking = Chunking {
                access_pattern: if time_series {
                    AccessPattern::TimeSeries
                } else {
                    AccessPattern::Map
                },
                map_primary_chunksize: primary,
                chunk_size_mib: f64::from(mib) / 16.0,
            };
            proptest::prop_assert_eq!(
                plan(&dims, &vars, &chunking),
                plan_by_rescanning(&dims, &vars, &chunking)
            );
        }
    }
}
