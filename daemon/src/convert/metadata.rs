//! The Zarr v2 metadata of a store converted from one NetCDF file, built in memory before any
//! chunk is written (so a store opens while its data is still being written, and its metadata
//! is served from memory).
//!
//! What it holds (DECISIONS, "Data portal"):
//! - a root `.zgroup` and `.zattrs` always, also when the file has groups; each NetCDF group
//!   becomes a Zarr group of the same name with its own `.zgroup` and `.zattrs`;
//! - for every variable, coordinates included, `<path>/.zarray` and `<path>/.zattrs`; the
//!   attributes are the variable's, undecoded (`scale_factor`, `units`, `calendar` stay
//!   attributes, packed integers stay integers), without `_FillValue`, which becomes the
//!   array's `fill_value`, and with `_ARRAY_DIMENSIONS`;
//! - chunks from the [`plan`](super::plan) for data variables, one chunk for a coordinate (a
//!   variable named like its only dimension) and for a 0-d variable;
//! - the consolidated `.zmetadata` of all of the above.
//!
//! Non-finite numbers are not JSON: a NaN or infinite attribute value or fill value is written
//! as the string `"NaN"`, `"Infinity"` or `"-Infinity"`, as zarr writes fill values, so every
//! document is valid JSON that Python's `json` and both zarr-python versions read.

use netcdf::types::{FloatType, IntType, NcVariableType};
use netcdf::{AttributeValue, Variable};
use serde_json::{Map, Value, json};

use super::plan::{self, DataVar, Dim};
use super::stored::{Copied, StoredFile};
use crate::stores::request::Chunking;

/// The element type of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dtype {
    /// An integer of NetCDF's widths.
    Int(IntType),
    /// A float.
    Float(FloatType),
    /// A NetCDF `char`: one byte, `|S1`.
    Char,
    /// A NetCDF-4 `string`: `|O` with the `vlen-utf8` filter, as xarray writes strings.
    String,
}

impl Dtype {
    fn of(variable: &Variable) -> Result<Self, String> {
        match variable.vartype() {
            NcVariableType::Int(int) => Ok(Dtype::Int(int)),
            NcVariableType::Float(float) => Ok(Dtype::Float(float)),
            NcVariableType::Char => Ok(Dtype::Char),
            NcVariableType::String => Ok(Dtype::String),
            other => Err(format!(
                "variable {:?} has the NetCDF type {other:?}, which cannot be converted yet",
                variable.name()
            )),
        }
    }

    /// The numpy type string of the array (little-endian: the bytes NetCDF hands out are in
    /// the machine's order, and every supported machine is little-endian).
    pub(crate) fn zarr(self) -> &'static str {
        match self {
            Dtype::Int(IntType::I8) => "|i1",
            Dtype::Int(IntType::U8) => "|u1",
            Dtype::Int(IntType::I16) => "<i2",
            Dtype::Int(IntType::U16) => "<u2",
            Dtype::Int(IntType::I32) => "<i4",
            Dtype::Int(IntType::U32) => "<u4",
            Dtype::Int(IntType::I64) => "<i8",
            Dtype::Int(IntType::U64) => "<u8",
            Dtype::Float(FloatType::F32) => "<f4",
            Dtype::Float(FloatType::F64) => "<f8",
            Dtype::Char => "|S1",
            Dtype::String => "|O",
        }
    }

    /// Bytes per element (for a string, numpy's size of an object reference, which is what
    /// the chunk plan counts).
    pub(crate) fn size(self) -> u64 {
        match self {
            Dtype::Int(IntType::I8 | IntType::U8) | Dtype::Char => 1,
            Dtype::Int(IntType::I16 | IntType::U16) => 2,
            Dtype::Int(IntType::I32 | IntType::U32) | Dtype::Float(FloatType::F32) => 4,
            Dtype::Int(IntType::I64 | IntType::U64)
            | Dtype::Float(FloatType::F64)
            | Dtype::String => 8,
        }
    }

    /// The `.zarray` filters: `vlen-utf8` for strings, none otherwise.
    fn filters(self) -> Value {
        match self {
            Dtype::String => json!([{"id": "vlen-utf8"}]),
            _ => Value::Null,
        }
    }
}

