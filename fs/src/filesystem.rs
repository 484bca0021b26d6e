//! The tree the mount shows: `/<token>.zarr/<key>`, as the HTTP layout names keys, with the
//! directories that key prefixes make (`tas/`, `group0/tas/`). Pure and testable without a
//! mount: what stores exist, the entries of their directories and their bytes come from a
//! [`Backend`] (the daemon's store records, key listings and read path); the FUSE adapter
//! turns each callback into one call here and an errno out.
//!
//! Inodes: 1 is the root; every other inode is made when the kernel looks its name up, from
//! one point read of its store's key listing (never from the whole listing), and goes when
//! the kernel forgets it ([`Tree::forget`]), so the mount's memory follows what the kernel
//! holds, whatever the size of a store. A directory is listed a page at a time straight from
//! the listing ([`Tree::readdir`]), making no inodes. An inode number is never reused while
//! the tree lives, so the kernel's cached entries and pages stay right.
//!
//! A store is looked up afresh by name each time (the kernel asks again once its entry's
//! time is up): one that is gone or not ready is not there. A store converted again is a
//! new generation: its name then leads to a new directory inode and new key inodes, and the
//! old ones answer `ESTALE` (so no cache holds the old bytes under the new name).
//!
//! Permissions: a store and its keys belong to the store owner's uid; a private store is
//! `0500`/`0400`, a public one `0555`/`0444`, from the store's current record, and the kernel
//! enforces them (`default_permissions`). As the kernel may hold attributes for a few
//! seconds, opening a key or a directory checks the caller against the current record too
//! ([`Tree::may_read`]): a store no longer public is not read or listed by others. The root
//! is `0711`: a user reaches a store by its name, and does not list the others' stores. The
//! tree is read-only.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

pub use svc_daemon::{Listed, ListedPage};

/// A page of the stores: those on it, and the token the next page starts at.
pub type StoresPage = (Vec<StoreEntry>, Option<String>);

/// The root directory's inode.
pub const ROOT: u64 = 1;

/// What the tree needs of the daemon.
pub trait Backend: Send + Sync {
    /// At most `most` of the stores the mount shows now (ready ones), in token order from
    /// the token `from` on (`""`: the first), and the token the next page starts at
    /// (`None`: no more). A page may be short, even empty, and have more after it.
    ///
    /// # Errors
    /// `EIO` when the stores cannot be listed.
    fn stores(&self, from: &str, most: usize) -> Result<StoresPage, i32>;

    /// Store `token` now, if it is ready.
    fn store(&self, token: &str) -> Option<StoreEntry>;

    /// The entry `name` of directory `dir` (`""` for the store's top, else a key prefix
    /// ending in `/`) of the key listing of store `token`; `None` when there is none (or
    /// the store is gone).
    ///
    /// # Errors
    /// `EIO` when the listing cannot be read.
    fn entry(&self, token: &str, dir: &str, name: &str) -> Result<Option<Listed>, i32>;

    /// At most `most` entries of directory `dir` of the key listing of store `token`, from
    /// position `from` (`""`: the first) in the listing's order, and the position after
    /// them (`None`: no more). Positions are the backend's own; the tree only hands back
    /// those it was given.
    ///
    /// # Errors
    /// `EIO` when the listing cannot be read.
    fn entries(&self, token: &str, dir: &str, from: &str, most: usize) -> Result<ListedPage, i32>;

    /// The bytes of `key` of `store` (the conversion of it that the tree shows) that `read`
    /// asks for.
    ///
    /// # Errors
    /// An errno: `ENOENT` for a key or store that is gone or not ready, `ESTALE` when the
    /// store is now another conversion than `store.generation`, `EIO` for a read that failed.
    fn read(&self, store: &StoreEntry, key: &str, read: Read) -> Result<Vec<u8>, i32>;

    /// The hot copy of `key` of `store` (that conversion of it), opened, when its bytes are
    /// exactly what [`Backend::read`] gives: the kernel may then read it directly. `None`
    /// when there is none (the key is read through [`Backend::read`]), the default.
    fn hot_file(&self, _store: &StoreEntry, _key: &str) -> Option<std::fs::File> {
        None
    }
}

/// One store as the mount shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreEntry {
    /// Its token (the directory is `<token>.zarr`).
    pub token: String,
    /// The local uid of its owner (root's when the owner has no local account).
    pub uid: u32,
    /// That user's gid.
    pub gid: u32,
    /// Whether anyone may read it.
    pub public: bool,
    /// Which conversion of it this is (a store converted again is another).
    pub generation: u64,
    /// When that conversion finished (Unix seconds): the modification time of its files
    /// and directories, so that tools that compare times (`rsync -a`, `make`) see a store
    /// converted again as changed.
    pub modified: i64,
}

/// What a read asks for: up to `len` bytes from `offset`, since `asked` (when the mount
/// took the request from the kernel: a read waiting for its bytes, such as a restore from
/// the cold tier, waits from then, not from when a reader thread took it up), and whether
/// it may wait at all (when not, a read that would wait fails at once).
#[derive(Debug, Clone, Copy)]
pub struct Read {
    /// Where it starts.
    pub offset: u64,
    /// How many bytes at most.
    pub len: u32,
    /// When it was asked.
    pub asked: Instant,
    /// Whether it may wait for its bytes.
    pub may_wait: bool,
    /// The local user reading (whose restores take turns with other users').
    pub uid: u32,
}

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Directory,
    /// A key's bytes.
    File,
}

