//! The one door to a key of a store: [`Stores::read`]. The HTTP routes use it now; the FUSE
//! mount and the tier restore will too.
//!
//! It checks access first (a store the caller may not read is not found, as one that does not
//! exist), then validates the key before any work: malformed keys are 400, keys the store does
//! not have are 404, `zarr.json` is 404 so zarr-python 3 falls back to Zarr v2. Metadata comes
//! from memory (the consolidated metadata, loaded once per conversion); chunks come from the
//! hot tier. A chunk of a store still being converted that is not written yet is computed
//! from the source on demand, with the conversion's own functions, so the reader gets the
//! bytes the conversion will write without waiting for it (they are not stored: the
//! conversion writes every chunk itself). When that cannot be done, the chunk is waited for,
//! up to the caller's bound, then answered with [`Error::NotReady`] (503 with `Retry-After`):
//! never with a 404, which clients would silently turn into fill values.
//!
//! Every wait (for a conversion, a restore, a chunk computed on the request) ends when the
//! daemon begins to stop ([`crate::jobs::Queue::begin_stop`]), answered with
//! [`Error::Stopping`]: a reader may wait up to 25 minutes, and a stop that drained it would
//! outlast systemd's patience (`TimeoutStopSec`), which then kills the daemon.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::{Status, StoreRecord, Stores};
use crate::auth::Caller;
use crate::convert;
use crate::error::{Error, Fault, Missing, Result};
use crate::jobs::Stop;
use crate::tier::Asked;

/// How often a reader looks for metadata or a chunk that is being written: soon at first (a
/// store just requested has its metadata within milliseconds), then every 20 ms.
const FIRST_POLL: Duration = Duration::from_millis(1);
const POLL: Duration = Duration::from_millis(20);

/// How long a client is told to wait before asking again for a chunk not yet written.
const RETRY: Duration = Duration::from_secs(2);

/// Chunks computed on demand at once. A chunk can be hundreds of MiB (`chunk_size` up to
/// 512), so many clients opening a store being converted must not each compute one: beyond
/// this they wait for the conversion instead.
pub(super) const ON_DEMAND_AT_ONCE: usize = 4;

/// Chunks computed on demand at once for the stores of one owner.
const ON_DEMAND_PER_OWNER: usize = 2;

/// What a key of a store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A metadata document (JSON).
    Metadata,
    /// An encoded chunk; immutable once the store is ready.
    Chunk,
}

/// The bytes of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyBytes {
    /// What the key holds.
    pub kind: KeyKind,
    /// Its content: shared, so metadata is handed out without a copy and a chunk file's
    /// pages go from the page cache to the socket without one (see [`read_chunk_file`]).
    pub bytes: Bytes,
    /// For a chunk of a ready store, which never changes until the store is converted again:
    /// an entity tag (quoted) naming this chunk of this conversion.
    pub etag: Option<String>,
}

/// A store key, parsed.
#[derive(Debug, PartialEq, Eq)]
enum Key<'k> {
    /// `.zmetadata`.
    Consolidated,
    /// `.zgroup`, `.zattrs`, `<path>/.zarray`, `<path>/.zattrs`, `<path>/.zgroup`.
    Document(&'k str),
    /// `<array path>/<i.j.k>`.
    Chunk { array: &'k str, index: Vec<u64> },
}

const DOCUMENTS: [&str; 3] = [".zgroup", ".zattrs", ".zarray"];

fn invalid(key: &str, why: &str) -> Error {
    Error::invalid(
        "zarr_key",
        Fault::Syntax,
        format!("Invalid zarr key {key:?}: {why}."),
    )
}

fn missing(key: &str) -> Error {
    Error::NotFound(Missing::StoreKey(key.to_string()))
}

/// Parses a key as the spec defines keys (spec 2, "Zarr store keys").
fn parse_key(key: &str) -> Result<Key<'_>> {
    if key.is_empty() || key.len() > 1024 {
        return Err(invalid(
            key,
            "expected a metadata key or <variable>/<chunk>",
        ));
    }
    let segments: Vec<&str> = key.split('/').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return Err(invalid(key, "empty, '.' or '..' path segments"));
    }
    let (leaf, parent) = match key.rsplit_once('/') {
        Some((parent, leaf)) => (leaf, Some(parent)),
        None => (key, None),
    };
    match (leaf, parent) {
        ("zarr.json", _) => Err(Error::NotFound(Missing::ZarrV3)),
        (".zmetadata", None) => Ok(Key::Consolidated),
        (".zmetadata", Some(_)) => Err(missing(key)),
        (".zarray", None) => Err(invalid(
            key,
            "a group or variable name must precede .zarray",
        )),
        (document, _) if DOCUMENTS.contains(&document) => Ok(Key::Document(key)),
        (_, None) => Err(invalid(
            key,
            "expected a metadata key or <variable>/<chunk>",
        )),
        (chunk, Some(array)) => {
            let index = chunk
                .split('.')
                .map(|part| {
                    // Digits, without leading zeros: the one name Zarr gives each chunk.
                    if part.is_empty()
                        || !part.bytes().all(|b| b.is_ascii_digit())
                        || (part.len() > 1 && part.starts_with('0'))
                    {
                        None
                    } else {
                        part.parse::<u64>().ok()
                    }
                })
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| invalid(key, "a chunk is its indices joined by dots"))?;
            Ok(Key::Chunk { array, index })
        }
    }
}

