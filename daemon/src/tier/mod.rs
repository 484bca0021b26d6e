//! The cold tier: each complete store's key listing and blob manifest, the state of its blob
//! instances, archiving them to the cold tier and restoring them on read.
//!
//! # What is kept (RocksDB)
//! - `keys`: the key listing of every complete store (written with its `Ready` record, in one
//!   batch): stat and readdir of the mount read it, never the cold tier, so sizes are exact
//!   for archived keys too.
//! - `manifests`: the store's blob manifest (schema v3), cut by the manifests crate when the
//!   store completes; its scope is the store's token (its directory on the hot tier). When
//!   `tier.manifests` names a store, the manifest is also written there as JSON at
//!   `<token>/manifest.json`, where the reference tools read manifests.
//! - `tiers`: the state of each blob instance, keyed by (scope, instance id): hot, archiving,
//!   archived or restoring, with its bytes, objects, the SHA-256 of its cold object, the cold
//!   key, when a user last read it and how often it was restored. Every transition is one
//!   write. No record: hot and never archived.
//!
//! # The rules
//! - Only keys that resolve to a blob are archived: hot (metadata, coordinates, small
//!   arrays), pinned and unmanaged keys never are, nor any key of a store that is not ready.
//! - Archiving packs a blob instance into one uncompressed ZIP on the cold tier
//!   (`<token>/<instance>.<archive>.zip`, recoverable with `unzip`), reads the object back and checks
//!   its SHA-256, records `archived`, and only then deletes the hot copies.
//! - A read of a key whose hot copy is missing and whose instance is archived restores the
//!   whole instance once (see [`restore`]); readers of any key of it wait for that restore.
//!   Opening a store reads metadata and coordinates, which are hot, so it never restores.
//! - A store with an archived instance reports status 3 (archived); that status is derived
//!   from the tier state, never stored, so store records and tier state cannot disagree.
//! - A store converted again or removed loses its listing, manifest, tier state and cold
//!   objects ([`Tier::forget_store`]).
//!
//! # Crash safety
//! A hot copy is deleted only after its cold copy was read back and verified and `archived`
//! was recorded; a restored file appears only by a rename after it was written whole and
//! flushed to disk; a cold object appears only once its multipart upload completes (an
//! upload that fails is aborted; one a crash interrupts is left to the object store: the
//! local one's files are removed by the next cleaning of the store, an S3 bucket needs a
//! lifecycle rule).
//! [`Tier::repair`], run whenever the database is opened, finishes or rolls back what a crash
//! interrupted: `archiving` goes back to hot (its cold object is deleted), `restoring` goes
//! back to archived (its partial files are deleted), hot copies left beside a verified cold
//! copy are deleted, and cold objects no record names are removed. What needs the cold tier
//! is done only on its definite answers, each awaited at most [`COLD_ANSWER_WAIT`]: a cold
//! tier that does not answer leaves it to the next start (the cleaning of marked stores
//! also to the serving daemon's next cleaning).
//!
//! Only the prefixes of stores marked for it are listed to find such objects, so a start
//! costs a listing per store touched since the last one, not per store ever converted:
//! every write of a tier state marks its store (in the same write), as does forgetting a
//! store that had tier state, and a mark goes once the store's prefix was listed and
//! everything in it settled, an hour or more after the mark was put (an object that
//! appears late, such as an upload the object store completes after its client gave up,
//! is found within that hour; [`CLEANING_GRACE_SECONDS`]). A database restored from a
//! backup may miss marks (and records) of archives made since: each archive records its
//! time in the database and in the tier clock file beside it (`<data>/tier-clock`), and a
//! start that finds the database older than the file marks every store. `svcd tier
//! repair` marks and cleans every store too ([`Tier::clean_every_store`]), for a data
//! directory restored with its clock file.
//! Cleaning adopts an object that holds the only copy of a blob: one no record names, or
//! the newest of a blob whose recorded object is gone, when its hot copies are not whole.
//! A serving daemon also cleans the marked stores every `tier.cleaning_interval_seconds`
//! ([`Tier::clean_marked`]), each under the store's exclusive lock (an adoption reads its
//! object without it, and records it under it), so what a start could not clean (a cold
//! tier that did not answer) and what a restore or removal could not delete is cleaned
//! without a restart.

mod archive;
mod restore;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use svc_manifests::object_store::{
    Error as ObjectError, ObjectStore, ObjectStoreExt, path::Path as ObjectPath,
};
use svc_manifests::{Manifest, ManifestStore, Resolution, Trie};
use uuid::Uuid;

use crate::config::Config;
use crate::db::{self, Batch, Db, Step, cf};
use crate::error::{Error, Result};

pub(crate) use archive::Candidate;
pub use archive::{ArchiveOptions, ArchiveRow};

/// Format byte of a tier state record and of a stored manifest.
const FORMAT: u8 = 1;

/// How long the repair at start, a cleaning of the cold tier, and a store's job forgetting
/// its cold objects (or a removed store's mirrored manifest) wait for one answer of the cold
/// tier or the mirror (the object store client itself retries for minutes), so that neither
/// a start, nor a store's lock (a cleaning holds it), nor a worker of the job queue is held
/// up longer. A HEAD of the repair that does not come leaves the rest to the next start;
/// listings or deletions of two stores in a row that do not, the rest of a cleaning to the
/// next one; a store's job, its cold objects to the cleaning.
const COLD_ANSWER_WAIT: Duration = Duration::from_secs(10);

/// How often what waits for a store's restore, or for its lock, looks whether the daemon
/// stops (nothing notifies it).
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The length of a store token, the first bytes of the keys of its listing and manifest.
const TOKEN_BYTES: usize = 16;

/// How long after it was last marked a store stays marked for cleaning, however clean its
/// listings: an object that appears on the cold tier after a listing (a multipart upload
/// the object store completes after its client gave up on it, a listing that lags behind
/// the writes) is still found and deleted by a cleaning within this.
const CLEANING_GRACE_SECONDS: i64 = 3600;

/// The most failed restores (or adoptions) kept, with when and why (for readers that asked
/// before a restore failed): past it, failed restores are forgotten all at once (those
/// readers then start anew), and further failed adoptions are not kept.
const MOST_FAILURES_KEPT: usize = 4096;

/// How long after a cold object could not be read back to be adopted it is not tried again.
const ADOPTION_RETRY: Duration = Duration::from_secs(3600);

/// Bytes of a cold object read by one request (see [`Tier::read_cold`]).
const COLD_PIECE: u64 = 16 << 20;

/// Where a blob instance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// On the hot tier only.
    Hot,
    /// Being packed into the cold tier; its hot copies are still there.
    Archiving,
    /// On the cold tier only (its cold copy verified).
    Archived,
    /// Being restored from the cold tier.
    Restoring,
}

impl State {
    /// The lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Hot => "hot",
            State::Archiving => "archiving",
            State::Archived => "archived",
            State::Restoring => "restoring",
        }
    }
}

/// The recorded state of one blob instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobState {
    /// Where it is.
    pub state: State,
    /// Bytes of its keys.
    pub bytes: u64,
    /// Its keys.
    pub objects: u64,
    /// SHA-256 (hex) of its cold object; empty while none is verified.
    pub checksum: String,
    /// Bytes of its cold object (the ZIP); 0 while it has none.
    pub cold_bytes: u64,
    /// The key of its cold object; empty while it has none.
    pub cold_key: String,
    /// When a user last read it, as far as the tier knows (Unix seconds): when it was
    /// restored for a read; 0 before.
    pub last_read: i64,
    /// How often it was restored.
    pub restores: u64,
    /// When its state last changed (Unix seconds).
    pub changed: i64,
}

impl BlobState {
    /// Hot again: its cold copy is gone or not to be used.
    fn forget_cold(&mut self) {
        self.state = State::Hot;
        self.checksum.clear();
        self.cold_bytes = 0;
        self.cold_key.clear();
        self.changed = now();
    }

    fn hot(bytes: u64, objects: u64) -> Self {
        BlobState {
            state: State::Hot,
            bytes,
            objects,
            checksum: String::new(),
            cold_bytes: 0,
            cold_key: String::new(),
            last_read: 0,
            restores: 0,
            changed: 0,
        }
    }
}

/// A row of `svcd tier status`: one blob instance of one store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRow {
    /// The store's token (the manifest's scope).
    pub scope: String,
    /// The instance id, `<blob id>_<n>`.
    pub instance: String,
    /// Its state (recorded, or hot when never archived).
    #[serde(flatten)]
    pub state: BlobState,
}

/// A blob instance of a store: (scope, instance id).
type InstanceId = (Uuid, String);

/// Keys of a store with their sizes.
pub(crate) type Keys = Vec<(String, u64)>;

/// The key of something of a store in the `keys` and `tiers` families: the store's token
/// (the scope) and its name there (a listed key, an instance id).
fn scoped_key(token: Uuid, name: &str) -> Vec<u8> {
    let mut key = token.as_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    key
}

/// A tier clock (Unix nanoseconds) as the database and the clock file hold it (0 for
/// anything else).
fn decode_clock(bytes: &[u8]) -> u128 {
    <[u8; 16]>::try_from(bytes).map_or(0, u128::from_be_bytes)
}

/// The key of the mark that the store `token`'s prefix on the cold tier may hold objects no
/// record names.
fn cleaning_mark(token: Uuid) -> Vec<u8> {
    let mut key = db::meta::COLD_CLEANUP.to_vec();
    key.extend_from_slice(token.as_bytes());
    key
}

/// Marks the store `token` for the next cleaning of the cold tier, in `batch`: put
/// in the same write as whatever may leave an object behind, so a crash cannot lose it.
/// The mark holds when it was put (Unix seconds; see [`CLEANING_GRACE_SECONDS`]).
fn mark_for_cleaning(batch: &mut Batch, token: Uuid) {
    batch.put(cf::META, cleaning_mark(token), now().to_be_bytes().to_vec());
}

/// The size a `keys` entry holds.
///
/// # Errors
/// [`Error::Corrupt`] for a value that is not 8 bytes.
fn decode_size(token: Uuid, key: &str, value: &[u8]) -> Result<u64> {
    let size: [u8; 8] = value.try_into().map_err(|_| Error::Corrupt {
        family: cf::KEYS,
        reason: format!("the size of {key} of store {token} is not 8 bytes"),
    })?;
    Ok(u64::from_be_bytes(size))
}

