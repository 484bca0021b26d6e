//! Archiving: a cold blob instance packed into one uncompressed ZIP on the cold tier, read
//! back and verified, recorded, and only then its hot copies deleted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::rc::Rc;

use svc_manifests::object_store::{
    Error as ObjectError, MultipartUpload, ObjectStoreExt, Result as ObjectResult,
    path::Path as ObjectPath,
};
use tokio::task::JoinSet;
use uuid::Uuid;

use super::{BlobState, Keys, State, Tier, now, remove_file, tier_error};
use crate::db::{self, cf};
use crate::error::{Error, Result};

/// Bytes read and uploaded at a time.
const PART: usize = 8 << 20;

/// Parts uploaded at once.
const PARTS_AT_ONCE: usize = 2;

/// What `svcd tier archive` archives.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ArchiveOptions {
    /// Only blobs of stores nobody has read (nor converted) for this long.
    pub older_than: Option<Duration>,
    /// Only this store (its token is its scope).
    pub scope: Option<Uuid>,
    /// Say what would be archived, change nothing.
    pub dry_run: bool,
}

/// What became of one blob instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRow {
    /// The store's token.
    pub scope: String,
    /// The instance id.
    pub instance: String,
    /// Its keys.
    pub objects: u64,
    /// Bytes of its keys.
    pub bytes: u64,
    /// `archived`, `restored`, `would archive`, `would restore`, or `failed: <reason>`.
    pub outcome: String,
}

/// A store that may be archived: its token, its conversion (its record's `conversion`) and
/// when it was last read or converted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) token: Uuid,
    pub(crate) conversion: u64,
    pub(crate) last_used: i64,
}

impl Tier {
    /// The hot instances of the store `candidate` that `options` selects, with their keys
    /// (none when the store is not in its scope or was used too lately).
    pub(crate) fn archivable(
        &self,
        candidate: Candidate,
        options: &ArchiveOptions,
    ) -> Result<Vec<(String, Keys)>> {
        let cutoff = options
            .older_than
            .map(|age| now().saturating_sub(i64::try_from(age.as_secs()).unwrap_or(i64::MAX)));
        if options.scope.is_some_and(|scope| scope != candidate.token)
            || cutoff.is_some_and(|cutoff| candidate.last_used > cutoff)
        {
            return Ok(Vec::new());
        }
        self.reload_manifest(candidate.token)?;
        let Some(cut) = self.cut(candidate.token)? else {
            return Ok(Vec::new());
        };
        let mut planned = Vec::new();
        for (instance, keys) in self.instances(candidate.token, &cut)? {
            let state = self.state(candidate.token, &instance)?;
            let hot = state.as_ref().is_none_or(|s| s.state == State::Hot);
            let read_lately = state
                .as_ref()
                .is_some_and(|s| cutoff.is_some_and(|cutoff| s.last_read > cutoff));
            if hot && !read_lately {
                planned.push((instance, keys));
            }
        }
        Ok(planned)
    }

    /// Archives one hot instance of the store `candidate` whose keys are `keys`, if the store
    /// is still that conversion (`still_ready`) and the instance still hot. Blocking.
    ///
    /// # Errors
    /// [`Error::Tier`] naming what failed; the instance is hot then, as before, and nothing
    /// of it is left on the cold tier.
    pub(crate) fn archive_instance(
        &self,
        candidate: Candidate,
        instance: &str,
        keys: &[(String, u64)],
        still_ready: &dyn Fn(Uuid, u64) -> bool,
    ) -> Result<bool> {
        let token = candidate.token;
        let store_lock = self.store_lock(token);
        let _shared = store_lock.read();
        let instance_lock = self.instance_lock(token, instance);
        let _one = instance_lock.lock();
        let previous = self.state(token, instance)?;
        if previous.as_ref().is_some_and(|s| s.state != State::Hot)
            || !still_ready(token, candidate.conversion)
        {
            return Ok(false);
        }
        // The keys as the store's listing and manifest say now (a pin set since the plan
        // takes keys out; a conversion since gives another listing).
        let Some(cut) = self.cut(token)? else {
            return Ok(false);
        };
        if self.instance_keys(token, &cut, instance)? != keys {
            return Ok(false);
        }
        let bytes: u64 = keys.iter().map(|(_, size)| size).sum();
        let mut state = previous.unwrap_or_else(|| BlobState::hot(bytes, keys.len() as u64));
        state.bytes = bytes;
        state.objects = keys.len() as u64;
        state.state = State::Archiving;
        state.cold_key = cold_key(token, instance);
        state.changed = now();
        self.put_state(token, instance, &state)?;
        let location = ObjectPath::from(state.cold_key.as_str());
        let copied = self
            .pack(&self.store_dir(token), keys, &location)
            .and_then(|sent| self.verify(&location, sent));
        let (checksum, cold_bytes) = match copied {
            Ok(copied) => copied,
            Err(e) => {
                let _ = self.block_on(self.cold.delete(&location));
                state.forget_cold();
                self.put_state(token, instance, &state)?;
                return Err(e);
            }
        };
        state.state = State::Archived;
        state.checksum = checksum;
        state.cold_bytes = cold_bytes;
        state.changed = now();
        // The tier clock, in the database (with the state) and in its file: a database
        // restored from a backup older than this archive is then told at its start.
        let clock = self.next_clock()?;
        self.put_state_with(token, instance, &state, |batch| {
            batch.put(cf::META, db::meta::TIER_CLOCK, clock.to_be_bytes().to_vec());
        })?;
        self.write_clock(clock);
        self.count_archived(token, 1);
        let dir = self.store_dir(token);
        for (key, _) in keys {
            remove_file(&dir.join(key));
        }
        tracing::info!(%token, %instance, objects = keys.len(), bytes, "archived");
        Ok(true)
    }

