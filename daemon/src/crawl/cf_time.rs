//! CF time coordinates: `<unit> since <date>` units in the CF calendars, turned into date labels.
//!
//! chrono knows only the proleptic Gregorian calendar, so the calendar arithmetic is our own: each
//! calendar numbers its days, and a value is added to the reference date as seconds.

/// A CF calendar (the `calendar` attribute of a time coordinate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Calendar {
    /// `standard`/`gregorian`: Julian before 1582-10-15, Gregorian from then on.
    Standard,
    /// `proleptic_gregorian`: Gregorian rules for all dates.
    ProlepticGregorian,
    /// `julian`: a leap year every four years.
    Julian,
    /// `noleap`/`365_day`.
    NoLeap,
    /// `all_leap`/`366_day`.
    AllLeap,
    /// `360_day`: twelve months of 30 days.
    Day360,
}

/// Julian day number of 1582-10-15, the first Gregorian day of the standard calendar.
const GREGORIAN_START_JDN: i64 = 2_299_161;
const SECONDS_PER_DAY: i64 = 86_400;
/// Cumulative days before each month in a 365-day year.
const DAYS_BEFORE_MONTH: [u32; 13] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365];

impl Calendar {
    /// Parses a CF calendar name; a missing attribute means `standard`.
    pub(crate) fn parse(name: Option<&str>) -> Result<Self, String> {
        let name = name.unwrap_or("standard").trim().to_ascii_lowercase();
        match name.as_str() {
            "" | "standard" | "gregorian" => Ok(Calendar::Standard),
            "proleptic_gregorian" => Ok(Calendar::ProlepticGregorian),
            "julian" => Ok(Calendar::Julian),
            "noleap" | "365_day" => Ok(Calendar::NoLeap),
            "all_leap" | "366_day" => Ok(Calendar::AllLeap),
            "360_day" => Ok(Calendar::Day360),
            _ => Err(format!("unsupported calendar '{name}'")),
        }
    }

    fn is_leap(self, year: i64) -> bool {
        let julian = year.rem_euclid(4) == 0;
        let gregorian = julian && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0);
        match self {
            Calendar::Standard if year < 1582 => julian,
            Calendar::Standard | Calendar::ProlepticGregorian => gregorian,
            Calendar::Julian => julian,
            Calendar::AllLeap => true,
            Calendar::NoLeap | Calendar::Day360 => false,
        }
    }

    /// Days in `month` (1-12) of `year`.
    pub(crate) fn month_length(self, year: i64, month: u32) -> u32 {
        if self == Calendar::Day360 {
            return 30;
        }
        let index = month.clamp(1, 12) as usize;
        let length = DAYS_BEFORE_MONTH[index] - DAYS_BEFORE_MONTH[index - 1];
        if index == 2 && self.is_leap(year) {
            29
        } else {
            length
        }
    }

    /// Days in `year`.
    fn year_length(self, year: i64) -> u32 {
        (1..=12).map(|m| self.month_length(year, m)).sum()
    }

    /// A day count for `date`, consecutive within this calendar (its zero is calendar-specific).
    pub(crate) fn day_number(self, date: Date) -> i64 {
        let Date { year, month, day } = date;
        let before = |leap: bool| {
            let m = month.clamp(1, 12) as usize;
            i64::from(DAYS_BEFORE_MONTH[m - 1]) + i64::from(leap && m > 2)
        };
        match self {
            Calendar::Day360 => year * 360 + i64::from(month - 1) * 30 + i64::from(day) - 1,
            Calendar::NoLeap => year * 365 + before(false) + i64::from(day) - 1,
            Calendar::AllLeap => year * 366 + before(true) + i64::from(day) - 1,
            Calendar::ProlepticGregorian => gregorian_jdn(date),
            Calendar::Julian => julian_jdn(date),
            Calendar::Standard if (year, month, day) >= (1582, 10, 15) => gregorian_jdn(date),
            Calendar::Standard => julian_jdn(date),
        }
    }

    /// The date with day number `n` (the inverse of [`Calendar::day_number`]).
    pub(crate) fn date(self, n: i64) -> Date {
        match self {
            Calendar::Day360 => {
                let (year, rest) = (n.div_euclid(360), n.rem_euclid(360));
                Date {
                    year,
                    month: (rest / 30 + 1) as u32,
                    day: (rest % 30 + 1) as u32,
                }
            }
            Calendar::NoLeap => fixed_year_date(n, 365, false),
            Calendar::AllLeap => fixed_year_date(n, 366, true),
            Calendar::ProlepticGregorian => jdn_date(n, true),
            Calendar::Julian => jdn_date(n, false),
            Calendar::Standard => jdn_date(n, n >= GREGORIAN_START_JDN),
        }
    }
}

