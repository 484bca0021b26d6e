//! The in-memory search index: term dictionaries with roaring posting lists, per-record
//! columns, and the records' locations in result order.
//!
//! It is rebuilt from the store at start and kept current by applying each committed
//! [`Change`]. Only reads and [`Index::apply`] touch it; the store stays the source of truth.

use std::collections::{BTreeMap, HashMap};

use roaring::RoaringBitmap;

use super::forward::Forward;
use super::record::Identity;
use crate::db::{self, Columns, Db, PostingDelta, cf};
use crate::error::Result;

/// The internal facet holding the newest-version flags.
pub(crate) const LATEST: &str = "\u{1}latest";

/// A committed change, as the in-memory index needs to see it.
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// New or replaced records: id, identity, columns.
    pub(crate) upserts: Vec<(u32, Identity, Columns)>,
    /// Removed records.
    pub(crate) removals: Vec<(u32, Identity)>,
    /// Posting deltas per `(facet, term)`, including [`LATEST`].
    pub(crate) postings: HashMap<(String, String), PostingDelta>,
}

/// Locations of all records, in an arena indexed by record id, and the records by item key.
#[derive(Default)]
struct Paths {
    /// Every path, one after another: text, so that a path is sliced out of it without
    /// checking its UTF-8 again (each comparison of a sort did, and a path of megabytes made
    /// an insert hold the index for seconds).
    bytes: String,
    /// Per id: start offset in `bytes` and length; `u32::MAX` length marks a free id.
    spans: Vec<(u64, u32)>,
    /// Bytes of `bytes` no live record uses any more; the arena is compacted when they
    /// outweigh the live ones, so removals give memory back.
    dead: u64,
    /// [`item_key`] of each live record's identity -> id.
    items: HashMap<u128, u32>,
}

/// The stable key of a record: XXH3-128 of its encoded [`Identity`], which for a catalogue
/// record is its location. Record ids change when a catalogue is rebuilt; this does not, so
/// public identifiers (STAC item ids) derive from it.
pub(crate) fn item_key(identity: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(identity.as_bytes())
}

impl Paths {
    fn set(&mut self, id: u32, identity: &Identity) {
        let idx = id as usize;
        if self.spans.len() <= idx {
            self.spans.resize(idx + 1, (0, u32::MAX));
        }
        let path = identity.file();
        if self.get(id) != Some(path) {
            if let Some(old) = self.get(id) {
                self.dead += old.len() as u64;
            }
            self.spans[idx] = (self.bytes.len() as u64, path.len() as u32);
            self.bytes.push_str(path);
        }
        self.items.insert(item_key(identity.as_str()), id);
    }

    fn clear(&mut self, id: u32, identity: &Identity) {
        let Some(path) = self.get(id) else { return };
        self.dead += path.len() as u64;
        let key = item_key(identity.as_str());
        if self.items.get(&key) == Some(&id) {
            self.items.remove(&key);
        }
        self.spans[id as usize].1 = u32::MAX;
        if self.dead > (self.bytes.len() as u64 - self.dead).max(1 << 20) {
            self.compact();
        }
    }

    /// Copies the live paths into a fresh arena and trims the span table to the highest live
    /// id.
    fn compact(&mut self) {
        let live: u64 = self.bytes.len() as u64 - self.dead;
        let mut bytes = String::with_capacity(live as usize);
        for span in &mut self.spans {
            if span.1 == u32::MAX {
                continue;
            }
            let start = span.0 as usize;
            let end = start + span.1 as usize;
            let moved = bytes.len() as u64;
            bytes.push_str(&self.bytes[start..end]);
            span.0 = moved;
        }
        self.bytes = bytes;
        self.dead = 0;
        let used = self
            .spans
            .iter()
            .rposition(|s| s.1 != u32::MAX)
            .map_or(0, |i| i + 1);
        self.spans.truncate(used);
        self.spans.shrink_to_fit();
        self.items.shrink_to_fit();
    }

    /// The live record whose identity has this item key.
    fn by_item_key(&self, key: u128) -> Option<u32> {
        self.items.get(&key).copied()
    }

