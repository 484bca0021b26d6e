//! The fuser adapter: each FUSE callback is one call into the [`Tree`], and an errno out.
//! Read-only: opening for writing is `EROFS`.
//!
//! Passthrough: when the kernel offers it (Linux 6.9+) and the daemon may use it (it needs
//! CAP_SYS_ADMIN to register a backing file), opening a chunk whose hot copy exists hands
//! that file to the kernel, which then reads it as it reads a local file, without a round
//! trip through the daemon. Everything else (metadata documents, archived chunks, a kernel
//! or daemon without passthrough) is read through the daemon. An open file keeps the bytes
//! it was opened with: archiving unlinks the hot copy, which the open file still reads.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, Request,
};

use svc_daemon::FairPool;

use crate::filesystem::{Attr, Backend, DirEntry, Kind, ROOT, Read, Tree};

/// How long the kernel keeps the entry and attributes of a store's directory: the store may
/// be converted again (its name then leads to a new directory inode, and everything below
/// is looked up afresh under it) or become public or private.
const STORE_TTL: Duration = Duration::from_secs(5);

/// How long it keeps those of what is inside a store: a conversion's keys never change. Its
/// permissions may (a store made private is still refused at once, as opening checks the
/// current record; one made public is readable by others once this has passed).
const KEY_TTL: Duration = Duration::from_secs(60);

/// How long it keeps the root's: stores appear and go.
const ROOT_TTL: Duration = Duration::from_secs(1);

/// The mount's filesystem over the tree of `B`.
pub struct Fuse<B> {
    tree: Arc<Tree<B>>,
    /// Run the reads answered through the daemon, off the FUSE threads (which answer every
    /// user's lookups and opens, so must never wait for I/O), by the uid of the reader:
    /// first without waiting, and a read that would wait (for a restore from the cold tier)
    /// again on the threads of reads that wait.
    readers: FairPool<u32>,
    waiting: Arc<FairPool<u32>>,
    /// Whether opens may hand hot files to the kernel: asked for, offered by the kernel at
    /// init, and not refused since.
    passthrough: AtomicBool,
    /// The backing files registered with the kernel.
    backing: Mutex<Backing>,
    /// The next file handle of a passthrough open (0 is every other open's) or of an open
    /// directory.
    next_handle: AtomicU64,
    /// Where each open directory's listing stands, by handle.
    listings: Mutex<HashMap<u64, Arc<Mutex<Listing>>>>,
}

/// Where the listing of an open directory stands: the page of entries the kernel reads now
/// (the directory's entries from position `start` on), and the tree's position after it.
/// The kernel asks for a few dozen entries at a time, from the offset of the last it took;
/// a page serves many such calls, and the next page is read from where this one ended, so
/// listing a directory of a million chunks reads each entry once.
struct Listing {
    start: usize,
    page: Vec<DirEntry>,
    /// `None`: the page is the directory's last.
    next: Option<String>,
}

impl Listing {
    /// Before the first page.
    fn new() -> Self {
        Listing {
            start: 0,
            page: Vec::new(),
            next: Some(String::new()),
        }
    }
}

/// The open handles of the mount's files. The kernel wants one backing file per inode while
/// any handle of it is open, so a second open reuses the first's.
#[derive(Default)]
struct Backing {
    /// Backing files by open (passthrough) handle.
    by_handle: HashMap<u64, Arc<BackingId>>,
    /// Backing files by inode, while a handle holds them.
    by_inode: HashMap<u64, Weak<BackingId>>,
    /// Handles read through the daemon, by inode.
    cached: HashMap<u64, usize>,
}

/// Threads that answer reads through the daemon that wait for their bytes (a restore), and
/// how many of them one local user's reads may hold: such a read holds its thread up to
/// `mount.read_timeout_seconds`, so one user's job reading thousands of archived chunks must
/// not hold them all, each other user's reads taking their turn behind it.
const READERS: usize = 32;
const READERS_PER_USER: usize = READERS / 2;

/// Threads that answer reads through the daemon from the hot tier (users in turn too).
const HOT_READERS: usize = 16;

/// Background requests (reads, readahead, releases) the kernel may have outstanding.
const MAX_BACKGROUND: u16 = 64;

