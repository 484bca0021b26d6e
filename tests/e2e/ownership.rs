//! Whose data is whose: owners are exact identities in every path (add, delete, `user=`
//! searches, the CLI), user data never hides catalogue records or other users' entries, the
//! global flavour scope is not a user name, nobody can claim a location for someone else, and
//! tokens are checked for `nbf`.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::fixture;
use crate::harness::{Svcd, stdout};

fn entry(file: &str) -> Value {
    json!({"file": file, "variable": "tas", "time_frequency": "mon",
           "time": "[2000-01-16T12:00:00Z TO 2000-12-16T12:00:00Z]"})
}

fn add(svcd: &Svcd, token: &str, files: &[&str]) -> String {
    let body = json!({"user_metadata": files.iter().map(|f| entry(f)).collect::<Vec<_>>()});
    let reply = svcd.send("POST", "/databrowser/userdata", Some(token), Some(&body));
    assert_eq!(reply.status, 202, "{}", reply.text());
    reply.json()["status"].as_str().unwrap().to_string()
}

fn delete(svcd: &Svcd, token: &str, body: &Value) -> crate::harness::Reply {
    svcd.send("DELETE", "/databrowser/userdata", Some(token), Some(body))
}

/// The user-data locations a `user=` search returns, sorted.
fn entries_of(svcd: &Svcd, user: &str) -> Vec<String> {
    let query = form_urlencoded(user);
    let mut lines = svcd
        .get(&format!(
            "/databrowser/data-search/user/file?multi-version=true&user={query}"
        ))
        .lines();
    lines.sort();
    lines
}

fn form_urlencoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token signed with the daemon's own key, with any claims (the CLI refuses some names).
fn signed(svcd: &Svcd, claims: &Value) -> String {
    let pem = std::fs::read(svcd.data_dir.join("auth/signing-key.pem")).unwrap();
    let mut all = json!({"iss": "svcd", "aud": "svc-nextgen", "exp": now() + 600});
    for (k, v) in claims.as_object().unwrap() {
        all[k] = v.clone();
    }
    let header = Header::new(Algorithm::EdDSA);
    jsonwebtoken::encode(&header, &all, &EncodingKey::from_ed_pem(&pem).unwrap()).unwrap()
}

#[test]
fn user_names_are_identities_never_patterns() {
    let svcd = Svcd::start();
    let jane = svcd.token("jane", false);
    add(&svcd, &jane, &["/home/jane/a.nc", "/home/jane/b.nc"]);
    let john = svcd.token("john", false);
    add(&svcd, &john, &["/home/john/c.nc"]);

    // Users whose names read as patterns each own one entry; deleting "everything" of theirs
    // removes exactly that entry.
    for name in ["*", "j*", "-jane", "not jane", "JANE", "!jane", "jane?"] {
        let token = svcd.token(name, false);
        add(&svcd, &token, &[&format!("/home/{}/x.nc", name.len())]);
        assert_eq!(entries_of(&svcd, name).len(), 1, "{name}");
        let reply = delete(&svcd, &token, &json!({}));
        assert_eq!(reply.status, 202, "{name}: {}", reply.text());
        assert!(
            reply.json()["status"]
                .as_str()
                .unwrap()
                .contains(": 1 files removed"),
            "{name}: {}",
            reply.text()
        );
        assert_eq!(
            entries_of(&svcd, "jane"),
            ["/home/jane/a.nc", "/home/jane/b.nc"],
            "{name}"
        );
        assert_eq!(entries_of(&svcd, "john"), ["/home/john/c.nc"], "{name}");
    }

    // `user=` searches are exact and case-sensitive: no wildcard, negation or case folding.
    for pattern in ["j*", "JANE", "-jane", "not jane", "*"] {
        assert!(entries_of(&svcd, pattern).is_empty(), "{pattern}");
    }

    // A delete body naming another user is refused and removes nothing; naming oneself is
    // allowed; a blank value would widen the delete and is refused too.
    for body in [json!({"user": "jane"}), json!({"project": " "})] {
        let reply = delete(&svcd, &john, &body);
        assert_eq!(reply.status, 422, "{body}: {}", reply.text());
    }
    assert_eq!(entries_of(&svcd, "john"), ["/home/john/c.nc"]);
    assert_eq!(entries_of(&svcd, "jane").len(), 2);
    let reply = delete(&svcd, &john, &json!({"user": "john"}));
    assert!(
        reply.text().contains(": 1 files removed"),
        "{}",
        reply.text()
    );
    assert_eq!(entries_of(&svcd, "jane").len(), 2);

    // Names that would be ambiguous are refused, by the CLI and in tokens.
    for name in ["global", " ", "a:b"] {
        let output = svcd.cli(&["token", "issue", &format!("--user={name}")]);
        assert!(!output.status.success(), "{name:?} got a token");
        let forged = signed(&svcd, &json!({"sub": name}));
        let reply = svcd.send(
            "POST",
            "/databrowser/userdata",
            Some(&forged),
            Some(&json!({"user_metadata": [entry("/g.nc")]})),
        );
        assert_eq!(reply.status, 401, "{name:?}: {}", reply.text());
        assert!(
            reply.detail().contains("cannot be used"),
            "{}",
            reply.detail()
        );
    }
}