/// The attributes of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// Its inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: Kind,
    /// Bytes of a file (0 for a directory).
    pub size: u64,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification (and change) time, Unix seconds.
    pub modified: i64,
}

/// A node of the tree.
#[derive(Debug, Clone)]
enum Node {
    Root,
    /// A store's directory (`<token>.zarr`, `path` empty) or a directory below it (`path`
    /// the key prefix it stands for, ending in `/`).
    Directory {
        store: Arc<StoreEntry>,
        parent: u64,
        path: String,
    },
    /// A key.
    File {
        store: Arc<StoreEntry>,
        parent: u64,
        key: String,
        size: u64,
    },
}

/// An entry of a directory listing: its name, what it is, and its inode when the kernel
/// holds one for it ([`UNKNOWN_INODE`] otherwise: listing makes no inodes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: String,
    /// File or directory.
    pub kind: Kind,
    /// Its inode, or [`UNKNOWN_INODE`].
    pub ino: u64,
}

/// The inode number a listing gives an entry that has none yet (libfuse's
/// `FUSE_UNKNOWN_INO`): programs that need an entry's inode `stat` it, which looks it up.
/// Never given to a node.
pub const UNKNOWN_INODE: u64 = 0xffff_ffff;

/// The tree of the mount over `backend`.
pub struct Tree<B> {
    backend: B,
    inodes: RwLock<Inodes>,
}

#[derive(Default)]
struct Inodes {
    /// Nodes by inode number.
    nodes: HashMap<u64, Node>,
    /// The next inode number to give.
    next: u64,
    /// How many lookups of each inode the kernel holds (it forgets them in turn).
    lookups: HashMap<u64, u64>,
    /// The inodes of each directory's entries that the kernel holds, by name.
    children: HashMap<u64, HashMap<String, u64>>,
    /// The directory inode of the current generation of each store met, by token.
    stores: HashMap<String, u64>,
    /// The latest record of each store met, by token: its owner and permissions now.
    current: HashMap<String, StoreEntry>,
}

/// The most entries one [`Tree::readdir`] call gives: a call's work stays bounded in a
/// directory of a million chunks.
pub const READDIR_MOST: usize = 256;

impl<B: Backend> Tree<B> {
    /// A tree over `backend`, with only the root known.
    pub fn new(backend: B) -> Self {
        let inodes = Inodes {
            nodes: HashMap::from([(ROOT, Node::Root)]),
            next: ROOT + 1,
            ..Inodes::default()
        };
        Tree {
            backend,
            inodes: RwLock::new(inodes),
        }
    }

    /// The entry `name` of directory `parent`; the kernel holds one more lookup of it.
    ///
    /// # Errors
    /// `ENOENT` when there is none, `ENOTDIR` when `parent` is a file, `ESTALE` inside a
    /// store converted again since, `EIO` when the listing cannot be read.
    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr, i32> {
        if parent == ROOT {
            let token = name.strip_suffix(".zarr").ok_or(libc::ENOENT)?;
            let entry = self.store(token)?;
            let mut inodes = self.write_inodes();
            let ino = inodes.store_dir(&entry);
            return inodes.looked_up(ino);
        }
        let (store, path) = match self.read_inodes().node(parent)? {
            Node::Directory { store, path, .. } => (Arc::clone(store), path.clone()),
            _ => return Err(libc::ENOTDIR),
        };
        // Only while it is still this conversion, before and after reading the listing
        // (which is replaced when the store is converted again).
        self.current(&store)?;
        {
            // Found and counted under one lock: a forget in between would drop it.
            let mut inodes = self.write_inodes();
            if let Some(ino) = inodes.child(parent, name) {
                return inodes.looked_up(ino);
            }
        }
        let listed = self.backend.entry(&store.token, &path, name)?;
        self.current(&store)?;
        let node = match listed.ok_or(libc::ENOENT)? {
            Listed::File(size) => Node::File {
                store,
                parent,
                key: format!("{path}{name}"),
                size,
            },
            Listed::Directory => Node::Directory {
                store,
                parent,
                path: format!("{path}{name}/"),
            },
        };
        let mut inodes = self.write_inodes();
        // Made meanwhile by another lookup: that one.
        if let Some(ino) = inodes.child(parent, name) {
            return inodes.looked_up(ino);
        }
        inodes.node(parent)?;
        let ino = inodes.add(node);
        inodes
            .children
            .entry(parent)
            .or_default()
            .insert(name.to_string(), ino);
        inodes.looked_up(ino)
    }

    /// The attributes of inode `ino`, with its store's current owner and permissions.
    ///
    /// # Errors
    /// `ENOENT` for an inode the tree never gave or a store gone, `ESTALE` for an inode of
    /// an earlier conversion.
    pub fn getattr(&self, ino: u64) -> Result<Attr, i32> {
        let snapshot = match self.read_inodes().node(ino)? {
            Node::Root => None,
            Node::Directory { store, .. } | Node::File { store, .. } => Some(Arc::clone(store)),
        };
        if let Some(store) = snapshot {
            self.current(&store)?;
        }
        self.read_inodes().attr(ino)
    }

