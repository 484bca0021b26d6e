//! Zarr stores: the record of each store (sources, chunking, owner, public flag and expiry,
//! status and reason, timestamps), the token that names it, and who may read it.
//!
//! A store's token is a UUID v5 over its canonical request: the owner, the sources, the
//! aggregation options and the reduction options. So the same
//! request by the same user names the same store and is converted once; two users converting
//! one file get two stores, and neither learns of the other's. The sources of an aggregated
//! store count in request order, since the order of a concatenation is the order of its
//! sources; a store of one source has no order to count. Chunking options are recorded with the
//! store, not part of its token: whoever converts first chooses them, until a `reload`.
//!
//! A removed store's record stays, status 4 with its reason: its conversion count is what
//! keeps a later conversion of the same token (the same owner, sources and options) from
//! reusing an earlier one's ETags and the mount's inode generations.
//!
//! Records live in the `stores` column family (token bytes -> format byte + JSON). Creating or
//! reconverting a store writes its record and queues its conversion job in one batch (see
//! [`crate::jobs`]), so a request is never recorded without its job nor the other way round.

pub(crate) mod access;
pub(crate) mod cold;
mod html;
pub(crate) mod job;
pub(crate) mod read;
pub(crate) mod request;
pub(crate) mod share;
pub(crate) mod sweep;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::auth::Caller;
use crate::config::StoresConfig;
use crate::db::{self, Batch, Db, cf};
use crate::error::{Error, Missing, Result};
use crate::jobs::Queue;
use request::{Aggregation, Chunking, ConvertRequest, Reduction};

/// The job kind of a store's work (converting it, or deleting a removed store's data: see
/// [`job`]); its subject is the store's token. Job rows store it, so it stays `convert`.
pub const CONVERT: &str = "convert";

/// Format byte of a stored record: its JSON without its sources, which are stored once, in
/// the `store_sources` family (see [`StoreRecord::encode`]).
const FORMAT: u8 = 2;

/// Format byte of a record stored with its sources, as before format 2: still read, and
/// rewritten as format 2 when the stores are opened ([`Stores::open`]).
const FORMAT_WITH_SOURCES: u8 = 1;

/// Format byte of a store's stored sources (a JSON array).
const SOURCES_FORMAT: u8 = 1;

/// The namespace of store tokens (a UUID v5 of the project's name in the URL namespace).
fn namespace() -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, b"svc-nextgen/zarr-store")
}

/// The state of a store, with the integer codes `zarr-utils/status` reports (DECISIONS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Status {
    /// Converted: every key can be read.
    Ready = 0,
    /// The conversion failed; the reason says why.
    Failed = 1,
    /// Queued or being converted: metadata may already be readable.
    Preparing = 2,
    /// Archived on the cold tier: readable, the first read restores.
    Archived = 3,
    /// Expired or removed.
    Gone = 4,
}

impl From<Status> for u8 {
    fn from(status: Status) -> u8 {
        status as u8
    }
}

impl TryFrom<u8> for Status {
    type Error = String;

    fn try_from(code: u8) -> std::result::Result<Self, String> {
        Ok(match code {
            0 => Status::Ready,
            1 => Status::Failed,
            2 => Status::Preparing,
            3 => Status::Archived,
            4 => Status::Gone,
            other => return Err(format!("unknown store status {other}")),
        })
    }
}

/// One store as it is recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreRecord {
    /// The store's name.
    #[serde(skip, default = "Uuid::nil")]
    pub token: Uuid,
    /// The user who asked for it.
    pub owner: String,
    /// Absolute paths of its sources, in request order. Stored apart from the rest of the
    /// record, and shared: a record is read on every chunk request and every open through
    /// the mount, and an aggregation has up to a thousand sources.
    #[serde(default)]
    pub sources: Arc<[String]>,
    /// How its arrays are chunked.
    pub chunking: Chunking,
    /// How its sources are combined; `None`: it is one source converted as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation: Option<Aggregation>,
    /// How it is reduced in time; `None`: not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduction: Option<Reduction>,
    /// Until when (Unix seconds) anyone may read it; `None`: only its owner and admins.
    pub public_until: Option<i64>,
    /// Its state.
    pub status: Status,
    /// Why it is in that state (empty when ready or preparing).
    pub reason: String,
    /// When it was first requested (Unix seconds).
    pub created: i64,
    /// When its status last changed (Unix seconds).
    pub updated: i64,
    /// When a user last read one of its keys (Unix seconds; 0: not since it was recorded).
    /// Kept up to date by the sweep, not on every read.
    #[serde(default)]
    pub last_read: i64,
    /// Which conversion of the store this is: one more than the last each time it is
    /// (re)converted. What was read of one conversion (the mount's inodes and cached pages,
    /// an archive run's plan) is checked against it, never against `updated`, which two
    /// conversions finishing within one second (or a clock set back) share. Records written
    /// before it was kept read as 0, their conversion until the next.
    #[serde(default)]
    pub conversion: u64,
    /// What its files take on the hot tier (in blocks, [`crate::convert::write::store_on_disk`]),
    /// as its last conversion left them: set when a conversion ends (0 when it failed, and
    /// for stores converted before this was kept), and 0 from when a conversion starts
    /// (which removes the files first, and counts what it writes apart) and from when a
    /// removed store's data is deleted. What counts against its owner's
    /// `stores.max_user_mib`.
    #[serde(default)]
    pub bytes: u64,
}

