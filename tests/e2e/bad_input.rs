//! Hostile values where a parser splits text (a time ending in its `T`, a multibyte character
//! after a separator, digit runs past every integer type) are a 4xx naming the parameter or a
//! rejected line naming its number, through every surface that takes them; never a crash.

use serde_json::{Value, json};

use crate::fixture;
use crate::harness::{Svcd, cli_in, stdout, write_lines};

/// Times that split into an empty or multibyte rest, percent-encoded for a query string.
const HOSTILE_TIMES: &[&str] = &[
    "2000-01-01T",
    "2000-01-01T%C3%A9",
    "2000-01-01T%E6%97%A512",
    "2000-01-01t",
    "2000+to+2001-01-01T",
    "2000-01-01T+to+2001",
    "2000-01-01T12:00:00.%E6%97%A5",
    "2000-01-01T12:00-05:00",
    "99999999999999999999999999999999",
    "T",
    "%E6%97%A5T",
];

#[test]
fn hostile_times_in_a_search_are_422_naming_time() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    for time in HOSTILE_TIMES {
        for endpoint in ["data-search", "metadata-search"] {
            let path = format!("/databrowser/{endpoint}/svc/file?time={time}");
            let reply = svcd.get(&path);
            assert_eq!(reply.status, 422, "{path}: {}", reply.text());
            assert!(
                reply.detail().contains("'time'"),
                "{path}: {}",
                reply.detail()
            );
        }
    }
    // Still serving, and a valid time still selects.
    assert_eq!(svcd.get("/ping").status, 200, "{}", svcd.log());
    let reply = svcd.get("/databrowser/data-search/svc/file?time=2000-01-01T00");
    assert_eq!(reply.status, 200, "{}", reply.text());
}

fn entry(file: &str, time: &str) -> Value {
    json!({"file": file, "variable": "tas", "time_frequency": "mon", "time": time})
}

#[test]
fn a_user_data_entry_with_a_hostile_time_is_422_naming_the_entry() {
    let svcd = Svcd::start();
    let jane = svcd.token("jane", false);
    for time in [
        "[2000-01-01T TO 2001]",
        "[2000 TO 2001-01-01T]",
        "[2000-01-01T\u{65e5} TO 2001]",
        "2000-01-01T",
    ] {
        let body = json!({"user_metadata": [
            entry("/home/jane/good.nc", "[2000 TO 2001]"),
            entry("/home/jane/bad.nc", time),
        ]});
        let reply = svcd.send("POST", "/databrowser/userdata", Some(&jane), Some(&body));
        assert_eq!(reply.status, 422, "{time}: {}", reply.text());
        let detail = reply.detail();
        assert!(detail.contains("user_metadata[1]"), "{detail}");
        assert!(!detail.contains("user_metadata[0]"), "{detail}");
        assert!(detail.contains(time.trim_matches(['[', ']'])), "{detail}");
    }
    // Nothing was added, and the daemon still serves.
    let reply = svcd.get("/databrowser/data-search/user/file?user=jane");
    assert_eq!((reply.status, reply.text()), (200, String::new()));
}

fn lines_with_a_hostile_time() -> Vec<String> {
    [
        r#"{"file": "/a/1.nc", "project": "cmip6", "time": "[2000 TO 2001]"}"#,
        r#"{"file": "/a/2.nc", "project": "cmip6", "time": "[2000-01-01T TO 2001]"}"#,
        r#"{"file": "/a/3.nc", "project": "cmip6", "time": "[2000-01-01T日 TO 2001]"}"#,
        r#"{"file": "/a/4.nc", "project": "cmip6", "time": "[1999 TO 2000]"}"#,
    ]
    .map(String::from)
    .to_vec()
}

fn committed(svcd: &Svcd) -> Vec<String> {
    let mut files = svcd.get("/databrowser/data-search/svc/file").lines();
    files.sort();
    files
}

fn assert_summary(out: &str, source: &str) {
    assert!(out.contains("added 2, replaced 0, rejected 2"), "{out}");
    assert!(
        out.contains(&format!("{source}:2: 'time'")) && out.contains("2000-01-01T"),
        "{out}"
    );
    assert!(out.contains(&format!("{source}:3: 'time'")), "{out}");
}

#[test]
fn offline_add_rejects_a_hostile_time_by_line_and_commits_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_lines(dir.path(), "times.jsonl", &lines_with_a_hostile_time());
    let source = path.to_str().unwrap();
    let output = cli_in(dir.path(), &["index", "add", source], None);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_summary(&stdout(&output), source);
    let svcd = Svcd::start_in(dir.path());
    assert_eq!(committed(&svcd), ["/a/1.nc", "/a/4.nc"]);
}

