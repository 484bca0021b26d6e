//! Evaluating a [`Query`] over the in-memory [`Index`]: AND over clauses of (OR over values),
//! minus negations, then the time and box columns.

use roaring::RoaringBitmap;

use super::index::Index;
use super::query::{Clause, Field, Pattern, Query};

/// The ids of all records matching `query`.
pub(crate) fn evaluate(index: &Index, query: &Query) -> RoaringBitmap {
    let user_data = union_of_terms(index, "user");
    let mut ids = if query.user_data {
        user_data & index.live()
    } else {
        index.live() - user_data
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
        let mut matched = RoaringBitmap::new();
        for pattern in &clause.include {
            matched |= matching(index, &clause.field, pattern, ids);
        }
        *ids &= matched;
    }
    for pattern in &clause.exclude {
        let excluded = matching(index, &clause.field, pattern, ids);
        *ids -= excluded;
    }
}

/// Ids whose field matches `pattern`; `within` bounds the work for path scans.
fn matching(
    index: &Index,
    field: &Field,
    pattern: &Pattern,
    within: &RoaringBitmap,
) -> RoaringBitmap {
    match field {
        Field::Facet(name) => matching_terms(index, name, pattern),
        Field::File => matching_files(index, pattern),
        Field::Uri => within
            .iter()
            .filter(|id| pattern.matches(index.uri(*id)))
            .collect(),
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

/// File paths: the result order is sorted by path, so the literal prefix of the pattern
/// bounds a contiguous block of it.
fn matching_files(index: &Index, pattern: &Pattern) -> RoaringBitmap {
    let prefix = pattern.prefix();
    let order = index.order();
    let first = order.partition_point(|id| {
        let path = index.path(*id);
        path > prefix && !path.starts_with(prefix)
    });
    let end = order.partition_point(|id| index.path(*id) >= prefix);
    order[first..end.max(first)]
        .iter()
        .copied()
        .filter(|id| pattern.matches(index.path(*id)))
        .collect()
}

/// Ids with a facet value (other than the owner of user data) containing any of `needles`.
/// Values are indexed lower-cased, so lower-cased needles match case-insensitively.
fn matching_text(index: &Index, needles: &[String]) -> RoaringBitmap {
    let mut out = RoaringBitmap::new();
    for (facet, dictionary) in index.dictionaries() {
        if facet == "user" {
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