/// When a read was asked and for whom: a read waits for its restore from then, and the
/// restores of the users asking take turns ([`Tier::restore_for_read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// When.
    pub at: std::time::Instant,
    /// Who: the user's name over HTTP (empty for anonymous readers), `uid N` for a local
    /// user through the mount.
    pub by: String,
}

impl Asked {
    /// A read asked now by `by`.
    pub fn now(by: impl Into<String>) -> Self {
        Asked {
            at: std::time::Instant::now(),
            by: by.into(),
        }
    }
}

/// Whether an entry named `name` in a store's key listing is shown (the mount gives no entry
/// an empty name, `.` or `..`; an empty one is a key that is its directory's own path, `a/`,
/// or a segment between two slashes).
fn shown(name: &str) -> bool {
    !matches!(name, "" | "." | "..")
}

/// A page of the entries of a directory of a store's key listing, and the position after it
/// (`None`: there are no more).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedPage {
    /// The entries' names and what they are, in listing order.
    pub entries: Vec<(String, Listed)>,
    /// Where the next page starts.
    pub next: Option<String>,
}

/// An entry of a directory of a store's key listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// A key, with its size in bytes.
    File(u64),
    /// A directory: keys start with its path.
    Directory,
}

/// A store's manifest and the trie resolving its keys.
pub(crate) struct Cut {
    manifest: Manifest,
    trie: Trie,
}

impl Cut {
    /// What `key` of the store `token` resolves to.
    fn resolve(&self, token: Uuid, key: &str) -> Resolution<'_> {
        self.trie.lookup_in(&token.to_string(), key)
    }
}

/// One restore under way, which every reader of its blob instance waits for.
#[derive(Default)]
struct Flight {
    outcome: Mutex<Option<std::result::Result<(), String>>>,
    done: parking_lot::Condvar,
    /// The restore itself until a restore thread starts it. It is queued in the turn of every
    /// reader who asks for it before then, and the first of those turns runs it: a reader who
    /// joins another reader's queued restore is not held up behind that reader's others.
    restore: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// The readers in whose turns it is queued.
    queued_for: Mutex<HashSet<String>>,
}

/// The cold tier and the tier state of the daemon's stores.
pub struct Tier {
    db: Arc<Db>,
    /// The tier clock file, beside the database: when the last archive was recorded (see
    /// [`Tier::repair`]).
    clock: PathBuf,
    /// The hot tier: one directory per store.
    hot: PathBuf,
    /// Where a cold object not on a local file system is fetched to be restored (on the hot
    /// tier's file system).
    staging: PathBuf,
    /// The cold tier.
    cold: Arc<dyn ObjectStore>,
    /// The cold tier's directory when it is local (its interrupted writes are cleaned there).
    cold_dir: Option<PathBuf>,
    /// Where manifests are mirrored as JSON, if anywhere.
    mirror: Option<ManifestStore>,
    /// How complete stores are cut into blobs.
    policy: svc_manifests::Policy,
    /// Drives the object store's futures from the blocking threads the tier runs on.
    runtime: Option<tokio::runtime::Runtime>,
    /// Manifests and tries of stores, loaded once per conversion.
    cuts: Mutex<HashMap<Uuid, Arc<Cut>>>,
    /// Archived (or restoring) instances per store: a store with any is status 3.
    archived: Mutex<HashMap<Uuid, usize>>,
    /// Restores under way or queued by (store, instance).
    flights: Mutex<HashMap<InstanceId, Arc<Flight>>>,
    /// Runs the restores readers ask for, at most `tier.max_restores` at once, the users
    /// asking in turn, each with at most half of them: one user's job reading thousands of
    /// archived blobs neither starts thousands of downloads at once (filling the staging
    /// space) nor holds everyone else's restores behind its own.
    restores: crate::FairPool<String>,
    /// When the last restore of an instance failed, and why (until one succeeds).
    failures: Mutex<HashMap<InstanceId, (std::time::Instant, String)>>,
    /// Per store: archives and restores of its instances hold it shared, forgetting the
    /// store (a conversion or removal) exclusively.
    store_locks: Mutex<HashMap<Uuid, Arc<parking_lot::RwLock<()>>>>,
    /// Per instance: one archive or restore of it at a time.
    instance_locks: Mutex<HashMap<InstanceId, Arc<Mutex<()>>>>,
    /// [`CLEANING_GRACE_SECONDS`] (tests set it to 0).
    cleaning_grace: i64,
    /// [`COLD_ANSWER_WAIT`] (tests shorten it).
    cold_wait: Duration,
    /// [`COLD_PIECE`] (tests shorten it).
    cold_piece: u64,
    /// Cold objects (by name, size, modification time and entity tag) whose adoption
    /// failed, and when.
    adoption_failures: Mutex<HashMap<String, std::time::Instant>>,
    /// Cold objects (as above) read to be adopted that could not be recorded yet (their
    /// store was busy): their SHA-256 and size.
    adoption_reads: Mutex<HashMap<String, (String, u64)>>,
    /// The stores whose cleaning went unanswered last time (cleaned last next time).
    silent_stores: Mutex<std::collections::HashSet<Uuid>>,
    /// The stores a cleaning found busy last time (waited for next time).
    busy_stores: Mutex<std::collections::HashSet<Uuid>>,
}

impl Drop for Tier {
    fn drop(&mut self) {
        // A runtime may not block in drop when the daemon is dropped on an async thread.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn tier_error(what: impl std::fmt::Display) -> Error {
    Error::Tier(what.to_string())
}

/// The current time in Unix seconds.
fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Tier {
    /// The tier of the stores below `config`'s hot tier, with the configured cold tier (a
    /// local directory is created).
    ///
    /// # Errors
    /// [`Error::Tier`] for a cold tier or manifest mirror URL that cannot be opened.
    pub(crate) fn open(config: &Config, db: Arc<Db>) -> Result<Self> {
        let cold_url = config.cold_url();
        let s3 = svc_manifests::S3Options::default();
        let open = |url: &str| {
            svc_manifests::open_store(url, &s3, svc_manifests::Missing::Create)
                .map_err(|e| tier_error(format!("tier: {e}")))
        };
        let cold = open(&cold_url)?;
        let cold_dir = (!cold_url.contains("://") || cold_url.starts_with("file://"))
            .then(|| PathBuf::from(cold_url.trim_start_matches("file://")));
        let mirror = if config.tier.manifests.is_empty() {
            None
        } else {
            Some(ManifestStore::new(open(&config.tier.manifests)?, ""))
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tier-io")
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the tier's I/O thread", e))?;
        let policy = svc_manifests::Policy {
            t_max_bytes: config.tier.t_max_bytes,
            t_hot_bytes: config.tier.t_hot_bytes,
            ..svc_manifests::Policy::default()
        };
        Ok(Tier {
            db,
            clock: config.data_dir.join("tier-clock"),
            hot: config.stores_dir(),
            staging: config.staging_dir(),
            cold,
            cold_dir,
            mirror,
            policy,
            runtime: Some(runtime),
            cuts: Mutex::default(),
            archived: Mutex::default(),
            flights: Mutex::default(),
            restores: crate::FairPool::new(
                "tier-restore",
                config.tier.max_restores,
                config.tier.max_restores.div_ceil(2),
            ),
            failures: Mutex::default(),
            store_locks: Mutex::default(),
            instance_locks: Mutex::default(),
            cleaning_grace: CLEANING_GRACE_SECONDS,
            cold_wait: COLD_ANSWER_WAIT,
            cold_piece: COLD_PIECE,
            adoption_failures: Mutex::default(),
            adoption_reads: Mutex::default(),
            silent_stores: Mutex::default(),
            busy_stores: Mutex::default(),
        })
    }

    /// Runs an object store future to completion on this thread, within the tier's runtime
    /// (whose worker drives network I/O and whose pool runs local file I/O). Not the
    /// runtime's own `block_on`, which refuses to run on a thread of another runtime (the
    /// daemon is opened from one in tests).
    fn block_on<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        let _context = self
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the tier")
            .enter();
        futures::executor::block_on(future)
    }

    /// What `future` gives, if it does within `wait`. Blocking.
    fn within<T>(&self, wait: Duration, future: impl std::future::Future<Output = T>) -> Option<T> {
        self.block_on(async { tokio::time::timeout(wait, future).await.ok() })
    }

    /// The lock of the store `token` (see [`Tier::store_locks`]).
    pub(crate) fn store_lock(&self, token: Uuid) -> Arc<parking_lot::RwLock<()>> {
        Arc::clone(self.store_locks.lock().entry(token).or_default())
    }

    /// The lock of one instance of a store.
    fn instance_lock(&self, token: Uuid, instance: &str) -> Arc<Mutex<()>> {
        let mut locks = self.instance_locks.lock();
        Arc::clone(locks.entry((token, instance.to_string())).or_default())
    }

    /// The directory of a store on the hot tier.
    fn store_dir(&self, token: Uuid) -> PathBuf {
        self.hot.join(token.to_string())
    }

    /// Whether the store `token` has an archived (or restoring) instance: status 3.
    pub(crate) fn is_archived(&self, token: Uuid) -> bool {
        self.archived.lock().get(&token).is_some_and(|n| *n > 0)
    }

    fn count_archived(&self, token: Uuid, delta: isize) {
        let mut archived = self.archived.lock();
        let n = archived.entry(token).or_default();
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            archived.remove(&token);
        }
    }

    // ---- the key listing ----------------------------------------------------------------

    /// Adds the key listing of a complete store to `batch`: every key with the size a read
    /// gives. `keys` comes from [`list_files`] with metadata sizes as served.
    pub(crate) fn put_listing(batch: &mut Batch, token: Uuid, keys: &[(String, u64)]) {
        for (key, size) in keys {
            batch.put(
                cf::KEYS,
                scoped_key(token, key),
                size.to_be_bytes().to_vec(),
            );
        }
    }

    /// The key listing of the store `token` (empty while it has none), in key order.
    ///
    /// # Errors
    /// A read error or a corrupt entry.
    pub fn keys(&self, token: Uuid) -> Result<Vec<(String, u64)>> {
        self.keys_under(token, "")
    }

