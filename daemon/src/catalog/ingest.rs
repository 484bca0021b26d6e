//! Writing records: one atomic batch per call, posting deltas instead of list rewrites, and the
//! newest-version flags of every dataset the batch touches recomputed in the same batch.
//!
//! A record is found by its [`Identity`] (location, and owner for user data) in the `files`
//! family. Ids of removed records are kept in a free set in the `meta` family, written in the
//! same batch, and handed out again before new ids: the index sizes its per-record columns by
//! the highest id, so without reuse memory would grow with every add/remove cycle.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::db::{self, Batch, Columns, Db, PostingDelta, cf, meta};
use crate::error::{Error, Result};

use super::facet;
use super::index::{Change, LATEST};
use super::record::{Identity, Record};

const RECORD_FORMAT: u8 = 1;

/// Counts of one write.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriteCounts {
    /// Records whose file was not indexed before.
    pub added: u64,
    /// Records that replaced an indexed record of the same file.
    pub replaced: u64,
}

/// How a dataset version entry marks its record.
#[derive(Debug, Clone, PartialEq)]
struct VersionEntry {
    version: String,
    explicit_latest: Option<bool>,
}

impl VersionEntry {
    fn encode(&self) -> Vec<u8> {
        let flag = match self.explicit_latest {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        let mut out = vec![flag];
        out.extend_from_slice(self.version.as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let corrupt = || Error::Corrupt {
            family: cf::DATASETS,
            reason: "bad version entry".into(),
        };
        let (flag, version) = bytes.split_first().ok_or_else(corrupt)?;
        let explicit_latest = match flag {
            0 => None,
            1 => Some(true),
            2 => Some(false),
            _ => return Err(corrupt()),
        };
        let version = String::from_utf8(version.to_vec()).map_err(|_| corrupt())?;
        Ok(VersionEntry {
            version,
            explicit_latest,
        })
    }
}

/// Encodes a record as a value of the records family.
pub(crate) fn encode_record(record: &Record) -> Vec<u8> {
    let mut out = vec![RECORD_FORMAT];
    serde_json::to_writer(&mut out, record).expect("a record always serialises");
    out
}

/// Decodes a value of the records family.
pub(crate) fn decode_record(bytes: &[u8]) -> Result<Record> {
    match bytes.split_first() {
        Some((&RECORD_FORMAT, json)) => serde_json::from_slice(json).map_err(|e| Error::Corrupt {
            family: cf::RECORDS,
            reason: e.to_string(),
        }),
        _ => Err(Error::Corrupt {
            family: cf::RECORDS,
            reason: "unknown record format".into(),
        }),
    }
}

/// Accumulates one batch: store writes plus the matching in-memory change.
struct Writer<'a> {
    db: &'a Db,
    batch: Batch,
    change: Change,
    /// Dataset entries written or deleted in this batch: key -> id -> entry (None = deleted).
    datasets: HashMap<String, BTreeMap<u32, Option<VersionEntry>>>,
    /// Records without a dataset: id -> latest.
    standalone: HashMap<u32, bool>,
}

impl<'a> Writer<'a> {
    fn new(db: &'a Db) -> Self {
        Writer {
            db,
            batch: Batch::default(),
            change: Change::default(),
            datasets: HashMap::new(),
            standalone: HashMap::new(),
        }
    }

    fn delta(&mut self, facet: &str, term: String) -> &mut PostingDelta {
        self.change
            .postings
            .entry((facet.to_string(), term))
            .or_default()
    }

    fn unindex(&mut self, id: u32, old: &Record) {
        for (name, values) in &old.facets {
            for value in values {
                self.delta(name, facet::term(name, value)).remove(id);
            }
        }
        if let Some(version) = &old.version {
            self.delta("version", facet::term("version", version))
                .remove(id);
        }
        if let Some(key) = old.dataset_key() {
            self.batch
                .delete(cf::DATASETS, db::dataset_entry_key(&key, id));
            self.datasets.entry(key).or_default().insert(id, None);
        } else {
            self.standalone.remove(&id);
        }
        self.delta(LATEST, String::new()).remove(id);
    }

