//! Writes a store: its metadata documents first (so it opens while its data is being written),
//! then every chunk of every array, read from the source hyperslab by hyperslab (or decoded
//! from its stored chunks, [`super::stored`]) and encoded by `zarrs` with the array's
//! compressor.
//!
//! Every chunk is written, also one that holds only the fill value: a reader then never meets
//! a missing chunk in a finished store, and while the store is being written a missing chunk
//! means "not yet", never "all fill".

use std::path::Path;
use std::sync::Arc;

use netcdf::{Extent, Variable};
use serde_json::json;
use zarrs::array::{
    Array, ArrayBytes, ArrayBytesOffsets, ArrayMetadata, ArrayToBytesCodecTraits, CodecOptions,
};
use zarrs::metadata::v2::ArrayMetadataV2;
use zarrs::storage::store::MemoryStore;

use super::metadata::{ArrayLayout, Dtype, MAX_CHUNK_BYTES, StoreLayout};
use super::stored::{Pieces, StoredArray, StoredFile, StoredStrings};
use crate::jobs::Stop;

/// How writing a store ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Every chunk is written.
    Complete,
    /// The daemon is stopping; the store is partly written.
    Interrupted,
}

/// Writes `layout`'s metadata into `dir` (created if needed): every document as a file and
/// the consolidated `.zmetadata`, taken first from the owner's allowance (`reserve`), with
/// a block for each directory they make: a store of thousands of arrays and no chunk is
/// some MiB of metadata.
///
/// # Errors
/// A sentence naming what could not be written, or that the owner's stores would take more
/// than their allowance.
pub(crate) fn write_metadata(
    layout: &StoreLayout,
    dir: &Path,
    reserve: &Reserve,
) -> Result<(), String> {
    let mut documents: Vec<(&str, String)> = layout
        .documents
        .iter()
        .map(|(key, document)| (key.as_str(), document.to_string()))
        .collect();
    let consolidated = layout.consolidated().to_string();
    if consolidated.len() as u64 > super::metadata::MAX_CONSOLIDATED_BYTES {
        return Err(format!(
            "the store's consolidated metadata would take {}, more than a store may hold ({})",
            mib(consolidated.len() as u64),
            mib(super::metadata::MAX_CONSOLIDATED_BYTES)
        ));
    }
    documents.push((".zmetadata", consolidated));
    if let Some(allowance) = &reserve.allowance {
        allowance.take_on_disk(store_on_disk(
            documents
                .iter()
                .map(|(key, text)| (*key, text.len() as u64)),
        ))?;
    }
    for (key, text) in &documents {
        put_atomically(dir, key, text.as_bytes())?;
    }
    Ok(())
}

/// Room a conversion leaves free on the file system it writes to: it stops (its store
/// fails) when fewer bytes than `bytes`, or fewer than 1% of the inodes, are free. A source
/// of a few KiB can make a store of millions of chunk files; the room left is for restores,
/// which write to the same tier (and for the database, when it shares the file system). It
/// is looked at between files, by each conversion on its own, so it may be overrun by what
/// the conversions running write between two looks.
///
/// With it, what the store's owner may still write ([`Allowance`]; `None`: no bound), taken
/// file by file.
#[derive(Clone)]
pub(crate) struct Reserve {
    pub(crate) bytes: u64,
    pub(crate) allowance: Option<Arc<dyn Take>>,
}

/// What a conversion's files are taken from: its owner's [`Allowance`], or, in a
/// conversion's child process, the daemon's, asked each time ([`super::child`]).
pub(crate) trait Take: Send + Sync {
    /// Takes `bytes` on disk for this conversion.
    ///
    /// # Errors
    /// Why not, when the owner's stores would then take more than their bound.
    fn take_on_disk(&self, bytes: u64) -> Result<(), String>;
}

impl Reserve {
    /// No reserve.
    #[cfg(test)]
    pub(crate) const NONE: Reserve = Reserve {
        bytes: 0,
        allowance: None,
    };

    /// The most the default reserve keeps.
    const DEFAULT_MOST: u64 = 1 << 30;

    /// The reserve of conversions into directories of `stores`: as many MiB as set (0:
    /// none), or, `auto`, 1% of the file system's size and at most 1 GiB, so that a small
    /// hot tier (a test machine's, a site's first try) is not refused every conversion by a
    /// reserve sized for a large one.
    pub(crate) fn of(reserve: crate::config::MibOrAuto, stores: &Path) -> Reserve {
        let bytes = reserve.bytes(stores, |size| {
            size.map_or(Self::DEFAULT_MOST, |size| {
                (size / 100).min(Self::DEFAULT_MOST)
            })
        });
        Reserve {
            bytes,
            allowance: None,
        }
    }

    /// The room left is looked at before the first file, and again after this many files
    /// or a quarter of the reserve's bytes, whichever comes first (so the reserve is not
    /// overrun between two looks).
    const FILES_BETWEEN: usize = 64;

