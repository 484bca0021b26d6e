//! The STAC API over the fixture catalogue: documents, paging in both directions, filters,
//! stable item ids, axes and views, and the status of every kind of bad input.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::fixture;
use crate::harness::{Reply, Svcd};

fn served() -> Svcd {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    svcd
}

/// Follows an absolute link the server emitted.
fn follow(svcd: &Svcd, link: &Value) -> Reply {
    let href = link["href"].as_str().unwrap();
    let path = href
        .strip_prefix(&svcd.api)
        .unwrap_or_else(|| panic!("{href} is not below {}", svcd.api));
    match link["method"].as_str() {
        Some("POST") => svcd.send("POST", path, None, Some(&link["body"])),
        _ => svcd.get(path),
    }
}

fn link<'a>(document: &'a Value, rel: &str) -> Option<&'a Value> {
    document["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rel"] == rel)
}

fn ids(page: &Value) -> Vec<String> {
    page["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

fn titles(page: &Value) -> BTreeSet<String> {
    page["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["properties"]["title"].as_str().unwrap().to_string())
        .collect()
}

/// Every item of a listing, following `next` links from `first`.
fn walk(svcd: &Svcd, first: Reply) -> Vec<Value> {
    let mut reply = first;
    let mut items = Vec::new();
    loop {
        assert_eq!(reply.status, 200, "{}", reply.text());
        let page = reply.json();
        items.extend(page["features"].as_array().unwrap().iter().cloned());
        match link(&page, "next") {
            Some(next) => reply = follow(svcd, next),
            None => return items,
        }
    }
}

#[test]
fn landing_conformance_and_collections() {
    let svcd = served();
    let landing = svcd.get("/stacapi/");
    assert_eq!(landing.status, 200, "{}", landing.text());
    assert_eq!(landing.header("content-type"), "application/json");
    assert_eq!(landing.header("access-control-allow-origin"), "*");
    let landing = landing.json();
    assert_eq!(landing["type"], "Catalog");
    assert_eq!(landing["stac_version"], "1.1.0");
    for class in ["core", "collections", "item-search"] {
        let uri = format!("https://api.stacspec.org/v1.0.0/{class}");
        assert!(
            landing["conformsTo"]
                .as_array()
                .unwrap()
                .contains(&json!(uri)),
            "{class}"
        );
    }
    let children: BTreeSet<&str> = landing["links"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["rel"] == "child")
        .map(|l| l["href"].as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(
        children,
        BTreeSet::from(["cmip6", "cordex", "mock", "observations"]),
        "user data (janedoe's cmip5 file) is no collection"
    );
    let desc = link(&landing, "service-desc").unwrap();
    let media = desc["type"].as_str().unwrap();
    let path = desc["href"]
        .as_str()
        .unwrap()
        .strip_prefix(&svcd.api)
        .unwrap();
    let openapi = svcd.http_get_with(path, &[("Accept", media)]);
    assert_eq!(openapi.status, 200);
    assert_eq!(openapi.header("content-type"), media);
    assert!(openapi.json()["paths"].is_object());

    let conformance = svcd.get("/stacapi/conformance").json();
    assert_eq!(conformance["conformsTo"], landing["conformsTo"]);

    let collections = svcd.get("/stacapi/collections").json();
    let cordex = collections["collections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "cordex")
        .unwrap()
        .clone();
    assert_eq!(cordex, svcd.get("/stacapi/collections/cordex").json());
    assert_eq!(
        cordex["extent"]["spatial"]["bbox"],
        json!([[-44.6, 21.9, 64.9, 72.6]])
    );
    assert_eq!(
        cordex["extent"]["temporal"]["interval"],
        json!([["2006-01-01T00:00:00Z", "2010-12-31T23:59:59Z"]]),
        "the extent spans the timed records; orog (fx) has none"
    );
    assert_eq!(
        cordex["summaries"]["variable"],
        json!(["orog", "pr", "tas"])
    );
    let mock = svcd.get("/stacapi/collections/MOCK").json();
    assert_eq!(
        mock["id"], "mock",
        "collection ids are the lower-cased terms"
    );
    assert_eq!(
        mock["extent"]["temporal"]["interval"],
        json!([[null, null]])
    );
    let items = link(&cordex, "items").unwrap();
    assert_eq!(items["type"], "application/geo+json");
    assert_eq!(follow(&svcd, items).json()["numberMatched"], 3);
}

#[test]
fn items_page_both_ways_and_items_are_stable() {
    let mut svcd = served();
    let first = svcd.get("/stacapi/collections/observations/items?limit=4");
    assert_eq!(first.header("content-type"), "application/geo+json");
    let page1 = first.json();
    assert_eq!(page1["type"], "FeatureCollection");
    assert_eq!(
        (
            page1["numberMatched"].clone(),
            page1["numberReturned"].clone()
        ),
        (json!(6), json!(4))
    );
    assert!(link(&page1, "prev").is_none());
    assert!(
        link(&page1, "self").unwrap()["href"]
            .as_str()
            .unwrap()
            .contains("limit=4")
    );
    let page2 = follow(&svcd, link(&page1, "next").unwrap()).json();
    assert_eq!(page2["numberReturned"], 2);
    assert!(link(&page2, "next").is_none());
    let back = follow(&svcd, link(&page2, "prev").unwrap()).json();
    assert_eq!(ids(&back), ids(&page1), "prev of page 2 is page 1");
    assert!(link(&back, "prev").is_none());
    let all = walk(
        &svcd,
        svcd.get("/stacapi/collections/observations/items?limit=1"),
    );
    assert_eq!(all.len(), 6);
    let unique: BTreeSet<&str> = all.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(unique.len(), 6, "each item exactly once");

    let item = &all[0];
    assert_eq!(item["collection"], "observations");
    assert_eq!(item["bbox"], json!([-10.0, -10.0, 10.0, 10.0]));
    assert_eq!(item["geometry"]["type"], "Polygon");
    let title = item["properties"]["title"].as_str().unwrap().to_string();
    assert!(title.starts_with("/data/obs/"), "{title}");
    let one = follow(&svcd, link(item, "self").unwrap());
    assert_eq!(one.status, 200, "{}", one.text());
    let one = one.json();
    assert_eq!(one["id"], item["id"]);
    let assets: BTreeSet<&str> = one["assets"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        assets,
        BTreeSet::from([
            "access-data",
            "intake-catalogue",
            "stac-catalogue",
            "svc-data-viewer",
            "svc-databrowser"
        ])
    );
    assert_eq!(one["assets"]["access-data"]["svc:storage"], "local");
    assert_eq!(one["assets"]["access-data"]["requires"], json!(["oauth2"]));
    let intake = one["assets"]["intake-catalogue"]["href"].as_str().unwrap();
    let intake = svcd.get(intake.strip_prefix(&svcd.api).unwrap());
    assert_eq!(intake.json()["catalog_dict"][0]["file"], title);

    // The same id after a restart, and after the record is removed and indexed again.
    let id = item["id"].as_str().unwrap().to_string();
    let item_path = format!("/stacapi/collections/observations/items/{id}");
    svcd.restart();
    assert_eq!(svcd.get(&item_path).json()["properties"]["title"], title);
    let removed = svcd.cli(&["index", "remove", "--file", &title]);
    assert!(removed.status.success(), "{removed:?}");
    assert_eq!(svcd.get(&item_path).status, 404);
    fixture::load_again(&svcd);
    assert_eq!(svcd.get(&item_path).json()["id"], id);
}

#[test]
fn search_filters_and_post_paging() {
    let svcd = served();
    let count = |query: &str| -> u64 {
        let reply = svcd.get(&format!("/stacapi/search?{query}"));
        assert_eq!(reply.status, 200, "{query}: {}", reply.text());
        reply.json()["numberMatched"].as_u64().unwrap()
    };
    assert_eq!(
        count(""),
        13,
        "newest versions of the crawled records, no user data"
    );
    assert_eq!(
        count("limit=5000"),
        13,
        "a limit over 1000 is served as 1000"
    );
    assert_eq!(count("collections=cmip6,cordex"), 6);
    assert_eq!(count("collections=cordex&bbox=0,40,10,50"), 3);
    assert_eq!(
        count("bbox=20,20,30,30"),
        6,
        "cmip6 (global) and cordex (Europe)"
    );
    assert_eq!(
        count("datetime=2016-09-02T01:00:00Z/2016-09-02T02:00:00Z"),
        2,
        "the half-hours starting 01:00 and 02:00"
    );
    assert_eq!(count("datetime=2016-09-02T05:15:00Z"), 1);
    assert_eq!(count("datetime=2016-09-02T05:00:00Z/.."), 1);
    assert_eq!(count("datetime=../1900-01-01T00:00:00Z"), 1);
    assert_eq!(count("q=cmorph"), 6);
    assert_eq!(count("q=TAS"), 3, "MPI tas, cordex tas, the mixed-case TAS");
    assert_eq!(count("q=cmorph,remo2015"), 9, "terms are OR'ed");
    assert_eq!(count("q=nothing-like-this"), 0);

    let matched = |body: Value| -> Value {
        let reply = svcd.send("POST", "/stacapi/search", None, Some(&body));
        assert_eq!(reply.status, 200, "{body}: {}", reply.text());
        reply.json()["numberMatched"].clone()
    };
    let point = |x: f64, y: f64| json!({"type": "Point", "coordinates": [x, y]});
    assert_eq!(
        matched(json!({"intersects": point(5.0, 50.0)})),
        6,
        "cmip6 and cordex"
    );
    assert_eq!(
        matched(json!({"intersects": point(5.0, 5.0)})),
        9,
        "cmip6 and the observations"
    );
    let ring_around_obs = json!({"type": "Polygon", "coordinates": [[[-60.0, -60.0], [60.0, -60.0], [60.0, 15.0], [-60.0, 15.0], [-60.0, -60.0]]]});
    assert_eq!(
        matched(json!({"intersects": ring_around_obs, "collections": ["observations"]})),
        6
    );
    let both = json!({"intersects": point(5.0, 5.0), "bbox": [0, 0, 1, 1]});
    assert_eq!(
        svcd.send("POST", "/stacapi/search", None, Some(&both))
            .status,
        400
    );

    let page = svcd.get("/stacapi/search?collections=cordex").json();
    let wanted: Vec<String> = ids(&page).into_iter().take(2).collect();
    assert_eq!(count(&format!("ids={}", wanted.join(","))), 2);
    assert_eq!(count("ids=not-an-item"), 0);

    let body =
        json!({"collections": ["observations"], "limit": 4, "datetime": "2016-09-02T00:00:00Z/.."});
    let first = svcd.send("POST", "/stacapi/search", None, Some(&body));
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("content-type"), "application/geo+json");
    let first = first.json();
    let next = link(&first, "next").unwrap();
    assert_eq!(next["method"], "POST");
    assert_eq!(next["body"]["collections"], json!(["observations"]));
    assert_eq!(next["merge"], false);
    let second = follow(&svcd, next).json();
    let mut seen = titles(&first);
    seen.extend(titles(&second));
    assert_eq!(seen.len(), 6);
    assert!(link(&second, "next").is_none());
}

#[test]
fn axes_and_views() {
    let svcd = served();
    let models: BTreeSet<String> = svcd.get("/stacapi/model/collections").json()["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        models.contains("access-cm2") && models.contains("mpi-esm1-2-lr") && models.contains("cpc"),
        "{models:?}"
    );
    let access = svcd
        .get("/stacapi/model/collections/access-cm2/items")
        .json();
    assert_eq!(access["numberMatched"], 2, "the newest ua version");
    let self_link = link(&access, "self").unwrap()["href"].as_str().unwrap();
    assert!(
        self_link.contains("/stacapi/model/collections/access-cm2/items"),
        "{self_link}"
    );

    let view = svcd
        .get("/stacapi/collections?visible_collections=c*")
        .json();
    let shown: Vec<&str> = view["collections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["cmip6", "cordex"]);
    assert!(
        link(&view, "self").unwrap()["href"]
            .as_str()
            .unwrap()
            .ends_with("visible_collections=c*")
            || link(&view, "self").unwrap()["href"]
                .as_str()
                .unwrap()
                .ends_with("visible_collections=c%2A"),
        "the view travels in links"
    );
    let searched = svcd
        .get("/stacapi/search?visible_collections=cmip6*")
        .json();
    assert_eq!(searched["numberMatched"], 3);
    assert_eq!(
        svcd.get("/stacapi/collections/observations?visible_collections=cmip6*")
            .status,
        404
    );
    let hidden = svcd.get("/stacapi/search?collections=observations&visible_collections=cmip6*");
    assert_eq!(hidden.status, 400);
    assert!(
        hidden.detail().contains("observations"),
        "{}",
        hidden.detail()
    );
    let none = svcd.get("/stacapi/collections?visible_collections=cmip7*");
    assert_eq!(none.status, 400);
    assert!(
        none.detail().contains("'cmip7*' matched no collections"),
        "{}",
        none.detail()
    );
}

#[test]
fn bad_input_gets_the_documented_status() {
    let svcd = served();
    for (path, status, words) in [
        ("/stacapi/search?bbox=1,2,3", 400, "bbox"),
        ("/stacapi/search?bbox=[100.0,0.0,105.0,1.0]", 400, "bbox"),
        ("/stacapi/search?datetime=1985-04-12", 400, "datetime"),
        ("/stacapi/search?datetime=../..", 400, "datetime"),
        (
            "/stacapi/search?datetime=2001-01-01T00:00:00Z/2000-01-01T00:00:00Z",
            400,
            "after the end",
        ),
        ("/stacapi/search?limit=0", 400, "limit"),
        ("/stacapi/search?limit=-1", 400, "limit"),
        ("/stacapi/search?token=sideways", 400, "token"),
        (
            "/stacapi/search?token=next:cmip6:00000000000000000000000000000000",
            400,
            "context",
        ),
        (
            "/stacapi/search?token=next:search:00000000000000000000000000000000",
            400,
            "no longer",
        ),
        ("/stacapi/search?intersects=x", 400, "intersects"),
        ("/stacapi/collections/cmip6/items?limitx=1", 400, "'limitx'"),
        (
            "/stacapi/collections/cmip6/items?collections=cordex",
            400,
            "does not match",
        ),
        ("/stacapi/collections/nope", 404, "nope"),
        ("/stacapi/collections/nope/items", 404, "nope"),
        (
            "/stacapi/collections/cmip6/items/00000000000000000000000000000000",
            404,
            "not found",
        ),
        ("/stacapi/collections/cmip6/items/garbage", 404, "not found"),
        ("/stacapi/collections/nope/queryables", 404, "nope"),
        ("/stacapi/bogus/collections", 404, "axis"),
    ] {
        let reply = svcd.get(path);
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
        assert!(reply.detail().contains(words), "{path}: {}", reply.detail());
    }
    // A body that is not a JSON object is an invalid body (spec 2, endpoint 15: 422); a
    // malformed value of a field is 400 (DECISIONS.md).
    for (body, status) in [
        ("{", 422),
        ("[]", 422),
        ("", 422),
        (r#"{"bbox": "0,0,1,1"}"#, 400),
        (r#"{"limit": "ten"}"#, 400),
        (r#"{"ids": [1]}"#, 422),
        (r#"{"collections": "cmip6"}"#, 422),
    ] {
        let reply = svcd.post_raw("/stacapi/search", body);
        assert_eq!(reply.status, status, "{body}: {}", reply.text());
        assert!(!reply.detail().is_empty());
    }
}

#[test]
fn queryables_list_the_facets() {
    let svcd = served();
    let reply = svcd.get("/stacapi/queryables");
    assert_eq!(reply.header("content-type"), "application/schema+json");
    let schema = reply.json();
    assert_eq!(schema["properties"]["id"]["type"], "string");
    assert_eq!(schema["properties"]["datetime"]["format"], "date-time");
    assert_eq!(
        schema["properties"]["collection"]["enum"],
        json!(["cmip6", "cordex", "mock", "observations"])
    );
    assert!(schema["properties"].get("user").is_none());
    let variables = &schema["properties"]["variable"]["enum"];
    assert_eq!(variables, &json!(["orog", "pr", "tas", "ua"]));
    let cordex = svcd.get("/stacapi/collections/cordex/queryables").json();
    assert_eq!(
        cordex["properties"]["variable"]["enum"],
        json!(["orog", "pr", "tas"])
    );
    assert!(
        cordex["$id"]
            .as_str()
            .unwrap()
            .ends_with("/stacapi/collections/cordex/queryables")
    );
}

/// Paging goes on while others add and remove records: the token keeps the pivot's place,
/// so removing the pivot does not end the walk, and every item present throughout the walk is
/// visited exactly once, forwards and backwards.
#[test]
fn paging_survives_concurrent_adds_and_removals() {
    let svcd = crate::harness::Svcd::start();
    let record = |name: &str| {
        format!(r#"{{"file": "/walk/{name}.nc", "project": "walk", "time": "[2000 TO 2001]"}}"#)
    };
    let lines: Vec<String> = (0..60).map(|i| record(&format!("a{i:03}"))).collect();
    let path = crate::harness::write_lines(&svcd.data_dir, "walk.jsonl", &lines);
    assert!(
        svcd.cli(&["index", "add", path.to_str().unwrap()])
            .status
            .success()
    );
    let title = |f: &Value| f["properties"]["title"].as_str().unwrap().to_string();

    for (direction, first) in [
        (
            "next",
            "/stacapi/collections/walk/items?limit=7".to_string(),
        ),
        ("prev", String::new()),
    ] {
        let mut url = if direction == "next" {
            first
        } else {
            // Start from the last page and walk back.
            let mut url = "/stacapi/collections/walk/items?limit=7".to_string();
            loop {
                let page = svcd.get(&url).json();
                match link_path(&page, "next") {
                    Some(next) => url = next,
                    None => break,
                }
            }
            url
        };
        let before: Vec<String> = svcd
            .get("/databrowser/data-search/svc/file?project=walk")
            .lines();
        let mut seen: Vec<String> = Vec::new();
        let mut removed: Vec<String> = Vec::new();
        let mut round = 0;
        loop {
            let reply = svcd.get(&url);
            assert_eq!(reply.status, 200, "{direction}: {}", reply.text());
            let page = reply.json();
            let features = page["features"].as_array().unwrap();
            seen.extend(features.iter().map(title));
            // Remove the pivot of the next request (and one more record) and add new ones.
            if let Some(pivot) = if direction == "next" {
                features.last()
            } else {
                features.first()
            } {
                for file in [title(pivot), before[(round * 11) % before.len()].clone()] {
                    if !removed.contains(&file) {
                        let out = svcd.cli(&["index", "remove", "--file", &file]);
                        assert!(out.status.success(), "{out:?}");
                        removed.push(file);
                    }
                }
            }
            let fresh = vec![record(&format!("{direction}{round:03}"))];
            let path = crate::harness::write_lines(&svcd.data_dir, "fresh.jsonl", &fresh);
            assert!(
                svcd.cli(&["index", "add", path.to_str().unwrap()])
                    .status
                    .success()
            );
            round += 1;
            match link_path(&page, direction) {
                Some(next) => url = next,
                None => break,
            }
        }
        let throughout: Vec<&String> = before.iter().filter(|f| !removed.contains(f)).collect();
        for file in &throughout {
            let times = seen.iter().filter(|s| s == file).count();
            assert_eq!(times, 1, "{direction}: {file} seen {times} times");
        }
        assert!(round > 3, "{direction}: the walk spans several pages");
        // Start the next direction from a full catalogue again.
        for file in removed {
            let path = crate::harness::write_lines(
                &svcd.data_dir,
                "back.jsonl",
                &[record(
                    file.trim_start_matches("/walk/").trim_end_matches(".nc"),
                )],
            );
            assert!(
                svcd.cli(&["index", "add", path.to_str().unwrap()])
                    .status
                    .success()
            );
        }
    }
}

/// The path below the API prefix of a page's `rel` link.
fn link_path(page: &Value, rel: &str) -> Option<String> {
    let link = page["links"].as_array()?.iter().find(|l| l["rel"] == rel)?;
    let href = link["href"].as_str()?;
    Some(href.split("/api/svc-nextgen").nth(1)?.to_string())
}
