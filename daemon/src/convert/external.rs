//! Sources whose data lies in other files are refused.
//!
//! HDF5, and so NetCDF-4, lets a dataset's bytes live outside its file: external raw storage
//! (any byte range of any file, named by path), external links (a dataset of another HDF5
//! file) and virtual datasets (datasets of other files mapped into one). The NetCDF library
//! follows all three with the daemon's rights, while the access check
//! ([`crate::stores::access`]) covers the file the user named. Converting such a file would
//! copy into the user's store whatever the daemon can read: its signing key, the share key,
//! other users' files. No NetCDF writer makes them, so a source that holds one is refused,
//! before any of its data is read, with a reason naming the object.
//!
//! The walk runs before the NetCDF library opens the file, whose open already follows
//! external links (to list what they lead to): a link to a FIFO would hold its open, and
//! the library's process-wide lock with it. And external links cannot be followed at all in
//! this process ([`forbid_external_links`]): a file changed between the walk and the open
//! cannot make the library follow one either.
//!
//! The walk visits every link of every group reachable by hard links (soft links are not
//! followed: what they reach by a path within the file is reached by hard links, or through
//! an external link that the walk finds where it lies), and checks each dataset's storage.
//! It is bounded: a file with more than [`MOST_OBJECTS`] links is refused too.

use std::collections::HashSet;

use hdf5::LinkType;
use hdf5_metno as hdf5;

/// The deepest nesting of groups a source may have. The NetCDF library reads groups
/// recursively, and so do the walk and the layout: a file of groups nested a hundred
/// thousand deep would overflow a thread's stack, which ends the process. No dataset of
/// this field nests more than a few.
const MOST_DEPTH: usize = 64;

/// The most links a source's walk visits (a million variables is more than any NetCDF file
/// holds, and about what the NetCDF library itself opens in a second).
const MOST_OBJECTS: usize = 1_000_000;

/// Fails, naming the object, when the HDF5 file at `opened` (a `/proc/self/fd/<n>` path)
/// keeps data in other files; a file that is not HDF5 (NetCDF-3) passes.
///
/// # Errors
/// A sentence naming the first object found whose data lies elsewhere, or why the file
/// cannot be walked.
pub(crate) fn refuse_data_elsewhere(opened: &std::path::Path) -> Result<(), Refusal> {
    forbid_external_links();
    // Opened by HDF5 itself, which finds a superblock after a user block too, as the NetCDF
    // library does; what it cannot open is no HDF5 file the library would read as one.
    let Ok(file) = hdf5::File::open(opened) else {
        return Ok(());
    };
    let mut walk = Walk {
        visited: HashSet::new(),
        links: 0,
    };
    walk.group(&file, "", 0)
}

/// The environment variable by which HDF5 takes no file locks.
const HDF5_FILE_LOCKING: (&str, &str) = ("HDF5_USE_FILE_LOCKING", "FALSE");

/// Makes HDF5 (and so the NetCDF library) open files without locking them, for the whole
/// process. Sources are only read, and a change while they are read is found by their size
/// and times (`Source::unchanged`). HDF5's lock (`flock`, shared for reading) would stop a
/// source's owner from opening it for writing while a conversion reads it; and HDF5 opens
/// files without `O_CLOEXEC`, so a child the daemon starts (`fusermount3`) would hold the
/// locks of the files open at that moment for as long as it runs.
///
/// # Safety
/// Sets an environment variable: call it before any other thread starts, and before the
/// first HDF5 or NetCDF call (HDF5 reads it when it opens a file).
#[allow(unsafe_code)]
#[allow(
    clippy::disallowed_methods,
    reason = "svcd's own setting of its process, made once as it starts"
)]
pub unsafe fn read_without_file_locks() {
    // SAFETY: the caller makes sure no other thread runs, which reads the environment.
    unsafe { std::env::set_var(HDF5_FILE_LOCKING.0, HDF5_FILE_LOCKING.1) };
}

