//! Restoring: an archived blob instance brought back whole from the cold tier, once, however
//! many readers ask for its keys at the same time.
//!
//! The first reader of a key whose hot copy is missing starts the restore on a thread of its
//! own; every reader of any key of that instance (the first too) waits for it, each up to
//! its own bound (an HTTP request's `timeout`, the mount's `read_timeout_seconds`), so a slow
//! cold tier never holds a reader forever: the restore goes on, and the next read finds the
//! key. A failed restore is reported to every reader waiting for it, and the next reader
//! tries again.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use svc_manifests::object_store::{ObjectStoreExt, path::Path as ObjectPath};
use uuid::Uuid;

use super::archive::hex;
use super::{Flight, State, Tier, now, partial_path, remove_file, tier_error};
use crate::error::{Error, Result};

/// How long a reader that gave up waiting is told to wait before asking again.
const RETRY: Duration = Duration::from_secs(5);

impl Tier {
    /// Makes `key` of the store `token` readable from the hot tier again if its blob
    /// instance is archived: restores the instance (or waits for the restore under way), up
    /// to `wait`. `false` when the key is not in an archived instance (its hot copy is
    /// simply not there). Blocking.
    ///
    /// # Errors
    /// [`Error::Restoring`] when the restore takes longer than `wait` (it goes on), or when
    /// it failed (the next read tries again; the reason is logged and given).
    pub(crate) fn restore_for_read(
        self: &Arc<Self>,
        token: Uuid,
        key: &str,
        wait: Duration,
    ) -> Result<bool> {
        if !self.is_archived(token) {
            return Ok(false);
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
        self.restore_waiting(token, &instance, wait)?;
        Ok(true)
    }

    /// Restores `instance` of `token`, or joins the restore under way, and waits up to `wait`.
    pub(crate) fn restore_waiting(
        self: &Arc<Self>,
        token: Uuid,
        instance: &str,
        wait: Duration,
    ) -> Result<()> {
        let id = (token, instance.to_string());
        let flight = {
            let mut flights = self.flights.lock();
            match flights.get(&id) {
                Some(flight) => Arc::clone(flight),
                None => {
                    let flight = Arc::new(Flight::default());
                    flights.insert(id.clone(), Arc::clone(&flight));
                    let tier = Arc::clone(self);
                    let leading = Arc::clone(&flight);
                    let started = std::thread::Builder::new()
                        .name("tier-restore".into())
                        .spawn(move || {
                            let outcome = tier
                                .restore_instance(id.0, &id.1, true)
                                .map(|_| ())
                                .map_err(|e| e.to_string());
                            // Gone from the map first: a reader after a failure starts anew.
                            tier.flights.lock().remove(&id);
                            *leading.outcome.lock() = Some(outcome);
                            leading.done.notify_all();
                        });
                    if let Err(e) = started {
                        flights.remove(&(token, instance.to_string()));
                        return Err(Error::io("start a restore", e));
                    }
                    flight
                }
            }
        };
        let deadline = Instant::now() + wait;
        let mut outcome = flight.outcome.lock();
        while outcome.is_none() {
            if flight.done.wait_until(&mut outcome, deadline).timed_out() && outcome.is_none() {
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
            Err(reason) => Err(Error::Restoring {
                detail: format!(
                    "The data could not be restored from the cold tier (blob {instance}): \
                     {reason}. The next read tries again."
                ),
                retry: RETRY,
            }),
        }
    }

    /// Restores one archived instance: checks its cold object's size and SHA-256, writes
    /// every key it holds (each to a temporary name, renamed into place once whole; a name
    /// that is not a listed key of the store, or a size other than the listed one, fails the
    /// restore), flushes them to disk, records the instance hot and deletes the cold object.
    /// A local cold object is read in place; any other is fetched to the staging directory
    /// first. Nothing when the instance is not archived (restored meanwhile). `for_read`: a
    /// user's read asked for it, which counts as the instance's last read (an operator's
    /// restore does not). Blocking.
    ///
    /// # Errors
    /// [`Error::Tier`] naming what failed; the instance is archived then, as before.
    pub(crate) fn restore_instance(
        &self,
        token: Uuid,
        instance: &str,
        for_read: bool,
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
        let restored = match &self.cold_dir {
            Some(cold) => self
                .check_in_place(&location, &state.checksum, state.cold_bytes)
                .map(|()| cold.join(location.as_ref())),
            None => self
                .fetch(&location, &staged, &state.checksum, state.cold_bytes)
                .map(|()| staged.clone()),
        }
        .and_then(|zip| {
            let listed = |key: &str| self.listed_size(token, key);
            unpack(&zip, &dir, state.objects, &listed, &mut written)
        })
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
        if for_read {
            state.last_read = now();
        }
        state.restores += 1;
        self.put_state(token, instance, &state)?;
        self.count_archived(token, -1);
        if let Err(e) = self.block_on(self.cold.delete(&location)) {
            // Named by no record now: the next start removes it.
            tracing::warn!(%token, %instance, error = %e, "cannot delete a restored cold object");
        }
        tracing::info!(%token, %instance, objects = written.len(), "restored");
        Ok(true)
    }

    /// Checks the size and SHA-256 of the cold object at `location` by reading it whole.
    fn check_in_place(&self, location: &ObjectPath, checksum: &str, size: u64) -> Result<()> {
        let (got, got_bytes) = self.read_back(location)?;
        if got != checksum || got_bytes != size {
            return Err(tier_error(format!(
                "cold object {location} has {got_bytes} bytes with SHA-256 {got}; \
                 {size} bytes with SHA-256 {checksum} were archived"
            )));
        }
        Ok(())
    }

    /// Copies the cold object at `location` to `staged`, checking its size and SHA-256.
    fn fetch(
        &self,
        location: &ObjectPath,
        staged: &std::path::Path,
        checksum: &str,
        size: u64,
    ) -> Result<()> {
        if let Some(parent) = staged.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
        }
        let mut file = std::fs::File::create(staged)
            .map_err(|e| Error::io(format!("create {}", staged.display()), e))?;
        let (got, got_bytes) = self.block_on(async {
            use futures::StreamExt;
            use sha2::Digest;
            let failed =
                |e: &dyn std::fmt::Display| tier_error(format!("read cold object {location}: {e}"));
            let mut stream = self
                .cold
                .get(location)
                .await
                .map_err(|e| failed(&e))?
                .into_stream();
            let mut hasher = sha2::Sha256::new();
            let mut total = 0u64;
            while let Some(bytes) = stream.next().await {
                let bytes = bytes.map_err(|e| failed(&e))?;
                hasher.update(&bytes);
                total += bytes.len() as u64;
                file.write_all(&bytes)
                    .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
            }
            Ok::<_, Error>((hex(&hasher.finalize()), total))
        })?;
        if got != checksum || got_bytes != size {
            return Err(tier_error(format!(
                "cold object {location} has {got_bytes} bytes with SHA-256 {got}; \
                 {size} bytes with SHA-256 {checksum} were archived"
            )));
        }
        Ok(())
    }
}

/// Writes the keys of the ZIP at `zip` into the store directory `dir`: each entry must be a
/// key of the store with its listed size (`listed`), once; there must be `objects` of them.
/// Each file is written to its temporary name and renamed into place once whole; the ZIP's
/// CRC of each entry is checked as it is read. `written` collects the keys begun (to clean
/// their temporary files after a failure).
fn unpack(
    zip: &std::path::Path,
    dir: &std::path::Path,
    objects: u64,
    listed: &dyn Fn(&str) -> Result<Option<u64>>,
    written: &mut Vec<String>,
) -> Result<()> {
    let failed = |e: &dyn std::fmt::Display| tier_error(format!("unpack {}: {e}", zip.display()));
    let file =
        std::fs::File::open(zip).map_err(|e| Error::io(format!("read {}", zip.display()), e))?;
    let mut archive =
        zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| failed(&e))?;
    if archive.len() as u64 != objects {
        return Err(failed(&format!(
            "it holds {} entries, the blob had {objects} keys",
            archive.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut buffer = vec![0u8; 1 << 20];
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(|e| failed(&e))?;
        let name = entry.name().map_err(|e| failed(&e))?.to_string();
        let size = listed(&name)?;
        if size != Some(entry.size()) || !seen.insert(name.clone()) {
            return Err(failed(&format!(
                "{name:?} is not a key of the store with that size, or appears twice"
            )));
        }
        written.push(name.clone());
        let target = dir.join(&name);
        let partial = partial_path(dir, &name);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
        }
        let mut out = std::fs::File::create(&partial)
            .map_err(|e| Error::io(format!("create {}", partial.display()), e))?;
        loop {
            let n = entry.read(&mut buffer).map_err(|e| failed(&e))?;
            if n == 0 {
                break;
            }
            out.write_all(&buffer[..n])
                .map_err(|e| Error::io(format!("write {}", partial.display()), e))?;
        }
        drop(out);
        std::fs::rename(&partial, &target)
            .map_err(|e| Error::io(format!("rename {}", partial.display()), e))?;
    }
    Ok(())
}
