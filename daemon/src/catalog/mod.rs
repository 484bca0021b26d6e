//! The file catalogue: records in the store, the in-memory search index, and the searches of
//! the databrowser.
//!
//! A validated [`Query`] selects a [`Selection`]; facet counts, locations, intake and STAC
//! catalogues consume it. Writes go to the store in one atomic batch and are then applied to
//! the index, under one writer lock so ids and dataset versions stay consistent. Readers take
//! the index with reader preference (see `Catalog::read_index`).

pub(crate) mod facet;
mod forward;
mod index;
mod ingest;
pub(crate) mod loader;
#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod page_tests;
pub(crate) mod query;
pub(crate) mod record;
#[cfg(test)]
mod reuse_tests;
mod select;
pub(crate) mod time;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use roaring::RoaringBitmap;

pub use ingest::WriteCounts;
pub use loader::{LOAD_BATCH, LoadSummary, Loader, Rejection};
pub(crate) use query::{Query, Source};
pub(crate) use record::Identity;
pub use record::Record;

use crate::db::{Db, cf};
use crate::error::Result;
use index::Index;

/// Which location of a record a search returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniqKey {
    /// The file path.
    File,
    /// The URI.
    Uri,
}

impl UniqKey {
    /// Parses `file` or `uri`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "file" => Some(UniqKey::File),
            "uri" => Some(UniqKey::Uri),
            _ => None,
        }
    }

    /// `file` or `uri`.
    pub fn as_str(self) -> &'static str {
        match self {
            UniqKey::File => "file",
            UniqKey::Uri => "uri",
        }
    }
}

/// The records a query matched.
#[derive(Debug, Clone)]
pub struct Selection {
    ids: RoaringBitmap,
    /// The index generation the query was evaluated at.
    generation: u64,
}

impl Selection {
    /// Number of matching records.
    pub fn len(&self) -> u64 {
        self.ids.len()
    }

    /// Whether nothing matched.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The public identifier of the record at a location: 32 hex digits of [`index::item_key`].
/// It depends on the location alone, so it survives restarts and rebuilds of the catalogue.
pub(crate) fn item_id(location: &str) -> String {
    format!("{:032x}", index::item_key(location))
}

/// The item key an identifier made by [`item_id`] stands for.
pub(crate) fn parse_item_id(id: &str) -> Option<u128> {
    if id.len() != 32
        || !id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    u128::from_str_radix(id, 16).ok()
}

/// Where a page starts, relative to a record of the selection (by record id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// The first page.
    Start,
    /// The page of records after this one.
    After(u32),
    /// The page of records before this one.
    Before(u32),
}

/// One page of a selection in record-id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The records of the page, ascending.
    pub ids: Vec<u32>,
    /// Whether records come before the page.
    pub has_previous: bool,
    /// Whether records come after the page.
    pub has_next: bool,
}

/// The bounding box and time span of a set of records.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Extent {
    /// `[min_lon, min_lat, max_lon, max_lat]` over the records that have a box.
    pub bbox: Option<[f64; 4]>,
    /// Earliest start over the records that have a time range (Unix seconds).
    pub start: Option<i64>,
    /// Latest end over the records that have a time range (Unix seconds).
    pub end: Option<i64>,
}

impl Extent {
    /// Widens the extent to cover a record's box and time span.
    pub fn include(&mut self, bbox: Option<[f64; 4]>, time: Option<(i64, i64)>) {
        if let Some(b) = bbox {
            self.bbox = Some(match self.bbox {
                None => b,
                Some(e) => [
                    e[0].min(b[0]),
                    e[1].min(b[1]),
                    e[2].max(b[2]),
                    e[3].max(b[3]),
                ],
            });
        }
        if let Some((start, end)) = time {
            self.start = Some(self.start.map_or(start, |s| s.min(start)));
            self.end = Some(self.end.map_or(end, |e| e.max(end)));
        }
    }
}

/// Counts of one facet: `(term, count)` sorted by term, counts at least 1.
pub(crate) type FacetCounts = Vec<(String, u64)>;

/// Size figures of the catalogue.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Number of records, user data included.
    pub records: u64,
    /// Number of user-data entries per owner.
    #[serde(default)]
    pub user_data: BTreeMap<String, u64>,
    /// Number of records that are the newest version of their dataset.
    pub latest: u64,
    /// Distinct terms per facet.
    pub terms: BTreeMap<String, usize>,
    /// Bytes on disk of the whole store.
    pub store_bytes: u64,
}

/// The catalogue of files.
pub struct Catalog {
    db: Arc<Db>,
    index: RwLock<Index>,
    writer: Mutex<()>,
}

