//! Blob-manifest benchmark: svcd's resolver against the reference's lookup, and the
//! partitioner on a listing of a million objects.
//!
//! 1. Resolve throughput, one thread. A synthetic manifest set (1,000 stores under 40 parent
//!    scopes that have manifests of their own: small stores cut as one `b_root`, large ones
//!    with bucketed blobs in all three key encodings, coalesced blobs, datatrees, pins) is
//!    written to a temporary directory. svcd's `Trie` resolves a few million keys; the
//!    reference (`blobmap==0.5.0`, through `bench/blobmap_resolve.py` run by the Python in
//!    env `BLOBMAP_PYTHON`, default the workspace's `.venv-test/bin/python`) loads the same directory, builds
//!    its trie and resolves the first 1,000,000 of the same keys (`--python-keys N`). Printed:
//!    keys/s of both on exactly those keys and the ratio (target: at least 20x), and whether
//!    the two agree on every shared key.
//! 2. Partition of one store whose listing has 1,000,000 objects (`--objects N`): a
//!    synthetic `ObjectStore` generates the listing lazily and serves only the metadata
//!    objects (a chunk read fails the run), so the memory measured is the partitioner's own.
//!    Printed: wall time, and peak memory as the growth of VmHWM over the partition.
//!
//! Run: `make bench-manifests`, or (with `BLOBMAP_PYTHON` set)
//! `cargo bench --workspace --bench manifests -- [--keys N] [--python-keys N] [--objects N]`.

use std::collections::BTreeMap;
use std::fmt;
use std::hint::black_box;
use std::path::{Path as FsPath, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use svc_manifests::object_store::memory::InMemory;
use svc_manifests::object_store::path::Path;
use svc_manifests::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result as StoreResult,
};
use svc_manifests::{
    Kind, ManifestStore, PartitionOptions, Trie, parse, partition_store, sort_parents_first,
};

const STORES: usize = 1_000;
const PARENTS: usize = 40;

fn main() -> anyhow::Result<()> {
    let arg = svc_bench::arg;
    let keys: usize = arg("--keys").map_or(Ok(4_000_000), |v| v.parse())?;
    let python_keys: usize = arg("--python-keys").map_or(Ok(1_000_000), |v| v.parse())?;
    let objects: u64 = arg("--objects").map_or(Ok(1_000_000), |v| v.parse())?;

    // the partition first, while the process is small, so VmHWM measures the partitioner
    partition_bench(objects)?;
    println!();
    resolve_bench(keys, python_keys.min(keys))
}

// ---------------------------------------------------------------------------------------
// 1. resolve
// ---------------------------------------------------------------------------------------

/// Scopes of the manifest set: `(parent scope, [store scopes])`.
fn scopes() -> Vec<(String, Vec<String>)> {
    (0..PARENTS)
        .map(|p| {
            let parent = format!("data{}/project{p:02}", p % 4);
            let stores = (0..STORES / PARENTS)
                .map(|i| format!("{parent}/exp{}/store{i:03}.zarr", i % 5))
                .collect();
            (parent, stores)
        })
        .collect()
}

fn bucket(width: u64, encoding: &str) -> Value {
    json!({"index": 0, "width": width, "key_encoding": encoding})
}

fn hot(extra: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"]
        .iter()
        .map(|n| format!("**/{n}"))
        .collect();
    out.extend(extra.iter().map(|s| (*s).to_owned()));
    out
}

/// The kind of store number `i`, which decides its blobs and the keys asked about it.
fn store_kind(i: usize) -> usize {
    i % 10
}

