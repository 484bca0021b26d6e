//! The file catalogue: records in the store, the in-memory search index, and the searches of
//! the databrowser.
//!
//! A validated [`Query`] selects a [`Selection`]; facet counts, locations, intake and STAC
//! catalogues consume it. Writes go to the store in one atomic batch and are then applied to
//! the index, under one writer lock so ids and dataset versions stay consistent.

pub mod facet;
mod forward;
mod index;
mod ingest;
pub mod loader;
#[cfg(test)]
mod oracle_tests;
pub mod query;
pub mod record;
mod select;
pub mod time;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use roaring::RoaringBitmap;

pub use ingest::WriteCounts;
pub use loader::{LOAD_BATCH, LoadSummary, Loader, Rejection};
pub use query::{Query, SearchParams};
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

/// Counts of one facet: `(term, count)` sorted by term, counts at least 1.
pub type FacetCounts = Vec<(String, u64)>;

/// Size figures of the catalogue.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Number of records.
    pub records: u64,
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
        let index = Index::load(&db)?;
        Ok(Catalog {
            db,
            index: RwLock::new(index),
            writer: Mutex::new(()),
        })
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

    /// Adds the records whose location is not indexed yet, in one atomic batch; a location
    /// already indexed, or repeated within `records`, is skipped. Returns how many records
    /// were added and how many skipped. The check and the write hold the writer lock, so
    /// concurrent adds of one location add it once.
    ///
    /// # Errors
    /// A store error; then nothing was added.
    pub fn add_new(&self, records: &[Record]) -> Result<(u64, u64)> {
        let _writer = self.writer.lock();
        let mut seen = std::collections::HashSet::new();
        let fresh: Vec<Record> = {
            let index = self.index.read();
            records
                .iter()
                .filter(|r| !index.contains_path(&r.file) && seen.insert(r.file.as_str()))
                .cloned()
                .collect()
        };
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
        let ids: Vec<u32> = select::evaluate(&self.index.read(), query).iter().collect();
        let (change, removed) = ingest::remove_records(&self.db, &ids)?;
        self.index.write().apply(change);
        Ok(removed)
    }

    /// The records matching a query.
    pub fn select(&self, query: &Query) -> Selection {
        Selection {
            ids: select::evaluate(&self.index.read(), query),
        }
    }

    /// Counts the terms of each facet within the selection.
    ///
    /// The facets are shared out over the machine's cores (largest dictionaries first, dealt
    /// round-robin): one request's latency is the sum of many independent intersections.
    pub fn facet_counts(&self, selection: &Selection, facets: &[&str]) -> Vec<FacetCounts> {
        let index = self.index.read();
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
        let index = self.index.read();
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
        }
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
        let index = self.index.read();
        let (records, terms) = index.stats();
        Stats {
            records,
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
    Ok(ingest::write_records(db, records)?.1)
}

enum Plan {
    /// A small result, sorted once.
    Sorted { ids: Vec<u32>, next: usize },
    /// A large result: walk the result order, resuming after the last path emitted so
    /// concurrent writes between batches cannot shift the cursor.
    Scan {
        ids: RoaringBitmap,
        after: Option<String>,
        skip: u64,
    },
}

/// Walks a selection in result order, one batch under one read lock at a time.
pub struct Cursor {
    catalog: Arc<Catalog>,
    plan: Plan,
}

impl Cursor {
    /// Visits up to `max` further records with their file path and URI; returns how many
    /// were visited (0 at the end).
    pub fn next_batch(&mut self, max: usize, mut visit: impl FnMut(u32, &str, &str)) -> usize {
        let index = self.catalog.index.read();
        let mut visited = 0;
        match &mut self.plan {
            Plan::Sorted { ids, next } => {
                while *next < ids.len() && visited < max {
                    let id = ids[*next];
                    *next += 1;
                    if index.live().contains(id) {
                        visit(id, index.path(id), index.uri(id));
                        visited += 1;
                    }
                }
            }
            Plan::Scan { ids, after, skip } => {
                let order = index.order();
                let mut pos = after.as_deref().map_or(0, |p| {
                    let at = index.position_of(p);
                    if order.get(at).is_some_and(|id| index.path(*id) == p) {
                        at + 1
                    } else {
                        at
                    }
                });
                let mut last = None;
                while pos < order.len() && visited < max {
                    let id = order[pos];
                    pos += 1;
                    if !ids.contains(id) {
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
                    Some(id) => *after = Some(index.path(id).to_string()),
                    None => *after = Some(String::new()),
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
