//! Restoring: an archived blob instance brought back whole from the cold tier, once, however
//! many readers ask for its keys at the same time.
//!
//! The first reader of a key whose hot copy is missing queues the restore on the tier's
//! restore threads (at most `tier.max_restores` at once, half of them for one reader,
//! readers in turn; see [`crate::FairPool`]; a reader who joins a restore not started yet
//! queues it in its own turn too, and the first turn to come runs it); every reader of any
//! key of that instance (the first too) waits for it, each up to its own bound (an HTTP
//! request's `timeout`, the mount's `read_timeout_seconds`) or until the daemon begins to
//! stop, so a slow cold tier never holds a reader forever: the restore goes on, and the next
//! read finds the key. A failed restore
//! is reported to every reader waiting for it, and the next reader tries again.

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use svc_manifests::object_store::{ObjectStoreExt, path::Path as ObjectPath};
use uuid::Uuid;

use super::archive::hex;
use super::{
    Asked, Flight, MOST_FAILURES_KEPT, STOP_CHECK, State, Tier, now, partial_path, remove_file,
    tier_error,
};
use crate::error::{Error, Result};
use crate::jobs::Stop;

/// How long a reader that gave up waiting is told to wait before asking again.
const RETRY: Duration = Duration::from_secs(5);

/// The error of a read whose blob `instance` could not be restored, for `reason`.
fn restore_failed(instance: &str, reason: &str) -> Error {
    Error::Restoring {
        detail: format!(
            "The data could not be restored from the cold tier (blob {instance}): {reason}. \
             The next read tries again."
        ),
        retry: RETRY,
    }
}

impl Tier {
    /// Makes `key` of the store `token` readable from the hot tier again if its blob
    /// instance is archived: restores the instance (or joins the restore under way) and
    /// waits for it up to `wait`, for a reader that asked at `asked`, or until the daemon is
    /// `stopping`. `false` when the key is not in an archived instance (its hot copy is
    /// simply not there). Blocking.
    ///
    /// # Errors
    /// [`Error::Restoring`] when the restore takes longer than `wait` (it goes on), or when
    /// it failed (the reason is logged and given); [`Error::Stopping`] when the daemon stops
    /// first. A failed restore is the answer of every
    /// reader that asked before it failed (one that tried without waiting and comes back to
    /// wait does not run it again); a reader that asks after starts anew.
    pub(crate) fn restore_for_read(
        self: &Arc<Self>,
        token: Uuid,
        key: &str,
        wait: Duration,
        asked: &Asked,
        stopping: &Stop,
    ) -> Result<bool> {
        if !self.is_archived(token) {
            return Ok(false);
        }
        // No restore is started for a reader of a daemon that stops.
        if stopping.stopping() {
            return Err(Error::Stopping { retry: RETRY });
        }
        let Some(cut) = self.cut(token)? else {
            return Ok(false);
        };
        let Some(instance) = cut.resolve(token, key).blob_id() else {
            return Ok(false);
        };
        match self.state(token, &instance)? {
            Some(state) if matches!(state.state, State::Archived | State::Restoring) => {}
            _ => return Ok(false),
        }
        self.restore_waiting(token, &instance, wait, asked, stopping)?;
        Ok(true)
    }

