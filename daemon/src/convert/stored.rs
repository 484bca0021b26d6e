//! Chunks of NetCDF-4 variables read as the HDF5 library stored them: copied into the store
//! as they are when they are store chunks, or decompressed on every core when not.
//!
//! **Copied** ([`Copied`]): when a variable's stored chunk shape is the store's chunk shape
//! (the reference's default `map` plan of one time step per chunk matches how most model
//! output is stored) and its filters are `deflate`, alone or after `shuffle`, the stored
//! bytes are the store's chunk: the array is declared with Zarr v2's `zlib` compressor and
//! `shuffle` filter (the same bytes, as numcodecs defines them) in the stored byte order
//! (`>f4` for a big-endian source). A stored chunk written with a filter skipped (its filter
//! mask) or never written (the NetCDF library gives its fill values) is encoded that way by
//! the daemon. The store's html says which arrays were copied.
//!
//! **Decoded**: for other variables the daemon can decode, the conversion's reader thread
//! only looks up where the stored chunks that cover a store chunk are
//! ([`StoredArray::pieces`], a B-tree lookup under the HDF5 lock); the encoder threads read
//! those bytes from the opened file, inflate, unshuffle, put them in the machine's byte order
//! and cut the store chunk out of them ([`Pieces::values`]), with no lock held. The NetCDF
//! library would read one hyperslab at a time under its process-wide lock. The values are
//! the bytes the library gives for the same hyperslab, so the store is the same either way
//! (tested chunk by chunk).
//!
//! What qualifies: a chunked dataset of this file (not a link to another) with only `shuffle`
//! and `deflate` filters, filtered partial edge chunks, fixed-size numbers that use every bit
//! of their bytes, its stored extent equal to its NetCDF shape, stored chunks of at most
//! 512 MiB, and, per store chunk, at most 1,024 stored chunks none of which was never
//! written and none more than 8 times the store chunk. Everything else takes the NetCDF
//! library's path: NetCDF-3 files, strings, chars, other filters, a variable whose unlimited
//! dimension another variable made longer. A `shuffle` counts only with the element size
//! its settings name, by which the library undoes it.
//!
//! **Strings** are read by the library, but what it will allocate for them is read here
//! first ([`StoredStrings`]): the length each stored string claims, checked against the
//! global heap object it points at, so that a chunk whose strings would take too much is
//! refused before the library is asked.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use hdf5_metno as hdf5;

use super::metadata::{ArrayLayout, Dtype};
use super::write::to_usize;

/// The largest stored chunk decoded by the daemon, in bytes of values: as large as the
/// largest store chunk (`chunk_size` up to 512 MiB).
const MAX_STORED_CHUNK_BYTES: u64 = 512 << 20;

/// The most stored chunks one store chunk is cut from by the daemon.
const MAX_PIECES: u64 = 1024;

/// A NetCDF-4 source opened with the HDF5 library, to look up its stored chunks.
pub(crate) struct StoredFile {
    file: hdf5::File,
    /// The same file, to read stored bytes from.
    raw: std::fs::File,
}

impl StoredFile {
    /// The HDF5 file behind `opened` (a `/proc/self/fd/<n>` path), or `None` when it is not
    /// one (a NetCDF-3 file).
    ///
    /// # Errors
    /// When an HDF5 file cannot be opened. It is an error, not a `None`: which arrays are
    /// copied depends on it, and the metadata computed on a request must be the metadata the
    /// conversion writes.
    pub(crate) fn open(opened: &std::path::Path) -> Result<Option<Self>, String> {
        if !looks_like_hdf5(opened) {
            return Ok(None);
        }
        let raw = std::fs::File::open(opened).map_err(|e| format!("cannot open: {e}"))?;
        hdf5::File::open(opened)
            .map(|file| Some(StoredFile { file, raw }))
            .map_err(|e| format!("cannot open as HDF5: {e}"))
    }

    /// The dataset of the variable of `array`, when this file holds it (not a link to
    /// another file's, which would be read from this one).
    fn dataset(&self, array: &ArrayLayout) -> Option<hdf5::Dataset> {
        let mut group = String::new();
        for name in &array.groups {
            group.push('/');
            group.push_str(name);
        }
        // NetCDF stores a variable named as a dimension it does not run along under another
        // name, beside the dimension's own dataset.
        let dataset = [
            format!("{group}/_nc4_non_coord_{}", array.variable),
            format!("{group}/{}", array.variable),
        ]
        .iter()
        .find_map(|name| self.file.dataset(name).ok())?;
        (dataset.filename() == self.file.filename()).then_some(dataset)
    }

    /// How to read the stored chunks of `array`, when the daemon can decode them.
    pub(crate) fn array(&self, array: &ArrayLayout) -> Option<StoredArray> {
        let item = match array.dtype {
            Dtype::Int(_) | Dtype::Float(_) => usize::try_from(array.dtype.size()).ok()?,
            Dtype::Char | Dtype::String => return None,
        };
        if array.shape.is_empty() {
            return None;
        }
        let dataset = self.dataset(array)?;
        let extent: Vec<u64> = dataset.shape().into_iter().map(|n| n as u64).collect();
        if extent != array.shape {
            return None;
        }
        let datatype = dataset.dtype().ok()?;
        if datatype.size() != item || !whole_bytes(&datatype) {
            return None;
        }
        let big_endian = match datatype.byte_order() {
            hdf5::datatype::ByteOrder::LittleEndian => false,
            hdf5::datatype::ByteOrder::BigEndian => true,
            _ if item == 1 => false,
            _ => return None,
        };
        let layout = chunked_layout(&dataset, item, big_endian).ok()?;
        Some(StoredArray {
            dataset,
            shape: extent,
            layout: Arc::new(layout),
        })
    }
}

