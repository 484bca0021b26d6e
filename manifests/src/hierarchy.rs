//! From a Zarr store's LIST to [`Array`] descriptions: array roots come from where the
//! metadata objects are, sizes from the listing. Reads metadata objects only, never a chunk.

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rustc_hash::FxHashMap as HashMap;
use serde_json::{Map, Value};
use tracing::{debug, warn};

use crate::array::Array;
use crate::error::{Error, Result};
use crate::model::{KeyEncoding, METADATA_BASENAMES};
use crate::partition::display_path;

/// Path segments skipped by default: S3 gateway staging and snapshot directories, visible
/// when `--data` is the gateway's backing filesystem but hidden over S3.
pub const DEFAULT_EXCLUDE: [&str; 3] = [".sgwtmp", ".versitygw", ".snapshot"];

const SAMPLE_KEYS: usize = 4;

/// Called with the number of objects listed so far (for a progress display).
pub type Progress<'a> = &'a (dyn Fn(u64) + Send + Sync);

/// The Zarr format a store root has, from its directly contained metadata names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZarrFormat {
    /// A `.zgroup` or `.zarray` is present (and no `zarr.json`).
    V2,
    /// A `zarr.json` is present.
    V3,
}

impl ZarrFormat {
    /// `v2` or `v3`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2 => "v2",
            Self::V3 => "v3",
        }
    }
}

/// Whether any `/`-separated segment of `key` is in `exclude` (whole segments only).
#[must_use]
pub fn is_excluded(key: &str, exclude: &[String]) -> bool {
    !exclude.is_empty() && key.split('/').any(|s| exclude.iter().any(|e| e == s))
}

/// Identifies the format at a prefix with one delimited LIST (cheap at every level).
///
/// # Errors
/// The store failed.
pub async fn detect_format(store: &dyn ObjectStore, scope: &str) -> Result<Option<ZarrFormat>> {
    let listing = store
        .list_with_delimiter(scope_path(scope).as_ref())
        .await?;
    let names: Vec<&str> = listing
        .objects
        .iter()
        .filter_map(|o| o.location.filename())
        .collect();
    Ok(if names.contains(&"zarr.json") {
        Some(ZarrFormat::V3)
    } else if names.iter().any(|&n| n == ".zgroup" || n == ".zarray") {
        Some(ZarrFormat::V2)
    } else {
        None
    })
}

/// The object store path for a scope, `None` for the store root.
pub(crate) fn scope_path(scope: &str) -> Option<Path> {
    let scope = scope.trim_matches('/');
    (!scope.is_empty()).then(|| Path::from_iter(scope.split('/').filter(|s| !s.is_empty())))
}

#[derive(Debug, Default)]
struct Observed {
    stored_bytes: u64,
    objects: u64,
    samples: Vec<String>,
}

/// Describes every array under `scope`, sorted by path.
///
/// Two streaming passes over one recursive LIST keep memory proportional to the number of
/// arrays, not objects. Pass 1 collects metadata keys; their objects are read (v2 `.zattrs`
/// folded into the `.zarray` of the same directory). Pass 2 adds each other object's size to
/// the deepest array root above it. Objects under an excluded segment are ignored.
///
/// # Errors
/// [`Error::NotAZarrStore`] when no metadata object exists; store errors.
pub async fn read_arrays(
    store: &dyn ObjectStore,
    scope: &str,
    exclude: &[String],
    progress: Option<Progress<'_>>,
) -> Result<Vec<Array>> {
    let prefix = scope_path(scope);
    let scope = prefix.as_ref().map_or("", Path::as_ref);
    let metadata_keys = list_metadata(store, prefix.as_ref(), scope, exclude, progress).await?;
    if metadata_keys.is_empty() {
        return Err(Error::NotAZarrStore {
            scope: scope.to_owned(),
        });
    }
    let mut attributes: HashMap<String, Map<String, Value>> = HashMap::default();
    for key in metadata_keys.iter().filter(|k| basename(k) == ".zattrs") {
        if let Some(loaded) = load(store, key).await? {
            attributes.insert(dirname(relative(key, scope)).to_owned(), loaded);
        }
    }
    let mut metas: HashMap<String, Map<String, Value>> = HashMap::default();
    for key in &metadata_keys {
        let base = basename(key);
        if base != "zarr.json" && base != ".zarray" {
            continue;
        }
        let Some(mut meta) = load(store, key).await? else {
            continue;
        };
        if !is_array(&meta) {
            continue;
        }
        let root = dirname(relative(key, scope)).to_owned();
        if base == ".zarray"
            && let Some(attrs) = attributes.get(&root)
        {
            meta.insert("attributes".into(), Value::Object(attrs.clone()));
        }
        metas.insert(root, meta);
    }
    let observed = observe(store, prefix.as_ref(), scope, exclude, &metas, progress).await?;
    let mut roots: Vec<&String> = metas.keys().collect();
    roots.sort();
    let mut arrays = Vec::with_capacity(roots.len());
    for root in roots {
        let seen = &observed[root.as_str()];
        if let Some(array) = to_array(root, &metas[root], seen) {
            arrays.push(array);
        }
    }
    Ok(arrays)
}