/// A calendar date; its validity depends on the calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Date {
    /// Astronomical year (year 0 exists).
    pub(crate) year: i64,
    /// 1-12.
    pub(crate) month: u32,
    /// 1-31.
    pub(crate) day: u32,
}

fn gregorian_jdn(date: Date) -> i64 {
    let (y, m) = shifted_year_month(date);
    i64::from(date.day) + (153 * m + 2) / 5 + 365 * y + y.div_euclid(4) - y.div_euclid(100)
        + y.div_euclid(400)
        - 32_045
}

fn julian_jdn(date: Date) -> i64 {
    let (y, m) = shifted_year_month(date);
    i64::from(date.day) + (153 * m + 2) / 5 + 365 * y + y.div_euclid(4) - 32_083
}

/// Year and month counted from March of year -4800, which puts the leap day at the year's end.
fn shifted_year_month(date: Date) -> (i64, i64) {
    let a = (14 - i64::from(date.month)) / 12;
    (date.year + 4800 - a, i64::from(date.month) + 12 * a - 3)
}

/// Richards' inverse of the Julian day number, for either the Gregorian or the Julian calendar.
fn jdn_date(jdn: i64, gregorian: bool) -> Date {
    let (century, c) = if gregorian {
        let a = jdn + 32_044;
        let b = (4 * a + 3).div_euclid(146_097);
        (b, a - (146_097 * b).div_euclid(4))
    } else {
        (0, jdn + 32_082)
    };
    let d = (4 * c + 3).div_euclid(1461);
    let e = c - (1461 * d).div_euclid(4);
    let m = (5 * e + 2) / 153;
    Date {
        year: 100 * century + d - 4800 + m / 10,
        month: (m + 3 - 12 * (m / 10)) as u32,
        day: (e - (153 * m + 2) / 5 + 1) as u32,
    }
}

fn fixed_year_date(n: i64, year_days: i64, leap: bool) -> Date {
    let (year, rest) = (n.div_euclid(year_days), n.rem_euclid(year_days) as u32);
    let starts = |m: usize| DAYS_BEFORE_MONTH[m - 1] + u32::from(leap && m > 2);
    let month = (1..=12).rev().find(|&m| starts(m) <= rest).unwrap_or(1);
    Date {
        year,
        month: month as u32,
        day: rest - starts(month) + 1,
    }
}

/// A date and time of day in some calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DateTime {
    /// The calendar date.
    pub(crate) date: Date,
    /// Seconds since midnight, 0..86400.
    pub(crate) seconds: i64,
}

impl DateTime {
    /// `YYYY-MM-DDThh:mm:ss`, or `None` for years outside 0..=9999 (a record cannot hold them).
    ///
    /// # Clamping
    /// Catalogue times are proleptic Gregorian, so a date that does not exist there (30 February
    /// in `360_day`, 29 February 1900 in `julian`) is clamped to the month's last day: the label
    /// keeps year and month, which is what a user searching by time means.
    pub(crate) fn label(self) -> Option<String> {
        let Date { year, month, day } = self.date;
        if !(0..=9999).contains(&year) {
            return None;
        }
        let day = day.min(Calendar::ProlepticGregorian.month_length(year, month));
        let (h, m, s) = (
            self.seconds / 3600,
            self.seconds / 60 % 60,
            self.seconds % 60,
        );
        Some(format!(
            "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}"
        ))
    }
}

/// The unit of a CF time value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// A fixed number of seconds.
    Seconds(i64),
    /// Calendar months (CDO writes these): whole months move the date, a fraction is a share of
    /// the month reached.
    Months,
    /// Calendar years, like `Months`.
    Years,
}

/// Parsed `units` and `calendar` of a time coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeUnits {
    unit: Unit,
    /// The reference date, in UTC.
    reference: DateTime,
    calendar: Calendar,
}