/// One array of a store and where its values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArrayLayout {
    /// Its path in the store (`tas`, `ocean/thetao`).
    pub(crate) path: String,
    /// The NetCDF groups that hold the variable, outermost first (empty: the root).
    pub(crate) groups: Vec<String>,
    /// The variable's name in its group.
    pub(crate) variable: String,
    /// Element type.
    pub(crate) dtype: Dtype,
    /// Shape (empty for a 0-d variable).
    pub(crate) shape: Vec<u64>,
    /// Chunk shape (empty for a 0-d variable).
    pub(crate) chunks: Vec<u64>,
    /// How its chunks are declared when they are the source's stored chunks, copied as they
    /// are (none: decoded and encoded with the store's compressor).
    pub(crate) copied: Option<Copied>,
}

/// The metadata of a store and the layout of its arrays.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoreLayout {
    /// Metadata documents by key, in the order `.zmetadata` lists them.
    pub(crate) documents: Map<String, Value>,
    /// The arrays, in file order (root first, then each group depth-first).
    pub(crate) arrays: Vec<ArrayLayout>,
    /// The chunks of those arrays, in all.
    chunk_total: u64,
}

impl StoreLayout {
    /// A layout with only the root group, whose attributes are `attrs`.
    pub(super) fn root(attrs: Map<String, Value>) -> Self {
        let mut documents = Map::new();
        documents.insert(".zgroup".into(), json!({"zarr_format": 2}));
        documents.insert(".zattrs".into(), Value::Object(attrs));
        StoreLayout {
            documents,
            arrays: Vec::new(),
            chunk_total: 0,
        }
    }

    /// Fails when `more` arrays would make more than [`MAX_ARRAYS`].
    fn room_for(&self, more: usize) -> Result<(), String> {
        if self.arrays.len().saturating_add(more) > MAX_ARRAYS {
            return Err(format!(
                "more than {MAX_ARRAYS} variables, more than a store of this service holds"
            ));
        }
        Ok(())
    }

    /// Claims `path` (an array's or a group's) for `what`, named in the error: two
    /// variables or groups of the sources that the store would name alike would write into
    /// one another's keys, the later silently replacing the earlier.
    pub(super) fn claim(&self, path: &str, what: &str) -> Result<(), String> {
        let taken = [".zarray", ".zgroup"]
            .iter()
            .any(|document| self.documents.contains_key(&format!("{path}/{document}")));
        if taken {
            return Err(format!(
                "{what} would be the store's {path:?}, which another variable or group of the \
                 source already is"
            ));
        }
        Ok(())
    }

    /// The consolidated metadata document (`.zmetadata`).
    pub(crate) fn consolidated(&self) -> Value {
        consolidated(&self.documents)
    }
}

/// The consolidated metadata (`.zmetadata`) of a store whose documents are `documents`.
pub(crate) fn consolidated(documents: &Map<String, Value>) -> Value {
    json!({
        "zarr_consolidated_format": 1,
        "metadata": documents,
    })
}

/// Builds the layout of the store converted from `file` with `chunking`, compressing chunks
/// with `compressor` (a numcodecs configuration), except those of a variable whose stored
/// chunks (`stored`, for a NetCDF-4 file) are store chunks in a form Zarr reads: those are
/// copied.
///
/// # Errors
/// A sentence naming the variable or attribute that cannot be converted.
pub(crate) fn layout(
    file: &netcdf::File,
    stored: Option<&StoredFile>,
    chunking: &Chunking,
    compressor: &Value,
) -> Result<StoreLayout, String> {
    let budget = MetadataBudget::new();
    let mut layout = StoreLayout::root(attributes(file.attributes(), "the file", &budget)?);
    let scope = Scope {
        stored,
        chunking,
        compressor,
        budget: &budget,
    };
    let variables: Vec<Variable> = file.variables().collect();
    scope.arrays(&variables, &[], &mut layout)?;
    if let Some(root) = file.root() {
        for group in root.groups() {
            scope.group(&group, &[], &mut layout)?;
        }
    }
    Ok(layout)
}

