//! data-search and metadata-search: every query feature, translation per flavour, order,
//! `start`, and persistence across a restart.

use serde_json::json;

use crate::fixture;
use crate::harness::Svcd;

fn loaded() -> Svcd {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    svcd
}

fn count(svcd: &Svcd, path: &str) -> usize {
    let reply = svcd.get(path);
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    reply.lines().len()
}

#[test]
fn ping_and_overview() {
    let svcd = Svcd::start();
    assert_eq!(svcd.get("/ping").json(), json!({"ping": "pong"}));
    let overview = svcd.get("/databrowser/overview").json();
    assert_eq!(
        overview["flavours"],
        json!(["svc", "cmip6", "cmip5", "cordex", "user", "nextgems"])
    );
    // The lists themselves are checked against the reference in `flavours::tests`; here, that
    // the overview serves them in order.
    assert_eq!(
        overview["attributes"]["cmip6"],
        json!([
            "experiment_id",
            "member_id",
            "fs_type",
            "grid_label",
            "institution_id",
            "source_id",
            "mip_era",
            "activity_id",
            "realm",
            "variable_id",
            "time",
            "bbox",
            "time_aggregation",
            "frequency",
            "table_id",
            "dataset",
            "format",
            "grid_id",
            "level_type"
        ])
    );
    assert_eq!(
        overview["attributes"]["svc"],
        overview["attributes"]["user"]
    );
    assert!(
        overview["attributes"]["nextgems"]
            .as_array()
            .unwrap()
            .contains(&json!("simulation_id"))
    );
    let openapi = svcd.get("/help/openapi.json").json();
    assert!(openapi["paths"]["/databrowser/data-search/{flavour}/{uniq_key}"].is_object());
    assert!(openapi["paths"]["/data-portal/zarr/convert"]["post"].is_object());
    assert!(openapi["paths"]["/data-portal/zarr/{store}/{key}"]["get"].is_object());
    assert!(svcd.get("/help").text().contains("openapi.json"));
}

#[test]
fn values_of_one_key_or_and_keys_and() {
    let svcd = loaded();
    let q = "/databrowser/data-search/svc/file";
    assert_eq!(count(&svcd, q), 13);
    assert_eq!(count(&svcd, &format!("{q}?multi-version=true")), 15);
    assert_eq!(count(&svcd, &format!("{q}?project=cmip6")), 3);
    assert_eq!(
        count(&svcd, &format!("{q}?project=CMIP6&multi-version=True")),
        5
    );
    assert_eq!(
        count(&svcd, &format!("{q}?project=cmip6&project=cordex")),
        6
    );
    assert_eq!(count(&svcd, &format!("{q}?project=cmip6&variable=ua")), 2);
    assert_eq!(count(&svcd, &format!("{q}?project=cmip6&variable=pr")), 0);
    assert_eq!(
        count(&svcd, &format!("{q}?project=")),
        13,
        "blank values are dropped"
    );
}

#[test]
fn negation_in_four_spellings() {
    let svcd = loaded();
    let q = "/databrowser/data-search/svc/file";
    for filter in [
        "project=-cmip6",
        "project=not%20cmip6",
        "project=!cmip6",
        "project_not_=cmip6",
        "project=NOT+CMIP6",
    ] {
        assert_eq!(count(&svcd, &format!("{q}?{filter}")), 10, "{filter}");
    }
    assert_eq!(
        count(
            &svcd,
            &format!("{q}?project=cmip6&project=cordex&variable=-tas")
        ),
        4
    );
}

#[test]
fn wildcards_and_case_rules() {
    let svcd = loaded();
    let q = "/databrowser/data-search/svc/file";
    assert_eq!(count(&svcd, &format!("{q}?variable=t*")), 3);
    assert_eq!(count(&svcd, &format!("{q}?variable=%3Fas")), 3);
    assert_eq!(
        count(&svcd, &format!("{q}?variable=TAS")),
        3,
        "facet values match in any case"
    );
    assert_eq!(count(&svcd, &format!("{q}?file=/data/obs/*")), 6);
    assert_eq!(
        count(&svcd, &format!("{q}?file=/DATA/obs/*")),
        0,
        "file matches case-sensitively"
    );
    assert_eq!(
        count(&svcd, &format!("{q}?file=/data/other/Mixed/File.nc")),
        1
    );
    assert_eq!(
        count(&svcd, &format!("{q}?file=/data/other/mixed/file.nc")),
        0
    );
    assert_eq!(count(&svcd, &format!("{q}?uri=slk:///data/obs/*")), 6);
    let uris = svcd
        .get("/databrowser/data-search/svc/uri?project=observations")
        .lines();
    assert!(
        uris.iter().all(|u| u.starts_with("slk:///data/obs/")),
        "{uris:?}"
    );
}

#[test]
fn time_and_bbox_select_modes() {
    let svcd = loaded();
    let q = "/databrowser/data-search/svc/file";
    let cases = [
        ("time=2016-09-02T01:00+to+2016-09-02T02:59", 2),
        (
            "time=2016-09-02T00:00+to+2016-09-02T02:59&time_select=strict",
            3,
        ),
        (
            "time=2016-09-02T01:10+to+2016-09-02T01:20&time_select=file",
            1,
        ),
        ("time=1850+to+1860", 1),
        ("time=1850+to+1860&time_select=strict", 0),
        ("time=1850+to+1860&time_select=file", 1),
        ("time=2016", 6),
        ("bbox=-5,5,-5,5", 9),
        ("bbox=-5,5,-5,5&bbox_select=strict", 0),
        ("bbox=-5,5,-5,5&bbox_select=file", 9),
        ("bbox=0,10,40,50", 6),
        ("bbox=-180,180,-90,90&bbox_select=strict", 12),
    ];
    for (filter, expected) in cases {
        assert_eq!(count(&svcd, &format!("{q}?{filter}")), expected, "{filter}");
    }
}

