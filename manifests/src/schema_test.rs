use proptest::strategy::Strategy;
use serde_json::json;

use super::*;
use crate::model::{Bucket, KeyEncoding};

/// One change applied to a copy of a valid document.
type Edit<T> = Box<dyn Fn(&mut T)>;

fn valid() -> Value {
    json!({
        "schema_version": 3,
        "scope": "cordex/a.zarr",
        "epoch": 2,
        "generated_at": "2026-08-19T09:12:00+00:00",
        "generated_by": "svc-manifests 0.1.0",
        "policy": {"t_max_bytes": 1280, "t_min_bytes": 0, "t_hot_bytes": 32, "width_clamp": 8, "pow2_floor": 64},
        "hot_always": ["**/zarr.json", "time/**"],
        "pinned": [{"prefix": "tas", "reason": "paper", "by": "ana", "at": "2026-08-19T09:12:00+00:00", "until": null}],
        "blobs": [
            {"id": "b_pr_c", "prefixes": ["pr/c"], "bucket": null},
            {"id": "b_tas", "prefixes": ["tas/c"], "bucket": {"index": 0, "width": 16, "key_encoding": "v3_slash"}}
        ],
        "provenance": {"tas": {"objects": 40, "anything": [1, {"deep": true}]}}
    })
}

fn error_of(document: &Value) -> Error {
    from_value(document).expect_err("document must be rejected")
}

fn path_of(document: &Value) -> String {
    match error_of(document) {
        Error::Invalid { path, .. } => path,
        other => panic!("expected Invalid, got {other}"),
    }
}