/// The longest chunk of a coordinate, in elements (32 MiB of 64-bit values): a coordinate is
/// one chunk, as xarray writes it, unless it is longer (a file may claim any length).
const MAX_COORDINATE_CHUNK: u64 = 1 << 22;

/// The most arrays one store may have (a file may hold a million variables; laying out
/// and serving the metadata of each costs time and memory, and no dataset of this field
/// comes close).
const MAX_ARRAYS: usize = 100_000;

/// The most chunks one store may have: a file may claim dimensions whose chunks would
/// never end being written.
const MAX_STORE_CHUNKS: u64 = 20_000_000;

/// The largest chunk of a store, in bytes of values (of its strings, their text and 8 bytes
/// each: [`super::write::most_string_bytes`]): the largest `chunk_size` (512 MiB) with the
/// plan's overshoot, and then some. A variable that runs along one dimension
/// several times (`v(time, time, time)`, which NetCDF allows) can make a plan's chunk far
/// larger, and reading it would take more memory than there is.
pub(crate) const MAX_CHUNK_BYTES: u64 = 1 << 30;

/// The number of chunks of an array of `shape` in chunks of `chunks`.
fn chunk_count(shape: &[u64], chunks: &[u64]) -> u64 {
    shape
        .iter()
        .zip(chunks)
        .map(|(len, chunk)| len.div_ceil((*chunk).max(1)))
        .fold(1u64, u64::saturating_mul)
}

/// What every array of one store shares.
struct Scope<'a> {
    stored: Option<&'a StoredFile>,
    chunking: &'a Chunking,
    compressor: &'a Value,
    /// What the metadata read (attributes and variables) may still take.
    budget: &'a MetadataBudget,
}

/// `name`, a group's or a variable's name in the source, as one segment of the store's keys.
/// Refused when it is empty, starts with `.`, holds `/` or a control character (NUL among
/// them), or is longer than a file name may be (255 bytes): such a segment would lead out of
/// the store's directory (`..`), into another user's store below it, onto a metadata
/// document's place (`.zattrs`), or make keys that cannot be written, listed or archived.
/// netCDF-C never makes such names, but an HDF5 file may hold them (h5py names a group
/// `..`), and netCDF-C reads them.
///
/// # Errors
/// A sentence naming the `kind` (group or variable), the group it is in (`parent`, the
/// file's root when empty) and the name.
pub(crate) fn key_segment(name: String, kind: &str, parent: &str) -> Result<String, String> {
    if name.is_empty()
        || name.starts_with('.')
        || name.contains('/')
        || name.chars().any(char::is_control)
        || name.len() > 255
    {
        let place = if parent.is_empty() {
            format!("a {kind} of the file")
        } else {
            format!("a {kind} in group {parent:?}")
        };
        return Err(format!(
            "{place} is named {name:?}, which a store cannot hold: a name must not be empty, \
             start with '.', contain '/' or a control character, or be longer than 255 bytes"
        ));
    }
    Ok(name)
}