async fn list_metadata(
    store: &dyn ObjectStore,
    prefix: Option<&Path>,
    scope: &str,
    exclude: &[String],
    progress: Option<Progress<'_>>,
) -> Result<Vec<String>> {
    let mut listing = store.list(prefix);
    let mut keys = Vec::new();
    let mut seen = 0u64;
    while let Some(meta) = listing.try_next().await? {
        seen += 1;
        if let Some(report) = progress
            && seen.is_multiple_of(1000)
        {
            report(seen);
        }
        let relative = relative(meta.location.as_ref(), scope);
        if is_excluded(relative, exclude) || !METADATA_BASENAMES.contains(&basename(relative)) {
            continue;
        }
        keys.push(meta.location.as_ref().to_owned());
    }
    debug!(
        scope = display_path(scope),
        objects = seen,
        metadata = keys.len(),
        "listed"
    );
    Ok(keys)
}

async fn observe(
    store: &dyn ObjectStore,
    prefix: Option<&Path>,
    scope: &str,
    exclude: &[String],
    metas: &HashMap<String, Map<String, Value>>,
    progress: Option<Progress<'_>>,
) -> Result<HashMap<String, Observed>> {
    let mut nodes: HashMap<String, Observed> = metas
        .keys()
        .map(|root| (root.clone(), Observed::default()))
        .collect();
    let mut listing = store.list(prefix);
    let (mut counted, mut unassigned) = (0u64, 0u64);
    while let Some(meta) = listing.try_next().await? {
        let relative = relative(meta.location.as_ref(), scope);
        if is_excluded(relative, exclude) || METADATA_BASENAMES.contains(&basename(relative)) {
            continue;
        }
        counted += 1;
        if let Some(report) = progress
            && counted % 1000 == 0
        {
            report(counted);
        }
        let Some(node) = owner(relative, &mut nodes) else {
            unassigned += 1;
            continue;
        };
        node.stored_bytes += meta.size;
        node.objects += 1;
        if node.samples.len() < SAMPLE_KEYS {
            node.samples.push(relative.to_owned());
        }
    }
    if unassigned > 0 {
        warn!(
            scope = display_path(scope),
            objects = unassigned,
            "objects belong to no array; they will resolve as unmanaged and stay hot"
        );
    }
    Ok(nodes)
}

/// The deepest array root that is a proper segment-wise ancestor of `relative`.
fn owner<'n>(relative: &str, nodes: &'n mut HashMap<String, Observed>) -> Option<&'n mut Observed> {
    let mut candidate = relative;
    let root = loop {
        candidate = match candidate.rfind('/') {
            Some(i) => &candidate[..i],
            None if candidate.is_empty() => return None,
            None => "",
        };
        if nodes.contains_key(candidate) {
            break candidate;
        }
        if candidate.is_empty() {
            return None;
        }
    };
    nodes.get_mut(root)
}

async fn load(store: &dyn ObjectStore, key: &str) -> Result<Option<Map<String, Value>>> {
    let path = Path::parse(key).unwrap_or_else(|_| Path::from(key));
    let bytes = match store.get(&path).await {
        Ok(result) => result.bytes().await?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Ok(None),
        Err(e) => {
            warn!(key = %path, error = %e, "metadata object is not valid JSON; skipped");
            Ok(None)
        }
    }
}

