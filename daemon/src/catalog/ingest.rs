//! Writing records: one atomic batch per call, posting deltas instead of list rewrites, and the
//! newest-version flags of every dataset the batch touches recomputed in the same batch.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::db::{self, Batch, Columns, Db, PostingDelta, cf, meta};
use crate::error::{Error, Result};

use super::facet;
use super::index::{Change, LATEST};
use super::record::Record;

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
        self.change.upserts.push((id, record.file.clone(), columns));
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

    fn commit(mut self) -> Result<Change> {
        self.settle_latest()?;
        for ((facet, term), delta) in &self.change.postings {
            self.batch
                .merge_postings(db::posting_key(facet, term), delta);
        }
        self.db.write(self.batch)?;
        Ok(self.change)
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

/// Writes records in one atomic batch; a later record of the same file wins.
///
/// # Errors
/// A store error; then nothing of the batch is written.
pub(crate) fn write_records(db: &Db, records: &[Record]) -> Result<(Change, WriteCounts)> {
    let mut last_of_file: HashMap<&str, usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        last_of_file.insert(r.file.as_str(), i);
    }
    let records: Vec<&Record> = records
        .iter()
        .enumerate()
        .filter(|(i, r)| last_of_file[r.file.as_str()] == *i)
        .map(|(_, r)| r)
        .collect();
    let file_keys: Vec<Vec<u8>> = records.iter().map(|r| r.file.as_bytes().to_vec()).collect();
    let existing_ids = db.multi_get(cf::FILES, &file_keys)?;
    let existing_ids: Vec<Option<u32>> = existing_ids
        .iter()
        .map(|v| {
            v.as_deref()
                .map(|b| db::decode_u32(cf::FILES, b))
                .transpose()
        })
        .collect::<Result<_>>()?;
    let old_keys: Vec<Vec<u8>> = existing_ids
        .iter()
        .flatten()
        .map(|id| id.to_be_bytes().to_vec())
        .collect();
    let mut old_records = db.multi_get(cf::RECORDS, &old_keys)?.into_iter();

    let mut next_id = match db.get(cf::META, meta::NEXT_ID)? {
        Some(v) => db::decode_u32(cf::META, &v)?,
        None => 0,
    };
    let mut writer = Writer::new(db);
    let mut counts = WriteCounts::default();
    for (record, existing) in records.iter().zip(existing_ids) {
        let id = match existing {
            Some(id) => {
                if let Some(old) = old_records.next().flatten() {
                    writer.unindex(id, &decode_record(&old)?);
                }
                counts.replaced += 1;
                id
            }
            None => {
                let id = next_id;
                next_id = next_id
                    .checked_add(1)
                    .ok_or_else(|| Error::invalid("the catalogue is full (2^32 records)"))?;
                writer
                    .batch
                    .put(cf::FILES, record.file.as_bytes().to_vec(), id.to_be_bytes());
                counts.added += 1;
                id
            }
        };
        writer.index(id, record);
    }
    writer
        .batch
        .put(cf::META, meta::NEXT_ID, next_id.to_be_bytes());
    Ok((writer.commit()?, counts))
}

/// Removes records by id in one atomic batch; ids that are not indexed are skipped.
///
/// # Errors
/// A store error; then nothing is removed.
pub(crate) fn remove_records(db: &Db, ids: &[u32]) -> Result<(Change, u64)> {
    let keys: Vec<Vec<u8>> = ids.iter().map(|id| id.to_be_bytes().to_vec()).collect();
    let stored = db.multi_get(cf::RECORDS, &keys)?;
    let mut writer = Writer::new(db);
    let mut removed = HashSet::new();
    for (id, value) in ids.iter().zip(stored) {
        let Some(value) = value else { continue };
        if !removed.insert(*id) {
            continue;
        }
        let record = decode_record(&value)?;
        writer.unindex(*id, &record);
        writer.batch.delete(cf::RECORDS, id.to_be_bytes());
        writer.batch.delete(cf::COLUMNS, id.to_be_bytes());
        writer
            .batch
            .delete(cf::FILES, record.file.as_bytes().to_vec());
        writer.change.removals.push(*id);
    }
    let count = removed.len() as u64;
    Ok((writer.commit()?, count))
}

#[cfg(test)]
mod tests {
    use super::*;

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