    fn index(&mut self, id: u32, record: &Record) {
        for (name, values) in &record.facets {
            for value in values {
                self.delta(name, facet::term(name, value)).add(id);
            }
        }
        if let Some(version) = &record.version {
            self.delta("version", facet::term("version", version))
                .add(id);
        }
        match record.dataset_key() {
            Some(key) => {
                let entry = VersionEntry {
                    version: record.version.clone().unwrap_or_default(),
                    explicit_latest: record.latest,
                };
                self.batch.put(
                    cf::DATASETS,
                    db::dataset_entry_key(&key, id),
                    entry.encode(),
                );
                self.datasets
                    .entry(key)
                    .or_default()
                    .insert(id, Some(entry));
            }
            None => {
                self.standalone.insert(id, record.latest.unwrap_or(true));
            }
        }
        let columns = Columns {
            time: record.time_range().map(|t| (t.start, t.end)),
            bbox: record.bbox.map(|b| b.map(|v| v as f32)),
            uri: (record.uri != record.file).then(|| record.uri.clone()),
        };
        self.batch
            .put(cf::COLUMNS, id.to_be_bytes(), columns.encode());
        self.batch
            .put(cf::RECORDS, id.to_be_bytes(), encode_record(record));
        self.change.upserts.push((id, record.identity(), columns));
    }

    /// Recomputes the newest-version flags of every touched dataset.
    fn settle_latest(&mut self) -> Result<()> {
        let mut flags: Vec<(u32, bool)> = self.standalone.drain().collect();
        for (key, overlay) in std::mem::take(&mut self.datasets) {
            let mut entries: BTreeMap<u32, VersionEntry> = BTreeMap::new();
            self.db
                .for_each_prefixed(cf::DATASETS, &db::dataset_prefix(&key), |k, v| {
                    let id =
                        u32::from_be_bytes(k[k.len() - 4..].try_into().expect("4-byte id suffix"));
                    entries.insert(id, VersionEntry::decode(v)?);
                    Ok(())
                })?;
            for (id, entry) in overlay {
                match entry {
                    Some(e) => entries.insert(id, e),
                    None => entries.remove(&id),
                };
            }
            flags.extend(latest_flags(&entries));
        }
        for (id, latest) in flags {
            let delta = self.delta(LATEST, String::new());
            if latest {
                delta.add(id)
            } else {
                delta.remove(id)
            }
        }
        Ok(())
    }

    /// The finished batch and the change it makes to the index.
    fn finish(mut self) -> Result<(Batch, Change)> {
        self.settle_latest()?;
        for ((facet, term), delta) in &self.change.postings {
            self.batch
                .merge_postings(db::posting_key(facet, term), delta);
        }
        Ok((self.batch, self.change))
    }

    fn commit(self) -> Result<Change> {
        let db = self.db;
        let (batch, change) = self.finish()?;
        db.write(batch)?;
        Ok(change)
    }
}

/// Which records of one dataset are its newest version: explicit flags win; among the others,
/// every record carrying the greatest version.
fn latest_flags(entries: &BTreeMap<u32, VersionEntry>) -> Vec<(u32, bool)> {
    let newest = entries
        .values()
        .filter(|e| e.explicit_latest.is_none())
        .map(|e| e.version.as_str())
        .max_by(|a, b| compare_versions(a, b));
    entries
        .iter()
        .map(|(id, e)| {
            (
                *id,
                e.explicit_latest
                    .unwrap_or(Some(e.version.as_str()) == newest),
            )
        })
        .collect()
}

/// Orders versions such as `v20191108`, `20201108`, `v2`: numerically when both are digits
/// after an optional `v`, else as strings.
pub(crate) fn compare_versions(a: &str, b: &str) -> Ordering {
    fn bare(s: &str) -> &str {
        s.strip_prefix(['v', 'V']).unwrap_or(s)
    }
    let (x, y) = (bare(a), bare(b));
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if numeric(x) && numeric(y) {
        let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
        x.len().cmp(&y.len()).then_with(|| x.cmp(y))
    } else {
        x.cmp(y)
    }
}

/// Record ids handed out: the next never-used id and the set of ids freed by removals.
struct Ids {
    next: u32,
    free: roaring::RoaringBitmap,
}

impl Ids {
    fn read(db: &Db) -> Result<Self> {
        let next = match db.get(cf::META, meta::NEXT_ID)? {
            Some(v) => db::decode_u32(cf::META, &v)?,
            None => 0,
        };
        let free = match db.get(cf::META, meta::FREE_IDS)? {
            Some(v) => db::decode_postings(&v)?,
            None => roaring::RoaringBitmap::new(),
        };
        Ok(Ids { next, free })
    }

