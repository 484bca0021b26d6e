//! STAC API benchmark: page latency of item searches over HTTP, on the catalogue benchmark's
//! synthetic records (10 million by default, `--records N`).
//!
//! It serves the store with the release `svcd` (`SVCD_BIN`, else `$CARGO_TARGET_DIR/release/svcd`)
//! and times, after one warm-up each, `REPS` requests of every kind a STAC client sends: first
//! pages with and without filters, `next` pages followed by token, a collection's items, POST
//! search, the collection list. It prints p50 and p99 per kind and checks the target, p50
//! under 50 ms for search pages.
//!
//! Run: `make bench-stac` or `cargo bench --workspace --bench stac -- --dir /var/tmp/bench10m`.
//! With `--dir D` it reuses the store in `D/svcd` when there is one (the catalogue benchmark
//! writes it there) and otherwise ingests into it first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const REPS: usize = 50;
/// The target for a search page, from the issue.
const TARGET_P50_MS: f64 = 50.0;

fn main() -> anyhow::Result<()> {
    let records: u64 = svc_bench::arg("--records").map_or(Ok(10_000_000), |v| v.parse())?;
    let temp = tempfile::tempdir()?;
    let dir = svc_bench::arg("--dir").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    let store_dir = dir.join("svcd");
    if store_dir.join("db").join("CURRENT").exists() {
        println!("# STAC benchmark on the store in {}", store_dir.display());
    } else {
        println!(
            "# STAC benchmark: ingesting {records} records into {}",
            store_dir.display()
        );
        svc_bench::ingest(&store_dir.join("db"), records)?;
    }
    let binary = std::env::var("SVCD_BIN").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/release/svcd")
    });
    anyhow::ensure!(
        Path::new(&binary).exists(),
        "no svcd binary at {binary}: build it with `cargo build --release --workspace`"
    );
    let (mut child, address) = svc_bench::serve(&binary, &store_dir)?;
    let result = measure(&format!("http://{address}/api/svc-nextgen/stacapi"));
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()?;
    child.wait()?;
    result
}

fn measure(root: &str) -> anyhow::Result<()> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let get = |url: &str| -> Value {
        let reply = client.get(url).send().expect("answered");
        assert!(reply.status().is_success(), "{url}: {}", reply.status());
        reply.json().expect("JSON")
    };
    let started = Instant::now();
    let collections = get(&format!("{root}/collections"));
    println!(
        "collections, first request (extents computed): {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    let first = collections["collections"][0]["id"]
        .as_str()
        .expect("a collection")
        .to_string();
    let mut rows: Vec<(String, Vec<Duration>, u64)> = Vec::new();
    let mut run = |name: &str, url: String| {
        let matched = get(&url)["numberMatched"].as_u64().unwrap_or(0);
        let samples = (0..REPS)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(
                    client
                        .get(&url)
                        .send()
                        .and_then(|r| r.bytes())
                        .expect("page"),
                );
                t.elapsed()
            })
            .collect();
        rows.push((name.to_string(), samples, matched));
    };
    run("collections (cached)", format!("{root}/collections"));
    run("search, no filter", format!("{root}/search?limit=10"));
    run(
        "search, collection",
        format!("{root}/search?collections={first}&limit=10"),
    );
    run(
        "search, collection + datetime",
        format!(
            "{root}/search?collections={first}&datetime=1900-01-01T00:00:00Z/1950-12-31T23:59:59Z&limit=10"
        ),
    );
    run(
        "search, bbox + datetime",
        format!("{root}/search?bbox=-10,40,10,60&datetime=2000-01-01T00:00:00Z/..&limit=10"),
    );
    run("search, q", format!("{root}/search?q=variable-01&limit=10"));
    run(
        "items of a collection, 100 per page",
        format!("{root}/collections/{first}/items?limit=100"),
    );
    // Paging: each request is the `next` link of the one before, as clients walk a search.
    let mut url = format!("{root}/search?collections={first}&limit=10");
    let mut samples = Vec::new();
    let mut matched = 0;
    for _ in 0..=REPS {
        let t = Instant::now();
        let page: Value = client.get(&url).send()?.json()?;
        samples.push(t.elapsed());
        matched = page["numberMatched"].as_u64().unwrap_or(0);
        let next = page["links"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["rel"] == "next"))
            .and_then(|l| l["href"].as_str())
            .expect("a next page");
        url = next.to_string();
    }
    samples.remove(0);
    rows.push(("search, next pages by token".into(), samples, matched));
    let body = json!({"collections": [first], "limit": 10, "q": "variable-01"});
    let url = format!("{root}/search");
    let post = |b: &Value| client.post(&url).json(b).send().and_then(|r| r.bytes());
    let first: Value = serde_json::from_slice(&post(&body)?)?;
    let matched = first["numberMatched"].as_u64().unwrap_or(0);
    let samples = (0..REPS)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(post(&body).expect("page"));
            t.elapsed()
        })
        .collect();
    rows.push(("POST search, collection + q".into(), samples, matched));

    println!("| request | matched | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    let mut worst: f64 = 0.0;
    for (name, mut samples, matched) in rows {
        samples.sort();
        let p50 = samples[samples.len() / 2].as_secs_f64() * 1e3;
        let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)].as_secs_f64() * 1e3;
        if name.contains("search") {
            worst = worst.max(p50);
        }
        println!("| {name} | {matched} | {p50:.1} | {p99:.1} |");
    }
    println!(
        "slowest search p50 {worst:.1} ms: target p50 < {TARGET_P50_MS} ms {}",
        if worst < TARGET_P50_MS {
            "met"
        } else {
            "MISSED"
        }
    );
    Ok(())
}
