//! `svc-fs`: the FUSE view of the daemon's Zarr stores, `/<token>.zarr/<key>`, reading
//! through the same daemon functions as the HTTP facade.
//!
//! - [`filesystem`]: the tree the mount shows (inodes, lookup, readdir, read) over a
//!   [`filesystem::Backend`], testable without a mount;
//! - [`stores`]: the daemon as that backend;
//! - [`fuse`]: the fuser adapter (with passthrough of hot chunks), and [`mount`] to mount it.

pub mod filesystem;
pub mod fuse;
pub mod stores;

use std::path::Path;
use std::sync::Arc;

/// Mounts the stores of `daemon` read-only at `dir` until the returned session is dropped
/// (which unmounts): files belong to the store owners' uids and the kernel checks
/// permissions (`default_permissions`, `allow_other`). A mount of an earlier daemon that
/// died (its directory answers "not connected") is detached first.
///
/// # Errors
/// The mount failed (no `/dev/fuse`, `dir` not a directory, not permitted), or `dir` is a
/// FUSE mount point already (a live mount of another daemon, say).
pub fn mount(
    daemon: Arc<svc_daemon::Daemon>,
    dir: &Path,
) -> std::io::Result<fuser::BackgroundSession> {
    if let Err(e) = std::fs::metadata(dir)
        && e.raw_os_error() == Some(libc::ENOTCONN)
    {
        tracing::warn!(dir = %dir.display(), "detaching a stale mount left by an earlier daemon");
        detach(dir)?;
    } else if is_fuse_mount(dir)? {
        // Mounting over it would hide it, and stopping either daemon would then unmount the
        // other's mount.
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} is a FUSE mount point already (another svcd serving it?): stop what \
                 serves it, or unmount it, first",
                dir.display()
            ),
        ));
    }
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
    // Reads answered through the daemon run on the mount's reader threads (see `fuse`);
    // these threads answer lookups, opens and releases, of many readers at once.
    config.n_threads = Some(16);
    let passthrough = daemon.config().mount.passthrough;
    fuser::spawn_mount(
        fuse::Fuse::new(stores::DaemonStores::new(daemon), passthrough),
        dir,
        &config,
    )
}

/// Whether a FUSE file system (another daemon's live mount, say) is mounted at `dir`: a
/// mount point (on another device than its parent) of FUSE's type. Other mounts there (the
/// directory bound in from the host, or a file system of its own) are mounted over, as the
/// mount of a FUSE file system on a directory always is.
fn is_fuse_mount(dir: &Path) -> std::io::Result<bool> {
    use nix::sys::statfs::{FUSE_SUPER_MAGIC, statfs};
    use std::os::unix::fs::MetadataExt;
    let mount_point = std::fs::metadata(dir)?.dev() != std::fs::metadata(dir.join(".."))?.dev();
    Ok(mount_point && statfs(dir)?.filesystem_type() == FUSE_SUPER_MAGIC)
}

/// Detaches the mount at `dir` lazily: it goes from the namespace now, and from the kernel
/// when its last user lets go (a stale mount, or one still in use at shutdown). A daemon
/// without `CAP_SYS_ADMIN` (one that mounts through the setuid `fusermount3`) is refused
/// `umount2`, and has that helper detach it, as it may its own mounts.
///
/// # Errors
/// As `umount2(2)`, or `fusermount3` failing.
pub fn detach(dir: &Path) -> std::io::Result<()> {
    match nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let dir = std::path::absolute(dir)?;
            let helped = std::process::Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&dir)
                .output()
                .map_err(|e| std::io::Error::new(e.kind(), format!("run fusermount3: {e}")))?;
            if helped.status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "fusermount3 -u -z {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&helped.stderr).trim()
                )))
            }
        }
        Err(e) => Err(e.into()),
    }
}