fn store_manifest(scope: &str, i: usize) -> Value {
    let (blobs, hot_always, pinned) = match store_kind(i) {
        0..=3 => (
            vec![json!({"id": "b_root", "prefixes": [""], "bucket": null})],
            hot(&["time/**", "lat/**", "lon/**"]),
            vec![],
        ),
        4..=7 => (
            vec![
                json!({"id": "b_tas", "prefixes": ["tas/c"], "bucket": bucket(2048, "v3_slash")}),
                json!({"id": "b_pr", "prefixes": ["pr"], "bucket": bucket(512, "v2_slash")}),
                json!({"id": "b_hurs", "prefixes": ["hurs"], "bucket": bucket(128, "v2_flat")}),
                json!({"id": "b_psl_c", "prefixes": ["psl/c"], "bucket": null}),
                json!({"id": "b_fx_orog_c_fx_sftlf_c_fx_areacella_c",
                       "prefixes": ["fx/orog/c", "fx/sftlf/c", "fx/areacella/c"], "bucket": null}),
            ],
            hot(&["time/**", "lat/**", "lon/**", "height/**"]),
            vec![],
        ),
        8 => (
            vec![
                json!({"id": "b_tas", "prefixes": ["tas/c"], "bucket": bucket(64, "v3_slash")}),
                json!({"id": "b_pr", "prefixes": ["pr/c"], "bucket": bucket(64, "v3_slash")}),
            ],
            hot(&["time/**"]),
            vec![
                json!({"prefix": "pr", "reason": "paper in review", "by": "bench",
                       "at": "2026-01-01T00:00:00+00:00", "until": "2026-12-01T00:00:00+00:00"}),
                json!({"prefix": "tas/c/17", "reason": "hot spot", "by": "bench",
                       "at": "2026-01-01T00:00:00+00:00", "until": null}),
            ],
        ),
        _ => {
            let mut blobs = Vec::new();
            let mut hot_always = hot(&[]);
            for z in 0..10 {
                blobs.push(
                    json!({"id": format!("b_zoom_{z}_tas"), "prefixes": [format!("zoom_{z}/tas/c")],
                                  "bucket": bucket(1 << (12 - z), "v3_slash")}),
                );
                blobs.push(
                    json!({"id": format!("b_zoom_{z}_pr_c"), "prefixes": [format!("zoom_{z}/pr/c")],
                                  "bucket": null}),
                );
                hot_always.push(format!("zoom_{z}/time/**"));
                hot_always.push(format!("zoom_{z}/cell/**"));
            }
            (blobs, hot_always, vec![])
        }
    };
    json!({
        "schema_version": 3, "scope": scope, "epoch": 1 + i as u64 % 7,
        "generated_at": "2026-01-01T00:00:00+00:00", "generated_by": "bench",
        "policy": {"t_max_bytes": 107374182400u64, "t_min_bytes": 0, "t_hot_bytes": 16777216,
                   "width_clamp": 8, "pow2_floor": 64},
        "hot_always": hot_always, "pinned": pinned, "blobs": blobs,
        "provenance": {"tas": {"objects": 10266, "stored_bytes": 492831064064u64}},
    })
}

/// A parent scope's manifest: a blob on a prefix holding loose files next to the stores,
/// hot markers reaching into one child store, and a pin.
fn parent_manifest(scope: &str) -> Value {
    json!({
        "schema_version": 3, "scope": scope, "epoch": 3,
        "hot_always": hot(&["exp0/store000.zarr/time/**", "docs/**"]),
        "pinned": [{"prefix": "exp4/store004.zarr/pr", "reason": "nested pin", "until": null}],
        "blobs": [
            {"id": "b_loose", "prefixes": ["loose"], "bucket": null},
            {"id": "b_exp3", "prefixes": ["exp3"], "bucket": null},
        ],
    })
}

fn write_manifests(dir: &FsPath) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut write = |scope: &str, doc: &Value| -> anyhow::Result<()> {
        let path = dir.join(scope).join("manifest.json");
        std::fs::create_dir_all(path.parent().expect("a parent"))?;
        std::fs::write(path, serde_json::to_vec_pretty(doc)?)?;
        count += 1;
        Ok(())
    };
    for (parent, stores) in scopes() {
        write(&parent, &parent_manifest(&parent))?;
        for (i, scope) in stores.iter().enumerate() {
            write(scope, &store_manifest(scope, i))?;
        }
    }
    Ok(count)
}

