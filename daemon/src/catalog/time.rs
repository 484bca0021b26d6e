//! Time ranges: partial ISO 8601 instants, `[<start> TO <end>]` record ranges and
//! `<start> to <end>` query ranges.
//!
//! Missing parts of a start default to the start of the period, missing parts of an end to the
//! end of the period: `1979-02` as an end is `1979-02-28T23:59:59`. Instants are UTC seconds.

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime};

/// Which end of a period a partial instant stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Fill missing parts with the earliest value.
    Start,
    /// Fill missing parts with the latest value.
    End,
}

/// A closed interval of UTC seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// First second of the range.
    pub start: i64,
    /// Last second of the range.
    pub end: i64,
}

/// How a query range selects record ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SelectMode {
    /// The ranges intersect.
    #[default]
    Flexible,
    /// The record lies within the query.
    Strict,
    /// The record contains the query.
    File,
}

impl SelectMode {
    /// Parses `flexible`, `strict` or `file` (any case).
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "flexible" => Some(SelectMode::Flexible),
            "strict" => Some(SelectMode::Strict),
            "file" => Some(SelectMode::File),
            _ => None,
        }
    }

    /// Whether `record` is selected by `query` for 1-D intervals given as `(lo, hi)`.
    pub(crate) fn selects<T: PartialOrd + Copy>(self, record: (T, T), query: (T, T)) -> bool {
        match self {
            SelectMode::Flexible => record.0 <= query.1 && record.1 >= query.0,
            SelectMode::Strict => query.0 <= record.0 && record.1 <= query.1,
            SelectMode::File => record.0 <= query.0 && query.1 <= record.1,
        }
    }
}

impl TimeRange {
    /// Parses a record's `[<start> TO <end>]` (brackets optional, `TO` in any case).
    pub fn parse_record(text: &str) -> Result<Self, String> {
        let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
        let lower = inner.to_ascii_lowercase();
        let Some(pos) = lower.find(" to ") else {
            return Err(format!(
                "time {text:?} is not of the form [<start> TO <end>]"
            ));
        };
        let start =
            parse_instant(inner[..pos].trim(), Bound::Start).map_err(|e| within(&e, text))?;
        let end =
            parse_instant(inner[pos + 4..].trim(), Bound::End).map_err(|e| within(&e, text))?;
        Self::ordered(start, end, text)
    }

    /// Parses a query's `<start> to <end>`; white space is ignored, a lone value or an empty
    /// side is open-ended (year 1 to year 9999).
    pub fn parse_query(text: &str) -> Result<Self, String> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let compact = compact.to_ascii_lowercase();
        let (start, end) = match compact.find("to") {
            Some(pos) => (&compact[..pos], &compact[pos + 2..]),
            None => (compact.as_str(), ""),
        };
        let start = if start.is_empty() { "0001" } else { start };
        let end = if end.is_empty() { "9999" } else { end };
        let start = parse_instant(start, Bound::Start).map_err(|e| within(&e, text))?;
        let end = parse_instant(end, Bound::End).map_err(|e| within(&e, text))?;
        Self::ordered(start, end, text)
    }

    fn ordered(start: i64, end: i64, text: &str) -> Result<Self, String> {
        if start > end {
            return Err(format!("time {text:?} ends before it starts"));
        }
        Ok(TimeRange { start, end })
    }
}

/// An instant's error, completed with the whole range it came from: the query form drops white
/// space and case, so the instant alone may not read as what the user typed.
fn within(error: &str, text: &str) -> String {
    format!("{error} (in {text:?})")
}

/// Parses a partial ISO 8601 instant (`YYYY`, `YYYY-MM`, `YYYY-MM-DD`, `YYYY-MM-DDTHH[:MM[:SS]]`
/// with optional fraction and `Z`/`+00:00`) into UTC seconds.
pub(crate) fn parse_instant(text: &str, bound: Bound) -> Result<i64, String> {
    let bad = || format!("{text:?} is not an ISO 8601 date or time");
    let (date_part, time_part) = match text.find(['T', 't', ' ']) {
        Some(pos) => (&text[..pos], Some(&text[pos + 1..])),
        None => (text, None),
    };
    let mut fields = date_part.split('-');
    let year: i32 = number(fields.next(), 1, 4).ok_or_else(bad)?;
    let month: Option<u32> = optional(fields.next(), 2).map_err(|()| bad())?;
    let day: Option<u32> = optional(fields.next(), 2).map_err(|()| bad())?;
    if fields.next().is_some() || (day.is_some() && month.is_none()) {
        return Err(bad());
    }
    let month = month.unwrap_or(if bound == Bound::Start { 1 } else { 12 });
    let first = NaiveDate::from_ymd_opt(year, month, 1).ok_or_else(bad)?;
    let date = match day {
        Some(d) => NaiveDate::from_ymd_opt(year, month, d).ok_or_else(bad)?,
        None if bound == Bound::Start => first,
        None => last_day_of_month(first),
    };
    let time = parse_clock(time_part, bound).ok_or_else(bad)?;
    Ok(NaiveDateTime::new(date, time).and_utc().timestamp())
}

