//! Search requests: the raw query parameters of a databrowser call, validated and translated
//! into a [`Query`] over standard facet names.
//!
//! Semantics (DECISIONS.md): repeated values of one key are OR'ed, different keys AND'ed; facet
//! values match case-insensitively, `file`/`uri` exactly; `*` and `?` are wildcards; a value
//! starting with `not `, `!` or `-`, or a key containing `_not_`, negates. Blank values are
//! dropped, as if the key were absent.
//!
//! The owner of user data (`user`) is an identity, never a pattern: its values match exactly
//! and case-sensitively, and `*`, `?`, `not `, `!` and `-` are part of the name (a `_not_` key
//! still excludes that exact owner).
//!
//! Locations are matched by scanning paths, so their wildcards are bounded: at most
//! [`MAX_LOCATION_WILDCARDS`] wildcard values of `file` and `uri` per request (422 beyond), and
//! all of them are matched in one pass over the paths (see `select`).

use globset::{Glob, GlobBuilder, GlobMatcher};

use crate::error::{Error, Result};
use crate::flavours::Flavour;

use super::facet;
use super::time::{SelectMode, TimeRange};

/// Parameters every search endpoint declares; they are never facets.
const DECLARED: [&str; 11] = [
    "multi-version",
    "multi_version",
    "translate",
    "start",
    "max-results",
    "max_results",
    "batch_size",
    "facets",
    "fields",
    "uniq_key",
    "flavour",
];

/// The most wildcard values of `file` and `uri` one request may give.
pub(crate) const MAX_LOCATION_WILDCARDS: usize = 100;

/// Parameters that refine `time` and `bbox`.
const SELECT_KEYS: [&str; 2] = ["time_select", "bbox_select"];

/// The raw parameters of a search call, split into options and facet filters.
#[derive(Debug, Clone, Default)]
pub struct SearchParams {
    /// Search all versions instead of the newest.
    pub multi_version: bool,
    /// Facet names in and out are the flavour's (true) or standard (false).
    pub translate: bool,
    /// Offset into the result order.
    pub start: u64,
    /// Upper bound on the number of results (`None`: unbounded).
    pub max_results: Option<u64>,
    /// Facets to count (metadata-search), as given.
    pub facets: Vec<String>,
    /// Facet filters in request order, blank values dropped.
    pub filters: Vec<(String, String)>,
}

impl SearchParams {
    /// Splits raw query pairs into options and filters.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the parameter with a malformed value.
    pub fn parse(pairs: &[(String, String)]) -> Result<Self> {
        let mut params = SearchParams {
            translate: true,
            ..SearchParams::default()
        };
        for (key, value) in pairs {
            match key.as_str() {
                "multi-version" => params.multi_version = parse_bool(key, value)?,
                "translate" => params.translate = parse_bool(key, value)?,
                "start" => params.start = parse_start(value)?,
                "max-results" => params.max_results = parse_max_results(value)?,
                "facets" => params.facets.extend(
                    value
                        .split(',')
                        .map(str::trim)
                        .filter(|f| !f.is_empty() && *f != "*" && *f != "all")
                        .map(String::from),
                ),
                _ if DECLARED.contains(&key.as_str()) => {}
                _ if value.trim().is_empty() => {}
                _ => params.filters.push((key.clone(), value.clone())),
            }
        }
        Ok(params)
    }
}

/// Parses a query-string boolean: `true/false/1/0/yes/no/on/off/t/f/y/n`, any case.
///
/// # Errors
/// [`Error::InvalidParameter`] naming `key`.
pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Ok(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Ok(false),
        _ => Err(Error::invalid(format!(
            "Parameter '{key}' must be a boolean (true or false), got {value:?}."
        ))),
    }
}

fn parse_start(value: &str) -> Result<u64> {
    value.trim().parse::<u64>().map_err(|_| {
        Error::invalid(format!(
            "Parameter 'start' must be a non-negative integer, got {value:?}."
        ))
    })
}

