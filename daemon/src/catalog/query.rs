//! The catalogue's queries: a [`Query`] is what a search selects, over standard facet names
//! ([`Field`]s with literal or wildcard [`Pattern`]s, a time range, a box, free text, item
//! keys, which records, which versions). Clauses of different fields are AND'ed; the patterns
//! of one clause are OR'ed, with its exclusions taken out. How a request's words become a
//! query is the facades' business: the databrowser's URL dialect is
//! `databrowser/params.rs`, the STAC API's parameters `stac/params.rs`.
//!
//! The owner of user data (`user`) is an identity, never a pattern: owner values are
//! [`Pattern::literal`]s, matched exactly and case-sensitively.

use regex::Regex;

use crate::error::{Error, Fault, Result};

use super::facet;
use super::time::{SelectMode, TimeRange};

/// What a clause matches against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    /// A standard term facet (values lower-cased).
    Facet(String),
    /// The file path (exact, case-sensitive).
    File,
    /// The URI (exact, case-sensitive).
    Uri,
}

/// One value of a clause: a literal or a wildcard pattern.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// The value as matched (lower-cased for facets).
    pub text: String,
    /// For a wildcard pattern: the whole text as a regex, `*` any characters and `?` one
    /// character (not one byte: `Z?rich` matches `Zürich`), everything else literal.
    matcher: Option<Regex>,
}

impl Pattern {
    /// A value matched literally, whatever characters it holds.
    pub(crate) fn literal(text: impl Into<String>) -> Self {
        Pattern {
            text: text.into(),
            matcher: None,
        }
    }

    /// A value of `parameter` as a search gives it: a wildcard pattern when it holds `*` or
    /// `?`, else a literal.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] when the wildcard pattern cannot be compiled.
    pub(crate) fn parse(parameter: &str, text: String) -> Result<Self> {
        if !text.contains(['*', '?']) {
            return Ok(Pattern {
                text,
                matcher: None,
            });
        }
        // A bounded pattern keeps the compiled regex small (its size limit is an error, not
        // a panic, but a long pattern is no search anyone means).
        if text.len() > MAX_WILDCARD_LEN {
            return Err(Error::invalid(
                parameter,
                Fault::Refused,
                format!(
                    "Wildcard values of '{parameter}' are at most {MAX_WILDCARD_LEN} bytes, \
                     got {}.",
                    text.len()
                ),
            ));
        }
        // Anchored at both ends, except where a leading or trailing `*` makes that moot: the
        // regex then starts or stops at a literal (`/data/*` is a prefix test, `*.nc` a
        // suffix test) instead of running over the whole candidate.
        let body = text.trim_start_matches('*').trim_end_matches('*');
        let mut source = String::with_capacity(text.len() + 16);
        source.push_str("(?s)");
        if !text.starts_with('*') {
            source.push('^');
        }
        let mut literal = [0u8; 4];
        for c in body.chars() {
            match c {
                '*' => source.push_str(".*"),
                '?' => source.push('.'),
                c => source.push_str(&regex::escape(c.encode_utf8(&mut literal))),
            }
        }
        if !text.ends_with('*') {
            source.push('$');
        }
        let matcher = Regex::new(&source).map_err(|e| {
            Error::invalid(
                parameter,
                Fault::Syntax,
                format!("Invalid wildcard pattern {text:?}: {e}."),
            )
        })?;
        Ok(Pattern {
            text,
            matcher: Some(matcher),
        })
    }

    /// The literal part before the first wildcard (the whole text for literals).
    pub(crate) fn prefix(&self) -> &str {
        let end = self.text.find(['*', '?']).unwrap_or(self.text.len());
        &self.text[..end]
    }

    /// Whether the pattern has wildcards.
    pub(crate) fn is_wildcard(&self) -> bool {
        self.matcher.is_some()
    }

    /// The regex of a wildcard pattern.
    pub(crate) fn regex(&self) -> Option<&Regex> {
        self.matcher.as_ref()
    }