#[test]
fn add_through_the_daemon_rejects_a_hostile_time_by_line_and_commits_the_rest() {
    let svcd = Svcd::start();
    let path = write_lines(&svcd.data_dir, "times.jsonl", &lines_with_a_hostile_time());
    let source = path.to_str().unwrap();
    let output = svcd.cli(&["index", "add", source]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_summary(&stdout(&output), source);
    assert_eq!(committed(&svcd), ["/a/1.nc", "/a/4.nc"]);
}

#[test]
fn malformed_authorization_headers_are_401_naming_the_header() {
    let svcd = Svcd::start();
    let body = json!({"user_metadata": [entry("/home/jane/a.nc", "[2000 TO 2001]")]});
    let jane = svcd.token("jane", false);
    for header in [
        "Basic amFuZTpzZWNyZXQ=",
        "Bearer",
        "Bearer    ",
        jane.as_str(),
        &format!("Token {jane}"),
    ] {
        let reply = svcd.send_with(
            "POST",
            "/databrowser/userdata",
            &[("Authorization", header)],
            Some(&body),
        );
        assert_eq!(reply.status, 401, "{header}: {}", reply.text());
        assert!(
            reply.detail().contains("the Authorization header"),
            "{header}: {}",
            reply.detail()
        );
        assert_eq!(reply.header("www-authenticate"), "Bearer");
    }
    // Header bytes outside visible ASCII (an ISO-8859-1 token, say) are named as such.
    let reply = svcd.send_raw_header("POST", "/databrowser/userdata", b"Bearer caf\xe9", &body);
    assert_eq!(reply.status, 401, "{}", reply.text());
    assert!(
        reply.detail().contains("visible ASCII"),
        "{}",
        reply.detail()
    );
    // Nothing was added; a well-formed header still works.
    let reply = svcd.send("POST", "/databrowser/userdata", Some(&jane), Some(&body));
    assert_eq!(reply.status, 202, "{}", reply.text());
}

/// A ring of `n` positions around (10°E, 50°N), closed.
fn ring(n: usize) -> Value {
    let positions: Vec<[f64; 2]> = (0..n)
        .map(|k| {
            let a = k as f64 / n as f64 * std::f64::consts::TAU;
            [10.0 + 5.0 * a.cos(), 50.0 + 5.0 * a.sin()]
        })
        .chain([[15.0, 50.0]])
        .collect();
    json!({"type": "Polygon", "coordinates": [positions]})
}

#[test]
fn stac_geometries_beyond_the_position_limit_are_400_naming_it() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let fits = svcd.send(
        "POST",
        "/stacapi/search",
        None,
        Some(&json!({"intersects": ring(1999)})),
    );
    assert_eq!(fits.status, 200, "{}", fits.text());
    let large = svcd.send(
        "POST",
        "/stacapi/search",
        None,
        Some(&json!({"intersects": ring(2000)})),
    );
    assert_eq!(large.status, 400, "{}", large.text());
    let detail = large.detail();
    assert!(
        detail.contains("2001 positions") && detail.contains("at most 2000"),
        "{detail}"
    );
    let small_query: String =
        form_urlencoded::byte_serialize(ring(3).to_string().as_bytes()).collect();
    let reply = svcd.get(&format!("/stacapi/search?intersects={small_query}"));
    assert_eq!(reply.status, 200, "{}", reply.text());
}

/// A NetCDF file with a time axis of `values` in `units`.
///
/// NetCDF-3: a NetCDF-4 file is written through HDF5, which locks the file while it is open,
/// and a daemon another test spawns at that moment inherits the descriptor and with it the
/// lock, so the crawl could not open the file.
fn time_file(path: &std::path::Path, units: &str, values: &[f64]) {
    let mut file = netcdf::create_with(path, netcdf::Options::_64BIT_OFFSET).unwrap();
    file.add_dimension("time", values.len()).unwrap();
    let mut time = file.add_variable::<f64>("time", &["time"]).unwrap();
    time.put_attribute("standard_name", "time").unwrap();
    time.put_attribute("units", units).unwrap();
    let mut tas = file.add_variable::<f32>("tas", &["time"]).unwrap();
    tas.put_attribute("units", "K").unwrap();
    file.enddef().unwrap();
    file.variable_mut("time")
        .unwrap()
        .put_values(values, ..)
        .unwrap();
    file.variable_mut("tas")
        .unwrap()
        .put_values(&vec![280.0f32; values.len()], ..)
        .unwrap();
    file.close().unwrap();
}

/// Time units and values a file may carry that a careless reader panics or overflows on:
/// a multibyte zone, negative and infinite clock fields, offsets past any day count.
#[test]
fn crawling_files_with_hostile_time_units_indexes_them_all() {
    let svcd = Svcd::start();
    let tree = svcd.data_dir.join("hostile");
    std::fs::create_dir_all(&tree).unwrap();
    let cases: &[(&str, &str, &[f64])] = &[
        ("zone.nc", "days since 2000-01-01 +\u{65e5}", &[0.0, 1.0]),
        ("clock.nc", "days since 2000-01-01 -1:-1:-inf", &[0.0]),
        ("years.nc", "years since 2000-01-01", &[0.0, 1e13]),
        ("months.nc", "months since 2000-01-01", &[-1e12, 1e12]),
        ("seconds.nc", "seconds since 1970-01-01", &[f64::MAX, 0.0]),
        ("fine.nc", "days since 2000-01-01", &[0.0, 31.0]),
    ];
    for (name, units, values) in cases {
        time_file(&tree.join(name), units, values);
    }
    let output = svcd.cli(&["index", "crawl", tree.to_str().unwrap()]);
    let out = stdout(&output);
    assert!(output.status.success(), "{out}\n{}", svcd.log());
    assert!(out.contains("added 6, replaced 0, rejected 0"), "{out}");
    // Only the file with a readable axis in range has a time; the rest are still found.
    let timed = svcd.get("/databrowser/data-search/svc/file?time=2000-01-15");
    assert_eq!(timed.lines().len(), 1, "{}", timed.text());
    assert!(
        timed.text().trim_end().ends_with("fine.nc"),
        "{}",
        timed.text()
    );
    let all = svcd.get("/databrowser/data-search/svc/file?variable=tas");
    assert_eq!(all.lines().len(), 6, "{}", all.text());
}