fn parse_clock(text: Option<&str>, bound: Bound) -> Option<NaiveTime> {
    let fill = if bound == Bound::Start { 0 } else { 59 };
    let Some(text) = text else {
        return NaiveTime::from_hms_opt(if bound == Bound::Start { 0 } else { 23 }, fill, fill);
    };
    let text = strip_utc_offset(text)?;
    // A fraction of a second is allowed and dropped: instants are whole seconds.
    let text = match text.split_once('.') {
        Some((clock, fraction)) => {
            let digits = !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit());
            digits.then_some(clock)?
        }
        None => text,
    };
    let mut fields = text.split(':');
    let hour: u32 = number(fields.next(), 2, 2)?;
    let minute: Option<u32> = optional(fields.next(), 2).ok()?;
    let second: Option<u32> = optional(fields.next(), 2).ok()?;
    if fields.next().is_some() || (second.is_some() && minute.is_none()) {
        return None;
    }
    NaiveTime::from_hms_opt(hour, minute.unwrap_or(fill), second.unwrap_or(fill))
}

/// Accepts only UTC designators: the service stores and compares UTC. Any other `+` or `-`
/// in the clock part is an offset (or garbage) and refuses the instant; the clock is then
/// checked digit by digit, so nothing here indexes into the text.
fn strip_utc_offset(text: &str) -> Option<&str> {
    for suffix in ["z", "Z", "+00:00", "+0000", "+00"] {
        if let Some(stripped) = text.strip_suffix(suffix) {
            return Some(stripped);
        }
    }
    (!text.contains(['+', '-'])).then_some(text)
}

fn number<T: std::str::FromStr>(field: Option<&str>, min: usize, max: usize) -> Option<T> {
    let field = field?;
    let ok = (min..=max).contains(&field.len()) && field.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| field.parse().ok()).flatten()
}

fn optional<T: std::str::FromStr>(field: Option<&str>, len: usize) -> Result<Option<T>, ()> {
    match field {
        None => Ok(None),
        Some(f) => number(Some(f), len, len).map(Some).ok_or(()),
    }
}

fn last_day_of_month(first: NaiveDate) -> NaiveDate {
    let next = if first.month() == 12 {
        NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
    };
    next.and_then(|n| n.pred_opt()).unwrap_or(first)
}