impl TimeUnits {
    /// Parses `"<unit> since <date>[ <time>][ <zone>]"` in `calendar`.
    ///
    /// # Errors
    /// A message naming the part of `units` or the calendar that cannot be read.
    pub(crate) fn parse(units: &str, calendar: Option<&str>) -> Result<Self, String> {
        let calendar = Calendar::parse(calendar)?;
        let lower = units.trim().to_ascii_lowercase();
        let Some((unit, reference)) = lower.split_once(" since ") else {
            return Err(format!(
                "time units '{units}' are not '<unit> since <date>'"
            ));
        };
        let unit =
            parse_unit(unit.trim()).ok_or_else(|| format!("unknown time unit in '{units}'"))?;
        let (local, offset) =
            parse_reference(reference).ok_or_else(|| format!("bad reference date in '{units}'"))?;
        let reference = shift(local, -offset, calendar);
        Ok(TimeUnits {
            unit,
            reference,
            calendar,
        })
    }

    /// The date and time `value` units after the reference date; `None` when out of range.
    ///
    /// Offsets beyond [`MAX_OFFSET_YEARS`] are out of range whatever the unit, which keeps
    /// every day and second count far inside `i64` (a file's values are not to be trusted).
    pub(crate) fn datetime(&self, value: f64) -> Option<DateTime> {
        let (years, seconds) = match self.unit {
            Unit::Seconds(unit) => {
                let seconds = value * unit as f64;
                (seconds / (366 * SECONDS_PER_DAY) as f64, seconds)
            }
            Unit::Months => (value / 12.0, 0.0),
            Unit::Years => (value, 0.0),
        };
        if !value.is_finite() || years.abs() > MAX_OFFSET_YEARS {
            return None;
        }
        match self.unit {
            Unit::Seconds(_) => Some(shift(self.reference, seconds.round() as i64, self.calendar)),
            Unit::Months => Some(self.add_months(value, 1)),
            Unit::Years => Some(self.add_months(value, 12)),
        }
    }

    /// Like [`TimeUnits::datetime`], to the nanosecond as xarray decodes times: the offset
    /// in nanoseconds is computed in floating point and truncated toward zero (so a value a
    /// hair below a whole day stays on the day before). The date-time is of the whole second,
    /// the nanoseconds past it come second.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the offset is checked to be within MAX_OFFSET_YEARS, far inside i128"
    )]
    pub(crate) fn instant(&self, value: f64) -> Option<(DateTime, u32)> {
        let Unit::Seconds(unit) = self.unit else {
            return self.datetime(value).map(|at| (at, 0));
        };
        self.datetime(value)?;
        let nanos = (value * (unit as f64 * 1e9)) as i128;
        let seconds = i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?;
        let past = u32::try_from(nanos.rem_euclid(1_000_000_000)).ok()?;
        Some((shift(self.reference, seconds, self.calendar), past))
    }

    fn add_months(&self, value: f64, months_per_unit: i64) -> DateTime {
        let whole = value.floor();
        let Date { year, month, day } = self.reference.date;
        let index = year * 12 + i64::from(month) - 1 + whole as i64 * months_per_unit;
        let (year, month) = (index.div_euclid(12), index.rem_euclid(12) as u32 + 1);
        let day = day.min(self.calendar.month_length(year, month));
        let start = DateTime {
            date: Date { year, month, day },
            seconds: self.reference.seconds,
        };
        let span_days = if months_per_unit == 12 {
            self.calendar.year_length(year)
        } else {
            self.calendar.month_length(year, month)
        };
        let extra = ((value - whole) * f64::from(span_days) * SECONDS_PER_DAY as f64).round();
        shift(start, extra as i64, self.calendar)
    }
}

/// `at` moved by `seconds` in `calendar`.
fn shift(at: DateTime, seconds: i64, calendar: Calendar) -> DateTime {
    let total = calendar.day_number(at.date) * SECONDS_PER_DAY + at.seconds + seconds;
    DateTime {
        date: calendar.date(total.div_euclid(SECONDS_PER_DAY)),
        seconds: total.rem_euclid(SECONDS_PER_DAY),
    }
}

fn parse_unit(unit: &str) -> Option<Unit> {
    let seconds = match unit {
        "seconds" | "second" | "secs" | "sec" | "s" => 1,
        "minutes" | "minute" | "mins" | "min" => 60,
        "hours" | "hour" | "hrs" | "hr" | "h" => 3600,
        "days" | "day" | "d" => SECONDS_PER_DAY,
        "months" | "month" => return Some(Unit::Months),
        "years" | "year" | "yr" => return Some(Unit::Years),
        _ => return None,
    };
    Some(Unit::Seconds(seconds))
}

