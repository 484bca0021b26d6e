//! `svc-fs`: the FUSE view of the daemon's Zarr stores, `/<token>.zarr/<key>`, reading
//! through the same daemon functions as the HTTP facade.
//!
//! - [`filesystem`]: the tree the mount shows (inodes, lookup, readdir, read) over a
//!   [`filesystem::Backend`], testable without a mount;
//! - [`stores`]: the daemon as that backend;
//! - [`fuse`]: the fuser adapter, and [`mount`] to mount it.
//!
//! Not built yet: passthrough of hot keys, the key listing from RocksDB (keys come from the
//! hot tier's directory), stale-mount recovery, and the cold tier.

pub mod filesystem;
pub mod fuse;
pub mod stores;

use std::path::Path;
use std::sync::Arc;

/// Mounts the stores of `daemon` read-only at `dir` until the returned session is dropped
/// (which unmounts): files belong to the store owners' uids and the kernel checks
/// permissions (`default_permissions`, `allow_other`).
///
/// # Errors
/// The mount failed (no `/dev/fuse`, `dir` not a directory, not permitted).
pub fn mount(
    daemon: Arc<svc_daemon::Daemon>,
    dir: &Path,
) -> std::io::Result<fuser::BackgroundSession> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("svcd".into()),
        fuser::MountOption::Subtype("svcd".into()),
        fuser::MountOption::RO,
        fuser::MountOption::NoExec,
        fuser::MountOption::NoSuid,
        fuser::MountOption::NoDev,
        fuser::MountOption::DefaultPermissions,
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(4);
    fuser::spawn_mount(
        fuse::Fuse::new(stores::DaemonStores::new(daemon)),
        dir,
        &config,
    )
}
