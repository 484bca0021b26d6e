//! The parameters of the STAC API: the GET query pairs and the POST search body become one
//! [`SearchRequest`]. Every error is an [`Error::InvalidParameter`] whose [`Fault`] says how
//! the parameter is wrong: [`Fault::Syntax`] for a bbox that is not four numbers, a datetime
//! that is not RFC 3339 or a malformed paging token; [`Fault::Refused`] for a `limit` below 1;
//! [`Fault::Unknown`] for a parameter the endpoint does not take; [`Fault::WrongType`] for a
//! field of a POST body with the wrong JSON type. The HTTP facade answers the last with 422
//! and the others with 400, as the STAC API validator expects. A `limit` above [`MAX_LIMIT`]
//! is served as [`MAX_LIMIT`], which the STAC API requires and its validator checks.

use chrono::DateTime;
use serde_json::Value;

use super::geometry::Shape;
use crate::catalog::time::TimeRange;
use crate::error::{Error, Fault, Result};

/// Page size when `limit` is not given.
pub(crate) const DEFAULT_LIMIT: usize = 10;
/// The largest page.
pub(crate) const MAX_LIMIT: usize = 1000;
/// The most free-text terms (`q`) one search may give: each is matched against every term of
/// every facet.
pub(crate) const MAX_TERMS: usize = 50;

fn check_terms(terms: &[String]) -> Result<()> {
    if terms.len() > MAX_TERMS {
        return Err(Error::invalid(
            "q",
            Fault::Refused,
            format!("'q' takes at most {MAX_TERMS} terms, got {}.", terms.len()),
        ));
    }
    Ok(())
}

/// Which way a paging token points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The page after the pivot.
    Next,
    /// The page before the pivot.
    Prev,
}

/// A paging token `<direction>:<context>:<item id>.<position>`: the context is the collection
/// id for `/items` and `search` for `/search`; the pivot is the item next to the wanted page,
/// and its position its place in the paging order (the sort key). The position lets paging
/// go on from where the pivot stood when the pivot itself has been removed meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Which way from the pivot.
    pub direction: Direction,
    /// The listing the token belongs to.
    pub context: String,
    /// The pivot item.
    pub item: String,
    /// The pivot's place in the paging order (absent in tokens of earlier versions).
    pub position: Option<u32>,
}

impl Token {
    /// Parses a token.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] ([`Fault::Syntax`]) naming the expected shape.
    pub fn parse(text: &str) -> Result<Self> {
        let malformed = || {
            Error::invalid(
                "token",
                Fault::Syntax,
                format!(
                    "Invalid pagination token {text:?}: expected '<next|prev>:<context>:<item id>'."
                ),
            )
        };
        let mut parts = text.splitn(3, ':');
        let (Some(direction), Some(context), Some(item)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let direction = match direction {
            "next" => Direction::Next,
            "prev" => Direction::Prev,
            _ => return Err(malformed()),
        };
        if context.is_empty() || item.is_empty() || item.contains(':') {
            return Err(malformed());
        }
        let (item, position) = match item.split_once('.') {
            None => (item, None),
            Some((item, position)) => {
                let position = (!position.is_empty()
                    && position.bytes().all(|b| b.is_ascii_digit()))
                .then(|| position.parse::<u32>().ok())
                .flatten()
                .ok_or_else(malformed)?;
                (item, Some(position))
            }
        };
        if item.is_empty() {
            return Err(malformed());
        }
        Ok(Token {
            direction,
            context: context.to_string(),
            item: item.to_string(),
            position,
        })
    }

    /// The token text.
    pub fn to_text(&self) -> String {
        let direction = match self.direction {
            Direction::Next => "next",
            Direction::Prev => "prev",
        };
        match self.position {
            Some(position) => format!("{direction}:{}:{}.{position}", self.context, self.item),
            None => format!("{direction}:{}:{}", self.context, self.item),
        }
    }
}

/// A search over the STAC items: every field optional, all given ones AND'ed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchRequest {
    /// Collection ids (any of them).
    pub collections: Option<Vec<String>>,
    /// Item ids (any of them).
    pub ids: Option<Vec<String>>,
    /// `[minx, miny, maxx, maxy]`.
    pub bbox: Option<[f64; 4]>,
    /// Items whose time span intersects this one.
    pub datetime: Option<TimeRange>,
    /// The datetime as given, for links.
    pub datetime_text: Option<String>,
    /// Page size.
    pub limit: usize,
    /// Where the page is.
    pub token: Option<Token>,
    /// Free-text terms, any of which must occur in a metadata value.
    pub q: Vec<String>,
    /// `visible_collections` glob patterns.
    pub view: Vec<String>,
    /// A GeoJSON geometry items must meet (exclusive with `bbox`).
    pub intersects: Option<Shape>,
}

