//! Comparing two manifests by blob id: what a repartition adds, removes or modifies.

use crate::model::{Blob, Manifest};

/// The blob changes between two manifests.
///
/// Only blobs count here; [`crate::partition_store`] also writes when `hot_always` alone
/// changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Ids only in the new manifest, in its order.
    pub added: Vec<Blob>,
    /// Ids only in the old manifest, in its order.
    pub removed: Vec<Blob>,
    /// Same id, different definition (prefix order and bucket fields count): (old, new).
    pub modified: Vec<(Blob, Blob)>,
}

impl Diff {
    /// Compares by blob id; with no old manifest everything is added.
    #[must_use]
    pub fn between(old: Option<&Manifest>, new: &Manifest) -> Self {
        let Some(old) = old else {
            return Self {
                added: new.blobs.clone(),
                ..Self::default()
            };
        };
        let added = new
            .blobs
            .iter()
            .filter(|b| old.blob(&b.id).is_none())
            .cloned()
            .collect();
        let mut removed = Vec::new();
        let mut modified = Vec::new();
        for before in &old.blobs {
            match new.blob(&before.id) {
                None => removed.push(before.clone()),
                Some(after) if after != before => modified.push((before.clone(), after.clone())),
                Some(_) => {}
            }
        }
        Self {
            added,
            removed,
            modified,
        }
    }

    /// Nothing was removed or modified: every existing id keeps its definition.
    #[must_use]
    pub fn is_additive(&self) -> bool {
        self.removed.is_empty() && self.modified.is_empty()
    }

    /// No blob changed at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.is_additive()
    }

    /// One line per change, `+`, `-` or `~` first, or `(no change)`; lists and objects are
    /// spelled the way the reference tool prints them, so logs can be compared.
    ///
    /// ```
    /// use svc_manifests::{Blob, Diff, Manifest};
    /// let mut new = Manifest::new("s");
    /// new.blobs.push(Blob { id: "b_pr_c_hurs_c".into(), prefixes: vec!["pr/c".into(), "hurs/c".into()], bucket: None });
    /// assert_eq!(Diff::between(None, &new).describe(), "+ b_pr_c_hurs_c ['pr/c', 'hurs/c']");
    /// assert_eq!(Diff::between(Some(&new), &new).describe(), "(no change)");
    /// ```
    #[must_use]
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = Vec::new();
        for blob in &self.added {
            lines.push(format!("+ {} {}", blob.id, py_list(&blob.prefixes)));
        }
        for blob in &self.removed {
            lines.push(format!("- {} {}", blob.id, py_list(&blob.prefixes)));
        }
        for (old, new) in &self.modified {
            lines.push(format!(
                "~ {}: {} -> {}",
                old.id,
                py_blob(old),
                py_blob(new)
            ));
        }
        if lines.is_empty() {
            "(no change)".to_owned()
        } else {
            lines.join("\n")
        }
    }
}

fn py_blob(blob: &Blob) -> String {
    let bucket = match &blob.bucket {
        None => "None".to_owned(),
        Some(b) => format!(
            "{{'index': {}, 'width': {}, 'key_encoding': '{}'}}",
            b.index, b.width, b.key_encoding
        ),
    };
    format!(
        "{{'id': {}, 'prefixes': {}, 'bucket': {bucket}}}",
        py_str(&blob.id),
        py_list(&blob.prefixes)
    )
}

fn py_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_str(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// A string literal as Python's `repr` writes it.
pub(crate) fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bucket, KeyEncoding};

    fn blob(id: &str, prefixes: &[&str], width: Option<u64>) -> Blob {
        Blob {
            id: id.into(),
            prefixes: prefixes.iter().map(|&p| p.to_owned()).collect(),
            bucket: width.map(|width| Bucket {
                index: 0,
                width,
                key_encoding: KeyEncoding::V3Slash,
            }),
        }
    }

    #[test]
    fn describe_covers_all_three_kinds() {
        let mut old = Manifest::new("s");
        old.blobs = vec![blob("b_a", &["a/c"], Some(16)), blob("b_b", &["b/c"], None)];
        let mut new = Manifest::new("s");
        new.blobs = vec![blob("b_a", &["a/c"], Some(32)), blob("b_n", &["n/c"], None)];
        let diff = Diff::between(Some(&old), &new);
        assert!(!diff.is_additive());
        assert_eq!(
            diff.describe(),
            "+ b_n ['n/c']\n- b_b ['b/c']\n~ b_a: {'id': 'b_a', 'prefixes': ['a/c'], 'bucket': \
             {'index': 0, 'width': 16, 'key_encoding': 'v3_slash'}} -> {'id': 'b_a', 'prefixes': \
             ['a/c'], 'bucket': {'index': 0, 'width': 32, 'key_encoding': 'v3_slash'}}"
        );
        assert_eq!(Diff::default().describe(), "(no change)");
    }

    #[test]
    fn python_repr_quotes() {
        assert_eq!(py_str("it's"), "\"it's\"");
        assert_eq!(py_str("a'\"b"), "'a\\'\"b'");
        assert_eq!(py_str(""), "''");
    }
}