fn is_array(meta: &Map<String, Value>) -> bool {
    meta.get("node_type").and_then(Value::as_str) == Some("array")
        || (meta.contains_key("shape")
            && (meta.contains_key("chunks") || meta.contains_key("chunk_grid")))
}

/// Builds the array, or `None` (with a warning) when the metadata cannot be sized.
fn to_array(root: &str, meta: &Map<String, Value>, seen: &Observed) -> Option<Array> {
    let described = if meta.get("zarr_format").and_then(Value::as_u64) == Some(3)
        || meta.contains_key("chunk_grid")
    {
        describe_v3(meta)
    } else {
        describe_v2(meta)
    };
    let (shape, chunks, shards, itemsize, declared) = match described {
        Ok(d) => d,
        Err(reason) => {
            warn!(
                array = display_path(root),
                reason, "unreadable array metadata; skipped"
            );
            return None;
        }
    };
    let mut key_encoding = declared;
    if let Some(observed) = observed_encoding(root, &seen.samples, shape.len())
        && observed != declared
    {
        warn!(
            array = display_path(root),
            declared = declared.as_str(),
            observed = observed.as_str(),
            "metadata and keys disagree on the key encoding; using the keys"
        );
        key_encoding = observed;
    }
    let array = Array {
        path: root.to_owned(),
        is_coordinate: is_coordinate(root, meta, shape.len()),
        shape,
        chunks,
        itemsize,
        shards,
        stored_bytes: (seen.stored_bytes > 0).then_some(seen.stored_bytes),
        nobjects_seen: (seen.objects > 0).then_some(seen.objects),
        key_encoding,
    };
    if seen.objects > array.nobjects() {
        warn!(
            array = display_path(root),
            stored = seen.objects,
            grid = array.nobjects(),
            "more objects stored than the declared grid holds; stale chunks from an append or \
             rechunk will skew sizing"
        );
    }
    Some(array)
}

type Described = (Vec<u64>, Vec<u64>, Option<Vec<u64>>, u64, KeyEncoding);

fn describe_v3(meta: &Map<String, Value>) -> Result<Described, String> {
    let shape = ints(meta.get("shape"), "shape")?;
    let objects = ints(
        meta.get("chunk_grid")
            .and_then(|g| g.get("configuration"))
            .and_then(|c| c.get("chunk_shape")),
        "chunk_grid.configuration.chunk_shape",
    )?;
    let inner = inner_chunk(meta)?;
    let itemsize = itemsize(meta.get("data_type"))?;
    let encoding = v3_encoding(meta);
    let shards = inner
        .as_ref()
        .filter(|i| **i != objects)
        .map(|_| objects.clone());
    let chunks = inner.unwrap_or(objects);
    Ok((shape, chunks, shards, itemsize, encoding))
}

fn describe_v2(meta: &Map<String, Value>) -> Result<Described, String> {
    let shape = ints(meta.get("shape"), "shape")?;
    let chunks = ints(meta.get("chunks"), "chunks")?;
    let itemsize = itemsize(meta.get("dtype"))?;
    let separator = meta.get("dimension_separator").and_then(Value::as_str);
    let encoding = if separator == Some("/") {
        KeyEncoding::V2Slash
    } else {
        KeyEncoding::V2Flat
    };
    Ok((shape, chunks, None, itemsize, encoding))
}

fn ints(value: Option<&Value>, name: &str) -> Result<Vec<u64>, String> {
    let items = value
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{name} is missing or not a list"))?;
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                .ok_or_else(|| format!("{name} holds {v}, not a size"))
        })
        .collect()
}

fn inner_chunk(meta: &Map<String, Value>) -> Result<Option<Vec<u64>>, String> {
    let Some(codecs) = meta.get("codecs").and_then(Value::as_array) else {
        return Ok(None);
    };
    for codec in codecs {
        if codec.get("name").and_then(Value::as_str) != Some("sharding_indexed") {
            continue;
        }
        let shape = codec
            .get("configuration")
            .and_then(|c| c.get("chunk_shape"));
        if shape
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            return ints(shape, "sharding_indexed chunk_shape").map(Some);
        }
    }
    Ok(None)
}