/// The parameters `GET .../items` takes besides `visible_collections`. `collections` may
/// only name the path's collection: pystac-client sends it when it pages a collection.
const ITEMS_KEYS: &[&str] = &["limit", "token", "datetime", "bbox", "collections"];
/// The parameters `GET /search` takes besides `visible_collections`.
const SEARCH_KEYS: &[&str] = &[
    "limit",
    "token",
    "datetime",
    "bbox",
    "collections",
    "ids",
    "q",
    "intersects",
];

impl SearchRequest {
    /// Parses the query pairs of `GET .../items` (`search = false`) or `GET /search`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown parameter, a syntax error or a `limit`
    /// below 1.
    pub fn from_pairs(pairs: &[(String, String)], search: bool) -> Result<Self> {
        let allowed = if search { SEARCH_KEYS } else { ITEMS_KEYS };
        let mut request = SearchRequest {
            limit: DEFAULT_LIMIT,
            ..SearchRequest::default()
        };
        for (key, value) in pairs {
            match key.as_str() {
                "visible_collections" => request.view.extend(split_list(value)),
                k if !allowed.contains(&k) => {
                    return Err(Error::invalid(
                        key.as_str(),
                        Fault::Unknown,
                        format!(
                            "Unknown query parameter '{key}'; this endpoint takes {}.",
                            allowed.join(", ")
                        ),
                    ));
                }
                "limit" => request.limit = parse_limit_text(value)?,
                "token" => request.token = Some(Token::parse(value)?),
                "datetime" => request.set_datetime(value)?,
                "bbox" => request.bbox = Some(parse_bbox_text(value)?),
                "collections" => extend(&mut request.collections, split_list(value)),
                "ids" => extend(&mut request.ids, split_list(value)),
                "q" => request
                    .q
                    .extend(split_list(value).map(|t| t.to_lowercase())),
                _ => {
                    let geometry: Value = serde_json::from_str(value).map_err(|e| {
                        Error::invalid(
                            "intersects",
                            Fault::Syntax,
                            format!("'intersects' is not GeoJSON: {e}."),
                        )
                    })?;
                    request.intersects = Some(Shape::parse(&geometry)?);
                }
            }
        }
        request.check_exclusive()?;
        check_terms(&request.q)?;
        Ok(request)
    }

    fn check_exclusive(&self) -> Result<()> {
        if self.bbox.is_some() && self.intersects.is_some() {
            return Err(Error::invalid(
                "bbox",
                Fault::Refused,
                "'bbox' and 'intersects' exclude each other; give one.",
            ));
        }
        Ok(())
    }

    /// Parses the JSON body of `POST /search`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a body that is not a JSON object, an unknown field, a
    /// malformed bbox or datetime, a field of the wrong type or a `limit` below 1.
    pub fn from_body(body: &[u8]) -> Result<Self> {
        // An invalid body is 422 (spec 2, endpoint 15), as a field of the wrong type is; only
        // malformed values of the fields are 400 (DECISIONS.md).
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            Error::invalid(
                "body",
                Fault::WrongType,
                format!("The search body is not JSON: {e}."),
            )
        })?;
        let Value::Object(fields) = value else {
            return Err(Error::invalid(
                "body",
                Fault::WrongType,
                "The search body must be a JSON object.",
            ));
        };
        let mut request = SearchRequest {
            limit: DEFAULT_LIMIT,
            ..SearchRequest::default()
        };
        for (key, value) in &fields {
            if value.is_null() {
                continue;
            }
            match key.as_str() {
                "limit" => {
                    let limit = value.as_i64().ok_or_else(|| {
                        Error::invalid(
                            "limit",
                            Fault::Syntax,
                            format!("'limit' must be an integer, got {value}."),
                        )
                    })?;
                    request.limit = check_limit(limit)?;
                }
                "token" => request.token = Some(Token::parse(string_field(key, value)?)?),
                "datetime" => request.set_datetime(string_field(key, value)?)?,
                "bbox" => request.bbox = Some(parse_bbox_json(value)?),
                "collections" => request.collections = Some(string_list(key, value)?),
                "ids" => request.ids = Some(string_list(key, value)?),
                "visible_collections" => request.view = string_list(key, value)?,
                "intersects" => request.intersects = Some(Shape::parse(value)?),
                "q" => {
                    let terms = match value {
                        Value::String(text) => split_list(text).collect(),
                        _ => string_list(key, value)?,
                    };
                    request.q = terms.into_iter().map(|t| t.to_lowercase()).collect();
                }
                // Extensions a client may send whose conformance classes are not claimed:
                // accepted and without effect, as OGC API clients expect.
                "fields" | "sortby" | "query" | "filter" | "filter-lang" | "conf" => {}
                _ => {
                    return Err(Error::invalid(
                        key.as_str(),
                        Fault::Unknown,
                        format!(
                            "Unknown search field '{key}'; the body takes collections, ids, bbox, intersects, datetime, limit, token, q and visible_collections."
                        ),
                    ));
                }
            }
        }
        request.check_exclusive()?;
        check_terms(&request.q)?;
        Ok(request)
    }

    fn set_datetime(&mut self, text: &str) -> Result<()> {
        self.datetime = Some(parse_datetime(text)?);
        self.datetime_text = Some(text.to_string());
        Ok(())
    }
}