/// Parses `Y-M-D[( |T)h:m[:s[.f]]][ ][zone]` into a local date-time and the zone's offset in
/// seconds east of UTC.
fn parse_reference(text: &str) -> Option<(DateTime, i64)> {
    let text = text.trim();
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let date_end = body.find([' ', 't']).unwrap_or(body.len());
    let date = parse_date(&body[..date_end], negative)?;
    let rest = body[date_end..].trim_start_matches([' ', 't']);
    let clock_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let seconds = parse_clock(&rest[..clock_end])?;
    let offset = parse_zone(rest[clock_end..].trim())?;
    Some((DateTime { date, seconds }, offset))
}

/// Reference years beyond this are nonsense and would overflow the day arithmetic.
const MAX_REFERENCE_YEAR: i64 = 1_000_000;
/// Time values further than this from the reference date are out of range.
const MAX_OFFSET_YEARS: f64 = 1_000_000.0;

fn parse_date(text: &str, negative: bool) -> Option<Date> {
    let mut fields = text.split('-');
    let year: i64 = fields.next()?.parse().ok()?;
    let month: u32 = fields.next().map_or(Some(1), |f| f.parse().ok())?;
    let day: u32 = fields.next().map_or(Some(1), |f| f.parse().ok())?;
    let valid = fields.next().is_none()
        && year <= MAX_REFERENCE_YEAR
        && (1..=12).contains(&month)
        && (1..=31).contains(&day);
    valid.then_some(Date {
        year: if negative { -year } else { year },
        month,
        day,
    })
}

/// `h[:m[:s[.f]]]`, digits only (the caller cut the clock at the first other character), as
/// seconds into the day.
fn parse_clock(text: &str) -> Option<i64> {
    if text.is_empty() {
        return Some(0);
    }
    let mut fields = text.split(':');
    let hours: i64 = fields.next()?.parse().ok()?;
    let minutes: i64 = fields.next().map_or(Some(0), |f| f.parse().ok())?;
    let seconds: f64 = fields.next().map_or(Some(0.0), |f| f.parse().ok())?;
    let valid = fields.next().is_none()
        && (0..24).contains(&hours)
        && (0..60).contains(&minutes)
        && (0.0..61.0).contains(&seconds);
    valid.then(|| hours * 3600 + minutes * 60 + seconds.round() as i64)
}