    /// Restores `instance` of `token`, or joins the restore under way, and waits up to
    /// `wait` or until the daemon is `stopping`; a restore of it that failed after `asked` is
    /// the answer (see [`Tier::restore_for_read`]).
    pub(crate) fn restore_waiting(
        self: &Arc<Self>,
        token: Uuid,
        instance: &str,
        wait: Duration,
        asked: &Asked,
        stopping: &Stop,
    ) -> Result<()> {
        let id = (token, instance.to_string());
        let (flight, queue) = {
            let mut flights = self.flights.lock();
            match flights.get(&id) {
                Some(flight) => {
                    // Not started yet: queued in this reader's turn too, unless it is already.
                    let queue = flight.restore.lock().is_some()
                        && flight.queued_for.lock().insert(asked.by.clone());
                    (Arc::clone(flight), queue)
                }
                None => {
                    if let Some((failed, reason)) = self.failures.lock().get(&id)
                        && *failed > asked.at
                    {
                        return Err(restore_failed(instance, reason));
                    }
                    let flight = Arc::new(Flight::default());
                    flights.insert(id.clone(), Arc::clone(&flight));
                    *flight.restore.lock() = Some(self.restore_of_flight(id, &flight));
                    flight.queued_for.lock().insert(asked.by.clone());
                    (flight, true)
                }
            }
        };
        if queue {
            // Whichever turn comes first runs it; the others find it gone.
            let queued = Arc::clone(&flight);
            self.restores.run(
                asked.by.clone(),
                Box::new(move || {
                    let restore = queued.restore.lock().take();
                    if let Some(restore) = restore {
                        restore();
                    }
                }),
            );
        }
        let deadline = Instant::now() + wait;
        let mut outcome = flight.outcome.lock();
        while outcome.is_none() {
            if stopping.stopping() {
                // The restore goes on as long as the process does; one cut short is
                // restored again (its state stays `restoring`, read as `archived`).
                return Err(Error::Stopping { retry: RETRY });
            }
            // In slices, to see the daemon's stop (nothing notifies a flight of it).
            let until = deadline.min(Instant::now() + STOP_CHECK);
            if flight.done.wait_until(&mut outcome, until).timed_out()
                && outcome.is_none()
                && Instant::now() >= deadline
            {
                return Err(Error::Restoring {
                    detail: format!(
                        "The data is being restored from the cold tier (blob {instance}); \
                         try again in a moment."
                    ),
                    retry: RETRY,
                });
            }
        }
        match outcome.as_ref().expect("set before notified") {
            Ok(()) => Ok(()),
            Err(reason) => Err(restore_failed(instance, reason)),
        }
    }

