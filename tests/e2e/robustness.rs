//! Malformed input gets a 4xx with a detail, never a crash; a `kill -9` during an ingest
//! leaves a consistent store.

use std::io::Write;

use crate::fixture;
use std::process::{Command, Stdio};

use crate::harness::{Svcd, stdout, svcd_bin};

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
    // Queries that are odd but well-formed: a percent sign that starts no escape is kept as
    // it is (as the reference's Starlette does), empty pairs are skipped, and Python-style
    // booleans and a zero offset are accepted.
    let odd = svcd.data_dir.join("odd.jsonl");
    std::fs::write(
        &odd,
        concat!(
            r#"{"file":"/odd/zz.nc","project":"%zz","variable":"tas","time":"[2000 TO 2001]"}"#,
            "\n",
            r#"{"file":"/odd/a.nc","project":"a%","variable":"tas","time":"[2000 TO 2001]"}"#,
            "\n",
        ),
    )
    .unwrap();
    let added = svcd.cli(&["index", "add", odd.to_str().unwrap()]);
    assert!(stdout(&added).contains("added 2,"), "{}", stdout(&added));
    let search = |query: &str| svcd.get(&format!("/databrowser/data-search/svc/file{query}"));
    let everything = search("").lines();
    assert_eq!(search("?project=%zz").lines(), ["/odd/zz.nc"]);
    assert_eq!(search("?project=a%").lines(), ["/odd/a.nc"]);
    for query in ["?&&&", "?multi-version=False", "?start=0"] {
        let reply = search(query);
        assert_eq!(reply.status, 200, "{query}: {}", reply.text());
        assert_eq!(reply.lines(), everything, "{query}");
    }
    let empty_key = search("?=x");
    assert_eq!(empty_key.status, 422, "{}", empty_key.text());
    assert!(
        empty_key.detail().contains("Unknown search facet ''"),
        "{}",
        empty_key.detail()
    );
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
    let lines: Vec<String> = (0..total)
        .map(|i| {
            format!(
                r#"{{"file":"/bulk/p{}/v{}/f{i:07}.nc","project":"p{}","variable":"v{}","version":"v1","time":"[2000 TO 2001]"}}"#,
                i % 7,
                i % 13,
                i % 7,
                i % 13
            )
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    // The CLI reads the records from a pipe that holds back all but the first three batches
    // until the daemon is killed, so the ingest cannot finish first, however fast the
    // machine: the kill always lands in the middle of it.
    let mut ingest = Command::new(svcd_bin())
        .args(["index", "add", "-", "--data-dir"])
        .arg(&svcd.data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let mut pipe = ingest.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for (i, line) in lines.iter().enumerate() {
            if i == 30_000 {
                let _ = released.recv();
            }
            if writeln!(pipe, "{line}").is_err() {
                return; // the CLI gave up: the daemon is gone
            }
        }
    });
    loop {
        let reply = svcd.get("/databrowser/metadata-search/svc/file?facets=project");
        if reply.json()["total_count"].as_u64().unwrap() >= 20_000 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    svcd.kill();
    release.send(()).unwrap();
    feeder.join().unwrap();
    let output = ingest.wait_with_output().unwrap();
    assert!(
        !output.status.success(),
        "the CLI must report the lost daemon: {}",
        stdout(&output)
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
