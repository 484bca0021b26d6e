//! The bitmap search against a slow, obvious oracle: random records, random queries, and a
//! linear scan that applies the documented semantics record by record. Facet counts are
//! checked the same way; selections of every size exercise both counting paths.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::record::Record;
use super::{Catalog, time::TimeRange};
use crate::databrowser::params::{SearchParams, build_query};
use crate::db::Db;
use crate::flavours::{Flavour, builtin_mapping};

const PROJECTS: [&str; 4] = ["CMIP6", "cmip5", "Cordex", "obs"];
const VARIABLES: [&str; 5] = ["tas", "tasmax", "pr", "ua", "TOS"];

fn random_record(rng: &mut StdRng, i: usize) -> Record {
    let dataset = i / 3;
    let version = if rng.random_bool(0.5) { "v1" } else { "v2" };
    let mut r = Record::new(format!("/d/{dataset:03}/{version}/f{i:04}.nc"));
    r.facets.insert(
        "project".into(),
        vec![PROJECTS[rng.random_range(0..4)].into()],
    );
    let n = rng.random_range(1..3);
    r.facets.insert(
        "variable".into(),
        (0..n)
            .map(|_| VARIABLES[rng.random_range(0..5)].to_string())
            .collect(),
    );
    if rng.random_bool(0.8) {
        let start = rng.random_range(1950..2000);
        r.time = Some(format!("[{start} TO {}]", start + rng.random_range(0..30)));
    }
    if rng.random_bool(0.2) {
        r.version = Some(version.into());
    }
    r
}

fn random_filters(rng: &mut StdRng) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for _ in 0..rng.random_range(0..4) {
        let (key, values): (&str, &[&str]) = if rng.random_bool(0.5) {
            ("project", &PROJECTS)
        } else {
            ("variable", &VARIABLES)
        };
        let mut value = values[rng.random_range(0..values.len())].to_string();
        if rng.random_bool(0.3) {
            value.truncate(2);
            value.push('*');
        }
        let value = match rng.random_range(0..4) {
            0 => format!("!{value}"),
            1 => format!("not {value}"),
            _ => value,
        };
        pairs.push((key.to_string(), value));
    }
    if rng.random_bool(0.3) {
        let year = rng.random_range(1950..2030);
        pairs.push(("time".into(), format!("{year} to {}", year + 5)));
        pairs.push((
            "time_select".into(),
            ["flexible", "strict", "file"][rng.random_range(0..3)].into(),
        ));
    }
    if rng.random_bool(0.3) {
        pairs.push(("multi-version".into(), "true".into()));
    }
    pairs
}

/// The documented semantics, one record at a time.
fn oracle(
    records: &[Record],
    latest: &dyn Fn(&Record) -> bool,
    pairs: &[(String, String)],
) -> Vec<String> {
    let multi = pairs
        .iter()
        .any(|(k, v)| k == "multi-version" && v == "true");
    let mode = pairs
        .iter()
        .find(|(k, _)| k == "time_select")
        .map_or("flexible", |(_, v)| v.as_str());
    let mut out: Vec<String> = records
        .iter()
        .filter(|r| multi || latest(r))
        .filter(|r| {
            let mut keys: Vec<&str> = pairs
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| *k == "project" || *k == "variable")
                .collect();
            keys.dedup();
            keys.iter().all(|key| {
                let values: Vec<String> = r
                    .facets
                    .get(*key)
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_lowercase())
                    .collect();
                let (mut include, mut exclude) = (Vec::new(), Vec::new());
                for (_, v) in pairs.iter().filter(|(k, _)| k == key) {
                    let v = v.to_lowercase();
                    match v.strip_prefix('!').or_else(|| v.strip_prefix("not ")) {
                        Some(n) => exclude.push(n.to_string()),
                        None => include.push(v),
                    }
                }
                let hit = |p: &String| {
                    values.iter().any(|v| match p.strip_suffix('*') {
                        Some(prefix) => v.starts_with(prefix),
                        None => v == p,
                    })
                };
                (include.is_empty() || include.iter().any(hit)) && !exclude.iter().any(hit)
            })
        })
        .filter(|r| match pairs.iter().find(|(k, _)| k == "time") {
            None => true,
            Some((_, t)) => {
                let q = TimeRange::parse_query(t).unwrap();
                r.time_range().is_some_and(|rt| match mode {
                    "strict" => q.start <= rt.start && rt.end <= q.end,
                    "file" => rt.start <= q.start && q.end <= rt.end,
                    _ => rt.start <= q.end && rt.end >= q.start,
                })
            }
        })
        .map(|r| r.file.clone())
        .collect();
    out.sort_by(|a, b| b.cmp(a));
    out
}

/// Facet counts over the records with these paths, one count per record and term.
fn oracle_counts(records: &[Record], paths: &[String], facet: &str) -> Vec<(String, u64)> {
    let mut counts = std::collections::BTreeMap::new();
    for record in records.iter().filter(|r| paths.contains(&r.file)) {
        let mut terms: Vec<String> = record
            .facets
            .get(facet)
            .into_iter()
            .flatten()
            .map(|v| super::facet::term(facet, v))
            .collect();
        terms.sort();
        terms.dedup();
        for term in terms {
            *counts.entry(term).or_insert(0) += 1;
        }
    }
    counts.into_iter().collect()
}

#[test]
fn bitmap_search_agrees_with_a_linear_scan() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(Catalog::open(Arc::new(Db::open(dir.path()).unwrap())).unwrap());
    let mut rng = StdRng::seed_from_u64(7);
    let mut records: Vec<Record> = (0..600).map(|i| random_record(&mut rng, i)).collect();
    for chunk in records.chunks(97) {
        catalog.add(chunk).unwrap();
    }
    let svc = Flavour::global("svc", builtin_mapping("svc").unwrap());
    // Second round after a removal, so removed postings must be gone from every structure.
    for round in 0..2 {
        if round == 1 {
            let pairs = [
                ("project".to_string(), "obs".to_string()),
                ("multi-version".to_string(), "true".to_string()),
            ];
            let params = SearchParams::parse(&pairs).unwrap();
            catalog
                .remove(&build_query(&svc, &params).unwrap())
                .unwrap();
            records.retain(|r| r.facets["project"][0] != "obs");
        }
        // Newest version: no record of the same dataset directory carries a greater version.
        let latest = |r: &Record| match (&r.version, r.dataset_key()) {
            (Some(v), Some(key)) => !records.iter().any(|o| {
                o.dataset_key().as_ref() == Some(&key)
                    && o.version.as_deref().is_some_and(|ov| ov > v.as_str())
            }),
            _ => true,
        };
        for _ in 0..300 {
            let pairs = random_filters(&mut rng);
            let params = SearchParams::parse(&pairs).unwrap();
            let query = build_query(&svc, &params).unwrap();
            let selection = catalog.select(&query);
            let counts = catalog.facet_counts(&selection, &["project", "variable"]);
            let mut cursor = catalog.cursor(selection, 0);
            let mut found = Vec::new();
            while cursor.next_batch(50, |_, path, _| found.push(path.to_string())) > 0 {}
            assert_eq!(found, oracle(&records, &latest, &pairs), "{pairs:?}");
            assert_eq!(counts[0], oracle_counts(&records, &found, "project"));
            assert_eq!(counts[1], oracle_counts(&records, &found, "variable"));
        }
    }
}
