//! The daemon as the tree's [`Backend`]: complete stores (ready or archived) from its
//! records, their directories' entries and sizes from the key listing in RocksDB, a point
//! read or a page at a time (never from the cold tier), the root's stores a page of records
//! at a time too, their bytes through [`svc_daemon::Stores::read`], the read path HTTP uses
//! (which restores an archived blob when one of its keys is read). The kernel has checked the
//! caller's permissions by then (`default_permissions` over the owners and modes the tree
//! gives), so a read is made as the store's owner.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use svc_daemon::{Asked, Caller, Daemon, ErrorKind, StoreRecord};
use uuid::Uuid;

use crate::filesystem::{Backend, Listed, ListedPage, Read, StoreEntry, StoresPage};

/// Records a page of the root's listing reads at most, per entry it may show: gone and
/// failed stores stay recorded, and a listing steps over them this many at a time.
const ROOT_SCAN: usize = 8;

/// The stores of a running daemon.
pub struct DaemonStores {
    daemon: Arc<Daemon>,
    /// How long a read waits for a restore from the cold tier before it fails with EIO
    /// (`mount.read_timeout_seconds`). The mount shows complete stores only, so there is
    /// never a chunk still being converted to wait for.
    read_wait: Duration,
    accounts: Accounts,
}

impl DaemonStores {
    /// The stores of `daemon`.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        let read_wait = Duration::from_secs(daemon.config().mount.read_timeout_seconds);
        DaemonStores {
            daemon,
            read_wait,
            accounts: Accounts::default(),
        }
    }
}

