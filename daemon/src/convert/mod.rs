//! Sources to Zarr v2. A conversion opens the source, builds the store's metadata in memory
//! ([`metadata`], chunked by the [`plan`]), writes it, then writes every chunk ([`write`]).

pub(crate) mod metadata;
pub(crate) mod plan;
pub(crate) mod write;

use std::path::Path;

use serde_json::{Value, json};

use crate::jobs::Stop;
use crate::stores::request::Chunking;
use metadata::StoreLayout;
use write::Written;

/// The compressor of every array: Blosc with LZ4, numcodecs' defaults, as the reference.
pub(crate) fn blosc_lz4() -> Value {
    json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0})
}

/// Converts the NetCDF file `source` into the store directory `dir`.
///
/// # Errors
/// A reason for the store's failed status, naming the file and the cause.
pub(crate) fn convert_file(
    source: &Path,
    dir: &Path,
    chunking: &Chunking,
    stop: &Stop,
) -> Result<(StoreLayout, Written), String> {
    let shown = source.display();
    let file = crate::crawl::open_netcdf(source).map_err(|e| format!("{shown}: {e}"))?;
    let layout =
        metadata::layout(&file, chunking, &blosc_lz4()).map_err(|e| format!("{shown}: {e}"))?;
    write::write_metadata(&layout, dir)?;
    let written =
        write::write_chunks(&file, &layout, dir, stop).map_err(|e| format!("{shown}: {e}"))?;
    Ok((layout, written))
}

#[cfg(test)]
mod tests;
