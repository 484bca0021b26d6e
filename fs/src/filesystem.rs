//! The tree the mount shows: `/<token>.zarr/<key>`, as the HTTP layout names keys, with the
//! directories that key prefixes make (`tas/`, `group0/tas/`). Pure and testable without a
//! mount: what stores exist, their keys and sizes, and their bytes come from a [`Backend`]
//! (the daemon's store records, key listings and read path); the FUSE adapter turns each
//! callback into one call here and an errno out.
//!
//! Inodes: 1 is the root; a store's directory gets one when it is first listed or looked up,
//! and everything below it the first time something inside it is, all at once from its key
//! listing. Listing the root reads no store's keys. An inode number is never reused while
//! the tree lives, so the kernel's cached entries stay right. When the kernel forgets a
//! store's directory (it has let go of everything below it first: its entries hold their
//! parents), the tree drops what it made below it ([`Tree::forget`]): a mount's memory
//! follows the stores in use, not every key ever listed.
//!
//! A store is looked up afresh by name each time (the kernel asks again once its entry's
//! time is up): one that is gone or not ready is not there. A store converted again is a
//! new generation: its name then leads to a new directory inode and new key inodes, and the
//! old ones answer `ESTALE` (so no cache holds the old bytes under the new name).
//!
//! Permissions: a store and its keys belong to the store owner's uid; a private store is
//! `0500`/`0400`, a public one `0555`/`0444`, from the store's current record, and the kernel
//! enforces them (`default_permissions`). As the kernel may hold attributes for a few
//! seconds, opening a key checks the caller against the current record too
//! ([`Tree::may_read`]): a store no longer public is not read by others. The root is `0711`:
//! a user reaches a store by its name, and does not list the others' stores. The tree is
//! read-only.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// The root directory's inode.
pub const ROOT: u64 = 1;

/// What the tree needs of the daemon.
pub trait Backend: Send + Sync {
    /// The stores the mount shows now (ready ones).
    fn stores(&self) -> Vec<StoreEntry>;

    /// Store `token` now, if it is ready.
    fn store(&self, token: &str) -> Option<StoreEntry>;

    /// Every key of store `token` with its size in bytes, or `None` when it no longer
    /// exists.
    fn keys(&self, token: &str) -> Option<Vec<(String, u64)>>;

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
    /// A store's directory (`<token>.zarr`) or a directory below it.
    Directory {
        store: StoreEntry,
    },
    /// A key.
    File {
        store: StoreEntry,
        key: String,
        size: u64,
    },
}

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
    /// How many lookups of each store directory the kernel holds (it forgets them in turn).
    lookups: HashMap<u64, u64>,
    /// Children of each directory inode by name, in name order.
    children: HashMap<u64, BTreeMap<String, u64>>,
    /// The directory inode of the current generation of each store met, by token.
    stores: HashMap<String, u64>,
    /// The latest record of each store met, by token: its owner and permissions now.
    current: HashMap<String, StoreEntry>,
    /// The store directories whose keys are in the tree.
    loaded: HashSet<u64>,
    /// The entries of directories inside stores, in name order, as `readdir` pages through
    /// them: made at the first `readdir` of each, as they never change while loaded.
    listings: HashMap<u64, Arc<[(String, u64)]>>,
}

