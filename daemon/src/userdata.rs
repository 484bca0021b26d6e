//! Users' own file entries (spec 1, endpoints 6 and 7).
//!
//! An add is validated as a whole before anything is stored: every entry needs string values
//! for `file`, `variable`, `time` and `time_frequency`, and a parsable `time`; one bad entry
//! rejects the request with a 422 naming each offending entry. The accepted entries are then
//! written in one atomic batch ([`Catalog::add_new`]), so a crash leaves either all of them
//! or none, and they are searchable through the `user` flavour before the answer is sent.
//!
//! The owner is the caller's user name exactly as the token gives it: an identity, never a
//! pattern. Adds write it, deletes and `user=` searches match it byte for byte (case too).
//!
//! Decisions where the spec and DECISIONS.md are silent:
//! - A user entry is identified by its owner and location (DECISIONS.md: only the caller's own
//!   entries count as duplicates). An entry whose `file` the caller already indexed is a
//!   duplicate: skipped and counted, never overwritten. Another user's entry, or a catalogue
//!   record, at the same location is a different record: it neither blocks the entry nor is
//!   touched by it. User data is versioned per owner, so it never changes which version of a
//!   catalogue dataset (or of another user's entries) searches show.
//! - One add takes at most [`MAX_ENTRIES`] entries (422 beyond), so one request's memory and
//!   write are bounded; larger collections are added in several requests. One user holds at
//!   most [`MAX_ENTRIES_PER_USER`] (422 beyond). A `file` is at most [`MAX_PATH_BYTES`]
//!   long, any other value [`MAX_VALUE_BYTES`], and no value holds a control character
//!   (422): each is kept in the shared index in memory, walked by every wildcard search, and
//!   a line break in a path would split a line of `data-search`'s answer.
//! - A delete body may name `user` only as the caller (a no-op); any other owner is 422, so
//!   a body can never widen a delete beyond the caller's entries.
//! - `time` may be `fx` (time-invariant files, as freva-client sends them): the entry has no
//!   time range.
//! - Entry keys that are not standard facets are accepted and not indexed (they could not be
//!   searched). `facets` may not set `user`, `file` or `uri` (422): the owner is always the
//!   caller and the location comes from the entry.
//! - Delete keys are standard facet names with string (or number) values, matched as the
//!   search matches them (case-insensitive, wildcards); `file` and `uri` match exactly.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::auth::Caller;
use crate::catalog::facet::{self, OWNER, STANDARD_FACETS};
use crate::catalog::query::{Field, Pattern, Query, Source};
use crate::catalog::time::TimeRange;
use crate::catalog::{Catalog, Record};
use crate::databrowser::params::{SearchParams, build_query};
use crate::error::{Error, Fault, Result};
use crate::flavours::Flavour;

/// Keys every entry must carry.
const REQUIRED: [&str; 4] = ["file", "variable", "time", "time_frequency"];

/// How many entry problems a 422 lists before summarising.
const LISTED_PROBLEMS: usize = 20;

/// The most entries one add request may carry.
pub(crate) const MAX_ENTRIES: usize = 100_000;

/// Keys `facets` may not set.
const FIXED_KEYS: [&str; 3] = ["user", "file", "uri"];

/// The longest `file` of an entry, in bytes: Linux's longest path (`PATH_MAX`).
pub(crate) const MAX_PATH_BYTES: usize = 4096;

/// The longest value of any other key, in bytes. Real facet values are tens of bytes; every
/// value is kept in the shared index, and every wildcard or free-text search walks them.
pub(crate) const MAX_VALUE_BYTES: usize = 1024;

/// The most entries one user may hold: each is kept in the shared index, in memory.
pub(crate) const MAX_ENTRIES_PER_USER: u64 = 1_000_000;

fn object(body: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::invalid(
            "body",
            Fault::WrongType,
            "body: expected a JSON object",
        )),
        Err(e) => Err(Error::invalid(
            "body",
            Fault::Syntax,
            format!("body: invalid JSON: {e}"),
        )),
    }
}