    /// At most [`READDIR_MOST`] entries of directory `ino` (without `.` and `..`), from
    /// position `from` (`""`: the first) in listing order, and the position after them
    /// (`None`: there are no more). The root lists the stores by token; a directory inside
    /// a store, its key listing's entries as the backend gives them.
    ///
    /// # Errors
    /// `ENOENT` for an unknown inode, `ENOTDIR` for a file, `ESTALE` for a directory of an
    /// earlier conversion, `EIO` when the listing cannot be read.
    pub fn readdir(&self, ino: u64, from: &str) -> Result<(Vec<DirEntry>, Option<String>), i32> {
        let directory = match self.read_inodes().node(ino)? {
            Node::Root => None,
            Node::File { .. } => return Err(libc::ENOTDIR),
            Node::Directory { store, path, .. } => Some((Arc::clone(store), path.clone())),
        };
        // (Not within that match: its read lock would be held while the root lists every
        // store, and a second one taken behind a waiting writer never comes.)
        let Some((store, path)) = directory else {
            return self.root_entries(from);
        };
        self.current(&store)?;
        let ListedPage {
            entries: listed,
            next,
        } = self
            .backend
            .entries(&store.token, &path, from, READDIR_MOST)?;
        // Read while it was this conversion (a page of another, or the empty page of a
        // store being converted again, would end the listing short).
        self.current(&store)?;
        let inodes = self.read_inodes();
        let entries = listed
            .into_iter()
            .map(|(name, listed)| DirEntry {
                ino: inodes.child(ino, &name).unwrap_or(UNKNOWN_INODE),
                kind: match listed {
                    Listed::File(_) => Kind::File,
                    Listed::Directory => Kind::Directory,
                },
                name,
            })
            .collect();
        Ok((entries, next))
    }

    /// A page of the root's entries (the stores by token) from the token `from` on.
    fn root_entries(&self, from: &str) -> Result<(Vec<DirEntry>, Option<String>), i32> {
        let (stores, next) = self.backend.stores(from, READDIR_MOST)?;
        let inodes = self.read_inodes();
        let entries = stores
            .into_iter()
            .map(|store| DirEntry {
                ino: inodes
                    .stores
                    .get(&store.token)
                    .copied()
                    .unwrap_or(UNKNOWN_INODE),
                kind: Kind::Directory,
                name: format!("{}.zarr", store.token),
            })
            .collect();
        Ok((entries, next))
    }

    /// The bytes of file `ino` that `read` asks for.
    ///
    /// # Errors
    /// `ENOENT` for an unknown inode or a store gone, `ESTALE` for a key of an earlier
    /// conversion, `EISDIR` for a directory, the backend's errno.
    pub fn read(&self, ino: u64, read: Read) -> Result<Vec<u8>, i32> {
        let Read { offset, len, .. } = read;
        let (store, key, size) = match self.read_inodes().node(ino)? {
            Node::File {
                store, key, size, ..
            } => (Arc::clone(store), key.clone(), *size),
            _ => return Err(libc::EISDIR),
        };
        if offset >= size {
            // Still only while it is this conversion.
            self.current(&store)?;
            return Ok(Vec::new());
        }
        let len = u32::try_from((size - offset).min(u64::from(len))).unwrap_or(len);
        // The backend checks the store's record as it reads: one look per read.
        self.backend.read(&store, &key, Read { len, ..read })
    }

    /// Whether the local user `uid` may read inode `ino` (a file, or list a directory) now:
    /// root and the store's owner always, anyone while it is public (from its current
    /// record, whatever the kernel holds).
    ///
    /// # Errors
    /// `EACCES` for another user of a private store, `ENOENT` for a store gone, `ESTALE` for
    /// an inode of an earlier conversion.
    pub fn may_read(&self, ino: u64, uid: u32) -> Result<(), i32> {
        let store = match self.read_inodes().node(ino)? {
            Node::Root => return Ok(()),
            Node::Directory { store, .. } | Node::File { store, .. } => Arc::clone(store),
        };
        let now = self.current(&store)?;
        if uid == 0 || uid == now.uid || now.public {
            Ok(())
        } else {
            Err(libc::EACCES)
        }
    }

    /// The hot copy of file `ino`, opened, for the kernel to read directly; `None` when it
    /// has none or `ino` is not a file.
    pub fn hot_file(&self, ino: u64) -> Option<std::fs::File> {
        let (store, key) = match self.read_inodes().node(ino).ok()? {
            Node::File { store, key, .. } => (Arc::clone(store), key.clone()),
            _ => return None,
        };
        self.backend.hot_file(&store, &key)
    }

    /// Whether file `ino` is a metadata document (`.zarray`, `.zattrs`, `.zgroup`,
    /// `.zmetadata`: Zarr v2 names its documents with a leading dot), which never leaves
    /// the hot tier.
    pub fn is_document(&self, ino: u64) -> bool {
        match self.read_inodes().node(ino) {
            Ok(Node::File { key, .. }) => key.rsplit('/').next().is_some_and(|name| {
                matches!(name, ".zarray" | ".zattrs" | ".zgroup" | ".zmetadata")
            }),
            _ => false,
        }
    }

    /// The kernel forgets `lookups` lookups of `ino`. An inode it no longer holds goes (a
    /// store's current directory stays, known by its token); the kernel lets go of a
    /// directory's entries before the directory itself, as they hold their parents.
    pub fn forget(&self, ino: u64, lookups: u64) {
        let mut inodes = self.write_inodes();
        let Some(held) = inodes.lookups.get_mut(&ino) else {
            return;
        };
        *held = held.saturating_sub(lookups);
        if *held == 0 {
            inodes.lookups.remove(&ino);
            inodes.drop_node(ino);
        }
    }