impl StoreRecord {
    /// The stored form, without the sources (stored once, apart: [`encode_sources`]).
    /// Status 3 (archived) is never stored: it is derived from the tier state when the
    /// record is read ([`Stores::record`]), so it is stored as ready.
    fn encode(&self) -> Vec<u8> {
        let mut value = serde_json::to_value(self).expect("a store record serialises");
        if self.status == Status::Archived {
            value["status"] = serde_json::to_value(Status::Ready).expect("a status serialises");
        }
        if let Some(fields) = value.as_object_mut() {
            fields.remove("sources");
        }
        db::encode_json(FORMAT, &value)
    }

    /// The stored record of `token`; its sources are empty unless it is of
    /// [`FORMAT_WITH_SOURCES`] (see [`Stores::record`]).
    fn decode(token: Uuid, value: &[u8]) -> Result<Self> {
        let what = format!("store {token}");
        let format = match value.first() {
            Some(&FORMAT_WITH_SOURCES) => FORMAT_WITH_SOURCES,
            _ => FORMAT,
        };
        let mut record: StoreRecord = db::decode_json(cf::STORES, format, &what, value)?;
        record.token = token;
        Ok(record)
    }

    /// The record as JSON, with its token, for operators.
    pub fn summary(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).expect("a store record serialises");
        value["token"] = serde_json::Value::String(self.token.to_string());
        value
    }

    /// Whether its conversion finished and every key can be read (ready, or archived).
    pub fn is_complete(&self) -> bool {
        matches!(self.status, Status::Ready | Status::Archived)
    }

    /// Whether it is complete and still its `conversion`: what was read of that conversion
    /// is still what it serves.
    pub fn is_complete_conversion(&self, conversion: u64) -> bool {
        self.is_complete() && self.conversion == conversion
    }

    /// Whether `caller` (none: an anonymous request) may read the store at `now`: its owner
    /// and admins always, anyone while it is public.
    pub fn readable_by(&self, caller: Option<&Caller>, now: i64) -> bool {
        let public = self.public_until.is_some_and(|until| now < until);
        public || caller.is_some_and(|c| c.admin || c.user == self.owner)
    }
}

/// The stored form of a store's sources.
fn encode_sources(sources: &[String]) -> Vec<u8> {
    db::encode_json(SOURCES_FORMAT, &sources)
}

/// Whether converting `later` would do what the run of `run` that started at `started`
/// did: the same sources, none changed since, with the same options.
fn same_work(later: &StoreRecord, run: &StoreRecord, started: std::time::SystemTime) -> bool {
    later.sources == run.sources
        && later.chunking == run.chunking
        && later.aggregation == run.aggregation
        && later.reduction == run.reduction
        && run.sources.iter().all(|source| {
            std::fs::metadata(source)
                .and_then(|m| m.modified())
                .is_ok_and(|modified| modified < started)
        })
}

/// The store token `text` names, written as the service writes tokens (lower-case,
/// hyphenated, as store URLs and the mount name them); `None` for anything else, another
/// spelling of the same UUID included, which names no store.
pub fn parse_token(text: &str) -> Option<Uuid> {
    Uuid::try_parse(text)
        .ok()
        .filter(|token| token.to_string() == text)
}

/// The token of the store `owner` gets for `sources`.
pub(crate) fn token(
    owner: &str,
    sources: &[String],
    aggregation: Option<&Aggregation>,
    reduction: Option<&Reduction>,
) -> Uuid {
    let mut ordered: Vec<&str> = sources.iter().map(String::as_str).collect();
    if aggregation.is_none() {
        ordered.sort_unstable();
    }
    let canonical = serde_json::json!({
        "owner": owner,
        "sources": ordered,
        "aggregate": aggregation,
        "reduce": reduction,
    });
    Uuid::new_v5(&namespace(), canonical.to_string().as_bytes())
}

/// The sources of stores read lately, by store: they never change (the token is made from
/// them). Weighed by their bytes, at most [`KEPT_SOURCES_BYTES`] in all.
type KeptSources = quick_cache::sync::Cache<Uuid, Arc<[String]>, SourcesLength>;

/// The most bytes of sources kept (an aggregation of 1,000 sources is some 100 KiB).
const KEPT_SOURCES_BYTES: u64 = 32 << 20;

/// Weighs a store's sources by their bytes.
#[derive(Clone)]
struct SourcesLength;

impl quick_cache::Weighter<Uuid, Arc<[String]>> for SourcesLength {
    fn weight(&self, _token: &Uuid, sources: &Arc<[String]>) -> u64 {
        sources.iter().map(|source| source.len() as u64 + 24).sum()
    }
}

/// Decoded records by store, each with the count of writes to the records when it was read,
/// weighed by their bytes (their sources, held by them, among them).
type DecodedRecords = quick_cache::sync::Cache<Uuid, (u64, Arc<StoreRecord>), RecordLength>;