impl StoredFile {
    /// How to read what the strings of the string array `array` claim to take, from the
    /// descriptors HDF5 stores for them, before the library reads any; `fill` is the bytes
    /// of its fill value, which each element never written takes.
    ///
    /// # Errors
    /// A sentence saying why the claims cannot be read: the dataset is not in this file, is
    /// compact or virtual, or has a filter other than `shuffle` and `deflate`.
    pub(crate) fn strings(&self, array: &ArrayLayout, fill: u64) -> Result<StoredStrings, String> {
        let dataset = self
            .dataset(array)
            .ok_or("its dataset is not in the file itself")?;
        // A stored string is its length (4 bytes, little-endian), then the global heap
        // object holding its bytes: the collection's address and the object's index.
        let sizes = self
            .file
            .fcpl()
            .map_err(|e| format!("the file's address size: {e}"))?
            .sizes();
        let (sizeof_addr, sizeof_size) = (sizes.sizeof_addr as usize, sizes.sizeof_size as usize);
        let item = 4 + sizeof_addr + 4;
        // Shorter than the variable along an unlimited dimension that another variable made
        // longer: the elements past it are the fill value.
        let shape: Vec<u64> = dataset.shape().into_iter().map(|n| n as u64).collect();
        if shape.len() != array.shape.len() || shape.iter().zip(&array.shape).any(|(s, a)| s > a) {
            return Err(format!(
                "its stored extent {shape:?} is not within its shape {:?}",
                array.shape
            ));
        }
        let elements = shape.iter().try_fold(1u64, |n, len| n.checked_mul(*len));
        let storage = match dataset.layout() {
            hdf5::dataset::Layout::Contiguous => {
                let address = dataset.offset();
                let stored = dataset.storage_size();
                if address.is_some()
                    && elements.and_then(|n| n.checked_mul(item as u64)) != Some(stored)
                {
                    return Err(format!(
                        "{stored} bytes stored for {} strings",
                        elements.unwrap_or(u64::MAX)
                    ));
                }
                Storage::Contiguous(address)
            }
            hdf5::dataset::Layout::Chunked => {
                Storage::Chunked(chunked_layout(&dataset, item, false)?)
            }
            other => return Err(format!("it is stored {other:?}")),
        };
        let file_len = self.raw.metadata().map_err(|e| e.to_string())?.len();
        Ok(StoredStrings {
            raw: self.raw.try_clone().map_err(|e| e.to_string())?,
            dataset,
            extent: shape,
            item,
            sizeof_addr,
            sizeof_size,
            file_len,
            storage,
            collections: std::sync::Mutex::new(std::collections::HashMap::new()),
            fill,
        })
    }
}

/// How the stored chunks of `dataset`, of `item`-byte elements, are to be decoded, or why
/// the daemon cannot: partial edge chunks filtered, stored chunks of at most
/// [`MAX_STORED_CHUNK_BYTES`], filters it undoes ([`pipeline`]).
fn chunked_layout(
    dataset: &hdf5::Dataset,
    item: usize,
    big_endian: bool,
) -> Result<Layout, String> {
    let creation = dataset.dcpl().map_err(|e| e.to_string())?;
    // Partial edge chunks stored without their filters, which only this flag tells.
    if !matches!(creation.get_chunk_opts(), Ok(Some(options)) if options.is_empty()) {
        return Err("its partial edge chunks are stored unfiltered".into());
    }
    let stored_chunk: Vec<u64> = dataset
        .chunk()
        .ok_or("it is not stored in chunks")?
        .into_iter()
        .map(|n| n as u64)
        .collect();
    // A stored chunk is decoded whole: one larger than a store chunk can be (a file's
    // claim, not to be trusted) is not.
    let stored_bytes = stored_chunk
        .iter()
        .try_fold(item as u64, |bytes, n| bytes.checked_mul(*n));
    if stored_chunk.len() != dataset.ndim()
        || stored_bytes.is_none_or(|bytes| bytes > MAX_STORED_CHUNK_BYTES)
    {
        return Err(format!("its stored chunks {stored_chunk:?} are too large"));
    }
    Ok(Layout {
        stored_chunk,
        pipeline: pipeline(&creation, item)?,
        item,
        big_endian,
    })
}

/// The filters of a dataset of `item`-byte elements as the daemon undoes them (`shuffle`
/// and `deflate`), or why it cannot.
fn pipeline(creation: &hdf5::plist::DatasetCreate, item: usize) -> Result<Vec<Stage>, String> {
    let filters = creation.get_filters().map_err(|e| e.to_string())?;
    filters
        .into_iter()
        .map(|filter| match filter {
            // The library unshuffles by the element size the filter's settings name, which
            // the file may set to anything.
            hdf5::filters::Filter::Shuffle => match shuffled_size(creation) {
                Some(size) if size == item => Ok(Stage::Shuffle),
                // As for strings: the library cannot apply it, and skips it (it is optional).
                None => Ok(Stage::Unshuffleable),
                Some(size) => Err(format!(
                    "it is shuffled as {size}-byte elements, not {item}-byte ones"
                )),
            },
            hdf5::filters::Filter::Deflate(level) => Ok(Stage::Deflate(level)),
            other => Err(format!("it is stored with the filter {other:?}")),
        })
        .collect()
}

/// The element size the `shuffle` filter of `creation` names in its settings.
#[allow(unsafe_code)]
fn shuffled_size(creation: &hdf5::plist::DatasetCreate) -> Option<usize> {
    let mut flags = 0;
    let mut values = [0u32; 4];
    let mut count: usize = values.len();
    let mut config = 0;
    // SAFETY: `creation` is an open property list for as long as it is borrowed; the
    // library writes at most `count` values into `values` and no name (length 0); the other
    // out-pointers are to live locals. Under the library's lock.
    let status = hdf5::sync::sync(|| unsafe {
        hdf5_metno_sys::h5p::H5Pget_filter_by_id2(
            creation.id(),
            hdf5_metno_sys::h5z::H5Z_FILTER_SHUFFLE,
            &mut flags,
            &mut count,
            values.as_mut_ptr(),
            0,
            std::ptr::null_mut(),
            &mut config,
        )
    });
    (status >= 0 && count >= 1 && values[0] > 0).then(|| values[0] as usize)
}