    /// The restore of `flight`, blob instance `id`: it restores the instance and gives every
    /// reader waiting its outcome, once (when the keys are back, before the cold object is
    /// deleted, or when the restore ends otherwise; a panic too).
    fn restore_of_flight(
        self: &Arc<Self>,
        id: (Uuid, String),
        flight: &Arc<Flight>,
    ) -> Box<dyn FnOnce() + Send> {
        // Weak: the flight, which the tier holds, holds this until it starts.
        let (tier, flight) = (Arc::downgrade(self), Arc::downgrade(flight));
        Box::new(move || {
            let (Some(tier), Some(leading)) = (tier.upgrade(), flight.upgrade()) else {
                return;
            };
            let finish = |outcome: std::result::Result<(), String>| {
                let mut slot = leading.outcome.lock();
                if slot.is_none() {
                    // Gone from the map first, its failure kept: a reader that asks after it
                    // starts anew.
                    let mut flights = tier.flights.lock();
                    flights.remove(&id);
                    let mut failures = tier.failures.lock();
                    match &outcome {
                        Ok(()) => {
                            failures.remove(&id);
                        }
                        Err(reason) => {
                            if failures.len() >= MOST_FAILURES_KEPT {
                                failures.clear();
                            }
                            failures.insert(id.clone(), (Instant::now(), reason.clone()));
                        }
                    }
                    drop((failures, flights));
                    *slot = Some(outcome);
                    leading.done.notify_all();
                }
            };
            // A panic too reaches every waiter (the next reader starts anew; the state left
            // `restoring` is restored from as `archived`).
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                tier.restore_instance(id.0, &id.1, Some(&|| finish(Ok(()))))
            }));
            finish(match outcome {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the restore failed unexpectedly".to_string()),
            });
        })
    }

    /// Restores one archived instance: checks its cold object's size and SHA-256, writes
    /// every key it holds (each to a temporary name, renamed into place once whole; a name
    /// that is not a listed key of the store, or a size other than the listed one, fails the
    /// restore), flushes them to disk, records the instance hot and deletes the cold object.
    /// A local cold object is read in place; any other is fetched to the staging directory
    /// first. Nothing when the instance is not archived (restored meanwhile).
    ///
    /// `readers`: users' reads asked for it, which counts as the instance's last read (an
    /// operator's restore does not); it is called as soon as the keys are back and recorded
    /// hot, so that they go on while the cold object is deleted. Blocking.
    ///
    /// # Errors
    /// [`Error::Tier`] naming what failed; the instance is archived then, as before.
    pub(crate) fn restore_instance(
        &self,
        token: Uuid,
        instance: &str,
        readers: Option<&dyn Fn()>,
    ) -> Result<bool> {
        let store_lock = self.store_lock(token);
        let _shared = store_lock.read();
        let instance_lock = self.instance_lock(token, instance);
        let _one = instance_lock.lock();
        let Some(mut state) = self.state(token, instance)? else {
            return Ok(false);
        };
        if !matches!(state.state, State::Archived | State::Restoring) {
            return Ok(false);
        }
        state.state = State::Restoring;
        state.changed = now();
        self.put_state(token, instance, &state)?;
        let location = ObjectPath::from(state.cold_key.as_str());
        let staged = self
            .staging_of(token)
            .join(format!("{instance}.restore.zip"));
        let dir = self.store_dir(token);
        let mut written = Vec::new();
        let started = Instant::now();
        let listed = |key: &str| self.listed_size(token, key);
        let expected = Expected {
            checksum: &state.checksum,
            bytes: state.cold_bytes,
            objects: state.objects,
            listed: &listed,
        };
        // A local cold object is read in place; another is fetched first.
        let source = match &self.cold_dir {
            Some(cold) => Ok(cold.join(location.as_ref())),
            None => self.fetch(&location, &staged).map(|()| staged.clone()),
        };
        let restored = source
            .and_then(|zip| unpack(&zip, &dir, &expected, &mut written))
            // On disk before the cold copy may go.
            .and_then(|()| super::sync_filesystem(&dir));
        remove_file(&staged);
        if let Err(e) = restored {
            for key in &written {
                remove_file(&partial_path(&dir, key));
            }
            state.state = State::Archived;
            state.changed = now();
            self.put_state(token, instance, &state)?;
            tracing::warn!(%token, %instance, error = %e, "a restore failed");
            return Err(e);
        }
        state.forget_cold();
        if readers.is_some() {
            state.last_read = now();
        }
        state.restores += 1;
        self.put_state(token, instance, &state)?;
        self.count_archived(token, -1);
        if let Some(readers) = readers {
            readers();
        }
        // Under the instance's lock still: an archive of it after the restore writes its
        // cold object under the same name.
        if let Err(e) = self.block_on(self.cold.delete(&location)) {
            // Named by no record now: the next cleaning removes it.
            tracing::warn!(%token, %instance, error = %e, "cannot delete a restored cold object");
        }
        tracing::info!(
            %token,
            %instance,
            objects = written.len(),
            bytes = state.bytes,
            ms = started.elapsed().as_millis(),
            "restored"
        );
        Ok(true)
    }

    /// Copies the cold object at `location` to `staged` (checked as it is unpacked).
    fn fetch(&self, location: &ObjectPath, staged: &std::path::Path) -> Result<()> {
        if let Some(parent) = staged.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
        }
        let mut file = std::fs::File::create(staged)
            .map_err(|e| Error::io(format!("create {}", staged.display()), e))?;
        self.read_cold(location, |bytes| {
            file.write_all(bytes)
                .map_err(|e| Error::io(format!("write {}", staged.display()), e))
        })
        .map(drop)
    }
}

/// What a blob's cold object must be: as it was archived, and of keys of the store.
struct Expected<'a> {
    /// Its SHA-256 (hex).
    checksum: &'a str,
    /// Its size.
    bytes: u64,
    /// The keys in it.
    objects: u64,
    /// The size of a key of the store in its listing (`None`: not a key of it).
    listed: &'a dyn Fn(&str) -> Result<Option<u64>>,
}

/// The SHA-256 (hex) and size of `file`, read whole from its start (until `stop` is set),
/// by position: whoever else reads it through its offset is not disturbed.
fn sha256_of(file: &std::fs::File, stop: &AtomicBool) -> std::io::Result<(String, u64)> {
    use sha2::Digest;
    use std::os::unix::fs::FileExt;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = match file.read_at(&mut buffer, bytes) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok((hex(&hasher.finalize()), bytes))
}