#[test]
fn schema_is_itself_valid_draft_2020_12() {
    jsonschema::meta::validate(schema()).expect("valid draft 2020-12");
    assert_eq!(
        schema()["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

#[test]
fn every_property_is_described() {
    fn walk(node: &Value, at: &str) {
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                assert!(
                    property
                        .get("description")
                        .and_then(Value::as_str)
                        .is_some(),
                    "{at}.{name} has no description"
                );
                walk(property, &format!("{at}.{name}"));
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{at}[]"));
        }
    }
    walk(schema(), "");
}

#[test]
fn every_key_encoding_is_in_the_schema() {
    let names = &schema()["properties"]["blobs"]["items"]["properties"]["bucket"]["properties"]["key_encoding"]
        ["enum"];
    for encoding in [
        KeyEncoding::V3Slash,
        KeyEncoding::V2Slash,
        KeyEncoding::V2Flat,
    ] {
        assert!(
            names
                .as_array()
                .unwrap()
                .contains(&json!(encoding.as_str()))
        );
    }
    assert_eq!(
        schema()["properties"]["schema_version"]["const"],
        SCHEMA_VERSION
    );
}

#[test]
fn valid_document_passes_and_round_trips() {
    let manifest = from_value(&valid()).unwrap();
    assert_eq!(manifest.blobs.len(), 2);
    assert_eq!(manifest.pinned[0].until, None);
    let text = manifest.to_json();
    assert_eq!(parse(text.as_bytes()).unwrap(), manifest);
    let again: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(again, valid());
}

#[test]
fn writing_matches_the_reference_layout() {
    let mut manifest = Manifest::new("s");
    manifest.generated_at = "T".into();
    manifest.blobs.push(Blob {
        id: "b_root".into(),
        prefixes: vec![String::new()],
        bucket: None,
    });
    manifest.pinned.push(Pin {
        prefix: "x".into(),
        reason: "r".into(),
        by: String::new(),
        at: String::new(),
        until: None,
    });
    let expected = r#"{
  "schema_version": 3,
  "scope": "s",
  "epoch": 1,
  "generated_at": "T",
  "generated_by": "GEN",
  "policy": {
    "t_max_bytes": 107374182400,
    "t_min_bytes": 0,
    "t_hot_bytes": 16777216,
    "width_clamp": 8,
    "pow2_floor": 64
  },
  "hot_always": [
    "**/zarr.json",
    "**/.zarray",
    "**/.zgroup",
    "**/.zattrs",
    "**/.zmetadata"
  ],
  "pinned": [
    {
      "prefix": "x",
      "reason": "r",
      "by": "",
      "at": "",
      "until": null
    }
  ],
  "blobs": [
    {
      "id": "b_root",
      "prefixes": [
        ""
      ],
      "bucket": null
    }
  ],
  "provenance": {}
}"#;
    assert_eq!(
        manifest.to_json(),
        expected.replace("GEN", crate::model::GENERATED_BY)
    );
}

#[test]
fn optional_fields_may_be_absent() {
    let minimal =
        json!({"schema_version": 3, "scope": "", "epoch": 1, "hot_always": [], "blobs": []});
    let manifest = from_value(&minimal).unwrap();
    assert_eq!(manifest.policy, Policy::default());
    assert!(manifest.pinned.is_empty());
    assert_eq!(manifest.generated_by, "");
    assert!(manifest.provenance.is_empty());
}

#[test]
fn policy_ignores_unknown_integer_keys_but_not_other_values() {
    let mut document = valid();
    document["policy"]["future_knob"] = json!(5);
    assert_eq!(from_value(&document).unwrap().policy.t_max_bytes, 1280);
    document["policy"]["future_knob"] = json!("five");
    assert_eq!(path_of(&document), "policy.future_knob");
}

#[test]
fn other_schema_versions_are_rejected_with_a_clear_message() {
    for version in [2, 99, 4] {
        let mut document = valid();
        document["schema_version"] = json!(version);
        let error = error_of(&document);
        assert!(matches!(error, Error::UnsupportedVersion { .. }), "{error}");
        assert!(
            error
                .to_string()
                .contains(&format!("schema_version {version} "))
        );
    }
    let mut document = valid();
    document["schema_version"] = json!("3");
    assert_eq!(path_of(&document), "schema_version");
}

#[test]
fn schema_rules_name_the_path() {
    let cases: Vec<(&str, Edit<Value>)> = vec![
        (
            "",
            Box::new(|d| drop(d.as_object_mut().unwrap().remove("scope"))),
        ),
        ("epoch", Box::new(|d| d["epoch"] = json!(0))),
        ("epoch", Box::new(|d| d["epoch"] = json!(true))),
        ("epoch", Box::new(|d| d["epoch"] = json!(1.5))),
        ("scope", Box::new(|d| d["scope"] = json!(42))),
        ("", Box::new(|d| d["extra"] = json!(1))),
        (
            "blobs[0].id",
            Box::new(|d| d["blobs"][0]["id"] = json!("b-tas")),
        ),
        (
            "blobs[0].id",
            Box::new(|d| d["blobs"][0]["id"] = json!("B_tas")),
        ),
        (
            "blobs[0].id",
            Box::new(|d| d["blobs"][0]["id"] = json!("b_tas\n")),
        ),
        (
            "blobs[0].id",
            Box::new(|d| d["blobs"][0]["id"] = json!("b_température")),
        ),
        (
            "blobs[0]",
            Box::new(|d| drop(d["blobs"][0].as_object_mut().unwrap().remove("bucket"))),
        ),
        (
            "blobs[0].prefixes",
            Box::new(|d| d["blobs"][0]["prefixes"] = json!([])),
        ),
        (
            "blobs[1].bucket.key_encoding",
            Box::new(|d| d["blobs"][1]["bucket"]["key_encoding"] = json!("v9")),
        ),
        (
            "blobs[1].bucket.width",
            Box::new(|d| d["blobs"][1]["bucket"]["width"] = json!(0)),
        ),
        (
            "blobs[1].bucket.index",
            Box::new(|d| d["blobs"][1]["bucket"]["index"] = json!(-1)),
        ),
        (
            "blobs[1].bucket",
            Box::new(|d| d["blobs"][1]["bucket"]["extra"] = json!(1)),
        ),
        ("hot_always[1]", Box::new(|d| d["hot_always"][1] = json!(7))),
        (
            "pinned[0].reason",
            Box::new(|d| d["pinned"][0]["reason"] = json!("")),
        ),
        (
            "pinned[0]",
            Box::new(|d| d["pinned"][0]["note"] = json!("x")),
        ),
        (
            "pinned[0].until",
            Box::new(|d| d["pinned"][0]["until"] = json!(5)),
        ),
        ("provenance", Box::new(|d| d["provenance"] = json!([]))),
    ];
    for (expected, mutate) in cases {
        let mut document = valid();
        mutate(&mut document);
        assert_eq!(path_of(&document), expected, "{document}");
    }
}

#[test]
fn cross_field_rules_are_checked_after_the_schema() {
    let mut duplicate = valid();
    duplicate["blobs"][1]["id"] = json!("b_pr_c");
    assert_eq!(path_of(&duplicate), "blobs[1].id");
    let mut two_prefixes = valid();
    two_prefixes["blobs"][1]["prefixes"] = json!(["tas/c", "tasmax/c"]);
    assert_eq!(path_of(&two_prefixes), "blobs[1].prefixes");
    let mut blank_reason = valid();
    blank_reason["pinned"][0]["reason"] = json!("  ");
    assert_eq!(path_of(&blank_reason), "pinned[0].reason");
    let mut duplicate_pin = valid();
    let pin = duplicate_pin["pinned"][0].clone();
    duplicate_pin["pinned"].as_array_mut().unwrap().push(pin);
    assert_eq!(path_of(&duplicate_pin), "pinned[1].prefix");
    for document in [duplicate, two_prefixes, blank_reason, duplicate_pin] {
        assert!(VALIDATOR.is_valid(&document), "the schema alone accepts it");
    }
}

#[test]
fn validate_rejects_bad_manifests_built_in_memory() {
    let base = from_value(&valid()).unwrap();
    let mutations: Vec<Edit<Manifest>> = vec![
        Box::new(|m| m.blobs[1].id = "b_pr_c".into()),
        Box::new(|m| m.blobs[0].id = "b!".into()),
        Box::new(|m| m.blobs[0].id = String::new()),
        Box::new(|m| m.blobs[0].prefixes.clear()),
        Box::new(|m| m.blobs[1].prefixes.push("x".into())),
        Box::new(|m| {
            m.blobs[1].bucket = Some(Bucket {
                index: 0,
                width: 0,
                key_encoding: KeyEncoding::V2Flat,
            });
        }),
        Box::new(|m| m.pinned[0].reason = "\t".into()),
        Box::new(|m| m.epoch = 0),
    ];
    for mutate in mutations {
        let mut manifest = base.clone();
        mutate(&mut manifest);
        assert!(manifest.validate().is_err(), "{manifest:?}");
    }
}

#[test]
fn not_json_is_reported_as_such() {
    assert!(matches!(parse(b"{nope"), Err(Error::Json { .. })));
}

#[test]
fn provenance_is_not_read_back_into_blobs() {
    let mut document = valid();
    let with = from_value(&document).unwrap();
    document["provenance"] = json!({});
    let without = from_value(&document).unwrap();
    assert_eq!(with.blobs, without.blobs);
}

#[test]
fn bumped_increments_epoch() {
    let manifest = from_value(&valid()).unwrap();
    assert_eq!(manifest.bumped().epoch, 3);
}

#[test]
fn dotted_paths_unescape_pointer_segments() {
    let document = json!({"a/b": {"c~d": [0, {"e": 1}]}});
    assert_eq!(dotted_path(&document, "/a~1b/c~0d/1/e"), "a/b.c~d[1].e");
    assert_eq!(dotted_path(&document, ""), "");
}

/// Every JSON pointer in `value`.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            pointers(
                v,
                format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                out,
            )
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| pointers(v, format!("{at}/{i}"), out)),
        _ => {}
    }
    out.push(at);
}