fn extend(list: &mut Option<Vec<String>>, values: impl Iterator<Item = String>) {
    list.get_or_insert_with(Vec::new).extend(values);
}

/// Comma-separated values, trimmed, empty ones dropped.
pub fn split_list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

fn string_field<'a>(key: &str, value: &'a Value) -> Result<&'a str> {
    value.as_str().ok_or_else(|| {
        Error::invalid(
            key,
            Fault::WrongType,
            format!("'{key}' must be a string, got {value}."),
        )
    })
}

fn string_list(key: &str, value: &Value) -> Result<Vec<String>> {
    let wrong = || {
        Error::invalid(
            key,
            Fault::WrongType,
            format!("'{key}' must be an array of strings, got {value}."),
        )
    };
    value
        .as_array()
        .ok_or_else(wrong)?
        .iter()
        .map(|v| v.as_str().map(str::to_string).ok_or_else(wrong))
        .collect()
}

fn parse_limit_text(text: &str) -> Result<usize> {
    let limit: i64 = text.trim().parse().map_err(|_| {
        Error::invalid(
            "limit",
            Fault::Syntax,
            format!("'limit' must be an integer from 1 to {MAX_LIMIT}, got {text:?}."),
        )
    })?;
    check_limit(limit)
}

/// A page size: at least 1; larger than [`MAX_LIMIT`] is served as [`MAX_LIMIT`], as the
/// STAC API requires ("return the maximum number of items rather than an error").
fn check_limit(limit: i64) -> Result<usize> {
    match usize::try_from(limit) {
        Ok(n) if n >= 1 => Ok(n.min(MAX_LIMIT)),
        _ => Err(Error::invalid(
            "limit",
            Fault::Refused,
            format!(
                "'limit' must be a positive integer (pages hold at most {MAX_LIMIT} items), got {limit}."
            ),
        )),
    }
}

/// `minx,miny,maxx,maxy` (or six numbers with heights, which are ignored).
fn parse_bbox_text(text: &str) -> Result<[f64; 4]> {
    let numbers: Option<Vec<f64>> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>().ok().filter(|n| n.is_finite()))
        .collect();
    check_bbox(numbers, text)
}

fn parse_bbox_json(value: &Value) -> Result<[f64; 4]> {
    let numbers = value
        .as_array()
        .and_then(|items| items.iter().map(Value::as_f64).collect::<Option<Vec<_>>>())
        .ok_or_else(|| {
            // A bbox that is not an array of numbers is a malformed bbox, 400 as DECISIONS
            // and the STAC API validator want, not a field of the wrong type (422).
            Error::invalid(
                "bbox",
                Fault::Syntax,
                format!("'bbox' must be an array of four numbers, got {value}."),
            )
        })?;
    check_bbox(Some(numbers), &value.to_string())
}