fn parse_max_results(value: &str) -> Result<Option<u64>> {
    match value.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(Some(n as u64)),
        Ok(0 | -1) => Ok(None),
        _ => Err(Error::invalid(format!(
            "Parameter 'max-results' must be -1 (no limit) or a positive integer, got {value:?}."
        ))),
    }
}

/// What a clause matches against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A standard term facet (values lower-cased).
    Facet(String),
    /// The file path (exact, case-sensitive).
    File,
    /// The URI (exact, case-sensitive).
    Uri,
}

/// One value of a clause: a literal or a wildcard pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The value as matched (lower-cased for facets).
    pub text: String,
    matcher: Option<(Glob, GlobMatcher)>,
}

impl Pattern {
    /// A value matched literally, whatever characters it holds.
    pub fn literal(text: impl Into<String>) -> Self {
        Pattern {
            text: text.into(),
            matcher: None,
        }
    }

    fn new(text: String) -> Result<Self> {
        if !text.contains(['*', '?']) {
            return Ok(Pattern {
                text,
                matcher: None,
            });
        }
        // Only `*` and `?` are wildcards: escape the rest of glob syntax.
        let mut glob = String::with_capacity(text.len() + 8);
        for c in text.chars() {
            match c {
                '[' | ']' | '{' | '}' | '\\' | '!' | ',' => {
                    glob.push('[');
                    glob.push(c);
                    glob.push(']');
                }
                _ => glob.push(c),
            }
        }
        let glob = GlobBuilder::new(&glob)
            .literal_separator(false)
            .backslash_escape(false)
            .build()
            .map_err(|e| Error::invalid(format!("Invalid wildcard pattern {text:?}: {e}.")))?;
        let matcher = glob.compile_matcher();
        Ok(Pattern {
            text,
            matcher: Some((glob, matcher)),
        })
    }

    /// The literal part before the first wildcard (the whole text for literals).
    pub fn prefix(&self) -> &str {
        let end = self.text.find(['*', '?']).unwrap_or(self.text.len());
        &self.text[..end]
    }

    /// Whether the pattern has wildcards.
    pub fn is_wildcard(&self) -> bool {
        self.matcher.is_some()
    }

    /// The glob of a wildcard pattern.
    pub(crate) fn glob(&self) -> Option<&Glob> {
        self.matcher.as_ref().map(|(glob, _)| glob)
    }

    /// Whether `candidate` matches.
    pub fn matches(&self, candidate: &str) -> bool {
        match &self.matcher {
            Some((_, m)) => m.is_match(candidate),
            None => self.text == candidate,
        }
    }
}

/// The filters on one field.
#[derive(Debug, Clone)]
pub struct Clause {
    /// The field.
    pub field: Field,
    /// Values of which one must match (none: no constraint).
    pub include: Vec<Pattern>,
    /// Values of which none may match.
    pub exclude: Vec<Pattern>,
}

/// Which records a query searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
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
    pub clauses: Vec<Clause>,
    /// Time filter.
    pub time: Option<(TimeRange, SelectMode)>,
    /// Box filter `[min_lon, max_lon, min_lat, max_lat]`.
    pub bbox: Option<([f64; 4], SelectMode)>,
    /// Search all versions.
    pub multi_version: bool,
    /// The records searched.
    pub source: Source,
    /// Free-text terms (lower-cased): a record matches when any of its facet values
    /// contains any of them.
    pub text: Vec<String>,
    /// Only the records with these item keys (see [`super::item_key`]).
    pub item_keys: Option<Vec<u128>>,
}