/// The metadata of one conversion of a store, as served.
pub(super) struct Served {
    /// The `.zmetadata` file it was read from (none: computed on demand).
    file: Option<FileIdentity>,
    /// The `.zmetadata` file.
    consolidated: Bytes,
    /// Its documents by key.
    documents: Map<String, Value>,
}

/// What the read path keeps of the stores being read.
pub(super) struct ReadCache {
    /// Metadata by store, loaded from the hot tier once per conversion, weighed by its
    /// bytes, at most [`KEPT_METADATA_BYTES`] (every store ever read would stay otherwise).
    metadata: quick_cache::sync::Cache<Uuid, Arc<Served>, ServedWeight>,
    /// Mapped chunk files of ready stores by store and key, with the conversion they belong
    /// to (its `.zmetadata`): a chunk read again is served without opening, mapping and
    /// unmapping its file, which is most of the daemon's own work per chunk request.
    /// Weighed by bytes, at most [`MAPPED_CHUNK_BYTES`].
    chunks: quick_cache::sync::Cache<(Uuid, String), (FileIdentity, Bytes), ByLength>,
}

/// The most bytes of chunk files kept mapped. They are the page cache's pages, not copies;
/// the bound keeps a removed or reconverted store's files from being held for long.
const MAPPED_CHUNK_BYTES: u64 = 1 << 30;

/// The most weight of metadata kept (see [`ServedWeight`]).
const KEPT_METADATA_BYTES: u64 = 256 << 20;

/// A `.zmetadata` longer than this is parsed by one reader at a time ([`PARSING`]).
const LONG_METADATA: u64 = 1 << 20;

/// Held while a long `.zmetadata` is parsed: what parsing takes is bounded by one, not by
/// the readers at once.
static PARSING: Mutex<()> = Mutex::new(());

/// Weighs a store's metadata: its `.zmetadata` bytes, and the parsed documents, some
/// times larger.
#[derive(Clone)]
pub(super) struct ServedWeight;

impl quick_cache::Weighter<Uuid, Arc<Served>> for ServedWeight {
    fn weight(&self, _token: &Uuid, served: &Arc<Served>) -> u64 {
        (served.consolidated.len() as u64).saturating_mul(5).max(1)
    }
}

/// Weighs a mapped chunk by its length.
#[derive(Clone)]
pub(super) struct ByLength;

impl quick_cache::Weighter<(Uuid, String), (FileIdentity, Bytes)> for ByLength {
    fn weight(&self, _key: &(Uuid, String), value: &(FileIdentity, Bytes)) -> u64 {
        value.1.len() as u64
    }
}

impl Default for ReadCache {
    fn default() -> Self {
        ReadCache {
            // One shard: an item heavier than a shard's share of the weight is never kept,
            // and the longest metadata a store may have (16 MiB, weighing 80) is kept.
            metadata: quick_cache::sync::Cache::with_options(
                quick_cache::OptionsBuilder::new()
                    .estimated_items_capacity(256)
                    .weight_capacity(KEPT_METADATA_BYTES)
                    .shards(1)
                    .build()
                    .expect("every option is set"),
                ServedWeight,
                quick_cache::DefaultHashBuilder::default(),
                quick_cache::sync::DefaultLifecycle::default(),
            ),
            // The item estimate sizes the cache's tables (chunks of 1 MiB and more), and its
            // shards, at most 32: a chunk of up to 32 MiB is kept on any machine.
            chunks: quick_cache::sync::Cache::with_weighter(1024, MAPPED_CHUNK_BYTES, ByLength),
        }
    }
}

impl ReadCache {
    /// Drops what is cached of a store.
    pub(super) fn forget(&self, token: Uuid) {
        self.metadata.remove(&token);
        self.chunks.retain(|(store, _), _| *store != token);
    }

    /// The mapping kept of chunk `key` of `token` from the conversion `conversion`.
    fn mapped(&self, token: Uuid, key: &str, conversion: FileIdentity) -> Option<Bytes> {
        self.chunks
            .get(&(token, key.to_string()))
            .and_then(|(kept, bytes)| (kept == conversion).then_some(bytes))
    }
}

