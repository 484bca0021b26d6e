//! Catalogue benchmark: svcd against tantivy on the same synthetic records, in one run.
//!
//! Measures, for N records (default 10 million; `--records N`):
//! 1. ingest into svcd's RocksDB store (records/s, size on disk) and into a tantivy index with
//!    the same facets (records/s, size);
//! 2. metadata-search with 0, 1 and 3 filters (counts of all 11 facets, newest versions only):
//!    svcd's engine in-process and tantivy's terms aggregation, p50/p99 and the ratio;
//! 3. data-search of about 1M paths: svcd's ordered stream in-process and tantivy's doc-store
//!    retrieval (unordered), paths/s and the ratio;
//! 4. the same queries over HTTP against a running `svcd serve`, and its resident memory.
//!
//! Run: `make bench` or `cargo bench -p svc-bench --bench catalog -- --records 10000000`.
//! Data lives in a temporary directory (about 2.2 GB for 10M records) unless `--dir` is given;
//! `--dir D --reuse` repeats the queries on stores an earlier run left in D.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use svc_bench::{FACETS, Workload, value};
use svc_daemon::{Catalog, Databrowser, Db, Flavours};
use tantivy::aggregation::AggregationCollector;
use tantivy::aggregation::agg_req::Aggregations;
use tantivy::collector::{Count, DocSetCollector};
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, Field, IndexRecordOption, STORED, STRING, Schema, Value};
use tantivy::{Index, IndexWriter, TantivyDocument, Term};

const REPS: usize = 15;

/// Query pairs of one search, `(key, value)`.
type Filters = Vec<(String, String)>;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let records: u64 = svc_bench::arg("--records").map_or(Ok(10_000_000), |v| v.parse())?;
    let temp = tempfile::tempdir()?;
    let dir = svc_bench::arg("--dir").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    println!(
        "# catalogue benchmark: {records} records, data in {}",
        dir.display()
    );

    let store_dir = dir.join("svcd");
    let tantivy_dir = dir.join("tantivy");
    let reuse = args.iter().any(|a| a == "--reuse") && tantivy_dir.join("meta.json").exists();
    let (tantivy_index, fields) = if reuse {
        println!(
            "reusing the stores in {} (no ingest figures)",
            dir.display()
        );
        open_tantivy(&tantivy_dir)?
    } else {
        let svcd_ingest = svc_bench::ingest(&store_dir.join("db"), records)?;
        let (index, fields, tantivy_ingest) = ingest_tantivy(&tantivy_dir, records)?;
        report_pair("ingest records/s", svcd_ingest.0, tantivy_ingest.0, true);
        println!(
            "size on disk: svcd {} MiB, tantivy {} MiB",
            svcd_ingest.1 >> 20,
            tantivy_ingest.1 >> 20
        );
        (index, fields)
    };
    let db = Arc::new(Db::open(&store_dir.join("db"))?);
    let start = Instant::now();
    let catalog = Arc::new(Catalog::open(Arc::clone(&db))?);
    println!("svcd index load: {:.1} s", start.elapsed().as_secs_f64());
    let databrowser = Databrowser::new(Arc::clone(&catalog), Arc::new(Flavours::open(db)?));
    let reader = tantivy_index.reader()?;
    let searcher = reader.searcher();

    let queries = query_set(&databrowser)?;
    for (name, pairs) in &queries {
        let search = databrowser.prepare("svc", "file", None, pairs)?;
        let svcd_times = time(|| {
            let m = databrowser.metadata(&search).expect("metadata");
            std::hint::black_box(m.total_count);
        });
        let tquery = tantivy_query(&fields, pairs);
        let aggregations = all_facets_aggregation();
        let mut tantivy_count = 0;
        let tantivy_times = time(|| {
            let collector =
                AggregationCollector::from_aggs(aggregations.clone(), Default::default());
            let (count, aggs) = searcher
                .search(&*tquery, &(Count, collector))
                .expect("tantivy search");
            tantivy_count = count;
            std::hint::black_box(aggs);
        });
        let svcd_count = databrowser.metadata(&search)?.total_count;
        assert_eq!(
            svcd_count, tantivy_count as u64,
            "both engines agree on {name}"
        );
        println!(
            "metadata-search {name} ({svcd_count} hits): svcd p50 {:.2} ms p99 {:.2} ms | tantivy p50 {:.2} ms p99 {:.2} ms | svcd is {:.1}x faster at p50",
            ms(svcd_times.0),
            ms(svcd_times.1),
            ms(tantivy_times.0),
            ms(tantivy_times.1),
            tantivy_times.0.as_secs_f64() / svcd_times.0.as_secs_f64()
        );
    }

    let (stream_name, stream_pairs) = streaming_query(&databrowser)?;
    let search = databrowser.prepare("svc", "file", None, &stream_pairs)?;
    let started = Instant::now();
    let mut cursor = databrowser.locations(&search);
    let (mut bytes, mut paths) = (0usize, 0u64);
    loop {
        let n = cursor.next_batch(8192, |_, path, _| {
            bytes += path.len() + 1;
            paths += 1;
        });
        if n == 0 {
            break;
        }
    }
    let svcd_rate = paths as f64 / started.elapsed().as_secs_f64();
    let tquery = tantivy_query(&fields, &stream_pairs);
    let started = Instant::now();
    let docs = searcher.search(&*tquery, &DocSetCollector)?;
    let mut tantivy_paths = 0u64;
    for address in docs {
        let doc: TantivyDocument = searcher.doc(address)?;
        if doc
            .get_first(fields.file)
            .and_then(|v| v.as_str())
            .is_some()
        {
            tantivy_paths += 1;
        }
    }
    let tantivy_rate = tantivy_paths as f64 / started.elapsed().as_secs_f64();
    assert_eq!(paths, tantivy_paths);
    println!(
        "data-search {stream_name}: {paths} paths ({} MiB)",
        bytes >> 20
    );
    report_pair(
        "data-search paths/s (svcd ordered, tantivy unordered)",
        svcd_rate,
        tantivy_rate,
        true,
    );
    drop((cursor, databrowser, catalog, searcher, reader));

    serve_and_measure(&store_dir, &queries, &stream_pairs)?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report_pair(what: &str, svcd: f64, tantivy: f64, higher_is_better: bool) {
    let ratio = if higher_is_better {
        svcd / tantivy
    } else {
        tantivy / svcd
    };
    println!("{what}: svcd {svcd:.0}, tantivy {tantivy:.0}, ratio svcd/tantivy {ratio:.2}");
}

