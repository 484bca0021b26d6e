//! The published JSON Schema (draft 2020-12) and the read path: JSON, schema, types, rules.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::{Blob, Manifest, Pin, Policy, SCHEMA_VERSION};

/// The schema text exactly as published (`svcd manifest schema` prints it).
pub const SCHEMA_JSON: &str = include_str!("../schema/manifest-v3.schema.json");

static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(SCHEMA_JSON).expect("the embedded schema is checked by a unit test")
});

static VALIDATOR: LazyLock<jsonschema::Validator> = LazyLock::new(|| {
    jsonschema::draft202012::new(&SCHEMA)
        .expect("the embedded schema is valid draft 2020-12, checked by a unit test")
});

/// The published schema as a JSON value.
#[must_use]
pub fn schema() -> &'static Value {
    &SCHEMA
}

/// Reads a manifest: JSON, then the version, then the schema, then the types, then the
/// cross-field rules of [`Manifest::validate`].
///
/// # Errors
/// [`Error::Json`] when the bytes are not JSON, [`Error::UnsupportedVersion`] for any
/// `schema_version` other than 3, and [`Error::Invalid`] naming the path of the first broken
/// rule (`blobs[1].bucket.width`).
pub fn parse(bytes: &[u8]) -> Result<Manifest> {
    let value: Value = serde_json::from_slice(bytes).map_err(|source| Error::Json { source })?;
    from_value(&value)
}

/// Like [`parse`], from an already parsed JSON value.
///
/// # Errors
/// As [`parse`], less the JSON syntax error.
pub fn from_value(value: &Value) -> Result<Manifest> {
    check_version(value)?;
    check_schema(value)?;
    let wire = Wire::deserialize(value).map_err(|e| Error::invalid("", e.to_string()))?;
    let manifest = Manifest {
        scope: wire.scope,
        epoch: wire.epoch,
        generated_at: wire.generated_at,
        generated_by: wire.generated_by,
        policy: wire.policy,
        hot_always: wire.hot_always,
        pinned: wire.pinned,
        blobs: wire.blobs,
        provenance: wire.provenance,
    };
    manifest.validate()?;
    Ok(manifest)
}

/// Rejects a version other than 3 before the schema, so the message says what happened
/// rather than "3 was expected".
fn check_version(value: &Value) -> Result<()> {
    match value.get("schema_version") {
        Some(Value::Number(n)) if n.as_u64() == Some(SCHEMA_VERSION) => Ok(()),
        Some(Value::Number(n)) => Err(Error::UnsupportedVersion {
            found: n.to_string(),
        }),
        // Missing or not a number: the schema names it.
        _ => Ok(()),
    }
}

fn check_schema(value: &Value) -> Result<()> {
    let Some(error) = VALIDATOR.iter_errors(value).next() else {
        return Ok(());
    };
    let path = dotted_path(value, error.instance_path().as_str());
    Err(Error::invalid(path, error.to_string()))
}

/// Turns a JSON pointer (`/blobs/1/bucket/width`) into the dotted form users read
/// (`blobs[1].bucket.width`), using the document to tell array indices from keys.
pub(crate) fn dotted_path(document: &Value, pointer: &str) -> String {
    let mut out = String::new();
    let mut node = Some(document);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        match node {
            Some(Value::Array(items)) => {
                out.push_str(&format!("[{segment}]"));
                node = segment.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            other => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&segment);
                node = other.and_then(|v| v.get(&segment));
            }
        }
    }
    out
}

/// The wire form for reading: optional fields get the reference defaults.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[allow(
        dead_code,
        reason = "checked by check_version; kept so the field is known"
    )]
    schema_version: u64,
    scope: String,
    epoch: u64,
    #[serde(default)]
    generated_at: String,
    #[serde(default)]
    generated_by: String,
    #[serde(default)]
    policy: Policy,
    hot_always: Vec<String>,
    #[serde(default)]
    pinned: Vec<Pin>,
    blobs: Vec<Blob>,
    #[serde(default)]
    provenance: serde_json::Map<String, Value>,
}

#[cfg(test)]
#[path = "schema_test.rs"]
mod tests;