    /// The entry `name` of the directory `dir` (`""` for the store's top, else a key prefix
    /// ending in `/`, such as `tas/`) of the key listing of `token`: a key there, with its
    /// size, or a directory (some key starts with `dir name /`); a name that is both is the
    /// key. `None` for no such entry, and for names no entry has (empty, `.`, `..`, or
    /// holding `/`). Two point reads at most, whatever the listing's size.
    ///
    /// # Errors
    /// A read error or a corrupt entry.
    pub(crate) fn listed_entry(
        &self,
        token: Uuid,
        dir: &str,
        name: &str,
    ) -> Result<Option<Listed>> {
        if !shown(name) || name.contains('/') {
            return Ok(None);
        }
        let path = format!("{dir}{name}");
        if let Some(value) = self.db.get(cf::KEYS, &scoped_key(token, &path))? {
            return Ok(Some(Listed::File(decode_size(token, &path, &value)?)));
        }
        let below = scoped_key(token, &format!("{path}/"));
        Ok(self
            .db
            .any_prefixed(cf::KEYS, &below)?
            .then_some(Listed::Directory))
    }

    /// At most `most` entries of the directory `dir` (as for [`Tier::listed_entry`]) of the
    /// key listing of `token`, from the position `from` on (`""`: the first), in listing
    /// order, and the position after them (`None`: there are no more). A directory's keys
    /// are stepped over in one seek, so a page costs its entries, not the keys below them.
    /// The names of the keys beside, as the mount shows them: never empty, `.` or `..`, and
    /// a name that is a key and a directory once, as the key.
    ///
    /// # Errors
    /// A read error or a corrupt entry.
    pub(crate) fn listed_entries(
        &self,
        token: Uuid,
        dir: &str,
        from: &str,
        most: usize,
    ) -> Result<ListedPage> {
        let prefix = scoped_key(token, dir);
        let mut start = prefix.clone();
        start.extend_from_slice(from.as_bytes());
        let mut entries = Vec::new();
        let mut next = None;
        self.db
            .scan_prefixed(cf::KEYS, &prefix, &start, |key, value| {
                let Ok(rest) = std::str::from_utf8(&key[prefix.len()..]) else {
                    return Err(Error::Corrupt {
                        family: cf::KEYS,
                        reason: format!("a listed key of store {token} is not UTF-8"),
                    });
                };
                if entries.len() >= most {
                    next = Some(rest.to_string());
                    return Ok(Step::Stop);
                }
                match rest.split_once('/') {
                    None => {
                        if shown(rest) {
                            let size = decode_size(token, rest, value)?;
                            entries.push((rest.to_string(), Listed::File(size)));
                        }
                        Ok(Step::Next)
                    }
                    Some((name, _)) => {
                        // A name that is a key too is listed as the key.
                        let directory = shown(name)
                            && self
                                .db
                                .get(cf::KEYS, &scoped_key(token, &format!("{dir}{name}")))?
                                .is_none();
                        if directory {
                            entries.push((name.to_string(), Listed::Directory));
                        }
                        // Past every key below it: `/` + 1 is `0`.
                        let mut past = prefix.clone();
                        past.extend_from_slice(name.as_bytes());
                        past.push(b'0');
                        Ok(Step::SeekTo(past))
                    }
                }
            })?;
        Ok(ListedPage { entries, next })
    }

    /// The listed keys of `token` that start with `prefix`, in key order.
    fn keys_under(&self, token: Uuid, prefix: &str) -> Result<Vec<(String, u64)>> {
        let mut keys = Vec::new();
        let start = scoped_key(token, prefix);
        self.db.for_each_prefixed(cf::KEYS, &start, |k, v| {
            let corrupt = |reason: &str| Error::Corrupt {
                family: cf::KEYS,
                reason: format!("a listed key of store {token}: {reason}"),
            };
            let key = std::str::from_utf8(&k[16..]).map_err(|_| corrupt("not UTF-8"))?;
            keys.push((key.to_string(), decode_size(token, key, v)?));
            Ok(())
        })?;
        Ok(keys)
    }

    /// The listed size of `key` of the store `token`, if it is a listed key.
    pub(crate) fn listed_size(&self, token: Uuid, key: &str) -> Result<Option<u64>> {
        self.db
            .get(cf::KEYS, &scoped_key(token, key))?
            .map(|value| decode_size(token, key, &value))
            .transpose()
    }

    /// Whether every one of `keys` of the store `token` is on the hot tier at its listed size.
    fn hot_whole(&self, token: Uuid, keys: &[(String, u64)]) -> bool {
        let dir = self.store_dir(token);
        keys.iter().all(|(key, size)| {
            std::fs::metadata(dir.join(key)).is_ok_and(|meta| meta.len() == *size)
        })
    }

    /// Whether the store `token` has a key listing.
    fn has_listing(&self, token: Uuid) -> Result<bool> {
        self.db.any_prefixed(cf::KEYS, token.as_bytes())
    }

    // ---- manifests ----------------------------------------------------------------------

    /// Cuts the complete store `token` into blobs with the configured policy and adds its
    /// manifest to `batch`; mirrors it as JSON when configured. A manifest already in the
    /// mirror is the previous one: its blobs and pins are kept (an additive cut), so an
    /// operator's pins (`svcd manifest pin` on the mirror) survive a conversion. A store the
    /// manifests crate cannot read gets no manifest: its keys are unmanaged and stay hot
    /// (logged).
    pub(crate) fn put_manifest(&self, batch: &mut Batch, token: Uuid) {
        let scope = token.to_string();
        let local =
            match svc_manifests::object_store::local::LocalFileSystem::new_with_prefix(&self.hot) {
                Ok(local) => local,
                Err(e) => {
                    tracing::warn!(%token, error = %e, "cannot read the hot tier to cut blobs");
                    return;
                }
            };
        let cut = self.block_on(async {
            let previous = match &self.mirror {
                Some(mirror) => mirror.read(&scope).await?,
                None => None,
            };
            let arrays = svc_manifests::read_arrays(&local, &scope, &[], None).await?;
            let manifest = svc_manifests::partition(
                &scope,
                &arrays,
                Some(self.policy),
                previous.as_ref().map(|stored| &stored.manifest),
                svc_manifests::Mode::Additive,
            )?;
            if let Some(mirror) = &self.mirror {
                let changed = previous.as_ref().is_none_or(|p| p.manifest != manifest);
                if changed {
                    let etag = previous.and_then(|stored| stored.etag);
                    let next = if etag.is_some() {
                        manifest.bumped()
                    } else {
                        manifest
                    };
                    mirror
                        .write(&next, svc_manifests::WriteMode::IfMatch(etag))
                        .await?;
                    return Ok(next);
                }
            }
            Ok::<_, svc_manifests::Error>(manifest)
        });
        let manifest = match cut {
            Ok(manifest) => manifest,
            Err(e) => {
                tracing::warn!(%token, error = %e, "cannot cut the store into blobs; it stays hot");
                return;
            }
        };
        let mut value = vec![FORMAT];
        value.extend_from_slice(manifest.to_json().as_bytes());
        batch.put(cf::MANIFESTS, token.as_bytes().to_vec(), value);
    }

    /// Takes the store's manifest from the mirror when it changed there (an operator pinned
    /// or unpinned a prefix with `svcd manifest pin`): the reload before an archive. A
    /// manifest that is not the store's scope is ignored (logged).
    ///
    /// # Errors
    /// A read or write error of the database. The mirror failing is logged.
    pub(crate) fn reload_manifest(&self, token: Uuid) -> Result<()> {
        let Some(mirror) = &self.mirror else {
            return Ok(());
        };
        let scope = token.to_string();
        let stored = match self.block_on(mirror.read(&scope)) {
            Ok(Some(stored)) => stored.manifest,
            Ok(None) => {
                tracing::debug!(%token, "no mirrored manifest");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(%token, error = %e, "cannot read the store's mirrored manifest");
                return Ok(());
            }
        };
        if stored.scope.trim_matches('/') != scope {
            tracing::warn!(%token, scope = %stored.scope, "the mirrored manifest names another scope; ignored");
            return Ok(());
        }
        if self.cut(token)?.is_some_and(|cut| cut.manifest == stored) {
            tracing::debug!(%token, "the mirrored manifest is the one in use");
            return Ok(());
        }
        let mut value = vec![FORMAT];
        value.extend_from_slice(stored.to_json().as_bytes());
        let mut batch = Batch::default();
        batch.put(cf::MANIFESTS, token.as_bytes().to_vec(), value);
        self.db.write(batch)?;
        self.cuts.lock().remove(&token);
        tracing::info!(%token, epoch = stored.epoch, "reloaded the store's manifest from the mirror");
        Ok(())
    }

    /// The manifest of the store `token`, as JSON (`svcd tier status --manifest`).
    ///
    /// # Errors
    /// A read error or a corrupt manifest.
    pub fn manifest(&self, token: Uuid) -> Result<Option<Manifest>> {
        Ok(self.cut(token)?.map(|cut| cut.manifest.clone()))
    }

    /// The store's manifest and trie, loaded once.
    fn cut(&self, token: Uuid) -> Result<Option<Arc<Cut>>> {
        if let Some(cut) = self.cuts.lock().get(&token) {
            return Ok(Some(Arc::clone(cut)));
        }
        let Some(value) = self.db.get(cf::MANIFESTS, token.as_bytes())? else {
            return Ok(None);
        };
        let corrupt = |reason: String| Error::Corrupt {
            family: cf::MANIFESTS,
            reason: format!("the manifest of store {token}: {reason}"),
        };
        let Some((&FORMAT, json)) = value.split_first() else {
            return Err(corrupt("unknown format".into()));
        };
        let manifest = svc_manifests::parse(json).map_err(|e| corrupt(e.to_string()))?;
        let trie = Trie::from_manifests([&manifest]);
        let cut = Arc::new(Cut { manifest, trie });
        self.cuts.lock().insert(token, Arc::clone(&cut));
        Ok(Some(cut))
    }

    // ---- tier state ---------------------------------------------------------------------

    /// The recorded state of an instance.
    fn state(&self, token: Uuid, instance: &str) -> Result<Option<BlobState>> {
        self.db
            .get(cf::TIERS, &scoped_key(token, instance))?
            .map(|value| {
                db::decode_json(
                    cf::TIERS,
                    FORMAT,
                    &format!("blob {instance} of store {token}"),
                    &value,
                )
            })
            .transpose()
    }