    /// The number of inodes the tree holds (the root included).
    pub fn inodes(&self) -> usize {
        self.read_inodes().nodes.len()
    }

    /// Whether `ino` is inside a store (a key or a directory below a store's directory),
    /// not the root or a store's directory.
    pub fn inside_store(&self, ino: u64) -> bool {
        match self.read_inodes().node(ino) {
            Ok(Node::File { .. }) => true,
            Ok(Node::Directory { path, .. }) => !path.is_empty(),
            _ => false,
        }
    }

    /// The current record of the store that `store` (a node's snapshot) belongs to, when it
    /// is still that conversion.
    fn current(&self, store: &StoreEntry) -> Result<StoreEntry, i32> {
        let now = self.backend.store(&store.token).ok_or(libc::ENOENT)?;
        if now.generation != store.generation {
            return Err(libc::ESTALE);
        }
        // Each open asks: the lock that changes the tree is taken only for a change.
        if self.read_inodes().current.get(&now.token) != Some(&now) {
            self.write_inodes()
                .current
                .insert(now.token.clone(), now.clone());
        }
        Ok(now)
    }

    /// The record of store `token` now, as the tree shows it.
    fn store(&self, token: &str) -> Result<StoreEntry, i32> {
        match self.backend.store(token) {
            // A store has one name: its token as the backend spells it (not another spelling
            // the same UUID parses from).
            Some(entry) if entry.token == token => Ok(entry),
            Some(_) => Err(libc::ENOENT),
            None => {
                // Gone or not ready: its name leads nowhere.
                let mut inodes = self.write_inodes();
                if let Some(ino) = inodes.stores.remove(token)
                    && !inodes.lookups.contains_key(&ino)
                {
                    inodes.nodes.remove(&ino);
                }
                Err(libc::ENOENT)
            }
        }
    }