    /// Whether `candidate` matches.
    pub(crate) fn matches(&self, candidate: &str) -> bool {
        match &self.matcher {
            Some(m) => m.is_match(candidate),
            None => self.text == candidate,
        }
    }
}

/// The longest wildcard value a search may give, in bytes.
pub(crate) const MAX_WILDCARD_LEN: usize = 1024;

/// The filters on one field.
#[derive(Debug, Clone)]
pub(crate) struct Clause {
    /// The field.
    pub field: Field,
    /// Values of which one must match (none: no constraint).
    pub include: Vec<Pattern>,
    /// Values of which none may match.
    pub exclude: Vec<Pattern>,
}

/// Which records a query searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Source {
    /// The crawled catalogue (records without an owner).
    #[default]
    Catalogue,
    /// Users' own entries (flavour `user`).
    UserData,
    /// Both (operator removals by location).
    Everything,
}

/// A validated search over standard facet names.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// One clause per field, AND'ed.
    pub(super) clauses: Vec<Clause>,
    /// Time filter.
    pub(super) time: Option<(TimeRange, SelectMode)>,
    /// Box filter `[min_lon, max_lon, min_lat, max_lat]`.
    pub(super) bbox: Option<([f64; 4], SelectMode)>,
    /// Search all versions.
    pub(super) multi_version: bool,
    /// The records searched.
    pub(super) source: Source,
    /// Free-text terms (lower-cased): a record matches when any of its facet values
    /// contains any of them.
    pub(super) text: Vec<String>,
    /// Only the records with these item keys (see [`super::item_key`]).
    pub(super) item_keys: Option<Vec<u128>>,
}

impl Query {
    /// A query over `source` matching every record (newest versions only).
    pub(crate) fn over(source: Source) -> Self {
        Query {
            source,
            ..Query::default()
        }
    }

    /// Searches every version of a dataset, or the newest only.
    pub(crate) fn set_multi_version(&mut self, multi_version: bool) {
        self.multi_version = multi_version;
    }

    /// Searches these records instead.
    pub(crate) fn set_source(&mut self, source: Source) {
        self.source = source;
    }

    /// Adds a value to the clause of `field` (OR'ed with its other values), as a required
    /// value or an exclusion.
    pub(crate) fn add(&mut self, field: Field, pattern: Pattern, exclude: bool) {
        self.clause(field).push(pattern, exclude);
    }

    /// Adds a clause of its own (AND'ed with every other) requiring one of `patterns`; none
    /// is no constraint.
    pub(crate) fn require_one_of(
        &mut self,
        field: Field,
        patterns: impl IntoIterator<Item = Pattern>,
    ) {
        self.clauses.push(Clause {
            field,
            include: patterns.into_iter().collect(),
            exclude: Vec::new(),
        });
    }

    /// Only records whose time range relates to `range` as `mode` says.
    pub(crate) fn set_time(&mut self, range: TimeRange, mode: SelectMode) {
        self.time = Some((range, mode));
    }

    /// Only records whose box relates to `[min_lon, max_lon, min_lat, max_lat]` as `mode` says.
    pub(crate) fn set_bbox(&mut self, bbox: [f64; 4], mode: SelectMode) {
        self.bbox = Some((bbox, mode));
    }

    /// Only records with a facet value containing one of `terms` (lower-cased).
    pub(crate) fn set_text(&mut self, terms: Vec<String>) {
        self.text = terms;
    }

    /// Only the records with these item keys (see [`super::item_key`]).
    pub(crate) fn set_item_keys(&mut self, keys: Vec<u128>) {
        self.item_keys = Some(keys);
    }

    /// The clauses, for tests.
    #[cfg(test)]
    pub(crate) fn clauses(&self) -> &[Clause] {
        &self.clauses
    }

    /// How many wildcard values the `file` and `uri` clauses hold.
    pub(crate) fn location_wildcards(&self) -> usize {
        self.wildcards(|field| matches!(field, Field::File | Field::Uri))
    }