impl<B: Backend + 'static> Fuse<B> {
    /// How long the kernel may keep the entry and attributes of `ino`.
    fn ttl(&self, ino: u64) -> Duration {
        if ino == ROOT {
            ROOT_TTL
        } else if self.tree.inside_store(ino) {
            KEY_TTL
        } else {
            STORE_TTL
        }
    }

    /// The filesystem of the stores `backend` gives; `passthrough` asks for passthrough of
    /// hot chunks where the kernel and the daemon's privileges allow it.
    pub fn new(backend: B, passthrough: bool) -> Self {
        Fuse {
            tree: Arc::new(Tree::new(backend)),
            readers: FairPool::new("mount-read", HOT_READERS, HOT_READERS),
            waiting: Arc::new(FairPool::new("mount-wait", READERS, READERS_PER_USER)),
            passthrough: AtomicBool::new(passthrough),
            backing: Mutex::default(),
            next_handle: AtomicU64::new(1),
            listings: Mutex::default(),
        }
    }

    /// Opens `ino` (for reading, access checked): with its hot copy as the kernel's backing
    /// file when it has one and passthrough works, else read through the daemon.
    ///
    /// The kernel refuses (EIO) to have one inode open both ways at once, so the mode of an
    /// inode's open handles decides a new handle's: an inode opened through the daemon
    /// (its chunk was archived then) stays so until its last such handle is released, and
    /// one with a backing file keeps it (its bytes stay readable even after archiving
    /// unlinked the hot copy).
    fn open_file(&self, ino: u64, reply: ReplyOpen) {
        let backing = self.backing.lock().unwrap_or_else(|e| e.into_inner());
        let (mut backing, id) = match backing.by_inode.get(&ino).and_then(Weak::upgrade) {
            Some(id) => (backing, id),
            None => match self.choose(ino, backing, &reply) {
                (backing, Ok(id)) => (backing, id),
                (mut backing, Err(hot)) => {
                    *backing.cached.entry(ino).or_default() += 1;
                    // Stores are immutable: the kernel may keep what it read of a hot key or
                    // a document. A chunk without a hot copy (archived) is read directly,
                    // past the page cache: a read waiting for its restore is then one
                    // request the daemon bounds by `read_timeout_seconds`, where a failed
                    // readahead would be asked again. (Mapping it still works: the mount
                    // asks for `FUSE_DIRECT_IO_ALLOW_MMAP`; and its open keeps what other
                    // handles cached.)
                    let flags = if hot || self.tree.is_document(ino) {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_KEEP_CACHE
                    };
                    return reply.opened(FileHandle(0), flags);
                }
            },
        };
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        backing.by_handle.insert(handle, Arc::clone(&id));
        reply.opened_passthrough(FileHandle(handle), FopenFlags::empty(), &id);
    }

    /// How an open of `ino`, which has no backing file now, reads: through a backing file
    /// registered now (its id), or through the daemon (`Err`, with whether the key has a hot
    /// copy). The hot copy is opened and registered without the lock, which every open and
    /// release of the mount takes; another open of the inode may have chosen meanwhile, and
    /// its choice stands (ours, if any, is closed as it drops).
    fn choose<'a>(
        &'a self,
        ino: u64,
        backing: std::sync::MutexGuard<'a, Backing>,
        reply: &ReplyOpen,
    ) -> (
        std::sync::MutexGuard<'a, Backing>,
        Result<Arc<BackingId>, bool>,
    ) {
        let through_daemon =
            !self.passthrough.load(Ordering::Relaxed) || backing.cached.contains_key(&ino);
        drop(backing);
        let hot = self.tree.hot_file(ino);
        let registered = match &hot {
            Some(file) if !through_daemon => self.register(file, reply),
            _ => None,
        };
        let mut backing = self.backing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = backing.by_inode.get(&ino).and_then(Weak::upgrade) {
            return (backing, Ok(id));
        }
        match registered {
            Some(id) if !backing.cached.contains_key(&ino) => {
                let id = Arc::new(id);
                backing.by_inode.insert(ino, Arc::downgrade(&id));
                (backing, Ok(id))
            }
            _ => (backing, Err(hot.is_some())),
        }
    }

    /// The hot copy `file` registered with the kernel as a backing file; `None` when the
    /// kernel refuses it (for good when passthrough is not permitted or not supported, else
    /// for this open).
    fn register(&self, file: &std::fs::File, reply: &ReplyOpen) -> Option<BackingId> {
        reply
            .open_backing(file)
            .inspect_err(|e| {
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL)
                ) {
                    tracing::warn!(error = %e, "the kernel refuses passthrough; the mount reads through the daemon");
                    self.passthrough.store(false, Ordering::Relaxed);
                } else {
                    tracing::warn!(error = %e, "cannot register a backing file; this open reads through the daemon");
                }
            })
            .ok()
    }
}

/// The FUSE file type of `kind`.
fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Directory => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}