impl Stores {
    /// The bytes of `key` of the store `token` for `caller` (none: an anonymous request, or
    /// one that a share URL authorised: pass the owner then) at `now`, waiting up to `wait`
    /// for a chunk being written. Blocking.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a store the caller may not read, a gone store or a key the
    /// store does not have; [`Error::InvalidParameter`] for a malformed key;
    /// [`Error::StoreFailed`] when its conversion failed; [`Error::NotReady`] when the key is
    /// not written within `wait`; [`Error::Stopping`] when the daemon stops while this waits;
    /// an I/O error reading the hot tier.
    pub fn read(
        &self,
        caller: Option<&Caller>,
        token: Uuid,
        key: &str,
        now: i64,
        wait: Duration,
    ) -> Result<KeyBytes> {
        let by = caller.map(|c| c.user.clone()).unwrap_or_default();
        self.read_asked(caller, token, key, now, wait, &Asked::now(by))
    }

    /// As [`Stores::read`], for a request `asked` (when, and for whom: the restores of the
    /// users asking take turns): it waits up to `wait` from then.
    /// A reader that tries first without waiting (a `wait` of zero) and then again, waiting,
    /// passes the same `asked` both times: a restore its first try started that failed since
    /// is then its answer, not run again (see [`crate::tier::Tier::restore_for_read`]).
    /// Blocking.
    ///
    /// # Errors
    /// As [`Stores::read`].
    pub fn read_asked(
        &self,
        caller: Option<&Caller>,
        token: Uuid,
        key: &str,
        now: i64,
        wait: Duration,
        asked: &Asked,
    ) -> Result<KeyBytes> {
        let mut record = self.readable(caller, token, now)?;
        let parsed = parse_key(key)?;
        // Only users' reads count: the sweep removes stores nobody reads.
        self.reads.note(token, now);
        let deadline = asked.at + wait;
        let mut interval = FIRST_POLL;
        let mut computed = false;
        let served = loop {
            match record.status {
                Status::Failed => {
                    return Err(Error::StoreFailed {
                        token: token.to_string(),
                        reason: record.reason.clone(),
                    });
                }
                Status::Gone => return Err(Error::NotFound(Missing::Store(token.to_string()))),
                Status::Ready | Status::Preparing | Status::Archived => {}
            }
            if let Some(served) = self.served(&record)? {
                break (served, record.status);
            }
            if record.status != Status::Preparing {
                return Err(missing(".zmetadata"));
            }
            // Once per request: each computation takes a process, and one that failed
            // fails again (the conversion gives the answer, or the reason).
            if !computed {
                computed = true;
                if let Some(served) = self.metadata_on_demand(&record) {
                    break (Arc::new(served), record.status);
                }
            }
            pause(deadline, &mut interval, &self.stopping)?;
            record = self.current(&record)?;
        };
        let (served, status) = served;
        match parsed {
            Key::Consolidated => Ok(KeyBytes {
                kind: KeyKind::Metadata,
                bytes: served.consolidated.clone(),
                etag: None,
            }),
            Key::Document(document) => served
                .documents
                .get(document)
                .map(|value| KeyBytes {
                    kind: KeyKind::Metadata,
                    bytes: Bytes::from(value.to_string()),
                    etag: None,
                })
                .ok_or_else(|| missing(key)),
            Key::Chunk { array, index } => {
                check_chunk(&served.documents, array, &index, key)?;
                let path = self.dir(token).join(key);
                let chunk = |bytes, etag| KeyBytes {
                    kind: KeyKind::Chunk,
                    bytes,
                    etag,
                };
                // Chunks of a ready store are immutable until a reload, which writes a new
                // `.zmetadata`: its identity names the conversion.
                let conversion = match (status, served.file) {
                    (Status::Ready | Status::Archived, Some(file)) => Some(file),
                    _ => None,
                };
                let etag = conversion.map(|file| file.etag(token, key));
                if let Some(conversion) = conversion
                    && let Some(bytes) = self.cache.mapped(token, key, conversion)
                {
                    return Ok(chunk(bytes, etag));
                }
                let mut computed = false;
                let mut looked_again = false;
                loop {
                    let keep = conversion.filter(|_| self.may_keep_mapped(token, &path));
                    match read_chunk_file(&path) {
                        Ok(bytes) => {
                            let kept = match keep {
                                Some(conversion) if bytes.len() as u64 >= MAP_FROM_BYTES => {
                                    let id = (token, key.to_string());
                                    self.cache
                                        .chunks
                                        .insert(id.clone(), (conversion, bytes.clone()));
                                    Some(id)
                                }
                                _ => None,
                            };
                            // The file read may be a later conversion's (a reload's job
                            // rewrote it, while this read waited or not), which the ETag (and
                            // a mapping kept) must not name, or a removed store's (its data
                            // goes with its job, later): answered as the store is now, as the
                            // mount does. (And a removal or reload that dropped the store's
                            // mappings in between would leave the one kept holding removed
                            // files.) The ETag names the metadata read, which may be of a
                            // conversion that finished after `record` was read: then the
                            // store's metadata now is still that one.
                            if let Some(named) = conversion
                                && let Some(refused) =
                                    self.still_the_conversion(&record, named).err()
                            {
                                if let Some(id) = kept {
                                    self.cache.chunks.remove(&id);
                                }
                                return Err(refused);
                            }
                            return Ok(chunk(bytes, etag));
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io(format!("read {}", path.display()), e)),
                    }
                    let current = self.current(&record)?;
                    if current.is_complete() {
                        // Its blob may be on the cold tier: restored, it is read again (an
                        // archive may take it again in between: then it is restored again,
                        // within the caller's bound). A chunk of a complete store that is in
                        // no blob and not on the hot tier was never written: it is missing.
                        let left = deadline.saturating_duration_since(Instant::now());
                        if self
                            .tier
                            .restore_for_read(token, key, left, asked, &self.stopping)?
                        {
                            continue;
                        }
                        // Not archived now: a restore may have renamed it into place since
                        // it was looked for; once more, then it is missing.
                        if !looked_again {
                            looked_again = true;
                            continue;
                        }
                        // A listed key was written: neither hot nor archived, its record was
                        // lost (a database restored from a backup, before the cleaning found
                        // its cold object). Not "missing", which readers take for the fill
                        // value.
                        if self.tier.listed_size(token, key)?.is_some() {
                            return Err(Error::Restoring {
                                detail: format!(
                                    "The key {key} was written but is neither on the hot tier \
                                     nor recorded on the cold tier (a database restored from a \
                                     backup?). The daemon's cleaning of the cold tier adopts \
                                     its object when the store is marked for it (an object it \
                                     cannot read, after an hour); `svcd tier repair`, run \
                                     while the daemon is stopped, looks in every store."
                                ),
                                retry: Duration::from_secs(60),
                            });
                        }
                        return Err(missing(key));
                    }
                    match current.status {
                        // Not "missing", which readers take for the fill value.
                        Status::Failed => {
                            return Err(Error::StoreFailed {
                                token: token.to_string(),
                                reason: current.reason.clone(),
                            });
                        }
                        Status::Preparing => {}
                        _ => return Err(missing(key)),
                    }
                    if !computed {
                        computed = true;
                        if let Some(bytes) = self.chunk_on_demand(&current, &served, array, &index)
                        {
                            return Ok(chunk(Bytes::from(bytes), None));
                        }
                    }
                    pause(deadline, &mut interval, &self.stopping)?;
                }
            }
        }
    }

