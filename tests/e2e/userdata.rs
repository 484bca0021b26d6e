//! Custom flavours and user data over HTTP: every status of spec 1 endpoints 6-11, use in
//! searches, persistence across restarts, concurrency, and a `kill -9` during an add.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

use crate::fixture;
use crate::harness::Svcd;

fn entry(file: &str) -> Value {
    json!({"file": file, "variable": "tas", "time_frequency": "mon",
           "time": "[2000-01-16T12:00:00Z TO 2000-12-16T12:00:00Z]", "cmor_table": "Amon"})
}

fn status(reply: &crate::harness::Reply) -> String {
    reply.json()["status"].as_str().unwrap().to_string()
}

#[test]
fn flavour_crud_statuses_and_use_in_searches() {
    let mut svcd = Svcd::start();
    fixture::load(&svcd);
    let jane = svcd.token("jane", false);
    let admin = svcd.token("ada", true);
    let post = |token: &str, body: Value| {
        svcd.send("POST", "/databrowser/flavours", Some(token), Some(&body))
    };

    let mine = json!({"flavour_name": "mine", "mapping": {"model": "source", "experiment": "exp"}});
    let reply = post(&jane, mine.clone());
    assert_eq!(reply.status, 201);
    assert_eq!(status(&reply), "Flavour 'mine' added successfully");
    assert_eq!(post(&jane, mine).status, 409);
    for (body, needle) in [
        (
            json!({"flavour_name": "a:b", "mapping": {}}),
            "flavour_name",
        ),
        (json!({"mapping": {}}), "flavour_name"),
        (json!({"flavour_name": "x"}), "mapping"),
        (
            json!({"flavour_name": "x", "mapping": {"project": "uri"}}),
            "reserved",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"fs_type": "storage"}}),
            "fs_type",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"project": "variable"}}),
            "one-to-one",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"colour": "c", "size": "s"}}),
            "colour",
        ),
        (
            json!({"flavour_name": "x", "mapping": {}, "extra": true}),
            "extra",
        ),
        // Names a search could not use: it reads parameter names in lower case, `_not_` as
        // a negation, and its own parameters as such.
        (
            json!({"flavour_name": "x", "mapping": {"model": "Source"}}),
            "lower case",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"experiment": "exp_not_x"}}),
            "_not_",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"variable": "fields"}}),
            "parameter",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"project": "time_select"}}),
            "parameter",
        ),
        (
            json!({"flavour_name": "x", "mapping": {"model": "m".repeat(65)}}),
            "longer than 64",
        ),
    ] {
        let reply = post(&jane, body.clone());
        assert_eq!(reply.status, 422, "{body}");
        assert!(
            reply.detail().contains(needle),
            "{body}: {}",
            reply.detail()
        );
    }
    let global =
        json!({"flavour_name": "shared", "mapping": {"variable": "var"}, "is_global": true});
    assert_eq!(post(&jane, global.clone()).status, 403);
    assert_eq!(post(&admin, global).status, 201);
    assert_eq!(
        post(
            &admin,
            json!({"flavour_name": "svc", "mapping": {}, "is_global": true})
        )
        .status,
        409
    );

    // The custom flavour translates both ways in every search endpoint, for its owner.
    let model = "mpi-esm1-2-lr";
    let by_svc = svcd
        .get(&format!("/databrowser/data-search/svc/file?model={model}"))
        .lines();
    assert!(!by_svc.is_empty());
    let search = |path: &str| svcd.send("GET", path, Some(&jane), None);
    assert_eq!(
        search(&format!(
            "/databrowser/data-search/mine/file?source={model}"
        ))
        .lines(),
        by_svc
    );
    let meta = search("/databrowser/metadata-search/mine/file").json();
    assert!(meta["facets"]["source"].is_array(), "{meta}");
    assert_eq!(meta["facet_mapping"]["model"], "source");
    assert_eq!(
        search(&format!("/databrowser/data-search/mine/file?model={model}")).status,
        422
    );
    let overview = search("/databrowser/overview").json();
    assert!(
        overview["attributes"]["mine"]
            .as_array()
            .unwrap()
            .contains(&json!("source"))
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/shared/file?var=tas")
            .status,
        200
    );

    // Update: partial mapping, rename, conflicts, built-ins.
    let put = |name: &str, token: &str, body: Value| {
        svcd.send(
            "PUT",
            &format!("/databrowser/flavours/{name}"),
            Some(token),
            Some(&body),
        )
    };
    let reply = put(
        "mine",
        &jane,
        json!({"flavour_name": "ours", "mapping": {"project": "proj"}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let listed = svcd
        .send(
            "GET",
            "/databrowser/flavours?flavour_name=ours",
            Some(&jane),
            None,
        )
        .json();
    assert_eq!(listed["total"], 1);
    assert_eq!(
        listed["flavours"][0]["mapping"],
        json!({"experiment": "exp", "model": "source", "project": "proj"})
    );
    assert_eq!(
        status(&put("ours", &jane, json!({"mapping": {"project": "proj"}}))),
        "Flavour 'ours' already up to date"
    );
    assert_eq!(put("nothing", &jane, json!({"mapping": {}})).status, 404);
    assert_eq!(put("shared", &jane, json!({"mapping": {}})).status, 403);
    assert_eq!(
        put("svc", &admin, json!({"mapping": {}, "is_global": true})).status,
        422
    );
    assert_eq!(
        put("ours", &jane, json!({"mapping": {"realm": "source"}})).status,
        422
    );
    assert_eq!(
        post(&jane, json!({"flavour_name": "second", "mapping": {}})).status,
        201
    );
    assert_eq!(
        put(
            "second",
            &jane,
            json!({"flavour_name": "ours", "mapping": {}})
        )
        .status,
        409
    );
    assert_eq!(svcd.get("/databrowser/flavours?colour=red").status, 422);

    // Survives a restart.
    svcd.restart();
    let reply = svcd.send(
        "GET",
        &format!("/databrowser/data-search/ours/file?source={model}&proj=cmip6"),
        Some(&jane),
        None,
    );
    assert_eq!(reply.status, 200, "{}", reply.text());

    // Delete.
    let delete = |name: &str, token: &str| {
        svcd.send(
            "DELETE",
            &format!("/databrowser/flavours/{name}"),
            Some(token),
            None,
        )
    };
    assert_eq!(delete("cmip6", &admin).status, 422);
    assert_eq!(delete("shared", &jane).status, 403);
    assert_eq!(delete("nothing", &jane).status, 404);
    assert_eq!(
        status(&delete("ours", &jane)),
        "Personal flavour 'ours' deleted successfully"
    );
    assert_eq!(
        status(&delete("shared?is_global=true", &admin)),
        "Global flavour 'shared' deleted successfully"
    );
    assert_eq!(
        svcd.send(
            "GET",
            "/databrowser/data-search/ours/file",
            Some(&jane),
            None
        )
        .status,
        422
    );
}

/// One user holds at most 100 personal flavours; another user, and a global flavour, are
/// not held up by them.
#[test]
fn one_user_holds_a_bounded_number_of_flavours() {
    let svcd = Svcd::start();
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    let admin = svcd.token("ada", true);
    let post = |token: &str, body: Value| {
        svcd.send("POST", "/databrowser/flavours", Some(token), Some(&body))
    };
    for i in 0..100 {
        let reply = post(
            &jane,
            json!({"flavour_name": format!("f{i}"), "mapping": {}}),
        );
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let refused = post(&jane, json!({"flavour_name": "one-more", "mapping": {}}));
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert!(
        refused.detail().contains("100 personal flavours"),
        "{}",
        refused.detail()
    );
    assert_eq!(
        post(&john, json!({"flavour_name": "f0", "mapping": {}})).status,
        201
    );
    let global = json!({"flavour_name": "g", "mapping": {}, "is_global": true});
    assert_eq!(post(&admin, global).status, 201);
    // A delete gives the room back.
    let deleted = svcd.send("DELETE", "/databrowser/flavours/f0", Some(&jane), None);
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert_eq!(
        post(&jane, json!({"flavour_name": "one-more", "mapping": {}})).status,
        201
    );
}

#[test]
fn fifty_concurrent_creates_of_one_name_give_one_201() {
    let svcd = Svcd::start();
    let jane = svcd.token("jane", false);
    let body = json!({"flavour_name": "race", "mapping": {"model": "m"}});
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|_| {
                s.spawn(|| {
                    svcd.send("POST", "/databrowser/flavours", Some(&jane), Some(&body))
                        .status
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        49,
        "{statuses:?}"
    );
}

#[test]
fn user_data_is_validated_searchable_at_once_and_deleted_per_owner() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    let add = |token: &str, body: Value| {
        svcd.send("POST", "/databrowser/userdata", Some(token), Some(&body))
    };

    let body = json!({"user_metadata": [entry("/home/jane/b.nc"), entry("/home/jane/a.nc")],
                      "facets": {"project": "Janes", "experiment": "trial"}});
    let reply = add(&jane, body.clone());
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert_eq!(
        status(&reply),
        "2 files have been successfully added to the databrowser. 0 files were duplicates and not added."
    );
    // Searchable as soon as the 202 arrived, through the user flavour only.
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?project=janes")
            .lines(),
        ["/home/jane/b.nc", "/home/jane/a.nc"]
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?user=jane&experiment=trial")
            .lines()
            .len(),
        2
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/svc/file?project=janes")
            .text(),
        ""
    );
    let meta = svcd
        .get("/databrowser/metadata-search/user/file?user=jane")
        .json();
    assert_eq!(meta["total_count"], 2);

    // Duplicates: only the caller's own entries (DECISIONS.md), or repeats within the
    // request; jane's entry and a catalogued location are john's to add.
    let catalogued = svcd.get("/databrowser/data-search/svc/file").lines()[0].clone();
    let reply = add(
        &john,
        json!({"user_metadata": [entry("/home/jane/a.nc"), entry(&catalogued), entry("/home/john/c.nc"), entry("/home/john/c.nc")]}),
    );
    assert_eq!(
        status(&reply),
        "3 files have been successfully added to the databrowser. 1 files were duplicates and not added."
    );
    let reply = add(&john, json!({"user_metadata": [entry(&catalogued)]}));
    assert_eq!(
        status(&reply),
        "No data was added to the databrowser. 1 files were duplicates and not added."
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?user=jane")
            .lines()
            .len(),
        2
    );
    let reply = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&john),
        Some(&json!({"file": "/home/jane/a.nc"})),
    );
    assert!(status(&reply).contains(" 1 files removed"));
    let reply = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&john),
        Some(&json!({"file": catalogued})),
    );
    assert!(status(&reply).contains(" 1 files removed"));

    // A bad entry rejects the whole request and names it; nothing is stored.
    let reply = add(
        &jane,
        json!({"user_metadata": [entry("/home/jane/ok.nc"), {"file": "/home/jane/x.nc", "variable": "tas"},
                                                     {"file": "/home/jane/y.nc", "variable": "tas", "time_frequency": "mon", "time": "yesterday"}]}),
    );
    assert_eq!(reply.status, 422);
    let detail = reply.detail();
    assert!(
        detail.contains("user_metadata[1]: missing time, time_frequency"),
        "{detail}"
    );
    assert!(detail.contains("user_metadata[2]"), "{detail}");
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?file=/home/jane/ok.nc")
            .text(),
        ""
    );
    for bad in [
        json!({"user_metadata": "x"}),
        json!({"facets": {}}),
        json!({"user_metadata": [entry("/y")], "facets": {"user": "john"}}),
    ] {
        assert_eq!(add(&jane, bad.clone()).status, 422, "{bad}");
    }
    let raw = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&jane),
        Some(&json!({"colour": "red"})),
    );
    assert_eq!(raw.status, 422);

    // Delete: only the caller's own entries, all matching ones.
    let reply = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&john),
        Some(&json!({"project": "janes"})),
    );
    assert_eq!(reply.status, 202);
    assert!(status(&reply).contains(" 0 files removed"));
    let reply = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&jane),
        Some(&json!({"file": "/home/jane/a.nc"})),
    );
    assert!(
        status(&reply).contains(" 1 files removed"),
        "{}",
        reply.text()
    );
    let reply = svcd.send(
        "DELETE",
        "/databrowser/userdata",
        Some(&jane),
        Some(&json!({})),
    );
    assert!(
        status(&reply).contains(" 1 files removed"),
        "{}",
        reply.text()
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?user=jane")
            .text(),
        ""
    );
    assert_eq!(
        svcd.get("/databrowser/data-search/user/file?user=john")
            .lines(),
        ["/home/john/c.nc"]
    );
}

