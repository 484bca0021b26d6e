//! The time span of one demo file and its CF time axis in a given calendar.

use crate::crawl::cf_time::{Calendar, Date};

use super::file_spec::TimeAxis;

const DAY: i64 = 86_400;

/// How values relate to their time step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// Means over the step: values at mid-step, with `time_bnds`.
    Mean,
    /// Instantaneous values at the step's start, without bounds.
    Point,
}

/// The time span of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Period {
    /// No time axis (fx).
    Fixed,
    /// `count` monthly means from `year`-`month`.
    Months { year: i64, month: u32, count: u32 },
    /// Daily means of one month (its length depends on the calendar).
    DaysOfMonth { year: i64, month: u32 },
    /// `count` steps of `minutes` from `start` (year, month, day, hour).
    Steps {
        start: (i64, u32, u32, u32),
        minutes: i64,
        count: u32,
        sampling: Sampling,
    },
}

/// The units of a time axis: `days`, `hours` or `seconds` since a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeBase {
    /// The unit name.
    pub(crate) unit: &'static str,
    /// The reference date (midnight).
    pub(crate) since: (i64, u32, u32),
}

impl TimeBase {
    fn seconds_per_unit(self) -> f64 {
        match self.unit {
            "hours" => 3600.0,
            "seconds" => 1.0,
            _ => DAY as f64,
        }
    }

    fn units(self) -> String {
        let (y, m, d) = self.since;
        format!("{} since {y:04}-{m:02}-{d:02} 00:00:00", self.unit)
    }
}

fn date((year, month, day): (i64, u32, u32)) -> Date {
    Date { year, month, day }
}

impl Period {
    /// Start and end of each step, in seconds since the midnight of `since`.
    fn steps(self, calendar: Calendar, since: (i64, u32, u32)) -> Vec<(i64, i64)> {
        let origin = calendar.day_number(date(since));
        let at = |d: Date| (calendar.day_number(d) - origin) * DAY;
        match self {
            Period::Fixed => Vec::new(),
            Period::Months { year, month, count } => (0..i64::from(count))
                .map(|k| {
                    let index = year * 12 + i64::from(month) - 1 + k;
                    let first = |i: i64| date((i.div_euclid(12), i.rem_euclid(12) as u32 + 1, 1));
                    (at(first(index)), at(first(index + 1)))
                })
                .collect(),
            Period::DaysOfMonth { year, month } => {
                let start = at(date((year, month, 1)));
                (0..i64::from(calendar.month_length(year, month)))
                    .map(|k| (start + k * DAY, start + (k + 1) * DAY))
                    .collect()
            }
            Period::Steps {
                start: (y, m, d, hour),
                minutes,
                count,
                ..
            } => {
                let start = at(date((y, m, d))) + i64::from(hour) * 3600;
                (0..i64::from(count))
                    .map(|k| (start + k * minutes * 60, start + (k + 1) * minutes * 60))
                    .collect()
            }
        }
    }

    fn sampling(self) -> Sampling {
        match self {
            Period::Steps { sampling, .. } => sampling,
            _ => Sampling::Mean,
        }
    }

    /// The CF time axis of this period; `None` for [`Period::Fixed`].
    pub(crate) fn time_axis(
        self,
        calendar: Calendar,
        calendar_name: &str,
        base: TimeBase,
    ) -> Option<TimeAxis> {
        let steps = self.steps(calendar, base.since);
        if steps.is_empty() {
            return None;
        }
        let unit = base.seconds_per_unit();
        let scale = |seconds: i64| seconds as f64 / unit;
        let (values, bounds) = match self.sampling() {
            Sampling::Mean => (
                steps.iter().map(|&(s, e)| scale(s + (e - s) / 2)).collect(),
                Some(steps.iter().map(|&(s, e)| [scale(s), scale(e)]).collect()),
            ),
            Sampling::Point => (steps.iter().map(|&(s, _)| scale(s)).collect(), None),
        };
        Some(TimeAxis {
            units: base.units(),
            calendar: calendar_name.to_string(),
            values,
            bounds,
        })
    }

    /// The file name's time stamp in CMOR style (`YYYYMM-YYYYMM`, `YYYYMMDD-YYYYMMDD` or
    /// `YYYYMMDDhhmm-YYYYMMDDhhmm`, first and last step); `None` for [`Period::Fixed`].
    pub(crate) fn stamp(self, calendar: Calendar) -> Option<String> {
        let origin = (2000, 1, 1);
        let steps = self.steps(calendar, origin);
        let (first, last) = (steps.first()?.0, steps.last()?.0);
        let format = |seconds: i64| {
            let Date { year, month, day } =
                calendar.date(calendar.day_number(date(origin)) + seconds.div_euclid(DAY));
            let minutes = seconds.rem_euclid(DAY) / 60;
            match self {
                Period::Months { .. } => format!("{year:04}{month:02}"),
                Period::DaysOfMonth { .. } => format!("{year:04}{month:02}{day:02}"),
                _ => format!(
                    "{year:04}{month:02}{day:02}{:02}{:02}",
                    minutes / 60,
                    minutes % 60
                ),
            }
        };
        Some(format!("{}-{}", format(first), format(last)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAYS_SINCE_1850: TimeBase = TimeBase {
        unit: "days",
        since: (1850, 1, 1),
    };

    #[test]
    fn monthly_means_have_month_bounds() {
        let period = Period::Months {
            year: 1850,
            month: 1,
            count: 2,
        };
        let axis = period
            .time_axis(Calendar::NoLeap, "noleap", DAYS_SINCE_1850)
            .unwrap();
        assert_eq!(axis.units, "days since 1850-01-01 00:00:00");
        assert_eq!(axis.values, [15.5, 45.0]);
        assert_eq!(axis.bounds.unwrap(), [[0.0, 31.0], [31.0, 59.0]]);
        assert_eq!(period.stamp(Calendar::NoLeap).unwrap(), "185001-185002");
    }

    #[test]
    fn day360_february_has_30_days() {
        let period = Period::DaysOfMonth {
            year: 1990,
            month: 2,
        };
        let axis = period
            .time_axis(Calendar::Day360, "360_day", DAYS_SINCE_1850)
            .unwrap();
        assert_eq!(axis.values.len(), 30);
        assert_eq!(period.stamp(Calendar::Day360).unwrap(), "19900201-19900230");
    }

    #[test]
    fn instantaneous_steps_have_no_bounds() {
        let period = Period::Steps {
            start: (2016, 9, 2, 0),
            minutes: 30,
            count: 2,
            sampling: Sampling::Point,
        };
        let base = TimeBase {
            unit: "seconds",
            since: (1970, 1, 1),
        };
        let axis = period
            .time_axis(Calendar::Standard, "gregorian", base)
            .unwrap();
        assert_eq!(axis.values, [1_472_774_400.0, 1_472_776_200.0]);
        assert_eq!(axis.bounds, None);
        assert_eq!(
            period.stamp(Calendar::Standard).unwrap(),
            "201609020000-201609020030"
        );
        assert_eq!(
            Period::Fixed.time_axis(Calendar::Standard, "standard", base),
            None
        );
    }
}