/// Keys shaped like a gateway's traffic: mostly chunk reads, some metadata and coordinates,
/// some keys nothing claims.
fn generate_keys(n: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(42);
    let all = scopes();
    let mut keys = Vec::with_capacity(n);
    while keys.len() < n {
        let (parent, stores) = &all[rng.random_range(0..all.len())];
        let i = rng.random_range(0..stores.len());
        let store = &stores[i];
        let t = rng.random_range(0..200_000u32);
        let roll = rng.random_range(0..100u32);
        let key = match roll {
            0..=9 => {
                let var = ["tas", "pr", "hurs", "time", "zoom_3/tas", ""][rng.random_range(0..6)];
                let name = ["zarr.json", ".zarray", ".zattrs"][rng.random_range(0..3)];
                format!("{store}/{var}/{name}")
            }
            10..=17 => format!("{store}/time/c/{}", t % 40),
            18..=21 => format!("{store}/unknown_var/c/{t}/0/0"),
            22..=23 => format!("elsewhere/bucket/{t}/x.nc"),
            24..=26 => format!("{parent}/loose/file{t}.nc"),
            27..=28 => format!("{parent}/docs/readme{t}.txt"),
            29 => format!("{store}/tas/c/not_a_number/0/0"),
            _ => match store_kind(i) {
                0..=3 => format!("{store}/tas/c/{t}/0/0"),
                4..=7 => match rng.random_range(0..5u32) {
                    0 => format!("{store}/tas/c/{t}/0/0"),
                    1 => format!("{store}/pr/{t}/0/0"),
                    2 => format!("{store}/hurs/{t}.0.0"),
                    3 => format!("{store}/psl/c/{t}/1/2"),
                    _ => format!("{store}/fx/sftlf/c/0/{}", t % 8),
                },
                8 => format!(
                    "{store}/{}/c/{}/0/0",
                    ["tas", "pr"][rng.random_range(0..2)],
                    t % 100
                ),
                _ => {
                    let z = rng.random_range(0..10u32);
                    let var = ["tas", "pr"][rng.random_range(0..2)];
                    format!("{store}/zoom_{z}/{var}/c/{t}/{}", t % 12)
                }
            },
        };
        keys.push(key);
    }
    keys
}

fn resolve_bench(nkeys: usize, python_keys: usize) -> anyhow::Result<()> {
    let temp = tempfile::tempdir()?;
    let dir = temp.path().join("manifests");
    let manifests = write_manifests(&dir)?;
    let keys = generate_keys(nkeys);
    println!(
        "# resolve: {manifests} manifests ({STORES} stores, {PARENTS} parent scopes), {nkeys} keys, one thread"
    );

    let start = Instant::now();
    let mut loaded = Vec::new();
    for entry in walk(&dir)? {
        loaded.push(parse(&std::fs::read(&entry)?)?);
    }
    // parents before the stores below them (the same order the reference lists them in)
    sort_parents_first(&mut loaded);
    let trie = Trie::from_manifests(&loaded);
    println!(
        "svcd: {} manifests loaded and indexed in {:.0} ms ({} trie nodes)",
        loaded.len(),
        ms(start.elapsed()),
        trie.node_count()
    );

    let mut best = Duration::MAX;
    let mut counts = BTreeMap::new();
    for _ in 0..3 {
        counts.clear();
        let start = Instant::now();
        for key in &keys {
            let resolution = black_box(trie.lookup(black_box(key)));
            *counts.entry(resolution.kind()).or_insert(0u64) += 1;
        }
        best = best.min(start.elapsed());
    }
    let rust_rate = nkeys as f64 / best.as_secs_f64();
    let mut best_ids = Duration::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for key in &keys {
            black_box(trie.lookup(black_box(key)).blob_id());
        }
        best_ids = best_ids.min(start.elapsed());
    }
    let rust_ids_rate = nkeys as f64 / best_ids.as_secs_f64();
    println!(
        "svcd lookup: {rust_rate:.0} keys/s ({:.0} ns/key); with the instance id string: {rust_ids_rate:.0} keys/s",
        1e9 / rust_rate
    );
    println!("svcd kinds: {}", show_counts(&counts));

    // svcd again on exactly the keys the reference was timed on
    let shared = &keys[..python_keys];
    let mut best_shared = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for key in shared {
            black_box(trie.lookup(black_box(key)));
        }
        best_shared = best_shared.min(start.elapsed());
    }
    let shared_rate = python_keys as f64 / best_shared.as_secs_f64();

    // the reference on the first `python_keys` keys
    let keys_file = temp.path().join("keys.txt");
    std::fs::write(&keys_file, keys[..python_keys].join("\n") + "\n")?;
    let python = std::env::var("BLOBMAP_PYTHON").unwrap_or_else(|_| {
        // benches run in the package directory; the venv is the workspace's
        format!("{}/../.venv-test/bin/python", env!("CARGO_MANIFEST_DIR"))
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("blobmap_resolve.py");
    let answers = temp.path().join("answers.txt");
    let output = Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .arg(&keys_file)
        .arg(&answers)
        .output();
    let output = match output {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            println!(
                "reference: {python} {} failed:\n{}",
                script.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            return Ok(());
        }
        Err(e) => {
            println!(
                "reference: cannot run {python} ({e}); set BLOBMAP_PYTHON to a Python with blobmap==0.5.0"
            );
            return Ok(());
        }
    };
    let reply: Value = serde_json::from_slice(&output.stdout)?;

    let python_rate = reply["keys_per_s"].as_f64().unwrap_or(0.0);
    println!(
        "reference (blobmap {}): {} manifests loaded and indexed in {:.0} ms; lookup {python_rate:.0} keys/s on {python_keys} keys",
        reply["version"].as_str().unwrap_or("?"),
        reply["manifests"],
        reply["load_ms"].as_f64().unwrap_or(0.0),
    );
    let expected = std::fs::read_to_string(&answers)?;
    let mut disagree = 0usize;
    let mut first = None;
    for (key, theirs) in keys[..python_keys].iter().zip(expected.lines()) {
        let ours = trie.lookup(key).to_string();
        if ours != theirs {
            disagree += 1;
            first.get_or_insert_with(|| format!("{key}: svcd {ours}, reference {theirs}"));
        }
    }
    match first {
        None => println!("agreement: svcd and the reference agree on all {python_keys} keys"),
        Some(example) => {
            println!("agreement: {disagree} of {python_keys} keys differ, e.g. {example}")
        }
    }
    let ratio = shared_rate / python_rate;
    println!(
        "resolve keys/s on the same {python_keys} keys: svcd {shared_rate:.0}, reference {python_rate:.0}, ratio svcd/reference {ratio:.1} (target >= 20){}",
        if ratio >= 20.0 { "" } else { "  BELOW TARGET" }
    );
    println!(
        "(svcd over all {nkeys} keys: {rust_rate:.0} keys/s, ratio {:.1})",
        rust_rate / python_rate
    );
    Ok(())
}

fn walk(dir: &FsPath) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "manifest.json") {
                out.push(path);
            }
        }
    }
    Ok(out)
}

