//! The databrowser's URL dialect: the raw query parameters of a search call split into
//! options and filters ([`SearchParams`]) and translated from a flavour's facet names into a
//! catalogue [`Query`] over standard names ([`build_query`]).
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
//! all of them are matched in one pass over the paths (the catalogue's `select`). Facet
//! wildcards scan their facet's terms: at most [`MAX_FACET_WILDCARDS`] per request. A
//! wildcard value is at most 1024 bytes (`catalog::query::MAX_WILDCARD_LEN`).

use crate::catalog::facet;
use crate::catalog::query::{Field, Pattern, Query, Source};
use crate::catalog::time::{SelectMode, TimeRange};
use crate::error::{Error, Fault, Result};
use crate::flavours::{Flavour, ListFilter};

/// Parameters every search endpoint declares; they are never facets.
pub(crate) const DECLARED: [&str; 11] = [
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

/// The most wildcard facet values one request may give: each scans its facet's terms.
pub(crate) const MAX_FACET_WILDCARDS: usize = 100;

/// Parameters that refine `time` and `bbox`.
pub(crate) const SELECT_KEYS: [&str; 2] = ["time_select", "bbox_select"];

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
        _ => Err(Error::invalid(
            key,
            Fault::Syntax,
            format!("Parameter '{key}' must be a boolean (true or false), got {value:?}."),
        )),
    }
}

fn parse_start(value: &str) -> Result<u64> {
    value.trim().parse::<u64>().map_err(|_| {
        Error::invalid(
            "start",
            Fault::Syntax,
            format!("Parameter 'start' must be a non-negative integer, got {value:?}."),
        )
    })
}

fn parse_max_results(value: &str) -> Result<Option<u64>> {
    match value.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(Some(n as u64)),
        Ok(0 | -1) => Ok(None),
        _ => Err(Error::invalid(
            "max-results",
            Fault::Syntax,
            format!(
                "Parameter 'max-results' must be -1 (no limit) or a positive integer, got {value:?}."
            ),
        )),
    }
}

/// Validates and translates the filters of `params` for `flavour`.
///
/// # Errors
/// [`Error::InvalidParameter`] for an unknown facet, `version` without multi-version, or
/// a malformed `time`, `bbox`, `time_select` or `bbox_select`.
pub(crate) fn build_query(flavour: &Flavour, params: &SearchParams) -> Result<Query> {
    let mut query = Query::over(if flavour.is_user_data() {
        Source::UserData
    } else {
        Source::Catalogue
    });
    query.set_multi_version(params.multi_version);
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
            "file" => add_value(&mut query, key, Field::File, value, negate_key)?,
            "uri" => add_value(&mut query, key, Field::Uri, value, negate_key)?,
            _ => {
                let standard = standard_name(flavour, &name, params.translate)
                    .ok_or_else(|| unknown_facet(flavour, key, params.translate))?;
                match standard {
                    "time" => time_text = time_text.or(Some((key, value))),
                    "bbox" => bbox_text = bbox_text.or(Some((key, value))),
                    "version" if !params.multi_version => {
                        return Err(Error::invalid(
                            key.as_str(),
                            Fault::Refused,
                            format!("Facet '{key}' can only be searched with multi-version=true."),
                        ));
                    }
                    facet::OWNER => query.add(
                        Field::Facet(facet::OWNER.to_string()),
                        Pattern::literal(value.as_str()),
                        negate_key,
                    ),
                    _ => {
                        let field = Field::Facet(standard.to_string());
                        add_value(
                            &mut query,
                            key,
                            field,
                            &facet::term(standard, value),
                            negate_key,
                        )?;
                    }
                }
            }
        }
    }
    let location_wildcards = query.location_wildcards();
    if location_wildcards > MAX_LOCATION_WILDCARDS {
        return Err(Error::invalid(
            "file",
            Fault::Refused,
            format!(
                "Parameters 'file' and 'uri' take at most {MAX_LOCATION_WILDCARDS} wildcard \
             values per request, got {location_wildcards}."
            ),
        ));
    }
    let facet_wildcards = query.facet_wildcards();
    if facet_wildcards > MAX_FACET_WILDCARDS {
        return Err(Error::invalid(
            "facets",
            Fault::Refused,
            format!(
                "A search takes at most {MAX_FACET_WILDCARDS} wildcard facet values, got \
                 {facet_wildcards}."
            ),
        ));
    }
    if let Some((key, text)) = time_text {
        let range = TimeRange::parse_query(text).map_err(|e| {
            Error::invalid(
                key.as_str(),
                Fault::Syntax,
                format!("Invalid '{key}': {e}."),
            )
        })?;
        query.set_time(range, time_mode);
    }
    if let Some((key, text)) = bbox_text {
        query.set_bbox(parse_bbox(key, text)?, bbox_mode);
    }
    Ok(query)
}

/// Adds a filter value: negated by a `not `/`!`/`-` prefix or a `_not_` key; blank after the
/// prefix is no filter.
fn add_value(
    query: &mut Query,
    key: &str,
    field: Field,
    value: &str,
    negate_key: bool,
) -> Result<()> {
    let (negated, text) = split_negation(value);
    let pattern = Pattern::parse(key, text.to_string())?;
    if !pattern.text.is_empty() {
        query.add(field, pattern, negated || negate_key);
    }
    Ok(())
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
    Error::invalid(
        key,
        Fault::Unknown,
        format!(
            "Unknown search facet '{key}' for flavour '{}'. Valid facets: {}.",
            flavour.name,
            valid.join(", ")
        ),
    )
}

