//! `svc-bench`: workloads for the benchmarks in `benches/`. Synthetic catalogue records with
//! a fixed seed, shaped like a climate archive: datasets of 20 files sharing their facets,
//! skewed facet value frequencies, a fifth of the datasets in two versions.
//!
//! Run: `make bench` (or `cargo bench -p svc-bench --bench catalog -- --records N`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::Instant;

use svc_daemon::{Db, LOAD_BATCH, Record, write_to_store};

/// Files per dataset.
pub const FILES_PER_DATASET: u64 = 20;

/// The facets every synthetic record carries, with the number of distinct values of each.
pub const FACETS: [(&str, usize); 11] = [
    ("project", 5),
    ("product", 10),
    ("institute", 30),
    ("model", 100),
    ("experiment", 50),
    ("time_frequency", 8),
    ("realm", 5),
    ("variable", 200),
    ("ensemble", 20),
    ("cmor_table", 20),
    ("grid_label", 3),
];

/// The value of facet `f` with index `i`, e.g. `model-017`.
pub fn value(facet: &str, i: usize) -> String {
    format!("{facet}-{i:03}")
}

/// Generates records in dataset order, deterministically.
pub struct Workload {
    rng: StdRng,
    next: u64,
    total: u64,
    dataset: Vec<String>,
}

impl Workload {
    /// `total` records from seed 42.
    pub fn new(total: u64) -> Self {
        Workload {
            rng: StdRng::seed_from_u64(42),
            next: 0,
            total,
            dataset: Vec::new(),
        }
    }

    /// Skewed choice: low indices are much more frequent.
    fn pick(&mut self, n: usize) -> usize {
        let x: f64 = self.rng.random();
        ((x * x) * n as f64) as usize
    }
}

impl Iterator for Workload {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.next >= self.total {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let d = i / FILES_PER_DATASET;
        let n = i % FILES_PER_DATASET;
        if n == 0 {
            self.dataset = FACETS
                .iter()
                .map(|(f, k)| value(f, self.pick(*k)))
                .collect();
        }
        // Every fifth dataset exists in two versions: its first half is the older one.
        let version = if d.is_multiple_of(5) && n < FILES_PER_DATASET / 2 {
            "v20190101"
        } else {
            "v20210101"
        };
        let directory = self.dataset.join("/");
        let mut record = Record::new(format!(
            "/work/archive/{directory}/d{d:08}/{version}/f{n:02}_{i:09}.nc"
        ));
        for ((facet, _), v) in FACETS.iter().zip(&self.dataset) {
            record.facets.insert(facet.to_string(), vec![v.clone()]);
        }
        let year = 1850 + (d % 250);
        record.time = Some(format!("[{year}-01-01 TO {year}-12-31]"));
        record.bbox = Some([-180.0, -90.0, 180.0, 90.0]);
        record.version = Some(version.to_string());
        Some(record)
    }
}

/// Writes `records` synthetic records into a new store at `dir`, then compacts it; returns
/// records per second and the size on disk.
///
/// # Errors
/// A store error.
pub fn ingest(dir: &Path, records: u64) -> svc_daemon::Result<(f64, u64)> {
    let db = Db::open(dir)?;
    let started = Instant::now();
    let mut batch = Vec::with_capacity(LOAD_BATCH);
    for record in Workload::new(records) {
        batch.push(record);
        if batch.len() == LOAD_BATCH {
            write_to_store(&db, &batch)?;
            batch.clear();
        }
    }
    write_to_store(&db, &batch)?;
    db.flush()?;
    let rate = records as f64 / started.elapsed().as_secs_f64();
    db.compact();
    Ok((rate, db.size_on_disk()))
}

/// The value after `--name` on the benchmark's command line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

/// Starts `svcd serve` on `data_dir` on a free port; returns the process and its address.
///
/// # Errors
/// When the binary cannot be started or exits before it listens.
pub fn serve(binary: &str, data_dir: &Path) -> std::io::Result<(std::process::Child, String)> {
    let address_file = data_dir.join("svcd.addr");
    let _ = std::fs::remove_file(&address_file);
    let mut child = std::process::Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    loop {
        if let Ok(text) = std::fs::read_to_string(&address_file)
            && text.ends_with('\n')
        {
            return Ok((child, text.trim().to_string()));
        }
        if let Some(status) = child.try_wait()? {
            return Err(std::io::Error::other(format!("svcd exited with {status}")));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
