//! The `svcd` command line: offline ingest with line-numbered rejections, stats, remove,
//! demo data and crawl.

use crate::harness::{Svcd, cli_in, stdout};

#[test]
fn offline_add_reports_rejected_lines_and_commits_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        r#"{"file": "/a/1.nc", "project": "cmip6", "variable": "tas"}"#,
        r#"{"file": "/a/2.nc", "project": 7}"#,
        "",
        r#"{"file": "/a/3.nc", "time": "[2000 TO 1999]"}"#,
        r#"not json"#,
        r#"{"file": "/a/4.nc", "colour": "red"}"#,
        r#"{"file": "/a/5.nc", "bbox": [0, 0, 10, 10], "time": "[2000-01 TO 2000-12]"}"#,
    ]
    .join("\n");
    let output = cli_in(dir.path(), &["index", "add", "-"], Some(&input));
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(out.contains("added 2, replaced 0, rejected 4"), "{out}");
    assert!(
        out.contains("-:2: 'project' must be a string or an array of strings"),
        "{out}"
    );
    assert!(out.contains("-:4: 'time'"), "{out}");
    assert!(out.contains("-:5: invalid JSON"), "{out}");
    assert!(out.contains("-:6: unknown key 'colour'"), "{out}");

    let stats = stdout(&cli_in(dir.path(), &["index", "stats"], None));
    assert!(stats.contains("records      2"), "{stats}");

    let removed = cli_in(dir.path(), &["index", "remove", "--file", "/a/1.nc"], None);
    assert!(
        stdout(&removed).contains("removed 1"),
        "{}",
        stdout(&removed)
    );
    let refused = cli_in(dir.path(), &["index", "remove"], None);
    assert_eq!(refused.status.code(), Some(2));

    let svcd = Svcd::start_in(dir.path());
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file").lines(),
        ["/a/5.nc"]
    );
    let removed = svcd.cli(&["index", "remove", "project=nothing"]);
    assert!(stdout(&removed).contains("removed 0"));
}

#[test]
fn demo_data_crawls_into_a_searchable_catalogue() {
    let svcd = Svcd::start();
    let tree = svcd.data_dir.join("demo");
    let output = svcd.cli(&["demo-data", tree.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let files = walk(&tree);
    assert!(files.len() >= 40, "{} files", files.len());
    std::fs::write(tree.join("broken.nc"), b"not a NetCDF file").unwrap();

    let output = svcd.cli(&["index", "crawl", tree.to_str().unwrap()]);
    let out = stdout(&output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the unreadable file is reported: {out}"
    );
    assert!(
        out.contains(&format!("added {}, replaced 0, rejected 0", files.len())),
        "{out}"
    );
    assert!(
        out.contains("unreadable 1") && out.contains("broken.nc"),
        "{out}"
    );

    let all = svcd
        .get("/databrowser/data-search/svc/file?multi-version=true")
        .lines();
    assert_eq!(all.len(), files.len());
    let latest = svcd.get("/databrowser/data-search/svc/file").lines();
    assert!(
        latest.len() < all.len(),
        "older versions are hidden by default"
    );
    let m = svcd
        .get("/databrowser/metadata-search/svc/file?facets=project")
        .json();
    let projects: Vec<&str> = m["facets"]["project"]
        .as_array()
        .unwrap()
        .iter()
        .step_by(2)
        .map(|v| v.as_str().unwrap())
        .collect();
    for p in ["cmip5", "cmip6", "cordex", "observations"] {
        assert!(projects.contains(&p), "{projects:?}");
    }
    let with_time = svcd
        .get("/databrowser/data-search/svc/file?time=1900+to+2100")
        .lines();
    assert!(
        !with_time.is_empty() && with_time.len() < latest.len(),
        "fx files have no time"
    );
    let boxed = svcd
        .get("/databrowser/data-search/svc/file?bbox=0,10,45,50")
        .lines();
    assert!(!boxed.is_empty(), "crawled boxes are searchable");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "nc") {
            out.push(path);
        }
    }
    out
}

#[test]
fn serve_notifies_systemd_and_stops_on_sigterm() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut child = std::process::Command::new(crate::harness::svcd_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &socket_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buffer = [0u8; 256];
    let n = socket.recv(&mut buffer).expect("READY=1 arrives");
    assert_eq!(String::from_utf8_lossy(&buffer[..n]).trim(), "READY=1");
    let address =
        std::fs::read_to_string(dir.path().join("data/svcd.addr")).expect("listening once ready");
    let ping =
        reqwest::blocking::get(format!("http://{}/api/svc-nextgen/ping", address.trim())).unwrap();
    assert_eq!(ping.status(), 200);
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let n = socket.recv(&mut buffer).expect("STOPPING=1 arrives");
    assert_eq!(String::from_utf8_lossy(&buffer[..n]).trim(), "STOPPING=1");
    assert!(child.wait().unwrap().success());
    assert!(
        !dir.path().join("data/svcd.sock").exists(),
        "the control socket is removed"
    );
}