    /// Fails when the file system of `dir` has less room than kept.
    pub(crate) fn check(&self, dir: &Path) -> Result<(), String> {
        if self.bytes == 0 {
            return Ok(());
        }
        let stat =
            nix::sys::statvfs::statvfs(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let free = stat.blocks_available().saturating_mul(stat.fragment_size());
        let inodes = stat.files_available();
        if free < self.bytes || inodes < stat.files() / 100 {
            return Err(format!(
                "the hot tier is nearly full ({} MiB and {inodes} inodes free; conversions \
                 leave {} MiB and 1% of the inodes free): this store is not written further",
                free >> 20,
                self.bytes >> 20
            ));
        }
        Ok(())
    }
}

/// What a file of `len` bytes takes on the hot tier, as stores count it: whole blocks of
/// 4 KiB (ext4's and xfs's), at least one. A store of many small chunks (a sparse source's
/// chunks of fill values compress to a few dozen bytes each) takes far more disk than
/// bytes.
fn on_disk(len: u64) -> u64 {
    len.max(1).div_ceil(4096).saturating_mul(4096)
}

/// `bytes` in MiB, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// What the files of a store take on the hot tier, as its conversion took them from its
/// owner's allowance: each file (`keys` and their sizes) in whole blocks, and a block for
/// each directory.
pub(crate) fn store_on_disk<'a>(keys: impl Iterator<Item = (&'a str, u64)>) -> u64 {
    let mut directories = std::collections::HashSet::new();
    let mut bytes = 0u64;
    for (key, len) in keys {
        directories.insert(key.rsplit_once('/').map_or("", |(parent, _)| parent));
        bytes = bytes.saturating_add(on_disk(len));
    }
    bytes.saturating_add(on_disk(0).saturating_mul(directories.len() as u64))
}

/// What the store in `dir` takes on the hot tier, counted as [`store_on_disk`] counts what
/// a conversion takes: every file (whatever its name: also one the store's listing leaves
/// out) in whole blocks of what it holds, and a block for each directory, the store's own
/// too. Used to check what a conversion's process wrote against what it took (it may have
/// read a hostile file): anything else in the store (a link, a pipe) is an error.
///
/// # Errors
/// What could not be read, or what no conversion writes.
pub(crate) fn dir_on_disk(dir: &Path) -> Result<u64, String> {
    let mut bytes = on_disk(0);
    let mut directories = vec![dir.to_path_buf()];
    while let Some(directory) = directories.pop() {
        let shown = |path: &Path| path.strip_prefix(dir).unwrap_or(path).display().to_string();
        let failed = |e: std::io::Error| format!("{}/: {e}", shown(&directory));
        for entry in std::fs::read_dir(&directory).map_err(failed)? {
            let entry = entry.map_err(failed)?;
            let kind = entry.file_type().map_err(failed)?;
            if kind.is_dir() {
                bytes = bytes.saturating_add(on_disk(0));
                directories.push(entry.path());
            } else if kind.is_file() {
                let len = entry.metadata().map_err(failed)?.len();
                bytes = bytes.saturating_add(on_disk(len));
            } else {
                return Err(format!(
                    "{} is neither a file nor a directory",
                    shown(&entry.path())
                ));
            }
        }
    }
    Ok(bytes)
}

/// What each owner's stores take on the hot tier, by owner: what their records count
/// (`StoreRecord::bytes`, summed when the daemon starts and kept up as records change) and
/// what their conversions running now have written. Shared by every conversion (see
/// [`Allowance`]); an owner's line stays once made (one per user).
#[derive(Debug, Default)]
pub(crate) struct Ledger(parking_lot::Mutex<std::collections::HashMap<String, u64>>);

impl Ledger {
    /// Adds `bytes` of a store of `owner` that its record counts (at the start).
    pub(crate) fn count(&self, owner: &str, bytes: u64) {
        let mut ledger = self.0.lock();
        let stored = ledger.entry(owner.to_string()).or_default();
        *stored = stored.saturating_add(bytes);
    }

    /// The record of a store of `owner` counted `before` bytes and counts `now`.
    pub(crate) fn recorded(&self, owner: &str, (before, now): (u64, u64)) {
        let mut ledger = self.0.lock();
        let stored = ledger.entry(owner.to_string()).or_default();
        *stored = stored.saturating_sub(before).saturating_add(now);
    }

    /// What `owner`'s stores take, as the ledger counts it.
    #[cfg(test)]
    pub(crate) fn stored(&self, owner: &str) -> u64 {
        self.0.lock().get(owner).copied().unwrap_or(0)
    }
}

/// What the stores of one user may take in all, as one conversion of one of their stores
/// takes from it, file by file: the bound, against the [`Ledger`]'s line of the owner. A
/// source of a few KiB can make a store of hundreds of MiB, and one user's many stores
/// could take all the room above the [`Reserve`], which every other user's conversions
/// need.
pub(crate) struct Allowance {
    owner: String,
    most: u64,
    ledger: Arc<Ledger>,
    /// What this conversion has written.
    written: std::sync::atomic::AtomicU64,
    /// Whether [`Allowance::settle`] handed what it wrote to its store's record.
    settled: std::sync::atomic::AtomicBool,
}

impl Allowance {
    /// The most one user's stores may take, in bytes, on the hot tier whose stores are in
    /// `stores` (0: no bound): as many MiB as set, or, `auto`, a quarter of the file system.
    pub(crate) fn most(setting: crate::config::MibOrAuto, stores: &Path) -> u64 {
        setting.bytes(stores, |size| size.map_or(0, |size| size / 4))
    }