/// The most bytes of decoded records kept by [`Stores::shared_record`]: those of the stores
/// being read (a record is some 1 KiB, and an aggregation's sources some 100 KiB).
const DECODED_RECORDS_BYTES: u64 = 32 << 20;

/// Weighs a decoded record by its bytes, about.
#[derive(Clone)]
struct RecordLength;

impl quick_cache::Weighter<Uuid, (u64, Arc<StoreRecord>)> for RecordLength {
    fn weight(&self, token: &Uuid, (_, record): &(u64, Arc<StoreRecord>)) -> u64 {
        1024 + SourcesLength.weight(token, &record.sources)
    }
}

/// The stores of the daemon.
pub struct Stores {
    db: Arc<Db>,
    queue: Arc<Queue>,
    config: StoresConfig,
    /// The hot tier: one directory per store below it.
    root: PathBuf,
    /// The metadata of stores being read.
    cache: read::ReadCache,
    /// Signs share URLs.
    share_key: share::ShareKey,
    /// Reads since the last sweep.
    reads: sweep::Reads,
    /// The sources of stores read lately.
    sources: KeptSources,
    /// The records of stores read lately through [`Stores::shared_record`], as decoded, each
    /// with the count of writes to the records ([`Db::writes`]) when it was read.
    decoded: DecodedRecords,
    /// Held by each read, change and write back of a store's record by a request or the
    /// sweep, so that none writes back a record read before another's write (a reload's
    /// new conversion put back as the one before it, say).
    records: parking_lot::Mutex<()>,
    /// Chunks and metadata being computed on demand.
    on_demand: read::OnDemand,
    /// The daemon's stop ([`Queue::stopping`]): readers' waits end with it.
    stopping: crate::jobs::Stop,
    /// Key listings, blob manifests and the cold tier.
    pub(crate) tier: Arc<crate::tier::Tier>,
    /// What each owner's stores take: what their records count, and what their conversions
    /// running now have written ([`crate::convert::write::Allowance`]).
    ledger: Arc<crate::convert::write::Ledger>,
}

/// A pre-signed share of a store (spec 2, endpoint 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The signature: the URL path segment before the store.
    pub sig: String,
    /// The store.
    pub token: Uuid,
    /// When the share ends, in Unix seconds.
    pub expires: i64,
}

impl Stores {
    /// The stores recorded in `db`, converted through `queue` into directories below `root`,
    /// shared with the key in `share_key` (created on first use).
    ///
    /// with `tier` for their listings and archived blobs. What a crash interrupted on the
    /// cold tier is repaired first ([`crate::tier::Tier::repair`]).
    ///
    /// # Errors
    /// The share key cannot be read or created; the repair cannot read or write the store.
    pub fn open(
        db: Arc<Db>,
        queue: Arc<Queue>,
        config: StoresConfig,
        root: PathBuf,
        share_key: &std::path::Path,
        tier: Arc<crate::tier::Tier>,
    ) -> Result<Self> {
        // Made now, not by the first conversion: the bounds set `auto` are sized from its
        // file system (`statvfs`), and none would hold until it exists. Only when nothing is
        // there: a link to a hot tier not mounted yet stays as it is.
        if std::fs::symlink_metadata(&root).is_err() {
            std::fs::create_dir_all(&root)
                .map_err(|e| Error::io(format!("create {}", root.display()), e))?;
        }
        let stopping = queue.stopping();
        let stores = Stores {
            db,
            queue,
            config,
            root,
            cache: read::ReadCache::default(),
            share_key: share::ShareKey::open(share_key)?,
            reads: sweep::Reads::default(),
            // The item estimate sizes the cache's tables, and its shards (at most one per 32
            // items; an item heavier than a shard's share is never kept): at most 8, that an
            // aggregation's 1,000 long paths are kept on any machine.
            sources: quick_cache::sync::Cache::with_weighter(
                256,
                KEPT_SOURCES_BYTES,
                SourcesLength,
            ),
            decoded: quick_cache::sync::Cache::with_weighter(
                4096,
                DECODED_RECORDS_BYTES,
                RecordLength,
            ),
            records: parking_lot::Mutex::default(),
            on_demand: read::OnDemand::default(),
            stopping,
            tier,
            ledger: Arc::default(),
        };
        let moved = stores.store_sources_apart()?;
        if moved > 0 {
            tracing::info!(
                records = moved,
                "store records rewritten with their sources apart"
            );
        }
        let (known, ready) = stores.known_and_ready()?;
        stores.tier.repair(&known, &ready, |token| {
            let record = stores
                .record(token)?
                .ok_or_else(|| Error::NotFound(Missing::Store(token.to_string())))?;
            stores.listing(&record)
        })?;
        Ok(stores)
    }