/// Writes the keys of the ZIP at `zip` into the store directory `dir`, checked against
/// `expected`: each entry must be a stored (uncompressed) key of the store with its listed
/// size, once, and there must be `expected.objects` of them. Each key is written
/// to its temporary name, and all are renamed into place only once the whole object's size
/// and SHA-256 are those archived. `written` collects the keys begun (to clean their
/// temporary files after a failure).
///
/// The object is read twice at once: a second thread reads it whole for its SHA-256 while
/// this one copies each entry, found through the ZIP's central directory, inside the kernel
/// (`std::io::copy` between files is `copy_file_range(2)` on Linux), so no byte is copied
/// through the daemon's memory. The SHA-256 covers every byte of the object, entries and
/// directory alike, so a per-entry CRC would check nothing more.
fn unpack(
    zip: &std::path::Path,
    dir: &std::path::Path,
    expected: &Expected<'_>,
    written: &mut Vec<String>,
) -> Result<()> {
    // One open for both: the bytes hashed are the bytes copied.
    let file =
        std::fs::File::open(zip).map_err(|e| Error::io(format!("read {}", zip.display()), e))?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let hashing = std::thread::Builder::new()
            .name("tier-hash".into())
            .spawn_scoped(scope, || sha256_of(&file, &stop))
            .map_err(|e| Error::io("start hashing", e))?;
        let copied = copy_entries(zip, &file, dir, expected, written);
        // A failed copy needs no checksum.
        stop.store(copied.is_err(), Ordering::Relaxed);
        let hashed = hashing
            .join()
            .map_err(|_| tier_error("the hashing thread failed"))?;
        copied?;
        let (checksum, bytes) =
            hashed.map_err(|e| Error::io(format!("read {}", zip.display()), e))?;
        if checksum != expected.checksum || bytes != expected.bytes {
            return Err(tier_error(format!(
                "cold object {} has {bytes} bytes with SHA-256 {checksum}; {} bytes with \
                 SHA-256 {} were archived",
                zip.display(),
                expected.bytes,
                expected.checksum
            )));
        }
        Ok(())
    })?;
    // On disk before they take the keys' names: a power loss never leaves a torn key.
    super::sync_filesystem(dir)?;
    for name in written.iter() {
        let partial = partial_path(dir, name);
        std::fs::rename(&partial, dir.join(name))
            .map_err(|e| Error::io(format!("rename {}", partial.display()), e))?;
    }
    Ok(())
}

/// The most bytes one entry takes in a central directory of ours: its 46-byte header, its
/// name (a key) and its extra fields (ZIP64 sizes), generously.
const DIRECTORY_ENTRY_BYTES: u64 = 4096;

/// Whether the ZIP `file` of `size` bytes has the central directory an archive of `objects`
/// keys has: its end record closes the file (no comment, one disk), the directory ends
/// where that record (or ZIP64's, right before its locator) begins, and it names `objects`
/// entries in at most `objects` × [`DIRECTORY_ENTRY_BYTES`] bytes. So the record checked is
/// the one the ZIP reader takes first. Checked before the directory is parsed,
/// as the object's checksum is known only once it was read whole: a damaged or forged
/// object could otherwise have the parser hold millions of entries first.
pub(super) fn directory_fits(
    file: &std::fs::File,
    size: u64,
    objects: u64,
) -> std::result::Result<(), String> {
    use std::os::unix::fs::FileExt;
    let read = |at: u64, len: usize| -> std::result::Result<Vec<u8>, String> {
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, at)
            .map_err(|e| format!("cannot read its central directory's end: {e}"))?;
        Ok(bytes)
    };
    let le = |bytes: &[u8]| {
        bytes
            .iter()
            .rev()
            .fold(0u64, |n, b| (n << 8) | u64::from(*b))
    };
    let malformed = || "its central directory does not end it as an archive's does".to_string();
    let end_at = size.checked_sub(22).ok_or_else(malformed)?;
    let end = read(end_at, 22)?;
    // One disk, no comment, the entries on this disk are all entries.
    if end[..4] != [0x50, 0x4b, 0x05, 0x06]
        || le(&end[4..8]) != 0
        || le(&end[8..10]) != le(&end[10..12])
        || le(&end[20..22]) != 0
    {
        return Err(malformed());
    }
    let (mut entries, mut directory, mut offset) =
        (le(&end[10..12]), le(&end[12..16]), le(&end[16..20]));
    // The record the directory ends at: the end record, or ZIP64's.
    let mut directory_end = end_at;
    // ZIP64 when the end record holds a saturated field and the locator stands before it
    // (65,535 entries alone are written without ZIP64; with no saturated field, bytes that
    // look like a locator are the last entry's). Its record stands right before the
    // locator, with nothing after its fixed fields.
    let saturated = entries == 0xffff || directory == 0xffff_ffff || offset == 0xffff_ffff;
    let locator = match size.checked_sub(42) {
        Some(at) if saturated => read(at, 20)?,
        _ => Vec::new(),
    };
    if locator.starts_with(&[0x50, 0x4b, 0x06, 0x07]) {
        let record_at = le(&locator[8..16]);
        if le(&locator[4..8]) != 0
            || le(&locator[16..20]) != 1
            || record_at.checked_add(56) != Some(end_at - 20)
        {
            return Err(malformed());
        }
        let zip64 = read(record_at, 56)?;
        if zip64[..4] != [0x50, 0x4b, 0x06, 0x06]
            || le(&zip64[4..12]) != 44
            || le(&zip64[16..24]) != 0
            || le(&zip64[24..32]) != le(&zip64[32..40])
        {
            return Err(malformed());
        }
        entries = le(&zip64[32..40]);
        directory = le(&zip64[40..48]);
        offset = le(&zip64[48..56]);
        directory_end = record_at;
    }
    // The directory ends where its end record begins: no other record (a forged one among
    // the data, say) is taken for it.
    if offset.checked_add(directory) != Some(directory_end) {
        return Err(malformed());
    }
    if entries != objects || directory > objects.saturating_mul(DIRECTORY_ENTRY_BYTES) {
        return Err(format!(
            "its central directory names {entries} entries in {directory} bytes; the blob has \
             {objects} keys"
        ));
    }
    Ok(())
}

