//! Writing manifests byte-compatible with the reference producer: fixed field order,
//! 2-space indent, and non-ASCII escaped as `\uXXXX` (Python's `json.dumps` defaults).

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter, PrettyFormatter};

use crate::model::{Blob, Manifest, Pin, Policy, SCHEMA_VERSION};

impl Manifest {
    /// The manifest as written to storage: every field, in the published order, 2-space
    /// indent, ASCII only.
    ///
    /// ```
    /// let mut manifest = svc_manifests::Manifest::new("s");
    /// manifest.hot_always.push("température/**".into());
    /// let text = manifest.to_json();
    /// assert!(text.starts_with("{\n  \"schema_version\": 3,\n  \"scope\": \"s\","));
    /// assert!(text.contains(r#""temp\u00e9rature/**""#));
    /// assert_eq!(svc_manifests::parse(text.as_bytes()).unwrap(), manifest);
    /// ```
    #[must_use]
    pub fn to_json(&self) -> String {
        to_ascii_json(&WireOut {
            schema_version: SCHEMA_VERSION,
            scope: &self.scope,
            epoch: self.epoch,
            generated_at: &self.generated_at,
            generated_by: &self.generated_by,
            policy: &self.policy,
            hot_always: &self.hot_always,
            pinned: &self.pinned,
            blobs: &self.blobs,
            provenance: &self.provenance,
        })
    }
}

/// Serialises any value the way Python's `json.dumps(value, indent=2)` does.
pub(crate) fn to_ascii_json<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let mut serializer =
        serde_json::Serializer::with_formatter(&mut out, AsciiFormatter(PrettyFormatter::new()));
    value
        .serialize(&mut serializer)
        .expect("serialising plain data into memory cannot fail");
    String::from_utf8(out).expect("the formatter writes ASCII only")
}

#[derive(Serialize)]
struct WireOut<'a> {
    schema_version: u64,
    scope: &'a str,
    epoch: u64,
    generated_at: &'a str,
    generated_by: &'a str,
    policy: &'a Policy,
    hot_always: &'a [String],
    pinned: &'a [Pin],
    blobs: &'a [Blob],
    provenance: &'a serde_json::Map<String, serde_json::Value>,
}

/// Pretty printing with Python's escaping: every character outside printable ASCII becomes
/// `\uXXXX` (a surrogate pair above the BMP), lower-case hex.
struct AsciiFormatter<'a>(PrettyFormatter<'a>);

impl Formatter for AsciiFormatter<'_> {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if (' '..='~').contains(&c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        self.0.write_char_escape(writer, escape)
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_python() {
        let text = to_ascii_json(&serde_json::json!({"k": "é\u{7f}\u{1f600}\n\"\\x\u{1}"}));
        assert_eq!(
            text,
            "{\n  \"k\": \"\\u00e9\\u007f\\ud83d\\ude00\\n\\\"\\\\x\\u0001\"\n}"
        );
    }

    #[test]
    fn empty_containers_and_nesting_match_python_indent() {
        let text = to_ascii_json(&serde_json::json!({"a": [], "b": {}, "c": [1, null]}));
        assert_eq!(
            text,
            "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    null\n  ]\n}"
        );
    }
}