    /// What this conversion has taken so far, in bytes on disk.
    pub(crate) fn taken(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The allowance of a conversion of a store of `owner` under a bound of `most` bytes.
    pub(crate) fn new(owner: &str, most: u64, ledger: Arc<Ledger>) -> Self {
        Allowance {
            owner: owner.to_string(),
            most,
            ledger,
            written: std::sync::atomic::AtomicU64::new(0),
            settled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// What this conversion wrote is counted by its store's record from now on, the
    /// record having gone from counting `before` bytes to `now` (what the store's files
    /// take, as they were listed).
    pub(crate) fn settle(&self, (before, now): (u64, u64)) {
        let written = self.written.load(std::sync::atomic::Ordering::Relaxed);
        let mut ledger = self.ledger.0.lock();
        let stored = ledger.entry(self.owner.clone()).or_default();
        *stored = stored
            .saturating_sub(written)
            .saturating_sub(before)
            .saturating_add(now);
        self.settled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Take for Allowance {
    fn take_on_disk(&self, bytes: u64) -> Result<(), String> {
        let mut ledger = self.ledger.0.lock();
        let stored = ledger.entry(self.owner.clone()).or_default();
        if stored.saturating_add(bytes) > self.most {
            return Err(format!(
                "the stores of {:?} would take more than the {} one user's stores may take \
                 (stores.max_user_mib; they take {}): this store is not written further; \
                 removing stores no longer needed makes room",
                self.owner,
                mib(self.most),
                mib(*stored)
            ));
        }
        *stored += bytes;
        self.written
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Allowance {
    /// What a conversion that handed nothing to its record wrote is no longer counted: a
    /// conversion that stops for an error or for the daemon's shutdown leaves files its
    /// next run removes first (or none).
    fn drop(&mut self) {
        if *self.settled.get_mut() {
            return;
        }
        let written = *self.written.get_mut();
        let mut ledger = self.ledger.0.lock();
        if let Some(stored) = ledger.get_mut(&self.owner) {
            *stored = stored.saturating_sub(written);
        }
    }
}

/// Writes every chunk of every array of `layout` into `dir`, checking `stop` between chunks:
/// `read_chunk(n, index)` reads chunk `index` of array `n` (see [`file_chunks`]).
///
/// The work is shared by three kinds of thread:
/// - this one reads chunks from the sources (the NetCDF library takes one process-wide lock,
///   so its reads do not run in parallel anyway); for a NetCDF-4 variable whose stored
///   chunks the daemon decodes itself it only says where they are (in `raw`, the opened
///   source);
/// - [`encoders`] threads inflate those, and compress every chunk with the array's codecs,
///   so the source's decompression and the store's compression use every core;
/// - one thread creates the chunk files: creating files in one directory from several
///   threads at once makes them wait on the directory's lock (with ext4, more than twice as
///   long in all as one thread creating them in turn).
///
/// A few chunks are in flight between them, so memory stays bounded.
///
/// # Errors
/// A sentence naming the variable and chunk that could not be read or written, or that the
/// file system has no more room than `reserve` keeps, or that the owner's stores would take
/// more than their allowance.
pub(crate) fn write_chunks(
    layout: &StoreLayout,
    dir: &Path,
    stop: &Stop,
    reserve: Reserve,
    raw: Option<&std::fs::File>,
    mut read_chunk: impl FnMut(usize, &[u64]) -> Result<ChunkRead, String>,
) -> Result<Written, String> {
    // A few chunks in flight: enough to keep every thread busy, little memory.
    let (read, to_write) = std::sync::mpsc::sync_channel::<(usize, Vec<u64>, ChunkRead)>(4);
    let to_write = std::sync::Mutex::new(to_write);
    let to_write = &to_write;
    // Set by a writer that failed: reading stops, and every writer only drains the channel,
    // so the reader never waits on a full channel nobody empties.
    let failed = &std::sync::atomic::AtomicBool::new(false);
    // Encoded chunks on their way to the one thread that creates the files.
    let (encoded, to_store) = std::sync::mpsc::sync_channel::<(String, Vec<u8>)>(4);
    std::thread::scope(|scope| {
        let storer = scope.spawn(move || -> Result<(), String> {
            let mut error = None;
            // Files and bytes written since the room left was last looked at (none yet).
            let mut since = (Reserve::FILES_BETWEEN, 0u64);
            for (key, bytes) in to_store {
                if failed.load(std::sync::atomic::Ordering::Acquire) {
                    continue;
                }
                let look = since.0 >= Reserve::FILES_BETWEEN || since.1 >= reserve.bytes / 4;
                let room = if look {
                    since = (0, 0);
                    reserve.check(dir)
                } else {
                    Ok(())
                };
                since = (since.0 + 1, since.1 + bytes.len() as u64);
                let allowed = |()| match &reserve.allowance {
                    Some(allowance) => allowance.take_on_disk(on_disk(bytes.len() as u64)),
                    None => Ok(()),
                };
                if let Err(e) = room
                    .and_then(allowed)
                    .and_then(|()| put_atomically(dir, &key, &bytes))
                {
                    failed.store(true, std::sync::atomic::Ordering::Release);
                    error = Some(e);
                }
            }
            error.map_or(Ok(()), Err)
        });
        let writers: Vec<_> = (0..encoders())
            .map(|_| {
                let encoded = encoded.clone();
                scope.spawn(move || -> Result<(), String> {
                    let mut encoder: Option<(usize, Encoder)> = None;
                    let mut error = None;
                    loop {
                        // A writer that panicked poisons the lock: the others still drain.
                        let next = to_write
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .recv();
                        let Ok((n, index, read)) = next else {
                            return error.map_or(Ok(()), Err);
                        };
                        if failed.load(std::sync::atomic::Ordering::Acquire) {
                            continue;
                        }
                        let array = &layout.arrays[n];
                        // A panic while decoding or encoding fails the conversion like an
                        // error: this writer goes on draining, so the reader never waits on
                        // a channel nobody empties.
                        let written =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                if array.copied.is_none()
                                    && encoder.as_ref().is_none_or(|(m, _)| *m != n)
                                {
                                    encoder = Some((n, Encoder::new(layout, array)?));
                                }
                                let current = encoder.as_ref().map(|(_, current)| current);
                                let bytes = chunk_bytes(array, current, read, raw, &index)?;
                                let key = format!("{}/{}", array.path, chunk_key(&index));
                                encoded
                                    .send((key, bytes))
                                    .map_err(|_| "the chunk storer stopped".to_string())
                            }))
                            .unwrap_or_else(|_| {
                                Err(format!("{} chunk {index:?}: encoding panicked", array.path))
                            });
                        if let Err(e) = written {
                            failed.store(true, std::sync::atomic::Ordering::Release);
                            error = Some(e);
                        }
                    }
                })
            })
            .collect();
        let mut read_all = || -> Result<Written, String> {
            for (n, array) in layout.arrays.iter().enumerate() {
                for index in chunk_indices(array) {
                    if stop.requested() {
                        return Ok(Written::Interrupted);
                    }
                    if failed.load(std::sync::atomic::Ordering::Acquire) {
                        // The writer's error, which its join gives, ends the conversion.
                        return Ok(Written::Complete);
                    }
                    let values = read_chunk(n, &index)?;
                    read.send((n, index, values))
                        .map_err(|_| "the chunk writers stopped".to_string())?;
                }
            }
            Ok(Written::Complete)
        };
        let written = read_all();
        drop(read);
        drop(encoded);
        // A write error is the cause when reading failed too.
        let stored = storer
            .join()
            .map_err(|_| "the chunk storer panicked".to_string());
        for writer in writers {
            writer
                .join()
                .map_err(|_| "a chunk writer panicked".to_string())??;
        }
        stored??;
        written
    })
}

/// The chunk reader of [`write_chunks`] for a store of one NetCDF file: through its stored
/// chunks (`stored`, for a NetCDF-4 file) where the daemon decodes or copies them, else by
/// the NetCDF library.
pub(crate) fn file_chunks<'f>(
    file: &'f netcdf::File,
    stored: Option<&'f StoredFile>,
    layout: &'f StoreLayout,
    stop: &'f Stop,
) -> impl FnMut(usize, &[u64]) -> Result<ChunkRead, String> + 'f {
    // The array being read, kept while its chunks are read in turn.
    let mut current: Option<(usize, Variable<'f>, Option<StoredArray>, Option<Claims>)> = None;
    move |n, index| {
        let array = &layout.arrays[n];
        if current.as_ref().is_none_or(|(m, ..)| *m != n) {
            let variable = file
                .variable(&array.path)
                .ok_or_else(|| format!("variable {:?} vanished from the source", array.path))?;
            let stored_array = stored.and_then(|stored| stored.array(array));
            let claims = claims(stored, array, &variable);
            current = Some((n, variable, stored_array, claims));
        }
        let (_, variable, stored_array, claims) = current.as_ref().expect("set above");
        let strings = StringBounds {
            claims: claims.as_ref(),
            cap: MAX_CHUNK_BYTES,
            stop: Some(stop),
        };
        read_chunk(variable, stored_array.as_ref(), array, index, &strings)
    }
}

/// What the strings of a string variable claim to take, as the file stores them, or why
/// that cannot be read.
pub(crate) type Claims = Result<StoredStrings, String>;

/// The claims of the strings of `array`, the variable `variable`, in the file `stored`
/// (`None`: not an HDF5 file), or `None` when `array` holds no strings.
pub(crate) fn claims(
    stored: Option<&StoredFile>,
    array: &ArrayLayout,
    variable: &Variable,
) -> Option<Claims> {
    (array.dtype == Dtype::String).then(|| {
        stored
            .ok_or_else(|| "it is not in an HDF5 file".to_string())
            .and_then(|stored| stored.strings(array, fill_bytes(variable)))
    })
}

/// The bytes of a string variable's fill value (`""` unless it has a `_FillValue`), which
/// the library read as it opened the file.
pub(crate) fn fill_bytes(variable: &Variable) -> u64 {
    match variable.attribute_value("_FillValue") {
        Some(Ok(netcdf::AttributeValue::Str(fill))) => fill.len() as u64,
        Some(Ok(netcdf::AttributeValue::Strs(fills))) => fills
            .iter()
            .map(|fill| fill.len() as u64)
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

/// What reading the strings of a chunk is held to.
pub(crate) struct StringBounds<'a> {
    /// What the variable's strings claim, checked before the library reads any.
    pub(crate) claims: Option<&'a Claims>,
    /// The most bytes a chunk's strings may take, below what its plan allows
    /// ([`most_string_bytes`]).
    pub(crate) cap: u64,
    /// Checked before a chunk's strings are read.
    pub(crate) stop: Option<&'a Stop>,
}

/// Text a chunk of strings may hold per element on average, beyond [`LEAST_STRING_BYTES`].
const STRING_TEXT_PER_ELEMENT: u64 = 128;

/// What the strings of any chunk may take, however few they are.
const LEAST_STRING_BYTES: u64 = 64 << 20;

/// The most bytes the strings of one chunk of the string array `array` may take as they
/// are held (their text, and 8 bytes per element for where each ends): 128 bytes of text
/// per element on average and at least 64 MiB in all, within `cap`. A chunk of numbers is
/// as large as the plan says; a chunk of strings as large as the file makes its strings,
/// which the plan's 8 bytes per element do not bound (every element may point at one large
/// string).
pub(crate) fn most_string_bytes(array: &ArrayLayout, cap: u64) -> u64 {
    let elements: u64 = array.chunks.iter().product();
    elements
        .saturating_mul(8 + STRING_TEXT_PER_ELEMENT)
        .max(LEAST_STRING_BYTES)
        .min(cap)
}

/// The threads that compress and write one conversion's chunks: one per core, at most 4.
pub(crate) fn encoders() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// Encodes the chunks of one array with its codecs, as `zarrs` reads them.
pub(crate) struct Encoder {
    array: Array<MemoryStore>,
    options: CodecOptions,
    path: String,
}

impl Encoder {
    /// The encoder of `array` of `layout`.
    ///
    /// # Errors
    /// A sentence naming the array whose metadata `zarrs` refuses.
    pub(crate) fn new(layout: &StoreLayout, array: &ArrayLayout) -> Result<Self, String> {
        let mut zarray = layout.documents[&format!("{}/.zarray", array.path)].clone();
        if array.dtype == Dtype::Char {
            // zarrs has no `|S1`; its chunks are the same bytes as `|u1` chunks (Blosc with an
            // item size of one), so they are encoded as such under the `|S1` metadata.
            zarray["dtype"] = json!("|u1");
            zarray["fill_value"] = json!(0);
        }
        let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", array.path);
        let metadata: ArrayMetadataV2 = serde_json::from_value(zarray).map_err(|e| failed(&e))?;
        // The array is only an encoder: nothing is ever stored in its memory store.
        let zarr = Array::new_with_metadata(
            Arc::new(MemoryStore::new()),
            &format!("/{}", array.path),
            ArrayMetadata::V2(metadata),
        )
        .map_err(|e| failed(&e))?;
        let mut options = CodecOptions::default();
        options.set_store_empty_chunks(true);
        Ok(Encoder {
            array: zarr,
            options,
            path: array.path.clone(),
        })
    }

    /// The stored bytes of chunk `index` from its values.
    ///
    /// # Errors
    /// A sentence naming the array and chunk.
    pub(crate) fn encode(&self, index: &[u64], values: ChunkValues) -> Result<Vec<u8>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("{} chunk {index:?}: {e}", self.path);
        let shape = self.array.chunk_shape(index).map_err(|e| failed(&e))?;
        let bytes = match values {
            ChunkValues::Fixed(bytes) => ArrayBytes::new_flen(bytes),
            ChunkValues::Strings { text, ends } => {
                let offsets = ArrayBytesOffsets::new(ends).map_err(|e| failed(&e))?;
                ArrayBytes::new_vlen(text, offsets).map_err(|e| failed(&e))?
            }
        };
        let encoded = self
            .array
            .codecs()
            .encode(
                bytes,
                &shape,
                self.array.data_type(),
                self.array.fill_value(),
                &self.options,
            )
            .map_err(|e| failed(&e))?;
        Ok(encoded.into_owned())
    }
}

/// The key of a chunk below its array: its indices joined by dots (`0` for a 0-d array).
pub(crate) fn chunk_key(index: &[u64]) -> String {
    if index.is_empty() {
        return "0".to_string();
    }
    index
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// Writes `bytes` to `key` below `dir` through a temporary file and a rename, so a reader
/// sees the whole chunk or none. A key that would lead anywhere but below `dir` (an empty,
/// `.` or `..` segment, or a leading `/`) is refused: its names come from the source file
/// (see [`super::metadata::key_segment`], which refuses them first).
fn put_atomically(dir: &Path, key: &str, bytes: &[u8]) -> Result<(), String> {
    if key
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(format!(
            "refusing to write {key:?}: it is not a key below the store's directory"
        ));
    }
    let path = dir.join(key);
    let parent = path.parent().expect("a key has a parent");
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let temporary = parent.join(format!(
        ".{}.partial",
        path.file_name()
            .expect("a key has a name")
            .to_string_lossy()
    ));
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The indices of every chunk of an array, in C order (`[]` once for a 0-d array; none when
/// a dimension is empty).
pub(crate) fn chunk_indices(array: &ArrayLayout) -> impl Iterator<Item = Vec<u64>> + use<> {
    let counts: Vec<u64> = array
        .shape
        .iter()
        .zip(&array.chunks)
        .map(|(len, chunk)| len.div_ceil(*chunk))
        .collect();
    let total: u64 = counts.iter().product();
    (0..total).map(move |mut n| {
        let mut index = vec![0; counts.len()];
        for (slot, count) in index.iter_mut().zip(&counts).rev() {
            *slot = n % count;
            n /= count;
        }
        index
    })
}

/// How the reader gets chunk `index` of `array`: where its stored chunks are, when the
/// daemon decodes or copies them (`stored`), or its values, read by the NetCDF library.
///
/// # Errors
/// A sentence naming the variable and chunk when the source cannot be read.
pub(crate) fn read_chunk(
    variable: &Variable,
    stored: Option<&StoredArray>,
    array: &ArrayLayout,
    index: &[u64],
    strings: &StringBounds,
) -> Result<ChunkRead, String> {
    match stored.and_then(|stored| stored.pieces(array, index)) {
        Some(pieces) => Ok(ChunkRead::Stored(pieces)),
        None => chunk_values(variable, array, index, strings).map(ChunkRead::Values),
    }
}

/// The stored bytes of chunk `index` of `array` from what the reader got: copied, or
/// decoded and encoded with `encoder` (which an array that is not copied needs).
///
/// # Errors
/// A sentence naming the array and chunk that could not be decoded or encoded.
pub(crate) fn chunk_bytes(
    array: &ArrayLayout,
    encoder: Option<&Encoder>,
    read: ChunkRead,
    raw: Option<&std::fs::File>,
    index: &[u64],
) -> Result<Vec<u8>, String> {
    let failed = |e: String| format!("{} chunk {index:?}: {e}", array.path);
    let raw = || raw.ok_or_else(|| failed("stored chunks without their file".into()));
    let computed = |compute: Box<dyn FnOnce() -> Result<Vec<u8>, String> + Send>| {
        let (_, count) = chunk_extent(array, index);
        compute()
            .map(|values| full_chunk(values, &count, array))
            .map_err(failed)
    };
    match (array.copied, read) {
        (Some(copied), ChunkRead::Stored(pieces)) => pieces.copied(raw()?, &copied).map_err(failed),
        (Some(copied), ChunkRead::Values(ChunkValues::Fixed(values))) => Ok(copied.encode(values)),
        (Some(copied), ChunkRead::Computed(compute)) => Ok(copied.encode(computed(compute)?)),
        (Some(_), ChunkRead::Values(ChunkValues::Strings { .. })) => {
            Err(failed("strings in an array of numbers".into()))
        }
        (None, read) => {
            let values = match read {
                ChunkRead::Values(values) => values,
                ChunkRead::Stored(pieces) => {
                    ChunkValues::Fixed(pieces.values(raw()?).map_err(failed)?)
                }
                ChunkRead::Computed(compute) => ChunkValues::Fixed(computed(compute)?),
            };
            encoder
                .ok_or_else(|| failed("no encoder".into()))?
                .encode(index, values)
        }
    }
}

/// A chunk as the reader hands it to the encoders.
pub(crate) enum ChunkRead {
    /// Its values, read by the NetCDF library.
    Values(ChunkValues),
    /// Where its stored chunks are, for the encoder to decode.
    Stored(Pieces),
    /// Its values (of the part of the chunk within the array, in C order), computed by the
    /// encoder from what the reader read: work that needs no source file runs on every core.
    Computed(Box<dyn FnOnce() -> Result<Vec<u8>, String> + Send>),
}

/// The values of one chunk, uncompressed.
pub(crate) enum ChunkValues {
    /// Fixed-size elements, in C order.
    Fixed(Vec<u8>),
    /// Strings, in C order: their text one after another, and where each starts and the
    /// last ends (as the encoder takes them, with no copy).
    Strings { text: Vec<u8>, ends: Vec<usize> },
}

impl ChunkValues {
    /// The chunk of `strings`, in C order.
    pub(crate) fn strings<'s>(strings: impl IntoIterator<Item = &'s str>) -> Self {
        let mut text = Vec::new();
        let mut ends = vec![0];
        for string in strings {
            text.extend_from_slice(string.as_bytes());
            ends.push(text.len());
        }
        ChunkValues::Strings { text, ends }
    }

    /// The strings of a chunk of strings, in C order.
    #[cfg(test)]
    pub(crate) fn as_strings(&self) -> Option<Vec<&str>> {
        let ChunkValues::Strings { text, ends } = self else {
            return None;
        };
        ends.windows(2)
            .map(|w| std::str::from_utf8(&text[w[0]..w[1]]).ok())
            .collect()
    }
}

/// The values of chunk `index` of `array`: the source hyperslab in C order, padded with zeros
/// (empty strings) to the full chunk shape at the array's edges (readers ignore the padding).
///
/// # Errors
/// A sentence naming the variable and chunk when the source cannot be read.
pub(crate) fn chunk_values(
    variable: &Variable,
    array: &ArrayLayout,
    index: &[u64],
    strings: &StringBounds,
) -> Result<ChunkValues, String> {
    let failed = |e: netcdf::Error| format!("{} chunk {index:?}: {e}", array.path);
    if array.dtype == Dtype::String {
        return chunk_strings(variable, array, index, strings);
    }
    if array.shape.is_empty() {
        return variable
            .get_raw_values(..)
            .map(ChunkValues::Fixed)
            .map_err(failed);
    }
    let (starts, counts) = chunk_extent(array, index);
    let raw = variable
        .get_raw_values(extents(&starts, &counts))
        .map_err(failed)?;
    Ok(ChunkValues::Fixed(full_chunk(raw, &counts, array)))
}

/// The NetCDF extents of the hyperslab `starts`/`counts`.
pub(crate) fn extents(starts: &[u64], counts: &[u64]) -> Vec<Extent> {
    starts
        .iter()
        .zip(counts)
        .map(|(&start, &count)| Extent::from(to_usize(start)..to_usize(start + count)))
        .collect()
}

/// The values of a chunk of `array` from the `counts` elements of the array it holds: as
/// they are, or padded with zeros to the chunk shape at the array's edges.
pub(crate) fn full_chunk(values: Vec<u8>, counts: &[u64], array: &ArrayLayout) -> Vec<u8> {
    if counts == array.chunks {
        return values;
    }
    pad(&values, counts, &array.chunks, to_usize(array.dtype.size()))
}

/// Where chunk `index` of `array` starts, and how many elements of the array it holds along
/// each dimension (fewer than the chunk shape at the array's edges).
pub(crate) fn chunk_extent(array: &ArrayLayout, index: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let starts: Vec<u64> = index
        .iter()
        .zip(&array.chunks)
        .map(|(i, c)| i * c)
        .collect();
    let counts: Vec<u64> = starts
        .iter()
        .zip(&array.shape)
        .zip(&array.chunks)
        .map(|((start, len), chunk)| (*chunk).min(len - start))
        .collect();
    (starts, counts)
}

/// The strings of chunk `index` of a string array, with empty strings past the array's
/// edges: the part of the chunk within the array read in one call.
///
/// What they take is bounded ([`most_string_bytes`]) twice: by what the file claims for
/// them, before any is read (HDF5 allocates and zeroes the length an element claims before
/// it reads the element, however short its string is; the file decides, and every element
/// may point at one large string), and by what they take as copied. Strings whose claims
/// cannot be read from the file are not read.
///
/// # Errors
/// A sentence naming the variable and chunk: the strings take too much, their claims
/// cannot be read, the source cannot be read, or the conversion is stopping.
pub(crate) fn chunk_strings(
    variable: &Variable,
    array: &ArrayLayout,
    index: &[u64],
    bounds: &StringBounds,
) -> Result<ChunkValues, String> {
    let failed = |e: &dyn std::fmt::Display| format!("{} chunk {index:?}: {e}", array.path);
    let claims = match bounds.claims {
        Some(Ok(claims)) => claims,
        Some(Err(why)) => {
            return Err(failed(&format_args!(
                "its strings are not read: what they take cannot be read from the file \
                 first ({why})"
            )));
        }
        None => return Err(failed(&"its strings' claims were not read")),
    };
    let most = most_string_bytes(array, bounds.cap);
    let total: u64 = array.chunks.iter().product();
    let (starts, counts) = chunk_extent(array, index);
    let too_much = |what: &str, bytes: u64| {
        failed(&format_args!(
            "its {total} strings {what} {} MiB of text; a chunk of them may take {} MiB \
             (8 bytes per string and 128 of text on average, at least 64 MiB). A smaller \
             `chunk_size` or `map_primary_chunksize` makes its chunks smaller",
            bytes.div_ceil(1 << 20),
            most >> 20
        ))
    };
    // Where each string ends takes 8 bytes; the rest is left for their text.
    let ends_bytes = 8 * (total + 1);
    if ends_bytes > most {
        return Err(failed(&format_args!(
            "its {total} strings take {} MiB for where each ends alone, more than the {} MiB \
             a chunk of them may take. A smaller `chunk_size` or `map_primary_chunksize` makes \
             its chunks smaller",
            ends_bytes >> 20,
            most >> 20
        )));
    }
    let text_most = most - ends_bytes;
    let claimed = claims
        .claimed(&starts, &counts, text_most)
        .map_err(|e| failed(&e))?;
    if claimed > text_most {
        return Err(too_much("claim more than", claimed));
    }
    if bounds.stop.is_some_and(Stop::requested) {
        return Err(failed(&"the conversion is stopping"));
    }
    let read = LibraryStrings::read(variable, &starts, &counts).map_err(|e| failed(&e))?;
    // Sized by what was claimed and by the element count, neither more than `most`.
    let mut text = Vec::with_capacity(to_usize(claimed));
    let mut ends = Vec::with_capacity(to_usize(total + 1));
    ends.push(0);
    // Where each element of the chunk is in what was read (its place there plus one), or 0
    // past the array's edges: laid out as the values of any chunk are ([`pad`]).
    let places: Vec<u8> = (1..=read.0.len() as u64)
        .flat_map(u64::to_le_bytes)
        .collect();
    let places = if counts == array.chunks {
        places
    } else {
        pad(&places, &counts, &array.chunks, 8)
    };
    for place in places.chunks_exact(8) {
        let place = u64::from_le_bytes(place.try_into().expect("8 bytes"));
        if let Some(at) = place.checked_sub(1) {
            let string = read.string(to_usize(at));
            let held = (text.len() + string.len()) as u64;
            if held > text_most {
                return Err(too_much("hold more than", held));
            }
            text.extend_from_slice(string.as_bytes());
        }
        ends.push(text.len());
    }
    Ok(ChunkValues::Strings { text, ends })
}

/// A NetCDF string as the library hands it out: a C string it allocated (or null).
#[derive(Clone, Copy)]
#[repr(transparent)]
struct LibraryString(*mut std::ffi::c_char);

// SAFETY: a pointer-sized value that the library reads and writes as a `char *`, which is
// what a NetCDF string is in memory.
#[allow(unsafe_code)]
unsafe impl netcdf::types::NcTypeDescriptor for LibraryString {
    fn type_descriptor() -> netcdf::types::NcVariableType {
        netcdf::types::NcVariableType::String
    }
}

/// The strings of a hyperslab as the library read them, freed by the library when dropped.
struct LibraryStrings(Vec<LibraryString>);

impl LibraryStrings {
    /// The strings of the hyperslab `starts`/`counts` of `variable` (its one string when it
    /// is a scalar), in C order.
    fn read(variable: &Variable, starts: &[u64], counts: &[u64]) -> netcdf::Result<Self> {
        let strings = if starts.is_empty() {
            variable.get_values::<LibraryString, _>(..)?
        } else {
            variable.get_values::<LibraryString, _>(extents(starts, counts))?
        };
        Ok(LibraryStrings(strings))
    }

    /// String `n`, as UTF-8 (invalid bytes replaced); empty for a null pointer.
    #[allow(unsafe_code)]
    fn string(&self, n: usize) -> std::borrow::Cow<'_, str> {
        let pointer = self.0[n].0;
        if pointer.is_null() {
            return std::borrow::Cow::Borrowed("");
        }
        // SAFETY: the library set every pointer to a NUL-terminated string it allocated,
        // freed only when `self` is dropped.
        String::from_utf8_lossy(unsafe { std::ffi::CStr::from_ptr(pointer) }.to_bytes())
    }
}

impl Drop for LibraryStrings {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: each pointer is a string the library allocated (or null, which it skips),
        // freed once, here; under the lock every NetCDF and HDF5 call of the process takes.
        hdf5_metno::sync::sync(|| unsafe {
            netcdf_sys::nc_free_string(self.0.len(), self.0.as_mut_ptr().cast());
        });
    }
}

/// Places a C-order block of shape `counts` at the start of a zeroed block of shape `full`.
fn pad(raw: &[u8], counts: &[u64], full: &[u64], item: usize) -> Vec<u8> {
    let total: u64 = full.iter().product();
    let mut out = vec![0u8; to_usize(total) * item];
    let rank = counts.len();
    let row = to_usize(counts[rank - 1]) * item;
    if row == 0 {
        return out;
    }
    // Strides of the full block, in elements.
    let mut strides = vec![1u64; rank];
    for d in (0..rank - 1).rev() {
        strides[d] = strides[d + 1] * full[d + 1];
    }
    let rows: u64 = counts[..rank - 1].iter().product();
    for r in 0..rows {
        let mut rest = r;
        let mut offset = 0;
        for d in (0..rank - 1).rev() {
            offset += (rest % counts[d]) * strides[d];
            rest /= counts[d];
        }
        let source = to_usize(r) * row;
        let target = to_usize(offset) * item;
        out[target..target + row].copy_from_slice(&raw[source..source + row]);
    }
    out
}

/// A count of elements or bytes of one chunk, which fits in memory.
pub(super) fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("chunk sizes fit in memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_of_one_user_running_together_share_the_users_allowance() {
        let ledger = Arc::new(Ledger::default());
        let most = 10 * 4096;
        // Her other stores take 4 blocks.
        ledger.count("jane", 4 * 4096);
        let first = Allowance::new("jane", most, Arc::clone(&ledger));
        let second = Allowance::new("jane", most, Arc::clone(&ledger));
        let other = Allowance::new("jane2", most, Arc::clone(&ledger));
        // A file of one byte takes a block: 4 held, and 2 being written.
        first.take_on_disk(on_disk(1)).unwrap();
        first.take_on_disk(on_disk(4096)).unwrap();
        // 4 held, 2 being written by the first, and 5 more: past the 10.
        let err = second.take_on_disk(on_disk(5 * 4096)).unwrap_err();
        assert!(
            err.starts_with("the stores of \"jane\" would take more than the 0.0 MiB"),
            "{err}"
        );
        assert!(err.contains("they take 0.0 MiB"), "{err}");
        second.take_on_disk(on_disk(4096)).unwrap();
        // Another user's stores are not counted with hers.
        other.take_on_disk(on_disk(most)).unwrap();
        assert!(first.take_on_disk(on_disk(4 * 4096)).is_err());
        // The first's outcome is recorded: its store's files, listed, take 3 blocks (its
        // directory with them), and its record counted none.
        first.settle((0, 3 * 4096));
        drop(first);
        assert_eq!(ledger.stored("jane"), 8 * 4096);
        // 4 held, 3 recorded, 1 being written by the second: 2 more fit, 3 do not.
        assert!(second.take_on_disk(on_disk(3 * 4096)).is_err());
        second.take_on_disk(on_disk(2 * 4096)).unwrap();
        // A conversion that records nothing (stopped by an error, or the daemon's
        // shutdown) no longer counts what it wrote.
        drop(second);
        assert_eq!(ledger.stored("jane"), 7 * 4096);
        // A store removed (4 blocks) makes room.
        ledger.recorded("jane", (4 * 4096, 0));
        assert_eq!(ledger.stored("jane"), 3 * 4096);
        drop(other);
        assert_eq!(ledger.stored("jane2"), 0);
    }

    #[test]
    fn the_metadata_of_a_store_is_taken_from_its_owners_allowance_before_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Arc::new(Ledger::default());
        let mut layout = StoreLayout::root(serde_json::Map::new());
        for n in 0..10 {
            layout
                .documents
                .insert(format!("v{n}/.zarray"), json!({"zarr_format": 2}));
        }
        // 13 documents (the root's two, ten arrays', `.zmetadata`) and 11 directories: 24
        // blocks.
        let reserve = |blocks: u64| Reserve {
            bytes: 0,
            allowance: Some(Arc::new(Allowance::new(
                "jane",
                blocks * 4096,
                Arc::clone(&ledger),
            ))),
        };
        let err = write_metadata(&layout, dir.path(), &reserve(23)).unwrap_err();
        assert!(
            err.starts_with("the stores of \"jane\" would take more"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        write_metadata(&layout, dir.path(), &reserve(24)).unwrap();
        assert!(dir.path().join("v9/.zarray").exists());
    }

    #[test]
    fn edge_chunks_are_padded_in_c_order() {
        // A 2x3 block of u8 placed in a 3x4 chunk.
        let raw: Vec<u8> = (1..=6).collect();
        let padded = pad(&raw, &[2, 3], &[3, 4], 1);
        assert_eq!(padded, [1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0]);
        let wide = pad(&[1, 0, 2, 0], &[1, 2], &[2, 2], 2);
        assert_eq!(wide, [1, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(pad(&[], &[0, 3], &[1, 3], 4), [0; 12]);
    }

    #[test]
    fn nothing_is_written_outside_the_store_directory() {
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("store");
        for key in ["../x", "a/../../x", "/x", "a//x", "./x", "a/..", ""] {
            let refused = put_atomically(&store, key, b"bytes").unwrap_err();
            assert!(refused.contains("not a key below"), "{key:?}: {refused}");
        }
        assert!(!root.path().join("x").exists() && !store.exists());
        put_atomically(&store, "tas/0.0", b"bytes").unwrap();
        assert_eq!(std::fs::read(store.join("tas/0.0")).unwrap(), b"bytes");
    }
}
