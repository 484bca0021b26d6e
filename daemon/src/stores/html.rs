//! The HTML summary of a store (`zarr-utils/html`): its dimensions, coordinates and variables
//! with their types, shapes, chunks and attributes, from the store's consolidated metadata.
//! Every name and value is HTML-escaped: attributes come from files users converted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Map, Value};
use uuid::Uuid;

use super::Stores;
use crate::auth::Caller;
use crate::error::{Error, Result};

impl Stores {
    /// The HTML summary of the store `token` for `caller` at `now`, waiting up to `wait` for
    /// metadata still being written.
    ///
    /// # Errors
    /// As [`Stores::read`] of `.zmetadata`.
    pub fn html(&self, caller: &Caller, token: Uuid, now: i64, wait: Duration) -> Result<String> {
        let consolidated = self.read(Some(caller), token, ".zmetadata", now, wait)?;
        let value: Value = serde_json::from_slice(&consolidated.bytes)
            .map_err(|e| Error::io("read .zmetadata", std::io::Error::other(e)))?;
        let empty = Map::new();
        let documents = value["metadata"].as_object().unwrap_or(&empty);
        Ok(render(token, documents))
    }
}

/// Escapes text for HTML element content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An attribute value as text: strings as they are, anything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn numbers(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

fn attributes_table(out: &mut String, attributes: &Map<String, Value>) {
    let shown_attributes: Vec<_> = attributes
        .iter()
        .filter(|(name, _)| *name != "_ARRAY_DIMENSIONS")
        .collect();
    if shown_attributes.is_empty() {
        return;
    }
    out.push_str("<table class=\"attrs\">");
    for (name, value) in shown_attributes {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(name),
            escape(&shown(value))
        );
    }
    out.push_str("</table>");
}

/// How an array's chunks are compressed, as a reader would name it. `zlib` is only ever the
/// form the source file stores the array in, its chunks copied (see `convert::stored`), and
/// says so.
fn compression(zarray: &Value) -> String {
    let compressor = &zarray["compressor"];
    let shuffled = zarray["filters"]
        .as_array()
        .is_some_and(|filters| filters.iter().any(|f| f["id"] == "shuffle"));
    match compressor["id"].as_str() {
        Some("blosc") => format!("blosc {}", shown(&compressor["cname"])),
        Some("zlib") if shuffled => "shuffle, zlib: as the source file stores it".into(),
        Some("zlib") => "zlib: as the source file stores it".into(),
        Some(other) => other.to_string(),
        None => "none".into(),
    }
}

/// The page for a store's metadata documents.
fn render(token: Uuid, documents: &Map<String, Value>) -> String {
    let empty = Map::new();
    // Arrays by path: (dimension names, shape, chunks, dtype, compressor, attributes).
    let mut arrays = BTreeMap::new();
    for (key, zarray) in documents {
        let Some(path) = key.strip_suffix("/.zarray") else {
            continue;
        };
        let attrs = documents
            .get(&format!("{path}/.zattrs"))
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let dims: Vec<String> = attrs
            .get("_ARRAY_DIMENSIONS")
            .and_then(Value::as_array)
            .map(|d| d.iter().map(shown).collect())
            .unwrap_or_default();
        arrays.insert(
            path.to_string(),
            (
                dims,
                numbers(&zarray["shape"]),
                numbers(&zarray["chunks"]),
                shown(&zarray["dtype"]),
                compression(zarray),
                attrs,
            ),
        );
    }
    let mut dimensions = BTreeMap::new();
    for (dims, shape, ..) in arrays.values() {
        for (name, len) in dims.iter().zip(shape) {
            dimensions.insert(name.clone(), *len);
        }
    }
    let coordinate = |path: &str, dims: &[String]| dims.len() == 1 && dims[0] == path;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Zarr store {token}</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}}\
         </style></head><body><h1>Zarr store {token}</h1>"
    );
    out.push_str("<h2>Dimensions</h2><table>");
    for (name, len) in &dimensions {
        let _ = write!(out, "<tr><th>{}</th><td>{len}</td></tr>", escape(name));
    }
    out.push_str("</table>");
    for (title, wanted) in [("Coordinates", true), ("Variables", false)] {
        let _ = write!(
            out,
            "<h2>{title}</h2><table><tr><th>name</th><th>dimensions</th><th>dtype</th>\
             <th>shape</th><th>chunks</th><th>compression</th><th>attributes</th></tr>"
        );
        for (path, (dims, shape, chunks, dtype, compressed, attrs)) in &arrays {
            if coordinate(path, dims) != wanted {
                continue;
            }
            let _ = write!(
                out,
                "<tr><th>{}</th><td>({})</td><td>{}</td><td>{shape:?}</td><td>{chunks:?}</td>\
                 <td>{}</td><td>",
                escape(path),
                escape(&dims.join(", ")),
                escape(dtype),
                escape(compressed),
            );
            attributes_table(&mut out, attrs);
            out.push_str("</td></tr>");
        }
        out.push_str("</table>");
    }
    out.push_str("<h2>Attributes</h2>");
    if let Some(root) = documents.get(".zattrs").and_then(Value::as_object) {
        attributes_table(&mut out, root);
    }
    out.push_str("</body></html>");
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_name_and_value_is_escaped() {
        let documents: Map<String, Value> = serde_json::from_value(json!({
            ".zattrs": {"title": "<script>alert(1)</script>", "n": 3},
            "time/.zarray": {"shape": [2], "chunks": [2], "dtype": "<f8"},
            "time/.zattrs": {"_ARRAY_DIMENSIONS": ["time"], "units": "days since 2000-01-01"},
            "tas/.zarray": {"shape": [2, 3], "chunks": [1, 3], "dtype": "<f4",
                            "compressor": {"id": "zlib", "level": 4},
                            "filters": [{"id": "shuffle", "elementsize": 4}]},
            "tas/.zattrs": {"_ARRAY_DIMENSIONS": ["time", "lat\"><b>"], "long_name": "a & b"},
        }))
        .unwrap();
        let page = render(Uuid::nil(), &documents);
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("a &amp; b"));
        assert!(!page.contains("\"><b>"));
        assert!(page.contains("<th>time</th><td>2</td>"), "{page}");
        assert!(page.contains("<td>[1, 3]</td>"), "chunks shown: {page}");
        assert!(page.contains("<td>shuffle, zlib: as the source file stores it</td>"));
        let variables = page.split("<h2>Variables</h2>").nth(1).unwrap();
        assert!(variables.contains("<th>tas</th>") && !variables.contains("<th>time</th><td>("));
    }
}