/// Below this share of all records a result is sorted by path directly; above it the result
/// order is scanned. Sorting k ids costs k·log k path comparisons, scanning costs one bitmap
/// probe per record.
const SORT_SHARE: u64 = 64;

/// Below this share of all records facet counts walk the selection through the forward
/// columns; above it they intersect posting lists (see [`forward`]).
const FORWARD_SHARE: u64 = 8;

impl Catalog {
    /// Opens the catalogue and loads its index from the store.
    ///
    /// # Errors
    /// A store error or corrupt data.
    pub fn open(db: Arc<Db>) -> Result<Self> {
        ingest::upgrade(&db)?;
        let index = Index::load(&db)?;
        Ok(Catalog {
            db,
            index: RwLock::new(index),
            writer: Mutex::new(()),
        })
    }

    /// A read view of the index. Readers take it with reader preference: a reader joins the
    /// readers already inside even when a writer waits, so one long search and a waiting write
    /// never make every later search queue behind them (the write waits for the readers to
    /// drain instead). Every reader's work is bounded (location wildcards are limited and
    /// matched in one pass, cursors read one batch at a time), so the wait is too. Readers
    /// must not take it twice on one thread, as a recursive read would deadlock a plain lock.
    fn read_index(&self) -> parking_lot::RwLockReadGuard<'_, Index> {
        self.index.read_recursive()
    }

    /// Adds or replaces records in one atomic batch and makes them searchable.
    ///
    /// # Errors
    /// A store error; then nothing of the batch is visible.
    pub fn add(&self, records: &[Record]) -> Result<WriteCounts> {
        let _writer = self.writer.lock();
        let (change, counts) = ingest::write_records(&self.db, records)?;
        self.index.write().apply(change);
        Ok(counts)
    }

    /// Adds the records whose identity (location, and owner for user data) is not indexed
    /// yet, in one atomic batch; an identity already indexed, or repeated within `records`, is
    /// skipped. Returns how many records were added and how many skipped. The check and the
    /// write hold the writer lock, so concurrent adds of one identity add it once.
    ///
    /// # Errors
    /// A store error; then nothing was added.
    pub fn add_new(&self, records: &[Record]) -> Result<(u64, u64)> {
        let _writer = self.writer.lock();
        let identities: Vec<Identity> = records.iter().map(Record::identity).collect();
        let existing = ingest::existing(&self.db, identities.iter())?;
        let mut seen = std::collections::HashSet::new();
        let fresh: Vec<Record> = records
            .iter()
            .zip(&identities)
            .zip(existing)
            .filter(|((_, identity), id)| id.is_none() && seen.insert(*identity))
            .map(|((record, _), _)| record.clone())
            .collect();
        if !fresh.is_empty() {
            let (change, _) = ingest::write_records(&self.db, &fresh)?;
            self.index.write().apply(change);
        }
        let added = fresh.len() as u64;
        Ok((added, records.len() as u64 - added))
    }

    /// Removes every record the query selects (all versions, catalogue and user data alike
    /// as the query says). Returns how many were removed.
    ///
    /// # Errors
    /// A store error; then nothing is removed.
    pub fn remove(&self, query: &Query) -> Result<u64> {
        let _writer = self.writer.lock();
        let ids: Vec<u32> = select::evaluate(&self.read_index(), query).iter().collect();
        let (change, removed) = ingest::remove_records(&self.db, &ids)?;
        self.index.write().apply(change);
        drop(ids);
        if removed >= crate::memory::LARGE_CHANGE {
            crate::memory::release_free_heap();
        }
        Ok(removed)
    }

    /// The records matching a query.
    pub fn select(&self, query: &Query) -> Selection {
        let index = self.read_index();
        Selection {
            ids: select::evaluate(&index, query),
            generation: index.generation(),
        }
    }

    /// Counts the terms of each facet within the selection.
    ///
    /// The facets are shared out over the machine's cores (largest dictionaries first, dealt
    /// round-robin): one request's latency is the sum of many independent intersections.
    pub fn facet_counts(&self, selection: &Selection, facets: &[&str]) -> Vec<FacetCounts> {
        let index = self.read_index();
        let index: &Index = &index;
        let walk: Option<Vec<u32>> = (selection.len() * FORWARD_SHARE < index.live().len())
            .then(|| selection.ids.iter().collect());
        let count = |facet: &str| -> FacetCounts {
            if let (Some(ids), Some(forward)) = (&walk, index.forward(facet)) {
                return forward.count(ids);
            }
            let Some(dictionary) = index.dictionary(facet) else {
                return Vec::new();
            };
            dictionary
                .iter()
                .filter_map(|(term, ids)| {
                    let count = ids.intersection_len(&selection.ids);
                    (count > 0).then(|| (term.clone(), count))
                })
                .collect()
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(facets.len());
        if threads <= 1 {
            return facets.iter().map(|f| count(f)).collect();
        }
        let mut by_size: Vec<usize> = (0..facets.len()).collect();
        by_size.sort_by_key(|i| {
            std::cmp::Reverse(index.dictionary(facets[*i]).map_or(0, |d| d.len()))
        });
        let mut results = vec![Vec::new(); facets.len()];
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let mine: Vec<usize> =
                        by_size.iter().copied().skip(t).step_by(threads).collect();
                    let count = &count;
                    scope.spawn(move || {
                        mine.into_iter()
                            .map(|i| (i, count(facets[i])))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for worker in workers {
                for (i, counts) in worker.join().expect("counting does not panic") {
                    results[i] = counts;
                }
            }
        });
        results
    }

    /// A cursor over the selection in result order (file path, byte-wise descending),
    /// skipping the first `start` records.
    pub fn cursor(self: &Arc<Self>, selection: Selection, start: u64) -> Cursor {
        let selection_generation = selection.generation;
        let index = self.read_index();
        let plan = if selection.len() * SORT_SHARE < index.live().len() {
            let mut ids: Vec<u32> = selection.ids.iter().collect();
            ids.sort_unstable_by(|a, b| index.path(*b).cmp(index.path(*a)));
            let skip = usize::try_from(start).unwrap_or(usize::MAX).min(ids.len());
            Plan::Sorted { ids, next: skip }
        } else {
            Plan::Scan {
                ids: selection.ids,
                after: None,
                skip: start,
            }
        };
        drop(index);
        Cursor {
            catalog: Arc::clone(self),
            plan,
            generation: selection_generation,
        }
    }

    /// One page of `limit` records of the selection in record-id order, next to `anchor`.
    ///
    /// Record-id order (the order records were added) lets a page be cut straight from the
    /// selection's bitmap: the cost follows the page size, not the selection size.
    pub fn page(&self, selection: &Selection, anchor: Anchor, limit: usize) -> Page {
        let ids = &selection.ids;
        match anchor {
            Anchor::Start => {
                let mut page: Vec<u32> = ids.iter().take(limit + 1).collect();
                let has_next = page.len() > limit;
                page.truncate(limit);
                Page {
                    ids: page,
                    has_previous: false,
                    has_next,
                }
            }
            Anchor::After(pivot) => {
                let mut iter = ids.iter();
                iter.advance_to(pivot.saturating_add(1));
                let mut page: Vec<u32> = iter.filter(|id| *id > pivot).take(limit + 1).collect();
                let has_next = page.len() > limit;
                page.truncate(limit);
                Page {
                    ids: page,
                    has_previous: ids.rank(pivot) > 0,
                    has_next,
                }
            }
            Anchor::Before(pivot) => {
                let mut page: Vec<u32> = match pivot.checked_sub(1) {
                    None => Vec::new(),
                    Some(last) => {
                        let mut iter = ids.iter();
                        iter.advance_back_to(last);
                        iter.rev()
                            .filter(|id| *id < pivot)
                            .take(limit + 1)
                            .collect()
                    }
                };
                let has_previous = page.len() > limit;
                page.truncate(limit);
                page.reverse();
                let at_or_before = if pivot == 0 { 0 } else { ids.rank(pivot - 1) };
                Page {
                    ids: page,
                    has_previous,
                    has_next: ids.len() > at_or_before,
                }
            }
        }
    }

    /// Keeps the selected records whose box `[min_lon, min_lat, max_lon, max_lat]` satisfies
    /// `keep`; records without a box are dropped.
    pub fn retain_boxes(&self, selection: &mut Selection, keep: impl Fn([f64; 4]) -> bool) {
        let index = self.read_index();
        selection
            .ids
            .retain(|id| index.bbox(id).is_some_and(|b| keep(b.map(f64::from))));
    }

    /// The live record whose item id (see [`item_id`]) is `id`.
    pub fn record_of_item(&self, id: &str) -> Option<u32> {
        self.read_index().by_item_key(parse_item_id(id)?)
    }

    /// The bounding box and time span of the selected records.
    pub fn extent(&self, selection: &Selection) -> Extent {
        let index = self.read_index();
        let mut extent = Extent::default();
        for id in &selection.ids {
            // The index keeps boxes as f32 (about 1e-5 degrees at 180); rounding to 1e-4
            // degrees gives back the decimals that were indexed instead of f32 noise.
            let bbox = index
                .bbox(id)
                .map(|b| b.map(|v| (f64::from(v) * 1e4).round() / 1e4));
            extent.include(bbox, index.time(id));
        }
        extent
    }

    /// Counts applied changes since the catalogue was opened: summaries computed at one
    /// generation are current until it moves.
    pub fn generation(&self) -> u64 {
        self.read_index().generation()
    }

    /// Reads full records by id, in the given order; ids removed meanwhile are skipped.
    ///
    /// # Errors
    /// A store error or a corrupt record.
    pub fn records(&self, ids: &[u32]) -> Result<Vec<Record>> {
        let keys: Vec<Vec<u8>> = ids.iter().map(|id| id.to_be_bytes().to_vec()).collect();
        self.db
            .multi_get(cf::RECORDS, &keys)?
            .into_iter()
            .flatten()
            .map(|bytes| ingest::decode_record(&bytes))
            .collect()
    }

    /// Record counts, terms per facet and store size.
    pub fn stats(&self) -> Stats {
        let index = self.read_index();
        let (records, terms) = index.stats();
        let user_data = index
            .dictionary(facet::OWNER)
            .map(|owners| {
                owners
                    .iter()
                    .map(|(owner, ids)| (owner.clone(), ids.len()))
                    .collect()
            })
            .unwrap_or_default();
        Stats {
            records,
            user_data,
            latest: index.latest().len(),
            terms,
            store_bytes: self.db.size_on_disk(),
        }
    }
}