    /// Whether store `record.token` is still the conversion `record` was, or a later one whose
    /// `.zmetadata` is the file `named` (one that finished after `record` was read, whose
    /// metadata the reader saw): what a chunk read just now may be served as. Else 404 for a
    /// store removed since, 503 ("read it again") for one converted again.
    ///
    /// # Errors
    /// As said, and a read error.
    fn still_the_conversion(&self, record: &StoreRecord, named: FileIdentity) -> Result<()> {
        let now = self.current(record)?;
        if now.is_complete_conversion(record.conversion)
            || (now.is_complete()
                && self
                    .served(&now)?
                    .is_some_and(|served| served.file == Some(named)))
        {
            return Ok(());
        }
        Err(if now.status == Status::Gone {
            Error::NotFound(Missing::Store(record.token.to_string()))
        } else {
            Error::Restoring {
                detail: "The store was converted again while this read was under way; read \
                         it again."
                    .into(),
                retry: Duration::from_secs(1),
            }
        })
    }

    /// The hot copy of chunk `key` of the complete store `token`, opened, while the store is
    /// its `conversion` (see [`StoreRecord::conversion`]): what the mount hands to the
    /// kernel to read directly (FUSE passthrough), whose bytes are exactly what
    /// [`Stores::read`] serves. `None` for a key that is not a chunk (documents are served as
    /// the daemon holds them, not as their files are written), a store not complete or
    /// converted since, or a chunk not on the hot tier (archived: a read restores it). The
    /// caller has checked who may read the store (the mount, against the same record). The
    /// open counts as a user's read. Blocking.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a malformed key; an I/O error opening the file.
    pub fn hot_chunk(
        &self,
        token: Uuid,
        key: &str,
        conversion: u64,
        now: i64,
    ) -> Result<Option<std::fs::File>> {
        let Some(record) = self.shared_record(token)? else {
            return Ok(None);
        };
        if !record.is_complete_conversion(conversion)
            || !matches!(parse_key(key)?, Key::Chunk { .. })
        {
            return Ok(None);
        }
        self.reads.note(token, now);
        let path = self.dir(token).join(key);
        match std::fs::File::open(&path) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("open {}", path.display()), e)),
        }
    }

    /// Whether the chunk file at `path` of the ready store `token`, once mapped, may be kept
    /// as the chunk of the conversion whose `.zmetadata` the reader saw: when it is large
    /// enough to be mapped and the store is ready now. This is asked after that metadata was
    /// seen and before the file is opened: a reload marks the store preparing before it
    /// writes new metadata, so a store ready now has finished the conversion that wrote the
    /// metadata seen, and the file opened next is that conversion's chunk (or a later
    /// conversion's, which the reader would have read anyway).
    fn may_keep_mapped(&self, token: Uuid, path: &std::path::Path) -> bool {
        std::fs::metadata(path).is_ok_and(|meta| meta.len() >= MAP_FROM_BYTES)
            && matches!(self.shared_record(token), Ok(Some(record)) if record.is_complete())
    }

    /// Computes something of `record`'s store from its source, on a request: with one of the
    /// owner's on-demand slots and the source opened and checked again for the owner
    /// ([`Stores::open_source`]). `None` when it cannot be: no slot is free, the source
    /// cannot be read, or its owner may no longer read it; `compute` says `None` too. What
    /// fails is logged (the conversion then gives the answer, or fails with the reason).
    fn on_demand<T>(
        &self,
        record: &StoreRecord,
        compute: impl FnOnce(&convert::Source) -> std::result::Result<Option<T>, String>,
    ) -> Option<T> {
        // An aggregated store waits for its conversion: combining needs every source.
        if record.sources.len() != 1 || record.aggregation.is_some() || record.reduction.is_some() {
            return None;
        }
        let _slot = self.on_demand.take(&record.owner)?;
        // Written to while it was read, what was computed may mix old and new bytes: not
        // served (the conversion fails the store, or writes what the file holds then).
        let computed = self.open_source(record).and_then(|source| {
            let computed = compute(&source)?;
            source.unchanged()?;
            Ok(computed)
        });
        match computed {
            Ok(computed) => computed,
            Err(reason) => {
                tracing::debug!(token = %record.token, %reason, "cannot compute on demand");
                None
            }
        }
    }

    /// The metadata of a store whose conversion has not written it yet (it waits for a
    /// worker), computed from its source as the conversion computes it: the same documents.
    /// Not cached: the conversion writes them soon. `None` as [`Stores::on_demand`].
    fn metadata_on_demand(&self, record: &StoreRecord) -> Option<Served> {
        self.on_demand(record, |source| {
            let documents = convert::child::layout(
                source,
                &record.owner,
                &record.chunking,
                self.config.compressor,
                self.config.on_demand_memory(),
                &self.stopping,
            )?;
            Ok(Some(Served {
                file: None,
                consolidated: Bytes::from(convert::metadata::consolidated(&documents).to_string()),
                documents,
            }))
        })
    }

    /// A chunk the conversion of `record` has not written yet, computed from its source as
    /// the conversion computes it ([`convert::chunk_on_demand`]). `None` when it is not: the
    /// chunk is too large to compute on a request ([`on_demand_cost_allowed`]), the source no
    /// longer gives the served metadata (it changed, or the store is being reconverted with
    /// other options), or as [`Stores::on_demand`]. The conversion then writes the chunk or
    /// fails.
    fn chunk_on_demand(
        &self,
        record: &StoreRecord,
        served: &Served,
        array: &str,
        index: &[u64],
    ) -> Option<Vec<u8>> {
        let zarray = served.documents.get(&format!("{array}/.zarray"))?;
        if !on_demand_cost_allowed(zarray) {
            return None;
        }
        self.on_demand(record, |source| {
            convert::child::chunk(
                source,
                &record.owner,
                &record.chunking,
                self.config.compressor,
                array,
                index,
                zarray,
                ON_DEMAND_MAX_BYTES,
                self.config.on_demand_memory(),
                &self.stopping,
            )
        })
    }

    /// The key listing of a complete store: its files with their sizes, and every metadata
    /// key with the size of the document a read serves (which is not always the file's).
    ///
    /// # Errors
    /// The store's directory or metadata cannot be read.
    pub(crate) fn listing(&self, record: &StoreRecord) -> Result<Vec<(String, u64)>> {
        let dir = self.dir(record.token);
        let mut keys = crate::tier::list_files(&dir)
            .map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
        let served = self.served(record)?.ok_or_else(|| missing(".zmetadata"))?;
        let mut listed = std::collections::HashSet::new();
        for (key, size) in &mut keys {
            if key == ".zmetadata" {
                *size = served.consolidated.len() as u64;
            } else if let Some(document) = served.documents.get(key.as_str()) {
                *size = document.to_string().len() as u64;
            }
            listed.insert(key.clone());
        }
        for (key, document) in &served.documents {
            if !listed.contains(key) {
                keys.push((key.clone(), document.to_string().len() as u64));
            }
        }
        keys.sort();
        Ok(keys)
    }

    /// The record as it is stored now.
    fn current(&self, record: &StoreRecord) -> Result<Arc<StoreRecord>> {
        self.shared_record(record.token)?
            .ok_or_else(|| Error::NotFound(Missing::Store(record.token.to_string())))
    }

    /// The served metadata of the store's current conversion, if it is written.
    ///
    /// The cache is checked against the `.zmetadata` file on every call (one `stat`): each
    /// conversion writes a new file (a rename), so metadata cached from an earlier conversion
    /// (a reader that raced a `reload`) is never served for a later one.
    fn served(&self, record: &StoreRecord) -> Result<Option<Arc<Served>>> {
        let path = self.dir(record.token).join(".zmetadata");
        let failed = |e| Error::io(format!("read {}", path.display()), e);
        let kept = |file: FileIdentity| {
            self.cache
                .metadata
                .get(&record.token)
                .filter(|served| served.file == Some(file))
        };
        let written = match std::fs::metadata(&path) {
            Ok(meta) => FileIdentity::of(&meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(failed(e)),
        };
        if let Some(served) = kept(written) {
            return Ok(Some(served));
        }
        // Read the file and its identity from one open file, so they agree.
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(failed(e)),
        };
        let file_identity = FileIdentity::of(&file.metadata().map_err(failed)?);
        let corrupt =
            |reason: String| failed(std::io::Error::new(std::io::ErrorKind::InvalidData, reason));
        // Written by a process that read a user's file, while the store is converted: not
        // trusted to be as long as a conversion writes it. A complete store's was checked so
        // as its conversion ended (the job lists it through here), or was written before
        // conversions were bounded so, and is read whole as then.
        let most = (!record.is_complete()).then_some(convert::metadata::MAX_CONSOLIDATED_BYTES);
        let too_long = |len: u64| {
            most.filter(|&most| len > most)
                .map(|most| corrupt(format!("longer than the {most} bytes a conversion writes")))
        };
        if let Some(refused) = too_long(file_identity.size) {
            return Err(refused);
        }
        // One long document parsed at a time (each takes many times its length), and the
        // readers of the same store waiting meanwhile find it kept.
        let parsing = (file_identity.size > LONG_METADATA).then(|| PARSING.lock());
        if parsing.is_some()
            && let Some(served) = kept(file_identity)
        {
            return Ok(Some(served));
        }
        let mut consolidated = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(&mut file, most.map_or(u64::MAX, |most| most + 1)),
            &mut consolidated,
        )
        .map_err(failed)?;
        if let Some(refused) = too_long(consolidated.len() as u64) {
            return Err(refused);
        }
        let value: Value =
            serde_json::from_slice(&consolidated).map_err(|e| corrupt(e.to_string()))?;
        let Value::Object(mut value) = value else {
            return Err(corrupt("not an object".into()));
        };
        let Some(Value::Object(documents)) = value.remove("metadata") else {
            return Err(corrupt("no metadata object".into()));
        };
        let served = Arc::new(Served {
            file: Some(file_identity),
            consolidated: Bytes::from(consolidated),
            documents,
        });
        self.cache
            .metadata
            .insert(record.token, Arc::clone(&served));
        Ok(Some(served))
    }
}