    /// A free id, the lowest first, else a new one.
    fn take(&mut self) -> Result<u32> {
        if let Some(id) = self.free.min() {
            self.free.remove(id);
            return Ok(id);
        }
        let id = self.next;
        self.next = self
            .next
            .checked_add(1)
            .ok_or(Error::CatalogueFull { capacity: 1 << 32 })?;
        Ok(id)
    }

    fn write(&self, batch: &mut Batch) {
        batch.put(cf::META, meta::NEXT_ID, self.next.to_be_bytes());
        batch.put(cf::META, meta::FREE_IDS, db::encode_postings(&self.free));
    }
}

/// Writes records in one atomic batch; a later record of the same identity wins.
///
/// # Errors
/// A store error; then nothing of the batch is written.
pub(crate) fn write_records(db: &Db, records: &[Record]) -> Result<(Change, WriteCounts)> {
    let identities: Vec<Identity> = records.iter().map(Record::identity).collect();
    let mut last_of: HashMap<&Identity, usize> = HashMap::new();
    for (i, identity) in identities.iter().enumerate() {
        last_of.insert(identity, i);
    }
    let (records, identities): (Vec<&Record>, Vec<&Identity>) = records
        .iter()
        .zip(&identities)
        .enumerate()
        .filter(|(i, (_, identity))| last_of[identity] == *i)
        .map(|(_, pair)| pair)
        .unzip();
    let existing_ids = existing(db, identities.iter().copied())?;
    let old_keys: Vec<Vec<u8>> = existing_ids
        .iter()
        .flatten()
        .map(|id| id.to_be_bytes().to_vec())
        .collect();
    let mut old_records = db.multi_get(cf::RECORDS, &old_keys)?.into_iter();

    let mut ids = Ids::read(db)?;
    let mut writer = Writer::new(db);
    let mut counts = WriteCounts::default();
    for ((record, identity), existing) in records.iter().zip(identities).zip(existing_ids) {
        let id = match existing {
            Some(id) => {
                if let Some(old) = old_records.next().flatten() {
                    writer.unindex(id, &decode_record(&old)?);
                }
                counts.replaced += 1;
                id
            }
            None => {
                let id = ids.take()?;
                writer.batch.put(
                    cf::FILES,
                    identity.as_str().as_bytes().to_vec(),
                    id.to_be_bytes(),
                );
                counts.added += 1;
                id
            }
        };
        writer.index(id, record);
    }
    ids.write(&mut writer.batch);
    Ok((writer.commit()?, counts))
}

/// The ids of the records with these identities, where they exist.
///
/// # Errors
/// A store error or a corrupt id.
pub(crate) fn existing<'a>(
    db: &Db,
    identities: impl Iterator<Item = &'a Identity>,
) -> Result<Vec<Option<u32>>> {
    let keys: Vec<Vec<u8>> = identities.map(|i| i.as_str().as_bytes().to_vec()).collect();
    db.multi_get(cf::FILES, &keys)?
        .iter()
        .map(|v| {
            v.as_deref()
                .map(|b| db::decode_u32(cf::FILES, b))
                .transpose()
        })
        .collect()
}