    fn get(&self, id: u32) -> Option<&str> {
        let (start, len) = *self.spans.get(id as usize)?;
        if len == u32::MAX {
            return None;
        }
        // A path's span starts and ends where a whole path was pushed.
        Some(&self.bytes[start as usize..start as usize + len as usize])
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
    /// Per id: the generation at which the record holding it was added. Ids are reused, so a
    /// reader holding ids from an earlier generation skips those born after it.
    born: Vec<u32>,
    /// URIs that differ from the file path.
    uris: HashMap<u32, Box<str>>,
    /// Bumped by every applied change, so derived summaries know when they are stale.
    generation: u64,
}

/// The result order: file path byte-wise descending (DECISIONS.md); records at one location
/// (a catalogue record and users' entries) by descending id, so the order is total.
fn result_order(a: Option<&str>, a_id: u32, b: Option<&str>, b_id: u32) -> std::cmp::Ordering {
    (b, b_id).cmp(&(a, a_id))
}

const NO_TIME: (i64, i64) = (i64::MIN, i64::MIN);
const NO_BOX: [f32; 4] = [f32::NAN; 4];

impl Index {
    /// Loads the index from the store.
    pub(crate) fn load(db: &Db) -> Result<Self> {
        let mut index = Index::default();
        db.for_each(cf::FILES, |key, id| {
            let id = db::decode_u32(cf::FILES, id)?;
            let identity = std::str::from_utf8(key).map_err(|_| crate::Error::Corrupt {
                family: cf::FILES,
                reason: "identity not UTF-8".into(),
            })?;
            index.paths.set(id, &Identity::decode(identity));
            index.order.push(id);
            index.live.insert(id);
            Ok(true)
        })?;
        // The family is ordered by identity, which puts user data first: sort by location.
        let paths = &index.paths;
        index
            .order
            .sort_unstable_by(|a, b| result_order(paths.get(*a), *a, paths.get(*b), *b));
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
            self.born.resize(idx + 1, 0);
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
            let removed: RoaringBitmap = change.removals.iter().map(|(id, _)| *id).collect();
            self.order.retain(|id| !removed.contains(*id));
            for (id, identity) in &change.removals {
                self.paths.clear(*id, identity);
                self.live.remove(*id);
                self.set_columns(*id, Columns::default());
            }
            self.trim_columns();
        }
        let mut fresh: Vec<(u32, Identity)> = Vec::new();
        let generation = self.generation_u32();
        for (id, identity, columns) in change.upserts {
            self.set_columns(id, columns);
            if self.live.insert(id) {
                self.born[id as usize] = generation;
                fresh.push((id, identity));
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

    /// Gives back the per-record columns above the highest live id.
    fn trim_columns(&mut self) {
        let used = self.live.max().map_or(0, |m| m as usize + 1);
        if used < self.times.len() {
            self.times.truncate(used);
            self.boxes.truncate(used);
            self.born.truncate(used);
            self.times.shrink_to_fit();
            self.boxes.shrink_to_fit();
            self.born.shrink_to_fit();
        }
        for forward in self.forward.values_mut() {
            forward.truncate(used);
        }
    }

    /// Inserts new ids into the result order: one binary search per id, then one pass.
    fn insert_in_order(&mut self, fresh: Vec<(u32, Identity)>) {
        if fresh.is_empty() {
            return;
        }
        for (id, identity) in &fresh {
            self.paths.set(*id, identity);
        }
        let mut fresh: Vec<u32> = fresh.into_iter().map(|(id, _)| id).collect();
        fresh.sort_unstable_by(|a, b| result_order(self.paths.get(*a), *a, self.paths.get(*b), *b));
        let positions: Vec<usize> = fresh
            .iter()
            .map(|id| self.position_of(self.path(*id), *id))
            .collect();
        let mut merged = Vec::with_capacity(self.order.len() + fresh.len());
        let mut next = 0;
        for (id, pos) in fresh.iter().zip(positions) {
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

    fn generation_u32(&self) -> u32 {
        u32::try_from(self.generation).unwrap_or(u32::MAX)
    }

    /// Whether the record holding `id` existed at `generation` (it was not added later under
    /// a reused id).
    pub(crate) fn existed_at(&self, id: u32, generation: u64) -> bool {
        self.live.contains(id)
            && u64::from(self.born.get(id as usize).copied().unwrap_or(0)) <= generation
    }

    /// Ids in result order.
    pub(crate) fn order(&self) -> &[u32] {
        &self.order
    }

    /// Where the record `(path, id)` stands (or would stand) in the result order.
    pub(crate) fn position_of(&self, path: &str, id: u32) -> usize {
        self.order.partition_point(|x| {
            result_order(Some(self.path(*x)), *x, Some(path), id) == std::cmp::Ordering::Less
        })
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