fn parse_zone(text: &str) -> Option<i64> {
    match text {
        "" | "z" | "utc" | "gmt" => return Some(0),
        _ => {}
    }
    let (sign, body) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    if !body.bytes().all(|b| b.is_ascii_digit() || b == b':') {
        return None;
    }
    // ASCII from here on, so byte positions are character boundaries.
    let (hours, minutes) = match body.split_once(':') {
        Some((h, m)) => (h, m),
        None if body.len() > 2 => body.split_at(2),
        None => (body, "0"),
    };
    let hours: i64 = hours.parse().ok()?;
    let minutes: i64 = minutes.parse().ok()?;
    let valid = (0..=24).contains(&hours) && (0..60).contains(&minutes);
    valid.then(|| sign * (hours * 3600 + minutes * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(units: &str, calendar: &str, value: f64) -> String {
        let units = TimeUnits::parse(units, Some(calendar)).unwrap();
        units.datetime(value).unwrap().label().unwrap()
    }

    #[test]
    fn standard_calendar_switches_from_julian_to_gregorian_in_1582() {
        assert_eq!(
            label("days since 1850-01-01", "standard", 59.0),
            "1850-03-01T00:00:00"
        );
        assert_eq!(
            label("days since 1582-10-04", "gregorian", 1.0),
            "1582-10-15T00:00:00"
        );
        assert_eq!(
            label("days since 1900-02-28", "standard", 1.0),
            "1900-03-01T00:00:00"
        );
        // 1500 is a Julian leap year; its 29 February is labelled as the 28th.
        assert_eq!(
            label("days since 1500-02-28", "standard", 1.0),
            "1500-02-28T00:00:00"
        );
        assert_eq!(
            label("days since 1500-02-28", "standard", 2.0),
            "1500-03-01T00:00:00"
        );
    }

    #[test]
    fn proleptic_gregorian_has_no_switch() {
        assert_eq!(
            label("days since 1582-10-04", "proleptic_gregorian", 1.0),
            "1582-10-05T00:00:00"
        );
        assert_eq!(
            label("days since 2000-02-28", "proleptic_gregorian", 1.0),
            "2000-02-29T00:00:00"
        );
        assert_eq!(
            label("days since 1970-01-01", "proleptic_gregorian", 19_723.5),
            "2024-01-01T12:00:00"
        );
    }

    #[test]
    fn julian_has_a_leap_day_every_fourth_year() {
        assert_eq!(
            label("days since 1900-02-28", "julian", 2.0),
            "1900-03-01T00:00:00"
        );
        // 1900-02-29 exists in the Julian calendar only: its label is clamped.
        assert_eq!(
            label("days since 1900-02-28", "julian", 1.0),
            "1900-02-28T00:00:00"
        );
        assert_eq!(
            label("days since 2000-01-01", "julian", 366.0),
            "2001-01-01T00:00:00"
        );
    }

    #[test]
    fn noleap_years_have_365_days() {
        assert_eq!(
            label("days since 2000-02-28", "noleap", 1.0),
            "2000-03-01T00:00:00"
        );
        assert_eq!(
            label("days since 2001-01-01", "365_day", 365.0),
            "2002-01-01T00:00:00"
        );
        assert_eq!(
            label("days since 0001-01-01", "noleap", 365.0 * 2000.0),
            "2001-01-01T00:00:00"
        );
    }

    #[test]
    fn all_leap_years_have_366_days() {
        assert_eq!(
            label("days since 2001-02-28", "all_leap", 2.0),
            "2001-03-01T00:00:00"
        );
        assert_eq!(
            label("days since 2001-02-28", "366_day", 1.0),
            "2001-02-28T00:00:00"
        );
        assert_eq!(
            label("days since 2001-01-01", "all_leap", 366.0),
            "2002-01-01T00:00:00"
        );
    }

    #[test]
    fn day360_months_have_30_days_and_clamp_in_february() {
        assert_eq!(
            label("days since 2000-01-01", "360_day", 30.0),
            "2000-02-01T00:00:00"
        );
        assert_eq!(
            label("days since 2000-01-01", "360_day", 59.0),
            "2000-02-29T00:00:00"
        );
        assert_eq!(
            label("days since 2001-01-01", "360_day", 59.5),
            "2001-02-28T12:00:00"
        );
        assert_eq!(
            label("days since 2000-01-01", "360_day", 360.0),
            "2001-01-01T00:00:00"
        );
        assert_eq!(
            label("days since 2000-01-01", "360_day", -1.0),
            "1999-12-30T00:00:00"
        );
    }

    #[test]
    fn units_and_reference_forms() {
        assert_eq!(
            label("seconds since 1970-01-01", "gregorian", 1_472_857_200.0),
            "2016-09-02T23:00:00"
        );
        assert_eq!(
            label("minutes since 2000-01-01 06:00", "standard", 90.0),
            "2000-01-01T07:30:00"
        );
        assert_eq!(
            label("hours since 1949-12-01T00:00:00+00:00", "standard", 1.5),
            "1949-12-01T01:30:00"
        );
        assert_eq!(
            label(
                "days since 1949-12-01 00:00:00.0 UTC",
                "standard",
                20_851.062_5
            ),
            "2007-01-02T01:30:00"
        );
        assert_eq!(
            label("hours since 2000-01-01 00:00:00 +01:00", "standard", 0.0),
            "1999-12-31T23:00:00"
        );
        assert_eq!(
            label("Days since 1850-1-1", "standard", 0.0),
            "1850-01-01T00:00:00"
        );
    }

    #[test]
    fn months_and_years_are_calendar_steps() {
        assert_eq!(
            label("months since 1955-01-01 00:00:00", "standard", 684.0),
            "2012-01-01T00:00:00"
        );
        assert_eq!(
            label("months since 1955-01-01", "standard", 684.5),
            "2012-01-16T12:00:00"
        );
        assert_eq!(
            label("months since 2001-01-31", "noleap", 1.0),
            "2001-02-28T00:00:00"
        );
        assert_eq!(
            label("years since 2000-01-01", "noleap", 2.0),
            "2002-01-01T00:00:00"
        );
    }

    #[test]
    fn day_numbers_round_trip_in_every_calendar() {
        let calendars = [
            Calendar::Standard,
            Calendar::ProlepticGregorian,
            Calendar::Julian,
            Calendar::NoLeap,
            Calendar::AllLeap,
            Calendar::Day360,
        ];
        for calendar in calendars {
            let first = calendar.day_number(Date {
                year: -10,
                month: 1,
                day: 1,
            });
            for n in (first..first + 800_000).step_by(7) {
                assert_eq!(calendar.day_number(calendar.date(n)), n, "{calendar:?} {n}");
            }
        }
    }

    #[test]
    fn bad_units_and_calendars_are_rejected() {
        assert!(TimeUnits::parse("days after 2000-01-01", None).is_err());
        assert!(TimeUnits::parse("furlongs since 2000-01-01", None).is_err());
        assert!(TimeUnits::parse("days since 2000-13-01", None).is_err());
        assert!(TimeUnits::parse("days since 9000000000000000000-01-01", None).is_err());
        assert!(TimeUnits::parse("days since 2000-01-01", Some("martian")).is_err());
        let units = TimeUnits::parse("days since 2000-01-01", None).unwrap();
        assert_eq!(units.datetime(f64::NAN), None);
        assert_eq!(units.datetime(1e9).and_then(DateTime::label), None);
        assert!(TimeUnits::parse("days since 2000-01-01 +\u{65e5}", None).is_err());
        assert!(TimeUnits::parse("days since 2000-01-01 -1:-1:-inf", None).is_err());
        let years = TimeUnits::parse("years since 2000-01-01", None).unwrap();
        assert_eq!(years.datetime(1e13), None, "a day count beyond i64");
    }

    const UNITS: &[&str] = &[
        "days since 1850-01-01",
        "hours since 1949-12-01T00:00:00+00:00",
        "minutes since 2000-01-01 06:00",
        "days since 1949-12-01 00:00:00.0 UTC",
        "hours since 2000-01-01 00:00:00 +0100",
        "months since -4712-01-01",
        "years since 0001-01-01",
    ];
    const SEPARATORS: &[&str] = &[" since ", "-", ":", "T", " ", "+", ".", "UTC"];
    const CALENDARS: &[&str] = &[
        "standard",
        "360_day",
        "noleap",
        "all_leap",
        "julian",
        "proleptic_gregorian",
    ];

    proptest::proptest! {
        #[test]
        fn hostile_units_and_values_give_a_date_or_nothing(
            units in crate::hostile::text(UNITS, SEPARATORS),
            calendar in crate::hostile::text(CALENDARS, &["_", "day"]),
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<f64>(),
                    -1e15..1e15f64,
                    -1e6..1e6f64,
                ],
                1..8,
            ),
        ) {
            match TimeUnits::parse(&units, Some(&calendar)) {
                Ok(parsed) => {
                    for value in values {
                        if let Some(label) = parsed.datetime(value).and_then(DateTime::label) {
                            proptest::prop_assert!(
                                crate::catalog::time::TimeRange::parse_record(&format!("[{label} TO {label}]"))
                                    .is_ok(),
                                "{units:?} {value}: {label}"
                            );
                        }
                    }
                }
                Err(e) => proptest::prop_assert!(
                    e.contains(&units) || e.contains(&calendar.trim().to_ascii_lowercase()),
                    "{e}"
                ),
            }
        }
    }

    #[test]
    fn instants_are_truncated_to_the_nanosecond_as_xarray_decodes_them() {
        let units = TimeUnits::parse("days since 2000-01-01", None).unwrap();
        // A day summed from 24 hours in floating point falls a hair short of midnight.
        let summed: f64 = (0..24).map(|_| 1.0 / 24.0).sum();
        assert!(summed < 1.0);
        let (at, nanos) = units.instant(summed).unwrap();
        assert_eq!(
            at.date,
            Date {
                year: 2000,
                month: 1,
                day: 1
            }
        );
        assert_eq!((at.seconds, nanos), (86_399, 999_999_999));
        let (at, nanos) = units.instant(1.5).unwrap();
        assert_eq!((at.date.day, at.seconds, nanos), (2, 43_200, 0));
        // Before the reference: toward zero, so -0.5 s is half a second before midnight.
        let seconds = TimeUnits::parse("seconds since 2000-01-01", None).unwrap();
        let (at, nanos) = seconds.instant(-0.5).unwrap();
        assert_eq!((at.date.day, at.seconds, nanos), (31, 86_399, 500_000_000));
        assert!(units.instant(f64::NAN).is_none());
    }
}