/// Turns an add request into records owned by `caller`.
///
/// # Errors
/// [`Error::InvalidParameter`] listing every problem.
fn parse_add(body: &[u8], caller: &Caller) -> Result<Vec<Record>> {
    let mut body = object(body)?;
    if let Some(unknown) = body
        .keys()
        .find(|k| *k != "user_metadata" && *k != "facets")
    {
        return Err(Error::invalid(
            "body",
            Fault::Unknown,
            format!("body: unknown field {unknown:?}; expected user_metadata and facets"),
        ));
    }
    let entries = match body.remove("user_metadata") {
        Some(Value::Array(entries)) => entries,
        Some(_) => {
            return Err(Error::invalid(
                "user_metadata",
                Fault::WrongType,
                "user_metadata: expected an array of objects",
            ));
        }
        None => {
            return Err(Error::invalid(
                "user_metadata",
                Fault::WrongType,
                "user_metadata: required",
            ));
        }
    };
    if entries.is_empty() {
        return Err(Error::invalid(
            "user_metadata",
            Fault::Refused,
            "user_metadata: no entries",
        ));
    }
    if entries.len() > MAX_ENTRIES {
        return Err(Error::invalid(
            "user_metadata",
            Fault::Refused,
            format!(
                "user_metadata: {} entries, at most {MAX_ENTRIES} may be added per request; \
             add them in several requests",
                entries.len()
            ),
        ));
    }
    let facets = match body.remove("facets") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(Error::invalid(
                "facets",
                Fault::WrongType,
                "facets: expected an object",
            ));
        }
    };
    let mut extra = BTreeMap::new();
    for (key, value) in facets {
        if FIXED_KEYS.contains(&key.as_str()) {
            return Err(Error::invalid(
                format!("facets.{key}"),
                Fault::Refused,
                format!("facets: {key:?} cannot be set; it is the caller or the entry's location"),
            ));
        }
        match value {
            Value::String(s) => extra.insert(key, s),
            _ => {
                return Err(Error::invalid(
                    format!("facets.{key}"),
                    Fault::WrongType,
                    format!("facets.{key}: expected a string"),
                ));
            }
        };
    }
    let mut problems = Vec::new();
    let mut records = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        match entry_record(entry, &extra, caller) {
            Ok(record) => records.push(record),
            Err(problem) => problems.push(format!("user_metadata[{i}]: {problem}")),
        }
    }
    if problems.is_empty() {
        return Ok(records);
    }
    let total = problems.len();
    problems.truncate(LISTED_PROBLEMS);
    let mut detail = format!(
        "Invalid user data, nothing was added: {}",
        problems.join("; ")
    );
    if total > LISTED_PROBLEMS {
        detail.push_str(&format!("; and {} more", total - LISTED_PROBLEMS));
    }
    Err(Error::invalid("user_metadata", Fault::Refused, detail))
}

fn entry_record(
    entry: Value,
    facets: &BTreeMap<String, String>,
    caller: &Caller,
) -> std::result::Result<Record, String> {
    let Value::Object(entry) = entry else {
        return Err("expected an object".into());
    };
    let mut values = BTreeMap::new();
    for (key, value) in entry {
        match value {
            Value::String(s) => values.insert(key, s),
            other => return Err(format!("{key:?} must be a string, not {other}")),
        };
    }
    for (key, value) in values.iter().chain(facets.iter()) {
        check_value(key, value)?;
    }
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|k| values.get(*k).is_none_or(|v| v.trim().is_empty()))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing {}", missing.join(", ")));
    }
    let mut record = Record::new(values["file"].clone());
    let time = values["time"].trim();
    if !time.eq_ignore_ascii_case("fx") {
        TimeRange::parse_record(time)?;
        record.time = Some(time.to_string());
    }
    let merged = values.iter().chain(facets.iter());
    for (key, value) in merged {
        match key.as_str() {
            "file" | "uri" | "time" | "user" => {}
            "version" => record.version = Some(value.clone()).filter(|v| !v.is_empty()),
            _ if facet::is_term_facet(key) && !value.is_empty() => {
                record.facets.insert(key.clone(), vec![value.clone()]);
            }
            _ => {}
        }
    }
    record
        .facets
        .insert("user".into(), vec![caller.user.clone()]);
    record.validate()?;
    Ok(record)
}

/// Refuses a value longer than its bound ([`MAX_PATH_BYTES`] for `file`,
/// [`MAX_VALUE_BYTES`] for any other key), or holding a control character: a line break in
/// a `file` made one entry two lines of a `data-search` answer, one of them any path.
fn check_value(key: &str, value: &str) -> std::result::Result<(), String> {
    let most = if key == "file" {
        MAX_PATH_BYTES
    } else {
        MAX_VALUE_BYTES
    };
    if value.len() > most {
        return Err(format!(
            "{key:?} is {} bytes long, at most {most}",
            value.len()
        ));
    }
    if let Some(control) = value.chars().find(|c| c.is_control()) {
        return Err(format!("{key:?} holds the control character {control:?}"));
    }
    Ok(())
}

