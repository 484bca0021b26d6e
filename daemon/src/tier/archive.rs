//! Archiving: a cold blob instance packed into one uncompressed ZIP on the cold tier, read
//! back and verified, recorded, and only then its hot copies deleted.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use svc_manifests::object_store::{ObjectStoreExt, WriteMultipart, path::Path as ObjectPath};
use uuid::Uuid;

use super::{BlobState, Keys, State, Tier, now, remove_file, tier_error};
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

/// A store that may be archived: its token, its conversion (the `updated` of its ready
/// record) and when it was last read or converted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    pub(crate) token: Uuid,
    pub(crate) generation: i64,
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
        still_ready: &dyn Fn(Uuid, i64) -> bool,
    ) -> Result<bool> {
        let token = candidate.token;
        let store_lock = self.store_lock(token);
        let _shared = store_lock.read();
        let instance_lock = self.instance_lock(token, instance);
        let _one = instance_lock.lock();
        let previous = self.state(token, instance)?;
        if previous.as_ref().is_some_and(|s| s.state != State::Hot)
            || !still_ready(token, candidate.generation)
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
        state.cold_key = format!("{token}/{instance}.zip");
        state.changed = now();
        self.put_state(token, instance, &state)?;
        let staged = self.staging_of(token).join(format!("{instance}.zip"));
        let location = ObjectPath::from(state.cold_key.as_str());
        let copied = self
            .pack(&self.store_dir(token), keys, &staged)
            .and_then(|()| self.upload_verified(&staged, &location));
        remove_file(&staged);
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
        self.put_state(token, instance, &state)?;
        self.count_archived(token, 1);
        let dir = self.store_dir(token);
        for (key, _) in keys {
            remove_file(&dir.join(key));
        }
        tracing::info!(%token, %instance, objects = keys.len(), bytes, "archived");
        Ok(true)
    }

    /// Writes the ZIP of `keys` (read from `dir`) to `staged`: stored, not compressed (the
    /// chunks are compressed already, and `unzip` recovers them without the daemon).
    fn pack(&self, dir: &Path, keys: &[(String, u64)], staged: &Path) -> Result<()> {
        let failed = |what: String, e: &dyn std::fmt::Display| tier_error(format!("{what}: {e}"));
        if let Some(parent) = staged.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
        }
        let file = std::fs::File::create(staged)
            .map_err(|e| Error::io(format!("create {}", staged.display()), e))?;
        let mut zip = zip::ZipWriter::new(std::io::BufWriter::with_capacity(PART, file));
        for (key, size) in keys {
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
        }
        let mut writer = zip
            .finish()
            .map_err(|e| failed(format!("pack {}", staged.display()), &e))?;
        writer
            .flush()
            .map_err(|e| Error::io(format!("write {}", staged.display()), e))?;
        Ok(())
    }

    /// Uploads `staged` to `location` on the cold tier, reads the object back and compares
    /// its SHA-256 and size with what was sent: the checksum (hex) and size on success.
    fn upload_verified(&self, staged: &Path, location: &ObjectPath) -> Result<(String, u64)> {
        let cold_failed = |what: &str, e: &dyn std::fmt::Display| {
            tier_error(format!("{what} cold object {location}: {e}"))
        };
        let mut file = std::fs::File::open(staged)
            .map_err(|e| Error::io(format!("read {}", staged.display()), e))?;
        let (sent, sent_bytes) = self.block_on(async {
            let upload = self
                .cold
                .put_multipart(location)
                .await
                .map_err(|e| cold_failed("write", &e))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            let mut buffer = vec![0u8; PART];
            let sent = loop {
                let n = match read_full(&mut file, &mut buffer) {
                    Ok(n) => n,
                    Err(e) => break Err(Error::io(format!("read {}", staged.display()), e)),
                };
                if n == 0 {
                    break Ok(());
                }
                hasher.update(&buffer[..n]);
                total += n as u64;
                if let Err(e) = writer.wait_for_capacity(PARTS_AT_ONCE).await {
                    break Err(cold_failed("write", &e));
                }
                writer.write(&buffer[..n]);
            };
            if let Err(e) = sent {
                // No unfinished upload is left behind on an object store that keeps parts.
                let _ = writer.abort().await;
                return Err(e);
            }
            writer
                .finish()
                .await
                .map_err(|e| cold_failed("write", &e))?;
            Ok::<_, Error>((hex(&hasher.finalize()), total))
        })?;
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
        self.block_on(async {
            use futures::StreamExt;
            let got = self
                .cold
                .get(location)
                .await
                .map_err(|e| tier_error(format!("read cold object {location}: {e}")))?;
            let mut stream = got.into_stream();
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            while let Some(bytes) = stream.next().await {
                let bytes =
                    bytes.map_err(|e| tier_error(format!("read cold object {location}: {e}")))?;
                hasher.update(&bytes);
                total += bytes.len() as u64;
            }
            Ok((hex(&hasher.finalize()), total))
        })
    }

    /// The staging directory of a store's blobs.
    pub(super) fn staging_of(&self, token: Uuid) -> PathBuf {
        self.staging.join(token.to_string())
    }
}

/// Reads until `buffer` is full or the file ends; the bytes read.
fn read_full(file: &mut std::fs::File, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Lower-case hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