/// Where a string variable's descriptors are stored.
#[derive(Debug)]
enum Storage {
    /// In one block at this address, in C order; `None` when never written.
    Contiguous(Option<u64>),
    /// In stored chunks.
    Chunked(Layout),
}

/// What the elements of a NetCDF-4 string variable claim to take, read from the file (see
/// [`StoredFile::strings`]). HDF5 allocates (and zeroes) the length an element claims
/// before it reads the element's string, however short the string is, and then copies the
/// whole heap object the element points at into it: so each claim is checked against its
/// object, and the claims are counted, before the library is asked.
///
/// Elements never written, or past the stored extent, count the bytes of the variable's
/// fill value, which the library gives each of them. The fill value itself is one string the
/// file stores once, which the library reads when it opens the file; what it claims is not
/// checked first (that needs the dataset's object header, which no HDF5 call gives raw).
pub(crate) struct StoredStrings {
    dataset: hdf5::Dataset,
    raw: std::fs::File,
    /// The dataset's extent (the variable's shape, or less along an unlimited dimension).
    extent: Vec<u64>,
    /// Bytes of one stored string: its length, a file address and an index.
    item: usize,
    /// Bytes of a file address and of a length in the file.
    sizeof_addr: usize,
    sizeof_size: usize,
    file_len: u64,
    storage: Storage,
    /// The heap collections read so far, by address.
    collections: std::sync::Mutex<std::collections::HashMap<u64, Arc<Collection>>>,
    /// The bytes of the variable's fill value, which elements never written, or past the
    /// stored extent, are.
    fill: u64,
}

/// The global heap collections whose objects the strings of one block are, each read once:
/// its address, and the size of each of its objects by index.
struct Heaps<'s> {
    strings: &'s StoredStrings,
    /// Bytes of collections left to read.
    left: u64,
    /// The largest collection read.
    most_collection: u64,
}

impl Heaps<'_> {
    /// Checks that the string `descriptor` claims is the heap object it points at, whole:
    /// HDF5 copies the object (whatever its size) into a buffer of the claimed length.
    fn check(&mut self, descriptor: &[u8], length: u32) -> Result<(), String> {
        let strings = self.strings;
        let address = le_bytes(&descriptor[4..4 + strings.sizeof_addr]);
        let index = u32::from_le_bytes(
            descriptor[4 + strings.sizeof_addr..strings.item]
                .try_into()
                .expect("4 bytes"),
        );
        let objects = self.collection(address)?;
        match objects.get(&index) {
            Some(&size) if size == u64::from(length) => Ok(()),
            found => Err(format!(
                "a string claims {length} bytes, and its heap object {index} at byte \
                 {address} of the file {}",
                found.map_or("is not there".to_string(), |size| format!("holds {size}"))
            )),
        }
    }

    /// The objects of the global heap collection at `address`: each one's size by index.
    /// Read from the file once per variable (kept while they are few), each read counted.
    fn collection(&mut self, address: u64) -> Result<Arc<Collection>, String> {
        let strings = self.strings;
        let mut kept = strings
            .collections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(objects) = kept.get(&address) {
            return Ok(Arc::clone(objects));
        }
        let failed = |why: &dyn std::fmt::Display| {
            format!("the heap collection at byte {address} of the file: {why}")
        };
        // The collection's header, and each object's, is aligned to 8 bytes, as HDF5 reads
        // them.
        let header = (8 + strings.sizeof_size).next_multiple_of(8);
        let mut start = vec![0u8; header];
        strings
            .raw
            .read_exact_at(&mut start, address)
            .map_err(|e| failed(&e))?;
        if &start[..5] != b"GCOL\x01" {
            return Err(failed(&"not a global heap collection"));
        }
        let size = le_bytes(&start[8..8 + strings.sizeof_size]);
        if size < header as u64
            || address
                .checked_add(size)
                .is_none_or(|end| end > strings.file_len)
        {
            return Err(failed(&format_args!("it claims {size} bytes")));
        }
        if size > self.left || size > self.most_collection {
            return Err(failed(&format_args!(
                "its {size} bytes are more than the strings may read"
            )));
        }
        self.left -= size;
        let mut bytes = vec![0u8; to_usize(size)];
        strings
            .raw
            .read_exact_at(&mut bytes, address)
            .map_err(|e| failed(&e))?;
        // Each object: its index (2 bytes), reference count (2), 4 reserved, its size, then
        // its bytes padded to 8; index 0 is the free space, which ends the objects here (an
        // object past it is not found, and its string refused).
        let mut objects = std::collections::HashMap::new();
        let mut at = header;
        while at + header <= bytes.len() {
            let index = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
            if index == 0 {
                break;
            }
            let object = le_bytes(&bytes[at + 8..at + 8 + strings.sizeof_size]);
            // The library copies an object's declared size from inside the collection.
            let next = object
                .checked_next_multiple_of(8)
                .and_then(|padded| (at as u64 + header as u64).checked_add(padded))
                .filter(|&next| next <= size)
                .ok_or_else(|| {
                    failed(&format_args!(
                        "its object {index} of {object} bytes runs past its end"
                    ))
                })?;
            objects.insert(u32::from(index), object);
            at = to_usize(next);
        }
        if kept.values().map(|c| c.len()).sum::<usize>() + objects.len() > MOST_KEPT_OBJECTS {
            kept.clear();
        }
        let objects = Arc::new(objects);
        kept.insert(address, Arc::clone(&objects));
        Ok(objects)
    }
}

/// The sizes of the objects of one global heap collection, by index.
type Collection = std::collections::HashMap<u32, u64>;

/// The most heap objects whose sizes a variable's claims keep between chunks.
const MOST_KEPT_OBJECTS: usize = 1 << 20;

