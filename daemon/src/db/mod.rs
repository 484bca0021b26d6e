//! The RocksDB store: one database, one column family per kind of thing.
//!
//! Only this module touches `rocksdb` types. Keys are big-endian and prefix-ordered; values
//! carry a leading format byte so they can evolve. A change that spans column families is one
//! [`Batch`], so a crash never leaves half of it.

mod columns;
mod postings;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rocksdb::{ColumnFamilyDescriptor, DB, IteratorMode, Options, WriteBatch, WriteOptions};

pub(crate) use columns::Columns;
pub(crate) use postings::{PostingDelta, decode_postings, encode_postings};

use crate::error::{Error, Result};

/// Column family names, all in one place.
pub(crate) mod cf {
    /// Record id (u32 BE) -> format byte + record JSON.
    pub(crate) const RECORDS: &str = "records";
    /// Record identity (the file path; `\0 owner \0 path` for user data) -> record id (u32 BE).
    pub(crate) const FILES: &str = "files";
    /// `facet \0 term` -> posting delta (merge operator unions deltas).
    pub(crate) const POSTINGS: &str = "postings";
    /// Record id (u32 BE) -> per-record search columns (time, bbox, uri).
    pub(crate) const COLUMNS: &str = "columns";
    /// `dataset key \0 id (u32 BE)` -> version string: the versions of each dataset.
    pub(crate) const DATASETS: &str = "datasets";
    /// Flavour key -> flavour JSON.
    pub(crate) const FLAVOURS: &str = "flavours";
    /// Named singletons: schema version, id counter.
    pub(crate) const META: &str = "meta";
    /// Job sequence number (u64 BE) -> format byte + job JSON: the durable queue.
    pub(crate) const JOBS: &str = "jobs";
    /// Store token (16 bytes) -> format byte + store record JSON.
    pub(crate) const STORES: &str = "stores";
    /// Store token (16 bytes) + key -> size (u64 BE): the key listing of every complete
    /// store, which stat and readdir read (never the cold tier).
    pub(crate) const KEYS: &str = "keys";
    /// Store token (16 bytes) -> format byte + the store's blob manifest (schema v3 JSON).
    pub(crate) const MANIFESTS: &str = "manifests";
    /// Store token (16 bytes) + blob instance id -> format byte + tier state JSON: the
    /// state is keyed by (scope, instance), and a store's token is its scope.
    pub(crate) const TIERS: &str = "tiers";
    /// Store token (16 bytes) -> format byte + JSON array of the store's sources: written
    /// once, with the store's first record (the token is made from them, so they never
    /// change), and read apart from the record, which every chunk request reads.
    pub(crate) const STORE_SOURCES: &str = "store_sources";
    /// Every family the database has.
    pub(crate) const ALL: [&str; 13] = [
        RECORDS,
        FILES,
        POSTINGS,
        COLUMNS,
        DATASETS,
        FLAVOURS,
        META,
        JOBS,
        STORES,
        KEYS,
        MANIFESTS,
        TIERS,
        STORE_SOURCES,
    ];
}

/// Keys of the `meta` family.
pub(crate) mod meta {
    /// Schema version (u32 BE).
    pub(crate) const SCHEMA_VERSION: &[u8] = b"schema_version";
    /// Next never-used record id (u32 BE).
    pub(crate) const NEXT_ID: &[u8] = b"next_id";
    /// Ids of removed records, handed out again before new ones (a posting value).
    pub(crate) const FREE_IDS: &[u8] = b"free_ids";
    /// Set once the built-in global flavours have been seeded.
    pub(crate) const FLAVOURS_SEEDED: &[u8] = b"flavours_seeded";
    /// Prefix of the marks of stores whose prefix on the cold tier may hold objects no
    /// record names (followed by the store's token, 16 bytes; the value is empty): the
    /// startup repair lists only these prefixes (see `tier::Tier::repair`).
    pub(crate) const COLD_CLEANUP: &[u8] = b"cold_cleanup/";
    /// Set once every store recorded before marks were kept has been marked.
    pub(crate) const COLD_CLEANUP_MARKED: &[u8] = b"cold_cleanup_marked";
    /// When the last archive was recorded (Unix nanoseconds, u128 BE), as the tier clock
    /// file outside the database says too: a database older than that file was restored
    /// from a backup (see `tier::Tier::repair`).
    pub(crate) const TIER_CLOCK: &[u8] = b"tier_clock";
}

