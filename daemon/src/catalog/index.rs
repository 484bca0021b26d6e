//! The in-memory search index: term dictionaries with roaring posting lists, per-record
//! columns, and the records' locations in result order.
//!
//! It is rebuilt from the store at start and kept current by applying each committed
//! [`Change`]. Only reads and [`Index::apply`] touch it; the store stays the source of truth.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use roaring::RoaringBitmap;

use super::forward::Forward;
use crate::db::{self, Columns, Db, PostingDelta, cf};
use crate::error::Result;

/// The internal facet holding the newest-version flags.
pub(crate) const LATEST: &str = "\u{1}latest";

/// A committed change, as the in-memory index needs to see it.
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// New or replaced records: id, file path, columns.
    pub(crate) upserts: Vec<(u32, String, Columns)>,
    /// Removed record ids.
    pub(crate) removals: Vec<u32>,
    /// Posting deltas per `(facet, term)`, including [`LATEST`].
    pub(crate) postings: HashMap<(String, String), PostingDelta>,
}

/// Locations of all records, in an arena indexed by record id, and the records by item key.
#[derive(Default)]
struct Paths {
    bytes: Vec<u8>,
    /// Per id: start offset in `bytes` and length; `u32::MAX` length marks a free id.
    spans: Vec<(u64, u32)>,
    /// Low 64 bits of each record's [`item_key`] -> id.
    items: HashMap<u64, u32>,
    /// Full keys of records whose low 64 bits were taken by another record when they came.
    item_collisions: HashMap<u128, u32>,
}

/// The stable key of a location: XXH3-128 of its bytes. Record ids change when a catalogue
/// is rebuilt; this does not, so public identifiers (STAC item ids) derive from it.
pub(crate) fn item_key(path: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(path.as_bytes())
}

impl Paths {
    fn set(&mut self, id: u32, path: &str) {
        let idx = id as usize;
        if self.spans.len() <= idx {
            self.spans.resize(idx + 1, (0, u32::MAX));
        }
        if self.get(id) == Some(path) {
            return;
        }
        self.spans[idx] = (self.bytes.len() as u64, path.len() as u32);
        self.bytes.extend_from_slice(path.as_bytes());
        let key = item_key(path);
        match self.items.entry(key as u64) {
            Entry::Vacant(slot) => {
                slot.insert(id);
            }
            Entry::Occupied(_) => {
                self.item_collisions.insert(key, id);
            }
        }
    }

    fn clear(&mut self, id: u32) {
        let Some(path) = self.get(id) else { return };
        let key = item_key(path);
        if self.items.get(&(key as u64)) == Some(&id) {
            self.items.remove(&(key as u64));
        } else {
            self.item_collisions.remove(&key);
        }
        self.spans[id as usize].1 = u32::MAX;
    }

    /// The live record whose location has this item key.
    fn by_item_key(&self, key: u128) -> Option<u32> {
        if let Some(id) = self.item_collisions.get(&key) {
            return Some(*id);
        }
        let id = *self.items.get(&(key as u64))?;
        (self.get(id).map(item_key) == Some(key)).then_some(id)
    }

    fn get(&self, id: u32) -> Option<&str> {
        let (start, len) = *self.spans.get(id as usize)?;
        if len == u32::MAX {
            return None;
        }
        let bytes = &self.bytes[start as usize..start as usize + len as usize];
        Some(std::str::from_utf8(bytes).expect("paths are stored from &str"))
    }
}

