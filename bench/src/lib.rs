//! `svc-bench`: workloads for the benchmarks in `benches/`. Synthetic catalogue records with
//! a fixed seed, shaped like a climate archive: datasets of 20 files sharing their facets,
//! skewed facet value frequencies, a fifth of the datasets in two versions.
//!
//! Run: `make bench` (or `cargo bench -p svc-bench --bench catalog -- --records N`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use svc_daemon::catalog::Record;

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