/// `EIO`, logged: a store's key listing could not be read.
fn listing_failed(token: &str, e: &svc_daemon::Error) -> i32 {
    tracing::warn!(%token, error = %e, "the mount cannot read a store's key listing");
    libc::EIO
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// How long a user's uid and gid are taken from the password database once looked up.
const ACCOUNT_TTL: Duration = Duration::from_secs(60);

/// The uid and gid of local accounts, looked up at most every [`ACCOUNT_TTL`]: every open
/// asks for its store's owner, and a lookup reads the password database.
#[derive(Default)]
struct Accounts(parking_lot::Mutex<HashMap<String, Account>>);

/// A local account's uid and gid, and when they were looked up.
type Account = ((u32, u32), Instant);

impl Accounts {
    /// The uid and gid of the local account `user` ([`svc_daemon::user_account`]: not a
    /// system account's); root's when there is none (the store's files are then readable by
    /// root alone, or by anyone when public).
    fn ids(&self, user: &str) -> (u32, u32) {
        if let Some((ids, at)) = self.0.lock().get(user)
            && at.elapsed() < ACCOUNT_TTL
        {
            return *ids;
        }
        let ids = match svc_daemon::user_account(user) {
            Ok(Some(account)) => (account.uid.as_raw(), account.gid.as_raw()),
            _ => (0, 0),
        };
        let mut accounts = self.0.lock();
        if accounts.len() > 10_000 {
            accounts.clear();
        }
        accounts.insert(user.to_string(), (ids, Instant::now()));
        ids
    }
}

/// A complete store's record as the mount shows it. Its generation is the record's
/// conversion: a store converted again has another.
fn entry(accounts: &Accounts, record: &svc_daemon::StoreRecord, now: i64) -> StoreEntry {
    let (uid, gid) = accounts.ids(&record.owner);
    StoreEntry {
        token: record.token.to_string(),
        uid,
        gid,
        public: record.public_until.is_some_and(|until| now < until),
        generation: record.conversion,
        modified: record.updated,
    }
}

impl Backend for DaemonStores {
    fn stores(&self, from: &str, most: usize) -> Result<StoresPage, i32> {
        let from = match from {
            "" => None,
            token => Some(Uuid::parse_str(token).map_err(|_| libc::EINVAL)?),
        };
        let (records, next) = self
            .daemon
            .stores()
            .list_page(from, most, most * ROOT_SCAN, StoreRecord::is_complete)
            .map_err(|e| {
                tracing::warn!(error = %e, "the mount cannot list the stores");
                libc::EIO
            })?;
        let now = now();
        let stores = records
            .iter()
            .map(|record| entry(&self.accounts, record, now))
            .collect();
        Ok((stores, next.map(|token| token.to_string())))
    }

    fn store(&self, token: &str) -> Option<StoreEntry> {
        let token = Uuid::parse_str(token).ok()?;
        let record = self.daemon.stores().shared_record(token).ok()??;
        record
            .is_complete()
            .then(|| entry(&self.accounts, &record, now()))
    }

    fn entry(&self, token: &str, dir: &str, name: &str) -> Result<Option<Listed>, i32> {
        let Ok(uuid) = Uuid::parse_str(token) else {
            return Ok(None);
        };
        self.daemon
            .stores()
            .listed_entry(uuid, dir, name)
            .map_err(|e| listing_failed(token, &e))
    }

    fn entries(&self, token: &str, dir: &str, from: &str, most: usize) -> Result<ListedPage, i32> {
        let Ok(uuid) = Uuid::parse_str(token) else {
            return Ok(ListedPage::default());
        };
        self.daemon
            .stores()
            .listed_entries(uuid, dir, from, most)
            .map_err(|e| listing_failed(token, &e))
    }

    fn read(&self, store: &StoreEntry, key: &str, read: Read) -> Result<Vec<u8>, i32> {
        let Read {
            offset,
            len,
            asked,
            may_wait,
            uid,
        } = read;
        let token = Uuid::parse_str(&store.token).map_err(|_| libc::ENOENT)?;
        let asked = Asked {
            at: asked,
            by: format!("uid {uid}"),
        };
        let bytes = self.served(token, key, store.generation, may_wait, &asked)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let end = start.saturating_add(len as usize).min(bytes.len());
        Ok(bytes[start..end].to_vec())
    }

    fn hot_file(&self, store: &StoreEntry, key: &str) -> Option<std::fs::File> {
        let token = Uuid::parse_str(&store.token).ok()?;
        let file = self
            .daemon
            .stores()
            .hot_chunk(token, key, store.generation, now())
            .inspect_err(|e| tracing::warn!(%token, %key, error = %e, "cannot open a hot copy"))
            .ok()??;
        // Converted again between the check and the open, the file may be the new
        // conversion's: the open then reads through the daemon, which answers ESTALE.
        (self.is_conversion(token, store.generation) == Ok(true)).then_some(file)
    }
}

impl DaemonStores {
    /// The bytes of `key` of store `token` as the read path serves them, read as its owner,
    /// while the store is complete and the conversion `generation` of it, for a read asked
    /// at `asked`: waiting for a restore until `read_timeout_seconds` after that when it
    /// `may_wait`, else failing with `EAGAIN` when it would wait (the restore it needs is
    /// started then, and the same read waiting for it later joins it, or gets its failure).
    fn served(
        &self,
        token: Uuid,
        key: &str,
        generation: u64,
        may_wait: bool,
        asked: &Asked,
    ) -> Result<bytes::Bytes, i32> {
        let stores = self.daemon.stores();
        let record = stores
            .shared_record(token)
            .map_err(|_| libc::EIO)?
            .ok_or(libc::ENOENT)?;
        if !record.is_complete() {
            return Err(libc::ENOENT);
        }
        if record.conversion != generation {
            return Err(libc::ESTALE);
        }
        let caller = Caller {
            user: record.owner.clone(),
            admin: false,
        };
        let wait = if may_wait {
            self.read_wait
        } else {
            Duration::ZERO
        };
        let read = stores.read_asked(Some(&caller), token, key, now(), wait, asked);
        // The read path serves the store as it is when it reads: converted again meanwhile
        // (a reload while this read waited for a restore, say), the bytes may be the new
        // conversion's, which this inode must not show, and a failure is the old inode's.
        if !self.is_conversion(token, generation)? {
            return Err(libc::ESTALE);
        }
        read.map(|read| read.bytes).map_err(|e| match e.kind() {
            ErrorKind::NotFound => libc::ENOENT,
            // It would wait (for a restore), and may not: asked again by one that may.
            ErrorKind::Unavailable if !may_wait => libc::EAGAIN,
            kind => {
                tracing::warn!(%token, %key, ?kind, error = %e, "a read through the mount failed");
                libc::EIO
            }
        })
    }

    /// Whether store `token` is complete and still its conversion `generation`; `EIO` when
    /// its record cannot be read.
    fn is_conversion(&self, token: Uuid, generation: u64) -> Result<bool, i32> {
        let record = self
            .daemon
            .stores()
            .shared_record(token)
            .map_err(|_| libc::EIO)?;
        Ok(record.is_some_and(|record| record.is_complete_conversion(generation)))
    }
}