/// Adds the entries of an add request owned by `caller`; returns the status message.
///
/// # Errors
/// 422 listing every bad entry (nothing is added), or a store error (nothing was added).
pub(crate) fn add(catalog: &Catalog, body: &[u8], caller: &Caller) -> Result<String> {
    let records = parse_add(body, caller)?;
    let mut owned = Query::over(Source::UserData);
    owned.set_multi_version(true);
    owned.only_owner(&caller.user);
    // Counted before the add: two adds at once may pass the bound by one request's entries.
    let held = catalog.select(&owned).len();
    if held + records.len() as u64 > MAX_ENTRIES_PER_USER {
        return Err(Error::invalid(
            "user_metadata",
            Fault::Refused,
            format!(
                "user_metadata: you hold {held} entries, and one user may hold at most \
                 {MAX_ENTRIES_PER_USER}; delete some first"
            ),
        ));
    }
    let (added, duplicates) = catalog.add_new(&records)?;
    drop(records);
    if added >= crate::memory::LARGE_CHANGE {
        // The parsed body and the index's grown columns leave much freed memory behind.
        crate::memory::release_free_heap();
    }
    Ok(if added == 0 {
        format!(
            "No data was added to the databrowser. {duplicates} files were duplicates and not added."
        )
    } else {
        format!(
            "{added} files have been successfully added to the databrowser. \
             {duplicates} files were duplicates and not added."
        )
    })
}