    /// Every recorded instance state of every store, in key order.
    fn states(&self) -> Result<Vec<(Uuid, String, BlobState)>> {
        let mut states = Vec::new();
        self.db.for_each(cf::TIERS, |key, value| {
            let corrupt = |reason: &str| Error::Corrupt {
                family: cf::TIERS,
                reason: reason.to_string(),
            };
            if key.len() < 16 {
                return Err(corrupt("a key shorter than a token"));
            }
            let token = Uuid::from_slice(&key[..16]).map_err(|_| corrupt("a bad token"))?;
            let instance = std::str::from_utf8(&key[16..])
                .map_err(|_| corrupt("an instance id that is not UTF-8"))?
                .to_string();
            let state = db::decode_json(cf::TIERS, FORMAT, &instance, value)?;
            states.push((token, instance, state));
            Ok(true)
        })?;
        Ok(states)
    }

    /// Records `state` for an instance, and marks the store for the next cleaning of
    /// the cold tier (an archive or a restore may leave an object no record names).
    fn put_state(&self, token: Uuid, instance: &str, state: &BlobState) -> Result<()> {
        self.put_state_with(token, instance, state, |_| {})
    }

    /// As [`Tier::put_state`], with what `more` adds to the same write.
    fn put_state_with(
        &self,
        token: Uuid,
        instance: &str,
        state: &BlobState,
        more: impl FnOnce(&mut Batch),
    ) -> Result<()> {
        let mut batch = Batch::default();
        more(&mut batch);
        batch.put(
            cf::TIERS,
            scoped_key(token, instance),
            db::encode_json(FORMAT, state),
        );
        mark_for_cleaning(&mut batch, token);
        self.db.write(batch)
    }

    /// When the last archive was recorded, as the tier clock file says (0 when there is
    /// none; a file that does not hold a clock is taken as one from later than any, so
    /// that every store is checked once, and is logged).
    fn last_archive(&self) -> u128 {
        match std::fs::read(&self.clock) {
            Ok(bytes) if bytes.len() == 16 => decode_clock(&bytes),
            Ok(_) => {
                tracing::warn!(file = %self.clock.display(), "the tier clock file is damaged; every store's cold objects are checked");
                u128::MAX
            }
            Err(_) => 0,
        }
    }

    /// The clock of an archive recorded now: the time (Unix nanoseconds), or one past the
    /// last clock when the host's clock stands earlier, so that clocks only grow.
    fn next_clock(&self) -> Result<u128> {
        let recorded = self.db.get(cf::META, db::meta::TIER_CLOCK)?;
        let file = Some(self.last_archive()).filter(|&clock| clock != u128::MAX);
        let last = recorded
            .as_deref()
            .map_or(0, decode_clock)
            .max(file.unwrap_or(0));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(now.max(last.saturating_add(1)))
    }

    /// Records an archive at `clock` in the tier clock file (after the database recorded
    /// it, and before any hot copy is deleted): written whole and flushed, then renamed into
    /// place. A failure is logged: it only weakens the check for a database restored from
    /// a backup.
    fn write_clock(&self, clock: u128) {
        // Named for this write: archives run at once (a daemon's and an offline CLI's do
        // not, as one database has one user; a daemon's own runs may) do not share it.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let staged = self.clock.with_extension(format!("{write}.new"));
        let written = (|| {
            let mut file = std::fs::File::create(&staged)?;
            std::io::Write::write_all(&mut file, &clock.to_be_bytes())?;
            file.sync_all()?;
            std::fs::rename(&staged, &self.clock)
        })();
        if let Err(e) = written {
            tracing::error!(file = %self.clock.display(), error = %e,
                "cannot write the tier clock; a database restored from a backup may go unnoticed (run svcd tier repair then)");
        }
    }

    /// The stores marked for cleaning the cold tier.
    fn marked_for_cleaning(&self) -> Result<Vec<Uuid>> {
        let mut marked = Vec::new();
        self.db
            .for_each_prefixed(cf::META, db::meta::COLD_CLEANUP, |key, _| {
                let token =
                    Uuid::from_slice(&key[db::meta::COLD_CLEANUP.len()..]).map_err(|_| {
                        Error::Corrupt {
                            family: cf::META,
                            reason: "a cold cleaning mark without a token".into(),
                        }
                    })?;
                marked.push(token);
                Ok(())
            })?;
        Ok(marked)
    }

    /// Gives the marks put before marks held their time the time of this start: they may
    /// follow an archive whose object still appears, and keep their store marked for the
    /// grace from now.
    fn date_undated_marks(&self) -> Result<()> {
        let mut batch = Batch::default();
        self.db
            .for_each_prefixed(cf::META, db::meta::COLD_CLEANUP, |key, value| {
                if value.len() != 8 {
                    batch.put(cf::META, key.to_vec(), now().to_be_bytes().to_vec());
                }
                Ok(())
            })?;
        if batch.is_empty() {
            return Ok(());
        }
        self.db.write(batch)
    }

    /// When the store `token` was last marked for cleaning (Unix seconds), if it is.
    fn marked_at(&self, token: Uuid) -> Result<Option<i64>> {
        Ok(self
            .db
            .get(cf::META, &cleaning_mark(token))?
            .map(|at| <[u8; 8]>::try_from(at.as_slice()).map_or(0, i64::from_be_bytes)))
    }