    /// The stores the database records, and those of them that are ready (complete); counts
    /// what each owner's stores take in the ledger.
    fn known_and_ready(&self) -> Result<(std::collections::HashSet<Uuid>, Vec<Uuid>)> {
        let records = self.list_bare()?;
        // What each owner's stores take, kept up from here as records change.
        for record in &records {
            self.ledger.count(&record.owner, record.bytes);
        }
        let known = records.iter().map(|record| record.token).collect();
        let ready = records
            .iter()
            .filter(|record| record.is_complete())
            .map(|record| record.token)
            .collect();
        Ok((known, ready))
    }

    /// A share of the store `token` that `caller` may read, valid for `ttl_seconds` from
    /// `now` (60 to `stores.max_ttl_seconds`); shared by someone other than its owner or an
    /// admin (a public store), only until it stops being public.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a `ttl_seconds` out of range; as [`Stores::readable`],
    /// and [`Error::NotFound`] for a store that is gone.
    pub fn share(&self, caller: &Caller, token: Uuid, ttl_seconds: u64, now: i64) -> Result<Share> {
        let max = self.config.max_ttl_seconds;
        if !(request::MIN_TTL_SECONDS..=max).contains(&ttl_seconds) {
            return Err(Error::invalid(
                "ttl_seconds",
                crate::error::Fault::Refused,
                format!(
                    "Option 'ttl_seconds' must be from {} to {max}, got {ttl_seconds}.",
                    request::MIN_TTL_SECONDS
                ),
            ));
        }
        let record = self.readable(Some(caller), token, now)?;
        if record.status == Status::Gone {
            return Err(Error::NotFound(Missing::Store(token.to_string())));
        }
        let mut expires = now.saturating_add_unsigned(ttl_seconds);
        // Anyone may read a public store while it is public, and share it, but not for
        // longer: the owner chose how long strangers may read it.
        if !caller.admin && caller.user != record.owner {
            expires = expires.min(record.public_until.unwrap_or(now));
        }
        Ok(Share {
            sig: self.share_key.sign(token, expires),
            token,
            expires,
        })
    }

    /// The bytes of `key` of the store `token` through the share signature `sig`: read as
    /// the store's owner would, as [`Stores::read`].
    ///
    /// # Errors
    /// [`Error::ShareDenied`] for a signature that is not valid or has expired;
    /// [`Error::NotFound`] for a store that is gone; as [`Stores::read`].
    pub fn read_shared(
        &self,
        sig: &str,
        token: Uuid,
        key: &str,
        now: i64,
        wait: std::time::Duration,
    ) -> Result<read::KeyBytes> {
        self.share_key.verify(sig, token, now)?;
        let record = self
            .shared_record(token)?
            .ok_or_else(|| Error::NotFound(Missing::Store(token.to_string())))?;
        let caller = Caller {
            user: record.owner.clone(),
            admin: false,
        };
        self.read(Some(&caller), token, key, now, wait)
    }

    /// The first source of a store, opened and checked again for its owner (see
    /// [`access::check_opened`]): the conversion of a store of one source and chunks
    /// computed on demand read it.
    ///
    /// # Errors
    /// A reason naming the file: it cannot be opened, is not a regular file, or its owner may
    /// not read it (now).
    pub(crate) fn open_source(
        &self,
        record: &StoreRecord,
    ) -> std::result::Result<crate::convert::Source, String> {
        self.open_path(&record.owner, &record.sources[0])
    }

    /// Every source of a store, opened and checked again for its owner, in order.
    ///
    /// # Errors
    /// As [`Stores::open_source`], for the first source that fails.
    pub(crate) fn open_sources(
        &self,
        record: &StoreRecord,
    ) -> std::result::Result<Vec<crate::convert::Source>, String> {
        record
            .sources
            .iter()
            .map(|path| self.open_path(&record.owner, path))
            .collect()
    }

    fn open_path(
        &self,
        owner: &str,
        path: &str,
    ) -> std::result::Result<crate::convert::Source, String> {
        let source = crate::convert::Source::open(std::path::Path::new(path))?;
        access::check_opened(owner, &source, &self.config.allowed_roots)
            .map_err(|e| e.to_string())?;
        Ok(source)
    }

    /// The directory of a store on the hot tier.
    pub fn dir(&self, token: Uuid) -> PathBuf {
        self.root.join(token.to_string())
    }

    /// The record of a store, whoever asks, as it is read: with its sources (stored apart,
    /// see [`Stores::with_sources`]), and a ready store with an archived blob is status 3
    /// (archived), which is never stored ([`StoreRecord::encode`]).
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub fn record(&self, token: Uuid) -> Result<Option<StoreRecord>> {
        self.record_bare(token)?
            .map(|record| self.with_sources(record, true))
            .transpose()
    }

