//! A file's time range, from its time coordinate and that coordinate's bounds.

use netcdf::{File, Variable};

use super::cf_time::{DateTime, TimeUnits};
use super::netcdf_read::{extrema, linked_variable, text_attribute};

/// The file's time range as `[YYYY-MM-DDThh:mm:ss TO YYYY-MM-DDThh:mm:ss]`: the earliest start and
/// the latest end, from the bounds (or climatology bounds) when the time coordinate has them and
/// from its values otherwise.
///
/// `None` when there is no time coordinate (fixed fields), it holds no valid value, or its units
/// or calendar cannot be read: a file with an odd time axis is still worth a record without time.
///
/// # Errors
/// A message naming the variable when the values cannot be read.
pub(crate) fn time_range(file: &File) -> Result<Option<String>, String> {
    let Some((time, units)) = time_coordinate(file) else {
        return Ok(None);
    };
    let mut range = None;
    for link in ["bounds", "climatology"] {
        if let Some(bounds) = linked_variable(file, &time, link) {
            range = range.or(extrema(&bounds)?);
        }
    }
    let Some((first, last)) = range.or(extrema(&time)?) else {
        return Ok(None);
    };
    let label = |value: f64| units.datetime(value).and_then(DateTime::label);
    Ok(label(first)
        .zip(label(last))
        .map(|(start, end)| format!("[{start} TO {end}]")))
}

/// The time coordinate and its units: a variable with `standard_name = "time"`, else one with
/// `axis = "T"`, else one named `time`, whose units are `<unit> since <date>`.
fn time_coordinate(file: &File) -> Option<(Variable<'_>, TimeUnits)> {
    let has = |v: &Variable, attribute: &str, value: &str| {
        text_attribute(v, attribute).is_some_and(|t| t.trim().eq_ignore_ascii_case(value))
    };
    let tests: [&dyn Fn(&Variable) -> bool; 3] = [
        &|v| has(v, "standard_name", "time"),
        &|v| has(v, "axis", "T"),
        &|v| v.name().eq_ignore_ascii_case("time"),
    ];
    tests.iter().find_map(|test| {
        file.variables().filter(|v| test(v)).find_map(|v| {
            let units = text_attribute(&v, "units")?;
            let calendar = text_attribute(&v, "calendar");
            let parsed = TimeUnits::parse(&units, calendar.as_deref()).ok()?;
            Some((v, parsed))
        })
    })
}
