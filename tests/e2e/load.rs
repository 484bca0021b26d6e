//! Heavy requests do not take the server from everyone: searches run off the async workers in
//! a bounded number of slots (a search that finds none free gets 503 with `Retry-After`), a
//! streamed answer whose client does not read gives its slot back while it waits, and cheap
//! requests are answered all the while.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use crate::harness::{Svcd, write_lines};

/// Enough records that a data-search body fills the socket buffers and the stream channel,
/// so that its producer waits for a client that does not read it.
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

/// A client that asks for a long streamed answer and reads none of it holds no slot of
/// expensive work while it waits: with the one slot's worth of them (and one more) open,
/// searches are answered at once, and so are cheap requests; each stalled client, once it
/// reads, gets its whole answer. (A saturated server's 503 is tested in the router's tests,
/// with its slots held.)
#[test]
fn clients_that_read_nothing_of_a_streamed_answer_hold_up_no_search() {
    let svcd = Svcd::start_with(&[("SVCD_HTTP_MAX_EXPENSIVE_REQUESTS", "1")]);
    big_catalogue(&svcd);
    let search = "/databrowser/data-search/svc/file?project=big";
    // Asked, and nothing read (not even the status line: what a reader buffers past it
    // would be lost to the count below); `close`, so the answer's end ends the connection.
    let address = svcd.address();
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).unwrap();
            write!(
                stream,
                "GET /api/svc-nextgen{search} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            stream
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(1));
    for _ in 0..3 {
        let counted = svcd.get("/databrowser/metadata-search/svc/file?project=big");
        assert_eq!(counted.status, 200, "{}", counted.text());
        assert_eq!(counted.json()["total_count"], serde_json::json!(RECORDS));
    }
    for cheap in ["/ping", "/databrowser/overview", "/databrowser/flavours"] {
        assert_eq!(svcd.get(cheap).status, 200, "{cheap}");
    }
    for mut stream in held {
        let mut answer = Vec::new();
        std::io::Read::read_to_end(&mut stream, &mut answer).unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        let (body, ended) = dechunked(&answer);
        assert!(ended, "the answer was cut");
        let paths = body
            .split(|&b| b == b'\n')
            .filter(|line| line.starts_with(b"/data/"))
            .count();
        assert_eq!(paths, RECORDS);
    }
}

/// The body of a chunked HTTP/1.1 answer `answer` (head included), and whether it ended with
/// its last chunk (a cut answer does not).
fn dechunked(answer: &[u8]) -> (Vec<u8>, bool) {
    let find = |from: usize| {
        answer[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|at| from + at)
    };
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let (mut at, mut body) = (head_end, Vec::new());
    while let Some(line_end) = find(at) {
        let size = std::str::from_utf8(&answer[at..line_end])
            .ok()
            .and_then(|hex| usize::from_str_radix(hex.trim(), 16).ok())
            .expect("a chunk size");
        if size == 0 {
            return (body, true);
        }
        let start = line_end + 2;
        let Some(chunk) = answer.get(start..start + size) else {
            break;
        };
        body.extend_from_slice(chunk);
        at = start + size + 2;
    }
    (body, false)
}

#[test]
fn more_slow_searches_than_workers_leave_ping_answered() {
    let svcd = Svcd::start_with(&[("SVCD_HTTP_MAX_EXPENSIVE_REQUESTS", "4")]);
    big_catalogue(&svcd);
    // Four unread streams hold four blocking threads (and no slot while they wait); the two
    // async workers stay free, and so do the slots.
    let held: Vec<TcpStream> = (0..4)
        .map(|_| start_unread(&svcd, "/databrowser/data-search/svc/file?project=big"))
        .collect();
    for _ in 0..5 {
        assert_eq!(svcd.get("/ping").json()["ping"], "pong");
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let counted = svcd.get("/databrowser/metadata-search/svc/file?project=big");
    assert_eq!(counted.status, 200, "{}", counted.text());
    drop(held);
}