/// The search index of all records.
#[derive(Default)]
pub(crate) struct Index {
    /// Facet -> term -> ids.
    terms: HashMap<String, BTreeMap<String, RoaringBitmap>>,
    /// Facet -> the same postings by record.
    forward: HashMap<String, Forward>,
    /// Ids of the newest version of every dataset.
    latest: RoaringBitmap,
    /// Ids of all records.
    live: RoaringBitmap,
    paths: Paths,
    /// Ids sorted by file path, byte-wise descending: the result order.
    order: Vec<u32>,
    /// `(start, end)` per id; `i64::MIN` start when the record has no time.
    times: Vec<(i64, i64)>,
    /// Bounding box per id; NaN when the record has none.
    boxes: Vec<[f32; 4]>,
    /// URIs that differ from the file path.
    uris: HashMap<u32, Box<str>>,
    /// Bumped by every applied change, so derived summaries know when they are stale.
    generation: u64,
}

const NO_TIME: (i64, i64) = (i64::MIN, i64::MIN);
const NO_BOX: [f32; 4] = [f32::NAN; 4];

impl Index {
    /// Loads the index from the store.
    pub(crate) fn load(db: &Db) -> Result<Self> {
        let mut index = Index::default();
        db.for_each(cf::FILES, |path, id| {
            let id = db::decode_u32(cf::FILES, id)?;
            let path = std::str::from_utf8(path).map_err(|_| crate::Error::Corrupt {
                family: cf::FILES,
                reason: "path not UTF-8".into(),
            })?;
            index.paths.set(id, path);
            index.order.push(id);
            index.live.insert(id);
            Ok(true)
        })?;
        index.order.reverse();
        db.for_each(cf::COLUMNS, |id, value| {
            let id = u32::from_be_bytes(id.try_into().map_err(|_| crate::Error::Corrupt {
                family: cf::COLUMNS,
                reason: "key is not a record id".into(),
            })?);
            index.set_columns(id, Columns::decode(value)?);
            Ok(true)
        })?;
        db.for_each(cf::POSTINGS, |key, value| {
            let (facet, term) = db::split_posting_key(key)?;
            let ids = db::decode_postings(value)?;
            if facet == LATEST {
                index.latest = ids;
            } else if !ids.is_empty() {
                index
                    .forward
                    .entry(facet.to_string())
                    .or_default()
                    .add(&ids, term);
                index
                    .terms
                    .entry(facet.to_string())
                    .or_default()
                    .insert(term.to_string(), ids);
            }
            Ok(true)
        })?;
        Ok(index)
    }

    fn set_columns(&mut self, id: u32, columns: Columns) {
        let idx = id as usize;
        if self.times.len() <= idx {
            self.times.resize(idx + 1, NO_TIME);
            self.boxes.resize(idx + 1, NO_BOX);
        }
        self.times[idx] = columns.time.unwrap_or(NO_TIME);
        self.boxes[idx] = columns.bbox.unwrap_or(NO_BOX);
        match columns.uri {
            Some(uri) => self.uris.insert(id, uri.into_boxed_str()),
            None => self.uris.remove(&id),
        };
    }

    /// Applies a committed change.
    pub(crate) fn apply(&mut self, change: Change) {
        self.generation += 1;
        if !change.removals.is_empty() {
            let removed: RoaringBitmap = change.removals.iter().copied().collect();
            self.order.retain(|id| !removed.contains(*id));
            for id in &change.removals {
                self.paths.clear(*id);
                self.live.remove(*id);
                self.set_columns(*id, Columns::default());
            }
        }
        let mut fresh: Vec<(u32, String)> = Vec::new();
        for (id, path, columns) in change.upserts {
            self.set_columns(id, columns);
            if self.live.insert(id) {
                fresh.push((id, path));
            }
        }
        self.insert_in_order(fresh);
        for ((facet, term), delta) in change.postings {
            self.apply_delta(facet, &term, &delta);
        }
    }

    fn apply_delta(&mut self, facet: String, term: &str, delta: &PostingDelta) {
        if facet == LATEST {
            self.latest -= &delta.removes;
            self.latest |= &delta.adds;
            return;
        }
        let forward = self.forward.entry(facet.clone()).or_default();
        forward.remove(&delta.removes, term);
        forward.add(&delta.adds, term);
        let dictionary = self.terms.entry(facet).or_default();
        let ids = dictionary.entry(term.to_string()).or_default();
        *ids -= &delta.removes;
        *ids |= &delta.adds;
        if ids.is_empty() {
            dictionary.remove(term);
        }
    }