/// Unregisters HDF5's external link class for the whole process, once: following such a
/// link then fails ("unable to get link class") wherever it is asked for, by the NetCDF
/// library or by this daemon. Listing a link still tells its type.
#[allow(unsafe_code)]
fn forbid_external_links() {
    static FORBIDDEN: std::sync::Once = std::sync::Once::new();
    FORBIDDEN.call_once(|| {
        use hdf5_metno_sys::{h5::H5open, h5l::H5L_type_t, h5l::H5Lunregister};
        // SAFETY: both only change the library's global state, under its lock; the class
        // is registered by the library's initialisation, which `H5open` makes sure of.
        let status = hdf5::sync::sync(|| unsafe {
            H5open();
            H5Lunregister(H5L_type_t::H5L_TYPE_EXTERNAL)
        });
        if status < 0 {
            tracing::error!(
                "cannot forbid HDF5 external links; sources holding them are still refused"
            );
        }
    });
}

/// Why the walk of a source refuses it.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Its data lies elsewhere, or it holds more than this service converts.
    Elsewhere(String),
    /// The HDF5 library failed reading it.
    Unreadable(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Elsewhere(reason) | Refusal::Unreadable(reason) => f.write_str(reason),
        }
    }
}

/// A walk of an HDF5 file's groups.
struct Walk {
    /// The groups visited (their object addresses), so a group linked into itself is
    /// walked once.
    visited: HashSet<String>,
    /// Links seen so far.
    links: usize,
}

impl Walk {
    /// Checks every link of `group` (at `path`, `""` for the root) and, through its hard
    /// links, every dataset and group below it.
    fn group(&mut self, group: &hdf5::Group, path: &str, depth: usize) -> Result<(), Refusal> {
        if depth > MOST_DEPTH {
            return Err(Refusal::Elsewhere(format!(
                "{path}: groups nested more than {MOST_DEPTH} deep, deeper than this service \
                 converts"
            )));
        }
        let failed = |e: hdf5::Error| {
            Refusal::Unreadable(format!("cannot read the HDF5 group {path:?}: {e}"))
        };
        let token = group.loc_info().map_err(failed)?.token;
        if !self.visited.insert(format!("{token:?}")) {
            return Ok(());
        }
        let mut hard = Vec::new();
        let mut elsewhere = None;
        group
            .iter_visit_default(|name, info| {
                self.links += 1;
                match info.link_type {
                    LinkType::Hard => hard.push(name.to_string()),
                    LinkType::Soft => {}
                    // External and user-defined links.
                    LinkType::External => {
                        elsewhere.get_or_insert_with(|| name.to_string());
                    }
                }
                Ok(())
            })
            .map_err(failed)?;
        if let Some(name) = elsewhere {
            return Err(Refusal::Elsewhere(format!(
                "{path}/{name} is a link to another file, whose data this service does not \
                 read"
            )));
        }
        if self.links > MOST_OBJECTS {
            return Err(Refusal::Elsewhere(format!(
                "more than {MOST_OBJECTS} HDF5 objects, more than this service converts"
            )));
        }
        for name in hard {
            let at = format!("{path}/{name}");
            let failed = |e: hdf5::Error| {
                Refusal::Unreadable(format!("cannot read the HDF5 object {at:?}: {e}"))
            };
            let info = group.loc_info_by_name(&name).map_err(failed)?;
            match info.loc_type {
                hdf5::LocationType::Group => {
                    self.group(&group.group(&name).map_err(failed)?, &at, depth + 1)?
                }
                hdf5::LocationType::Dataset => {
                    let dataset = group.dataset(&name).map_err(failed)?;
                    let creation = dataset.dcpl().map_err(failed)?;
                    if creation.layout() == hdf5::dataset::Layout::Virtual {
                        return Err(Refusal::Elsewhere(format!(
                            "{at} is a virtual dataset of other files, whose data this service \
                             does not read"
                        )));
                    }
                    if !creation.external().is_empty() {
                        return Err(Refusal::Elsewhere(format!(
                            "{at} keeps its data in other files (external storage), which \
                             this service does not read"
                        )));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
