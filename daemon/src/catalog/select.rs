//! Evaluating a [`Query`] over the in-memory [`Index`]: AND over clauses of (OR over values),
//! minus negations, then the time and box columns.

use std::collections::HashSet;

use regex::RegexSet;
use roaring::RoaringBitmap;

use super::facet::OWNER;
use super::index::Index;
use super::query::{Clause, Field, Pattern, Query, Source};

/// The ids of all records matching `query`.
pub(crate) fn evaluate(index: &Index, query: &Query) -> RoaringBitmap {
    let mut ids = match query.source {
        Source::Catalogue => index.live() - union_of_terms(index, OWNER),
        Source::UserData => union_of_terms(index, OWNER) & index.live(),
        Source::Everything => index.live().clone(),
    };
    if !query.multi_version {
        ids &= index.latest();
    }
    for clause in &query.clauses {
        if ids.is_empty() {
            break;
        }
        apply_clause(index, clause, &mut ids);
    }
    if let Some(keys) = &query.item_keys {
        ids &= keys
            .iter()
            .filter_map(|key| index.by_item_key(*key))
            .collect::<RoaringBitmap>();
    }
    if !query.text.is_empty() && !ids.is_empty() {
        ids &= matching_text(index, &query.text);
    }
    if query.time.is_some() || query.bbox.is_some() {
        let in_time = |id: u32| match query.time {
            None => true,
            Some((range, mode)) => index
                .time(id)
                .is_some_and(|t| mode.selects(t, (range.start, range.end))),
        };
        let in_box = |id: u32| match query.bbox {
            None => true,
            Some(([min_lon, max_lon, min_lat, max_lat], mode)) => index.bbox(id).is_some_and(|b| {
                let [r_min_lon, r_min_lat, r_max_lon, r_max_lat] = b.map(f64::from);
                mode.selects((r_min_lon, r_max_lon), (min_lon, max_lon))
                    && mode.selects((r_min_lat, r_max_lat), (min_lat, max_lat))
            }),
        };
        ids = filter_columns(&ids, index.column_len(), |id| in_time(id) && in_box(id));
    }
    ids
}

/// Below this share of the columns a selection is filtered id by id; above it the columns
/// are scanned whole into a bitset, on every core, which walks memory in order and builds the
/// result container by container instead of inserting ids one at a time.
const SCAN_SHARE: usize = 16;

/// The ids of `ids` (all below `len`, the length of the columns) that `keep` accepts.
fn filter_columns(
    ids: &RoaringBitmap,
    len: usize,
    keep: impl Fn(u32) -> bool + Sync,
) -> RoaringBitmap {
    if (ids.len() as usize) * SCAN_SHARE < len {
        return ids.iter().filter(|id| keep(*id)).collect();
    }
    let mut bits = vec![0_u8; len.div_ceil(8)];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bytes_per_thread = bits.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (part, chunk) in bits.chunks_mut(bytes_per_thread).enumerate() {
            let keep = &keep;
            scope.spawn(move || {
                let first = part * bytes_per_thread * 8;
                for (offset, byte) in chunk.iter_mut().enumerate() {
                    let base = first + offset * 8;
                    for bit in 0..8.min(len.saturating_sub(base)) {
                        *byte |= u8::from(keep((base + bit) as u32)) << bit;
                    }
                }
            });
        }
    });
    RoaringBitmap::from_lsb0_bytes(0, &bits) & ids
}

fn apply_clause(index: &Index, clause: &Clause, ids: &mut RoaringBitmap) {
    if !clause.include.is_empty() {
        *ids &= matching(index, &clause.field, &clause.include, ids);
    }
    if !clause.exclude.is_empty() {
        let excluded = matching(index, &clause.field, &clause.exclude, ids);
        *ids -= excluded;
    }
}

/// Ids whose field matches any of `patterns`; `within` bounds the work for location scans.
fn matching(
    index: &Index,
    field: &Field,
    patterns: &[Pattern],
    within: &RoaringBitmap,
) -> RoaringBitmap {
    match field {
        Field::Facet(name) => patterns
            .iter()
            .map(|p| matching_terms(index, name, p))
            .fold(RoaringBitmap::new(), |acc, ids| acc | ids),
        Field::File | Field::Uri => matching_locations(index, field, patterns, within),
    }
}