fn show_counts(counts: &BTreeMap<Kind, u64>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{} {v}", k.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------
// 2. partition of a million-object listing
// ---------------------------------------------------------------------------------------

const SCOPE: &str = "bench/big.zarr";

/// One store: `ARRAYS` three-dimensional float32 arrays (v3, every third one with v2 keys)
/// plus a time coordinate; the listing holds `objects` chunk objects spread over the arrays.
/// Metadata objects live in an in-memory store; chunk objects exist only as listing entries.
#[derive(Debug)]
struct SyntheticStore {
    metadata: InMemory,
    metadata_keys: Vec<(Path, u64)>,
    arrays: usize,
    per_array: u64,
    chunk_reads: Arc<AtomicU64>,
}

const ARRAYS: usize = 50;

impl SyntheticStore {
    async fn new(objects: u64) -> anyhow::Result<Self> {
        let metadata = InMemory::new();
        let per_array = objects.div_ceil(ARRAYS as u64);
        let mut metadata_keys = Vec::new();
        put(
            &metadata,
            &mut metadata_keys,
            format!("{SCOPE}/zarr.json"),
            &json!({"zarr_format": 3, "node_type": "group", "attributes": {}}),
        )
        .await?;
        for a in 0..ARRAYS {
            let encoding = if a % 3 == 2 {
                json!({"name": "v2", "configuration": {"separator": "/"}})
            } else {
                json!({"name": "default", "configuration": {"separator": "/"}})
            };
            put(
                &metadata,
                &mut metadata_keys,
                format!("{SCOPE}/var{a:02}/zarr.json"),
                &json!({
                    "zarr_format": 3, "node_type": "array", "shape": [per_array * 24, 192, 288],
                    "data_type": "float32",
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [24, 192, 288]}},
                    "chunk_key_encoding": encoding, "fill_value": 0,
                    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "attributes": {"_ARRAY_DIMENSIONS": ["time", "lat", "lon"]},
                    "dimension_names": ["time", "lat", "lon"],
                }),
            )
            .await?;
        }
        put(
            &metadata,
            &mut metadata_keys,
            format!("{SCOPE}/time/zarr.json"),
            &json!({
                "zarr_format": 3, "node_type": "array", "shape": [per_array * 24], "data_type": "float64",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [per_array * 24]}},
                "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
                "codecs": [{"name": "bytes"}], "attributes": {}, "dimension_names": ["time"],
            }),
        )
        .await?;
        Ok(Self {
            metadata,
            metadata_keys,
            arrays: ARRAYS,
            per_array,
            chunk_reads: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The listing: metadata objects, then every chunk, generated as it is consumed.
    fn listing(&self) -> impl Iterator<Item = ObjectMeta> + Send + 'static {
        let metadata: Vec<ObjectMeta> = self
            .metadata_keys
            .iter()
            .map(|(p, s)| meta(p.clone(), *s))
            .collect();
        let (arrays, per_array) = (self.arrays, self.per_array);
        let chunks = (0..arrays).flat_map(move |a| {
            (0..per_array).map(move |t| {
                let key = if a % 3 == 2 {
                    format!("{SCOPE}/var{a:02}/{t}/0/0")
                } else {
                    format!("{SCOPE}/var{a:02}/c/{t}/0/0")
                };
                // compressed sizes around 2 MiB, varying by object
                meta(
                    Path::from(key),
                    1_800_000 + (t * 7919 + a as u64 * 104_729) % 600_000,
                )
            })
        });
        metadata.into_iter().chain(chunks)
    }
}