/// The most entries one `readdir` call gives: the kernel asks for a page at a time, and a
/// call's work stays bounded in a directory of a million chunks.
pub const READDIR_MOST: usize = 4096;

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

    /// The entry `name` of directory `parent`.
    ///
    /// # Errors
    /// `ENOENT` when there is none, `ENOTDIR` when `parent` is a file, `ESTALE` inside a
    /// store converted again since.
    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr, i32> {
        if parent == ROOT {
            let token = name.strip_suffix(".zarr").ok_or(libc::ENOENT)?;
            let ino = self.store(token)?;
            let attr = self.getattr(ino)?;
            // The kernel holds this entry until it forgets it.
            *self.write_inodes().lookups.entry(ino).or_default() += 1;
            return Ok(attr);
        }
        self.load(parent)?;
        let inodes = self.read_inodes();
        let ino = *inodes
            .children
            .get(&parent)
            .and_then(|children| children.get(name))
            .ok_or(libc::ENOENT)?;
        inodes.attr(ino)
    }

    /// The attributes of inode `ino`, with its store's current owner and permissions.
    ///
    /// # Errors
    /// `ENOENT` for an inode the tree never gave or a store gone, `ESTALE` for an inode of
    /// an earlier conversion.
    pub fn getattr(&self, ino: u64) -> Result<Attr, i32> {
        let snapshot = match self.read_inodes().node(ino)? {
            Node::Root => None,
            Node::Directory { store } | Node::File { store, .. } => Some(store.clone()),
        };
        if let Some(store) = snapshot {
            self.current(&store)?;
        }
        self.read_inodes().attr(ino)
    }

    /// The entries of directory `ino` (without `.` and `..`) in name order, from the `from`th
    /// on, at most [`READDIR_MOST`] of them.
    ///
    /// # Errors
    /// `ENOENT` for an unknown inode, `ENOTDIR` for a file.
    pub fn readdir(&self, ino: u64, from: usize) -> Result<Vec<(String, Attr)>, i32> {
        if ino == ROOT {
            let mut stores = self.backend.stores();
            stores.sort_by(|a, b| a.token.cmp(&b.token));
            return stores
                .iter()
                .skip(from)
                .take(READDIR_MOST)
                .map(|entry| {
                    let ino = self.store_dir(entry);
                    Ok((format!("{}.zarr", entry.token), self.getattr(ino)?))
                })
                .collect();
        }
        self.load(ino)?;
        let listing = self.listing(ino)?;
        let inodes = self.read_inodes();
        listing
            .iter()
            .skip(from)
            .take(READDIR_MOST)
            .map(|(name, child)| Ok((name.clone(), inodes.attr(*child)?)))
            .collect()
    }

    /// The entries of the loaded directory `ino`, in name order (see [`Inodes::listings`]).
    fn listing(&self, ino: u64) -> Result<Arc<[(String, u64)]>, i32> {
        if let Some(listing) = self.read_inodes().listings.get(&ino) {
            return Ok(Arc::clone(listing));
        }
        let mut inodes = self.write_inodes();
        let Node::Directory { store } = inodes.node(ino)? else {
            return Err(libc::ENOTDIR);
        };
        // Kept only while the store's keys are loaded (unloading drops it).
        let loaded = inodes
            .stores
            .get(&store.token)
            .is_some_and(|root| inodes.loaded.contains(root));
        let listing: Arc<[(String, u64)]> = inodes
            .children
            .get(&ino)
            .into_iter()
            .flatten()
            .map(|(name, child)| (name.clone(), *child))
            .collect();
        if loaded {
            inodes.listings.insert(ino, Arc::clone(&listing));
        }
        Ok(listing)
    }

    /// The bytes of file `ino` that `read` asks for.
    ///
    /// # Errors
    /// `ENOENT` for an unknown inode or a store gone, `ESTALE` for a key of an earlier
    /// conversion, `EISDIR` for a directory, the backend's errno.
    pub fn read(&self, ino: u64, read: Read) -> Result<Vec<u8>, i32> {
        let Read { offset, len, .. } = read;
        let (store, key, size) = match self.read_inodes().node(ino)? {
            Node::File { store, key, size } => (store.clone(), key.clone(), *size),
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

    /// Whether the local user `uid` may read inode `ino` now: root and the store's owner
    /// always, anyone while it is public (from its current record, whatever the kernel
    /// holds).
    ///
    /// # Errors
    /// `EACCES` for another user of a private store, `ENOENT` for a store gone, `ESTALE` for
    /// an inode of an earlier conversion.
    pub fn may_read(&self, ino: u64, uid: u32) -> Result<(), i32> {
        let store = match self.read_inodes().node(ino)? {
            Node::Root => return Ok(()),
            Node::Directory { store } | Node::File { store, .. } => store.clone(),
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
            Node::File { store, key, .. } => (store.clone(), key.clone()),
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

    /// The kernel forgets `lookups` lookups of `ino`. A store directory it no longer holds
    /// has nothing below it in use (the kernel's entries hold their parents), so what was
    /// made below it goes; the directory itself too, unless it is the store's current one.
    /// Other inodes live as long as their store's directory.
    pub fn forget(&self, ino: u64, lookups: u64) {
        let mut inodes = self.write_inodes();
        let Some(held) = inodes.lookups.get_mut(&ino) else {
            return;
        };
        *held = held.saturating_sub(lookups);
        if *held == 0 {
            inodes.lookups.remove(&ino);
            inodes.unload(ino);
        }
    }

    /// The number of inodes the tree holds (the root included).
    pub fn inodes(&self) -> usize {
        self.read_inodes().nodes.len()
    }

    /// Whether `ino` is inside a store (a key or a directory below a store's directory),
    /// not the root or a store's directory.
    pub fn inside_store(&self, ino: u64) -> bool {
        let inodes = self.read_inodes();
        match inodes.node(ino) {
            Ok(Node::File { .. }) => true,
            Ok(Node::Directory { store }) => inodes.stores.get(&store.token) != Some(&ino),
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
        self.write_inodes()
            .current
            .insert(now.token.clone(), now.clone());
        Ok(now)
    }

    /// The inode of store `token` now (its directory; its keys are loaded on first use).
    fn store(&self, token: &str) -> Result<u64, i32> {
        match self.backend.store(token) {
            // A store has one name: its token as the backend spells it (not another spelling
            // the same UUID parses from).
            Some(entry) if entry.token == token => Ok(self.store_dir(&entry)),
            Some(_) => Err(libc::ENOENT),
            None => {
                // Gone or not ready: its name leads nowhere.
                let mut inodes = self.write_inodes();
                if inodes.stores.remove(token).is_some()
                    && let Some(children) = inodes.children.get_mut(&ROOT)
                {
                    children.remove(&format!("{token}.zarr"));
                }
                Err(libc::ENOENT)
            }
        }
    }

    /// The directory inode of the store `entry` (its current record), made for each new
    /// generation.
    fn store_dir(&self, entry: &StoreEntry) -> u64 {
        let mut inodes = self.write_inodes();
        inodes.current.insert(entry.token.clone(), entry.clone());
        if let Some(&ino) = inodes.stores.get(&entry.token)
            && matches!(inodes.node(ino), Ok(Node::Directory { store }) if store.generation == entry.generation)
        {
            return ino;
        }
        let ino = inodes.add(
            ROOT,
            &format!("{}.zarr", entry.token),
            Node::Directory {
                store: entry.clone(),
            },
        );
        inodes.stores.insert(entry.token.clone(), ino);
        ino
    }

    /// Makes the subtree of the store that directory `ino` belongs to from its key listing,
    /// the first time (a ready store is immutable).
    fn load(&self, ino: u64) -> Result<(), i32> {
        let store = match self.read_inodes().node(ino)? {
            Node::Directory { store } => store.clone(),
            Node::File { .. } => return Err(libc::ENOTDIR),
            Node::Root => return Ok(()),
        };
        let root = {
            let inodes = self.read_inodes();
            let Some(&root) = inodes.stores.get(&store.token) else {
                return Err(libc::ENOENT);
            };
            if inodes.loaded.contains(&root) {
                return Ok(());
            }
            root
        };
        // Listed only while it is still this conversion, before and after the listing.
        self.current(&store)?;
        let keys = self.backend.keys(&store.token).ok_or(libc::ENOENT)?;
        self.current(&store)?;
        let mut inodes = self.write_inodes();
        if inodes.stores.get(&store.token) != Some(&root) {
            return Err(libc::ESTALE);
        }
        if !inodes.loaded.insert(root) {
            return Ok(());
        }
        for (key, size) in keys {
            let mut parent = root;
            let parts: Vec<&str> = key.split('/').filter(|p| !p.is_empty()).collect();
            // A listing's keys are the store's files; one that names `.` or `..` (or is a
            // directory and a file at once) is not shown rather than shown somewhere else.
            if parts.iter().any(|p| *p == "." || *p == "..") {
                continue;
            }
            let Some((file, directories)) = parts.split_last() else {
                continue;
            };
            let mut clash = false;
            for directory in directories {
                parent = match inodes.children.get(&parent).and_then(|c| c.get(*directory)) {
                    Some(ino) if matches!(inodes.node(*ino), Ok(Node::Directory { .. })) => *ino,
                    Some(_) => {
                        clash = true;
                        break;
                    }
                    None => inodes.add(
                        parent,
                        directory,
                        Node::Directory {
                            store: store.clone(),
                        },
                    ),
                };
            }
            let taken = inodes
                .children
                .get(&parent)
                .is_some_and(|c| c.contains_key(*file));
            if clash || taken {
                continue;
            }
            inodes.add(
                parent,
                file,
                Node::File {
                    store: store.clone(),
                    key: key.clone(),
                    size,
                },
            );
        }
        Ok(())
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

    /// Drops everything below the store directory `dir`, and `dir` itself unless it is its
    /// store's current directory (which then loads its keys again when next entered).
    fn unload(&mut self, dir: u64) {
        let mut below: Vec<u64> = self
            .children
            .remove(&dir)
            .map(|children| children.into_values().collect())
            .unwrap_or_default();
        while let Some(ino) = below.pop() {
            if let Some(children) = self.children.remove(&ino) {
                below.extend(children.into_values());
            }
            self.listings.remove(&ino);
            self.nodes.remove(&ino);
        }
        self.listings.remove(&dir);
        self.loaded.remove(&dir);
        let current = matches!(self.nodes.get(&dir), Some(Node::Directory { store })
            if self.stores.get(&store.token) == Some(&dir));
        if !current {
            self.nodes.remove(&dir);
        }
    }

    /// Adds `node` as `name` in directory `parent`; its inode.
    fn add(&mut self, parent: u64, name: &str, node: Node) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, node);
        self.children
            .entry(parent)
            .or_default()
            .insert(name.to_string(), ino);
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
            Node::Directory { store, .. } => (Kind::Directory, 0, store),
            Node::File { store, size, .. } => (Kind::File, *size, store),
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

    impl Backend for Two {
        fn stores(&self) -> Vec<StoreEntry> {
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

        fn store(&self, token: &str) -> Option<StoreEntry> {
            self.stores().into_iter().find(|s| s.token == token)
        }

        fn keys(&self, token: &str) -> Option<Vec<(String, u64)>> {
            (token == "a1" || token == "b2").then(|| {
                KEYS.iter()
                    .map(|(k, v)| ((*k).to_string(), v.len() as u64))
                    .collect()
            })
        }

        fn read(&self, _: &StoreEntry, key: &str, read: Read) -> Result<Vec<u8>, i32> {
            let (_, value) = KEYS.iter().find(|(k, _)| *k == key).ok_or(libc::ENOENT)?;
            let start = usize::try_from(read.offset).unwrap().min(value.len());
            let end = (start + read.len as usize).min(value.len());
            Ok(value.as_bytes()[start..end].to_vec())
        }
    }

    #[test]
    fn stores_are_directories_of_their_keys() {
        let tree = Tree::new(Two);
        let root = tree.readdir(ROOT, 0).unwrap();
        let names: Vec<&str> = root.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a1.zarr", "b2.zarr"]);
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(store.kind, Kind::Directory);
        let entries: Vec<String> = tree
            .readdir(store.ino, 0)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(entries, [".zgroup", ".zmetadata", "group0", "tas"]);
        let group = tree.lookup(store.ino, "group0").unwrap();
        let pr_dir = tree.lookup(group.ino, "pr").unwrap();
        let chunk = tree.lookup(pr_dir.ino, "0").unwrap();
        assert_eq!((chunk.kind, chunk.size), (Kind::File, 2));
        assert_eq!(tree.read(chunk.ino, at(0, 100)).unwrap(), b"pr");
        let tas = tree.lookup(store.ino, "tas").unwrap();
        let data = tree.lookup(tas.ino, "0.0.0").unwrap();
        assert_eq!(tree.read(data.ino, at(6, 3)).unwrap(), b"byt");
        assert_eq!(tree.read(data.ino, at(11, 10)).unwrap(), b"");
        // The same path is the same inode, also after a fresh lookup.
        assert_eq!(tree.lookup(ROOT, "a1.zarr").unwrap().ino, store.ino);
    }

    #[test]
    fn a_forgotten_store_leaves_the_tree_and_comes_back_when_looked_up() {
        let tree = Tree::new(Two);
        let before = tree.inodes();
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        let again = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(store.ino, again.ino);
        let tas = tree.lookup(store.ino, "tas").unwrap();
        let chunk = tree.lookup(tas.ino, "0.0.0").unwrap();
        assert!(tree.inodes() > before + 3);
        // One of the two lookups forgotten: everything stays.
        tree.forget(store.ino, 1);
        assert_eq!(tree.read(chunk.ino, at(0, 5)).unwrap(), b"chunk");
        // Both: what was made below the store goes; the store's directory stays.
        tree.forget(store.ino, 1);
        assert_eq!(tree.inodes(), before + 1);
        assert_eq!(tree.read(chunk.ino, at(0, 5)), Err(libc::ENOENT));
        // Looked up again, its keys come back under new inodes.
        let back = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(back.ino, store.ino);
        let tas = tree.lookup(back.ino, "tas").unwrap();
        let chunk_again = tree.lookup(tas.ino, "0.0.0").unwrap();
        assert_ne!(chunk_again.ino, chunk.ino);
        assert_eq!(tree.read(chunk_again.ino, at(0, 5)).unwrap(), b"chunk");
        // Forgetting what the tree does not count is harmless.
        tree.forget(chunk_again.ino, 7);
        tree.forget(12345, 1);
        assert_eq!(tree.read(chunk_again.ino, at(0, 5)).unwrap(), b"chunk");
    }

    /// [`Two`], counting the key listings asked for; with `chunks`, each store holds that
    /// many chunks of one array instead.
    struct Counted(std::sync::atomic::AtomicUsize, Option<usize>);

    impl Backend for Counted {
        fn stores(&self) -> Vec<StoreEntry> {
            Two.stores()
        }

        fn store(&self, token: &str) -> Option<StoreEntry> {
            Two.store(token)
        }

        fn keys(&self, token: &str) -> Option<Vec<(String, u64)>> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match self.1 {
                Some(chunks) => Some((0..chunks).map(|n| (format!("tas/{n}.0"), 1)).collect()),
                None => Two.keys(token),
            }
        }

        fn read(&self, store: &StoreEntry, key: &str, read: Read) -> Result<Vec<u8>, i32> {
            Two.read(store, key, read)
        }
    }

    #[test]
    fn a_store_keys_are_listed_once_and_only_when_it_is_entered() {
        let tree = Tree::new(Counted(std::sync::atomic::AtomicUsize::new(0), None));
        let listed = || tree.backend.0.load(std::sync::atomic::Ordering::SeqCst);
        let root = tree.readdir(ROOT, 0).unwrap();
        assert_eq!((root.len(), listed()), (2, 0));
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        assert_eq!(store.ino, root[0].1.ino);
        assert_eq!(listed(), 0);
        tree.readdir(store.ino, 0).unwrap();
        tree.lookup(store.ino, "tas").unwrap();
        assert_eq!(listed(), 1);
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

    impl Backend for Odd {
        fn stores(&self) -> Vec<StoreEntry> {
            vec![StoreEntry {
                token: "o".into(),
                uid: 0,
                gid: 0,
                public: true,
                generation: 1,
                modified: 0,
            }]
        }

        fn store(&self, _token: &str) -> Option<StoreEntry> {
            self.stores().pop()
        }

        fn keys(&self, _token: &str) -> Option<Vec<(String, u64)>> {
            Some(
                ["../escape", "a/./b", "x", "x/y", "d/e", "d", "//z//"]
                    .iter()
                    .map(|k| ((*k).to_string(), 1))
                    .collect(),
            )
        }

        fn read(&self, _: &StoreEntry, _: &str, _: Read) -> Result<Vec<u8>, i32> {
            Ok(vec![0])
        }
    }

    #[test]
    fn keys_that_escape_or_clash_are_not_shown() {
        let tree = Tree::new(Odd);
        let store = tree.lookup(ROOT, "o.zarr").unwrap();
        let names: Vec<(String, Kind)> = tree
            .readdir(store.ino, 0)
            .unwrap()
            .into_iter()
            .map(|(n, a)| (n, a.kind))
            .collect();
        // `x` stays the file it was listed as first, `d` the directory, `//z//` is `z`.
        assert_eq!(
            names,
            [
                ("d".to_string(), Kind::Directory),
                ("x".to_string(), Kind::File),
                ("z".to_string(), Kind::File),
            ]
        );
    }

    /// One store whose record changes: made public or private, converted again, removed.
    struct Changing(std::sync::Mutex<Option<StoreEntry>>);

    impl Backend for Changing {
        fn stores(&self) -> Vec<StoreEntry> {
            self.0.lock().unwrap().clone().into_iter().collect()
        }

        fn store(&self, _token: &str) -> Option<StoreEntry> {
            self.0.lock().unwrap().clone()
        }

        fn keys(&self, _token: &str) -> Option<Vec<(String, u64)>> {
            Some(vec![("tas/0".to_string(), 3)])
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
        // No longer public: another user is refused at open, whatever the kernel holds, and
        // the attributes say so.
        change(&|s| s.public = false);
        assert_eq!(tree.may_read(key.ino, 1001), Err(libc::EACCES));
        assert_eq!(tree.may_read(key.ino, 1000), Ok(()));
        assert_eq!(tree.may_read(key.ino, 0), Ok(()));
        assert_eq!(tree.getattr(key.ino).unwrap().perm, 0o400);
        // Converted again: the old inodes are stale, the name leads to new ones.
        change(&|s| s.generation = 2);
        assert_eq!(tree.read(key.ino, at(0, 3)), Err(libc::ESTALE));
        assert_eq!(tree.getattr(key.ino), Err(libc::ESTALE));
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
        assert!(tree.readdir(ROOT, 0).unwrap().is_empty());
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
        assert_eq!(tree.readdir(key.ino, 0), Err(libc::ENOTDIR));
        assert_eq!(tree.read(store.ino, at(0, 1)), Err(libc::EISDIR));
        assert_eq!(tree.getattr(9999), Err(libc::ENOENT));
        assert_eq!(tree.getattr(0), Err(libc::ENOENT));
    }

    #[test]
    fn a_large_directory_is_listed_a_page_at_a_time_in_name_order() {
        let keys = 2 * READDIR_MOST + 10;
        let tree = Tree::new(Counted(std::sync::atomic::AtomicUsize::new(0), Some(keys)));
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        let tas = tree.lookup(store.ino, "tas").unwrap();
        let mut listed = Vec::new();
        loop {
            let page = tree.readdir(tas.ino, listed.len()).unwrap();
            assert!(page.len() <= READDIR_MOST);
            if page.is_empty() {
                break;
            }
            listed.extend(page.into_iter().map(|(name, _)| name));
        }
        let mut expected: Vec<String> = (0..keys).map(|n| format!("{n}.0")).collect();
        expected.sort();
        assert_eq!(listed, expected);
        assert!(tree.readdir(tas.ino, usize::MAX).unwrap().is_empty());
        // Forgotten and entered again, the directory lists its new inodes.
        tree.forget(store.ino, 1);
        let store = tree.lookup(ROOT, "a1.zarr").unwrap();
        let again = tree.lookup(store.ino, "tas").unwrap();
        assert_ne!(again.ino, tas.ino);
        let first = tree.readdir(again.ino, 0).unwrap();
        assert_eq!(first[0].0, expected[0]);
        assert_eq!(
            first[0].1.ino,
            tree.lookup(again.ino, &expected[0]).unwrap().ino
        );
        assert_eq!(tree.readdir(tas.ino, 0), Err(libc::ENOENT));
    }
}