impl Scope<'_> {
    fn group(
        &self,
        group: &netcdf::Group,
        parents: &[String],
        layout: &mut StoreLayout,
    ) -> Result<(), String> {
        let mut path = parents.to_vec();
        path.push(key_segment(group.name(), "group", &parents.join("/"))?);
        let prefix = path.join("/");
        layout.claim(&prefix, &format!("group {prefix:?}"))?;
        layout
            .documents
            .insert(format!("{prefix}/.zgroup"), json!({"zarr_format": 2}));
        let attrs = attributes(
            group.attributes(),
            &format!("group {prefix:?}"),
            self.budget,
        )?;
        layout
            .documents
            .insert(format!("{prefix}/.zattrs"), Value::Object(attrs));
        let variables: Vec<Variable> = group.variables().collect();
        self.arrays(&variables, &path, layout)?;
        for child in group.groups() {
            self.group(&child, &path, layout)?;
        }
        Ok(())
    }

    /// The arrays of the variables of one group, chunked by one plan.
    fn arrays(
        &self,
        variables: &[Variable],
        groups: &[String],
        layout: &mut StoreLayout,
    ) -> Result<(), String> {
        layout.room_for(variables.len())?;
        let prefix = groups.join("/");
        let variables = variables
            .iter()
            .map(|variable| VarInfo::of(variable, &prefix, self.budget))
            .collect::<Result<Vec<_>, _>>()?;
        self.lay_out(&variables, groups, layout)
    }

    /// The arrays of `variables`, the variables of one group (`groups`, outermost first;
    /// empty: the root), chunked by one plan over the group's dimensions in order of first
    /// use.
    fn lay_out(
        &self,
        variables: &[VarInfo],
        groups: &[String],
        layout: &mut StoreLayout,
    ) -> Result<(), String> {
        layout.room_for(variables.len())?;
        let mut dims: Vec<Dim> = Vec::new();
        // Where each dimension is in `dims`, by name (a file may have a million).
        let mut dim_at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut data_vars = Vec::new();
        let mut kinds = Vec::with_capacity(variables.len());
        for variable in variables {
            let mut indexes = Vec::new();
            for dimension in &variable.dims {
                let index = *dim_at.entry(dimension.name.as_str()).or_insert_with(|| {
                    dims.push(dimension.clone());
                    dims.len() - 1
                });
                indexes.push(index);
            }
            let coordinate = variable.is_coordinate();
            if !coordinate && !indexes.is_empty() {
                data_vars.push(DataVar {
                    dims: indexes.clone(),
                    item_size: variable.dtype.size(),
                });
            }
            kinds.push((indexes, coordinate));
        }
        let planned = plan::plan(&dims, &data_vars, self.chunking);
        for (variable, (indexes, coordinate)) in variables.iter().zip(kinds) {
            let dtype = variable.dtype;
            let shape: Vec<u64> = variable.dims.iter().map(|d| d.len).collect();
            let chunks: Vec<u64> = if coordinate {
                shape
                    .iter()
                    .map(|&len| len.clamp(1, MAX_COORDINATE_CHUNK))
                    .collect()
            } else {
                indexes.iter().map(|&d| planned[d]).collect()
            };
            let chunk_bytes = chunks
                .iter()
                .fold(dtype.size(), |bytes, &len| bytes.saturating_mul(len));
            if chunk_bytes > MAX_CHUNK_BYTES {
                return Err(format!(
                    "variable {:?} would be stored in chunks of {chunks:?}, {} MiB each, more \
                     than the {} MiB a chunk may hold (a variable that runs along one \
                     dimension more than once?); a smaller map_primary_chunksize or \
                     chunk_size makes smaller ones",
                    variable.name,
                    chunk_bytes >> 20,
                    MAX_CHUNK_BYTES >> 20
                ));
            }
            let name = variable.name.clone();
            let path = if groups.is_empty() {
                name.clone()
            } else {
                format!("{}/{name}", groups.join("/"))
            };
            let mut attrs = variable.attrs.clone();
            let dimension_names: Vec<&str> =
                variable.dims.iter().map(|d| d.name.as_str()).collect();
            attrs.insert("_ARRAY_DIMENSIONS".into(), json!(dimension_names));
            let mut array = ArrayLayout {
                path,
                groups: groups.to_vec(),
                variable: name,
                dtype,
                shape,
                chunks,
                copied: None,
            };
            array.copied = self
                .stored
                .and_then(|stored| stored.array(&array))
                .and_then(|stored| stored.copyable(&array.chunks));
            let (compressor, filters, zarr_dtype) = match array.copied {
                Some(copied) => (
                    copied.compressor(),
                    copied.filters(),
                    copied.dtype(dtype.zarr()),
                ),
                None => (
                    self.compressor.clone(),
                    dtype.filters(),
                    dtype.zarr().to_string(),
                ),
            };
            layout.claim(&array.path, &format!("variable {:?}", array.path))?;
            layout.documents.insert(
                format!("{}/.zarray", array.path),
                json!({
                    "compressor": compressor,
                    "filters": filters,
                    "chunks": array.chunks,
                    "dtype": zarr_dtype,
                    "fill_value": variable.fill_value,
                    "order": "C",
                    "shape": array.shape,
                    "zarr_format": 2,
                }),
            );
            layout
                .documents
                .insert(format!("{}/.zattrs", array.path), Value::Object(attrs));
            layout.chunk_total = layout
                .chunk_total
                .saturating_add(chunk_count(&array.shape, &array.chunks));
            layout.arrays.push(array);
            if layout.chunk_total > MAX_STORE_CHUNKS {
                let last = layout.arrays.last().expect("just pushed");
                return Err(format!(
                    "the store would have more than {MAX_STORE_CHUNKS} chunks (variable {:?} \
                     of shape {:?} in chunks of {:?}); a larger chunk_size or \
                     map_primary_chunksize makes fewer",
                    variable.name, last.shape, last.chunks
                ));
            }
        }
        Ok(())
    }
}

