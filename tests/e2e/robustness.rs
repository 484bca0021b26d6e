//! Malformed input gets a 4xx with a detail, never a crash; a `kill -9` during an ingest
//! leaves a consistent store.

use std::io::Write;

use crate::fixture;
use crate::harness::{Svcd, cli_in, stdout};

#[test]
fn every_bad_request_gets_a_detail() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let huge = "x".repeat(40_000);
    let cases: Vec<(String, u16, &str)> = vec![
        (
            "/databrowser/data-search/cmipx/file".into(),
            422,
            "Invalid flavour 'cmipx'",
        ),
        ("/databrowser/data-search/svc/path".into(), 422, "uniq_key"),
        (
            "/databrowser/data-search/svc/file?foo=bar".into(),
            422,
            "'foo'",
        ),
        (
            "/databrowser/data-search/svc/file?start=-1".into(),
            422,
            "'start'",
        ),
        (
            "/databrowser/data-search/svc/file?start=abc".into(),
            422,
            "'start'",
        ),
        (
            "/databrowser/data-search/svc/file?start=99999999999999999999999".into(),
            422,
            "'start'",
        ),
        (
            "/databrowser/intake-catalogue/svc/file?max-results=-7".into(),
            422,
            "'max-results'",
        ),
        (
            "/databrowser/intake-catalogue/svc/file?max-results=1e308".into(),
            422,
            "'max-results'",
        ),
        (
            "/databrowser/data-search/svc/file?multi-version=maybe".into(),
            422,
            "'multi-version'",
        ),
        (
            "/databrowser/data-search/svc/file?translate=2".into(),
            422,
            "'translate'",
        ),
        (
            "/databrowser/data-search/svc/file?project=%FF%FE".into(),
            422,
            "UTF-8",
        ),
        (
            "/databrowser/data-search/svc/file?%C3%28=x".into(),
            422,
            "UTF-8",
        ),
        (
            "/databrowser/data-search/svc/file?time=fx".into(),
            422,
            "'time'",
        ),
        (
            "/databrowser/data-search/svc/file?time=2001+to+2000".into(),
            422,
            "'time'",
        ),
        (
            "/databrowser/data-search/svc/file?time=2000&time_select=wide".into(),
            422,
            "time_select",
        ),
        (
            "/databrowser/data-search/svc/file?bbox=fx".into(),
            422,
            "'bbox'",
        ),
        (
            "/databrowser/data-search/svc/file?bbox=181,0,0,0".into(),
            422,
            "longitudes",
        ),
        (
            "/databrowser/data-search/svc/file?bbox=0,1,-91,0".into(),
            422,
            "latitudes",
        ),
        (
            "/databrowser/data-search/svc/file?bbox=0,1,0,1&bbox_select=any".into(),
            422,
            "bbox_select",
        ),
        (
            format!("/databrowser/data-search/svc/file?project={huge}"),
            414,
            "exceeds",
        ),
        ("/databrowser/nothing".into(), 404, "Not Found"),
    ];
    for (path, status, detail) in &cases {
        let reply = svcd.get(path);
        assert_eq!(
            reply.status,
            *status,
            "{path}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        assert!(
            reply.detail().contains(detail),
            "{path}: {}",
            reply.detail()
        );
    }
    let tolerated = [
        "?project=%zz",
        "?project=a%",
        "?=x",
        "?&&&",
        "?multi-version=False",
        "?start=0",
    ];
    for query in tolerated {
        let reply = svcd.get(&format!("/databrowser/data-search/svc/file{query}"));
        assert!(
            reply.status == 200 || reply.status == 422,
            "{query}: {}",
            reply.status
        );
    }
    assert_eq!(
        svcd.get("/ping").status,
        200,
        "the daemon survived: {}",
        svcd.log()
    );
}

#[test]
fn kill_during_ingest_leaves_a_consistent_store() {
    let mut svcd = Svcd::start();
    let path = svcd.data_dir.join("big.jsonl");
    let total = 300_000;
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..total {
            writeln!(
                file,
                r#"{{"file":"/bulk/p{}/v{}/f{i:07}.nc","project":"p{}","variable":"v{}","version":"v1","time":"[2000 TO 2001]"}}"#,
                i % 7,
                i % 13,
                i % 7,
                i % 13
            )
            .unwrap();
        }
    }
    let data_dir = svcd.data_dir.clone();
    let path_text = path.to_str().unwrap().to_string();
    let ingest = std::thread::spawn(move || cli_in(&data_dir, &["index", "add", &path_text], None));
    // Kill once some batches are committed but well before the end.
    loop {
        let reply = svcd.get("/databrowser/metadata-search/svc/file?facets=project");
        let n = reply.json()["total_count"].as_u64().unwrap();
        if n >= 20_000 {
            break;
        }
        assert!(
            !ingest.is_finished(),
            "ingest finished before the kill: {}",
            stdout(&ingest.join().unwrap())
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    svcd.kill();
    let output = ingest.join().unwrap();
    assert!(
        !output.status.success(),
        "the CLI must report the lost daemon"
    );

    let data_dir = svcd.data_dir.clone();
    let mut svcd = Svcd::start_in(&data_dir);
    let m = svcd
        .get("/databrowser/metadata-search/svc/file?facets=project")
        .json();
    let count = m["total_count"].as_u64().unwrap();
    assert!(count > 0 && count < total, "{count}");
    assert_eq!(count % 10_000, 0, "only whole batches are committed");
    let by_project: u64 = m["facets"]["project"]
        .as_array()
        .unwrap()
        .chunks(2)
        .map(|p| p[1].as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(by_project, count, "postings agree with the records");
    let lines = svcd.get("/databrowser/data-search/svc/file").lines();
    assert_eq!(
        lines.len() as u64,
        count,
        "locations agree with the records"
    );

    // The store is usable: the whole file goes in, the committed part is replaced.
    let output = svcd.cli(&["index", "add", path.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout(&output).contains(&format!(
            "added {}, replaced {count}, rejected 0",
            total - count
        )),
        "{}",
        stdout(&output)
    );
    let m = svcd
        .get("/databrowser/metadata-search/svc/file?facets=project")
        .json();
    assert_eq!(m["total_count"], total);
    svcd.stop();
}

#[test]
fn fixture_is_consistent_through_a_second_load() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let path = svcd.data_dir.join("fixture.jsonl");
    let output = svcd.cli(&["index", "add", path.to_str().unwrap()]);
    assert!(
        stdout(&output).contains("added 0, replaced 16, rejected 0"),
        "{}",
        stdout(&output)
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file").lines().len(),
        13
    );
}