/// A little-endian unsigned number of up to 8 bytes.
fn le_bytes(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |n, &byte| (n << 8) | u64::from(byte))
}

impl StoredStrings {
    /// The bytes the strings of the block `start`/`count` claim together, each checked
    /// against the heap object it points at, or the first sum past `most` (the caller refuses
    /// the block then). Elements past the stored extent, or never written, count nothing:
    /// they are the fill value.
    ///
    /// # Errors
    /// A sentence saying which stored bytes could not be read or decoded, or why a string is
    /// not what it claims.
    pub(crate) fn claimed(&self, start: &[u64], count: &[u64], most: u64) -> Result<u64, String> {
        let rank = start.len();
        let asked: u64 = count.iter().product();
        // Within the stored extent; the elements past it are the fill value.
        let count: Vec<u64> = (0..rank)
            .map(|d| {
                (start[d] + count[d])
                    .min(self.extent[d])
                    .saturating_sub(start[d])
            })
            .collect();
        let stored: u64 = count.iter().product();
        let past = self.fill.saturating_mul(asked - stored);
        if stored == 0 || past > most {
            return Ok(past);
        }
        let mut claims = Counted {
            heaps: Heaps {
                strings: self,
                // Collections hold other strings too, 16 bytes or more for each, and are
                // 4 KiB at least (a writer that appends one string at a time makes one for
                // each).
                left: most
                    .saturating_mul(4)
                    .saturating_add(4096 * count.iter().product::<u64>())
                    .saturating_add(1 << 20),
                most_collection: most.saturating_add(1 << 20),
            },
            claimed: past,
            most,
        };
        match &self.storage {
            Storage::Contiguous(None) => {
                claims.fill(stored);
                Ok(claims.claimed)
            }
            Storage::Contiguous(Some(address)) => {
                // A scalar is one element, as a block of one.
                let (start, count, shape) = if rank == 0 {
                    (&[0][..], &[1][..], &[1][..])
                } else {
                    (start, &count[..], &self.extent[..])
                };
                let rank = start.len();
                let item = self.item as u64;
                let failed = || format!("strings at byte {address} of the file: past its end");
                // Rows are read a window at a time.
                let window = (WINDOW_BYTES / item).max(1);
                let end: Vec<u64> = (0..rank).map(|d| start[d] + count[d]).collect();
                let mut at = start.to_vec();
                loop {
                    let element = (0..rank).fold(0u64, |n, d| n * shape[d] + at[d]);
                    let mut done = 0;
                    while done < count[rank - 1] {
                        let n = window.min(count[rank - 1] - done);
                        let offset = (element + done)
                            .checked_mul(item)
                            .and_then(|bytes| address.checked_add(bytes))
                            .ok_or_else(failed)?;
                        let mut bytes = vec![0u8; to_usize(n * item)];
                        self.raw
                            .read_exact_at(&mut bytes, offset)
                            .map_err(|e| format!("strings at byte {offset} of the file: {e}"))?;
                        if claims.add(&bytes)? {
                            return Ok(claims.claimed);
                        }
                        done += n;
                    }
                    if !next_row(&mut at, start, &end) {
                        return Ok(claims.claimed);
                    }
                }
            }
            Storage::Chunked(layout) => {
                let stored = &layout.stored_chunk;
                let first: Vec<u64> = (0..rank).map(|d| start[d] / stored[d]).collect();
                let last: Vec<u64> = (0..rank)
                    .map(|d| (start[d] + count[d] - 1) / stored[d])
                    .collect();
                // Decoding is bounded by the block, as the library's reading is not: stored
                // chunks far larger than the store's are refused.
                let elements: u64 = count.iter().product();
                let mut decode_left = (8 * elements * self.item as u64).max(WINDOW_BYTES << 6);
                let mut grid = first.clone();
                loop {
                    let origin: Vec<u64> = grid.iter().zip(stored).map(|(i, c)| i * c).collect();
                    // The part of the block in this stored chunk.
                    let low: Vec<u64> = (0..rank).map(|d| origin[d].max(start[d])).collect();
                    let high: Vec<u64> = (0..rank)
                        .map(|d| (origin[d] + stored[d]).min(start[d] + count[d]))
                        .collect();
                    let past_bound = match chunk_location(&self.dataset, &origin) {
                        // Never written: the fill value, for each of its elements.
                        None => claims.fill((0..rank).map(|d| high[d] - low[d]).product()),
                        Some(location) => {
                            let stored_len = layout.stored_len() as u64;
                            if stored_len > decode_left {
                                return Err(format!(
                                    "its stored chunks of {stored:?} strings are too large to \
                                     read for a store chunk of {count:?}: a larger \
                                     `chunk_size` or `map_primary_chunksize` reads fewer of them"
                                ));
                            }
                            decode_left -= stored_len;
                            let piece = Piece {
                                origin: origin.clone(),
                                location,
                            };
                            let bytes = layout.decoded(&piece, &self.raw)?;
                            let row = to_usize(high[rank - 1] - low[rank - 1]) * self.item;
                            let mut at = low.clone();
                            loop {
                                let element = (0..rank)
                                    .fold(0u64, |n, d| n * stored[d] + (at[d] - origin[d]));
                                let from = to_usize(element) * self.item;
                                if claims.add(&bytes[from..from + row])? {
                                    break true;
                                }
                                if !next_row(&mut at, &low, &high) {
                                    break false;
                                }
                            }
                        }
                    };
                    if past_bound {
                        return Ok(claims.claimed);
                    }
                    if !next_index(&mut grid, &first, &last) {
                        return Ok(claims.claimed);
                    }
                }
            }
        }
    }
}

/// Bytes of stored strings read at a time from a contiguous dataset.
const WINDOW_BYTES: u64 = 1 << 20;

/// The claims of a block's strings counted so far.
struct Counted<'s> {
    heaps: Heaps<'s>,
    claimed: u64,
    most: u64,
}