/// What tells one written `.zmetadata` from another: device, inode, size and modification
/// time (an inode number alone can be reused once the earlier file is removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    modified: (i64, i64),
}

impl FileIdentity {
    /// The entity tag of `key` of the store `token` converted with this `.zmetadata`.
    fn etag(self, token: Uuid, key: &str) -> String {
        let mut named = Vec::with_capacity(64 + key.len());
        named.extend_from_slice(token.as_bytes());
        for n in [self.dev, self.ino, self.size] {
            named.extend_from_slice(&n.to_le_bytes());
        }
        named.extend_from_slice(&self.modified.0.to_le_bytes());
        named.extend_from_slice(&self.modified.1.to_le_bytes());
        named.extend_from_slice(key.as_bytes());
        format!("\"{:032x}\"", xxhash_rust::xxh3::xxh3_128(&named))
    }

    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            modified: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// Chunk files from this size on are mapped rather than read: mapping costs a few system
/// calls, copying costs per byte.
pub(super) const MAP_FROM_BYTES: u64 = 64 << 10;

/// The bytes of the chunk file at `path`. A large one is mapped, not read: its pages go from
/// the page cache straight to the socket, where reading them would copy each chunk once more
/// into the process (the larger part of the daemon's work when serving chunks).
///
/// A mapped file that shrinks while mapped would fault its reader (SIGBUS). The hot tier
/// never changes a written file: every chunk and document is written to a temporary file and
/// renamed into place ([`crate::convert`]), and removing a store unlinks its files; a mapping
/// keeps the pages of a file that was replaced or unlinked. Whatever writes into the hot tier
/// must keep to that.
fn read_chunk_file(path: &std::path::Path) -> std::io::Result<Bytes> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size < MAP_FROM_BYTES {
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        std::io::Read::read_to_end(&mut &file, &mut bytes)?;
        return Ok(Bytes::from(bytes));
    }
    map_read_only(&file).map(Bytes::from_owner)
}