/// The schema version this build reads and writes. Version 2 keys user data by owner and
/// location and indexes owners exactly; a version 1 store is migrated when opened (see
/// `catalog::migrate`).
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// The oldest schema version this build can migrate.
const MIGRATABLE_FROM: u32 = 1;

/// The open database.
pub struct Db {
    db: DB,
    path: PathBuf,
    /// The schema version of the data on disk: [`SCHEMA_VERSION`], or an older version that
    /// the catalogue migrates before it reads or writes records.
    schema: AtomicU32,
    /// The writes to each family ([`Db::writes`]).
    writes: Box<Writes>,
}

/// By family (in the order of [`cf::ALL`]), how many batches that write to it have started,
/// and how many of them have ended.
#[derive(Default)]
struct Writes {
    started: [AtomicU64; cf::ALL.len()],
    ended: [AtomicU64; cf::ALL.len()],
}

/// A set of writes applied atomically by [`Db::write`].
#[derive(Default)]
pub struct Batch {
    ops: Vec<Op>,
}

enum Op {
    Put(&'static str, Vec<u8>, Vec<u8>),
    Merge(&'static str, Vec<u8>, Vec<u8>),
    Delete(&'static str, Vec<u8>),
    DeleteRange(&'static str, Vec<u8>, Vec<u8>),
}

impl Batch {
    /// Sets `key` to `value` in `family`.
    pub fn put(
        &mut self,
        family: &'static str,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) {
        self.ops.push(Op::Put(family, key.into(), value.into()));
    }

    /// Merges a posting delta into `key` of the postings family.
    pub fn merge_postings(&mut self, key: Vec<u8>, delta: &PostingDelta) {
        self.ops.push(Op::Merge(cf::POSTINGS, key, delta.encode()));
    }

    /// Deletes `key` from `family`.
    pub fn delete(&mut self, family: &'static str, key: impl Into<Vec<u8>>) {
        self.ops.push(Op::Delete(family, key.into()));
    }

    /// Deletes every key of `family` that starts with `prefix`.
    pub fn delete_prefixed(&mut self, family: &'static str, prefix: &[u8]) {
        let end = prefix_end(prefix);
        self.ops.push(Op::DeleteRange(family, prefix.to_vec(), end));
    }

    /// Number of operations queued.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Memory all column families' memtables may use together.
const MEMTABLE_BUDGET: usize = 128 * 1024 * 1024;

impl Db {
    /// Opens (creating if needed) the database in `dir`.
    ///
    /// # Errors
    /// [`Error::SchemaVersion`] for a database written by an unknown schema, or a RocksDB error
    /// (for example when another process holds the database lock).
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.increase_parallelism(2);
        // Without a shared budget every column family keeps up to two 64 MiB memtables, and a
        // large add or delete leaves them full: most of a gigabyte that stays resident until
        // each fills up. The budget flushes the largest memtable once all of them together
        // exceed it.
        options.set_db_write_buffer_size(MEMTABLE_BUDGET);
        let families = cf::ALL.iter().map(|name| {
            let mut cf_options = Options::default();
            cf_options.set_compression_type(rocksdb::DBCompressionType::Lz4);
            if *name == cf::POSTINGS {
                cf_options.set_merge_operator_associative("posting_delta_v1", postings::merge);
            }
            ColumnFamilyDescriptor::new(*name, cf_options)
        });
        let db = DB::open_cf_descriptors(&options, dir, families)?;
        let db = Db {
            db,
            path: dir.to_path_buf(),
            schema: AtomicU32::new(SCHEMA_VERSION),
            writes: Box::default(),
        };
        db.check_schema()?;
        Ok(db)
    }

    fn check_schema(&self) -> Result<()> {
        match self.get(cf::META, meta::SCHEMA_VERSION)? {
            None => {
                let mut batch = Batch::default();
                batch.put(cf::META, meta::SCHEMA_VERSION, SCHEMA_VERSION.to_be_bytes());
                self.write(batch)
            }
            Some(v) => {
                let found = decode_u32(cf::META, &v)?;
                if (MIGRATABLE_FROM..=SCHEMA_VERSION).contains(&found) {
                    self.schema.store(found, Ordering::SeqCst);
                    Ok(())
                } else {
                    Err(Error::SchemaVersion {
                        path: self.path.clone(),
                        found,
                        expected: SCHEMA_VERSION,
                    })
                }
            }
        }
    }

    /// The schema version of the data on disk.
    pub fn schema(&self) -> u32 {
        self.schema.load(Ordering::SeqCst)
    }

    /// Records that the data on disk now has [`SCHEMA_VERSION`]; `batch` (which migrated it)
    /// writes the version with its changes.
    pub(crate) fn migrated(&self, mut batch: Batch) -> Result<()> {
        batch.put(cf::META, meta::SCHEMA_VERSION, SCHEMA_VERSION.to_be_bytes());
        self.write(batch)?;
        self.schema.store(SCHEMA_VERSION, Ordering::SeqCst);
        Ok(())
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn family(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every family in cf::ALL is opened")
    }

    /// Reads one value.
    ///
    /// # Errors
    /// A RocksDB read error.
    pub fn get(&self, family: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.family(family), key)?)
    }

    /// Reads many values of one family at once.
    ///
    /// # Errors
    /// A RocksDB read error.
    pub fn multi_get(&self, family: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let handle = self.family(family);
        let results = self.db.batched_multi_get_cf(handle, keys, false);
        results
            .into_iter()
            .map(|r| Ok(r?.map(|slice| slice.to_vec())))
            .collect()
    }

    /// Applies a batch atomically and durably: the write-ahead log is synced before this
    /// returns, so a write that was acknowledged to a user survives a power loss. Bulk loads
    /// write batches of thousands of records, so one sync per batch costs them little.
    ///
    /// # Errors
    /// A RocksDB write error; then nothing of the batch was applied.
    pub fn write(&self, batch: Batch) -> Result<()> {
        let mut wb = WriteBatch::default();
        let mut written = [false; cf::ALL.len()];
        for op in batch.ops {
            let family = match &op {
                Op::Put(f, ..) | Op::Merge(f, ..) | Op::Delete(f, _) | Op::DeleteRange(f, ..) => f,
            };
            written[Self::family_index(family)] = true;
            match op {
                Op::Put(f, k, v) => wb.put_cf(self.family(f), k, v),
                Op::Merge(f, k, v) => wb.merge_cf(self.family(f), k, v),
                Op::Delete(f, k) => wb.delete_cf(self.family(f), k),
                Op::DeleteRange(f, from, to) => wb.delete_range_cf(self.family(f), from, to),
            }
        }
        let counts = || {
            (self.writes.started.iter().zip(&self.writes.ended))
                .zip(written)
                .filter_map(|(counts, written)| written.then_some(counts))
        };
        for (started, _) in counts() {
            started.fetch_add(1, Ordering::SeqCst);
        }
        let mut options = WriteOptions::default();
        options.set_sync(true);
        let applied = self.db.write_opt(wb, &options);
        // Ended, applied or not (a write counted that was not applied costs a reader of
        // `writes` a read it could have spared).
        for (_, ended) in counts() {
            ended.fetch_add(1, Ordering::SeqCst);
        }
        Ok(applied?)
    }

    /// How many batches that wrote to `family` have been applied since the database was
    /// opened, or `None` while one is being written. A value read from `family` after this
    /// gave `Some(n)` is the stored one as long as this gives `Some(n)`: what keeps decoded
    /// values in memory asks this instead of reading them again.
    pub fn writes(&self, family: &str) -> Option<u64> {
        let family = Self::family_index(family);
        // Ended first: a write that starts between the two reads makes them differ.
        let ended = self.writes.ended[family].load(Ordering::SeqCst);
        let started = self.writes.started[family].load(Ordering::SeqCst);
        (started == ended).then_some(ended)
    }

    fn family_index(family: &str) -> usize {
        cf::ALL
            .iter()
            .position(|name| *name == family)
            .expect("every family is in cf::ALL")
    }

    /// Visits every entry of a family in key order; `visit` returns false to stop.
    ///
    /// # Errors
    /// A RocksDB read error, or the first error `visit` returns.
    pub fn for_each(
        &self,
        family: &str,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        for item in self
            .db
            .iterator_cf(self.family(family), IteratorMode::Start)
        {
            let (k, v) = item?;
            if !visit(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    /// Visits the entries whose key starts with `prefix`, in key order.
    ///
    /// # Errors
    /// A RocksDB read error, or the first error `visit` returns.
    pub fn for_each_prefixed(
        &self,
        family: &str,
        prefix: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let mode = IteratorMode::From(prefix, rocksdb::Direction::Forward);
        for item in self.db.iterator_cf(self.family(family), mode) {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                break;
            }
            visit(&k, &v)?;
        }
        Ok(())
    }

    /// Visits the entries whose key starts with `prefix`, in key order from `from` on,
    /// where `visit` may skip ahead ([`Step::SeekTo`]) or stop: a directory listing that
    /// steps over each subdirectory's keys in one seek.
    ///
    /// # Errors
    /// A RocksDB read error, or the first error `visit` returns.
    pub fn scan_prefixed(
        &self,
        family: &str,
        prefix: &[u8],
        from: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<Step>,
    ) -> Result<()> {
        let mut items = self.db.raw_iterator_cf(self.family(family));
        items.seek(from.max(prefix));
        while let (Some(key), Some(value)) = (items.key(), items.value()) {
            if !key.starts_with(prefix) {
                break;
            }
            match visit(key, value)? {
                Step::Next => items.next(),
                Step::SeekTo(to) if to.as_slice() > key => items.seek(&to),
                Step::SeekTo(_) => items.next(),
                Step::Stop => return Ok(()),
            }
        }
        Ok(items.status()?)
    }

    /// Whether any key of `family` starts with `prefix`.
    ///
    /// # Errors
    /// A RocksDB read error.
    pub fn any_prefixed(&self, family: &str, prefix: &[u8]) -> Result<bool> {
        let mode = IteratorMode::From(prefix, rocksdb::Direction::Forward);
        match self.db.iterator_cf(self.family(family), mode).next() {
            Some(item) => Ok(item?.0.starts_with(prefix)),
            None => Ok(false),
        }
    }

    /// The distinct first `length` bytes of the keys of `family`, in order: one seek per
    /// prefix found, whatever the number of keys under each.
    ///
    /// # Errors
    /// A RocksDB read error.
    pub fn prefixes(&self, family: &str, length: usize) -> Result<Vec<Vec<u8>>> {
        let mut found = Vec::new();
        let mut from = Vec::new();
        loop {
            let mode = IteratorMode::From(&from, rocksdb::Direction::Forward);
            let Some(item) = self.db.iterator_cf(self.family(family), mode).next() else {
                return Ok(found);
            };
            let (key, _) = item?;
            if key.len() < length {
                // A key shorter than the prefix is one of its own; the next comes after it.
                from = [&key[..], &[0]].concat();
                found.push(key.to_vec());
            } else {
                let prefix = key[..length].to_vec();
                from = prefix_end(&prefix);
                found.push(prefix);
            }
        }
    }

    /// Bytes the database occupies on disk (SST and log files).
    pub fn size_on_disk(&self) -> u64 {
        dir_size(&self.path)
    }

    /// Flushes memtables to disk (used before measuring size).
    ///
    /// # Errors
    /// A RocksDB error.
    pub fn flush(&self) -> Result<()> {
        for name in cf::ALL {
            self.db.flush_cf(self.family(name))?;
        }
        Ok(())
    }

    /// Compacts every family (used after bulk loads).
    pub fn compact(&self) {
        for name in cf::ALL {
            self.db
                .compact_range_cf(self.family(name), None::<&[u8]>, None::<&[u8]>);
        }
    }
}

/// The first key after every key that starts with `prefix` (for a range delete). Prefixes
/// here are store tokens and never all `0xff`; such a prefix gets a longer end key that still
/// sorts after all its keys of realistic length.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    let mut end = prefix.to_vec();
    end.extend_from_slice(&[0xff; 4096]);
    end
}

fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Where [`Db::scan_prefixed`] goes after an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// To the next entry.
    Next,
    /// To the first entry at or after this key (the next one if it is not past the entry).
    SeekTo(Vec<u8>),
    /// Nowhere: the scan ends.
    Stop,
}

/// Encodes a value as a format byte followed by its JSON.
pub(crate) fn encode_json<T: serde::Serialize>(format: u8, value: &T) -> Vec<u8> {
    let mut bytes = vec![format];
    serde_json::to_writer(&mut bytes, value).expect("stored values serialise");
    bytes
}

/// Decodes a value [`encode_json`] wrote with `format`; `what` names it in errors.
///
/// # Errors
/// [`Error::Corrupt`] for another format byte or JSON that does not decode.
pub(crate) fn decode_json<T: serde::de::DeserializeOwned>(
    family: &'static str,
    format: u8,
    what: &dyn std::fmt::Display,
    bytes: &[u8],
) -> Result<T> {
    let corrupt = |reason: String| Error::Corrupt { family, reason };
    let Some((&found, json)) = bytes.split_first() else {
        return Err(corrupt(format!("{what} is empty")));
    };
    if found != format {
        return Err(corrupt(format!(
            "{what} has format {found}, expected {format}"
        )));
    }
    serde_json::from_slice(json).map_err(|e| corrupt(format!("{what}: {e}")))
}

/// Decodes a big-endian u32 value.
///
/// # Errors
/// [`Error::Corrupt`] when the value is not four bytes.
pub(crate) fn decode_u32(family: &'static str, bytes: &[u8]) -> Result<u32> {
    let array: [u8; 4] = bytes.try_into().map_err(|_| Error::Corrupt {
        family,
        reason: format!("expected 4 bytes, found {}", bytes.len()),
    })?;
    Ok(u32::from_be_bytes(array))
}

/// The key of a posting list: `facet \0 term`.
pub(crate) fn posting_key(facet: &str, term: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(facet.len() + term.len() + 1);
    key.extend_from_slice(facet.as_bytes());
    key.push(0);
    key.extend_from_slice(term.as_bytes());
    key
}

/// Splits a posting key back into facet and term.
///
/// # Errors
/// [`Error::Corrupt`] when the key has no separator or is not UTF-8.
pub(crate) fn split_posting_key(key: &[u8]) -> Result<(&str, &str)> {
    let corrupt = |reason: &str| Error::Corrupt {
        family: cf::POSTINGS,
        reason: reason.to_string(),
    };
    let pos = key
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| corrupt("key without separator"))?;
    let facet = std::str::from_utf8(&key[..pos]).map_err(|_| corrupt("facet not UTF-8"))?;
    let term = std::str::from_utf8(&key[pos + 1..]).map_err(|_| corrupt("term not UTF-8"))?;
    Ok((facet, term))
}

/// The key of one dataset version entry: `dataset key \0 id`.
pub(crate) fn dataset_entry_key(dataset: &str, id: u32) -> Vec<u8> {
    let mut key = dataset_prefix(dataset);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// The prefix of all version entries of a dataset.
pub(crate) fn dataset_prefix(dataset: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(dataset.len() + 5);
    key.extend_from_slice(dataset.as_bytes());
    key.push(0);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_schema_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path()).unwrap();
            let mut batch = Batch::default();
            batch.put(cf::META, meta::SCHEMA_VERSION, 99u32.to_be_bytes());
            db.write(batch).unwrap();
        }
        let err = Db::open(dir.path())
            .err()
            .expect("schema 99 must be refused");
        assert!(
            matches!(err, Error::SchemaVersion { found: 99, .. }),
            "{err}"
        );
    }