    /// Writes the ZIP of `keys` (read from `dir`) to the cold object `location` as it is
    /// packed (no copy of it is staged anywhere): stored, not compressed (the chunks are
    /// compressed already, and `unzip` recovers them without the daemon). Each entry's
    /// sizes and CRC follow its bytes (a data descriptor), as a ZIP written in one pass has
    /// them; the central directory, which `unzip` and the restore read, has them all. The
    /// SHA-256 (hex) and size of what was written.
    fn pack(
        &self,
        dir: &Path,
        keys: &[(String, u64)],
        location: &ObjectPath,
    ) -> Result<(String, u64)> {
        let failed = |what: String, e: &dyn std::fmt::Display| tier_error(format!("{what}: {e}"));
        let upload = self
            .block_on(self.cold.put_multipart(location))
            .map_err(|e| failed(format!("write cold object {location}"), &e))?;
        let poisoned = Rc::new(Cell::new(false));
        let part_size = part_size(keys);
        let upload = Upload {
            tier: self,
            upload: Some(upload),
            parts: JoinSet::new(),
            part_size,
            part: Vec::with_capacity(part_size),
            hasher: Sha256::new(),
            bytes: 0,
            poisoned: Rc::clone(&poisoned),
        };
        let mut zip = zip::ZipWriter::new_stream(upload);
        let packed = keys.iter().try_for_each(|(key, size)| {
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored)
                .large_file(*size >= u64::from(u32::MAX));
            let path = dir.join(key);
            let mut source = std::fs::File::open(&path)
                .map_err(|e| Error::io(format!("read {}", path.display()), e))?;
            zip.start_file(key.as_str(), options)
                .map_err(|e| failed(format!("pack {key}"), &e))?;
            let copied = std::io::copy(&mut source, &mut zip)
                .map_err(|e| Error::io(format!("pack {}", path.display()), e))?;
            if copied != *size {
                return Err(tier_error(format!(
                    "{} has {copied} bytes, the listing says {size}",
                    path.display()
                )));
            }
            Ok(())
        });
        if let Err(e) = packed {
            // What the ZIP writer still writes as it is dropped goes nowhere, and the upload
            // is aborted.
            poisoned.set(true);
            return Err(e);
        }
        zip.finish()
            .map_err(|e| failed(format!("write cold object {location}"), &e))?
            .into_inner()
            .finish(location)
    }

    /// Reads the cold object at `location` back and compares its SHA-256 and size with
    /// `sent`, what was written: the checksum (hex) and size on success.
    fn verify(&self, location: &ObjectPath, sent: (String, u64)) -> Result<(String, u64)> {
        let (sent, sent_bytes) = sent;
        if let Some(dir) = &self.cold_dir {
            // On disk before the hot copies may go, and read back from the disk, not from
            // the pages just written.
            super::sync_filesystem(dir)?;
            super::drop_cached_pages(&dir.join(location.as_ref()));
        }
        let (read, read_bytes) = self.read_back(location)?;
        if read != sent || read_bytes != sent_bytes {
            return Err(tier_error(format!(
                "cold object {location} reads back as {read_bytes} bytes with SHA-256 {read}, \
                 {sent_bytes} bytes with SHA-256 {sent} were written"
            )));
        }
        Ok((sent, sent_bytes))
    }

    /// The SHA-256 (hex) and size of the cold object at `location`, read whole.
    pub(super) fn read_back(&self, location: &ObjectPath) -> Result<(String, u64)> {
        let mut hasher = Sha256::new();
        let total = self.read_cold(location, |bytes| {
            hasher.update(bytes);
            Ok(())
        })?;
        Ok((hex(&hasher.finalize()), total))
    }

    /// The staging directory of a store's blobs.
    pub(super) fn staging_of(&self, token: Uuid) -> PathBuf {
        self.staging.join(token.to_string())
    }
}

