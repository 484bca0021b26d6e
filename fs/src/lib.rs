//! `svc-fs`: the FUSE view of the daemon's Zarr stores, `/<token>.zarr/<key>`, reading
//! through the same daemon functions as the HTTP facade.
//!
//! Built so far: [`filesystem`], the tree the mount shows (inodes, lookup, readdir, read),
//! over a [`filesystem::Backend`] and testable without a mount. Not built yet: the fuser
//! adapter (`fuse.rs`), the daemon's backend, and `svcd serve --mount`.

pub mod filesystem;
