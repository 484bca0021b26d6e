//! Heavy requests do not take the server from everyone: searches run off the async workers in
//! a bounded number of slots, a search that finds none free gets 503 with `Retry-After`, and
//! cheap requests are answered all the while.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use crate::harness::{Svcd, write_lines};

/// Enough records that a data-search body fills the socket buffers and the stream channel,
/// so a client that does not read it keeps its slot.
const RECORDS: usize = 60_000;

fn big_catalogue(svcd: &Svcd) {
    let padding = "x".repeat(200);
    let lines: Vec<String> = (0..RECORDS)
        .map(|i| format!(r#"{{"file": "/data/{padding}/{i:06}.nc", "project": "big"}}"#))
        .collect();
    let path = write_lines(&svcd.data_dir, "big.jsonl", &lines);
    let output = svcd.cli(&["index", "add", path.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
}

/// Sends a GET and reads only the status line and headers, leaving the body unread.
fn start_unread(svcd: &Svcd, path: &str) -> TcpStream {
    let address = svcd.address();
    let mut stream = TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "GET /api/svc-nextgen{path} HTTP/1.1\r\nHost: {address}\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    stream
}

#[test]
fn a_saturated_server_says_busy_and_still_answers_cheap_requests() {
    let svcd = Svcd::start_with(&[("SVCD_HTTP_MAX_EXPENSIVE_REQUESTS", "1")]);
    big_catalogue(&svcd);
    let search = "/databrowser/data-search/svc/file?project=big";
    let held = start_unread(&svcd, search);

    let busy = svcd.get("/databrowser/metadata-search/svc/file?project=big");
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert!(busy.detail().contains("busy"), "{}", busy.detail());
    assert_eq!(busy.header("retry-after"), "2");
    for cheap in ["/ping", "/databrowser/overview", "/databrowser/flavours"] {
        assert_eq!(svcd.get(cheap).status, 200, "{cheap}");
    }

    // The slot comes back when the stream ends (here: its client goes away).
    drop(held);
    let mut answered = None;
    for _ in 0..50 {
        let reply = svcd.get("/databrowser/metadata-search/svc/file?project=big");
        if reply.status == 200 {
            answered = Some(reply.json()["total_count"].clone());
            break;
        }
        assert_eq!(reply.status, 503);
    }
    assert_eq!(answered, Some(serde_json::json!(RECORDS)));
}

#[test]
fn more_slow_searches_than_workers_leave_ping_answered() {
    let svcd = Svcd::start_with(&[("SVCD_HTTP_MAX_EXPENSIVE_REQUESTS", "4")]);
    big_catalogue(&svcd);
    // Four unread streams hold four blocking threads; the two async workers stay free.
    let held: Vec<TcpStream> = (0..4)
        .map(|_| start_unread(&svcd, "/databrowser/data-search/svc/file?project=big"))
        .collect();
    for _ in 0..5 {
        assert_eq!(svcd.get("/ping").json()["ping"], "pong");
    }
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file?project=big")
            .status,
        503
    );
    drop(held);
}