    /// As [`Stores::record`], shared: decoded once and kept while no record is written, so
    /// that what reads a store (each open of a chunk through the mount, each key read) does
    /// not read and decode its record again. A record written since, or being written, is
    /// read again; one whose write starts just after this looked is seen as it was, as by a
    /// read an instant earlier, so what changes a record reads it with [`Stores::record`].
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub fn shared_record(&self, token: Uuid) -> Result<Option<Arc<StoreRecord>>> {
        // Counted before the read: a write applied after it, or under way, makes the record
        // read stale, and the count differs.
        let writes = self.db.writes(cf::STORES);
        let stored = match self.decoded.get(&token) {
            Some((read_at, record)) if writes.is_some_and(|writes| writes == read_at) => record,
            _ => {
                let Some(record) = self.stored(token)? else {
                    return Ok(None);
                };
                let record = Arc::new(self.with_sources(record, true)?);
                if let Some(writes) = writes {
                    self.decoded.insert(token, (writes, Arc::clone(&record)));
                }
                record
            }
        };
        // Its status as read now: the blobs of a store are archived and restored without a
        // write to its record.
        let status = self.status_as_read(&stored);
        Ok(Some(if status == stored.status {
            stored
        } else {
            Arc::new(StoreRecord {
                status,
                ..(*stored).clone()
            })
        }))
    }

    /// As [`Stores::record`], without its sources ([`Stores::decode_bare`]).
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub(crate) fn record_bare(&self, token: Uuid) -> Result<Option<StoreRecord>> {
        Ok(self.stored(token)?.map(|record| self.as_read(record)))
    }

    /// The record of store `token` as it is stored: without its sources, and its status as
    /// written (never archived, see [`Stores::as_read`]).
    fn stored(&self, token: Uuid) -> Result<Option<StoreRecord>> {
        self.db
            .get(cf::STORES, token.as_bytes())?
            .map(|value| StoreRecord::decode(token, &value))
            .transpose()
    }

    /// A stored record as it is read, without reading the sources (stored apart): they are
    /// empty, unless stored with the record ([`FORMAT_WITH_SOURCES`]). For records read in
    /// bulk by what does not look at their sources (the sweep, the start, the mount's root,
    /// the archive's candidates): an aggregation's are some 100 KiB. Writing such a record
    /// back loses nothing, as a record is always stored without its sources.
    fn decode_bare(&self, token: Uuid, value: &[u8]) -> Result<StoreRecord> {
        Ok(self.as_read(StoreRecord::decode(token, value)?))
    }

    /// `record` (read bare) with its sources; those read are kept for the next read of the
    /// record when `keep` (a record read for a request), not when it is one of many listed
    /// (which would push out of the cache the sources of the stores being read).
    fn with_sources(&self, mut record: StoreRecord, keep: bool) -> Result<StoreRecord> {
        if record.sources.is_empty() {
            record.sources = self.sources_of(record.token, keep)?;
        }
        Ok(record)
    }

    /// The sources of store `token`, as stored with its first record; kept for the next
    /// read when `keep`.
    fn sources_of(&self, token: Uuid, keep: bool) -> Result<Arc<[String]>> {
        if let Some(sources) = self.sources.get(&token) {
            return Ok(sources);
        }
        let what = format!("the sources of store {token}");
        let value = self
            .db
            .get(cf::STORE_SOURCES, token.as_bytes())?
            .ok_or_else(|| Error::Corrupt {
                family: cf::STORE_SOURCES,
                reason: format!("{what} are missing"),
            })?;
        let sources: Vec<String> =
            db::decode_json(cf::STORE_SOURCES, SOURCES_FORMAT, &what, &value)?;
        let sources: Arc<[String]> = sources.into();
        if keep {
            self.sources.insert(token, Arc::clone(&sources));
        }
        Ok(sources)
    }

    /// Rewrites the records stored with their sources ([`FORMAT_WITH_SOURCES`]) as records
    /// without them and their sources apart, each record with its sources in one write.
    /// Returns how many were rewritten.
    fn store_sources_apart(&self) -> Result<usize> {
        const RECORDS_PER_WRITE: usize = 512;
        let mut batch = Batch::default();
        let (mut moved, mut in_batch) = (0, 0);
        self.db.for_each(cf::STORES, |key, value| {
            if value.first() == Some(&FORMAT_WITH_SOURCES) {
                let record = StoreRecord::decode(token_of_key(key)?, value)?;
                batch.put(
                    cf::STORE_SOURCES,
                    key.to_vec(),
                    encode_sources(&record.sources),
                );
                batch.put(cf::STORES, key.to_vec(), record.encode());
                in_batch += 1;
            }
            if in_batch == RECORDS_PER_WRITE {
                self.db.write(std::mem::take(&mut batch))?;
                (moved, in_batch) = (moved + in_batch, 0);
            }
            Ok(true)
        })?;
        if in_batch > 0 {
            self.db.write(batch)?;
        }
        Ok(moved + in_batch)
    }

    /// `record` as it is read: status 3 when it is ready with an archived blob.
    fn as_read(&self, mut record: StoreRecord) -> StoreRecord {
        record.status = self.status_as_read(&record);
        record
    }

    /// The status of `record` as it is read: archived (3) when it is ready with an archived
    /// blob.
    fn status_as_read(&self, record: &StoreRecord) -> Status {
        if record.status == Status::Ready && self.tier.is_archived(record.token) {
            Status::Archived
        } else {
            record.status
        }
    }