impl Query {
    /// Validates and translates the filters of `params` for `flavour`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown facet, `version` without multi-version, or
    /// a malformed `time`, `bbox`, `time_select` or `bbox_select`.
    pub fn build(flavour: &Flavour, params: &SearchParams) -> Result<Self> {
        let mut query = Query {
            multi_version: params.multi_version,
            source: if flavour.is_user_data() {
                Source::UserData
            } else {
                Source::Catalogue
            },
            ..Query::default()
        };
        let mut time_text = None;
        let mut bbox_text = None;
        let mut time_mode = SelectMode::default();
        let mut bbox_mode = SelectMode::default();
        for (key, value) in &params.filters {
            let lower = key.to_lowercase();
            let negate_key = lower.contains("_not_");
            let name = lower.replace("_not_", "");
            match name.as_str() {
                "time_select" => time_mode = parse_mode(key, value)?,
                "bbox_select" => bbox_mode = parse_mode(key, value)?,
                "file" => query.add_value(Field::File, value, negate_key)?,
                "uri" => query.add_value(Field::Uri, value, negate_key)?,
                _ => {
                    let standard = standard_name(flavour, &name, params.translate)
                        .ok_or_else(|| unknown_facet(flavour, key, params.translate))?;
                    match standard {
                        "time" => time_text = time_text.or(Some((key, value))),
                        "bbox" => bbox_text = bbox_text.or(Some((key, value))),
                        "version" if !params.multi_version => {
                            return Err(Error::invalid(format!(
                                "Facet '{key}' can only be searched with multi-version=true."
                            )));
                        }
                        facet::OWNER => query.add_owner(value, negate_key),
                        _ => {
                            let field = Field::Facet(standard.to_string());
                            query.add_value(field, &facet::term(standard, value), negate_key)?;
                        }
                    }
                }
            }
        }
        let location_wildcards = query
            .clauses
            .iter()
            .filter(|c| matches!(c.field, Field::File | Field::Uri))
            .flat_map(|c| c.include.iter().chain(&c.exclude))
            .filter(|p| p.is_wildcard())
            .count();
        if location_wildcards > MAX_LOCATION_WILDCARDS {
            return Err(Error::invalid(format!(
                "Parameters 'file' and 'uri' take at most {MAX_LOCATION_WILDCARDS} wildcard \
                 values per request, got {location_wildcards}."
            )));
        }
        if let Some((key, text)) = time_text {
            let range = TimeRange::parse_query(text)
                .map_err(|e| Error::invalid(format!("Invalid '{key}': {e}.")))?;
            query.time = Some((range, time_mode));
        }
        if let Some((key, text)) = bbox_text {
            query.bbox = Some((parse_bbox(key, text)?, bbox_mode));
        }
        Ok(query)
    }

    /// Restricts the query to the entries of exactly this owner, replacing any owner filter.
    pub fn only_owner(&mut self, owner: &str) {
        self.clauses
            .retain(|c| c.field != Field::Facet(facet::OWNER.to_string()));
        self.add_owner(owner, false);
    }

    /// An owner filter: the value is an identity, matched as it is.
    fn add_owner(&mut self, owner: &str, exclude: bool) {
        self.clause(Field::Facet(facet::OWNER.to_string()))
            .push(Pattern::literal(owner), exclude);
    }