fn check_bbox(numbers: Option<Vec<f64>>, shown: &str) -> Result<[f64; 4]> {
    let malformed = |why: &str| {
        Error::invalid(
            "bbox",
            Fault::Syntax,
            format!("Invalid bbox {shown:?}: {why}; expected minx,miny,maxx,maxy in degrees."),
        )
    };
    let numbers = numbers.ok_or_else(|| malformed("not a list of numbers"))?;
    let [minx, miny, maxx, maxy] = match numbers[..] {
        [a, b, c, d] => [a, b, c, d],
        [a, b, _, d, e, _] => [a, b, d, e],
        _ => return Err(malformed("it needs four (or six) numbers")),
    };
    if miny > maxy {
        return Err(malformed("miny is greater than maxy"));
    }
    if minx > maxx {
        return Err(malformed(
            "minx is greater than maxx (boxes crossing the antimeridian are not supported)",
        ));
    }
    Ok([minx, miny, maxx, maxy])
}

/// An RFC 3339 instant, or an interval `start/end` with `..` or an empty string for an open
/// end. Date-only values and instants without a time zone are malformed (the STAC API
/// requires full RFC 3339 date-times).
pub(crate) fn parse_datetime(text: &str) -> Result<TimeRange> {
    let malformed = |why: &str| {
        Error::invalid(
            "datetime",
            Fault::Syntax,
            format!(
                "Invalid datetime {text:?}: {why}; expected an RFC 3339 date-time such as 2000-01-01T00:00:00Z, or an interval start/end with '..' for an open end."
            ),
        )
    };
    let parts: Vec<&str> = text.split('/').collect();
    let open = |p: &str| p.is_empty() || p == "..";
    match parts[..] {
        [instant] => {
            if open(instant) {
                return Err(malformed("it is empty"));
            }
            let t = parse_instant(instant).map_err(|why| malformed(&why))?;
            Ok(TimeRange {
                start: t.0,
                end: t.1,
            })
        }
        [start, end] => {
            if open(start) && open(end) {
                return Err(malformed("both ends are open"));
            }
            let start = if open(start) {
                i64::MIN
            } else {
                parse_instant(start).map_err(|why| malformed(&why))?.0
            };
            let end = if open(end) {
                i64::MAX
            } else {
                parse_instant(end).map_err(|why| malformed(&why))?.1
            };
            if start > end {
                return Err(malformed("the start is after the end"));
            }
            Ok(TimeRange { start, end })
        }
        _ => Err(malformed("an interval has exactly one '/'")),
    }
}

