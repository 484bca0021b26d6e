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