/// Copies each entry of the ZIP at `zip` to its key's temporary name in `dir` (see
/// [`unpack`]), starting each file's writeback as it is written.
fn copy_entries(
    zip: &std::path::Path,
    file: &std::fs::File,
    dir: &std::path::Path,
    expected: &Expected<'_>,
    written: &mut Vec<String>,
) -> Result<()> {
    let failed = |e: &dyn std::fmt::Display| tier_error(format!("unpack {}: {e}", zip.display()));
    let size = file
        .metadata()
        .map_err(|e| Error::io(format!("read {}", zip.display()), e))?
        .len();
    if size != expected.bytes {
        return Err(failed(&format!(
            "it has {size} bytes; {} were archived",
            expected.bytes
        )));
    }
    directory_fits(file, size, expected.objects).map_err(|e| failed(&e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| failed(&e))?;
    if archive.len() as u64 != expected.objects {
        return Err(failed(&format!(
            "it holds {} entries; the blob has {} keys",
            archive.len(),
            expected.objects
        )));
    }
    let mut seen = HashSet::new();
    for index in 0..archive.len() {
        let (name, start, len) = {
            let entry = archive.by_index_raw(index).map_err(|e| failed(&e))?;
            let name = entry.name().map_err(|e| failed(&e))?.to_string();
            let stored = entry.compression() == zip::CompressionMethod::Stored
                && entry.compressed_size() == entry.size();
            let start = entry.data_start().filter(|_| stored);
            (name, start, entry.size())
        };
        let Some(start) = start else {
            return Err(failed(&format!("{name:?} is not stored uncompressed")));
        };
        if (expected.listed)(&name)? != Some(len) || !seen.insert(name.clone()) {
            return Err(failed(&format!(
                "{name:?} is not a key of the store with that size, or appears twice"
            )));
        }
        written.push(name.clone());
        let partial = partial_path(dir, &name);
        if let Some(parent) = partial.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
        }
        let mut out = std::fs::File::create(&partial)
            .map_err(|e| Error::io(format!("create {}", partial.display()), e))?;
        let mut source = file;
        source
            .seek(SeekFrom::Start(start))
            .map_err(|e| Error::io(format!("read {}", zip.display()), e))?;
        let copied = std::io::copy(&mut source.take(len), &mut out)
            .map_err(|e| Error::io(format!("write {}", partial.display()), e))?;
        if copied != len {
            return Err(failed(&format!("{name:?} ends early")));
        }
        super::start_writeback(&out);
    }
    Ok(())
}