#[test]
fn user_data_never_hides_catalogue_records_or_other_users_entries() {
    let mut svcd = Svcd::start();
    fixture::load(&svcd);
    let newest = "/data/cmip6/CMIP6/CMIP/CSIRO-ARCCSS/ACCESS-CM2/amip/r1i1p1f1/Amon/ua/gn";
    let search = "/databrowser/data-search/svc/file?variable=ua";
    let before = svcd.get(search).lines();
    assert_eq!(before.len(), 2, "{before:?}");
    let stac_before = svcd.get("/stacapi/search?limit=1").json()["numberMatched"].clone();

    let mallory = svcd.token("mallory", false);
    let squat = json!({"user_metadata": [{
        "file": format!("{newest}/v99999999/zz.nc"), "version": "v99999999",
        "variable": "ua", "time_frequency": "mon", "time": "[1979-01 TO 2014-12]"}]});
    let reply = svcd.send(
        "POST",
        "/databrowser/userdata",
        Some(&mallory),
        Some(&squat),
    );
    assert_eq!(reply.status, 202, "{}", reply.text());

    // Two users' versions of one directory do not compete either.
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    for (token, version) in [(&jane, "v1"), (&john, "v2")] {
        let body = json!({"user_metadata": [{
            "file": format!("/shared/exp/{version}/f.nc"), "version": version,
            "variable": "tas", "time_frequency": "mon", "time": "[2000 TO 2001]"}]});
        let reply = svcd.send("POST", "/databrowser/userdata", Some(token), Some(&body));
        assert_eq!(reply.status, 202, "{}", reply.text());
    }

    for round in ["before a restart", "after a restart"] {
        assert_eq!(svcd.get(search).lines(), before, "{round}");
        assert_eq!(
            svcd.get("/stacapi/search?limit=1").json()["numberMatched"],
            stac_before,
            "{round}"
        );
        let shared = svcd
            .get("/databrowser/data-search/user/file?file=/shared/*")
            .lines();
        assert_eq!(shared.len(), 2, "{round}: {shared:?}");
        svcd.restart();
    }
}

#[test]
fn a_location_is_claimed_only_for_its_claimant() {
    let svcd = Svcd::start();
    fixture::load(&svcd);
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    let place = "/home/jane/new/tas.nc";
    let claimed = add(&svcd, &john, &[place]);
    assert!(claimed.starts_with("1 files"), "{claimed}");
    // Jane's own entry at that location is hers to add; john's is not a duplicate for her.
    assert_eq!(
        add(&svcd, &jane, &[place]),
        "1 files have been successfully added to the databrowser. 0 files were duplicates and not added."
    );
    assert_eq!(
        add(&svcd, &jane, &[place]),
        "No data was added to the databrowser. 1 files were duplicates and not added."
    );
    assert_eq!(entries_of(&svcd, "jane"), [place]);
    assert_eq!(entries_of(&svcd, "john"), [place]);

    // A catalogued location: a user's entry there is the user's own record and leaves the
    // catalogue record as it is.
    let catalogued = svcd.get("/databrowser/data-search/svc/file").lines()[0].clone();
    let catalogue_before = svcd.get("/databrowser/metadata-search/svc/file").json();
    assert!(add(&svcd, &jane, &[&catalogued]).starts_with("1 files"));
    assert_eq!(
        svcd.get("/databrowser/metadata-search/svc/file").json(),
        catalogue_before
    );
    let reply = delete(&svcd, &jane, &json!({"file": catalogued}));
    assert!(
        reply.text().contains(": 1 files removed"),
        "{}",
        reply.text()
    );
    assert_eq!(
        svcd.get("/databrowser/metadata-search/svc/file").json(),
        catalogue_before
    );
}