/// A variable as a store lays it out: what its metadata and the chunk plan need, read from
/// one source file or combined from several ([`super::combine`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VarInfo {
    /// Its name in its group.
    pub(crate) name: String,
    /// Its dimensions, in its order.
    pub(crate) dims: Vec<Dim>,
    /// Element type.
    pub(crate) dtype: Dtype,
    /// Its attributes, undecoded, without `_FillValue` (which is `fill_value`).
    pub(crate) attrs: Map<String, Value>,
    /// The array's `fill_value`: its `_FillValue`, or null.
    pub(crate) fill_value: Value,
    /// The types of its `scale_factor` and `add_offset` attributes, which decide the type
    /// CF decoding gives it (see [`super::reduce`]).
    pub(crate) packing: Packing,
}

/// The types of a variable's packing attributes (`None`: absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Packing {
    /// `scale_factor`.
    pub(crate) scale: Option<Dtype>,
    /// `add_offset`.
    pub(crate) offset: Option<Dtype>,
}

impl VarInfo {
    /// The variable `variable` of the group `prefix` (empty: the root), for messages.
    ///
    /// # Errors
    /// A sentence naming the variable or attribute that cannot be converted.
    pub(crate) fn of(
        variable: &Variable,
        prefix: &str,
        budget: &MetadataBudget,
    ) -> Result<Self, String> {
        let name = key_segment(variable.name(), "variable", prefix)?;
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let dtype = Dtype::of(variable)?;
        let dims: Vec<Dim> = variable
            .dimensions()
            .iter()
            .map(|dimension| Dim {
                name: dimension.name(),
                len: dimension.len() as u64,
            })
            .collect();
        budget.take_variable(&path, &dims)?;
        // Without `_FillValue`, null (for a string array too, as xarray writes it).
        let fill_value = match variable.attribute_value("_FillValue") {
            Some(value) => {
                let value = value.map_err(|e| format!("{path}: _FillValue: {e}"))?;
                fill_value(&value, dtype)
            }
            None => Value::Null,
        };
        let attrs = attributes(
            variable.attributes().filter(|a| a.name() != "_FillValue"),
            &format!("variable {path:?}"),
            budget,
        )?;
        let attribute_type = |name: &str| {
            variable
                .attribute_value(name)
                .and_then(Result::ok)
                .and_then(|value| attribute_type(&value))
        };
        Ok(VarInfo {
            name,
            dims,
            dtype,
            attrs,
            fill_value,
            packing: Packing {
                scale: attribute_type("scale_factor"),
                offset: attribute_type("add_offset"),
            },
        })
    }

    /// Whether it is a coordinate: a variable named like its only dimension.
    pub(crate) fn is_coordinate(&self) -> bool {
        self.dims.len() == 1 && self.dims[0].name == self.name
    }
}

/// A group of a store combined from several sources: its path (empty: the root), its
/// attributes and its variables.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupInfo {
    /// The group's name below the root (empty: the root itself).
    pub(crate) name: String,
    /// Its attributes.
    pub(crate) attrs: Map<String, Value>,
    /// Its variables, in order.
    pub(crate) vars: Vec<VarInfo>,
}