#[test]
fn versions_need_multi_version() {
    let svcd = loaded();
    let q = "/databrowser/data-search/svc/file";
    assert_eq!(
        count(&svcd, &format!("{q}?multi-version=true&version=v20190101")),
        2
    );
    assert_eq!(
        count(&svcd, &format!("{q}?multi-version=true&version=20190101")),
        2
    );
    let reply = svcd.get(&format!("{q}?version=v20190101"));
    assert_eq!(reply.status, 422);
    assert!(
        reply.detail().contains("multi-version"),
        "{}",
        reply.detail()
    );
    let newest = svcd.get(&format!("{q}?project=cmip6&variable=ua")).lines();
    assert!(
        newest.iter().all(|l| l.contains("/v20200101/")),
        "{newest:?}"
    );
}

#[test]
fn order_is_descending_by_path_and_start_is_an_offset() {
    let svcd = loaded();
    let all = svcd.get("/databrowser/data-search/svc/file").lines();
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(all, sorted);
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file?start=2")
            .lines(),
        all[2..].to_vec()
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file?start=100")
            .lines(),
        Vec::<String>::new()
    );
    let uris = svcd.get("/databrowser/data-search/svc/uri").lines();
    assert_eq!(uris.len(), all.len());
}

#[test]
fn flavours_translate_both_ways() {
    let svcd = loaded();
    let d = "/databrowser/data-search";
    assert_eq!(
        count(&svcd, &format!("{d}/cmip6/file?source_id=ACCESS-CM2")),
        2
    );
    assert_eq!(count(&svcd, &format!("{d}/svc/file?model=access-cm2")), 2);
    assert_eq!(
        svcd.get(&format!("{d}/cmip6/file?model=ACCESS-CM2")).status,
        422
    );
    assert_eq!(
        count(
            &svcd,
            &format!("{d}/cmip6/file?translate=false&model=ACCESS-CM2")
        ),
        2
    );
    assert_eq!(
        svcd.get(&format!("{d}/cmip5/file?translate=false&activity_id=cmip"))
            .status,
        422
    );
    assert_eq!(count(&svcd, &format!("{d}/cordex/file?domain=EUR-11")), 3);
    assert_eq!(
        count(&svcd, &format!("{d}/cmip5/file?institution_id=GERICS")),
        3
    );
    assert_eq!(
        count(&svcd, &format!("{d}/nextgems/file?simulation_id=amip")),
        2
    );
    assert_eq!(
        svcd.get(&format!("{d}/user/file")).lines(),
        ["/home/janedoe/tas.nc"]
    );
    assert_eq!(count(&svcd, &format!("{d}/user/file?user=janedoe")), 1);
    assert_eq!(
        count(&svcd, &format!("{d}/svc/file?project=cmip5")),
        0,
        "user data only through the user flavour"
    );
    assert_eq!(
        svcd.get(&format!("{d}/cmip6/file?user=janedoe")).status,
        422
    );
}

#[test]
fn metadata_counts_are_strings_sorted_by_term() {
    let svcd = loaded();
    let m = svcd
        .get("/databrowser/metadata-search/svc/file?project=cmip6")
        .json();
    assert_eq!(m["total_count"], 3);
    assert_eq!(m["facets"]["project"], json!(["cmip6", "3"]));
    assert_eq!(m["facets"]["variable"], json!(["tas", "1", "ua", "2"]));
    assert_eq!(m["facets"]["user"], json!([]));
    assert!(m["facets"].get("version").is_none());
    assert_eq!(m["facet_mapping"]["model"], "model");
    assert_eq!(m["primary_facets"].as_array().unwrap().len(), 10);

    let m = svcd
        .get("/databrowser/metadata-search/cmip6/file?mip_era=cmip6&facets=source_id")
        .json();
    assert_eq!(
        m["facets"],
        json!({"source_id": ["access-cm2", "2", "mpi-esm1-2-lr", "1"]})
    );
    assert_eq!(m["facet_mapping"], json!({"model": "source_id"}));
    assert_eq!(m["primary_facets"][0], "mip_era");

    let m = svcd
        .get("/databrowser/metadata-search/cmip6/file?translate=false&project=cmip6")
        .json();
    assert!(m["facets"].get("model").is_some() && m["facets"].get("source_id").is_none());
    assert_eq!(m["primary_facets"][0], "project");
    assert_eq!(m["facet_mapping"]["model"], "source_id");

    let m = svcd
        .get("/databrowser/metadata-search/svc/file?multi-version=true&project=cmip6")
        .json();
    assert_eq!(
        m["facets"]["version"],
        json!(["20190101", "2", "20200101", "2", "20210101", "1"])
    );

    let m = svcd.get("/databrowser/metadata-search/cordex/file").json();
    assert_eq!(m["primary_facets"].as_array().unwrap().len(), 13);
    assert_eq!(m["facets"]["rcm_name"], json!(["gerics-remo2015", "3"]));

    let reply = svcd.get("/databrowser/metadata-search/svc/file?facets=colour");
    assert_eq!(reply.status, 422);
    assert!(reply.detail().contains("colour"));
}

#[test]
fn data_survives_a_restart() {
    let mut svcd = loaded();
    let before = svcd
        .get("/databrowser/data-search/svc/file?multi-version=true")
        .lines();
    let counts = svcd.get("/databrowser/metadata-search/svc/file").json();
    svcd.restart();
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file?multi-version=true")
            .lines(),
        before
    );
    assert_eq!(
        svcd.get("/databrowser/metadata-search/svc/file").json(),
        counts
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file?project=cmip6")
            .lines()
            .len(),
        3
    );
}