    /// The record of a store that `caller` may read at `now`. A store the caller may not
    /// read is not found, exactly as one that does not exist, so a stranger learns nothing;
    /// without credentials, a store that is not public (or does not exist) needs them.
    ///
    /// # Errors
    /// [`Error::Unauthenticated`] without a caller, [`Error::NotFound`] with one, for an
    /// unknown or unreadable store; a read error.
    pub fn readable(
        &self,
        caller: Option<&Caller>,
        token: Uuid,
        now: i64,
    ) -> Result<Arc<StoreRecord>> {
        match self.shared_record(token)? {
            Some(record) if record.readable_by(caller, now) => Ok(record),
            _ if caller.is_none() => Err(Error::unauthenticated(
                "Not authenticated: the store is not public; send a bearer token",
            )),
            _ => Err(Error::NotFound(Missing::Store(token.to_string()))),
        }
    }

    /// Creates or reuses the stores of a request by `caller` at `now`: one per source, or one
    /// for all sources when the request aggregates them. A
    /// store that exists and is not failed or gone is reused as it is (a public request
    /// extends its public time) unless the request says `reload`; any other is recorded as
    /// preparing and its conversion queued. Blocking: it checks the sources' permissions.
    ///
    /// # Errors
    /// [`Error::SourceForbidden`] naming a source the caller may not read (then no store is
    /// created); a read or write error (then the stores already handled are kept).
    pub fn request(
        &self,
        caller: &Caller,
        request: &ConvertRequest,
        now: i64,
    ) -> Result<Vec<StoreRecord>> {
        access::check(&caller.user, &request.sources, &self.config.allowed_roots)?;
        let public_until = request
            .public
            .then(|| now.saturating_add_unsigned(request.ttl_seconds));
        let stores: Vec<Vec<String>> = match request.aggregation {
            Some(_) => vec![request.sources.clone()],
            None => request.sources.iter().map(|s| vec![s.clone()]).collect(),
        };
        let mut records = Vec::with_capacity(stores.len());
        for sources in stores {
            let token = token(
                &caller.user,
                &sources,
                request.aggregation.as_ref(),
                request.reduction.as_ref(),
            );
            let _record = self.records.lock();
            let existing = self.record(token)?;
            let reuse = !request.reload
                && existing.as_ref().is_some_and(|r| {
                    matches!(
                        r.status,
                        Status::Ready | Status::Preparing | Status::Archived
                    )
                });
            let mut batch = Batch::default();
            let record = match existing {
                Some(mut record) if reuse => {
                    if public_until > record.public_until {
                        record.public_until = public_until;
                        batch.put(cf::STORES, token.as_bytes().to_vec(), record.encode());
                        self.db.write(batch)?;
                    }
                    record
                }
                existing => {
                    let record = StoreRecord {
                        token,
                        owner: caller.user.clone(),
                        sources: sources.into(),
                        chunking: request.chunking,
                        aggregation: request.aggregation.clone(),
                        reduction: request.reduction.clone(),
                        public_until: public_until
                            .max(existing.as_ref().and_then(|r| r.public_until)),
                        status: Status::Preparing,
                        reason: String::new(),
                        created: existing.as_ref().map_or(now, |r| r.created),
                        updated: now,
                        last_read: existing.as_ref().map_or(0, |r| r.last_read),
                        conversion: existing.as_ref().map_or(1, |r| r.conversion + 1),
                        // Its files stay until its conversion starts.
                        bytes: existing.as_ref().map_or(0, |r| r.bytes),
                    };
                    // The same sources each time (the token is made from them).
                    batch.put(
                        cf::STORE_SOURCES,
                        token.as_bytes().to_vec(),
                        encode_sources(&record.sources),
                    );
                    batch.put(cf::STORES, token.as_bytes().to_vec(), record.encode());
                    self.queue
                        .enqueue(batch, CONVERT, &token.to_string(), &record.owner)?;
                    record
                }
            };
            records.push(record);
        }
        Ok(records)
    }

    /// Every store, in token order, with its token (for operators: `svcd store list`).
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub fn list(&self) -> Result<Vec<StoreRecord>> {
        self.list_bare()?
            .into_iter()
            .map(|record| self.with_sources(record, false))
            .collect()
    }

    /// What the owner of `record` may still write while it is converted (`None`: no
    /// bound): `stores.max_user_mib`, against what the owner's stores take: what their
    /// records count (what each store's files take, wherever its bytes are now, until they
    /// are removed) and what the owner's conversions running now write.
    pub(crate) fn allowance(
        &self,
        record: &StoreRecord,
    ) -> Option<Arc<crate::convert::write::Allowance>> {
        let most = crate::convert::write::Allowance::most(self.config.max_user_mib, &self.root);
        (most > 0).then(|| {
            Arc::new(crate::convert::write::Allowance::new(
                &record.owner,
                most,
                Arc::clone(&self.ledger),
            ))
        })
    }

