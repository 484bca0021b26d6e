//! A synthetic but realistic DRS tree of small CF-compliant NetCDF files, for demos and tests.
//!
//! [`write_demo_tree`] writes CMIP6, CMIP5, CORDEX and observational datasets below a root, each
//! crawlable with [`crate::crawl::Drs::Auto`]; [`write_netcdf`] writes one file from a
//! [`FileSpec`] for tests that need a particular file.

mod catalogue;
mod dataset;
mod file_spec;
mod grid;
mod period;
mod vocabulary;

use std::fs;
use std::path::Path;

pub(crate) use file_spec::write_netcdf;
#[cfg(test)]
pub(crate) use file_spec::{FileSpec, Format, TimeAxis, Value, VariableSpec};
#[cfg(test)]
pub(crate) use grid::Grid;

#[cfg(test)]
pub(crate) use dataset::GLOBAL_180;

/// What `write_demo_tree` wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoSummary {
    /// Files written.
    pub files: usize,
    /// Datasets written, each counted once however many versions it has.
    pub datasets: usize,
    /// Total size of the files.
    pub bytes: u64,
}

/// Writes a realistic synthetic DRS tree of small CF-compliant NetCDF files below `root`,
/// deterministic (same bytes each run).
///
/// `progress(done, total)` is called after each file.
///
/// # Layout
/// `model/global/cmip6/CMIP6/...` (CMIP6 DRS), `model/global/cmip5/cmip5/...` (CMIP5 DRS),
/// `model/regional/cordex/output/...` (CORDEX DRS) and `observations/...` (svc DRS). About 80
/// files of a few KB: several versions per dataset, monthly to half-hourly and fixed (fx)
/// fields, atmosphere, ocean and land, `gn` and `gr` grids, global 0..360 and -180..180,
/// curvilinear ocean, rotated-pole CORDEX and regional observation grids, and the `noleap`,
/// `360_day`, `gregorian` and `proleptic_gregorian` calendars. Existing files of the same names
/// are replaced; nothing else below `root` is touched.
///
/// # Determinism
/// Values, ids and dates derive from the dataset definitions only. CMIP6 files are NetCDF-4,
/// whose bytes also depend on the NetCDF/HDF5 library version, so identical bytes hold for
/// one installation.
///
/// # Errors
/// A message naming the directory or file that could not be written.
pub fn write_demo_tree(
    root: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<DemoSummary, String> {
    let datasets = catalogue::datasets();
    let files: Vec<_> = datasets.iter().flat_map(|d| d.files()).collect();
    let mut bytes = 0;
    for (done, (relative, spec)) in files.iter().enumerate() {
        let path = root.join(relative);
        if let Some(directory) = path.parent() {
            fs::create_dir_all(directory)
                .map_err(|e| format!("cannot create {}: {e}", directory.display()))?;
        }
        write_netcdf(&path, spec)?;
        bytes += fs::metadata(&path)
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
            .len();
        progress(done + 1, files.len());
    }
    Ok(DemoSummary {
        files: files.len(),
        datasets: datasets.len(),
        bytes,
    })
}

#[cfg(test)]
mod tests;