    fn write_inodes(&self) -> std::sync::RwLockWriteGuard<'_, Inodes> {
        self.inodes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read_inodes(&self) -> std::sync::RwLockReadGuard<'_, Inodes> {
        self.inodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Inodes {
    fn node(&self, ino: u64) -> Result<&Node, i32> {
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    /// The inode of entry `name` of directory `parent` that the kernel holds, if any.
    fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.children.get(&parent)?.get(name).copied()
    }

    /// Drops `ino`, which the kernel no longer holds, unless it is the root or a store's
    /// current directory.
    fn drop_node(&mut self, ino: u64) {
        let (parent, name) = match self.nodes.get(&ino) {
            Some(Node::Directory { store, path, .. }) if path.is_empty() => {
                if self.stores.get(&store.token) != Some(&ino) {
                    self.nodes.remove(&ino);
                }
                return;
            }
            Some(Node::Directory { parent, path, .. }) => (*parent, path.trim_end_matches('/')),
            Some(Node::File { parent, key, .. }) => (*parent, key.as_str()),
            Some(Node::Root) | None => return,
        };
        let name = name.rsplit('/').next().unwrap_or(name).to_string();
        if let Some(children) = self.children.get_mut(&parent) {
            if children.get(&name) == Some(&ino) {
                children.remove(&name);
            }
            if children.is_empty() {
                self.children.remove(&parent);
            }
        }
        self.nodes.remove(&ino);
    }

    /// The directory inode of the store `entry` (its current record), made for each new
    /// generation.
    fn store_dir(&mut self, entry: &StoreEntry) -> u64 {
        self.current.insert(entry.token.clone(), entry.clone());
        if let Some(&ino) = self.stores.get(&entry.token)
            && matches!(self.node(ino), Ok(Node::Directory { store, .. }) if store.generation == entry.generation)
        {
            return ino;
        }
        let ino = self.add(Node::Directory {
            store: Arc::new(entry.clone()),
            parent: ROOT,
            path: String::new(),
        });
        // The earlier generation's directory stays while the kernel holds it.
        if let Some(earlier) = self.stores.insert(entry.token.clone(), ino)
            && !self.lookups.contains_key(&earlier)
        {
            self.nodes.remove(&earlier);
        }
        ino
    }

    /// The attributes of `ino`, looked up once more by the kernel.
    fn looked_up(&mut self, ino: u64) -> Result<Attr, i32> {
        let attr = self.attr(ino)?;
        *self.lookups.entry(ino).or_default() += 1;
        Ok(attr)
    }

    /// Adds `node`; its inode.
    fn add(&mut self, node: Node) -> u64 {
        if self.next == UNKNOWN_INODE {
            self.next += 1;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, node);
        ino
    }

    fn attr(&self, ino: u64) -> Result<Attr, i32> {
        let (kind, size, snapshot) = match self.node(ino)? {
            Node::Root => {
                return Ok(Attr {
                    ino,
                    kind: Kind::Directory,
                    size: 0,
                    perm: 0o711,
                    uid: 0,
                    gid: 0,
                    modified: 0,
                });
            }
            Node::Directory { store, .. } => (Kind::Directory, 0, &**store),
            Node::File { store, size, .. } => (Kind::File, *size, &**store),
        };
        // The owner and permissions of the store's latest record, for its current generation.
        let store = self
            .current
            .get(&snapshot.token)
            .filter(|now| now.generation == snapshot.generation)
            .unwrap_or(snapshot);
        let perm = match (kind, store.public) {
            (Kind::Directory, true) => 0o555,
            (Kind::Directory, false) => 0o500,
            (Kind::File, true) => 0o444,
            (Kind::File, false) => 0o400,
        };
        Ok(Attr {
            ino,
            kind,
            size,
            perm,
            uid: store.uid,
            gid: store.gid,
            modified: store.modified,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of `len` bytes from `offset`, asked now.
    fn at(offset: u64, len: u32) -> Read {
        Read {
            offset,
            len,
            asked: Instant::now(),
            may_wait: true,
            uid: 0,
        }
    }

    /// The entries of directory `dir` of the key listing `keys`, as the daemon gives them:
    /// in key order, names empty, `.` or `..` left out, and a name that is a key and a
    /// directory once, as the key.
    fn entries_of(keys: &[(String, u64)], dir: &str) -> Vec<(String, Listed)> {
        let mut sorted = keys.to_vec();
        sorted.sort();
        let files: HashMap<&str, u64> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let mut seen = std::collections::HashSet::new();
        let mut entries: Vec<(String, Listed)> = Vec::new();
        for (key, size) in &sorted {
            let Some(rest) = key.strip_prefix(dir) else {
                continue;
            };
            let (name, listed) = match rest.split_once('/') {
                None => (rest, Listed::File(*size)),
                Some((name, _)) => (name, Listed::Directory),
            };
            let file_too = files.contains_key(format!("{dir}{name}").as_str());
            if matches!(name, "" | "." | "..")
                || (listed == Listed::Directory && file_too)
                || !seen.insert(name.to_string())
            {
                continue;
            }
            entries.push((name.to_string(), listed));
        }
        entries
    }

    fn entry_in(keys: &[(String, u64)], dir: &str, name: &str) -> Option<Listed> {
        entries_of(keys, dir)
            .into_iter()
            .find_map(|(n, listed)| (n == name).then_some(listed))
    }

    /// A page of [`entries_of`]; positions are indexes.
    fn entries_in(keys: &[(String, u64)], dir: &str, from: &str, most: usize) -> ListedPage {
        let all = entries_of(keys, dir);
        let start: usize = from.parse().unwrap_or(0);
        let end = start.saturating_add(most).min(all.len());
        ListedPage {
            entries: all.get(start..end).unwrap_or_default().to_vec(),
            next: (end < all.len()).then(|| end.to_string()),
        }
    }

    /// Two stores held in memory: the tree's own unit tests need no daemon.
    struct Two;

    const KEYS: [(&str, &str); 6] = [
        (".zgroup", "{\"zarr_format\": 2}"),
        (".zmetadata", "{}"),
        ("tas/.zarray", "{\"chunks\": [1]}"),
        ("tas/0.0.0", "chunk bytes"),
        ("group0/pr/0", "pr"),
        ("group0/.zgroup", "{}"),
    ];

    impl Two {
        fn keys(token: &str) -> Vec<(String, u64)> {
            if token == "a1" || token == "b2" {
                KEYS.iter()
                    .map(|(k, v)| ((*k).to_string(), v.len() as u64))
                    .collect()
            } else {
                Vec::new()
            }
        }
    }

    /// The page of `stores` a backend gives for `from` and `most`.
    fn page_of(mut stores: Vec<StoreEntry>, from: &str, most: usize) -> Result<StoresPage, i32> {
        stores.retain(|s| s.token.as_str() >= from);
        stores.sort_unstable_by(|a, b| a.token.cmp(&b.token));
        let next = stores.get(most).map(|s| s.token.clone());
        stores.truncate(most);
        Ok((stores, next))
    }

    impl Two {
        fn all() -> Vec<StoreEntry> {
            vec![
                StoreEntry {
                    token: "b2".into(),
                    uid: 1001,
                    gid: 100,
                    public: true,
                    generation: 1,
                    modified: 0,
                },
                StoreEntry {
                    token: "a1".into(),
                    uid: 1000,
                    gid: 100,
                    public: false,
                    generation: 1,
                    modified: 0,
                },
            ]
        }
    }

    impl Backend for Two {
        fn stores(&self, from: &str, most: usize) -> Result<StoresPage, i32> {
            page_of(Two::all(), from, most)
        }

        fn store(&self, token: &str) -> Option<StoreEntry> {
            Two::all().into_iter().find(|s| s.token == token)
        }

        fn entry(&self, token: &str, dir: &str, name: &str) -> Result<Option<Listed>, i32> {
            Ok(entry_in(&Two::keys(token), dir, name))
        }

        fn entries(
            &self,
            token: &str,
            dir: &str,
            from: &str,
            most: usize,
        ) -> Result<ListedPage, i32> {
            Ok(entries_in(&Two::keys(token), dir, from, most))
        }

        fn read(&self, _: &StoreEntry, key: &str, read: Read) -> Result<Vec<u8>, i32> {
            let (_, value) = KEYS.iter().find(|(k, _)| *k == key).ok_or(libc::ENOENT)?;
            let start = usize::try_from(read.offset).unwrap().min(value.len());
            let end = (start + read.len as usize).min(value.len());
            Ok(value.as_bytes()[start..end].to_vec())
        }
    }

    /// Every entry of directory `ino`, page after page.
    fn list<B: Backend>(tree: &Tree<B>, ino: u64) -> Vec<DirEntry> {
        let mut entries = Vec::new();
        let mut from = String::new();
        loop {
            let (page, next) = tree.readdir(ino, &from).unwrap();
            assert!(page.len() <= READDIR_MOST);
            entries.extend(page);
            match next {
                Some(next) => from = next,
                None => return entries,
            }
        }
    }

    fn names(entries: &[DirEntry]) -> Vec<(&str, Kind)> {
        entries.iter().map(|e| (e.name.as_str(), e.kind)).collect()
    }

    #[test]
    fn stores_are_directories_of_their_keys() {
        let tree = Tree::new(Two);
        let root = list(&tree, ROOT);
        assert_eq!(
            names(&root),
            [("a1.zarr", Kind::Directory), ("b2.zarr", Kind::Directory)]
        );
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(store.kind, Kind::Directory);
        assert_eq!(
            names(&list(&tree, store.ino)),
            [
                (".zgroup", Kind::File),
                (".zmetadata", Kind::File),
                ("group0", Kind::Directory),
                ("tas", Kind::Directory)
            ]
        );
        let group = tree.lookup(store.ino, "group0").unwrap();
        let pr_dir = tree.lookup(group.ino, "pr").unwrap();
        let chunk = tree.lookup(pr_dir.ino, "0").unwrap();
        assert_eq!((chunk.kind, chunk.size), (Kind::File, 2));
        assert_eq!(tree.read(chunk.ino, at(0, 100)).unwrap(), b"pr");
        let tas = tree.lookup(store.ino, "tas").unwrap();
        let data = tree.lookup(tas.ino, "0.0.0").unwrap();
        assert_eq!(tree.read(data.ino, at(6, 3)).unwrap(), b"byt");
        assert_eq!(tree.read(data.ino, at(11, 10)).unwrap(), b"");
        // The same path is the same inode while the kernel holds it, and listings give it.
        assert_eq!(tree.lookup(ROOT, "a1.zarr").unwrap().ino, store.ino);
        assert_eq!(tree.lookup(tas.ino, "0.0.0").unwrap().ino, data.ino);
        let listed = list(&tree, tas.ino);
        assert_eq!(listed[1].ino, data.ino);
        assert_eq!(list(&tree, ROOT)[0].ino, store.ino);
    }

    #[test]
    fn inodes_go_when_the_kernel_forgets_them_and_come_back_when_looked_up() {
        let tree = Tree::new(Two);
        let before = tree.inodes();
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        let again = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(store.ino, again.ino);
        let tas = tree.lookup(store.ino, "tas").unwrap();
        let chunk = tree.lookup(tas.ino, "0.0.0").unwrap();
        tree.lookup(tas.ino, "0.0.0").unwrap();
        assert_eq!(tree.inodes(), before + 3);
        // One of the two lookups forgotten: it stays.
        tree.forget(chunk.ino, 1);
        assert_eq!(tree.read(chunk.ino, at(0, 5)).unwrap(), b"chunk");
        // Both: it goes, and its directory with it, then the store's lookups; the store's
        // current directory stays.
        tree.forget(chunk.ino, 1);
        assert_eq!(tree.read(chunk.ino, at(0, 5)), Err(libc::ENOENT));
        tree.forget(tas.ino, 1);
        tree.forget(store.ino, 2);
        assert_eq!(tree.inodes(), before + 1);
        // Looked up again, it comes back under a new inode.
        let back = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(back.ino, store.ino);
        let tas = tree.lookup(back.ino, "tas").unwrap();
        let chunk_again = tree.lookup(tas.ino, "0.0.0").unwrap();
        assert_ne!(chunk_again.ino, chunk.ino);
        assert_eq!(tree.read(chunk_again.ino, at(0, 5)).unwrap(), b"chunk");
        // Forgetting what the tree does not count is harmless.
        tree.forget(chunk_again.ino, 7);
        tree.forget(12345, 1);
        tree.forget(ROOT, 1);
        assert_eq!(tree.getattr(ROOT).unwrap().ino, ROOT);
    }

    /// Stores of `chunks` chunks of one array (`tas/<n>.0`), counting the entries and the
    /// pages asked of the listing.
    struct Counted {
        chunks: usize,
        entries: std::sync::atomic::AtomicUsize,
        pages: std::sync::atomic::AtomicUsize,
    }

    impl Counted {
        fn new(chunks: usize) -> Self {
            Counted {
                chunks,
                entries: 0.into(),
                pages: 0.into(),
            }
        }

        fn keys(&self) -> Vec<(String, u64)> {
            (0..self.chunks)
                .map(|n| (format!("tas/{n}.0"), 1))
                .collect()
        }

        fn counts(&self) -> (usize, usize) {
            let load =
                |n: &std::sync::atomic::AtomicUsize| n.load(std::sync::atomic::Ordering::SeqCst);
            (load(&self.entries), load(&self.pages))
        }
    }

    impl Backend for Counted {
        fn stores(&self, from: &str, most: usize) -> Result<StoresPage, i32> {
            Two.stores(from, most)
        }

        fn store(&self, token: &str) -> Option<StoreEntry> {
            Two.store(token)
        }

        fn entry(&self, _: &str, dir: &str, name: &str) -> Result<Option<Listed>, i32> {
            self.entries
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(entry_in(&self.keys(), dir, name))
        }

        fn entries(&self, _: &str, dir: &str, from: &str, most: usize) -> Result<ListedPage, i32> {
            self.pages.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(entries_in(&self.keys(), dir, from, most))
        }

        fn read(&self, _: &StoreEntry, _: &str, _: Read) -> Result<Vec<u8>, i32> {
            Ok(vec![0])
        }
    }

    #[test]
    fn a_lookup_reads_one_entry_of_the_listing_and_a_listing_makes_no_inodes() {
        let tree = Tree::new(Counted::new(10));
        let root = list(&tree, ROOT);
        assert_eq!(root.len(), 2);
        assert!(root.iter().all(|e| e.ino == UNKNOWN_INODE));
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(tree.backend.counts(), (0, 0));
        let tas = tree.lookup(store.ino, "tas").unwrap();
        tree.lookup(tas.ino, "3.0").unwrap();
        assert_eq!(tree.backend.counts(), (2, 0));
        // Held by the kernel: answered without the listing.
        tree.lookup(tas.ino, "3.0").unwrap();
        assert_eq!(tree.backend.counts(), (2, 0));
        let inodes = tree.inodes();
        let listed = list(&tree, tas.ino);
        assert_eq!(tree.backend.counts(), (2, 1));
        assert_eq!(listed.len(), 10);
        assert_eq!(tree.inodes(), inodes);
        assert_eq!(
            listed.iter().filter(|e| e.ino != UNKNOWN_INODE).count(),
            1,
            "only the entry looked up has an inode"
        );
    }

    #[test]
    fn a_name_looked_up_while_the_kernel_forgets_it_is_always_found() {
        let tree = Arc::new(Tree::new(Two));
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        let tas = tree.lookup(store.ino, "tas").unwrap();
        // Two threads look the same chunk up and forget it, as the kernel's evictions and
        // reads do on two FUSE threads: never "not found".
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let tree = Arc::clone(&tree);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let chunk = tree.lookup(tas.ino, "0.0.0").unwrap();
                        tree.forget(chunk.ino, 1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(tree.lookup(tas.ino, "0.0.0").unwrap().size, 11);
    }

    #[test]
    fn owners_and_permissions_follow_the_store() {
        let tree = Tree::new(Two);
        let private = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!((private.uid, private.perm), (1000, 0o500));
        let key = tree.lookup(private.ino, ".zgroup").unwrap();
        assert_eq!((key.uid, key.gid, key.perm), (1000, 100, 0o400));
        let public = tree.lookup(ROOT, "b2.zarr").unwrap();
        assert_eq!((public.uid, public.perm), (1001, 0o555));
        let key = tree.lookup(public.ino, ".zgroup").unwrap();
        assert_eq!(key.perm, 0o444);
    }

    /// A listing with keys that must not be shown.
    struct Odd;

    impl Odd {
        fn keys() -> Vec<(String, u64)> {
            ["../escape", "a/./b", "x", "x/y", "d/e", "d", "//z//"]
                .iter()
                .map(|k| ((*k).to_string(), 1))
                .collect()
        }
    }

    impl Backend for Odd {
        fn stores(&self, from: &str, most: usize) -> Result<StoresPage, i32> {
            page_of(self.store("o").into_iter().collect(), from, most)
        }

        fn store(&self, _token: &str) -> Option<StoreEntry> {
            Some(StoreEntry {
                token: "o".into(),
                uid: 0,
                gid: 0,
                public: true,
                generation: 1,
                modified: 0,
            })
        }

        fn entry(&self, _: &str, dir: &str, name: &str) -> Result<Option<Listed>, i32> {
            Ok(entry_in(&Odd::keys(), dir, name))
        }

        fn entries(&self, _: &str, dir: &str, from: &str, most: usize) -> Result<ListedPage, i32> {
            Ok(entries_in(&Odd::keys(), dir, from, most))
        }

        fn read(&self, _: &StoreEntry, _: &str, _: Read) -> Result<Vec<u8>, i32> {
            Ok(vec![0])
        }
    }

    #[test]
    fn keys_that_escape_or_clash_are_not_shown() {
        let tree = Tree::new(Odd);
        let store = tree.lookup(ROOT, "o.zarr").unwrap();
        // `x` and `d` are keys and directories: the keys; empty names, `.` and `..` are not
        // shown or found.
        assert_eq!(
            names(&list(&tree, store.ino)),
            [("a", Kind::Directory), ("d", Kind::File), ("x", Kind::File)]
        );
        let a = tree.lookup(store.ino, "a").unwrap();
        assert!(list(&tree, a.ino).is_empty());
        for (dir, name) in [
            (store.ino, ".."),
            (store.ino, ""),
            (a.ino, "."),
            (store.ino, "z"),
        ] {
            assert_eq!(tree.lookup(dir, name), Err(libc::ENOENT), "{name:?}");
        }
        let d = tree.lookup(store.ino, "d").unwrap();
        assert_eq!(tree.lookup(d.ino, "e"), Err(libc::ENOTDIR));
    }

    /// One store whose record changes: made public or private, converted again, removed.
    struct Changing(std::sync::Mutex<Option<StoreEntry>>);

    impl Backend for Changing {
        fn stores(&self, from: &str, most: usize) -> Result<StoresPage, i32> {
            page_of(
                self.0.lock().unwrap().clone().into_iter().collect(),
                from,
                most,
            )
        }

        fn store(&self, _token: &str) -> Option<StoreEntry> {
            self.0.lock().unwrap().clone()
        }

        fn entry(&self, _: &str, dir: &str, name: &str) -> Result<Option<Listed>, i32> {
            Ok(entry_in(&[("tas/0".to_string(), 3)], dir, name))
        }

        fn entries(&self, _: &str, dir: &str, from: &str, most: usize) -> Result<ListedPage, i32> {
            Ok(entries_in(&[("tas/0".to_string(), 3)], dir, from, most))
        }

        fn read(&self, store: &StoreEntry, _: &str, _: Read) -> Result<Vec<u8>, i32> {
            match self.store(&store.token) {
                None => Err(libc::ENOENT),
                Some(now) if now.generation != store.generation => Err(libc::ESTALE),
                Some(_) => Ok(b"abc".to_vec()),
            }
        }
    }

    #[test]
    fn the_current_record_decides_who_reads_and_which_conversion_is_shown() {
        let tree = Tree::new(Changing(std::sync::Mutex::new(Some(StoreEntry {
            token: "s".into(),
            uid: 1000,
            gid: 100,
            public: true,
            generation: 1,
            modified: 0,
        }))));
        let change =
            |f: &dyn Fn(&mut StoreEntry)| f(tree.backend.0.lock().unwrap().as_mut().unwrap());
        let store = tree.lookup(ROOT, "s.zarr").unwrap();
        let dir = tree.lookup(store.ino, "tas").unwrap();
        let key = tree.lookup(dir.ino, "0").unwrap();
        assert_eq!(tree.may_read(key.ino, 1001), Ok(()));
        assert_eq!(tree.may_read(dir.ino, 1001), Ok(()));
        // No longer public: another user is refused at open, whatever the kernel holds, and
        // the attributes say so.
        change(&|s| s.public = false);
        assert_eq!(tree.may_read(key.ino, 1001), Err(libc::EACCES));
        assert_eq!(tree.may_read(dir.ino, 1001), Err(libc::EACCES));
        assert_eq!(tree.may_read(key.ino, 1000), Ok(()));
        assert_eq!(tree.may_read(key.ino, 0), Ok(()));
        assert_eq!(tree.getattr(key.ino).unwrap().perm, 0o400);
        // Converted again: the old inodes are stale, the name leads to new ones.
        change(&|s| s.generation = 2);
        assert_eq!(tree.read(key.ino, at(0, 3)), Err(libc::ESTALE));
        assert_eq!(tree.getattr(key.ino), Err(libc::ESTALE));
        assert_eq!(tree.readdir(dir.ino, ""), Err(libc::ESTALE));
        assert_eq!(tree.lookup(store.ino, "tas"), Err(libc::ESTALE));
        let again = tree.lookup(ROOT, "s.zarr").unwrap();
        assert_ne!(again.ino, store.ino);
        let dir = tree.lookup(again.ino, "tas").unwrap();
        let fresh = tree.lookup(dir.ino, "0").unwrap();
        assert_ne!(fresh.ino, key.ino);
        assert_eq!(tree.read(fresh.ino, at(0, 3)).unwrap(), b"abc");
        // Removed: its name and inodes lead nowhere.
        *tree.backend.0.lock().unwrap() = None;
        assert_eq!(tree.lookup(ROOT, "s.zarr"), Err(libc::ENOENT));
        assert_eq!(tree.read(fresh.ino, at(0, 3)), Err(libc::ENOENT));
        assert!(list(&tree, ROOT).is_empty());
    }

    #[test]
    fn what_is_not_there_is_an_errno() {
        let tree = Tree::new(Two);
        assert_eq!(tree.lookup(ROOT, "c3.zarr"), Err(libc::ENOENT));
        assert_eq!(tree.lookup(ROOT, "a1"), Err(libc::ENOENT));
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(tree.lookup(store.ino, "nope"), Err(libc::ENOENT));
        let key = tree.lookup(store.ino, ".zgroup").unwrap();
        assert_eq!(tree.lookup(key.ino, "x"), Err(libc::ENOTDIR));
        assert_eq!(tree.readdir(key.ino, ""), Err(libc::ENOTDIR));
        assert_eq!(tree.read(store.ino, at(0, 1)), Err(libc::EISDIR));
        assert_eq!(tree.getattr(9999), Err(libc::ENOENT));
        assert_eq!(tree.getattr(0), Err(libc::ENOENT));
        assert_eq!(tree.readdir(9999, ""), Err(libc::ENOENT));
    }

    #[test]
    fn a_large_directory_is_listed_a_page_at_a_time_and_lookups_follow_the_kernel() {
        let keys = 2 * READDIR_MOST + 10;
        let tree = Tree::new(Counted::new(keys));
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        let tas = tree.lookup(store.ino, "tas").unwrap();
        let inodes = tree.inodes();
        let listed: Vec<String> = list(&tree, tas.ino).into_iter().map(|e| e.name).collect();
        let mut expected: Vec<String> = (0..keys).map(|n| format!("{n}.0")).collect();
        expected.sort();
        assert_eq!(listed, expected);
        assert_eq!(tree.backend.counts().1, 3, "three pages");
        assert_eq!(tree.inodes(), inodes);
        // Every chunk looked up, then forgotten: the tree is back to what it was.
        let looked: Vec<u64> = expected
            .iter()
            .map(|name| tree.lookup(tas.ino, name).unwrap().ino)
            .collect();
        assert_eq!(tree.inodes(), inodes + keys);
        for ino in looked {
            tree.forget(ino, 1);
        }
        assert_eq!(tree.inodes(), inodes);
    }
}