    /// The listed keys of `instance` of the store `token` (resolved with its manifest).
    fn instance_keys(&self, token: Uuid, cut: &Cut, instance: &str) -> Result<Vec<(String, u64)>> {
        let Some((id, _)) = instance.rsplit_once('_') else {
            return Ok(Vec::new());
        };
        let Some(blob) = cut.manifest.blob(id) else {
            return Ok(Vec::new());
        };
        let mut keys = Vec::new();
        for prefix in &blob.prefixes {
            for (key, size) in self.keys_under(token, prefix)? {
                if cut.resolve(token, &key).blob_id().as_deref() == Some(instance) {
                    keys.push((key, size));
                }
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Every blob instance of the store `token` with its listed keys, in id order.
    fn instances(&self, token: Uuid, cut: &Cut) -> Result<Vec<(String, Keys)>> {
        let mut by_instance: std::collections::BTreeMap<String, Vec<(String, u64)>> =
            std::collections::BTreeMap::new();
        for (key, size) in self.keys(token)? {
            if let Some(instance) = cut.resolve(token, &key).blob_id() {
                by_instance.entry(instance).or_default().push((key, size));
            }
        }
        Ok(by_instance.into_iter().collect())
    }

    /// The instances of the stores `tokens` with their states (hot when never archived).
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub(crate) fn status(&self, tokens: &[Uuid]) -> Result<Vec<InstanceRow>> {
        let mut rows = Vec::new();
        for &token in tokens {
            let Some(cut) = self.cut(token)? else {
                continue;
            };
            for (instance, keys) in self.instances(token, &cut)? {
                let bytes = keys.iter().map(|(_, size)| size).sum();
                let state = self
                    .state(token, &instance)?
                    .unwrap_or_else(|| BlobState::hot(bytes, keys.len() as u64));
                rows.push(InstanceRow {
                    scope: token.to_string(),
                    instance,
                    state,
                });
            }
        }
        Ok(rows)
    }

    /// The archived (or restoring) instances of the stores `tokens`, from the tier state
    /// alone.
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub(crate) fn archived_instances(&self, tokens: &[Uuid]) -> Result<Vec<InstanceRow>> {
        let wanted: std::collections::HashSet<&Uuid> = tokens.iter().collect();
        Ok(self
            .states()?
            .into_iter()
            .filter(|(token, _, state)| {
                wanted.contains(token) && matches!(state.state, State::Archived | State::Restoring)
            })
            .map(|(token, instance, state)| InstanceRow {
                scope: token.to_string(),
                instance,
                state,
            })
            .collect())
    }

    // ---- a store converted again or removed ---------------------------------------------

    /// Forgets the store `token`'s listing, manifest and tier state and deletes its cold
    /// objects: it is being converted again or removed. Blocking: waits for the store's lock
    /// (a restore or an archive of it under way holds it, and may wait for the cold tier for
    /// long) until the daemon is `stopping`, and forgets nothing then (`false`).
    ///
    /// # Errors
    /// A write error (then nothing was forgotten). A cold object that cannot be deleted is
    /// logged and removed by the next cleaning (see [`Tier::clean_marked`]).
    pub(crate) fn forget_store(&self, token: Uuid, stopping: &crate::jobs::Stop) -> Result<bool> {
        let store_lock = self.store_lock(token);
        let _exclusive = loop {
            if let Some(exclusive) = store_lock.try_write_for(STOP_CHECK) {
                break exclusive;
            }
            if stopping.stopping() {
                return Ok(false);
            }
        };
        self.forget_store_locked(token)?;
        Ok(true)
    }

    /// As [`Tier::forget_store`] for a removed store, waiting at most [`COLD_ANSWER_WAIT`]
    /// for the store's lock (a restore or an archive of it under way holds it, and may wait
    /// for the cold tier for long): a deletion must not hold a worker of the job queue
    /// behind it.
    ///
    /// # Errors
    /// As [`Tier::forget_store`]; [`Error::Tier`] when the lock was not had in time (the
    /// sweep queues the deletion again).
    pub(crate) fn forget_removed_store(&self, token: Uuid) -> Result<()> {
        let store_lock = self.store_lock(token);
        let Some(_exclusive) = store_lock.try_write_for(self.cold_wait) else {
            return Err(Error::Tier(format!(
                "store {token} is being restored or archived; its deletion is tried again later"
            )));
        };
        self.forget_store_locked(token)
    }

    /// [`Tier::forget_store`] with the store's lock held.
    fn forget_store_locked(&self, token: Uuid) -> Result<()> {
        let had_tier_state = self.db.any_prefixed(cf::TIERS, token.as_bytes())?;
        let mut batch = Batch::default();
        // Range deletions only where there is something to delete: every conversion starts
        // here, and each range deletion stays in the family until a compaction, where every
        // seek past it (the start's repair, the next store's) walks it.
        if self.has_listing(token)? {
            batch.delete_prefixed(cf::KEYS, token.as_bytes());
        }
        batch.delete(cf::MANIFESTS, token.as_bytes().to_vec());
        if had_tier_state {
            batch.delete_prefixed(cf::TIERS, token.as_bytes());
            mark_for_cleaning(&mut batch, token);
        }
        self.db.write(batch)?;
        self.cuts.lock().remove(&token);
        self.archived.lock().remove(&token);
        self.instance_locks
            .lock()
            .retain(|(store, _), _| *store != token);
        if !had_tier_state {
            return Ok(());
        }
        let prefix = ObjectPath::from(token.to_string());
        // Each call bounded: a store's job (a conversion, a removal) must not wait for a cold
        // tier that does not answer; what is left, the cleaning deletes.
        let deleted = (|| {
            use futures::TryStreamExt;
            let listed = self.within(self.cold_wait, self.cold.list(Some(&prefix)).try_collect());
            let objects: Vec<_> = listed.ok_or("the cold tier did not answer a listing")??;
            for object in objects {
                self.within(self.cold_wait, self.cold.delete(&object.location))
                    .ok_or("the cold tier did not answer a deletion")??;
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })();
        // The store stays marked: the cleaning lists it again within the grace (an upload
        // may still complete), and then unmarks it.
        if let Err(e) = deleted {
            tracing::warn!(%token, error = %e, "cannot delete the store's cold objects; the cleaning will");
        }
        Ok(())
    }

    /// Whether the store `token` has a key listing, a manifest or tier state.
    ///
    /// # Errors
    /// A read error.
    pub(crate) fn has_state(&self, token: Uuid) -> Result<bool> {
        let prefix = token.as_bytes();
        Ok(self.has_listing(token)?
            || self.db.any_prefixed(cf::MANIFESTS, prefix)?
            || self.db.any_prefixed(cf::TIERS, prefix)?)
    }

    /// How long a store's job waits for the cold tier, the mirror and the store's lock.
    #[cfg(test)]
    pub(crate) fn set_cold_wait(&mut self, wait: Duration) {
        self.cold_wait = wait;
    }

    /// Bytes of a cold object read by one request.
    #[cfg(test)]
    pub(crate) fn set_cold_piece(&mut self, bytes: u64) {
        self.cold_piece = bytes;
    }

    /// Reads the cold object at `location` whole, handing its bytes in order to `each`, in
    /// pieces of [`COLD_PIECE`] bytes, a request each (all of the object's version first
    /// asked about: a piece of another fails the read). A request of the object store
    /// client is bounded in time (for S3, `AWS_TIMEOUT`, 30 s by default) and retried for at
    /// most a few minutes; one request for a whole blob of many GiB would outlast that, and
    /// the blob could never be archived or restored. Pieces make the bound one piece's, so a
    /// blob of any size is read as long as its bytes come, and a cold tier that stops
    /// sending fails the read within one piece's bound. Returns the bytes read. Blocking.
    ///
    /// # Errors
    /// [`Error::Tier`] naming the object when the cold tier fails, or `each`'s error.
    fn read_cold(
        &self,
        location: &ObjectPath,
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<u64> {
        use futures::StreamExt;
        use svc_manifests::object_store::{GetOptions, GetRange};
        let failed =
            |e: &dyn std::fmt::Display| tier_error(format!("read cold object {location}: {e}"));
        self.block_on(async {
            // The first piece's answer says how long the object is (a range past its end
            // gives what there is) and which version it is.
            let (mut offset, mut size, mut version) = (0, self.cold_piece, None);
            while offset < size {
                let end = offset.saturating_add(self.cold_piece);
                let options = GetOptions {
                    range: Some(GetRange::Bounded(offset..end)),
                    if_match: version.clone(),
                    ..GetOptions::default()
                };
                let got = self
                    .cold
                    .get_opts(location, options)
                    .await
                    .map_err(|e| failed(&e))?;
                if version.is_none() {
                    (size, version) = (got.meta.size, got.meta.e_tag.clone());
                }
                let end = end.min(size);
                let mut stream = got.into_stream();
                while let Some(bytes) = stream.next().await {
                    let bytes = bytes.map_err(|e| failed(&e))?;
                    offset += bytes.len() as u64;
                    if offset > end {
                        return Err(failed(&"more bytes than asked for came"));
                    }
                    each(&bytes)?;
                }
                if offset < end {
                    return Err(failed(&format!(
                        "{offset} bytes of {size} read, the rest did not come"
                    )));
                }
            }
            Ok(offset)
        })
    }

    /// Deletes the store `token`'s mirrored manifest, when manifests are mirrored: the store
    /// is removed, and the reference tools must not find a manifest of a store that is gone.
    /// (A store converted again keeps it: its blobs and pins are those of the next cut.)
    /// Blocking.
    ///
    /// # Errors
    /// [`Error::Tier`] naming the manifest's key when the mirror fails or does not answer
    /// within [`COLD_ANSWER_WAIT`].
    pub(crate) fn forget_mirrored(&self, token: Uuid) -> Result<()> {
        let Some(mirror) = &self.mirror else {
            return Ok(());
        };
        let key = mirror.key(&token.to_string());
        match self.within(self.cold_wait, mirror.object_store().delete(&key)) {
            Some(Ok(()) | Err(svc_manifests::object_store::Error::NotFound { .. })) => Ok(()),
            Some(Err(e)) => Err(tier_error(format!(
                "cannot delete the mirrored manifest {key} of removed store {token}: {e}"
            ))),
            None => Err(tier_error(format!(
                "the manifest mirror did not answer the deletion of {key} (removed store {token})"
            ))),
        }
    }

    // ---- repair at start ----------------------------------------------------------------

    /// Finishes or rolls back what a crash interrupted, and cleans what no record names (see
    /// the module docs and [`Tier::clean_cold`]). `known` are the stores the database
    /// records, `ready` those that are ready (their tier state counts; any
    /// other's is stale) and `complete` gives a ready store without a listing its listing
    /// (stores completed before listings were kept). Run when the database is opened,
    /// before any read. Blocking.
    ///
    /// # Errors
    /// A read or write error of the database. Problems with single blobs are logged.
    pub(crate) fn repair(
        &self,
        known: &std::collections::HashSet<Uuid>,
        ready: &[Uuid],
        complete: impl Fn(Uuid) -> Result<Vec<(String, u64)>>,
    ) -> Result<()> {
        match std::fs::remove_dir_all(&self.staging) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("clean {}", self.staging.display()), e)),
        }
        for &token in ready {
            if !self.has_listing(token)? {
                let keys = complete(token)?;
                let mut batch = Batch::default();
                Self::put_listing(&mut batch, token, &keys);
                self.put_manifest(&mut batch, token);
                self.db.write(batch)?;
                tracing::info!(%token, keys = keys.len(), "listed a store completed earlier");
            }
        }
        let unmarked = self
            .db
            .get(cf::META, db::meta::COLD_CLEANUP_MARKED)?
            .is_none();
        self.date_undated_marks()?;
        let recorded = self.db.get(cf::META, db::meta::TIER_CLOCK)?;
        let recorded = recorded.as_deref().map_or(0, decode_clock);
        let last_archive = self.last_archive();
        if last_archive < recorded {
            // A crash (or a full disk) came between the database's write and the file's:
            // the file catches up, so that a backup put back later is told.
            self.write_clock(recorded);
        }
        if unmarked || last_archive > recorded {
            // A database from before marks were kept, or one older than the last archive
            // (restored from a backup: its records and marks may miss archives made
            // since, whose keys are only on the cold tier): every store it records is
            // marked, and cleaned (an object that holds the only copy of a blob is adopted).
            if !unmarked {
                tracing::warn!(
                    "the database is older than the last archive (restored from a backup?): the cold objects of every store are checked"
                );
            }
            self.mark_every_store(known)?;
            let mut batch = Batch::default();
            batch.put(cf::META, db::meta::COLD_CLEANUP_MARKED, Vec::new());
            // The clocks agree again (a damaged file is written anew).
            let damaged = last_archive == u128::MAX;
            let clock = if damaged {
                self.next_clock()?
            } else {
                last_archive.max(recorded)
            };
            batch.put(cf::META, db::meta::TIER_CLOCK, clock.to_be_bytes().to_vec());
            self.db.write(batch)?;
            if damaged {
                self.write_clock(clock);
            }
        }
        let ready: std::collections::HashSet<Uuid> = ready.iter().copied().collect();
        // A store gone or being converted keeps no listing or manifest (a crash may have
        // come between its record and forgetting them, or between a conversion writing them
        // and its record saying ready).
        // Found by walking the stores that have a listing or a manifest (one seek each), not
        // by asking each store that is not ready (one seek each, of many more).
        let mut listed = std::collections::BTreeSet::new();
        listed.extend(self.db.prefixes(cf::KEYS, TOKEN_BYTES)?);
        listed.extend(self.db.prefixes(cf::MANIFESTS, TOKEN_BYTES)?);
        for token in listed
            .iter()
            .filter_map(|token| Uuid::from_slice(token).ok())
        {
            if !ready.contains(&token) {
                let mut batch = Batch::default();
                batch.delete_prefixed(cf::KEYS, token.as_bytes());
                batch.delete(cf::MANIFESTS, token.as_bytes().to_vec());
                self.db.write(batch)?;
            }
        }
        // Whether the cold tier answers: once it has not in time, nothing more is asked of
        // it at this start.
        let mut cold_answers = true;
        for (token, instance, mut state) in self.states()? {
            if !ready.contains(&token) {
                let mut batch = Batch::default();
                batch.delete(cf::TIERS, scoped_key(token, &instance));
                mark_for_cleaning(&mut batch, token);
                self.db.write(batch)?;
                continue;
            }
            match state.state {
                State::Hot => continue,
                State::Archiving => {
                    // Its hot copies are deleted only after `archived` is recorded: whole,
                    // the archive was interrupted, and its cold object is deleted by name
                    // (an upload that completed after the crash is not missed by a listing
                    // that came first), and by the listing of its store, marked. Not whole,
                    // this record is older than the archive (a database restored from a
                    // backup taken while it ran): the object may be the only copy, and the
                    // listing adopts it.
                    let hot_whole = match self.cut(token)? {
                        Some(cut) => {
                            self.hot_whole(token, &self.instance_keys(token, &cut, &instance)?)
                        }
                        None => false,
                    };
                    tracing::warn!(%token, %instance, "an archive was interrupted; the blob stays hot");
                    if cold_answers && hot_whole {
                        let location = ObjectPath::from(state.cold_key.as_str());
                        match self.within(self.cold_wait, self.cold.delete(&location)) {
                            Some(Ok(()) | Err(ObjectError::NotFound { .. })) => {}
                            Some(Err(e)) => {
                                tracing::warn!(object = %location, error = %e, "cannot delete the object of an interrupted archive");
                            }
                            None => {
                                tracing::warn!(
                                    seconds = COLD_ANSWER_WAIT.as_secs(),
                                    "the cold tier does not answer; archived blobs are left as they are until the next start"
                                );
                                cold_answers = false;
                            }
                        }
                    }
                    state.forget_cold();
                    self.put_state(token, &instance, &state)?;
                    continue;
                }
                State::Restoring | State::Archived => {}
            }
            let keys = match self.cut(token)? {
                Some(cut) => self.instance_keys(token, &cut, &instance)?,
                None => Vec::new(),
            };
            let dir = self.store_dir(token);
            if state.state == State::Restoring {
                tracing::warn!(%token, %instance, "a restore was interrupted; the blob stays archived");
                for (key, _) in &keys {
                    remove_file(&partial_path(&dir, key));
                }
                state.state = State::Archived;
                state.changed = now();
                self.put_state(token, &instance, &state)?;
            }
            // With no hot copy beside it there is nothing to decide, and the cold tier is not
            // asked: a start asks nothing of it for blobs archived and left alone.
            if !keys.iter().any(|(key, _)| dir.join(key).exists()) {
                self.count_archived(token, 1);
                continue;
            }
            let location = ObjectPath::from(state.cold_key.as_str());
            let answer = if cold_answers {
                self.within(self.cold_wait, self.cold.head(&location))
            } else {
                None
            };
            // The size of the cold copy; `None` when it is not there.
            let cold = match answer {
                Some(Ok(meta)) => Some(meta.size),
                Some(Err(ObjectError::NotFound { .. })) => None,
                unknown => {
                    // No answer in time, or one that says nothing of the object: the blob
                    // stays as it is (with any hot copies beside it) until a start that
                    // can check its cold copy.
                    match unknown {
                        Some(Err(e)) => tracing::warn!(%token, %instance, error = %e,
                            "cannot check the cold copy of an archived blob; it is left as it is until the next start"),
                        _ if cold_answers => {
                            tracing::warn!(
                                seconds = COLD_ANSWER_WAIT.as_secs(),
                                "the cold tier does not answer; archived blobs are left as they are until the next start"
                            );
                            cold_answers = false;
                        }
                        _ => {}
                    }
                    self.count_archived(token, 1);
                    continue;
                }
            };
            let hot_whole = self.hot_whole(token, &keys);
            match cold {
                Some(size) if size == state.cold_bytes => {
                    // Verified before it was recorded: hot copies beside it are extra.
                    for (key, _) in &keys {
                        remove_file(&dir.join(key));
                    }
                    self.count_archived(token, 1);
                }
                _ if hot_whole && !keys.is_empty() => {
                    tracing::error!(%token, %instance, cold_key = %state.cold_key,
                        "the cold copy of an archived blob is missing or damaged; its hot copies are whole, so it is hot again");
                    state.forget_cold();
                    self.put_state(token, &instance, &state)?;
                }
                _ => {
                    tracing::error!(%token, %instance, cold_key = %state.cold_key,
                        "the cold copy of an archived blob is missing or damaged and its hot copies are not whole: its keys cannot be read");
                    self.count_archived(token, 1);
                }
            }
        }
        if cold_answers {
            // What is not settled stays marked for the next cleaning.
            self.clean_marked(&|token| Ok(ready.contains(&token)), &|| false)?;
        }
        Ok(())
    }

    /// Marks every store the database records (`known`) for cleaning and cleans the cold
    /// tier of them all now, as [`Tier::repair`] cleans the marked ones: after the database
    /// was restored from a backup, whose marks and records may miss what was archived
    /// since (an object holding the only copy of a blob is then adopted). Not while a
    /// daemon serves the database. Blocking.
    ///
    /// Whether every store was cleaned (else what was not stays marked, and the log says
    /// why).
    ///
    /// # Errors
    /// A read or write error of the database.
    pub(crate) fn clean_every_store(
        &self,
        known: &std::collections::HashSet<Uuid>,
        ready: &[Uuid],
    ) -> Result<bool> {
        self.mark_every_store(known)?;
        let ready: std::collections::HashSet<Uuid> = ready.iter().copied().collect();
        self.clean_marked(&|token| Ok(ready.contains(&token)), &|| false)
    }

    /// Marks every store in `known` for cleaning that is not marked yet, as marked long
    /// ago: such a mark follows no archive or restore whose object may still appear, and
    /// the first clean listing removes it (a mark already there keeps its time).
    fn mark_every_store(&self, known: &std::collections::HashSet<Uuid>) -> Result<()> {
        let mut batch = Batch::default();
        for &token in known {
            if self.marked_at(token)?.is_none() {
                batch.put(cf::META, cleaning_mark(token), 0i64.to_be_bytes().to_vec());
            }
        }
        self.db.write(batch)
    }

    /// Cleans the cold tier of the stores marked for it: at start ([`Tier::repair`]), offline
    /// ([`Tier::clean_every_store`]) and while the daemon serves, so that a cold tier that did
    /// not answer at start, a restored object or a removed store's objects that could not be
    /// deleted then, are cleaned without a restart (and a blob whose only copy is an object
    /// its record lost is adopted), until `stopped`. `is_ready` says whether a store is ready
    /// (complete). Whether every marked store was settled. Blocking.
    ///
    /// # Errors
    /// A read or write error of the database.
    pub(crate) fn clean_marked(
        &self,
        is_ready: &dyn Fn(Uuid) -> Result<bool>,
        stopped: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let marked = self.marked_for_cleaning()?;
        if marked.is_empty() {
            return Ok(true);
        }
        self.clean_cold(&marked, is_ready, stopped)
    }

    /// The cold keys the records of the store `token` name: those of its instances that are
    /// not hot (archiving, archived, restoring).
    fn recorded_objects(&self, token: Uuid) -> Result<std::collections::HashSet<String>> {
        let mut recorded = std::collections::HashSet::new();
        self.db
            .for_each_prefixed(cf::TIERS, token.as_bytes(), |key, value| {
                let instance = String::from_utf8_lossy(&key[token.as_bytes().len()..]);
                let state: BlobState = db::decode_json(cf::TIERS, FORMAT, &instance, value)?;
                if state.state != State::Hot {
                    recorded.insert(state.cold_key);
                }
                Ok(())
            })?;
        Ok(recorded)
    }

    /// The cold key the record of `instance` names, when it is not hot.
    fn named_object(&self, token: Uuid, instance: &str) -> Result<Option<String>> {
        Ok(self
            .state(token, instance)?
            .filter(|state| state.state != State::Hot)
            .map(|state| state.cold_key))
    }

    /// Cleans the cold objects no instance's record names, below the prefixes of the stores
    /// `marked` for it (stores of this database whose archives, restores or removal may have
    /// left objects behind since they were last cleaned), one store at a time, until
    /// `stopped`; what it did and could not do is logged once at the end. A store whose lock
    /// is held (an archive or restore of it under way) is left for the next cleaning, which
    /// tries its lock for up to [`BUSY_PATIENCE`] (all such stores of a cleaning together, up
    /// to [`BUSY_PATIENCE_IN_ALL`]; see [`free_for_writing`]): waiting in the lock would hold
    /// up every other restore of the store, as a waiting writer holds off new readers. The
    /// cleaning stops when two stores in a row go unanswered in time (one
    /// slow prefix does not keep the others from being cleaned; a cold tier that does not
    /// answer costs two waits). Whether every marked store was settled.
    fn clean_cold(
        &self,
        marked: &[Uuid],
        is_ready: &dyn Fn(Uuid) -> Result<bool>,
        stopped: &dyn Fn() -> bool,
    ) -> Result<bool> {
        // The stores that went unanswered at the last cleaning come last: two slow ones do
        // not keep the others from being cleaned.
        let slow = std::mem::take(&mut *self.silent_stores.lock());
        let (mut order, last): (Vec<Uuid>, Vec<Uuid>) =
            marked.iter().partition(|token| !slow.contains(token));
        order.extend(last);
        let mut tally = Tally::default();
        let cleaned = self.clean_stores(&order, is_ready, stopped, &mut tally);
        tally.log();
        *self.silent_stores.lock() = std::mem::take(&mut tally.silent_stores);
        // Stores found busy now, and those found busy before that this one did not reach.
        let mut busy = self.busy_stores.lock();
        busy.retain(|token| !tally.reached.contains(token));
        busy.extend(tally.busy_stores.drain());
        drop(busy);
        cleaned
    }

    /// The stores of [`Tier::clean_cold`], each cleaned, its adoptions made, and cleaned
    /// once more after them (so older objects of an adopted blob go at once).
    fn clean_stores(
        &self,
        marked: &[Uuid],
        is_ready: &dyn Fn(Uuid) -> Result<bool>,
        stopped: &dyn Fn() -> bool,
        tally: &mut Tally,
    ) -> Result<bool> {
        let mut all_settled = true;
        let busy_before = self.busy_stores.lock().clone();
        // What is left of the time this cleaning may wait for busy stores.
        let mut patience_left = BUSY_PATIENCE_IN_ALL;
        // Stores whose listing or a deletion went unanswered in time, since the last store
        // that answered.
        let mut silent_in_a_row = 0;
        for &token in marked {
            let mut passes = 0;
            let settled = loop {
                if stopped() {
                    return Ok(false);
                }
                tally.reached.insert(token);
                passes += 1;
                let (cleaned, adoptions) = {
                    let store_lock = self.store_lock(token);
                    let patience = if busy_before.contains(&token) {
                        BUSY_PATIENCE.min(patience_left)
                    } else {
                        Duration::ZERO
                    };
                    let waiting = std::time::Instant::now();
                    let exclusive = free_for_writing(&store_lock, patience, stopped);
                    patience_left = patience_left.saturating_sub(waiting.elapsed());
                    let Some(_exclusive) = exclusive else {
                        if stopped() {
                            return Ok(false);
                        }
                        tally.note_busy(token);
                        break false;
                    };
                    self.clean_store(token, is_ready(token)?, tally, stopped)?
                };
                match cleaned {
                    Cleaned::Silent => {
                        tally.silent.note(token);
                        tally.silent_stores.insert(token);
                        silent_in_a_row += 1;
                        if silent_in_a_row == 2 {
                            return Ok(false);
                        }
                        break false;
                    }
                    Cleaned::Unlisted => break false,
                    Cleaned::Settled => {
                        silent_in_a_row = 0;
                        break true;
                    }
                    Cleaned::Unsettled => silent_in_a_row = 0,
                }
                if adoptions.is_empty() || passes == 2 {
                    break false;
                }
                let mut adopted_all = true;
                for adoption in adoptions {
                    if stopped() {
                        return Ok(false);
                    }
                    match self.adopt(token, &adoption, is_ready, tally)? {
                        Adopted::Yes => {}
                        Adopted::No => adopted_all = false,
                        // The rest waits for a cleaning the store is not busy at.
                        Adopted::Busy => {
                            adopted_all = false;
                            break;
                        }
                    }
                }
                if !adopted_all {
                    break false;
                }
            };
            all_settled &= settled;
        }
        Ok(all_settled)
    }

    /// Cleans the cold objects of the store `token` (`ready`: complete, its tier state
    /// counts) while its exclusive lock is held. Objects of other stores, and anything not
    /// named like a blob's object (`<token>/<instance>.<archive>.zip`), are never touched, so
    /// a database that is new or restored from a backup cannot empty a shared cold tier. Such
    /// an object of a ready store whose instance is not whole on the hot tier, and which no
    /// record names or whose record names an object gone (the newest such object comes
    /// first), is the only copy of its keys (the database lost the record, or is older than
    /// the archive, say it was restored from a backup): it is returned to be adopted (read
    /// back without the lock), and the store is not settled yet. Any other is a leftover (of
    /// a restore or a store converted again or removed) and is deleted, with the local
    /// object store's interrupted writes, until `stopped`. The listing and each deletion are
    /// awaited at most [`COLD_ANSWER_WAIT`]. The store's mark goes once everything below its
    /// prefix is settled, by a listing [`CLEANING_GRACE_SECONDS`] or more after the mark was
    /// put (a mark from a host clock that stood ahead is brought back to the listing's
    /// time).
    fn clean_store(
        &self,
        token: Uuid,
        ready: bool,
        tally: &mut Tally,
        stopped: &dyn Fn() -> bool,
    ) -> Result<(Cleaned, Vec<Adoption>)> {
        let kept = self.recorded_objects(token)?;
        // Nothing else marks the store while its lock is held.
        let marked_at = self.marked_at(token)?;
        // Whether everything below the prefix is settled (then the mark goes).
        let mut settled = true;
        let mut adoptions = Vec::new();
        // Instances whose newest object is to be adopted, or could not be: their older
        // objects are neither adopted nor deleted (the newest may be the only good copy).
        let mut unadopted = std::collections::HashSet::new();
        let prefix = ObjectPath::from(token.to_string());
        let listed_at = now();
        let listed = self.within(self.cold_wait, async {
            use futures::TryStreamExt;
            self.cold.list(Some(&prefix)).try_collect::<Vec<_>>().await
        });
        let mut objects = match listed {
            Some(Ok(objects)) => objects,
            Some(Err(e)) => {
                tally.unlisted.note(format!("{token}: {e}"));
                return Ok((Cleaned::Unlisted, adoptions));
            }
            None => return Ok((Cleaned::Silent, adoptions)),
        };
        let listed: std::collections::HashSet<String> =
            objects.iter().map(|o| o.location.to_string()).collect();
        // Newest archive first: an instance whose record was lost adopts its latest.
        objects.sort_by_key(|o| std::cmp::Reverse(archive_stamp(o.location.as_ref())));
        for object in objects {
            let name = object.location.as_ref();
            if kept.contains(name) {
                continue;
            }
            let Some((owner, instance)) = blob_object(name).filter(|(t, _)| *t == token) else {
                tally.foreign += 1;
                continue;
            };
            let named = self.named_object(owner, &instance)?;
            // The record names an object that is not there (a database restored from a
            // backup older than the blob's latest archive): this one, the newest left, may
            // hold the only copy of its keys.
            let lost = named.as_ref().is_some_and(|named| !listed.contains(named));
            // Else an instance recorded on the cold tier names its own object, which is
            // there: this is an earlier archive's.
            if (named.is_none() || lost)
                && ready
                && let Some(cut) = self.cut(owner)?
            {
                let keys = self.instance_keys(owner, &cut, &instance)?;
                if !keys.is_empty() && !self.hot_whole(owner, &keys) {
                    if unadopted.insert(instance.clone()) {
                        adoptions.push(Adoption {
                            instance,
                            keys,
                            object,
                            named,
                        });
                    }
                    settled = false;
                    continue;
                }
            }
            if lost {
                tally.left_alone.note(format!(
                    "{name} (the record of its blob names {})",
                    named.unwrap_or_default()
                ));
                settled = false;
                continue;
            }
            if stopped() {
                return Ok((Cleaned::Unsettled, adoptions));
            }
            match self.within(self.cold_wait, self.cold.delete(&object.location)) {
                Some(Ok(())) => tally.removed += 1,
                Some(Err(e)) => {
                    tally.undeleted.note(format!("{name}: {e}"));
                    settled = false;
                }
                None => return Ok((Cleaned::Silent, adoptions)),
            }
        }
        if let Some(dir) = &self.cold_dir {
            remove_partial_uploads(&dir.join(token.to_string()));
        }
        if !settled {
            return Ok((Cleaned::Unsettled, adoptions));
        }
        match marked_at {
            // A store marked within the grace stays marked: an object may still appear.
            Some(at) if at <= listed_at.saturating_sub(self.cleaning_grace) => {
                let mut batch = Batch::default();
                batch.delete(cf::META, cleaning_mark(token));
                self.db.write(batch)?;
            }
            Some(at) if at > listed_at => {
                let mut batch = Batch::default();
                batch.put(
                    cf::META,
                    cleaning_mark(token),
                    listed_at.to_be_bytes().to_vec(),
                );
                self.db.write(batch)?;
            }
            _ => {}
        }
        Ok((Cleaned::Settled, adoptions))
    }

    /// Adopts the object `adoption` found below the store `token`: reads it back whole
    /// without the store's lock (it may be a whole blob's download; restores of the store go
    /// on meanwhile), then, under the lock, records it as the archived copy of its instance
    /// if nothing changed since it was found (the store is still ready, the instance has the
    /// same keys, not whole on the hot tier, and its record names what it named then). The
    /// lock is tried for at most a second (without waiting in it, see [`free_for_writing`]):
    /// a store busy longer is [`Adopted::Busy`], and what was read is kept for the next
    /// cleaning. An object that could not be read is not read again for [`ADOPTION_RETRY`]
    /// (while fewer than [`MOST_FAILURES_KEPT`] failures are kept) unless it was replaced (a
    /// new size, modification time or entity tag), or the daemon
    /// restarts; one that is gone meanwhile was deleted, not lost.
    fn adopt(
        &self,
        token: Uuid,
        adoption: &Adoption,
        is_ready: &dyn Fn(Uuid) -> Result<bool>,
        tally: &mut Tally,
    ) -> Result<Adopted> {
        let location = &adoption.object.location;
        let name = location.to_string();
        let version = format!(
            "{name} {} {} {}",
            adoption.object.size,
            adoption.object.last_modified.timestamp_millis(),
            adoption.object.e_tag.as_deref().unwrap_or_default()
        );
        if self
            .adoption_failures
            .lock()
            .get(&version)
            .is_some_and(|failed| failed.elapsed() < ADOPTION_RETRY)
        {
            tally.unadopted.note(format!(
                "{name}: could not be read within the last {} minutes",
                ADOPTION_RETRY.as_secs() / 60
            ));
            return Ok(Adopted::No);
        }
        let read = self.adoption_reads.lock().get(&version).cloned();
        let (checksum, cold_bytes) = match read.map_or_else(|| self.read_back(location), Ok) {
            Ok(read) => read,
            Err(e) => {
                let gone = matches!(
                    self.within(self.cold_wait, self.cold.head(location)),
                    Some(Err(ObjectError::NotFound { .. }))
                );
                if gone {
                    tally.changed += 1;
                    return Ok(Adopted::No);
                }
                tally.unadopted.note(format!("{name}: {e}"));
                let mut failures = self.adoption_failures.lock();
                failures.retain(|_, failed| failed.elapsed() < ADOPTION_RETRY);
                // Past the most kept, a new failure is not kept (it is read again at the
                // next cleaning); those kept keep their wait.
                if failures.len() < MOST_FAILURES_KEPT {
                    failures.insert(version, std::time::Instant::now());
                }
                return Ok(Adopted::No);
            }
        };
        self.adoption_failures.lock().remove(&version);
        let store_lock = self.store_lock(token);
        let Some(_exclusive) = free_for_writing(&store_lock, Duration::from_secs(1), &|| false)
        else {
            tally.note_busy(token);
            let mut reads = self.adoption_reads.lock();
            if reads.len() >= MOST_FAILURES_KEPT {
                reads.clear();
            }
            reads.insert(version, (checksum, cold_bytes));
            return Ok(Adopted::Busy);
        };
        self.adoption_reads.lock().remove(&version);
        let instance = adoption.instance.as_str();
        let unchanged = is_ready(token)?
            && self.named_object(token, instance)? == adoption.named
            && self.cut(token)?.is_some_and(|cut| {
                self.instance_keys(token, &cut, instance)
                    .is_ok_and(|keys| keys == adoption.keys)
            })
            && !self.hot_whole(token, &adoption.keys);
        if !unchanged {
            tally.changed += 1;
            return Ok(Adopted::No);
        }
        // A restoring record is counted as an archived one.
        let counted = self
            .state(token, instance)?
            .is_some_and(|state| matches!(state.state, State::Archived | State::Restoring));
        let keys = &adoption.keys;
        let mut state = BlobState::hot(keys.iter().map(|(_, size)| size).sum(), keys.len() as u64);
        state.state = State::Archived;
        state.checksum = checksum;
        state.cold_bytes = cold_bytes;
        state.cold_key = name;
        state.changed = now();
        self.put_state(token, instance, &state)?;
        if !counted {
            self.count_archived(token, 1);
        }
        tracing::warn!(%token, %instance, "recorded an unrecorded cold object as the archived copy of its blob");
        Ok(Adopted::Yes)
    }
}

/// Whether an object was adopted.
enum Adopted {
    Yes,
    /// Not now (the log says why, or the blob changed while it was read).
    No,
    /// Read, but the store stayed busy with an archive or restore: what was read is kept.
    Busy,
}

/// How long a cleaning waits for a store it found busy (an archive or restore of it under
/// way) the last time, trying its lock every [`BUSY_RETRY`].
const BUSY_PATIENCE: Duration = Duration::from_secs(10);

/// How long a cleaning waits for busy stores in all, counting only its waits (see
/// [`BUSY_PATIENCE`]).
const BUSY_PATIENCE_IN_ALL: Duration = Duration::from_secs(60);

/// See [`BUSY_PATIENCE`].
const BUSY_RETRY: Duration = Duration::from_millis(50);

/// The store lock `lock` for writing, if it is free, or if it frees within `patience`
/// (until `stopped`). Never waits in the lock itself: a waiting writer holds off new readers
/// (restores and archives of the store), so it only tries again, and a store whose archives
/// and restores overlap without a gap is cleaned at a start.
fn free_for_writing<'a>(
    lock: &'a parking_lot::RwLock<()>,
    patience: Duration,
    stopped: &dyn Fn() -> bool,
) -> Option<parking_lot::RwLockWriteGuard<'a, ()>> {
    let until = std::time::Instant::now() + patience;
    loop {
        if let Some(guard) = lock.try_write() {
            return Some(guard);
        }
        if std::time::Instant::now() >= until || stopped() {
            return None;
        }
        std::thread::sleep(BUSY_RETRY);
    }
}