/// Sends the head of an add and `body`, returning the open connection.
fn send_add(address: &str, token: &str, body: &[u8], length: usize) -> TcpStream {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /api/svc-nextgen/databrowser/userdata HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
    )
    .unwrap();
    stream.write_all(body).unwrap();
    stream.flush().unwrap();
    stream
}

/// A `kill -9` around a large add: an add that was acknowledged is all there after the
/// restart, and one whose body had not fully arrived left nothing. (Between the two, the add
/// is one RocksDB write batch, which a crash keeps whole or drops whole.)
#[test]
fn kill_during_a_user_data_add_leaves_all_or_nothing() {
    const ENTRIES: usize = 50_000;
    let mut svcd = Svcd::start();
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    let body = |user: &str| {
        let entries: Vec<Value> = (0..ENTRIES)
            .map(|i| entry(&format!("/home/{user}/big/{i:06}.nc")))
            .collect();
        json!({"user_metadata": entries}).to_string().into_bytes()
    };
    let found = |svcd: &Svcd, user: &str| {
        svcd.get(&format!(
            "/databrowser/metadata-search/user/file?user={user}"
        ))
        .json()["total_count"]
            .as_u64()
            .unwrap()
    };
    let address = svcd.address();

    // Acknowledged, then killed at once.
    let mut stream = send_add(&address, &jane, &body("jane"), body("jane").len());
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 202");
    svcd.kill();
    svcd.restart();
    assert_eq!(
        found(&svcd, "jane"),
        ENTRIES as u64,
        "an acknowledged add was lost"
    );

    // Killed while the body is still arriving: the daemon is waiting for the last byte.
    let address = svcd.address();
    let johns = body("john");
    let mut stream = send_add(&address, &john, &johns[..johns.len() - 1], johns.len());
    std::thread::sleep(std::time::Duration::from_millis(200));
    svcd.kill();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    svcd.restart();
    assert_eq!(found(&svcd, "john"), 0, "a partial add survived");
    assert_eq!(found(&svcd, "jane"), ENTRIES as u64);
}
