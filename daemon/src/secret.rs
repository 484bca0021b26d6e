//! Files that hold the daemon's secrets (its token signing key, its share-URL key): created
//! once with mode 0600 in a 0700 directory, never replaced, and refused when others can read
//! them.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// The contents of the secret file at `path`, created with `make()` if it does not exist.
/// Two processes creating it at once both end up with the one that was linked first.
///
/// # Errors
/// The file cannot be read or written, or others may read it.
pub(crate) fn load_or_create(path: &Path, make: impl FnOnce() -> Vec<u8>) -> Result<Vec<u8>> {
    if !path.exists() {
        create(path, &make())?;
    }
    let meta = fs::metadata(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::Config(format!(
            "{} is accessible by others (mode {mode:o}); run chmod 600 on it",
            path.display()
        )));
    }
    fs::read(path).map_err(|e| Error::io(path.display().to_string(), e))
}

fn create(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().expect("a secret file has a directory");
    fs::create_dir_all(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io(dir.display().to_string(), e))?;
    let name = path.file_name().expect("a secret file has a name");
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let io = |e| Error::io(tmp.display().to_string(), e);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(contents).map_err(io)?;
    file.sync_all().map_err(io)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        // Another process created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(path.display().to_string(), e)),
    }
}
