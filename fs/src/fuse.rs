//! The fuser adapter: each FUSE callback is one call into the [`Tree`], and an errno out.
//! Read-only: opening for writing is `EROFS`.

use std::ffi::OsStr;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};

use crate::filesystem::{Attr, Backend, Kind, ROOT, Tree};

/// How long the kernel keeps an entry or attributes of a store: a store's keys never change
/// within a conversion, but it may become public or private, or be converted again.
const STORE_TTL: Duration = Duration::from_secs(5);

/// How long it keeps the root's: stores appear and go.
const ROOT_TTL: Duration = Duration::from_secs(1);

/// The mount's filesystem over the tree of `B`.
pub struct Fuse<B> {
    tree: Tree<B>,
}

impl<B: Backend> Fuse<B> {
    /// The filesystem of the stores `backend` gives.
    pub fn new(backend: B) -> Self {
        Fuse {
            tree: Tree::new(backend),
        }
    }
}

fn file_attr(attr: &Attr) -> FileAttr {
    let directory = attr.kind == Kind::Directory;
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if directory {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: attr.perm,
        nlink: if directory { 2 } else { 1 },
        uid: attr.uid,
        gid: attr.gid,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

fn ttl(attr: &Attr) -> Duration {
    if attr.ino == ROOT {
        ROOT_TTL
    } else {
        STORE_TTL
    }
}

fn errno(code: i32) -> Errno {
    Errno::from_i32(code)
}

impl<B: Backend + 'static> Filesystem for Fuse<B> {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            reply.error(Errno::ENOENT);
            return;
        };
        match self.tree.lookup(parent.0, name) {
            Ok(attr) => reply.entry(&ttl(&attr), &file_attr(&attr), Generation(0)),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.getattr(ino.0) {
            Ok(attr) => reply.attr(&ttl(&attr), &file_attr(&attr)),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            reply.error(Errno::EROFS);
            return;
        }
        // The kernel checked the attributes it holds; the store's record may have changed.
        match self.tree.may_read(ino.0, req.uid()) {
            // Stores are immutable: the kernel may keep what it read.
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.tree.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(&bytes),
            Err(code) => reply.error(errno(code)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.tree.readdir(ino.0) {
            Ok(entries) => entries,
            Err(code) => {
                reply.error(errno(code));
                return;
            }
        };
        let dots = [
            (".".to_string(), FileType::Directory, ino.0),
            ("..".to_string(), FileType::Directory, ROOT),
        ];
        let all = dots
            .into_iter()
            .chain(entries.into_iter().map(|(name, attr)| {
                let kind = file_attr(&attr).kind;
                (name, kind, attr.ino)
            }));
        for (position, (name, kind, child)) in all
            .enumerate()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        {
            // The offset of an entry is the position of the next one.
            if reply.add(INodeNo(child), position as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