/// Builds the layout of a store whose groups are `groups` (combined from several sources:
/// none of its chunks is a stored chunk of a source), chunked by `chunking` and compressed
/// with `compressor`. The root group has no attributes when it is not one of `groups`.
///
/// # Errors
/// A sentence naming the variable that cannot be laid out.
pub(crate) fn layout_of_groups(
    groups: &[GroupInfo],
    chunking: &Chunking,
    compressor: &Value,
) -> Result<StoreLayout, String> {
    let root_attrs = groups
        .iter()
        .find(|g| g.name.is_empty())
        .map(|g| g.attrs.clone())
        .unwrap_or_default();
    let mut layout = StoreLayout::root(root_attrs);
    // The attributes and variables were read (and counted) with the sources.
    let budget = MetadataBudget::new();
    let scope = Scope {
        stored: None,
        chunking,
        compressor,
        budget: &budget,
    };
    for group in groups {
        let path: Vec<String> = if group.name.is_empty() {
            Vec::new()
        } else {
            layout.claim(&group.name, &format!("group {:?}", group.name))?;
            layout
                .documents
                .insert(format!("{}/.zgroup", group.name), json!({"zarr_format": 2}));
            layout.documents.insert(
                format!("{}/.zattrs", group.name),
                Value::Object(group.attrs.clone()),
            );
            vec![group.name.clone()]
        };
        scope.lay_out(&group.vars, &path, &mut layout)?;
    }
    Ok(layout)
}

/// The most values one attribute may hold. A file's header may give an attribute billions
/// of values (in a hole of a sparse file, they take no disk); as JSON each takes some 32
/// bytes or more, and a failed allocation ends the daemon.
const MAX_ATTRIBUTE_VALUES: usize = 1 << 20;

/// The longest text attribute, in bytes.
const MAX_ATTRIBUTE_TEXT: usize = 16 << 20;

/// What the metadata of one conversion's sources may take in memory, in all, in bytes: its
/// attributes as JSON (a value counted as 32, a byte of text as 1) and its variables (each
/// counted as [`VARIABLE_COST`], its dimensions as 32 each, with the bytes of their names).
/// A file may hold thousands of attributes each just under the bounds above, and an
/// aggregation reads the variables of every one of its sources (1,000 files of 100,000
/// variables each are a hundred million) before it combines them.
const MAX_METADATA_BYTES: usize = 256 << 20;

/// The longest consolidated metadata (`.zmetadata`) a store may have, in bytes. A
/// conversion whose metadata would be longer fails, and the daemon reads no longer one (what
/// is in a store's directory was written by a process that read a user's file:
/// [`super::child`]). The daemon parses it to serve its documents, which takes up to some
/// 16 times its length (a list of small numbers, a 32-byte value for each 2 bytes of text):
/// 16 MiB hold the metadata of 20,000 arrays with their attributes, far more than the
/// datasets of this field have, and parse within 256 MiB.
pub(crate) const MAX_CONSOLIDATED_BYTES: u64 = 16 << 20;

/// What one variable's description takes, besides its names and attributes (about what it
/// takes in memory, and then some for what combining sources does with it): 256 MiB hold a
/// million variables, of all the sources of a conversion together.
const VARIABLE_COST: usize = 256;

/// What describing one slab of a source takes (a variable's part of a combined variable,
/// [`super::combine::Piece`]): about its size in memory.
const SLAB_COST: usize = 64;

/// What is left of [`MAX_METADATA_BYTES`] for the metadata of one conversion.
pub(crate) struct MetadataBudget {
    left: std::cell::Cell<usize>,
    total: usize,
}

impl MetadataBudget {
    /// The whole budget.
    pub(crate) fn new() -> Self {
        Self::of(MAX_METADATA_BYTES)
    }

    /// A budget of `bytes`.
    pub(crate) fn of(bytes: usize) -> Self {
        MetadataBudget {
            left: std::cell::Cell::new(bytes),
            total: bytes,
        }
    }

    /// Takes what an attribute of `values` values and `text` bytes of text takes; `false`
    /// when there is not that much left.
    fn take(&self, values: usize, text: usize) -> bool {
        self.take_bytes(values.saturating_mul(32).saturating_add(text))
    }

    /// Takes what the description of a variable named `name` along `dims` takes.
    ///
    /// # Errors
    /// A sentence naming the variable (`path`), when there is not that much left.
    fn take_variable(&self, path: &str, dims: &[Dim]) -> Result<(), String> {
        let cost = dims
            .iter()
            .map(|dim| 32usize.saturating_add(dim.name.len()))
            .fold(
                VARIABLE_COST.saturating_add(path.len()),
                usize::saturating_add,
            );
        if self.take_bytes(cost) {
            Ok(())
        } else {
            Err(format!("variable {path:?}: {}", self.exhausted()))
        }
    }

