//! Sources to Zarr v2. A conversion opens the source, builds the store's metadata in memory
//! ([`metadata`], chunked by the [`plan`]), writes it, then writes every chunk ([`write`]).
//! A reader that asks for a chunk the conversion has not written yet gets it computed from
//! the source by the same functions ([`chunk_on_demand`]), so its bytes are the ones the
//! conversion writes.

pub(crate) mod metadata;
pub(crate) mod plan;
pub(crate) mod stored;
pub(crate) mod write;

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::jobs::Stop;
use crate::stores::request::Chunking;
use metadata::StoreLayout;
use stored::StoredFile;
use write::Written;

/// The compressor of every array of a store (config `stores.compressor`): Blosc, byte
/// shuffled, level 5, as numcodecs' defaults, with LZ4 inside as the reference, or with
/// Zstandard, which makes smaller stores and is slower to write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compressor {
    /// Blosc with LZ4 (the default).
    #[default]
    Lz4,
    /// Blosc with Zstandard.
    Zstd,
}

impl Compressor {
    /// Its numcodecs configuration, as `.zarray` holds it.
    pub(crate) fn codec(self) -> Value {
        let cname = match self {
            Compressor::Lz4 => "lz4",
            Compressor::Zstd => "zstd",
        };
        json!({"id": "blosc", "cname": cname, "clevel": 5, "shuffle": 1, "blocksize": 0})
    }
}

/// An opened source file. The NetCDF library opens it again by name, so the file is opened
/// first, here, and the library is handed `/proc/self/fd/<n>`: it reads the file that was
/// opened (and checked, see [`crate::stores`]), even if the path names another file since.
#[derive(Debug)]
pub(crate) struct Source {
    /// The path as the user gave it, for messages.
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl Source {
    /// Opens `path`, which must be a regular file (a FIFO or device would block or never end).
    ///
    /// # Errors
    /// A sentence naming the file and the cause.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let shown = path.display();
        // Non-blocking, so that opening a FIFO does not wait for a writer.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| format!("{shown}: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{shown}: not a regular file"));
        }
        Ok(Source {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The device and inode of the opened file.
    pub(crate) fn identity(&self) -> Result<(u64, u64), String> {
        use std::os::unix::fs::MetadataExt;
        let meta = self
            .file
            .metadata()
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok((meta.dev(), meta.ino()))
    }

    /// The path the user gave.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The opened file's path for a library that opens files by name: `/proc/self/fd/<n>`.
    fn opened(&self) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::path::PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// The opened file as NetCDF (and as HDF5, for a NetCDF-4 file), and the layout of its
    /// store with `chunking` and `compressor`: what a conversion and every on-demand
    /// computation start from.
    fn layout(
        &self,
        chunking: &Chunking,
        compressor: Compressor,
    ) -> Result<(netcdf::File, Option<StoredFile>, StoreLayout), String> {
        let shown = self.path.display();
        let file =
            crate::crawl::open_netcdf(&self.opened()).map_err(|e| format!("{shown}: {e}"))?;
        let stored = StoredFile::open(&self.opened()).map_err(|e| format!("{shown}: {e}"))?;
        let layout = metadata::layout(&file, stored.as_ref(), chunking, &compressor.codec())
            .map_err(|e| format!("{shown}: {e}"))?;
        Ok((file, stored, layout))
    }
}

/// Converts the NetCDF file `source` into the store directory `dir`.
///
/// # Errors
/// A reason for the store's failed status, naming the file and the cause.
pub(crate) fn convert_file(
    source: &Source,
    dir: &Path,
    chunking: &Chunking,
    compressor: Compressor,
    stop: &Stop,
) -> Result<(StoreLayout, Written), String> {
    let (file, stored, layout) = source.layout(chunking, compressor)?;
    write::write_metadata(&layout, dir)?;
    let written = write::write_chunks(&file, stored.as_ref(), &source.file, &layout, dir, stop)
        .map_err(|e| format!("{}: {e}", source.path.display()))?;
    Ok((layout, written))
}

/// The layout of the store converted from `source` with `chunking` and `compressor`: the
/// metadata a conversion writes first, for a reader that comes before it.
///
/// # Errors
/// A sentence naming the file and the cause.
pub(crate) fn layout_on_demand(
    source: &Source,
    chunking: &Chunking,
    compressor: Compressor,
) -> Result<StoreLayout, String> {
    source
        .layout(chunking, compressor)
        .map(|(_, _, layout)| layout)
}

/// The stored bytes of chunk `index` of the array `array` of the store converted from
/// `source` with `chunking` and `compressor`, computed from the source, when the array's
/// metadata is still `zarray` (the `.zarray` the store serves). `None` when the source no
/// longer gives that metadata (it changed since the conversion began, or the store was
/// written with another compressor): only the conversion can give such a chunk then.
///
/// # Errors
/// A sentence naming the file, and the variable and chunk, that could not be read.
pub(crate) fn chunk_on_demand(
    source: &Source,
    chunking: &Chunking,
    compressor: Compressor,
    array: &str,
    index: &[u64],
    zarray: &Value,
) -> Result<Option<Vec<u8>>, String> {
    let (file, stored, layout) = source.layout(chunking, compressor)?;
    let (Some(written), Some(planned)) = (
        layout.documents.get(&format!("{array}/.zarray")),
        layout.arrays.iter().find(|a| a.path == array),
    ) else {
        return Ok(None);
    };
    if written != zarray {
        return Ok(None);
    }
    let Some(variable) = file.variable(array) else {
        return Ok(None);
    };
    // A 0-d array's one chunk is `0` to readers and `[]` to the writer.
    let index = if planned.shape.is_empty() {
        &[][..]
    } else {
        index
    };
    let failed = |e: String| format!("{}: {e}", source.path.display());
    let stored_array = stored.as_ref().and_then(|stored| stored.array(planned));
    let read =
        write::read_chunk(&variable, stored_array.as_ref(), planned, index).map_err(failed)?;
    let encoder = match planned.copied {
        Some(_) => None,
        None => Some(write::Encoder::new(&layout, planned)?),
    };
    write::chunk_bytes(planned, encoder.as_ref(), read, &source.file, index)
        .map(Some)
        .map_err(failed)
}

#[cfg(test)]
mod tests;
