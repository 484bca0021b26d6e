//! Pages and item ids: walking a selection forward and backward by pivot yields every record
//! exactly once, and item ids find records across removals and re-adds.

use std::sync::Arc;

use super::{Anchor, Catalog, Query, Record, item_id};
use crate::db::Db;

fn catalog(n: usize) -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Catalog::open(Arc::new(Db::open(dir.path()).unwrap())).unwrap();
    let records: Vec<Record> = (0..n)
        .map(|i| {
            let mut r = Record::new(format!("/data/p{}/f{i:04}.nc", i % 3));
            r.facets
                .insert("project".into(), vec![format!("p{}", i % 3)]);
            r
        })
        .collect();
    catalog.add(&records).unwrap();
    (dir, catalog)
}

#[test]
fn pages_walk_both_ways_without_gaps_or_repeats() {
    let (_dir, catalog) = catalog(100);
    let selection = catalog.select(&Query::default());
    for limit in [1, 7, 33, 100, 150] {
        let mut seen = Vec::new();
        let mut anchor = Anchor::Start;
        let mut pages = Vec::new();
        loop {
            let page = catalog.page(&selection, anchor, limit);
            assert_eq!(page.has_previous, !pages.is_empty(), "limit {limit}");
            seen.extend(page.ids.iter().copied());
            let last = page.ids.last().copied();
            let more = page.has_next;
            pages.push(page);
            match (more, last) {
                (true, Some(last)) => anchor = Anchor::After(last),
                _ => break,
            }
        }
        let all: Vec<u32> = selection.ids.iter().collect();
        assert_eq!(seen, all, "limit {limit}");
        // Back from the last page by `prev` pivots reproduces every earlier page.
        for k in (1..pages.len()).rev() {
            let back = catalog.page(&selection, Anchor::Before(pages[k].ids[0]), limit);
            assert_eq!(back.ids, pages[k - 1].ids, "limit {limit}, page {k}");
            assert!(back.has_next);
            assert_eq!(back.has_previous, k > 1);
        }
    }
}

#[test]
fn item_ids_are_stable_and_find_their_record() {
    let (_dir, catalog) = catalog(30);
    let path = "/data/p1/f0004.nc";
    let id = item_id(path);
    assert_eq!(id.len(), 32);
    let record = catalog.record_of_item(&id).expect("indexed");
    assert_eq!(catalog.records(&[record]).unwrap()[0].file, path);
    assert_eq!(catalog.record_of_item(&id.to_uppercase()), None);
    assert_eq!(catalog.record_of_item("not-an-id"), None);
    let query = Query {
        item_keys: Some(vec![super::parse_item_id(&id).unwrap()]),
        ..Query::default()
    };
    assert_eq!(catalog.select(&query).len(), 1);

    let params =
        crate::databrowser::params::SearchParams::parse(&[("file".into(), path.into())]).unwrap();
    let svc = crate::flavours::Flavour::builtin("svc");
    assert_eq!(
        catalog
            .remove(&crate::databrowser::params::build_query(&svc, &params).unwrap())
            .unwrap(),
        1
    );
    assert_eq!(catalog.record_of_item(&id), None);
    catalog.add(&[Record::new(path)]).unwrap();
    assert!(
        catalog.record_of_item(&id).is_some(),
        "the same id after re-indexing"
    );
}