    /// How many wildcard values the facet clauses hold.
    pub(crate) fn facet_wildcards(&self) -> usize {
        self.wildcards(|field| matches!(field, Field::Facet(_)))
    }

    fn wildcards(&self, counted: impl Fn(&Field) -> bool) -> usize {
        self.clauses
            .iter()
            .filter(|c| counted(&c.field))
            .flat_map(|c| c.include.iter().chain(&c.exclude))
            .filter(|p| p.is_wildcard())
            .count()
    }

    /// Restricts the query to the entries of exactly this owner, replacing any owner filter.
    pub(crate) fn only_owner(&mut self, owner: &str) {
        let field = Field::Facet(facet::OWNER.to_string());
        self.clauses.retain(|c| c.field != field);
        self.add(field, Pattern::literal(owner), false);
    }

    fn clause(&mut self, field: Field) -> &mut Clause {
        match self.clauses.iter_mut().position(|c| c.field == field) {
            Some(i) => &mut self.clauses[i],
            None => {
                self.clauses.push(Clause {
                    field,
                    include: Vec::new(),
                    exclude: Vec::new(),
                });
                self.clauses.last_mut().expect("just pushed")
            }
        }
    }
}

impl Clause {
    fn push(&mut self, pattern: Pattern, exclude: bool) {
        if exclude {
            self.exclude.push(pattern)
        } else {
            self.include.push(pattern)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_only_know_star_and_question_mark() {
        let p = Pattern::parse("file", "/a/[x]/*".into()).unwrap();
        assert!(p.matches("/a/[x]/b/c"));
        assert!(!p.matches("/a/x/b"));
        assert_eq!(p.prefix(), "/a/[x]/");
        assert!(
            Pattern::parse("variable", "ta?".into())
                .unwrap()
                .matches("tas")
        );
        let p = Pattern::parse("model", "ę!?,{a}".into()).unwrap();
        assert!(p.matches("ę!x,{a}"));
        assert!(!p.matches("ę!x,a"));
        // `?` is one character, whatever its length in bytes; regex syntax is literal.
        let p = Pattern::parse("institute", "z?rich".into()).unwrap();
        assert!(p.matches("zürich") && p.matches("zurich"));
        assert!(!p.matches("züürich") && !p.matches("zrich"));
        let p = Pattern::parse("file", "/a.b/(x)+*".into()).unwrap();
        assert!(p.matches("/a.b/(x)+/c.nc") && !p.matches("/axb/(x)+/c.nc"));
        // Anchored at both ends unless a `*` opens or closes the pattern; `?` and `*` match
        // line breaks too.
        for (pattern, yes, no) in [
            ("a?", "ab", Some("bab")),
            ("?", "\n", Some("ab")),
            ("a*b", "a\nb", Some("a\nbc")),
            ("*", "anything", None),
            ("**", "", None),
            ("*.nc", "/a/b.nc", Some("/a/b.nc4")),
            ("/a/*", "/a/b/c", Some("/b/a/c")),
            ("*b*", "abc", Some("ac")),
            ("a*c", "abbc", Some("abcd")),
        ] {
            let p = Pattern::parse("file", pattern.into()).unwrap();
            assert!(p.matches(yes), "{pattern:?} {yes:?}");
            assert!(no.is_none_or(|no| !p.matches(no)), "{pattern:?} {no:?}");
        }
    }

    proptest::proptest! {
        /// Any text is a valid pattern that matches itself with its wildcards filled in.
        #[test]
        fn every_text_is_a_pattern_matching_its_own_instances(
            text in "[a-z!,\\[\\]{}\\\\^*?/ ę-]{0,12}",
        ) {
            let pattern = Pattern::parse("model", text.clone()).unwrap();
            let instance = text.replace('*', "").replace('?', "x");
            proptest::prop_assert!(pattern.matches(&instance), "{text:?} vs {instance:?}");
            if !text.contains('*') {
                let longer = format!("{instance}y");
                proptest::prop_assert!(!pattern.matches(&longer), "{text:?} vs {longer:?}");
            }
        }
    }
}