/// Maps `file` read-only, its pages loaded at once (one fault-free pass when sent).
#[allow(unsafe_code)]
fn map_read_only(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the mapping is read-only and private to this process, and files of the hot
    // tier are never truncated or written in place (see `read_chunk_file`), so the mapped
    // bytes stay valid and unchanged for as long as the mapping lives.
    unsafe { memmap2::MmapOptions::new().populate().map(file) }
}

/// The largest chunk computed on demand, uncompressed.
const ON_DEMAND_MAX_BYTES: u64 = 64 << 20;

/// The most strings in a chunk computed on demand (strings are read one by one).
const ON_DEMAND_MAX_STRINGS: u64 = 10_000;

/// Whether a chunk of the array `zarray` describes is small enough to compute on a request:
/// at most [`ON_DEMAND_MAX_BYTES`] uncompressed, or [`ON_DEMAND_MAX_STRINGS`] strings.
fn on_demand_cost_allowed(zarray: &Value) -> bool {
    let Some(chunks) = zarray["chunks"].as_array() else {
        return false;
    };
    let elements = chunks
        .iter()
        .try_fold(1u64, |n, c| c.as_u64().and_then(|c| n.checked_mul(c)));
    let Some(elements) = elements else {
        return false;
    };
    match zarray["dtype"].as_str() {
        Some("|O") => elements <= ON_DEMAND_MAX_STRINGS,
        Some(dtype) => {
            let item: u64 = dtype
                .get(2..)
                .and_then(|n| n.parse().ok())
                .unwrap_or(u64::MAX);
            elements.saturating_mul(item) <= ON_DEMAND_MAX_BYTES
        }
        None => false,
    }
}