    /// Takes what describing `count` slabs of the sources takes ([`SLAB_COST`] each).
    ///
    /// # Errors
    /// A sentence saying so, when there is not that much left.
    pub(crate) fn take_slabs(&self, count: usize) -> Result<(), String> {
        if self.take_bytes(count.saturating_mul(SLAB_COST)) {
            Ok(())
        } else {
            Err(format!(
                "{count} slabs of the sources: {}",
                self.exhausted()
            ))
        }
    }

    /// What is left.
    pub(crate) fn left(&self) -> usize {
        self.left.get()
    }

    /// Gives back what was taken since [`MetadataBudget::left`] said `left`.
    pub(crate) fn give_back(&self, left: usize) {
        self.left.set(self.left.get().max(left));
    }

    fn take_bytes(&self, cost: usize) -> bool {
        match self.left.get().checked_sub(cost) {
            Some(left) => {
                self.left.set(left);
                true
            }
            None => false,
        }
    }

    /// Why a conversion whose budget ran out fails.
    fn exhausted(&self) -> String {
        format!(
            "the metadata of the sources (their variables and attributes, and the slabs \
             combining them describes) takes more than the {} MiB it may take in all (a \
             variable counts as {VARIABLE_COST} bytes and its names, a slab as {SLAB_COST})",
            self.total >> 20
        )
    }
}

/// Attributes as a JSON object, in file order.
///
/// # Errors
/// An attribute that cannot be read, or holds more than [`MAX_ATTRIBUTE_VALUES`] values or
/// [`MAX_ATTRIBUTE_TEXT`] bytes of text, named with `owner`.
pub(crate) fn attributes<'a>(
    attributes: impl Iterator<Item = netcdf::Attribute<'a>>,
    owner: &str,
    budget: &MetadataBudget,
) -> Result<Map<String, Value>, String> {
    attributes
        .map(|attribute| {
            let failed =
                |what: String| format!("{owner}: attribute {:?}: {what}", attribute.name());
            let value = attribute.value().map_err(|e| failed(e.to_string()))?;
            let (values, text) = attribute_size(&value);
            if values > MAX_ATTRIBUTE_VALUES || text > MAX_ATTRIBUTE_TEXT {
                return Err(failed(format!(
                    "{values} values and {text} bytes of text, more than an attribute may \
                     hold here ({MAX_ATTRIBUTE_VALUES} values, {MAX_ATTRIBUTE_TEXT} bytes)"
                )));
            }
            if !budget.take(values, text) {
                return Err(failed(budget.exhausted()));
            }
            Ok((attribute.name().to_string(), attribute_json(value)))
        })
        .collect()
}

/// How many values an attribute holds, and its bytes of text.
fn attribute_size(value: &AttributeValue) -> (usize, usize) {
    match value {
        AttributeValue::Uchars(v) => (v.len(), 0),
        AttributeValue::Schars(v) => (v.len(), 0),
        AttributeValue::Ushorts(v) => (v.len(), 0),
        AttributeValue::Shorts(v) => (v.len(), 0),
        AttributeValue::Uints(v) => (v.len(), 0),
        AttributeValue::Ints(v) => (v.len(), 0),
        AttributeValue::Ulonglongs(v) => (v.len(), 0),
        AttributeValue::Longlongs(v) => (v.len(), 0),
        AttributeValue::Floats(v) => (v.len(), 0),
        AttributeValue::Doubles(v) => (v.len(), 0),
        AttributeValue::Str(s) => (1, s.len()),
        AttributeValue::Strs(v) => (v.len(), v.iter().map(String::len).sum()),
        AttributeValue::Uchar(_)
        | AttributeValue::Schar(_)
        | AttributeValue::Ushort(_)
        | AttributeValue::Short(_)
        | AttributeValue::Uint(_)
        | AttributeValue::Int(_)
        | AttributeValue::Ulonglong(_)
        | AttributeValue::Longlong(_)
        | AttributeValue::Float(_)
        | AttributeValue::Double(_) => (1, 0),
    }
}