    #[test]
    fn writes_are_counted_by_each_family_they_touch() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let (stores, keys) = (db.writes(cf::STORES), db.writes(cf::KEYS));
        let mut batch = Batch::default();
        batch.put(cf::STORES, b"a".to_vec(), b"1".to_vec());
        batch.put(cf::STORES, b"b".to_vec(), b"2".to_vec());
        db.write(batch).unwrap();
        assert_eq!(
            (db.writes(cf::STORES), db.writes(cf::KEYS)),
            (stores.map(|n| n + 1), keys)
        );
        let mut batch = Batch::default();
        batch.delete_prefixed(cf::KEYS, b"a");
        batch.delete(cf::STORES, b"a".to_vec());
        db.write(batch).unwrap();
        assert_eq!(
            (db.writes(cf::STORES), db.writes(cf::KEYS)),
            (stores.map(|n| n + 2), keys.map(|n| n + 1))
        );
        db.write(Batch::default()).unwrap();
        assert_eq!(
            (db.writes(cf::STORES), db.writes(cf::KEYS)),
            (stores.map(|n| n + 2), keys.map(|n| n + 1))
        );
    }

    #[test]
    fn prefixes_are_found_once_each_whatever_lies_under_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut batch = Batch::default();
        for key in [
            &b"ab"[..],
            b"ab\x00",
            b"ab\xff\xff",
            b"ac1",
            b"ac2",
            b"\xff\xff",
            b"\xff\xffz",
            b"\xff",
        ] {
            batch.put(cf::KEYS, key.to_vec(), b"".to_vec());
        }
        // A range deleted: nothing of it is found.
        batch.put(cf::KEYS, b"ad1".to_vec(), b"".to_vec());
        db.write(batch).unwrap();
        let mut batch = Batch::default();
        batch.delete_prefixed(cf::KEYS, b"ad");
        db.write(batch).unwrap();
        // A key shorter than the prefix is a prefix of its own.
        assert_eq!(
            db.prefixes(cf::KEYS, 2).unwrap(),
            [&b"ab"[..], b"ac", b"\xff", b"\xff\xff"]
        );
        assert!(db.prefixes(cf::MANIFESTS, 16).unwrap().is_empty());
    }

    #[test]
    fn posting_keys_round_trip() {
        let key = posting_key("project", "cmip6");
        assert_eq!(split_posting_key(&key).unwrap(), ("project", "cmip6"));
    }

    #[test]
    fn batches_span_families() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut batch = Batch::default();
        batch.put(cf::FILES, b"/a".to_vec(), 1u32.to_be_bytes());
        batch.put(cf::RECORDS, 1u32.to_be_bytes(), b"x".to_vec());
        db.write(batch).unwrap();
        assert_eq!(
            db.get(cf::RECORDS, &1u32.to_be_bytes()).unwrap().unwrap(),
            b"x"
        );
        assert_eq!(
            db.get(cf::FILES, b"/a").unwrap().unwrap(),
            1u32.to_be_bytes()
        );
    }
}