/// Formats UTC seconds as `YYYY-MM-DDThh:mm:ssZ`.
pub(crate) fn format_instant(seconds: i64) -> String {
    chrono::DateTime::from_timestamp(seconds, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy;

    use super::*;

    fn at(text: &str) -> i64 {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S")
            .unwrap()
            .and_utc()
            .timestamp()
    }

    #[test]
    fn partial_instants_fill_to_the_period_bounds() {
        assert_eq!(
            parse_instant("2000", Bound::Start),
            Ok(at("2000-01-01T00:00:00"))
        );
        assert_eq!(
            parse_instant("1901", Bound::End),
            Ok(at("1901-12-31T23:59:59"))
        );
        assert_eq!(
            parse_instant("2001-02", Bound::End),
            Ok(at("2001-02-28T23:59:59"))
        );
        assert_eq!(
            parse_instant("2016-09-03T01:00", Bound::End),
            Ok(at("2016-09-03T01:00:59"))
        );
        assert_eq!(
            parse_instant("1979-01-16T12:00:00Z", Bound::Start),
            Ok(at("1979-01-16T12:00:00"))
        );
        assert_eq!(
            parse_instant("0", Bound::Start),
            Ok(at("0000-01-01T00:00:00"))
        );
    }

    #[test]
    fn malformed_instants_are_rejected() {
        for text in [
            "fx",
            "2000-13",
            "2000-02-30",
            "20x0",
            "2000-1",
            "2000-01-01T25",
            "",
        ] {
            assert!(parse_instant(text, Bound::Start).is_err(), "{text}");
        }
    }

    #[test]
    fn query_ranges_are_open_ended_and_ignore_space() {
        let r = TimeRange::parse_query("1898 to 1901").unwrap();
        assert_eq!(
            (r.start, r.end),
            (at("1898-01-01T00:00:00"), at("1901-12-31T23:59:59"))
        );
        let r = TimeRange::parse_query("2000").unwrap();
        assert_eq!(r.end, at("9999-12-31T23:59:59"));
        assert!(TimeRange::parse_query("2001 to 2000").is_err());
    }

    #[test]
    fn record_ranges_parse() {
        let r = TimeRange::parse_record("[2016-09-02T23:00 TO 2016-09-02T23:30]").unwrap();
        assert_eq!(r.start, at("2016-09-02T23:00:00"));
        assert_eq!(r.end, at("2016-09-02T23:30:59"));
        assert!(TimeRange::parse_record("[0 TO 9999]").is_ok());
        assert!(TimeRange::parse_record("fx").is_err());
    }

    #[test]
    fn a_time_ending_in_its_separator_is_an_error() {
        for text in [
            "2000-01-01T",
            "2000-01-01T\u{e9}",
            "2000-01-01 ",
            "2000-01-01T-",
            "T",
        ] {
            let err = parse_instant(text, Bound::Start).unwrap_err();
            assert!(err.contains(&format!("{text:?}")), "{err}");
        }
        let err = TimeRange::parse_query("2000-01-01T").unwrap_err();
        assert!(err.contains("\"2000-01-01T\""), "{err}");
        let err = TimeRange::parse_record("[2000-01-01T TO 2001]").unwrap_err();
        assert!(err.contains("[2000-01-01T TO 2001]"), "{err}");
        assert!(parse_instant("2000-01-01T12:00:00.5x", Bound::Start).is_err());
        assert!(parse_instant("2000-01-01T12:00:00.", Bound::Start).is_err());
        assert_eq!(
            parse_instant("2000-01-01T12:00:00.25Z", Bound::Start),
            Ok(at("2000-01-01T12:00:00"))
        );
    }

    const EXAMPLES: &[&str] = &[
        "2000",
        "1979-02",
        "2016-09-03T01:00",
        "1979-01-16T12:00:00Z",
        "2000-01-01T00:00:00.5+00:00",
        "[2016-09-02T23:00 TO 2016-09-02T23:30]",
        "[0 TO 9999]",
        "1898 to 1901",
        "to 2000",
    ];
    const SEPARATORS: &[&str] = &[
        "T", "t", "-", ":", "+", " TO ", " to ", "to", "Z", ".", "[", "]", "+00:00",
    ];

    proptest::proptest! {
        #[test]
        fn instants_never_panic_and_errors_name_the_text(
            text in crate::hostile::text(EXAMPLES, SEPARATORS),
        ) {
            let start = parse_instant(&text, Bound::Start);
            let end = parse_instant(&text, Bound::End);
            match (start, end) {
                (Ok(start), Ok(end)) => proptest::prop_assert!(start <= end, "{text:?}"),
                (Err(e), _) | (_, Err(e)) => {
                    proptest::prop_assert!(e.contains(&format!("{text:?}")), "{e}");
                }
            }
        }

        #[test]
        fn ranges_never_panic_and_errors_name_the_text(
            text in proptest::prop_oneof![
                crate::hostile::text(EXAMPLES, SEPARATORS),
                (
                    crate::hostile::text(EXAMPLES, SEPARATORS),
                    proptest::sample::select(&[" TO ", " to ", "to", "TO"][..]),
                    crate::hostile::text(EXAMPLES, SEPARATORS),
                    proptest::prelude::any::<bool>(),
                )
                    .prop_map(|(start, to, end, brackets)| if brackets {
                        format!("[{start}{to}{end}]")
                    } else {
                        format!("{start}{to}{end}")
                    }),
            ],
        ) {
            for parsed in [TimeRange::parse_record(&text), TimeRange::parse_query(&text)] {
                match parsed {
                    Ok(range) => proptest::prop_assert!(range.start <= range.end),
                    Err(e) => proptest::prop_assert!(e.contains(&format!("{text:?}")), "{e}"),
                }
            }
        }
    }

    #[test]
    fn select_modes() {
        let rec = (10, 20);
        assert!(SelectMode::Flexible.selects(rec, (15, 30)));
        assert!(!SelectMode::Strict.selects(rec, (15, 30)));
        assert!(SelectMode::Strict.selects(rec, (0, 30)));
        assert!(SelectMode::File.selects(rec, (12, 18)));
        assert!(!SelectMode::File.selects(rec, (5, 18)));
    }
}