    /// Records that the files of store `token` take `bytes` now, where its record is as
    /// `when` says: what the record counted before and counts now, which the caller hands to
    /// the ledger (as [`Stores::count`] does, or the conversion's allowance).
    ///
    /// # Errors
    /// A read or write error or a corrupt record.
    pub(crate) fn record_bytes(
        &self,
        token: Uuid,
        bytes: u64,
        when: impl FnOnce(&StoreRecord) -> bool,
    ) -> Result<(String, (u64, u64))> {
        let _record = self.records.lock();
        match self.record(token)? {
            Some(mut record) if when(&record) && record.bytes != bytes => {
                let before = std::mem::replace(&mut record.bytes, bytes);
                let mut batch = Batch::default();
                batch.put(cf::STORES, token.as_bytes().to_vec(), record.encode());
                self.db.write(batch)?;
                Ok((record.owner, (before, bytes)))
            }
            Some(record) => Ok((record.owner, (record.bytes, record.bytes))),
            None => Ok((String::new(), (0, 0))),
        }
    }

    /// Records that the files of store `token` are removed, where its record is as `when`
    /// says, and counts that in the ledger.
    ///
    /// # Errors
    /// A read or write error or a corrupt record.
    pub(crate) fn record_files_removed(
        &self,
        token: Uuid,
        when: impl FnOnce(&StoreRecord) -> bool,
    ) -> Result<()> {
        let (owner, change) = self.record_bytes(token, 0, when)?;
        self.count(&owner, change);
        Ok(())
    }

    /// Counts in the ledger that a record of `owner`'s store went from counting `change.0`
    /// bytes to `change.1`.
    pub(crate) fn count(&self, owner: &str, change: (u64, u64)) {
        self.ledger.recorded(owner, change);
    }

    /// Every store, in token order, without its sources ([`Stores::decode_bare`]).
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub(crate) fn list_bare(&self) -> Result<Vec<StoreRecord>> {
        let mut records = Vec::new();
        self.db.for_each(cf::STORES, |key, value| {
            records.push(self.decode_bare(token_of_key(key)?, value)?);
            Ok(true)
        })?;
        Ok(records)
    }

    /// A page of the stores in token order, from `from` on (`None`: the first), without
    /// their sources ([`Stores::decode_bare`]): those of at
    /// most `scan` records read that `keep` keeps, at most `most`, and the token the next
    /// page starts at (`None`: this is the last). So a page's work is bounded however many
    /// records `keep` passes over (gone stores stay recorded); a page may be short, even
    /// empty, and still have a next.
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub fn list_page(
        &self,
        from: Option<Uuid>,
        most: usize,
        scan: usize,
        keep: impl Fn(&StoreRecord) -> bool,
    ) -> Result<(Vec<StoreRecord>, Option<Uuid>)> {
        let start = from.map_or_else(Vec::new, |token| token.as_bytes().to_vec());
        let (mut page, mut next, mut read) = (Vec::new(), None, 0);
        self.db
            .scan_prefixed(cf::STORES, b"", &start, |key, value| {
                let token = token_of_key(key)?;
                if page.len() >= most || read >= scan.max(1) {
                    next = Some(token);
                    return Ok(db::Step::Stop);
                }
                read += 1;
                let record = self.decode_bare(token, value)?;
                if keep(&record) {
                    page.push(record);
                }
                Ok(db::Step::Next)
            })?;
        Ok((page, next))
    }

    /// Removes a store for `reason`: it is gone (status 4) at once, so its URLs and share
    /// links answer 404 from now on, and its data is deleted by a job of the store (see
    /// [`Stores::mark_gone`]). A store already gone keeps its record (and the reason it went),
    /// and its deletion is queued again: an operator's way to retry one that failed. Blocking.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown store; a read or write error.
    pub fn remove(&self, token: Uuid, reason: &str, now: i64) -> Result<StoreRecord> {
        let _record = self.records.lock();
        let mut record = self
            .record(token)?
            .ok_or_else(|| Error::NotFound(Missing::Store(token.to_string())))?;
        if record.status == Status::Gone {
            self.queue_deletion(&record)?;
        } else {
            self.mark_gone(&mut record, reason, now, Batch::default())?;
        }
        Ok(record)
    }

    /// Queues the job of the gone store of `record` (again), which deletes its data; the
    /// caller holds the records lock.
    fn queue_deletion(&self, record: &StoreRecord) -> Result<()> {
        let token = record.token.to_string();
        self.queue
            .enqueue_first(Batch::default(), CONVERT, &token, &record.owner)
            .map(drop)
    }

    /// Writes `record` as gone for `reason` at `now` with `batch`, and queues the store's job
    /// in the same write; the caller holds the records lock and read `record` under it.
    ///
    /// The data is deleted by that job ([`job::ConvertJob`] deletes a gone store's data), not
    /// here: a store's jobs run one at a time in the order they were asked for, so the
    /// deletion never runs beside a conversion of the store still writing, nor after a
    /// conversion asked for since (which finds its job waiting, and converts in its place).
    /// The job is queued to run before the conversions waiting (a deletion is short, and the
    /// disk it frees should not wait for them). A crash after the write deletes the data at
    /// the next start; a deletion that fails is queued again by the sweep.
    fn mark_gone(
        &self,
        record: &mut StoreRecord,
        reason: &str,
        now: i64,
        batch: Batch,
    ) -> Result<()> {
        let batch = Self::outcome(record, Status::Gone, reason, now, batch);
        let token = record.token.to_string();
        self.queue
            .enqueue_first(batch, CONVERT, &token, &record.owner)
            .map(drop)
    }