/// How the cleaning of one store went.
enum Cleaned {
    /// Everything below its prefix is settled.
    Settled,
    /// Something is left (to adopt, or for the next cleaning; the log says what).
    Unsettled,
    /// Its listing failed.
    Unlisted,
    /// The cold tier did not answer in time.
    Silent,
}

/// An object a cleaning found to hold the only copy of a blob instance, to adopt.
struct Adoption {
    instance: String,
    /// The instance's keys then.
    keys: Vec<(String, u64)>,
    object: svc_manifests::object_store::ObjectMeta,
    /// What the instance's record named then (`None`: no record, or hot).
    named: Option<String>,
}

/// What a cleaning did and could not do, logged once at its end (a cleaning runs every few
/// minutes: one line per object would repeat for as long as it cannot be settled).
#[derive(Default)]
struct Tally {
    /// Leftovers deleted.
    removed: usize,
    /// Objects not named like a blob's, left alone.
    foreign: usize,
    /// Stores busy with an archive or restore (when listed, or when an object read to be
    /// adopted was to be recorded), left for the next cleaning.
    busy: Problems<Uuid>,
    /// Stores whose listing or a deletion went unanswered in time.
    silent: Problems<Uuid>,
    /// Those stores, to come last at the next cleaning.
    silent_stores: std::collections::HashSet<Uuid>,
    /// The stores found busy, waited for at the next cleaning.
    busy_stores: std::collections::HashSet<Uuid>,
    /// The stores this cleaning came to.
    reached: std::collections::HashSet<Uuid>,
    /// Objects whose blob changed while they were read to be adopted (looked at again at
    /// the next cleaning).
    changed: usize,
    /// Stores whose listing failed.
    unlisted: Problems<String>,
    /// Leftovers that could not be deleted.
    undeleted: Problems<String>,
    /// Objects holding the only copy of a blob that could not be adopted.
    unadopted: Problems<String>,
    /// Objects of blobs whose recorded object is gone, left alone.
    left_alone: Problems<String>,
}