async fn put(
    store: &InMemory,
    keys: &mut Vec<(Path, u64)>,
    key: String,
    doc: &Value,
) -> anyhow::Result<()> {
    let body = serde_json::to_vec(doc)?;
    let path = Path::from(key);
    keys.push((path.clone(), body.len() as u64));
    store
        .put_opts(&path, PutPayload::from(body), PutOptions::default())
        .await?;
    Ok(())
}

fn meta(location: Path, size: u64) -> ObjectMeta {
    ObjectMeta {
        location,
        last_modified: Default::default(),
        size,
        e_tag: None,
        version: None,
    }
}

impl fmt::Display for SyntheticStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyntheticStore({SCOPE}, {} arrays)", self.arrays)
    }
}

fn read_only() -> svc_manifests::object_store::Error {
    svc_manifests::object_store::Error::NotImplemented {
        operation: "write to the synthetic data store".into(),
        implementer: "SyntheticStore".into(),
    }
}

#[async_trait]
impl ObjectStore for SyntheticStore {
    async fn put_opts(&self, _: &Path, _: PutPayload, _: PutOptions) -> StoreResult<PutResult> {
        Err(read_only())
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        Err(read_only())
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        let name = location.filename().unwrap_or_default();
        if !svc_manifests::METADATA_BASENAMES.contains(&name) {
            self.chunk_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.metadata.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, StoreResult<Path>>,
    ) -> BoxStream<'static, StoreResult<Path>> {
        futures::stream::once(async { Err(read_only()) }).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        let prefix = prefix
            .map(|p| format!("{}/", p.as_ref()))
            .unwrap_or_default();
        futures::stream::iter(
            self.listing()
                .filter(move |m| m.location.as_ref().starts_with(&prefix))
                .map(Ok),
        )
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.metadata.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> StoreResult<()> {
        Err(read_only())
    }
}

/// A field of /proc/self/status in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn partition_bench(objects: u64) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let data = SyntheticStore::new(objects).await?;
        let start = Instant::now();
        let listed = data.listing().count();
        let listing_alone = start.elapsed();
        println!("# partition: one store, {listed} objects listed ({ARRAYS} arrays), metadata objects only served");
        let manifests = ManifestStore::new(Arc::new(InMemory::new()), "");
        let options = PartitionOptions::default();
        // reset the high-water mark (where the kernel allows it) to the current RSS, then
        // measure how far it grows
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let before_rss = status_kib("VmRSS:");
        let start = Instant::now();
        let outcome = partition_store(&data, &manifests, SCOPE, &options, None).await?;
        let elapsed = start.elapsed();
        let after_hwm = status_kib("VmHWM:");
        let peak = after_hwm.saturating_sub(before_rss);
        println!(
            "partition: {:.2} s wall, {:.0} objects/s; {} arrays, {} blobs, written {}",
            elapsed.as_secs_f64(),
            listed as f64 / elapsed.as_secs_f64(),
            outcome.arrays.len(),
            outcome.manifest.blobs.len(),
            outcome.written
        );
        println!(
            "(generating the listing alone takes {:.2} s of that)",
            listing_alone.as_secs_f64()
        );
        println!(
            "partition peak memory: VmHWM grew by {:.1} MiB{} (VmRSS before {:.1} MiB, VmHWM after {:.1} MiB); chunk reads: {}",
            peak as f64 / 1024.0,
            if reset { "" } else { " (high-water mark not resettable: an upper bound)" },
            before_rss as f64 / 1024.0,
            after_hwm as f64 / 1024.0,
            data.chunk_reads.load(Ordering::Relaxed)
        );
        anyhow::ensure!(data.chunk_reads.load(Ordering::Relaxed) == 0, "the partitioner read a chunk");
        Ok(())
    })
}