/// Deletes the caller's entries matching every key of the body; returns the status message.
///
/// # Errors
/// 422 for a malformed body or an unknown key; a store error (nothing removed).
pub(crate) fn delete(catalog: &Catalog, body: &[u8], caller: &Caller) -> Result<String> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        object(body)?
    };
    let mut pairs = vec![("multi-version".to_string(), "true".to_string())];
    let mut exact = Vec::new();
    for (key, value) in body {
        if !STANDARD_FACETS.contains(&key.as_str()) && key != "file" && key != "uri" {
            return Err(Error::invalid(
                key.as_str(),
                Fault::Unknown,
                format!("{key:?} is not a search key; use the standard facet names, file or uri"),
            ));
        }
        let value = match value {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            _ => {
                return Err(Error::invalid(
                    key.as_str(),
                    Fault::WrongType,
                    format!("{key}: expected a string"),
                ));
            }
        };
        if value.trim().is_empty() {
            // A search drops blank values; here that would widen the delete.
            return Err(Error::invalid(
                key.as_str(),
                Fault::Refused,
                format!("{key}: empty value"),
            ));
        }
        if key == "file" || key == "uri" {
            // A location names one entry: exact, never a pattern or a negation.
            let field = if key == "file" {
                Field::File
            } else {
                Field::Uri
            };
            exact.push((field, value));
            continue;
        }
        if key == OWNER {
            // Only the caller's own entries can be deleted: naming them is allowed, naming
            // anyone else is an error rather than a filter that is silently dropped.
            if value != caller.user {
                return Err(Error::invalid(
                    "user",
                    Fault::Refused,
                    format!(
                        "user: {value:?} is not you; only your own entries ({:?}) can be deleted",
                        caller.user
                    ),
                ));
            }
            continue;
        }
        pairs.push((key, value));
    }
    let params = SearchParams::parse(&pairs)?;
    let mut query = build_query(&Flavour::builtin("user"), &params)?;
    for (field, value) in exact {
        query.require_one_of(field, [Pattern::literal(value)]);
    }
    query.only_owner(&caller.user);
    let removed = catalog.remove(&query)?;
    Ok(format!(
        "User data has been deleted successfully from the databrowser: {removed} files removed."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jane() -> Caller {
        Caller {
            user: "jane".into(),
            admin: false,
        }
    }

    fn entry(file: &str) -> Value {
        json!({"file": file, "variable": "tas", "time_frequency": "mon",
               "time": "[2000-01-16T12:00:00Z TO 2000-12-16T12:00:00Z]", "version": ""})
    }

    #[test]
    fn values_too_long_or_holding_a_control_character_are_refused() {
        let refused = |body: Value| {
            parse_add(body.to_string().as_bytes(), &jane())
                .unwrap_err()
                .to_string()
        };
        let long_path = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert!(refused(json!({"user_metadata": [entry(&long_path)]})).contains("at most 4096"));
        let split = refused(json!({"user_metadata": [entry("/home/jane/a.nc\n/home/john/b.nc")]}));
        assert!(split.contains("control character '\\n'"), "{split}");
        let long_value = "x".repeat(MAX_VALUE_BYTES + 1);
        let said =
            refused(json!({"user_metadata": [entry("/a.nc")], "facets": {"project": long_value}}));
        assert!(
            said.contains("\"project\" is 1025 bytes long, at most 1024"),
            "{said}"
        );
        // At the bounds, accepted.
        let longest = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
        let body = json!({"user_metadata": [entry(&longest)], "facets": {"project": "x".repeat(MAX_VALUE_BYTES)}});
        assert_eq!(
            parse_add(body.to_string().as_bytes(), &jane())
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn entries_become_records_of_the_caller() {
        let body = json!({"user_metadata": [entry("/a.nc"), {"file": "/b.nc", "variable": "pr",
                          "time_frequency": "fx", "time": "fx", "cmor_table": "fx", "odd": "x"}],
                          "facets": {"project": "Mine", "variable": "tas2"}});
        let records = parse_add(body.to_string().as_bytes(), &jane()).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].facets["user"], ["jane"]);
        assert_eq!(records[0].facets["project"], ["Mine"]);
        // `facets` apply to every entry and win over the entry's own values.
        assert_eq!(records[1].facets["variable"], ["tas2"]);
        assert!(records[0].version.is_none());
        assert!(records[1].time.is_none());
        assert_eq!(records[1].facets["cmor_table"], ["fx"]);
        assert!(!records[1].facets.contains_key("odd"));
    }

    #[test]
    fn one_bad_entry_rejects_the_request_naming_it() {
        let body = json!({"user_metadata": [entry("/a.nc"), {"file": "/b.nc"},
                          {"file": "/c.nc", "variable": 1, "time": "x", "time_frequency": "d"},
                          {"file": "/d.nc", "variable": "v", "time": "[2000 TO 1999]",
                           "time_frequency": "d"}]});
        let err = parse_add(body.to_string().as_bytes(), &jane()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("user_metadata[1]: missing variable, time, time_frequency"),
            "{text}"
        );
        assert!(
            text.contains("user_metadata[2]: \"variable\" must be a string"),
            "{text}"
        );
        assert!(text.contains("user_metadata[3]:"), "{text}");
        assert!(!text.contains("user_metadata[0]"), "{text}");
        for bad in [
            json!({"user_metadata": {}}),
            json!({"user_metadata": []}),
            json!({"user_metadata": [entry("/a")], "facets": {"user": "john"}}),
            json!({"user_metadata": [entry("/a")], "other": 1}),
            json!([1]),
        ] {
            assert!(
                parse_add(bad.to_string().as_bytes(), &jane()).is_err(),
                "{bad}"
            );
        }
    }

    const KEYS: &[&str] = &[
        "file",
        "variable",
        "time",
        "time_frequency",
        "version",
        "project",
        "user",
        "uri",
        "experiment",
        "dataset",
    ];
    const VALUES: &[&str] = &[
        "/home/jane/tas.nc",
        "tas",
        "fx",
        "[2000-01-16T12:00:00Z TO 2000-12-16T12:00:00Z]",
        "[0 TO 9999]",
        "1979-02",
        "v20200101",
        "*",
        "-jane",
        "not jane",
    ];
    const SEPARATORS: &[&str] = &["/", "*", "?", " TO ", "[", "]", "T", ":", "-", "not "];

    /// A body of one to three entries with hostile keys and values, or a hostile delete body.
    fn hostile_object() -> impl proptest::strategy::Strategy<Value = Map<String, Value>> {
        use proptest::prelude::*;
        proptest::collection::btree_map(
            prop_oneof![
                proptest::sample::select(KEYS).prop_map(str::to_string),
                crate::hostile::text(KEYS, &["_"]),
            ],
            prop_oneof![
                4 => crate::hostile::text(VALUES, SEPARATORS).prop_map(Value::from),
                1 => any::<i64>().prop_map(Value::from),
                1 => Just(Value::Null),
            ],
            0..8,
        )
        .prop_map(|map| map.into_iter().collect())
    }

    proptest::proptest! {
        #[test]
        fn hostile_entries_become_the_callers_records_or_a_422_naming_the_entry(
            entries in proptest::collection::vec(hostile_object(), 1..4),
            shared in hostile_object(),
        ) {
            let body = json!({"user_metadata": entries, "facets": shared});
            match parse_add(body.to_string().as_bytes(), &jane()) {
                Ok(records) => {
                    proptest::prop_assert_eq!(records.len(), entries.len());
                    for (record, entry) in records.iter().zip(&entries) {
                        proptest::prop_assert_eq!(&record.facets[OWNER], &vec!["jane".to_string()]);
                        proptest::prop_assert_eq!(Some(&Value::from(record.file.clone())), entry.get("file"));
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    proptest::prop_assert_eq!(e.kind(), crate::ErrorKind::Invalid);
                    proptest::prop_assert!(
                        message.starts_with("facets") || message.contains("user_metadata["),
                        "{message}"
                    );
                }
            }
        }
    }

    /// Hostile delete bodies from jane never touch john's entries or the catalogue.
    #[test]
    fn hostile_deletes_remove_only_the_callers_entries() {
        use proptest::strategy::{Strategy, ValueTree};
        let dir = tempfile::tempdir().unwrap();
        let db = std::sync::Arc::new(crate::db::Db::open(dir.path()).unwrap());
        let catalog = Catalog::open(db).unwrap();
        let mut official = Record::new("/arch/cmip6/tas.nc".to_string());
        official
            .facets
            .insert("variable".into(), vec!["tas".into()]);
        catalog.add(&[official]).unwrap();
        let john = Caller {
            user: "john".into(),
            admin: false,
        };
        let others: Vec<Value> = VALUES
            .iter()
            .map(|v| entry(&format!("/john/{v}")))
            .collect();
        let body = json!({"user_metadata": others});
        add(&catalog, body.to_string().as_bytes(), &john).unwrap();
        let count = |flavour: &str, user: Option<&str>| {
            let pairs: Vec<(String, String)> = user
                .map(|u| ("user".to_string(), u.to_string()))
                .into_iter()
                .chain([("multi-version".to_string(), "true".to_string())])
                .collect();
            let params = SearchParams::parse(&pairs).unwrap();
            let query = build_query(&Flavour::builtin(flavour), &params).unwrap();
            catalog.select(&query).len()
        };
        assert_eq!((count("svc", None), count("user", Some("john"))), (1, 10));
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..256 {
            let body = json!({"user_metadata": [entry("/jane/a.nc"), entry("/john/*")]});
            add(&catalog, body.to_string().as_bytes(), &jane()).unwrap();
            let body = hostile_object().new_tree(&mut runner).unwrap().current();
            let raw = serde_json::to_vec(&body).unwrap();
            if let Err(e) = delete(&catalog, &raw, &jane()) {
                assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{e}");
            }
            assert_eq!(
                (count("svc", None), count("user", Some("john"))),
                (1, 10),
                "after jane's delete {body:?}"
            );
        }
        delete(&catalog, b"{}", &jane()).unwrap();
        assert_eq!(count("user", Some("jane")), 0);
    }

    #[test]
    fn a_location_deletes_exactly_that_entry() {
        let dir = tempfile::tempdir().unwrap();
        let db = std::sync::Arc::new(crate::db::Db::open(dir.path()).unwrap());
        let catalog = Catalog::open(db).unwrap();
        let names = [
            "-x.nc", "x.nc", "/d/a*.nc", "/d/ab.nc", "/d/a?.nc", "not y.nc", "y.nc",
        ];
        let body = json!({"user_metadata": names.iter().map(|n| entry(n)).collect::<Vec<_>>()});
        add(&catalog, body.to_string().as_bytes(), &jane()).unwrap();
        // How many of jane's entries are at exactly this location.
        let at = |file: &str| {
            let params = SearchParams::parse(&[("user".into(), "jane".into())]).unwrap();
            let mut query = build_query(&Flavour::builtin("user"), &params).unwrap();
            query.require_one_of(Field::File, [Pattern::literal(file)]);
            catalog.select(&query).len()
        };
        let mut remaining: Vec<&str> = names.to_vec();
        for name in ["-x.nc", "/d/a*.nc", "/d/a?.nc", "not y.nc"] {
            let body = json!({"file": name}).to_string();
            let message = delete(&catalog, body.as_bytes(), &jane()).unwrap();
            assert!(message.contains(": 1 files removed"), "{name}: {message}");
            remaining.retain(|n| *n != name);
            assert_eq!(at(name), 0, "{name}");
            for kept in &remaining {
                assert_eq!(at(kept), 1, "deleting {name:?} took {kept:?}");
            }
        }
    }
}
