//! Crawling: turning NetCDF files on disk into catalogue records.
//!
//! [`find_netcdf_files`] lists the files below a root, [`read_record`] reads one into a
//! [`Record`]: facets from the DRS path ([`Drs`]) completed by global attributes, the time range
//! from the time coordinate (all CF calendars) and the bounding box from the latitude/longitude
//! coordinates. Reading is blocking; async callers run it on a blocking thread.

mod attributes;
mod bbox;
pub(crate) mod cf_time;
mod drs;
pub(crate) mod netcdf_read;
mod time_axis;
mod walk;

use std::path::Path;

use crate::catalog::Record;

pub use drs::Drs;
pub(crate) use netcdf_read::open as open_netcdf;
pub use walk::find_netcdf_files;

/// Reads one file into a record.
///
/// `file` and `uri` are the canonical absolute path, `fs_type` is `posix` and `format` `nc`.
/// Facets come from the path's DRS segments first; global attributes fill the facets the path
/// does not give (see `attributes.rs` for the mapping), keeping their original case. When neither
/// names the variable, `variable` lists the file's data variables. A CORDEX file's `model` is
/// `<driving_model>-<rcm_name>-<rcm_version>` and its `cmor_table` its frequency, as in the
/// reference catalogue. `version` is the DRS version segment. A file without time coordinate
/// (fx) has no `time`, one without latitude/longitude no `bbox`.
///
/// # Errors
/// A message saying why the file cannot be read, e.g. `not a NetCDF file: NetCDF: Unknown file
/// format`; never panics.
pub fn read_record(path: &Path, drs: Drs) -> Result<Record, String> {
    let canonical = path
        .canonicalize()
        .map_err(|e| format!("cannot resolve path: {e}"))?;
    let location = canonical
        .to_str()
        .ok_or("path is not valid UTF-8")?
        .to_string();
    let file = netcdf_read::open(&canonical)?;
    let from_path = drs::facets_from_path(&canonical, drs);
    let facets = facets(&file, &from_path);

    let mut record = Record::new(location);
    record.facets.extend(
        facets
            .into_iter()
            .map(|(facet, values)| (facet.to_string(), values)),
    );
    record.facets.insert("format".into(), vec!["nc".into()]);
    record.version = from_path.version;
    record.time = time_axis::time_range(&file)?;
    record.bbox = bbox::bbox(&file)?;
    record.validate()?;
    Ok(record)
}

/// The path's facets completed from the global attributes and the data variables.
fn facets(file: &netcdf::File, from_path: &drs::PathFacets) -> attributes::Facets {
    let global = netcdf_read::global_attributes(file);
    let mut facets: attributes::Facets = from_path
        .facets
        .iter()
        .map(|(facet, value)| (*facet, vec![value.clone()]))
        .collect();
    let cordex = from_path.template == Some(Drs::Cordex) || attributes::is_cordex(&global);
    attributes::fill_facets(&mut facets, &global, cordex);
    if cordex {
        attributes::complete_cordex(&mut facets);
    }
    if !facets.contains_key("variable") {
        let variables = netcdf_read::data_variables(file);
        if !variables.is_empty() {
            facets.insert("variable", variables);
        }
    }
    facets
}

#[cfg(test)]
mod tests;