/// How many of a kind of problem, and the first.
struct Problems<T> {
    count: usize,
    first: Option<T>,
}

impl<T> Default for Problems<T> {
    fn default() -> Self {
        Problems {
            count: 0,
            first: None,
        }
    }
}

impl<T> Problems<T> {
    fn note(&mut self, problem: T) {
        self.count += 1;
        self.first.get_or_insert(problem);
    }
}

impl Tally {
    /// Notes that store `token` was busy: logged at the end, and waited for at the next
    /// cleaning.
    fn note_busy(&mut self, token: Uuid) {
        self.busy.note(token);
        self.busy_stores.insert(token);
    }

    fn log(&self) {
        if self.removed > 0 {
            tracing::warn!(objects = self.removed, "removed cold objects no blob names");
        }
        if self.foreign > 0 {
            tracing::info!(
                objects = self.foreign,
                "left alone cold objects below this database's stores not named like blobs"
            );
        }
        if let Some(first) = &self.busy.first {
            tracing::info!(times = self.busy.count, %first,
                "stores being archived or restored are cleaned (and adopt what was read) at the next cleaning");
        }
        if self.changed > 0 {
            tracing::info!(
                objects = self.changed,
                "cold objects read to be adopted whose blob changed meanwhile are looked at again at the next cleaning"
            );
        }
        if let Some(first) = &self.silent.first {
            tracing::warn!(stores = self.silent.count, %first, seconds = COLD_ANSWER_WAIT.as_secs(),
                "the cold tier does not answer in time for stores' cleaning; tried again at the next cleaning");
        }
        if let Some(first) = &self.unlisted.first {
            tracing::warn!(stores = self.unlisted.count, %first,
                "cannot list stores' cold objects to clean them; tried again at the next cleaning");
        }
        if let Some(first) = &self.undeleted.first {
            tracing::warn!(objects = self.undeleted.count, %first,
                "cannot delete cold objects no blob names; tried again at the next cleaning");
        }
        if let Some(first) = &self.unadopted.first {
            tracing::error!(objects = self.unadopted.count, %first,
                "cold objects holding the only copy of a blob cannot be read to be adopted; their keys cannot be read until they are");
        }
        if let Some(first) = &self.left_alone.first {
            tracing::error!(objects = self.left_alone.count, %first,
                "archived blobs' recorded cold objects are missing; other objects of them are left alone");
        }
    }
}