impl Counted<'_> {
    /// Counts `elements` of the fill value; `true` once the sum is past the bound.
    fn fill(&mut self, elements: u64) -> bool {
        let fill = self.heaps.strings.fill.saturating_mul(elements);
        self.claimed = self.claimed.saturating_add(fill);
        self.claimed > self.most
    }

    /// Counts the stored strings `descriptors`; `true` once the sum is past the bound.
    fn add(&mut self, descriptors: &[u8]) -> Result<bool, String> {
        for descriptor in descriptors.chunks_exact(self.heaps.strings.item) {
            let length = u32::from_le_bytes(descriptor[..4].try_into().expect("4 bytes"));
            self.claimed = self.claimed.saturating_add(u64::from(length));
            if self.claimed > self.most {
                return Ok(true);
            }
            // An empty string reads no heap object.
            if length > 0 {
                self.heaps.check(descriptor, length)?;
            }
        }
        Ok(false)
    }
}

/// Moves `at` to the first element of the next row of the block from `low` to `high`
/// (exclusive; the dimensions before the last, in C order); `false` past its last row.
fn next_row(at: &mut [u64], low: &[u64], high: &[u64]) -> bool {
    let mut d = at.len().saturating_sub(1);
    loop {
        if d == 0 {
            return false;
        }
        d -= 1;
        at[d] += 1;
        if at[d] < high[d] {
            return true;
        }
        at[d] = low[d];
    }
}

/// Moves the grid index `at` to the next one from `first` to `last` (inclusive) in C order;
/// `false` past the last.
fn next_index(at: &mut [u64], first: &[u64], last: &[u64]) -> bool {
    let mut d = at.len();
    loop {
        if d == 0 {
            return false;
        }
        d -= 1;
        if at[d] < last[d] {
            at[d] += 1;
            return true;
        }
        at[d] = first[d];
    }
}

/// Whether the values of `datatype` use every bit of their bytes from the first (the NetCDF
/// library converts a narrower or shifted stored number, which a copy of the bytes would not).
#[allow(unsafe_code)]
fn whole_bytes(datatype: &hdf5::Datatype) -> bool {
    // SAFETY: `datatype` is an open datatype for as long as it is borrowed; both functions
    // only read it, and are called under the library's lock.
    let (precision, offset) = hdf5::sync::sync(|| unsafe {
        (
            hdf5_metno_sys::h5t::H5Tget_precision(datatype.id()),
            hdf5_metno_sys::h5t::H5Tget_offset(datatype.id()),
        )
    });
    precision == datatype.size() * 8 && offset == 0
}

/// Whether the file starts with the HDF5 signature at offset 0 (where NetCDF-4 files have
/// it). Checked first so the library is not asked to open a NetCDF-3 file.
fn looks_like_hdf5(path: &std::path::Path) -> bool {
    let mut start = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut start))
        .is_ok_and(|()| start == *b"\x89HDF\r\n\x1a\n")
}

/// A filter a stored chunk went through, in the order they were applied when writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Shuffle,
    /// With its level, which a copied chunk's compressor declares.
    Deflate(u8),
    /// `shuffle` with no element size (HDF5 gives it none for strings): a stored chunk
    /// cannot have gone through it.
    Unshuffleable,
}

/// What every stored chunk of one variable shares.
#[derive(Debug)]
struct Layout {
    /// The stored chunk shape, in elements.
    stored_chunk: Vec<u64>,
    /// Filters, in the order they were applied.
    pipeline: Vec<Stage>,
    /// Bytes per element.
    item: usize,
    /// Whether elements are stored big-endian.
    big_endian: bool,
}

impl Layout {
    /// The bytes of values of one stored chunk.
    fn stored_len(&self) -> usize {
        to_usize(self.stored_chunk.iter().product::<u64>()) * self.item
    }

    /// The bytes of `piece` as the file stores them.
    fn stored(&self, piece: &Piece, file: &std::fs::File) -> Result<Vec<u8>, String> {
        let stored_len = self.stored_len();
        // Deflate never grows data by more than a few bytes per 16 KiB block: a larger
        // size is a damaged or hostile file, and is not allocated.
        if piece.location.size > (stored_len + stored_len / 64 + 1024) as u64 {
            return Err(piece.failed(&format_args!(
                "{} bytes stored for {stored_len} bytes of values",
                piece.location.size
            )));
        }
        let mut bytes = vec![0u8; to_usize(piece.location.size)];
        file.read_exact_at(&mut bytes, piece.location.address)
            .map_err(|e| piece.failed(&e))?;
        Ok(bytes)
    }

