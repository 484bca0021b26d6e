//! Record ids are reused and memory follows the live records: an add/remove cycle leaves the
//! index no larger than the records it holds, across a restart too, and a cursor never shows
//! a record that took a removed record's id after its selection was made.

use std::sync::Arc;

use super::{Catalog, Query, Record, Source};
use crate::db::Db;

fn records(prefix: &str, n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            let mut r = Record::new(format!("/{prefix}/f{i:05}.nc"));
            r.facets.insert("project".into(), vec![prefix.into()]);
            r
        })
        .collect()
}

fn everything() -> Query {
    Query {
        source: Source::Everything,
        multi_version: true,
        ..Query::default()
    }
}

#[test]
fn removed_ids_are_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path()).unwrap());
    let catalog = Catalog::open(Arc::clone(&db)).unwrap();
    catalog.add(&records("a", 1000)).unwrap();
    for round in 0..5 {
        assert_eq!(
            catalog.remove(&everything()).unwrap(),
            1000,
            "round {round}"
        );
        assert_eq!(catalog.index.read().column_len(), 0, "round {round}");
        catalog.add(&records(&format!("r{round}"), 1000)).unwrap();
        let index = catalog.index.read();
        assert_eq!(index.column_len(), 1000, "round {round}");
        assert_eq!(index.live().max(), Some(999), "round {round}");
    }
    drop(catalog);
    let catalog = Catalog::open(db).unwrap();
    catalog.add(&records("after", 10)).unwrap();
    assert_eq!(catalog.stats().records, 1010);
    assert_eq!(catalog.index.read().live().max(), Some(1009));
}

#[test]
fn cursors_skip_records_born_after_their_selection() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(Catalog::open(Arc::new(Db::open(dir.path()).unwrap())).unwrap());
    catalog.add(&records("old", 1000)).unwrap();
    // Both plans: a small selection is sorted, a large one scans the result order.
    for query in [small_query(), everything()] {
        let selection = catalog.select(&query);
        let expected = selection.len();
        let mut removal = everything();
        removal.clauses = small_query().clauses;
        catalog.remove(&removal).unwrap();
        catalog.add(&records("new", 10)).unwrap();
        let mut cursor = catalog.cursor(selection, 0);
        let mut seen = Vec::new();
        while cursor.next_batch(7, |_, path, _| seen.push(path.to_string())) > 0 {}
        assert!(
            seen.iter().all(|p| p.starts_with("/old/")),
            "a record added later was shown: {seen:?}"
        );
        assert!(seen.len() as u64 <= expected);
        catalog.remove(&everything()).unwrap();
        catalog.add(&records("old", 1000)).unwrap();
    }
}

/// Ten records in a thousand: small enough for the sorted plan.
fn small_query() -> Query {
    let mut query = everything();
    let p = crate::databrowser::params::SearchParams::parse(&[(
        "file".to_string(),
        "/old/f0000?.nc".to_string(),
    )])
    .unwrap();
    let flavour = crate::flavours::Flavour::builtin("svc");
    query.clauses = crate::databrowser::params::build_query(&flavour, &p)
        .unwrap()
        .clauses;
    query
}
