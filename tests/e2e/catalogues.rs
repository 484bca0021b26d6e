//! intake-esm and static STAC catalogues: shape, headers, 400/404 on no hits, 413 over
//! `max-results`.

use std::io::{Cursor, Read};

use serde_json::Value;

use crate::fixture;
use crate::harness::Svcd;

#[test]
fn intake_catalogue_lists_every_match() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let reply = svcd.get("/databrowser/intake-catalogue/svc/file?project=cmip6");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), "application/json");
    let disposition = reply.header("content-disposition");
    assert!(
        disposition.starts_with("attachment; filename=\"IntakeEsmCatalogue_")
            && disposition.ends_with("_file.json\""),
        "{disposition}"
    );
    let cat = reply.json();
    assert_eq!(cat["esmcat_version"], "0.1.0");
    assert_eq!(cat["assets"]["column_name"], "file");
    assert!(
        cat["description"]
            .as_str()
            .unwrap()
            .contains(env!("CARGO_PKG_VERSION"))
    );
    let entries = cat["catalog_dict"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(
        entries[0]["variable"],
        serde_json::json!(["tas"]),
        "MPI-M sorts before CSIRO-ARCCSS, descending"
    );
    assert_eq!(entries[0]["fs_type"], "posix");
    let columns: Vec<&str> = cat["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["column_name"].as_str().unwrap())
        .collect();
    assert!(
        columns.contains(&"project") && !columns.contains(&"driving_model"),
        "{columns:?}"
    );

    let cmip6 = svcd
        .get("/databrowser/intake-catalogue/cmip6/uri?mip_era=cmip6")
        .json();
    assert_eq!(cmip6["assets"]["column_name"], "uri");
    assert_eq!(
        cmip6["aggregation_control"]["variable_column_name"],
        "variable_id"
    );
    assert!(cmip6["catalog_dict"][0].get("source_id").is_some());

    let all = svcd
        .get("/databrowser/intake-catalogue/svc/file?multi-version=true")
        .json();
    assert_eq!(all["catalog_dict"].as_array().unwrap().len(), 15);

    let none = svcd.get("/databrowser/intake-catalogue/svc/file?project=nothing");
    assert_eq!(none.status, 400);
    assert_eq!(none.detail(), "No results found.");
    let big = svcd.get("/databrowser/intake-catalogue/svc/file?project=cmip6&max-results=2");
    assert_eq!(big.status, 413);
    assert!(big.detail().contains("max-results"), "{}", big.detail());
    assert_eq!(
        svcd.get("/databrowser/intake-catalogue/svc/file?project=cmip6&max-results=3")
            .status,
        200
    );
}

fn unzip(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).expect("a ZIP archive");
    (0..archive.len())
        .map(|i| {
            let mut file = archive.by_index(i).unwrap();
            let mut text = String::new();
            file.read_to_string(&mut text).unwrap();
            (
                file.name().unwrap().to_string(),
                serde_json::from_str(&text).expect("every entry is JSON"),
            )
        })
        .collect()
}

#[test]
fn static_catalogue_is_a_zip_of_linked_stac_objects() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let reply = svcd.get("/databrowser/stac-catalogue/cordex/file?domain=EUR-11");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), "application/zip");
    assert!(
        reply
            .header("content-disposition")
            .contains("filename=\"stac-catalog-Dataset-")
    );
    let entries = unzip(&reply.body);
    assert_eq!(entries.len(), 5, "catalog, 3 items, collection");
    assert_eq!(entries[0].0, "stac-catalog/catalog.json");
    let (collection_name, collection) = entries.last().unwrap();
    assert!(collection_name.ends_with("/collection.json"));
    assert_eq!(collection["type"], "Collection");
    assert_eq!(
        collection["extent"]["spatial"]["bbox"][0],
        serde_json::json!([-44.6, 21.9, 64.9, 72.6])
    );
    assert_eq!(
        collection["extent"]["temporal"]["interval"][0][0],
        "2006-01-01T00:00:00Z"
    );
    for (name, item) in &entries[1..4] {
        assert!(name.contains("/items/item"), "{name}");
        assert_eq!(item["stac_version"], "1.1.0");
        assert_eq!(item["links"][1]["href"], "../../../catalog.json");
        assert!(
            item["properties"].get("domain").is_some(),
            "cordex names in properties"
        );
        assert_eq!(item["collection"], collection["id"]);
    }

    let none = svcd.get("/databrowser/stac-catalogue/svc/file?project=nothing");
    assert_eq!(none.status, 404);
    assert_eq!(none.detail(), "No results found.");
    assert_eq!(
        svcd.get("/databrowser/stac-catalogue/svc/file?max-results=1")
            .status,
        413
    );
    assert_eq!(
        svcd.get("/databrowser/stac-catalogue/svc/file?collection=x")
            .status,
        422
    );
}