/// The computations on demand under way, by the owner of the store they are for.
#[derive(Default)]
pub(super) struct OnDemand {
    /// Computations running, by owner.
    busy: Mutex<HashMap<String, usize>>,
}

impl OnDemand {
    /// A slot for a store of `owner`, if the owner has fewer than [`ON_DEMAND_PER_OWNER`]
    /// and all together fewer than [`ON_DEMAND_AT_ONCE`]: one user opening many stores being
    /// converted cannot take every slot.
    fn take(&self, owner: &str) -> Option<OnDemandSlot<'_>> {
        let mut busy = self.busy.lock();
        let total: usize = busy.values().sum();
        let mine = busy.get(owner).copied().unwrap_or(0);
        if total >= ON_DEMAND_AT_ONCE || mine >= ON_DEMAND_PER_OWNER {
            return None;
        }
        *busy.entry(owner.to_string()).or_default() += 1;
        Some(OnDemandSlot {
            slots: self,
            owner: owner.to_string(),
        })
    }
}

/// One computation on demand, given back when dropped.
struct OnDemandSlot<'a> {
    slots: &'a OnDemand,
    owner: String,
}

impl Drop for OnDemandSlot<'_> {
    fn drop(&mut self) {
        let mut busy = self.slots.busy.lock();
        if let Some(mine) = busy.get_mut(&self.owner) {
            *mine -= 1;
            if *mine == 0 {
                busy.remove(&self.owner);
            }
        }
    }
}

/// Waits one poll interval, doubling `interval` up to [`POLL`], or fails once `deadline` has
/// passed or the daemon is `stopping`.
fn pause(deadline: Instant, interval: &mut Duration, stopping: &Stop) -> Result<()> {
    if stopping.stopping() {
        return Err(Error::Stopping { retry: RETRY });
    }
    if Instant::now() >= deadline {
        return Err(Error::NotReady { retry: RETRY });
    }
    std::thread::sleep((*interval).min(deadline.saturating_duration_since(Instant::now())));
    *interval = (*interval * 2).min(POLL);
    Ok(())
}