fn file_attr(attr: &Attr) -> FileAttr {
    let directory = attr.kind == Kind::Directory;
    let modified = UNIX_EPOCH + Duration::from_secs(u64::try_from(attr.modified).unwrap_or(0));
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: modified,
        mtime: modified,
        ctime: modified,
        crtime: modified,
        kind: file_type(attr.kind),
        perm: attr.perm,
        nlink: if directory { 2 } else { 1 },
        uid: attr.uid,
        gid: attr.gid,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

fn errno(code: i32) -> Errno {
    Errno::from_i32(code)
}

impl<B: Backend + 'static> Filesystem for Fuse<B> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Chunks opened while archived are read past the page cache (`FOPEN_DIRECT_IO`); this
        // lets programs map them all the same (Linux 6.6+; older kernels refuse such maps).
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        if *self.passthrough.get_mut() {
            let offered = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !offered {
                tracing::info!(
                    "the kernel offers no FUSE passthrough; the mount reads through the daemon"
                );
            }
            *self.passthrough.get_mut() = offered;
        }
        // The kernel sends at most this many reads and releases at once in the background
        // (readahead among them; 16 by default): enough for every reader thread, so that
        // reads waiting for restores do not hold up the others.
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            reply.error(Errno::ENOENT);
            return;
        };
        match self.tree.lookup(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl(attr.ino), &file_attr(&attr), Generation(0)),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.tree.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.getattr(ino.0) {
            Ok(attr) => reply.attr(&self.ttl(attr.ino), &file_attr(&attr)),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            reply.error(Errno::EROFS);
            return;
        }
        // The kernel checked the attributes it holds; the store's record may have changed.
        if let Err(code) = self.tree.may_read(ino.0, req.uid()) {
            reply.error(errno(code));
            return;
        }
        self.open_file(ino.0, reply);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to write back. ENOSYS tells the kernel to send no flush again, so a `close`
        // costs no round trip (fuser's default answers the same, with a warning logged).
        reply.error(Errno::ENOSYS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // None is supported: what a program asks of any file it opens (Python asks whether
        // it is a terminal) gets the usual answer, not a line in the log each time.
        reply.error(Errno::ENOTTY);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut backing = self.backing.lock().unwrap_or_else(|e| e.into_inner());
        if fh.0 == 0 {
            if let Some(open) = backing.cached.get_mut(&ino.0) {
                *open -= 1;
                if *open == 0 {
                    backing.cached.remove(&ino.0);
                }
            }
        } else if let Some(id) = backing.by_handle.remove(&fh.0)
            && Arc::strong_count(&id) == 1
        {
            backing.by_inode.remove(&ino.0);
        }
        drop(backing);
        reply.ok();
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let uid = req.uid();
        let read = Read {
            offset,
            len: size,
            asked: Instant::now(),
            may_wait: false,
            uid,
        };
        // First without waiting, on the threads of reads from the hot tier; a read that
        // would wait (for a restore from the cold tier) goes on to the threads of reads that
        // wait. So reads waiting for restores never queue up hot reads, and the FUSE threads
        // (lookups, opens) never do I/O.
        let tree = Arc::clone(&self.tree);
        let waiting = Arc::clone(&self.waiting);
        self.readers.run(
            uid,
            Box::new(move || match tree.read(ino.0, read) {
                Err(libc::EAGAIN) => {
                    let read = Read {
                        may_wait: true,
                        ..read
                    };
                    waiting.run(
                        uid,
                        Box::new(move || match tree.read(ino.0, read) {
                            Ok(bytes) => reply.data(&bytes),
                            Err(code) => reply.error(errno(code)),
                        }),
                    );
                }
                Ok(bytes) => reply.data(&bytes),
                Err(code) => reply.error(errno(code)),
            }),
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The kernel checked the attributes it holds; the store's record may have changed.
        if let Err(code) = self.tree.may_read(ino.0, req.uid()) {
            reply.error(errno(code));
            return;
        }
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle, Arc::new(Mutex::new(Listing::new())));
        reply.opened(FileHandle(handle), FopenFlags::empty());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // Positions 0 and 1 are `.` and `..`, the directory's entries follow; the offset
        // of an entry is the position of the next one.
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let index = offset.saturating_sub(2);
        let listing = self
            .listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .cloned()
            .unwrap_or_else(|| Arc::new(Mutex::new(Listing::new())));
        let mut listing = listing.lock().unwrap_or_else(|e| e.into_inner());
        if index < listing.start {
            // Rewound (`rewinddir`, `seekdir`): read again from the first page.
            *listing = Listing::new();
        }
        while index >= listing.start + listing.page.len() {
            let Some(from) = listing.next.take() else {
                break;
            };
            match self.tree.readdir(ino.0, &from) {
                Ok((page, next)) => {
                    listing.start += listing.page.len();
                    listing.page = page;
                    listing.next = next;
                }
                Err(code) => {
                    listing.next = Some(from);
                    reply.error(errno(code));
                    return;
                }
            }
        }
        let dots = [
            (".", FileType::Directory, ino.0),
            ("..", FileType::Directory, ROOT),
        ];
        let skip = index.saturating_sub(listing.start);
        let entries = listing
            .page
            .iter()
            .enumerate()
            .skip(skip)
            .map(|(n, entry)| {
                (
                    listing.start + n + 2,
                    (entry.name.as_str(), file_type(entry.kind), entry.ino),
                )
            });
        for (position, (name, kind, child)) in
            dots.into_iter().enumerate().skip(offset).chain(entries)
        {
            if reply.add(INodeNo(child), position as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