    /// `bytes` of `piece` with the filters the writer applied undone: its values in the
    /// stored byte order.
    fn undo_filters(&self, piece: &Piece, mut bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        let stored_len = self.stored_len();
        for (position, stage) in self.pipeline.iter().enumerate().rev() {
            if piece.location.filter_mask & (1 << position) != 0 {
                continue;
            }
            bytes = match stage {
                Stage::Deflate(_) => inflate(&bytes, stored_len).map_err(|e| piece.failed(&e))?,
                Stage::Shuffle => unshuffle(&bytes, self.item),
                Stage::Unshuffleable => {
                    return Err(piece.failed(&"shuffled with no element size"));
                }
            };
        }
        if bytes.len() != stored_len {
            return Err(piece.failed(&format_args!(
                "{} bytes decoded, {stored_len} expected",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// The values of `piece`, read and decoded, in the stored byte order.
    fn decoded(&self, piece: &Piece, file: &std::fs::File) -> Result<Vec<u8>, String> {
        let bytes = self.stored(piece, file)?;
        self.undo_filters(piece, bytes)
    }
}

/// The stored chunks of one variable.
pub(crate) struct StoredArray {
    dataset: hdf5::Dataset,
    layout: Arc<Layout>,
    /// The variable's shape (its stored extent).
    shape: Vec<u64>,
}

impl StoredArray {
    /// How the stored chunks are declared in the store when they can be copied as they are:
    /// when a stored chunk is a store chunk (`chunks`, the store's chunk shape) and its
    /// filters are Zarr v2 codecs (`deflate`, after `shuffle` or alone).
    pub(crate) fn copyable(&self, chunks: &[u64]) -> Option<Copied> {
        let layout = &self.layout;
        if layout.stored_chunk != chunks {
            return None;
        }
        let (shuffle, level) = match layout.pipeline[..] {
            [Stage::Deflate(level)] => (false, level),
            [Stage::Shuffle, Stage::Deflate(level)] => (true, level),
            _ => return None,
        };
        Some(Copied {
            level,
            shuffle,
            big_endian: layout.big_endian,
            item: layout.item,
        })
    }

    /// Where the stored chunks that cover chunk `index` of `array` (whose chunk shape is the
    /// store's, not the source's) are, or `None` when one of them was never written.
    pub(crate) fn pieces(&self, array: &ArrayLayout, index: &[u64]) -> Option<Pieces> {
        let rank = array.shape.len();
        let start: Vec<u64> = index
            .iter()
            .zip(&array.chunks)
            .map(|(i, c)| i * c)
            .collect();
        let count: Vec<u64> = (0..rank)
            .map(|d| array.chunks[d].min(array.shape[d].saturating_sub(start[d])))
            .collect();
        self.pieces_of(start, count, array.chunks.clone())
    }

    /// Where the stored chunks that cover the hyperslab `start`/`count` of the variable are
    /// (its values are then [`Pieces::values`] with no padding), or `None` as for
    /// [`StoredArray::pieces`].
    pub(crate) fn slab(&self, start: &[u64], count: &[u64]) -> Option<Pieces> {
        let inside = start.len() == self.shape.len()
            && count.len() == self.shape.len()
            && (0..start.len()).all(|d| {
                count[d] > 0
                    && start[d]
                        .checked_add(count[d])
                        .is_some_and(|end| end <= self.shape[d])
            });
        if !inside {
            return None;
        }
        self.pieces_of(start.to_vec(), count.to_vec(), count.to_vec())
    }

    /// The stored chunks of the block `start`/`count` of a chunk of shape `chunk`.
    fn pieces_of(&self, start: Vec<u64>, count: Vec<u64>, chunk: Vec<u64>) -> Option<Pieces> {
        let rank = chunk.len();
        let stored = &self.layout.stored_chunk;
        // The stored chunks' grid indices, first and last, along each dimension.
        let first: Vec<u64> = (0..rank).map(|d| start[d] / stored[d]).collect();
        let last: Vec<u64> = (0..rank)
            .map(|d| (start[d] + count[d].max(1) - 1) / stored[d])
            .collect();
        // Many small stored chunks per store chunk, or store chunks much smaller than the
        // stored ones (each would inflate a whole stored chunk again), are read better by
        // the library, which caches what it inflated.
        let count_pieces = (0..rank).try_fold(1u64, |n, d| n.checked_mul(last[d] - first[d] + 1));
        let chunk_bytes: u64 = chunk.iter().product::<u64>() * self.layout.item as u64;
        let stored_bytes = self.layout.stored_len() as u64;
        if count_pieces.is_none_or(|n| n > MAX_PIECES) || stored_bytes > 8 * chunk_bytes.max(1) {
            return None;
        }
        let mut pieces = Vec::new();
        let mut at = first.clone();
        loop {
            let origin: Vec<u64> = at.iter().zip(stored).map(|(i, c)| i * c).collect();
            pieces.push(Piece {
                location: chunk_location(&self.dataset, &origin)?,
                origin,
            });
            if !next_index(&mut at, &first, &last) {
                return Some(Pieces {
                    layout: Arc::clone(&self.layout),
                    start,
                    count,
                    chunk,
                    pieces,
                });
            }
        }
    }
}

/// How the chunks of an array copied from its stored chunks are declared: Zarr v2's `zlib`
/// compressor, after the `shuffle` filter when the source used it, in the stored byte order.
/// numcodecs' `shuffle` and `zlib` are HDF5's shuffle and deflate, byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Copied {
    level: u8,
    shuffle: bool,
    big_endian: bool,
    item: usize,
}

impl Copied {
    /// The `.zarray` compressor.
    pub(crate) fn compressor(self) -> serde_json::Value {
        serde_json::json!({"id": "zlib", "level": self.level})
    }

    /// The `.zarray` filters.
    pub(crate) fn filters(self) -> serde_json::Value {
        if self.shuffle {
            serde_json::json!([{"id": "shuffle", "elementsize": self.item}])
        } else {
            serde_json::Value::Null
        }
    }

    /// The `.zarray` dtype, given the array's little-endian one.
    pub(crate) fn dtype(self, little_endian: &str) -> String {
        match little_endian.strip_prefix('<') {
            Some(rest) if self.big_endian => format!(">{rest}"),
            _ => little_endian.to_string(),
        }
    }

    /// A chunk's values in the machine's byte order, encoded as the array declares (for a
    /// chunk the source never wrote, whose values the NetCDF library gives).
    pub(crate) fn encode(self, mut values: Vec<u8>) -> Vec<u8> {
        if self.big_endian {
            for element in values.chunks_exact_mut(self.item) {
                element.reverse();
            }
        }
        self.encode_stored_order(values)
    }

    /// A chunk's values in the stored byte order, encoded as the array declares.
    fn encode_stored_order(self, values: Vec<u8>) -> Vec<u8> {
        use std::io::Write;
        let shuffled = if self.shuffle {
            shuffle(&values, self.item)
        } else {
            values
        };
        let mut encoder = flate2::write::ZlibEncoder::new(
            Vec::with_capacity(shuffled.len() / 2),
            flate2::Compression::new(u32::from(self.level.min(9))),
        );
        encoder
            .write_all(&shuffled)
            .expect("writing to memory cannot fail");
        encoder.finish().expect("writing to memory cannot fail")
    }
}

/// Where a stored chunk is in the file.
#[derive(Debug, Clone, Copy)]
struct Location {
    address: u64,
    size: u64,
    /// Bit `i` set: the filter at position `i` of the pipeline was not applied.
    filter_mask: u32,
}

/// The location of the stored chunk whose first element is at `origin`, or `None` when it
/// was never written (or the library cannot say).
#[allow(unsafe_code)]
fn chunk_location(dataset: &hdf5::Dataset, origin: &[u64]) -> Option<Location> {
    let mut filter_mask = 0;
    let mut address = 0;
    let mut size = 0;
    // SAFETY: `dataset` is an open dataset for as long as it is borrowed; `origin` holds one
    // coordinate per dimension of it (checked by the caller against its shape), which is
    // what the function reads; the three out-pointers are to live locals. The call is made
    // under the library's lock, which every other HDF5 and NetCDF call of the process takes.
    let status = hdf5::sync::sync(|| unsafe {
        hdf5_metno_sys::h5d::H5Dget_chunk_info_by_coord(
            dataset.id(),
            origin.as_ptr(),
            &mut filter_mask,
            &mut address,
            &mut size,
        )
    });
    (status >= 0 && address != hdf5_metno_sys::h5::HADDR_UNDEF && size > 0).then_some(Location {
        address,
        size,
        filter_mask,
    })
}

/// One stored chunk that a store chunk needs.
#[derive(Debug)]
struct Piece {
    /// Its first element's position in the variable.
    origin: Vec<u64>,
    location: Location,
}

impl Piece {
    /// A sentence naming this stored chunk and `why` it could not be read.
    fn failed(&self, why: &dyn std::fmt::Display) -> String {
        format!(
            "stored chunk at {:?} (byte {} of the file): {why}",
            self.origin, self.location.address
        )
    }
}

/// The stored chunks that make one store chunk, and where it lies in them.
#[derive(Debug)]
pub(crate) struct Pieces {
    layout: Arc<Layout>,
    /// The store chunk's first element, its extent inside the variable, and its full shape.
    start: Vec<u64>,
    count: Vec<u64>,
    chunk: Vec<u64>,
    pieces: Vec<Piece>,
}

impl Pieces {
    /// The store chunk's values in C order and the machine's byte order, zeros past the
    /// variable's edges: the bytes [`super::write::chunk_values`] gives for it.
    ///
    /// # Errors
    /// A sentence saying which stored chunk could not be read or decoded.
    pub(crate) fn values(&self, file: &std::fs::File) -> Result<Vec<u8>, String> {
        self.values_on(file, 1)
    }

    /// [`Pieces::values`], the stored chunks read and decoded on `threads` threads (for a
    /// caller that has the cores to itself, such as the reader of an aggregated store).
    ///
    /// # Errors
    /// As [`Pieces::values`].
    pub(crate) fn values_on(
        &self,
        file: &std::fs::File,
        threads: usize,
    ) -> Result<Vec<u8>, String> {
        let layout = &*self.layout;
        let item = layout.item;
        let rank = self.chunk.len();
        if threads > 1 && self.pieces.len() > 1 {
            // Each thread decodes its share one stored chunk at a time and places it at once,
            // so no more than one decoded chunk per thread is held besides the slab.
            let total: u64 = self.chunk.iter().product();
            let out = std::sync::Mutex::new(vec![0u8; to_usize(total) * item]);
            let share = self.pieces.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let workers: Vec<_> = self
                    .pieces
                    .chunks(share)
                    .map(|part| {
                        let out = &out;
                        scope.spawn(move || -> Result<(), String> {
                            for piece in part {
                                let bytes = self.native(piece, file)?;
                                let mut out = out
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                                self.place(&bytes, &piece.origin, &mut out, rank);
                            }
                            Ok(())
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .try_for_each(|w| w.join().unwrap_or_else(|_| Err("decoding panicked".into())))
            })?;
            return Ok(out
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
        // A store chunk that is one whole stored chunk (the common case: a plan of one time
        // step per chunk over a file stored that way) is the decoded chunk as it is.
        let whole = matches!(&self.pieces[..], [piece] if piece.origin == self.start)
            && self.count == layout.stored_chunk
            && self.chunk == layout.stored_chunk;
        let total: u64 = self.chunk.iter().product();
        let mut out = if whole {
            Vec::new()
        } else {
            vec![0u8; to_usize(total) * item]
        };
        for piece in &self.pieces {
            let bytes = self.native(piece, file)?;
            if whole {
                return Ok(bytes);
            }
            self.place(&bytes, &piece.origin, &mut out, rank);
        }
        Ok(out)
    }

    /// The values of one stored chunk, read, decoded and in the machine's byte order.
    fn native(&self, piece: &Piece, file: &std::fs::File) -> Result<Vec<u8>, String> {
        let layout = &*self.layout;
        let mut bytes = layout.decoded(piece, file)?;
        if layout.big_endian {
            for element in bytes.chunks_exact_mut(layout.item) {
                element.reverse();
            }
        }
        Ok(bytes)
    }

    /// The store chunk of an array whose stored chunks are copied ([`Copied`]): the one
    /// stored chunk's bytes as they are, or, when the writer skipped a filter for it,
    /// decoded and encoded again as the array declares.
    ///
    /// # Errors
    /// As [`Pieces::values`].
    pub(crate) fn copied(&self, file: &std::fs::File, copied: &Copied) -> Result<Vec<u8>, String> {
        let [piece] = &self.pieces[..] else {
            return Err(format!(
                "{} stored chunks for one copied chunk",
                self.pieces.len()
            ));
        };
        let bytes = self.layout.stored(piece, file)?;
        if piece.location.filter_mask == 0 {
            // Not inflated (that is the point), but at least a zlib stream's header: a wrong
            // address or a damaged file fails the conversion rather than a reader later.
            if !matches!(bytes[..], [method, flags, ..] if method & 0x0f == 8 && (u16::from(method) << 8 | u16::from(flags)) % 31 == 0)
            {
                return Err(piece.failed(&"not a zlib stream"));
            }
            return Ok(bytes);
        }
        let decoded = self.layout.undo_filters(piece, bytes)?;
        Ok(copied.encode_stored_order(decoded))
    }

    /// Copies the part of the stored chunk `bytes` (first element at `origin`) that lies in
    /// the store chunk into `out`, row by row along the last dimension.
    fn place(&self, bytes: &[u8], origin: &[u64], out: &mut [u8], rank: usize) {
        let stored = &self.layout.stored_chunk;
        let item = self.layout.item as u64;
        let low: Vec<u64> = (0..rank).map(|d| origin[d].max(self.start[d])).collect();
        let high: Vec<u64> = (0..rank)
            .map(|d| (origin[d] + stored[d]).min(self.start[d] + self.count[d]))
            .collect();
        if (0..rank).any(|d| low[d] >= high[d]) {
            return;
        }
        let strides = |shape: &[u64]| {
            let mut strides = vec![1u64; rank];
            for d in (0..rank - 1).rev() {
                strides[d] = strides[d + 1] * shape[d + 1];
            }
            strides
        };
        let (from_strides, to_strides) = (strides(stored), strides(&self.chunk));
        let row = to_usize((high[rank - 1] - low[rank - 1]) * item);
        let mut at = low.clone();
        loop {
            let from: u64 = (0..rank)
                .map(|d| (at[d] - origin[d]) * from_strides[d])
                .sum();
            let to: u64 = (0..rank)
                .map(|d| (at[d] - self.start[d]) * to_strides[d])
                .sum();
            let (from, to) = (to_usize(from * item), to_usize(to * item));
            out[to..to + row].copy_from_slice(&bytes[from..from + row]);
            if !next_row(&mut at, &low, &high) {
                return;
            }
        }
    }
}

/// Inflates a zlib stream of `expected` bytes, stopping one byte past them (a stream that
/// inflates to more is refused by the caller's length check, not followed).
pub(super) fn inflate(compressed: &[u8], expected: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(expected);
    flate2::read::ZlibDecoder::new(compressed)
        .take(expected as u64 + 1)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// HDF5's byte shuffle of `values` as `item`-byte elements: every element's first byte,
/// then every second byte, and so on (a tail that is not a whole element stays last).
fn shuffle(values: &[u8], item: usize) -> Vec<u8> {
    if item <= 1 {
        return values.to_vec();
    }
    let elements = values.len() / item;
    let mut out = Vec::with_capacity(values.len());
    for byte in 0..item {
        out.extend(values[..elements * item].iter().skip(byte).step_by(item));
    }
    out.extend_from_slice(&values[elements * item..]);
    out
}

/// Undoes HDF5's byte shuffle: the bytes were stored as all elements' first bytes, then all
/// second bytes, and so on (a tail that is not a whole element stays as it is).
pub(super) fn unshuffle(shuffled: &[u8], item: usize) -> Vec<u8> {
    match item {
        2 => unshuffle_items::<2>(shuffled),
        4 => unshuffle_items::<4>(shuffled),
        8 => unshuffle_items::<8>(shuffled),
        // One-byte elements are stored as they are.
        0 | 1 => shuffled.to_vec(),
        item if shuffled.len() < item => shuffled.to_vec(),
        item => {
            let elements = shuffled.len() / item;
            let mut out = vec![0u8; shuffled.len()];
            for (byte, plane) in shuffled[..elements * item]
                .chunks_exact(elements)
                .enumerate()
            {
                for (element, value) in plane.iter().enumerate() {
                    out[element * item + byte] = *value;
                }
            }
            out[elements * item..].copy_from_slice(&shuffled[elements * item..]);
            out
        }
    }
}

/// [`unshuffle`] for `N`-byte elements: one element at a time from the `N` byte planes, so
/// the compiler keeps every plane's position in a register.
fn unshuffle_items<const N: usize>(shuffled: &[u8]) -> Vec<u8> {
    let elements = shuffled.len() / N;
    let planes: [&[u8]; N] =
        std::array::from_fn(|byte| &shuffled[byte * elements..(byte + 1) * elements]);
    let mut out = Vec::with_capacity(shuffled.len());
    // The element index picks one byte from each of the `N` planes.
    #[allow(clippy::needless_range_loop)]
    for element in 0..elements {
        let bytes: [u8; N] = std::array::from_fn(|byte| planes[byte][element]);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(&shuffled[elements * N..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflating_stops_past_the_expected_length() {
        use std::io::Write;
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
        encoder.write_all(&[7u8; 100_000]).unwrap();
        let bomb = encoder.finish().unwrap();
        assert_eq!(inflate(&bomb, 100_000).unwrap().len(), 100_000);
        assert_eq!(inflate(&bomb, 10).unwrap().len(), 11);
    }

    #[test]
    fn unshuffle_reverses_the_byte_planes() {
        // Two 4-byte elements 0x01020304 and 0x05060708 (as bytes), shuffled.
        let shuffled = [1, 5, 2, 6, 3, 7, 4, 8, 9];
        assert_eq!(unshuffle(&shuffled, 4), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(unshuffle(&[1, 3, 2, 4], 2), [1, 2, 3, 4]);
        let wide: Vec<u8> = (0..16).collect();
        let shuffled: Vec<u8> = (0..8).flat_map(|b| [b, b + 8]).collect();
        assert_eq!(unshuffle(&shuffled, 8), wide);
        assert_eq!(unshuffle(&[1, 2, 3], 1), [1, 2, 3]);
        for item in [1, 2, 4, 8, 16] {
            let values: Vec<u8> = (0..67).collect();
            assert_eq!(unshuffle(&shuffle(&values, item), item), values, "{item}");
        }
    }
}