/// Checks that `index` names a chunk of the array at `array`: one index per dimension
/// (else the key is malformed: 400, not a missing chunk, which clients read as fill values),
/// each within the array.
fn check_chunk(
    documents: &Map<String, Value>,
    array: &str,
    index: &[u64],
    key: &str,
) -> Result<()> {
    let zarray = documents
        .get(&format!("{array}/.zarray"))
        .ok_or_else(|| missing(key))?;
    let numbers = |field: &str| -> Vec<u64> {
        zarray[field]
            .as_array()
            .map(|values| values.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    let shape = numbers("shape");
    let chunks = numbers("chunks");
    // A 0-d array has the one chunk `0`.
    let dimensions = shape.len().max(1);
    if index.len() != dimensions {
        return Err(invalid(
            key,
            &format!(
                "{array} has {dimensions} dimension{}, and a chunk one index per dimension",
                if dimensions == 1 { "" } else { "s" }
            ),
        ));
    }
    if shape.is_empty() {
        return if index == [0] {
            Ok(())
        } else {
            Err(missing(key))
        };
    }
    let inside = index
        .iter()
        .zip(shape.iter().zip(&chunks))
        .all(|(i, (len, chunk))| *chunk > 0 && *i < len.div_ceil(*chunk));
    if inside { Ok(()) } else { Err(missing(key)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_the_spec_defines_them() {
        assert_eq!(parse_key(".zmetadata").unwrap(), Key::Consolidated);
        assert_eq!(parse_key(".zgroup").unwrap(), Key::Document(".zgroup"));
        assert_eq!(
            parse_key("tas/.zarray").unwrap(),
            Key::Document("tas/.zarray")
        );
        assert_eq!(
            parse_key("ocean/thetao/.zattrs").unwrap(),
            Key::Document("ocean/thetao/.zattrs")
        );
        assert_eq!(
            parse_key("tas/0.1.2").unwrap(),
            Key::Chunk {
                array: "tas",
                index: vec![0, 1, 2]
            }
        );
        for (key, kind) in [
            ("zarr.json", crate::ErrorKind::NotFound),
            ("tas/zarr.json", crate::ErrorKind::NotFound),
            ("tas/.zmetadata", crate::ErrorKind::NotFound),
            (".zarray", crate::ErrorKind::Invalid),
            ("tas", crate::ErrorKind::Invalid),
            ("", crate::ErrorKind::Invalid),
            ("tas/abc", crate::ErrorKind::Invalid),
            ("tas/0..1", crate::ErrorKind::Invalid),
            ("tas/-1", crate::ErrorKind::Invalid),
            ("tas/+1", crate::ErrorKind::Invalid),
            ("tas/99999999999999999999999", crate::ErrorKind::Invalid),
            ("../etc/passwd", crate::ErrorKind::Invalid),
            ("tas//0", crate::ErrorKind::Invalid),
            ("/tas/0", crate::ErrorKind::Invalid),
        ] {
            let err = parse_key(key).unwrap_err();
            assert_eq!(err.kind(), kind, "{key:?}: {err}");
        }
    }

    #[test]
    fn only_small_chunks_are_computed_on_demand() {
        let allowed = |dtype: &str, chunks: serde_json::Value| {
            on_demand_cost_allowed(&serde_json::json!({"dtype": dtype, "chunks": chunks}))
        };
        assert!(allowed("<f4", serde_json::json!([1, 180, 360])));
        assert!(allowed("<f8", serde_json::json!([])));
        assert!(allowed("<f4", serde_json::json!([16, 1024, 1024])));
        assert!(!allowed("<f4", serde_json::json!([17, 1024, 1024])));
        assert!(allowed("|O", serde_json::json!([10_000])));
        assert!(!allowed("|O", serde_json::json!([10_001])));
        assert!(!allowed("<f8", serde_json::json!([u64::MAX, 2])));
        assert!(!allowed("<f8", serde_json::json!(null)));
        assert!(!allowed("x", serde_json::json!([1])));
    }

    #[test]
    fn on_demand_slots_are_bounded_per_owner_and_in_all() {
        let slots = OnDemand::default();
        let jane: Vec<_> = (0..ON_DEMAND_PER_OWNER)
            .map(|_| slots.take("jane").expect("a free slot"))
            .collect();
        assert!(slots.take("jane").is_none(), "jane has her share");
        let others: Vec<_> = (0..ON_DEMAND_AT_ONCE - ON_DEMAND_PER_OWNER)
            .map(|n| slots.take(&format!("user{n}")).expect("a free slot"))
            .collect();
        assert!(slots.take("john").is_none(), "all slots busy");
        drop(jane);
        assert!(slots.take("john").is_some());
        drop(others);
        assert!(slots.busy.lock().is_empty(), "every slot given back");
    }

    #[test]
    fn chunks_outside_the_grid_are_not_found() {
        let documents: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "tas/.zarray": {"shape": [3, 4], "chunks": [2, 4]},
            "h/.zarray": {"shape": [], "chunks": []},
        }))
        .unwrap();
        assert!(check_chunk(&documents, "tas", &[1, 0], "tas/1.0").is_ok());
        assert!(check_chunk(&documents, "tas", &[2, 0], "tas/2.0").is_err());
        assert!(check_chunk(&documents, "tas", &[0, 1], "tas/0.1").is_err());
        assert!(check_chunk(&documents, "tas", &[0], "tas/0").is_err());
        assert!(check_chunk(&documents, "h", &[0], "h/0").is_ok());
        assert!(check_chunk(&documents, "h", &[1], "h/1").is_err());
        assert!(check_chunk(&documents, "pr", &[0, 0], "pr/0.0").is_err());
    }
}
