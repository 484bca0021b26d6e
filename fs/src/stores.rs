//! The daemon as the tree's [`Backend`]: ready stores from its records, their keys from the
//! hot tier's directory, their bytes through [`svc_daemon::Stores::read`], the read path
//! HTTP uses. The kernel has checked the caller's permissions by then (`default_permissions`
//! over the owners and modes the tree gives), so a read is made as the store's owner.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use svc_daemon::{Caller, Daemon, ErrorKind, Status};
use uuid::Uuid;

use crate::filesystem::{Backend, StoreEntry};

/// How long a read waits for a chunk the conversion has not written yet: not at all. The
/// mount shows ready stores only, so such a key belongs to a store being converted again; a
/// FUSE thread waiting for it would hold up every other reader.
const READ_WAIT: Duration = Duration::ZERO;

/// The stores of a running daemon.
pub struct DaemonStores {
    daemon: Arc<Daemon>,
}

impl DaemonStores {
    /// The stores of `daemon`.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        DaemonStores { daemon }
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The uid and gid of the local account `user`; root's when there is none (the store's
/// files are then readable by root alone, or by anyone when public).
fn local_ids(user: &str) -> (u32, u32) {
    match nix::unistd::User::from_name(user) {
        Ok(Some(account)) => (account.uid.as_raw(), account.gid.as_raw()),
        _ => (0, 0),
    }
}

/// A ready store's record as the mount shows it. Its generation is when its conversion
/// finished: a store converted again has another.
fn entry(record: &svc_daemon::StoreRecord, now: i64) -> StoreEntry {
    let (uid, gid) = local_ids(&record.owner);
    StoreEntry {
        token: record.token.to_string(),
        uid,
        gid,
        public: record.public_until.is_some_and(|until| now < until),
        generation: record.updated,
    }
}

impl Backend for DaemonStores {
    fn stores(&self) -> Vec<StoreEntry> {
        let now = now();
        let records = match self.daemon.stores().list() {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "the mount cannot list the stores");
                return Vec::new();
            }
        };
        records
            .into_iter()
            .filter(|record| record.status == Status::Ready)
            .map(|record| entry(&record, now))
            .collect()
    }

    fn store(&self, token: &str) -> Option<StoreEntry> {
        let token = Uuid::parse_str(token).ok()?;
        let record = self.daemon.stores().record(token).ok()??;
        (record.status == Status::Ready).then(|| entry(&record, now()))
    }

    fn keys(&self, token: &str) -> Option<Vec<(String, u64)>> {
        let uuid = Uuid::parse_str(token).ok()?;
        let dir = self.daemon.stores().dir(uuid);
        let mut keys = Vec::new();
        list(&dir, "", &mut keys).ok()?;
        // Metadata is served as the daemon holds it, not as the file on disk is written: its
        // size is what a read gives. Chunks are served as their files are.
        for (key, size) in &mut keys {
            let name = key.rsplit('/').next().unwrap_or(key);
            if name.starts_with('.') {
                *size = self.served(uuid, key, None).ok()?.len() as u64;
            }
        }
        Some(keys)
    }

    fn read(&self, store: &StoreEntry, key: &str, offset: u64, len: u32) -> Result<Vec<u8>, i32> {
        let token = Uuid::parse_str(&store.token).map_err(|_| libc::ENOENT)?;
        let bytes = self.served(token, key, Some(store.generation))?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let end = start.saturating_add(len as usize).min(bytes.len());
        Ok(bytes[start..end].to_vec())
    }
}

impl DaemonStores {
    /// The bytes of `key` of store `token` as the read path serves them, read as its owner;
    /// with `generation`, only while the store is ready and that conversion of it.
    fn served(&self, token: Uuid, key: &str, generation: Option<i64>) -> Result<bytes::Bytes, i32> {
        let stores = self.daemon.stores();
        let record = stores
            .record(token)
            .map_err(|_| libc::EIO)?
            .ok_or(libc::ENOENT)?;
        if let Some(generation) = generation {
            if record.status != Status::Ready {
                return Err(libc::ENOENT);
            }
            if record.updated != generation {
                return Err(libc::ESTALE);
            }
        }
        let caller = Caller {
            user: record.owner,
            admin: false,
        };
        stores
            .read(Some(&caller), token, key, now(), READ_WAIT)
            .map(|read| read.bytes)
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => libc::ENOENT,
                _ => libc::EIO,
            })
    }
}

/// The files below `dir` as keys (`prefix` + relative path) with their sizes; a conversion's
/// temporary files (`.<name>.partial`) are not keys.
fn list(dir: &Path, prefix: &str, keys: &mut Vec<(String, u64)>) -> std::io::Result<()> {
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
            list(&entry.path(), &key, keys)?;
        } else if kind.is_file() && !name.ends_with(".partial") {
            keys.push((key, entry.metadata()?.len()));
        }
    }
    Ok(())
}