fn parse_mode(key: &str, value: &str) -> Result<SelectMode> {
    SelectMode::parse(value.trim()).ok_or_else(|| {
        Error::invalid(
            key,
            Fault::Refused,
            format!("Parameter '{key}' must be one of flexible, strict, file; got {value:?}."),
        )
    })
}

/// Parses `min_lon,max_lon,min_lat,max_lat`, the value of parameter `key`.
fn parse_bbox(key: &str, text: &str) -> Result<[f64; 4]> {
    let bad = |why: &str| {
        Error::invalid(
            key,
            Fault::Syntax,
            format!("Invalid '{key}' {text:?}: {why}."),
        )
    };
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

/// The multi-version flag freva-client sends with every request, also to flavour routes;
/// accepted and ignored there.
const CLIENT_FLAGS: [&str; 2] = ["multi-version", "multi_version"];

/// The filters of a flavour listing's query string (`flavour_name`, `owner`).
///
/// # Errors
/// [`Error::InvalidParameter`] naming an unknown parameter.
pub fn flavour_list_filter(pairs: &[(String, String)]) -> Result<ListFilter> {
    let mut filter = ListFilter::default();
    for (key, value) in pairs {
        match key.as_str() {
            "flavour_name" => filter.flavour_name = Some(value.clone()),
            "owner" => filter.owner = Some(value.clone()),
            k if CLIENT_FLAGS.contains(&k) => {}
            _ => {
                return Err(Error::invalid(
                    key.as_str(),
                    Fault::Unknown,
                    format!("Invalid parameter '{key}'. Valid parameters: flavour_name, owner"),
                ));
            }
        }
    }
    Ok(filter)
}

/// Whether a delete's query string asks for the global flavour (`is_global`, default false).
///
/// # Errors
/// [`Error::InvalidParameter`] naming an unknown parameter or a value that is not a boolean.
pub fn flavour_delete_is_global(pairs: &[(String, String)]) -> Result<bool> {
    let mut global = false;
    for (key, value) in pairs {
        match key.as_str() {
            "is_global" => global = parse_bool(key, value)?,
            k if CLIENT_FLAGS.contains(&k) => {}
            _ => {
                return Err(Error::invalid(
                    key.as_str(),
                    Fault::Unknown,
                    format!("Invalid parameter '{key}'. Valid parameters: is_global"),
                ));
            }
        }
    }
    Ok(global)
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
        let q = build_query(&cmip6(), &p).unwrap();
        assert_eq!(q.clauses().len(), 3);
        assert_eq!(q.clauses()[0].field, Field::Facet("model".into()));
        assert!(q.clauses()[0].include[0].matches("mpi-esm"));
        assert_eq!(q.clauses()[1].exclude[0].text, "amip");
        assert_eq!(q.clauses()[2].exclude[0].text, "x");
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
            assert!(build_query(&cmip6(), &p).is_err(), "{case:?}");
        }
    }

    #[test]
    fn owners_are_identities_never_patterns() {
        let user = crate::flavours::Flavour::global("user", builtin_mapping("user").unwrap());
        for name in ["*", "j*", "-jane", "not jane", "JANE", "!x", "a?"] {
            let p = SearchParams::parse(&pairs(&[("user", name)])).unwrap();
            let q = build_query(&user, &p).unwrap();
            let clause = &q.clauses()[0];
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
    fn facet_wildcards_are_bounded() {
        let within: Vec<(String, String)> = (0..MAX_FACET_WILDCARDS)
            .map(|i| ("source_id".to_string(), format!("*{i}*")))
            .collect();
        let p = SearchParams::parse(&within).unwrap();
        assert!(build_query(&cmip6(), &p).is_ok());
        let mut beyond = within;
        beyond.push(("experiment_id".into(), "amip*".into()));
        let p = SearchParams::parse(&beyond).unwrap();
        let err = build_query(&cmip6(), &p).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Invalid);
        assert!(err.to_string().contains("101"), "{err}");
        let long = ("source_id".to_string(), format!("{}*", "a".repeat(2000)));
        let err = SearchParams::parse(&[long])
            .and_then(|p| build_query(&cmip6(), &p))
            .unwrap_err();
        assert!(err.to_string().contains("at most 1024 bytes"), "{err}");
    }

    #[test]
    fn location_wildcards_are_bounded() {
        let many: Vec<(String, String)> = (0..=MAX_LOCATION_WILDCARDS)
            .map(|i| ("file".to_string(), format!("*{i}*")))
            .collect();
        let p = SearchParams::parse(&many).unwrap();
        let err = build_query(&cmip6(), &p).unwrap_err().to_string();
        assert!(err.contains("at most 100 wildcard"), "{err}");
        let p = SearchParams::parse(&many[1..]).unwrap();
        assert!(build_query(&cmip6(), &p).is_ok());
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
                .and_then(|params| build_query(&cmip6(), &params));
            if let Err(e) = built {
                let message = e.to_string();
                proptest::prop_assert_eq!(e.kind(), crate::ErrorKind::Invalid, "{}", message);
                proptest::prop_assert!(named(&message), "{filters:?}: {message}");
            }
        }
    }
}