    /// Whether anything of store `token` is still there (or cannot be looked at): its
    /// directory, or its listing, manifest or tier state. A gone store's deletion did not
    /// finish (it may fail after its directory went, as when its directory was deleted by
    /// hand and its tier state could not be).
    pub(crate) fn data_left(&self, token: Uuid) -> bool {
        let dir_left = !matches!(std::fs::symlink_metadata(self.dir(token)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        dir_left || self.tier.has_state(token).unwrap_or(true)
    }

    /// Deletes the data of store `token`, which is gone: its listing, manifest (and its
    /// mirrored copy), tier state and cold objects, what readers keep of it, and its
    /// directory. Blocking.
    ///
    /// A mirrored manifest that cannot be deleted leaves the store's directory, empty: the
    /// sweep then queues the deletion again (as it does for any deletion that left the
    /// directory), and the mirror is asked again.
    ///
    /// # Errors
    /// A read, write or delete error.
    pub(crate) fn delete_data(&self, token: Uuid) -> Result<()> {
        self.tier.forget_removed_store(token)?;
        let mirrored = self.tier.forget_mirrored(token);
        self.cache.forget(token);
        let dir = self.dir(token);
        let removed = match mirrored {
            Ok(()) => std::fs::remove_dir_all(&dir),
            Err(_) => empty_dir(&dir),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("remove {}", dir.display()), e)),
        }
        mirrored
    }

    /// Records the outcome of a conversion run of store `token` that started at `started`
    /// from the record `run` (with `batch`, under the lock every change of a record takes,
    /// so that no other write puts back what it read before), while the store is still
    /// preparing that conversion, or a later one (a reload asked for during the run) of the
    /// same sources and options whose sources have not changed since the run started: that
    /// run's result is then the later conversion's too (so a store reloaded again and again
    /// faster than it converts still becomes ready), with the bytes of its files (`bytes`):
    /// what the record counted before and counts now. `None` when not (converted again
    /// otherwise, or removed): nothing is written, and a reload's own job follows.
    ///
    /// # Errors
    /// A read or write error or a corrupt record.
    pub(crate) fn record_conversion_outcome(
        &self,
        run: &StoreRecord,
        started: std::time::SystemTime,
        outcome: (Status, &str),
        bytes: u64,
        now: i64,
        batch: Batch,
    ) -> Result<Option<(u64, u64)>> {
        let (status, reason) = outcome;
        let _record = self.records.lock();
        match self.record(run.token)? {
            Some(mut record)
                if record.status == Status::Preparing
                    && (record.conversion == run.conversion
                        || same_work(&record, run, started)) =>
            {
                let before = std::mem::replace(&mut record.bytes, bytes);
                self.write_outcome(&mut record, status, reason, now, batch)?;
                Ok(Some((before, bytes)))
            }
            _ => Ok(None),
        }
    }

    /// Records that the conversion job `job` of store `token` failed for `reason`, while
    /// the store prepares a conversion and no other job of it waits (a reload asked for
    /// during the run, which converts again); `false` when not, and nothing is written.
    ///
    /// # Errors
    /// A read or write error or a corrupt record.
    pub(crate) fn record_conversion_failed(
        &self,
        token: Uuid,
        job: u64,
        reason: &str,
        now: i64,
    ) -> Result<bool> {
        let _record = self.records.lock();
        let waiting = self
            .queue
            .find(CONVERT, &token.to_string())
            .is_some_and(|next| next.seq != job);
        match self.record(token)? {
            Some(mut record) if record.status == Status::Preparing && !waiting => {
                // Its files are removed.
                let before = std::mem::take(&mut record.bytes);
                self.write_outcome(&mut record, Status::Failed, reason, now, Batch::default())?;
                self.count(&record.owner, (before, 0));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Writes `record` as `status` for `reason` at `now` with `batch`; the caller holds the
    /// records lock and read `record` under it.
    fn write_outcome(
        &self,
        record: &mut StoreRecord,
        status: Status,
        reason: &str,
        now: i64,
        batch: Batch,
    ) -> Result<()> {
        self.db
            .write(Self::outcome(record, status, reason, now, batch))
    }

    /// `batch` with `record` written as `status` for `reason` at `now`.
    fn outcome(
        record: &mut StoreRecord,
        status: Status,
        reason: &str,
        now: i64,
        mut batch: Batch,
    ) -> Batch {
        record.status = status;
        record.reason = reason.to_string();
        record.updated = now;
        batch.put(
            cf::STORES,
            record.token.as_bytes().to_vec(),
            record.encode(),
        );
        batch
    }
}

/// Removes everything in `dir` and keeps it (made if missing).
fn empty_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::remove_dir_all(dir).or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    })?;
    std::fs::create_dir_all(dir)
}

/// The token of a key of the `stores` family.
fn token_of_key(key: &[u8]) -> Result<Uuid> {
    Uuid::from_slice(key).map_err(|e| Error::Corrupt {
        family: cf::STORES,
        reason: format!("a store key of {} bytes: {e}", key.len()),
    })
}

#[cfg(test)]
mod tests;