fn v3_encoding(meta: &Map<String, Value>) -> KeyEncoding {
    let encoding = meta.get("chunk_key_encoding");
    let name = encoding
        .and_then(|e| e.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    if name != "v2" {
        return KeyEncoding::V3Slash;
    }
    let separator = encoding
        .and_then(|e| e.get("configuration"))
        .and_then(|c| c.get("separator"))
        .and_then(Value::as_str)
        .unwrap_or(".");
    if separator == "/" {
        KeyEncoding::V2Slash
    } else {
        KeyEncoding::V2Flat
    }
}

/// Bytes per element from a v3 `data_type` name or a numpy-style v2 `dtype` (`<f4`).
fn itemsize(dtype: Option<&Value>) -> Result<u64, String> {
    let Some(Value::String(name)) = dtype else {
        return Err(format!(
            "cannot size dtype {}",
            dtype.unwrap_or(&Value::Null)
        ));
    };
    let known = match name.as_str() {
        "bool" | "int8" | "uint8" => Some(1),
        "int16" | "uint16" | "float16" => Some(2),
        "int32" | "uint32" | "float32" => Some(4),
        "int64" | "uint64" | "float64" | "complex64" => Some(8),
        "complex128" => Some(16),
        _ => None,
    };
    if let Some(size) = known {
        return Ok(size);
    }
    let tail = name.trim_start_matches(['<', '>', '|', '=']);
    let digits = tail.get(1..).unwrap_or("");
    if tail.chars().count() >= 2 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return digits
            .parse()
            .map_err(|_| format!("cannot size dtype {name:?}"));
    }
    Err(format!("cannot size dtype {name:?}"))
}

/// The encoding the sample keys prove, if any: a `c` first segment is v3; a dotted all-digit
/// segment is v2 flat; an all-digit segment is v2 slash, but only for arrays of more than
/// one dimension (a 1-D `cell/0` proves nothing).
fn observed_encoding(root: &str, samples: &[String], ndim: usize) -> Option<KeyEncoding> {
    for key in samples {
        let rest = if root.is_empty() {
            key.as_str()
        } else {
            key.get(root.len()..).unwrap_or("").trim_matches('/')
        };
        let head = rest.split('/').next().unwrap_or("");
        if head == "c" {
            return Some(KeyEncoding::V3Slash);
        }
        let undotted: String = head.chars().filter(|&c| c != '.').collect();
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if head.contains('.') && all_digits(&undotted) {
            return Some(KeyEncoding::V2Flat);
        }
        if ndim > 1 && all_digits(head) {
            return Some(KeyEncoding::V2Slash);
        }
    }
    None
}

/// A 1-D array whose dimension list is exactly its own name. The list comes from
/// `_ARRAY_DIMENSIONS` (xarray's attribute, in `attributes` or at the top level) or, for
/// v3, from `dimension_names`.
fn is_coordinate(root: &str, meta: &Map<String, Value>, ndim: usize) -> bool {
    if ndim != 1 {
        return false;
    }
    let name = basename(root);
    let is_own_name = |dims: Option<&Value>| {
        dims.and_then(Value::as_array)
            .is_some_and(|d| d.len() == 1 && d[0] == name)
    };
    let attributes = match meta.get("attributes") {
        Some(Value::Object(a)) if !a.is_empty() => Some(Value::Object(a.clone())),
        _ => meta.get("_ARRAY_DIMENSIONS").cloned(),
    };
    let xarray = match &attributes {
        Some(Value::Object(a)) => a.get("_ARRAY_DIMENSIONS"),
        other => other.as_ref(),
    };
    is_own_name(xarray) || is_own_name(meta.get("dimension_names"))
}

fn relative<'k>(key: &'k str, scope: &str) -> &'k str {
    if scope.is_empty() {
        return key;
    }
    key.strip_prefix(scope)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(key)
}

fn basename(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

fn dirname(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..i])
}

#[cfg(test)]
#[path = "hierarchy_test.rs"]
mod tests;