/// Removes records by id in one atomic batch; ids that are not indexed are skipped. Their
/// ids become free for later records.
///
/// # Errors
/// A store error; then nothing is removed.
pub(crate) fn remove_records(db: &Db, ids: &[u32]) -> Result<(Change, u64)> {
    let keys: Vec<Vec<u8>> = ids.iter().map(|id| id.to_be_bytes().to_vec()).collect();
    let stored = db.multi_get(cf::RECORDS, &keys)?;
    let mut free = Ids::read(db)?;
    let mut writer = Writer::new(db);
    let mut removed = HashSet::new();
    for (id, value) in ids.iter().zip(stored) {
        let Some(value) = value else { continue };
        if !removed.insert(*id) {
            continue;
        }
        let record = decode_record(&value)?;
        let identity = record.identity();
        writer.unindex(*id, &record);
        writer.batch.delete(cf::RECORDS, id.to_be_bytes());
        writer.batch.delete(cf::COLUMNS, id.to_be_bytes());
        writer
            .batch
            .delete(cf::FILES, identity.as_str().as_bytes().to_vec());
        writer.change.removals.push((*id, identity));
        free.free.insert(*id);
    }
    let count = removed.len() as u64;
    if count > 0 {
        free.write(&mut writer.batch);
    }
    Ok((writer.commit()?, count))
}