    /// Inserts new ids into the descending path order: one binary search per id, then one pass.
    fn insert_in_order(&mut self, mut fresh: Vec<(u32, String)>) {
        if fresh.is_empty() {
            return;
        }
        for (id, path) in &fresh {
            self.paths.set(*id, path);
        }
        fresh.sort_by(|a, b| b.1.cmp(&a.1));
        let positions: Vec<usize> = fresh
            .iter()
            .map(|(_, path)| {
                self.order
                    .partition_point(|id| self.path(*id) > path.as_str())
            })
            .collect();
        let mut merged = Vec::with_capacity(self.order.len() + fresh.len());
        let mut next = 0;
        for ((id, _), pos) in fresh.iter().zip(positions) {
            merged.extend_from_slice(&self.order[next..pos]);
            merged.push(*id);
            next = pos;
        }
        merged.extend_from_slice(&self.order[next..]);
        self.order = merged;
    }

    /// The file path of a live record ("" for a free id).
    pub(crate) fn path(&self, id: u32) -> &str {
        self.paths.get(id).unwrap_or("")
    }

    /// The URI of a live record.
    pub(crate) fn uri(&self, id: u32) -> &str {
        self.uris.get(&id).map_or_else(|| self.path(id), |u| &**u)
    }

    pub(crate) fn live(&self) -> &RoaringBitmap {
        &self.live
    }

    pub(crate) fn latest(&self) -> &RoaringBitmap {
        &self.latest
    }

    /// The term dictionary of a facet.
    pub(crate) fn dictionary(&self, facet: &str) -> Option<&BTreeMap<String, RoaringBitmap>> {
        self.terms.get(facet)
    }

    /// Every facet's term dictionary.
    pub(crate) fn dictionaries(
        &self,
    ) -> impl Iterator<Item = (&str, &BTreeMap<String, RoaringBitmap>)> {
        self.terms.iter().map(|(f, d)| (f.as_str(), d))
    }

    /// The forward column of a facet, when it can be counted through.
    pub(crate) fn forward(&self, facet: &str) -> Option<&Forward> {
        self.forward.get(facet).filter(|f| f.usable())
    }

    /// The live record with this item key.
    pub(crate) fn by_item_key(&self, key: u128) -> Option<u32> {
        self.paths.by_item_key(key)
    }

    /// Counts applied changes since the index was loaded.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Ids in result order.
    pub(crate) fn order(&self) -> &[u32] {
        &self.order
    }

    /// Whether a record with this file path is indexed.
    pub(crate) fn contains_path(&self, path: &str) -> bool {
        self.order
            .get(self.position_of(path))
            .is_some_and(|id| self.path(*id) == path)
    }

    /// Where `path` stands (or would stand) in the result order.
    pub(crate) fn position_of(&self, path: &str) -> usize {
        self.order.partition_point(|id| self.path(*id) > path)
    }

    /// The length of the per-record columns: one past the highest record id.
    pub(crate) fn column_len(&self) -> usize {
        self.times.len()
    }

    pub(crate) fn time(&self, id: u32) -> Option<(i64, i64)> {
        self.times
            .get(id as usize)
            .copied()
            .filter(|t| *t != NO_TIME)
    }

    pub(crate) fn bbox(&self, id: u32) -> Option<[f32; 4]> {
        self.boxes
            .get(id as usize)
            .copied()
            .filter(|b| !b[0].is_nan())
    }

    /// Number of records, and number of terms per facet.
    pub(crate) fn stats(&self) -> (u64, BTreeMap<String, usize>) {
        let terms = self
            .terms
            .iter()
            .map(|(f, d)| (f.clone(), d.len()))
            .collect();
        (self.live.len(), terms)
    }
}