#[test]
fn the_admin_cli_removes_and_counts_user_data() {
    let mut svcd = Svcd::start();
    fixture::load(&svcd);
    let jane = svcd.token("jane", false);
    let john = svcd.token("john", false);
    add(&svcd, &jane, &["/home/jane/a.nc", "/shared/x.nc"]);
    add(&svcd, &john, &["/home/john/c.nc", "/shared/x.nc"]);
    let catalogued = svcd.get("/databrowser/data-search/svc/file").lines()[0].clone();
    add(&svcd, &john, &[&catalogued]);

    // Against the running daemon, and on the store opened by the CLI itself.
    for running in [true, false] {
        let stats = stdout(&svcd.cli(&["index", "stats"]));
        assert!(stats.contains("user data per user:"), "{stats}");
        if running {
            assert!(
                stats.contains("  jane") && stats.contains("  john"),
                "{stats}"
            );
            let out = svcd.cli(&["index", "remove", "user=jane"]);
            assert!(out.status.success(), "{out:?}");
            assert_eq!(stdout(&out).trim(), "removed 2");
            // `user=` is exact: a pattern removes nothing.
            assert_eq!(
                stdout(&svcd.cli(&["index", "remove", "user=j*"])).trim(),
                "removed 0"
            );
            assert!(entries_of(&svcd, "jane").is_empty());
            assert_eq!(entries_of(&svcd, "john").len(), 3);
            // --file names a path, not a pattern: `/shared/*` is that entry alone.
            add(&svcd, &john, &["/shared/*"]);
            let out = svcd.cli(&["index", "remove", "--file", "/shared/*"]);
            assert_eq!(stdout(&out).trim(), "removed 1");
            assert_eq!(entries_of(&svcd, "john").len(), 3);
            // --file clears a location: the catalogue record and every user's entry.
            let out = svcd.cli(&["index", "remove", "--file", &catalogued]);
            assert_eq!(stdout(&out).trim(), "removed 2");
            svcd.stop();
        } else {
            let line = stats.lines().find(|l| l.starts_with("  john")).unwrap();
            assert!(line.ends_with(" 2"), "{stats}");
            let out = svcd.cli(&["index", "remove", "user=john"]);
            assert_eq!(stdout(&out).trim(), "removed 2");
            let stats = stdout(&svcd.cli(&["index", "stats"]));
            assert!(!stats.contains("  john "), "{stats}");
            assert!(stats.contains("  janedoe "), "{stats}");
        }
    }
}

#[test]
fn global_is_a_scope_not_a_user() {
    let svcd = Svcd::start();
    let forged = signed(&svcd, &json!({"sub": "global"}));
    for (method, path, body) in [
        (
            "POST",
            "/databrowser/flavours",
            Some(json!({"flavour_name": "g", "mapping": {}})),
        ),
        (
            "PUT",
            "/databrowser/flavours/nextgems",
            Some(json!({"mapping": {"model": "m"}})),
        ),
        ("DELETE", "/databrowser/flavours/nextgems", None),
    ] {
        let reply = svcd.send(method, path, Some(&forged), body.as_ref());
        assert_eq!(reply.status, 401, "{method} {path}: {}", reply.text());
    }
    let list = svcd.get("/databrowser/flavours").json();
    assert_eq!(list["total"], 6, "{list}");
    // A regular user's personal flavour never becomes global, whatever its owner is called.
    let jane = svcd.token("jane", false);
    let reply = svcd.send(
        "POST",
        "/databrowser/flavours",
        Some(&jane),
        Some(&json!({"flavour_name": "mine", "mapping": {}})),
    );
    assert_eq!(reply.status, 201);
    assert_eq!(svcd.get("/databrowser/flavours").json()["total"], 6);
}

#[test]
fn tokens_before_their_nbf_are_refused() {
    let svcd = Svcd::start();
    let body = json!({"user_metadata": [entry("/home/jane/a.nc")]});
    let early = signed(&svcd, &json!({"sub": "jane", "nbf": now() + 3600}));
    let reply = svcd.send("POST", "/databrowser/userdata", Some(&early), Some(&body));
    assert_eq!(reply.status, 401, "{}", reply.text());
    assert!(
        reply.detail().contains("not valid yet"),
        "{}",
        reply.detail()
    );
    let ready = signed(&svcd, &json!({"sub": "jane", "nbf": now() - 10}));
    let reply = svcd.send("POST", "/databrowser/userdata", Some(&ready), Some(&body));
    assert_eq!(reply.status, 202, "{}", reply.text());
}

#[test]
fn the_control_socket_is_private() {
    let svcd = Svcd::start();
    let socket = svcd.data_dir.join("svcd.sock");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    // No staging directory is left behind.
    let leftovers: Vec<String> = std::fs::read_dir(&svcd.data_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".svcd-sock"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