/// Brings a store written by an older schema up to [`db::SCHEMA_VERSION`] in one atomic
/// batch; a store that is current is left alone.
///
/// Version 1 keyed every record by its location alone, indexed owners lower-cased and grouped
/// user data into the catalogue's dataset versions. Version 2 keys user data by owner and
/// location, indexes owners exactly and versions user data per owner. Only user data changes:
/// each entry moves to its new key, terms and dataset, and the newest-version flags of the
/// datasets it leaves are recomputed, so catalogue records it hid are shown again.
///
/// # Errors
/// A store error or a corrupt record; then nothing is changed.
pub(crate) fn upgrade(db: &Db) -> Result<()> {
    if db.schema() == db::SCHEMA_VERSION {
        return Ok(());
    }
    let mut owned = roaring::RoaringBitmap::new();
    db.for_each_prefixed(cf::POSTINGS, &db::posting_key(facet::OWNER, ""), |_, v| {
        owned |= db::decode_postings(v)?;
        Ok(())
    })?;
    let ids: Vec<u32> = owned.iter().collect();
    let keys: Vec<Vec<u8>> = ids.iter().map(|id| id.to_be_bytes().to_vec()).collect();
    let mut writer = Writer::new(db);
    for (id, value) in ids.iter().zip(db.multi_get(cf::RECORDS, &keys)?) {
        let Some(value) = value else { continue };
        let record = decode_record(&value)?;
        let mut legacy = record.clone();
        for owner in legacy.facets.remove(facet::OWNER).unwrap_or_default() {
            writer
                .delta(facet::OWNER, owner.trim().to_lowercase())
                .remove(*id);
        }
        if let Some(key) = legacy.dataset_key() {
            writer
                .batch
                .delete(cf::DATASETS, db::dataset_entry_key(&key, *id));
            writer.datasets.entry(key).or_default().insert(*id, None);
        }
        writer
            .batch
            .delete(cf::FILES, record.file.as_bytes().to_vec());
        writer.batch.put(
            cf::FILES,
            record.identity().as_str().as_bytes().to_vec(),
            id.to_be_bytes(),
        );
        writer.index(*id, &record);
    }
    let (batch, _) = writer.finish()?;
    db.migrated(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 1 store (user data keyed by location, owners lower-cased, versioned together
    /// with the catalogue) is migrated when opened: the entry gets its own key, term and
    /// dataset, and the catalogue record it hid is the newest version again.
    #[test]
    fn version_1_stores_are_migrated() {
        use crate::catalog::{Catalog, Query};
        let dir = tempfile::tempdir().unwrap();
        let (catalogue_id, user_id, user) = {
            let db = Db::open(dir.path()).unwrap();
            let mut official = Record::new("/d/CMIP6/ua/gn/v20200101/ua.nc");
            official.version = Some("v20200101".into());
            let mut squat = Record::new("/d/CMIP6/ua/gn/v99999999/zz.nc");
            squat.version = Some("v99999999".into());
            squat.facets.insert("user".into(), vec!["JANE".into()]);
            write_records(&db, &[official.clone(), squat.clone()]).unwrap();
            let ids = existing(&db, [official.identity(), squat.identity()].iter()).unwrap();
            let (catalogue_id, user_id) = (ids[0].unwrap(), ids[1].unwrap());
            // Rewrite the user entry the way version 1 stored it.
            let mut batch = Batch::default();
            batch.delete(cf::FILES, squat.identity().as_str().as_bytes().to_vec());
            batch.put(
                cf::FILES,
                squat.file.as_bytes().to_vec(),
                user_id.to_be_bytes(),
            );
            let mut moved = PostingDelta::default();
            moved.remove(user_id);
            batch.merge_postings(db::posting_key("user", "JANE"), &moved);
            let mut old_term = PostingDelta::default();
            old_term.add(user_id);
            batch.merge_postings(db::posting_key("user", "jane"), &old_term);
            let new_key = squat.dataset_key().unwrap();
            let mut legacy = squat.clone();
            legacy.facets.remove("user");
            let old_key = legacy.dataset_key().unwrap();
            batch.delete(cf::DATASETS, db::dataset_entry_key(&new_key, user_id));
            batch.delete(cf::DATASETS, db::dataset_entry_key(&old_key, catalogue_id));
            for (id, version) in [(catalogue_id, "v20200101"), (user_id, "v99999999")] {
                let entry = VersionEntry {
                    version: version.into(),
                    explicit_latest: None,
                };
                batch.put(
                    cf::DATASETS,
                    db::dataset_entry_key(&old_key, id),
                    entry.encode(),
                );
            }
            let mut hidden = PostingDelta::default();
            hidden.remove(catalogue_id);
            batch.merge_postings(db::posting_key(LATEST, ""), &hidden);
            batch.put(cf::META, meta::SCHEMA_VERSION, 1u32.to_be_bytes());
            db.write(batch).unwrap();
            (catalogue_id, user_id, squat)
        };
        let db = std::sync::Arc::new(Db::open(dir.path()).unwrap());
        assert_eq!(db.schema(), 1);
        let catalog = Catalog::open(std::sync::Arc::clone(&db)).unwrap();
        assert_eq!(db.schema(), db::SCHEMA_VERSION);
        assert_eq!(
            existing(&db, [user.identity()].iter()).unwrap(),
            [Some(user_id)]
        );
        assert_eq!(db.get(cf::FILES, user.file.as_bytes()).unwrap(), None);
        let shown: Vec<u32> = catalog.select(&Query::default()).ids.iter().collect();
        assert_eq!(shown, [catalogue_id]);
        let mut mine = Query {
            source: crate::catalog::Source::UserData,
            ..Query::default()
        };
        mine.only_owner("JANE");
        assert_eq!(catalog.select(&mine).len(), 1);
        mine.only_owner("jane");
        assert_eq!(catalog.select(&mine).len(), 0);
    }

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(compare_versions("v20191108", "v20201108"), Ordering::Less);
        assert_eq!(compare_versions("v9", "v10"), Ordering::Less);
        assert_eq!(compare_versions("20201108", "v20201108"), Ordering::Equal);
        assert_eq!(compare_versions("beta", "alpha"), Ordering::Greater);
    }

    #[test]
    fn newest_version_wins_unless_flagged() {
        let entry = |v: &str, l: Option<bool>| VersionEntry {
            version: v.into(),
            explicit_latest: l,
        };
        let entries = BTreeMap::from([
            (1, entry("v1", None)),
            (2, entry("v2", None)),
            (3, entry("v2", None)),
            (4, entry("v1", Some(true))),
        ]);
        assert_eq!(
            latest_flags(&entries),
            vec![(1, false), (2, true), (3, true), (4, true)]
        );
    }
}
