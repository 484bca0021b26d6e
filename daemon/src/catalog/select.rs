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
    if let Some((range, mode)) = query.time {
        ids = ids
            .iter()
            .filter(|id| {
                index
                    .time(*id)
                    .is_some_and(|t| mode.selects(t, (range.start, range.end)))
            })
            .collect();
    }
    if let Some(([min_lon, max_lon, min_lat, max_lat], mode)) = query.bbox {
        ids = ids
            .iter()
            .filter(|id| {
                index
                    .bbox(*id)
                    .is_some_and(|[r_min_lon, r_min_lat, r_max_lon, r_max_lat]| {
                        let lon = (f64::from(r_min_lon), f64::from(r_max_lon));
                        let lat = (f64::from(r_min_lat), f64::from(r_max_lat));
                        mode.selects(lon, (min_lon, max_lon))
                            && mode.selects(lat, (min_lat, max_lat))
                    })
            })
            .collect();
    }
    ids
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

/// The union of all posting lists of a facet.
pub(crate) fn union_of_terms(index: &Index, facet: &str) -> RoaringBitmap {
    index
        .dictionary(facet)
        .map(|d| d.values().fold(RoaringBitmap::new(), |acc, ids| acc | ids))
        .unwrap_or_default()
}