/// Writes records straight into a store that no daemon has open (bulk loads, offline CLI).
///
/// # Errors
/// A store error; then nothing of the batch is written.
pub fn write_to_store(db: &Db, records: &[Record]) -> Result<WriteCounts> {
    ingest::upgrade(db)?;
    Ok(ingest::write_records(db, records)?.1)
}

enum Plan {
    /// A small result, sorted once.
    Sorted { ids: Vec<u32>, next: usize },
    /// A large result: walk the result order, resuming after the last record emitted (its
    /// path and id: the order's key) so concurrent writes between batches cannot shift the
    /// cursor.
    Scan {
        ids: RoaringBitmap,
        after: Option<(String, u32)>,
        skip: u64,
    },
}

/// Walks a selection in result order, one batch under one read lock at a time.
pub struct Cursor {
    catalog: Arc<Catalog>,
    plan: Plan,
    /// The index generation the selection was made at: records added later (possibly under
    /// an id a removed record of the selection had) are not visited.
    generation: u64,
}

impl Cursor {
    /// Visits up to `max` further records with their file path and URI; returns how many
    /// were visited (0 at the end).
    pub fn next_batch(&mut self, max: usize, mut visit: impl FnMut(u32, &str, &str)) -> usize {
        let index = self.catalog.read_index();
        let mut visited = 0;
        match &mut self.plan {
            Plan::Sorted { ids, next } => {
                while *next < ids.len() && visited < max {
                    let id = ids[*next];
                    *next += 1;
                    if index.existed_at(id, self.generation) {
                        visit(id, index.path(id), index.uri(id));
                        visited += 1;
                    }
                }
            }
            Plan::Scan { ids, after, skip } => {
                let order = index.order();
                let mut pos = after.as_ref().map_or(0, |(p, last)| {
                    let at = index.position_of(p, *last);
                    if order
                        .get(at)
                        .is_some_and(|id| id == last && index.path(*id) == p)
                    {
                        at + 1
                    } else {
                        at
                    }
                });
                let mut last = None;
                while pos < order.len() && visited < max {
                    let id = order[pos];
                    pos += 1;
                    if !ids.contains(id) || !index.existed_at(id, self.generation) {
                        continue;
                    }
                    last = Some(id);
                    if *skip > 0 {
                        *skip -= 1;
                        continue;
                    }
                    visit(id, index.path(id), index.uri(id));
                    visited += 1;
                }
                match last {
                    Some(id) => *after = Some((index.path(id).to_string(), id)),
                    None => *after = Some((String::new(), 0)),
                }
                if pos >= order.len() {
                    ids.clear();
                }
            }
        }
        visited
    }

    /// The next batch of records, fully read from the store.
    ///
    /// # Errors
    /// A store error.
    pub fn next_records(&mut self, max: usize) -> Result<Vec<Record>> {
        let mut ids = Vec::with_capacity(max);
        self.next_batch(max, |id, _, _| ids.push(id));
        self.catalog.records(&ids)
    }
}