    fn add_value(&mut self, field: Field, value: &str, negate_key: bool) -> Result<()> {
        let (negated, text) = split_negation(value);
        let pattern = Pattern::new(text.to_string())?;
        if pattern.text.is_empty() {
            return Ok(());
        }
        self.clause(field).push(pattern, negated || negate_key);
        Ok(())
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

fn split_negation(value: &str) -> (bool, &str) {
    // `get` rather than slicing: the fourth byte may fall inside a multibyte character.
    if let Some(head) = value.get(..4)
        && head.eq_ignore_ascii_case("not ")
    {
        return (true, &value[4..]);
    }
    match value.strip_prefix(['!', '-']) {
        Some(rest) => (true, rest),
        None => (false, value),
    }
}

fn standard_name<'f>(flavour: &'f Flavour, name: &'f str, translate: bool) -> Option<&'f str> {
    if translate {
        flavour.to_standard(name)
    } else {
        flavour.has(name).then_some(name)
    }
}

fn unknown_facet(flavour: &Flavour, key: &str, translate: bool) -> Error {
    let mut valid: Vec<&str> = flavour
        .mapping()
        .iter()
        .map(|(std, name)| {
            if translate {
                name.as_str()
            } else {
                std.as_str()
            }
        })
        .collect();
    valid.extend(["file", "uri"].iter().chain(SELECT_KEYS.iter()));
    Error::invalid(format!(
        "Unknown search facet '{key}' for flavour '{}'. Valid facets: {}.",
        flavour.name,
        valid.join(", ")
    ))
}

fn parse_mode(key: &str, value: &str) -> Result<SelectMode> {
    SelectMode::parse(value.trim()).ok_or_else(|| {
        Error::invalid(format!(
            "Parameter '{key}' must be one of flexible, strict, file; got {value:?}."
        ))
    })
}

/// Parses `min_lon,max_lon,min_lat,max_lat`, the value of parameter `key`.
fn parse_bbox(key: &str, text: &str) -> Result<[f64; 4]> {
    let bad = |why: &str| Error::invalid(format!("Invalid '{key}' {text:?}: {why}."));
    let numbers: Vec<f64> = text
        .split(',')
        .map(|part| part.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("expected four numbers min_lon,max_lon,min_lat,max_lat"))?;
    let [min_lon, max_lon, min_lat, max_lat]: [f64; 4] = numbers
        .try_into()
        .map_err(|_| bad("expected four numbers min_lon,max_lon,min_lat,max_lat"))?;
    if !(-180.0..=180.0).contains(&min_lon) || !(-180.0..=180.0).contains(&max_lon) {
        return Err(bad("longitudes must lie within [-180, 180]"));
    }
    if !(-90.0..=90.0).contains(&min_lat) || !(-90.0..=90.0).contains(&max_lat) {
        return Err(bad("latitudes must lie within [-90, 90]"));
    }
    if min_lon > max_lon || min_lat > max_lat {
        return Err(bad("a minimum exceeds its maximum"));
    }
    Ok([min_lon, max_lon, min_lat, max_lat])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flavours::builtin_mapping;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cmip6() -> Flavour {
        crate::flavours::Flavour::global("cmip6", builtin_mapping("cmip6").unwrap())
    }

    #[test]
    fn options_are_split_from_filters() {
        let p = SearchParams::parse(&pairs(&[
            ("multi-version", "True"),
            ("start", "5"),
            ("project", ""),
            ("model", "a"),
            ("facets", "project,model"),
        ]))
        .unwrap();
        assert!(p.multi_version && p.translate);
        assert_eq!(p.start, 5);
        assert_eq!(p.filters, pairs(&[("model", "a")]));
        assert_eq!(p.facets, ["project", "model"]);
    }

    #[test]
    fn malformed_options_name_the_parameter() {
        for (k, v) in [
            ("start", "-1"),
            ("start", "x"),
            ("translate", "maybe"),
            ("max-results", "-5"),
            ("max-results", "1e99"),
        ] {
            let err = SearchParams::parse(&pairs(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(k), "{err}");
        }
    }

    #[test]
    fn translation_and_negation() {
        let p = SearchParams::parse(&pairs(&[
            ("source_id", "MPI*"),
            ("experiment_id", "not amip"),
            ("mip_era_not_", "x"),
        ]))
        .unwrap();
        let q = Query::build(&cmip6(), &p).unwrap();
        assert_eq!(q.clauses.len(), 3);
        assert_eq!(q.clauses[0].field, Field::Facet("model".into()));
        assert!(q.clauses[0].include[0].matches("mpi-esm"));
        assert_eq!(q.clauses[1].exclude[0].text, "amip");
        assert_eq!(q.clauses[2].exclude[0].text, "x");
    }

    #[test]
    fn invalid_filters_are_rejected() {
        let cases = [
            vec![("model", "x")],
            vec![("foo", "bar")],
            vec![("version", "1")],
            vec![("time", "fx")],
            vec![("bbox", "1,2,3")],
            vec![("bbox", "181,0,0,0")],
            vec![("bbox", "0,0,91,0")],
            vec![("time", "2000"), ("time_select", "bad")],
        ];
        for case in cases {
            let p = SearchParams::parse(&pairs(&case)).unwrap();
            assert!(Query::build(&cmip6(), &p).is_err(), "{case:?}");
        }
    }

    #[test]
    fn owners_are_identities_never_patterns() {
        let user = crate::flavours::Flavour::global("user", builtin_mapping("user").unwrap());
        for name in ["*", "j*", "-jane", "not jane", "JANE", "!x", "a?"] {
            let p = SearchParams::parse(&pairs(&[("user", name)])).unwrap();
            let q = Query::build(&user, &p).unwrap();
            let clause = &q.clauses[0];
            assert!(clause.exclude.is_empty(), "{name}");
            assert_eq!(clause.include[0].text, name);
            assert!(!clause.include[0].is_wildcard(), "{name}");
        }
    }

    #[test]
    fn negation_prefixes_do_not_split_characters() {
        assert_eq!(split_negation("abc\u{e9}x"), (false, "abc\u{e9}x"));
        assert_eq!(split_negation("NoT x"), (true, "x"));
        assert_eq!(split_negation("\u{e9}"), (false, "\u{e9}"));
    }

    #[test]
    fn location_wildcards_are_bounded() {
        let many: Vec<(String, String)> = (0..=MAX_LOCATION_WILDCARDS)
            .map(|i| ("file".to_string(), format!("*{i}*")))
            .collect();
        let p = SearchParams::parse(&many).unwrap();
        let err = Query::build(&cmip6(), &p).unwrap_err().to_string();
        assert!(err.contains("at most 100 wildcard"), "{err}");
        let p = SearchParams::parse(&many[1..]).unwrap();
        assert!(Query::build(&cmip6(), &p).is_ok());
    }

    #[test]
    fn wildcards_only_know_star_and_question_mark() {
        let p = Pattern::new("/a/[x]/*".into()).unwrap();
        assert!(p.matches("/a/[x]/b/c"));
        assert!(!p.matches("/a/x/b"));
        assert_eq!(p.prefix(), "/a/[x]/");
        assert!(Pattern::new("ta?".into()).unwrap().matches("tas"));
    }

    const KEYS: &[&str] = &[
        "project",
        "source_id",
        "experiment_id",
        "time",
        "bbox",
        "file",
        "uri",
        "user",
        "version",
        "time_select",
        "bbox_select",
        "multi-version",
        "translate",
        "start",
        "max-results",
        "facets",
        "project_not_",
        "TIME",
    ];
    const VALUES: &[&str] = &[
        "cmip6",
        "not amip",
        "-tas",
        "!x",
        "/arch/*/tas_*.nc",
        "ta?",
        "[a]{b},c\\",
        "2000-01 to 2001",
        "[0 TO 9999]",
        "-10,10,-5,5",
        "strict",
        "true",
        "-1",
        "25",
    ];
    const SEPARATORS: &[&str] = &["*", "?", ",", " to ", "not ", "-", "!", "[", "]", "{", "}"];

    proptest::proptest! {
        #[test]
        fn search_parameters_never_panic_and_errors_name_them(
            filters in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::strategy::Strategy::prop_map(proptest::sample::select(KEYS), str::to_string),
                        crate::hostile::text(KEYS, &["_", "-", "_not_"]),
                    ],
                    crate::hostile::text(VALUES, SEPARATORS),
                ),
                1..4,
            ),
        ) {
            let named = |message: &str| {
                filters
                    .iter()
                    .any(|(k, v)| message.contains(k.as_str()) || message.contains(&format!("{v:?}")))
            };
            let built = SearchParams::parse(&filters)
                .and_then(|params| Query::build(&cmip6(), &params));
            if let Err(e) = built {
                let message = e.to_string();
                proptest::prop_assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{}", message);
                proptest::prop_assert!(named(&message), "{filters:?}: {message}");
            }
        }
    }
}