/// A multipart upload to the cold tier as a blocking writer that hashes what it sends, in
/// parts of [`part_size`] bytes, [`PARTS_AT_ONCE`] at a time. Anything that fails poisons it:
/// later writes go nowhere (the ZIP writer's own last words as it is dropped), and it is
/// aborted as it is dropped, so no unfinished upload is left behind on an object store that
/// keeps parts (a crash still can: an S3 bucket's lifecycle rule
/// `AbortIncompleteMultipartUpload` removes those).
struct Upload<'a> {
    tier: &'a Tier,
    /// The upload, until it is completed or aborted.
    upload: Option<Box<dyn MultipartUpload>>,
    /// The parts being sent.
    parts: JoinSet<ObjectResult<()>>,
    /// The size of every part but the last.
    part_size: usize,
    /// The part being filled.
    part: Vec<u8>,
    hasher: Sha256,
    bytes: u64,
    poisoned: Rc<Cell<bool>>,
}

impl Upload<'_> {
    /// Sends the part filled so far, once fewer than [`PARTS_AT_ONCE`] are in flight.
    fn send_part(&mut self) -> ObjectResult<()> {
        let part = std::mem::replace(&mut self.part, Vec::with_capacity(self.part_size));
        let upload = self.upload.as_mut().expect("sending until finished");
        let parts = &mut self.parts;
        // In the tier's runtime: a part is sent by a task of it.
        self.tier.block_on(async {
            while parts.len() >= PARTS_AT_ONCE {
                joined(parts.join_next().await)?;
            }
            parts.spawn(upload.put_part(part.into()));
            Ok(())
        })
    }

    /// Completes the upload to `location`: the SHA-256 (hex) and size of what was sent.
    fn finish(mut self, location: &ObjectPath) -> Result<(String, u64)> {
        let failed = |e: ObjectError| tier_error(format!("write cold object {location}: {e}"));
        if !self.part.is_empty() {
            self.send_part().map_err(failed)?;
        }
        let mut upload = self.upload.take().expect("finished once");
        let parts = &mut self.parts;
        let completed = self.tier.block_on(async {
            while let Some(part) = parts.join_next().await {
                joined(Some(part))?;
            }
            upload.complete().await
        });
        if let Err(e) = completed {
            self.upload = Some(upload);
            return Err(failed(e));
        }
        let hasher = std::mem::take(&mut self.hasher);
        Ok((hex(&hasher.finalize()), self.bytes))
    }
}

/// The outcome of a part that was sent.
fn joined(part: Option<Result<ObjectResult<()>, tokio::task::JoinError>>) -> ObjectResult<()> {
    match part {
        Some(Ok(sent)) => sent,
        Some(Err(e)) => Err(ObjectError::Generic {
            store: "cold tier",
            source: Box::new(e),
        }),
        None => Ok(()),
    }
}

impl Write for Upload<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.poisoned.get() {
            return Ok(buf.len());
        }
        let room = self.part_size - self.part.len();
        let taken = &buf[..buf.len().min(room)];
        self.part.extend_from_slice(taken);
        self.hasher.update(taken);
        self.bytes += taken.len() as u64;
        if self.part.len() == self.part_size
            && let Err(e) = self.send_part()
        {
            self.poisoned.set(true);
            return Err(std::io::Error::other(e));
        }
        Ok(taken.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Upload<'_> {
    fn drop(&mut self) {
        if let Some(mut upload) = self.upload.take() {
            let parts = &mut self.parts;
            let aborted = self.tier.block_on(async {
                parts.shutdown().await;
                upload.abort().await
            });
            if let Err(e) = aborted {
                tracing::warn!(error = %e, "cannot abort an unfinished upload to the cold tier");
            }
        }
    }
}

/// The most parts an upload is cut into: S3 and most gateways take at most 10,000.
const MOST_PARTS: u64 = 9_000;

/// The part size of the upload of a ZIP of `keys`: [`PART`], or more for a blob so large
/// that its parts would be more than [`MOST_PARTS`] (a whole MiB, from an estimate of the
/// ZIP's size: the keys' bytes, and per key its headers, data descriptor and name twice).
pub(super) fn part_size(keys: &[(String, u64)]) -> usize {
    let estimate = keys.iter().fold(64 << 10, |total: u64, (key, size)| {
        total
            .saturating_add(*size)
            .saturating_add(256 + 2 * key.len() as u64)
    });
    let needed = estimate.div_ceil(MOST_PARTS).div_ceil(1 << 20) << 20;
    usize::try_from(needed).map_or(usize::MAX, |needed| needed.max(PART))
}

/// The name of a new cold object of `instance` of store `token`:
/// `<token>/<instance>.<archive>.zip`, where `<archive>` (hex of the time it was named, in
/// nanoseconds) tells this archive of the instance from any other. No two archives of an
/// instance share a name, so a deletion of an earlier one's object that lands late (an
/// object store that retries, a gateway that drains its queue) never meets a later one.
fn cold_key(token: Uuid, instance: &str) -> String {
    let archive = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{token}/{instance}.{archive:x}.zip")
}

/// Lower-case hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