/// p50 and p99 of `REPS` runs after one warm-up.
fn time(mut f: impl FnMut()) -> (Duration, Duration) {
    f();
    let mut samples: Vec<Duration> = (0..REPS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    (samples[REPS / 2], samples[(REPS * 99 / 100).min(REPS - 1)])
}

struct Fields {
    facets: Vec<Field>,
    latest: Field,
    file: Field,
}

fn ingest_tantivy(dir: &Path, records: u64) -> anyhow::Result<(Index, Fields, (f64, u64))> {
    std::fs::create_dir_all(dir)?;
    let mut builder = Schema::builder();
    let facets = FACETS
        .iter()
        .map(|(name, _)| builder.add_text_field(name, STRING | FAST))
        .collect();
    let latest = builder.add_text_field("latest", STRING);
    let file = builder.add_text_field("file", STORED);
    let fields = Fields {
        facets,
        latest,
        file,
    };
    let index = Index::create_in_dir(dir, builder.build())?;
    let started = Instant::now();
    let mut writer: IndexWriter = index.writer(1 << 30)?;
    for record in Workload::new(records) {
        let mut doc = TantivyDocument::new();
        for ((name, _), field) in FACETS.iter().zip(&fields.facets) {
            doc.add_text(*field, &record.facets[*name][0]);
        }
        // The same newest-version rule as svcd: a fifth of datasets have an older half.
        let old = record.version.as_deref() == Some("v20190101");
        doc.add_text(fields.latest, if old { "0" } else { "1" });
        doc.add_text(fields.file, &record.file);
        writer.add_document(doc)?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    let rate = records as f64 / started.elapsed().as_secs_f64();
    let (index, fields) = open_tantivy(dir)?;
    Ok((index, fields, (rate, dir_size(dir))))
}

fn open_tantivy(dir: &Path) -> anyhow::Result<(Index, Fields)> {
    let mut index = Index::open_in_dir(dir)?;
    // Searches use every core, as svcd's facet counts do.
    index.set_default_multithread_executor()?;
    let schema = index.schema();
    let facets = FACETS
        .iter()
        .map(|(name, _)| schema.get_field(name))
        .collect::<Result<_, _>>()?;
    let fields = Fields {
        facets,
        latest: schema.get_field("latest")?,
        file: schema.get_field("file")?,
    };
    Ok((index, fields))
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn tantivy_query(fields: &Fields, pairs: &[(String, String)]) -> Box<dyn Query> {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(
        Occur::Must,
        Box::new(TermQuery::new(
            Term::from_field_text(fields.latest, "1"),
            IndexRecordOption::Basic,
        )),
    )];
    for (key, v) in pairs {
        let i = FACETS
            .iter()
            .position(|(name, _)| name == key)
            .expect("benchmark filters are facets");
        clauses.push((
            Occur::Must,
            Box::new(TermQuery::new(
                Term::from_field_text(fields.facets[i], v),
                IndexRecordOption::Basic,
            )),
        ));
    }
    if clauses.is_empty() {
        Box::new(AllQuery)
    } else {
        Box::new(BooleanQuery::new(clauses))
    }
}

fn all_facets_aggregation() -> Aggregations {
    let mut request = serde_json::Map::new();
    for (name, _) in FACETS {
        request.insert(
            name.to_string(),
            serde_json::json!({"terms": {"field": name, "size": 10000}}),
        );
    }
    serde_json::from_value(serde_json::Value::Object(request)).expect("a valid aggregation request")
}

/// 0, 1 and 3 filters, on the most frequent values (so results are large).
fn query_set(databrowser: &Databrowser) -> anyhow::Result<Vec<(String, Filters)>> {
    let pair = |k: &str, v: String| (k.to_string(), v);
    let top = |facet: &str| -> anyhow::Result<String> {
        let search =
            databrowser.prepare("svc", "file", None, &[("facets".into(), facet.into())])?;
        let m = databrowser.metadata(&search)?;
        let counts = &m.facets[0].1;
        Ok(counts
            .iter()
            .max_by_key(|(_, c)| *c)
            .map(|(t, _)| t.clone())
            .unwrap_or_else(|| value(facet, 0)))
    };
    Ok(vec![
        ("0 filters".into(), vec![]),
        ("1 filter".into(), vec![pair("project", top("project")?)]),
        (
            "3 filters".into(),
            vec![
                pair("project", top("project")?),
                pair("time_frequency", top("time_frequency")?),
                pair("realm", top("realm")?),
            ],
        ),
    ])
}

/// A filter whose result is closest to 1M newest-version records, over the facets both
/// engines index (with fewer records, `fs_type` or `format` would come closest, and tantivy
/// has no field for them).
fn streaming_query(databrowser: &Databrowser) -> anyhow::Result<(String, Filters)> {
    let search = databrowser.prepare("svc", "file", None, &[])?;
    let m = databrowser.metadata(&search)?;
    let mut best: Option<(u64, String, String)> = None;
    let benchmarked = |facet: &str| FACETS.iter().any(|(name, _)| *name == facet);
    for (facet, counts) in m.facets.iter().filter(|(f, _)| benchmarked(f)) {
        for (term, count) in counts {
            let distance = count.abs_diff(1_000_000);
            if best.as_ref().is_none_or(|(d, _, _)| distance < *d) {
                best = Some((distance, facet.clone(), term.clone()));
            }
        }
    }
    let (_, facet, term) = best.expect("the catalogue has terms");
    Ok((format!("{facet}={term}"), vec![(facet, term)]))
}

/// Starts `svcd serve` on the store and repeats the queries over HTTP.
fn serve_and_measure(
    store_dir: &Path,
    queries: &[(String, Filters)],
    stream: &[(String, String)],
) -> anyhow::Result<()> {
    let binary = std::env::var("SVCD_BIN").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/release/svcd")
    });
    if !Path::new(&binary).exists() {
        println!(
            "HTTP: skipped, no svcd binary at {binary} (build it with `cargo build --release`)"
        );
        return Ok(());
    }
    let started = Instant::now();
    let (mut child, address) = svc_bench::serve(&binary, store_dir)?;
    println!(
        "svcd serve ready in {:.1} s, resident memory {} MiB",
        started.elapsed().as_secs_f64(),
        rss_mib(child.id())
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let url = |endpoint: &str, pairs: &[(String, String)]| {
        let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "http://{address}/api/svc-nextgen/databrowser/{endpoint}/svc/file?{}",
            query.join("&")
        )
    };
    for (name, pairs) in queries {
        let u = url("metadata-search", pairs);
        let (p50, p99) = time(|| {
            let body = client
                .get(&u)
                .send()
                .expect("metadata-search")
                .bytes()
                .expect("body");
            std::hint::black_box(body);
        });
        println!(
            "HTTP metadata-search {name}: p50 {:.2} ms p99 {:.2} ms",
            ms(p50),
            ms(p99)
        );
    }
    // Read the stream as a client that processes paths as they arrive would: in chunks into
    // one buffer, never holding the whole body.
    let started = Instant::now();
    let mut response = client.get(url("data-search", stream)).send()?;
    let mut buffer = vec![0_u8; 1 << 20];
    let mut lines = 0;
    loop {
        let n = std::io::Read::read(&mut response, &mut buffer)?;
        if n == 0 {
            break;
        }
        lines += buffer[..n].iter().filter(|b| **b == b'\n').count();
    }
    println!(
        "HTTP data-search: {lines} paths at {:.0} paths/s",
        lines as f64 / started.elapsed().as_secs_f64()
    );
    println!(
        "svcd resident memory after queries: {} MiB",
        rss_mib(child.id())
    );
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()?;
    child.wait()?;
    Ok(())
}

fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb >> 10)
}