proptest::proptest! {
    /// A valid document with one value replaced by something hostile is read or refused
    /// with a reason, never a panic; what is read writes back to itself.
    #[test]
    fn documents_with_a_hostile_value_are_read_or_refused(
        at in proptest::prelude::any::<proptest::sample::Index>(),
        replacement in proptest::prop_oneof![
            "\\PC{0,12}".prop_map(Value::from),
            proptest::prelude::any::<i64>().prop_map(Value::from),
            proptest::prelude::any::<u64>().prop_map(Value::from),
            proptest::prelude::any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            proptest::sample::select(&["", "**", "../x", "b_", "v3_slash", "2026-13-01T00:00:00+00:00", "a//b"][..]).prop_map(Value::from),
            proptest::prelude::Just(Value::Null),
            proptest::prelude::Just(json!([])),
            proptest::prelude::Just(json!({})),
        ],
    ) {
        let mut document = valid();
        let mut all = Vec::new();
        pointers(&document, String::new(), &mut all);
        let pointer = &all[at.index(all.len())];
        match document.pointer_mut(pointer) {
            Some(slot) => *slot = replacement,
            None => unreachable!("pointers lists the document's own values"),
        }
        match from_value(&document) {
            Ok(manifest) => proptest::prop_assert_eq!(parse(manifest.to_json().as_bytes()).ok(), Some(manifest)),
            Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
        }
    }
}