/// One RFC 3339 date-time as the whole seconds it covers: `(floor, ceil)` of the instant.
fn parse_instant(text: &str) -> std::result::Result<(i64, i64), String> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || !matches!(bytes[10], b'T' | b't') {
        return Err(format!("{text:?} is not a full date-time"));
    }
    if let Some(dot) = text.find('.') {
        let digits = text[dot + 1..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if !(1..=9).contains(&digits) {
            return Err(format!("{text:?} has {digits} fractional digits (1 to 9)"));
        }
    }
    let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| format!("{text:?}: {e}"))?;
    let seconds = parsed.timestamp();
    let ceil = if parsed.timestamp_subsec_nanos() > 0 {
        seconds + 1
    } else {
        seconds
    };
    Ok((seconds, ceil))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn datetimes_follow_rfc3339_strictly() {
        for good in [
            "1985-04-12T23:20:50.52Z",
            "1996-12-19T16:39:57-08:00",
            "1937-01-01T12:00:27.87+01:00",
            "1985-04-12t23:20:50.5z",
            "1985-04-12T23:20:50.123456789Z",
            "2000-01-01T00:00:00Z/..",
            "../2000-01-01T00:00:00Z",
            "/2000-01-01T00:00:00Z",
            "2000-01-01T00:00:00Z/",
            "2000-01-01T00:00:00Z/2001-01-01T00:00:00Z",
        ] {
            assert!(parse_datetime(good).is_ok(), "{good}");
        }
        for bad in [
            "/",
            "../..",
            "/..",
            "../",
            "",
            "1985-04-12",
            "1985-04-12T23:20:50",
            "1985-04-12T23:20:50+0100",
            "1985-04-12T23:20:50.Z",
            "1985-04-12T23:20:50,5Z",
            "1985-13-12T23:20:50Z",
            "1985-04-12T25:20:50Z",
            "1985-04-12 23:20:50Z",
            "1985-04-12T23:20:50.1234567891Z",
            "2000-01-01T00:00:00Z/2000-01-01T00:00:00Z/2000-01-01T00:00:00Z",
            "2001-01-01T00:00:00Z/2000-01-01T00:00:00Z",
        ] {
            let err = parse_datetime(bad).unwrap_err();
            assert_eq!(err.fault(), Some(Fault::Syntax), "{bad}");
        }
        let open = parse_datetime("2000-01-01T00:00:00Z/..").unwrap();
        assert_eq!((open.start, open.end), (946_684_800, i64::MAX));
        let instant = parse_datetime("2000-01-01T00:00:00.5Z").unwrap();
        assert_eq!((instant.start, instant.end), (946_684_800, 946_684_801));
    }

    #[test]
    fn bbox_limit_and_unknown_parameters() {
        let r = SearchRequest::from_pairs(&pairs(&[("bbox", "-10,-5.5,10,5.5")]), true).unwrap();
        assert_eq!(r.bbox, Some([-10.0, -5.5, 10.0, 5.5]));
        assert_eq!(r.limit, DEFAULT_LIMIT);
        for bad in [
            "1,2,3",
            "[100.0,0.0,105.0,1.0]",
            "a,b,c,d",
            "0,10,10,0",
            "10,0,0,1",
        ] {
            let err = SearchRequest::from_pairs(&pairs(&[("bbox", bad)]), true).unwrap_err();
            assert_eq!(err.fault(), Some(Fault::Syntax), "{bad}");
        }
        for (limit, fault) in [
            ("0", Fault::Refused),
            ("-1", Fault::Refused),
            ("ten", Fault::Syntax),
            ("1.5", Fault::Syntax),
        ] {
            let err = SearchRequest::from_pairs(&pairs(&[("limit", limit)]), true).unwrap_err();
            assert_eq!(err.fault(), Some(fault), "{limit}");
        }
        let large = SearchRequest::from_pairs(&pairs(&[("limit", "1000000")]), true).unwrap();
        assert_eq!(large.limit, MAX_LIMIT);
        let outside = SearchRequest::from_pairs(&pairs(&[("bbox", "181,91,182,92")]), true);
        assert!(outside.is_ok(), "a box off the globe matches nothing");
        let err = SearchRequest::from_pairs(&pairs(&[("limitx", "1")]), false).unwrap_err();
        assert!(err.to_string().contains("'limitx'"), "{err}");
        let err = SearchRequest::from_pairs(&pairs(&[("q", "tas")]), false).unwrap_err();
        assert_eq!(err.fault(), Some(Fault::Unknown));
    }

    #[test]
    fn bodies_and_tokens() {
        let r = SearchRequest::from_body(
            br#"{"collections":["cmip6"],"bbox":[0,0,1,1],"limit":5,"q":"Tas, pr","token":"next:search:ab"}"#,
        )
        .unwrap();
        assert_eq!(r.collections, Some(vec!["cmip6".to_string()]));
        assert_eq!(r.q, vec!["tas", "pr"]);
        assert_eq!(r.limit, 5);
        assert_eq!(r.token.unwrap().to_text(), "next:search:ab");
        let fault = |body: &[u8]| SearchRequest::from_body(body).unwrap_err().fault();
        // A bbox or geometry of the wrong JSON type is malformed (400), as DECISIONS says.
        assert_eq!(fault(br#"{"bbox":"0,0,1,1"}"#), Some(Fault::Syntax));
        assert_eq!(fault(br#"{"bbox":[0,0,1]}"#), Some(Fault::Syntax));
        assert_eq!(fault(br#"{"intersects":"x"}"#), Some(Fault::Syntax));
        let many = format!(r#"{{"q":"{}"}}"#, vec!["t"; MAX_TERMS + 1].join(","));
        assert_eq!(fault(many.as_bytes()), Some(Fault::Refused));
        // A body that is not a JSON object is an invalid body (422, spec 2).
        assert_eq!(fault(b"[1]"), Some(Fault::WrongType));
        assert_eq!(fault(b"{"), Some(Fault::WrongType));
        assert_eq!(fault(br#"{"limit":"5"}"#), Some(Fault::Syntax));
        assert_eq!(fault(br#"{"limit":-1}"#), Some(Fault::Refused));
        assert_eq!(fault(br#"{"collections":"cmip6"}"#), Some(Fault::WrongType));
        assert_eq!(fault(br#"{"colections":["cmip6"]}"#), Some(Fault::Unknown));
        assert_eq!(
            fault(br#"{"bbox":[0,0,1,1],"intersects":{"type":"Point","coordinates":[0,0]}}"#),
            Some(Fault::Refused)
        );
        assert_eq!(
            fault(br#"{"intersects":{"type":"Blob"}}"#),
            Some(Fault::Syntax)
        );
        let point =
            SearchRequest::from_body(br#"{"intersects":{"type":"Point","coordinates":[5,50]}}"#);
        assert!(point.unwrap().intersects.is_some());
        for bad in [
            "next",
            "next:search",
            "sideways:search:x",
            "next::x",
            "next:a:b:c",
            "next:search:ab.",
            "next:search:.5",
            "next:search:ab.-1",
            "next:search:ab.99999999999",
        ] {
            assert_eq!(Token::parse(bad).unwrap_err().fault(), Some(Fault::Syntax));
        }
    }

    const TOKENS: &[&str] = &[
        "next:search:ab",
        "prev:cmip6:0123456789abcdef0123456789abcdef.42",
        "next:search:x.0",
    ];
    const TOKEN_SEPARATORS: &[&str] = &[":", ".", "next", "prev", "search"];
    const VALUES: &[&str] = &[
        "2000-01-01T00:00:00Z",
        "2000-01-01T00:00:00.5+01:00/..",
        "../2000-01-01T00:00:00Z",
        "-10,-5.5,10,5.5",
        "0,0,0,1,1,1",
        "10",
        "cmip6,cordex",
        r#"{"type":"Point","coordinates":[5,50]}"#,
        r#"{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}"#,
    ];
    const VALUE_SEPARATORS: &[&str] = &[
        ",", "/", "..", "T", "Z", ":", ".", "e", "-", "[", "]", "{", "}", "\"",
    ];
    /// Parameters whose errors also quote the value.
    const QUOTING: &[&str] = &["token", "datetime", "bbox"];

    fn hostile_pair() -> impl proptest::strategy::Strategy<Value = (String, String)> {
        use proptest::prelude::*;
        (
            prop_oneof![
                proptest::sample::select(SEARCH_KEYS).prop_map(str::to_string),
                Just("visible_collections".to_string()),
                crate::hostile::text(SEARCH_KEYS, &["_", "-"]),
            ],
            prop_oneof![
                crate::hostile::text(VALUES, VALUE_SEPARATORS),
                crate::hostile::text(TOKENS, TOKEN_SEPARATORS),
            ],
        )
    }

    proptest::proptest! {
        #[test]
        fn tokens_round_trip_and_errors_quote_them(
            text in crate::hostile::text(TOKENS, TOKEN_SEPARATORS),
        ) {
            match Token::parse(&text) {
                Ok(token) => proptest::prop_assert_eq!(Token::parse(&token.to_text()).ok(), Some(token)),
                Err(e) => {
                    proptest::prop_assert_eq!(e.fault(), Some(Fault::Syntax));
                    proptest::prop_assert!(e.to_string().contains(&format!("{text:?}")), "{}", e);
                }
            }
        }

        #[test]
        fn query_parameters_never_panic_and_errors_name_them(
            (key, value) in hostile_pair(),
            search: bool,
        ) {
            let pair = vec![(key.clone(), value.clone())];
            if let Err(e) = SearchRequest::from_pairs(&pair, search) {
                let message = e.to_string();
                proptest::prop_assert_eq!(e.kind(), ErrorKind::Invalid, "{}", message);
                proptest::prop_assert!(message.contains(key.as_str()), "{key:?}: {message}");
                if QUOTING.contains(&key.as_str()) {
                    proptest::prop_assert!(message.contains(&format!("{value:?}")), "{message}");
                }
            }
        }

        #[test]
        fn search_bodies_never_panic(
            fields in proptest::collection::vec(
                (hostile_pair(), 0..4u8),
                0..4,
            ),
        ) {
            // Each value goes in as a string, a number, a list or parsed JSON.
            let body: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|((key, text), shape)| {
                    let value = match shape {
                        0 => Value::String(text),
                        1 => serde_json::from_str(&text).unwrap_or(Value::Null),
                        2 => Value::from(split_list(&text).collect::<Vec<_>>()),
                        _ => text.parse::<f64>().ok().map_or(Value::Null, Value::from),
                    };
                    (key, value)
                })
                .collect();
            let bytes = serde_json::to_vec(&body).expect("a map serialises");
            if let Err(e) = SearchRequest::from_body(&bytes) {
                proptest::prop_assert_eq!(e.kind(), ErrorKind::Invalid, "{}", e);
            }
        }
    }
}