fn matching_terms(index: &Index, facet: &str, pattern: &Pattern) -> RoaringBitmap {
    let Some(dictionary) = index.dictionary(facet) else {
        return RoaringBitmap::new();
    };
    if !pattern.is_wildcard() {
        return dictionary.get(&pattern.text).cloned().unwrap_or_default();
    }
    let prefix = pattern.prefix();
    let mut out = RoaringBitmap::new();
    for (term, ids) in dictionary.range(prefix.to_string()..) {
        if !term.starts_with(prefix) {
            break;
        }
        if pattern.matches(term) {
            out |= ids;
        }
    }
    out
}

/// Locations matching any of `patterns`, in one pass whatever their number: literals are
/// looked up in a set, wildcards in one compiled regex set. File paths are found in the result
/// order (sorted by path) when that visits fewer records than `within`: literals by binary
/// search, wildcards within the blocks their literal prefixes bound.
fn matching_locations(
    index: &Index,
    field: &Field,
    patterns: &[Pattern],
    within: &RoaringBitmap,
) -> RoaringBitmap {
    let literals: HashSet<&str> = patterns
        .iter()
        .filter(|p| !p.is_wildcard())
        .map(|p| p.text.as_str())
        .collect();
    let wildcards: Vec<&Pattern> = patterns.iter().filter(|p| p.is_wildcard()).collect();
    // One set for every wildcard; past the set's size limit (many long patterns), each
    // pattern's own regex in turn.
    let set = RegexSet::new(wildcards.iter().map(|pattern| {
        pattern
            .regex()
            .expect("wildcard patterns have a regex")
            .as_str()
    }))
    .ok();
    let any_wildcard = |text: &str| match &set {
        Some(set) => set.is_match(text),
        None => wildcards.iter().any(|pattern| pattern.matches(text)),
    };
    let location = |id: u32| match field {
        Field::Uri => index.uri(id),
        _ => index.path(id),
    };
    let accepts = |id: u32| {
        let text = location(id);
        literals.contains(text) || (!wildcards.is_empty() && any_wildcard(text))
    };
    if *field == Field::File {
        let mut blocks: Vec<(usize, usize)> = literals.iter().map(|l| block(index, l)).collect();
        if wildcards.iter().all(|p| !p.prefix().is_empty()) {
            blocks.extend(wildcards.iter().map(|p| block(index, p.prefix())));
        } else {
            blocks = vec![(0, index.order().len())];
        }
        blocks.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(blocks.len());
        for (start, end) in blocks {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let visited: usize = merged.iter().map(|(s, e)| e - s).sum();
        if (visited as u64) < within.len() {
            let order = index.order();
            return merged
                .into_iter()
                .flat_map(|(s, e)| order[s..e].iter().copied())
                .filter(|id| accepts(*id))
                .collect();
        }
    }
    within.iter().filter(|id| accepts(*id)).collect()
}

/// The block of the result order holding the paths that start with `prefix`: the order is
/// byte-wise descending, so they are contiguous.
fn block(index: &Index, prefix: &str) -> (usize, usize) {
    let order = index.order();
    let start = order.partition_point(|id| {
        let path = index.path(*id);
        path > prefix && !path.starts_with(prefix)
    });
    let end = order.partition_point(|id| index.path(*id) >= prefix);
    (start, end.max(start))
}

/// Ids with a facet value (other than the owner of user data) containing any of `needles`.
/// Values are indexed lower-cased, so lower-cased needles match case-insensitively.
fn matching_text(index: &Index, needles: &[String]) -> RoaringBitmap {
    let mut out = RoaringBitmap::new();
    for (facet, dictionary) in index.dictionaries() {
        if facet == OWNER {
            continue;
        }
        for (term, ids) in dictionary {
            if needles.iter().any(|n| term.contains(n.as_str())) {
                out |= ids;
            }
        }
    }
    out
}

/// The union of all posting lists of a facet.
pub(crate) fn union_of_terms(index: &Index, facet: &str) -> RoaringBitmap {
    index
        .dictionary(facet)
        .map(|d| d.values().fold(RoaringBitmap::new(), |acc, ids| acc | ids))
        .unwrap_or_default()
}
