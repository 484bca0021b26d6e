//! Finding the NetCDF files below a directory.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// File name endings taken as NetCDF (compared without case).
const EXTENSIONS: [&str; 2] = ["nc", "nc4"];

/// All regular files ending in `.nc` or `.nc4` (any case) below `root`, sorted by path; `root`
/// itself when it is such a file.
///
/// `.h5`/`.hdf5` files are left out: most are plain HDF5, not NetCDF, and would only fail to read.
///
/// # Symlinks
/// Symlinks are followed, but a directory already visited (by its canonical path) is not entered
/// again, so a link back up the tree ends the descent instead of looping. A file reached by two
/// paths is listed once, under the first path in sorted order.
///
/// # Errors
/// Only when `root` itself cannot be read; unreadable directories below it are skipped, so one
/// permission problem does not stop a crawl of a large tree.
pub fn find_netcdf_files(root: &Path) -> io::Result<Vec<PathBuf>> {
    let metadata = fs::metadata(root)?;
    if metadata.is_file() {
        return Ok(if is_netcdf_name(root) {
            vec![root.to_path_buf()]
        } else {
            Vec::new()
        });
    }
    let mut files = Vec::new();
    let mut visited = HashSet::new();
    // Only the root's own read error is reported; see "Errors".
    fs::read_dir(root)?;
    descend(root, &mut visited, &mut files);
    files.sort();
    let mut seen = HashSet::new();
    files.retain(|path| seen.insert(fs::canonicalize(path).unwrap_or_else(|_| path.clone())));
    Ok(files)
}

fn descend(directory: &Path, visited: &mut HashSet<PathBuf>, files: &mut Vec<PathBuf>) {
    let canonical = fs::canonicalize(directory).unwrap_or_else(|_| directory.to_path_buf());
    if !visited.insert(canonical) {
        return;
    }
    let Ok(entries) = fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // `fs::metadata` follows symlinks; a dangling link has none and is skipped.
        let Ok(metadata) = fs::metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            descend(&path, visited, files);
        } else if metadata.is_file() && is_netcdf_name(&path) {
            files.push(path);
        }
    }
}

fn is_netcdf_name(path: &Path) -> bool {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    EXTENSIONS.iter().any(|e| extension.eq_ignore_ascii_case(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"x").unwrap();
    }

    #[test]
    fn finds_netcdf_names_sorted_and_skips_others() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in [
            "b/2.nc",
            "a/1.NC",
            "a/z/3.nc4",
            "a/readme.txt",
            "c/4.h5",
            "c/nc",
        ] {
            touch(&root.join(name));
        }
        let found = find_netcdf_files(root).unwrap();
        let relative: Vec<_> = found
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().to_str().unwrap())
            .collect();
        assert_eq!(relative, ["a/1.NC", "a/z/3.nc4", "b/2.nc"]);
        assert_eq!(
            find_netcdf_files(&root.join("b/2.nc")).unwrap(),
            [root.join("b/2.nc")]
        );
        assert!(find_netcdf_files(&root.join("missing")).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loops_end_and_files_are_listed_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(&root.join("data/x.nc"));
        std::os::unix::fs::symlink(root.join("data"), root.join("data/loop")).unwrap();
        std::os::unix::fs::symlink(root.join("data/x.nc"), root.join("y.nc")).unwrap();
        let found = find_netcdf_files(root).unwrap();
        assert_eq!(found, [root.join("data/x.nc")]);
    }
}
