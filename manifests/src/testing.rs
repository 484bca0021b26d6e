//! Test fixtures: synthetic Zarr v2/v3 stores written as raw objects (64-byte chunks) into
//! an in-memory object store.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::{Value, json};

use crate::model::KeyEncoding;

/// Bytes of every synthetic chunk object.
pub(crate) const CHUNK_BYTES: usize = 64;

/// One array to write.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) path: String,
    pub(crate) shape: Vec<u64>,
    pub(crate) chunks: Vec<u64>,
    /// Zarr v3 when true, else v2.
    pub(crate) v3: bool,
    pub(crate) encoding: KeyEncoding,
    pub(crate) shards: Option<Vec<u64>>,
    /// `_ARRAY_DIMENSIONS` (v2 `.zattrs`, v3 attributes) when set.
    pub(crate) dims: Option<Vec<String>>,
    /// v3 `dimension_names` when set.
    pub(crate) dimension_names: Option<Vec<String>>,
    /// Write only this many indices along dimension 0 (all when `None`).
    pub(crate) rows: Option<u64>,
}

impl Spec {
    pub(crate) fn v3(path: &str, shape: &[u64], chunks: &[u64]) -> Self {
        Self {
            path: path.to_owned(),
            shape: shape.to_vec(),
            chunks: chunks.to_vec(),
            v3: true,
            encoding: KeyEncoding::V3Slash,
            shards: None,
            dims: None,
            dimension_names: None,
            rows: None,
        }
    }

    pub(crate) fn v2(path: &str, shape: &[u64], chunks: &[u64], slash: bool) -> Self {
        Self {
            v3: false,
            encoding: if slash {
                KeyEncoding::V2Slash
            } else {
                KeyEncoding::V2Flat
            },
            ..Self::v3(path, shape, chunks)
        }
    }

    pub(crate) fn coordinate(mut self) -> Self {
        let name = self.path.rsplit('/').next().unwrap_or("").to_owned();
        self.dims = Some(vec![name]);
        self
    }
}

/// A fresh in-memory store.
pub(crate) fn memory() -> Arc<InMemory> {
    Arc::new(InMemory::new())
}

pub(crate) async fn put(store: &dyn ObjectStore, key: &str, bytes: Vec<u8>) {
    store
        .put(&Path::from(key), PutPayload::from(bytes))
        .await
        .expect("in-memory put");
}

pub(crate) async fn put_json(store: &dyn ObjectStore, key: &str, value: &Value) {
    put(store, key, serde_json::to_vec(value).expect("json")).await;
}

fn join(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// Writes a group marker (`zarr.json` or `.zgroup`) at `scope/path`.
pub(crate) async fn group(store: &dyn ObjectStore, scope: &str, path: &str, v3: bool) {
    if v3 {
        let key = join(&[scope, path, "zarr.json"]);
        put_json(
            store,
            &key,
            &json!({"zarr_format": 3, "node_type": "group"}),
        )
        .await;
    } else {
        let key = join(&[scope, path, ".zgroup"]);
        put_json(store, &key, &json!({"zarr_format": 2})).await;
    }
}

/// Writes an array's metadata and its chunk objects under `scope`.
pub(crate) async fn array(store: &dyn ObjectStore, scope: &str, spec: &Spec) {
    let object_shape = spec.shards.clone().unwrap_or_else(|| spec.chunks.clone());
    if spec.v3 {
        let mut meta = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": spec.shape,
            "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": object_shape}},
            "chunk_key_encoding": match spec.encoding {
                KeyEncoding::V3Slash => json!({"name": "default", "configuration": {"separator": "/"}}),
                KeyEncoding::V2Slash => json!({"name": "v2", "configuration": {"separator": "/"}}),
                KeyEncoding::V2Flat => json!({"name": "v2", "configuration": {"separator": "."}}),
            },
            "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {},
        });
        if let Some(shards) = &spec.shards {
            let _ = shards;
            meta["codecs"] = json!([{"name": "sharding_indexed", "configuration": {
                "chunk_shape": spec.chunks,
                "codecs": [{"name": "bytes"}],
                "index_codecs": [{"name": "bytes"}],
            }}]);
        }
        if let Some(dims) = &spec.dims {
            meta["attributes"] = json!({"_ARRAY_DIMENSIONS": dims});
        }
        if let Some(names) = &spec.dimension_names {
            meta["dimension_names"] = json!(names);
        }
        put_json(store, &join(&[scope, &spec.path, "zarr.json"]), &meta).await;
    } else {
        let mut meta = json!({
            "zarr_format": 2,
            "shape": spec.shape,
            "chunks": spec.chunks,
            "dtype": "<f4",
            "compressor": null,
            "fill_value": 0,
            "order": "C",
            "filters": null,
        });
        if spec.encoding == KeyEncoding::V2Slash {
            meta["dimension_separator"] = json!("/");
        }
        put_json(store, &join(&[scope, &spec.path, ".zarray"]), &meta).await;
        if let Some(dims) = &spec.dims {
            let attrs = json!({"_ARRAY_DIMENSIONS": dims});
            put_json(store, &join(&[scope, &spec.path, ".zattrs"]), &attrs).await;
        }
    }
    let grid: Vec<u64> = spec
        .shape
        .iter()
        .zip(&object_shape)
        .map(|(s, c)| s.div_ceil(*c))
        .collect();
    let rows = spec.rows.unwrap_or(grid[0]).min(grid[0]);
    for index in grid_indices(&grid, rows) {
        let key = chunk_key(&spec.path, &index, spec.encoding);
        put(store, &join(&[scope, &key]), vec![0u8; CHUNK_BYTES]).await;
    }
}

fn grid_indices(grid: &[u64], rows: u64) -> Vec<Vec<u64>> {
    let mut out = vec![Vec::new()];
    for (dim, &extent) in grid.iter().enumerate() {
        let extent = if dim == 0 { rows } else { extent };
        out = out
            .into_iter()
            .flat_map(|prefix| {
                (0..extent).map(move |i| {
                    let mut next = prefix.clone();
                    next.push(i);
                    next
                })
            })
            .collect();
    }
    out
}

/// The key of one chunk object, relative to the scope.
pub(crate) fn chunk_key(path: &str, index: &[u64], encoding: KeyEncoding) -> String {
    let parts: Vec<String> = index.iter().map(u64::to_string).collect();
    match encoding {
        KeyEncoding::V3Slash => join(&[path, "c", &parts.join("/")]),
        KeyEncoding::V2Slash => join(&[path, &parts.join("/")]),
        KeyEncoding::V2Flat => join(&[path, &parts.join(".")]),
    }
}

/// An object store that records the path of every GET (and HEAD) and forwards to another.
#[derive(Debug)]
pub(crate) struct Spy {
    inner: Arc<InMemory>,
    pub(crate) gets: std::sync::Mutex<Vec<String>>,
}

impl Spy {
    pub(crate) fn new(inner: Arc<InMemory>) -> Self {
        Self {
            inner,
            gets: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl std::fmt::Display for Spy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Spy({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Spy {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.gets
            .lock()
            .expect("no test panics while holding the lock")
            .push(location.to_string());
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