/// The store and instance a cold object is the blob of, when it is named like one:
/// `<token>/<instance>.<archive>.zip` (see `archive::cold_key`), or `<token>/<instance>.zip`
/// as versions before archive names wrote them.
fn blob_object(name: &str) -> Option<(Uuid, String)> {
    blob_name(name).map(|(token, instance, _)| (token, instance.to_string()))
}

/// When the cold object `name` was archived (the `<archive>` of its name; 0 for names
/// without one, or not named like a blob's object).
fn archive_stamp(name: &str) -> u128 {
    blob_name(name)
        .and_then(|(_, _, archive)| u128::from_str_radix(archive, 16).ok())
        .unwrap_or(0)
}

/// The token, instance and archive (`"0"` for names without one) of a blob object's name:
/// the one parser of those names.
fn blob_name(name: &str) -> Option<(Uuid, &str, &str)> {
    let (token, file) = name.split_once('/')?;
    let stem = file.strip_suffix(".zip")?;
    let (instance, archive) = stem.split_once('.').unwrap_or((stem, "0"));
    let valid = !instance.is_empty()
        && instance
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !archive.is_empty()
        && archive
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    valid.then_some(())?;
    Some((Uuid::parse_str(token).ok()?, instance, archive))
}

/// Where a key's file is written before it is renamed into place: `.<name>.partial` beside
/// it, the name conversions use, which is never a key.
fn partial_path(dir: &Path, key: &str) -> PathBuf {
    let path = dir.join(key);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}

/// Flushes the file system holding `path` to its disks (`syncfs(2)`): what was written
/// there survives a power loss before the other copy of it is deleted. One call for all the
/// files of a blob, where a sync per file would cost a disk flush each.
///
/// # Errors
/// `path` cannot be opened or the flush failed.
fn sync_filesystem(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let failed = |e| Error::io(format!("sync the file system of {}", path.display()), e);
    let dir = std::fs::File::open(path).map_err(failed)?;
    #[allow(unsafe_code)]
    // SAFETY: `syncfs` only reads the descriptor, which `dir` keeps open for the call.
    let synced = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if synced != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Asks the kernel to drop the cached pages of the (synced) file at `path`, so that the
/// next read of it reads the disk. Advice only: nothing fails when it is not taken.
fn drop_cached_pages(path: &Path) {
    use std::os::fd::AsRawFd;
    if let Ok(file) = std::fs::File::open(path) {
        #[allow(unsafe_code)]
        // SAFETY: `posix_fadvise` only reads the descriptor, which `file` keeps open.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
}

/// Starts writing `file`'s dirty pages to disk without waiting (`sync_file_range(2)`), so
/// that the flush of the whole blob at its end (`syncfs`) finds most of it written while
/// the next files were unpacked. Advice only: the flush at the end is what counts.
fn start_writeback(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    #[allow(unsafe_code)]
    // SAFETY: `sync_file_range` only reads the descriptor, which `file` keeps open.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Removes a file that may not exist.
fn remove_file(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove a file"),
    }
}

/// Removes what interrupted writes of the local object store left below `dir`: files named
/// `<object>#<n>`, which it never lists.
fn remove_partial_uploads(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => remove_partial_uploads(&path),
            Ok(_) if entry.file_name().to_string_lossy().contains('#') => remove_file(&path),
            _ => {}
        }
    }
}

/// The files of a store's directory as keys (relative paths) with their sizes, in key order;
/// a conversion's or restore's temporary files (`.<name>.partial`) are not keys.
///
/// # Errors
/// The directory cannot be read.
pub(crate) fn list_files(dir: &Path) -> std::io::Result<Vec<(String, u64)>> {
    fn walk(dir: &Path, prefix: &str, keys: &mut Vec<(String, u64)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let key = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let kind = entry.file_type()?;
            if kind.is_dir() {
                walk(&entry.path(), &key, keys)?;
            } else if kind.is_file() && !name.ends_with(".partial") {
                keys.push((key, entry.metadata()?.len()));
            }
        }
        Ok(())
    }
    let mut keys = Vec::new();
    walk(dir, "", &mut keys)?;
    keys.sort();
    Ok(keys)
}