/// A float as JSON: a number, or the string zarr uses for a non-finite value.
pub(crate) fn float_json(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x == f64::INFINITY {
        json!("Infinity")
    } else if x == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(x)
    }
}

/// An attribute value as JSON, as netCDF4-python hands it to xarray: one value as a scalar,
/// several as a list.
fn attribute_json(value: AttributeValue) -> Value {
    fn list<T>(values: Vec<T>, each: impl Fn(T) -> Value) -> Value {
        Value::Array(values.into_iter().map(each).collect())
    }
    match value {
        AttributeValue::Uchar(x) => json!(x),
        AttributeValue::Uchars(v) => list(v, |x| json!(x)),
        AttributeValue::Schar(x) => json!(x),
        AttributeValue::Schars(v) => list(v, |x| json!(x)),
        AttributeValue::Ushort(x) => json!(x),
        AttributeValue::Ushorts(v) => list(v, |x| json!(x)),
        AttributeValue::Short(x) => json!(x),
        AttributeValue::Shorts(v) => list(v, |x| json!(x)),
        AttributeValue::Uint(x) => json!(x),
        AttributeValue::Uints(v) => list(v, |x| json!(x)),
        AttributeValue::Int(x) => json!(x),
        AttributeValue::Ints(v) => list(v, |x| json!(x)),
        AttributeValue::Ulonglong(x) => json!(x),
        AttributeValue::Ulonglongs(v) => list(v, |x| json!(x)),
        AttributeValue::Longlong(x) => json!(x),
        AttributeValue::Longlongs(v) => list(v, |x| json!(x)),
        AttributeValue::Float(x) => float_json(f64::from(x)),
        AttributeValue::Floats(v) => list(v, |x| float_json(f64::from(x))),
        AttributeValue::Double(x) => float_json(x),
        AttributeValue::Doubles(v) => list(v, float_json),
        AttributeValue::Str(s) => json!(s),
        AttributeValue::Strs(v) => json!(v),
    }
}

/// The numeric type of an attribute's values (`None`: text).
fn attribute_type(value: &AttributeValue) -> Option<Dtype> {
    Some(match value {
        AttributeValue::Uchar(_) | AttributeValue::Uchars(_) => Dtype::Int(IntType::U8),
        AttributeValue::Schar(_) | AttributeValue::Schars(_) => Dtype::Int(IntType::I8),
        AttributeValue::Ushort(_) | AttributeValue::Ushorts(_) => Dtype::Int(IntType::U16),
        AttributeValue::Short(_) | AttributeValue::Shorts(_) => Dtype::Int(IntType::I16),
        AttributeValue::Uint(_) | AttributeValue::Uints(_) => Dtype::Int(IntType::U32),
        AttributeValue::Int(_) | AttributeValue::Ints(_) => Dtype::Int(IntType::I32),
        AttributeValue::Ulonglong(_) | AttributeValue::Ulonglongs(_) => Dtype::Int(IntType::U64),
        AttributeValue::Longlong(_) | AttributeValue::Longlongs(_) => Dtype::Int(IntType::I64),
        AttributeValue::Float(_) | AttributeValue::Floats(_) => Dtype::Float(FloatType::F32),
        AttributeValue::Double(_) | AttributeValue::Doubles(_) => Dtype::Float(FloatType::F64),
        AttributeValue::Str(_) | AttributeValue::Strs(_) => return None,
    })
}

/// The `fill_value` of an array from its `_FillValue` attribute (its first value).
fn fill_value(value: &AttributeValue, dtype: Dtype) -> Value {
    let first = match attribute_json(value.clone()) {
        Value::Array(mut values) if !values.is_empty() => values.swap_remove(0),
        Value::Array(_) => return Value::Null,
        scalar => scalar,
    };
    match (dtype, first) {
        // A `|S1` fill value is the base64 of its byte, as zarr writes bytes.
        (Dtype::Char, Value::String(s)) => {
            use base64::Engine as _;
            let byte = s.as_bytes().first().copied().unwrap_or(0);
            json!(base64::engine::general_purpose::STANDARD.encode([byte]))
        }
        (_, value) => value,
    }
}
