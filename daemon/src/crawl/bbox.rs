//! A file's bounding box, from its latitude and longitude coordinates (1-D or 2-D).

use netcdf::{File, Variable};

use super::netcdf_read::{extrema, linked_variable, text_attribute};

/// Which horizontal coordinate to look for.
#[derive(Debug, Clone, Copy)]
enum Axis {
    Latitude,
    Longitude,
}

impl Axis {
    fn standard_name(self) -> &'static str {
        match self {
            Axis::Latitude => "latitude",
            Axis::Longitude => "longitude",
        }
    }

    /// The spellings of `degrees_north`/`degrees_east` that CF (via UDUNITS) accepts.
    fn units(self) -> &'static [&'static str] {
        match self {
            Axis::Latitude => &[
                "degrees_north",
                "degree_north",
                "degrees_n",
                "degree_n",
                "degreesn",
                "degreen",
            ],
            Axis::Longitude => &[
                "degrees_east",
                "degree_east",
                "degrees_e",
                "degree_e",
                "degreese",
                "degreee",
            ],
        }
    }

    fn names(self) -> &'static [&'static str] {
        match self {
            Axis::Latitude => &["lat", "latitude", "nav_lat"],
            Axis::Longitude => &["lon", "longitude", "nav_lon"],
        }
    }
}

/// `[min_lon, min_lat, max_lon, max_lat]` within `[-180, -90, 180, 90]`, from the coordinates'
/// bounds when they have them and from their values otherwise.
///
/// Longitudes in 0..360 are moved to -180..180. A box that then crosses the antimeridian (such as
/// a global 0..360 grid) cannot be written as `min_lon <= max_lon` and becomes `-180..180`. Values
/// are rounded outwards to 1e-6 degrees, hiding single-precision noise.
///
/// `None` when the file has no latitude or longitude coordinate or they hold no valid value.
///
/// # Errors
/// A message naming the variable when the values cannot be read.
pub(crate) fn bbox(file: &File) -> Result<Option<[f64; 4]>, String> {
    let (Some(lat), Some(lon)) = (
        coordinate(file, Axis::Latitude),
        coordinate(file, Axis::Longitude),
    ) else {
        return Ok(None);
    };
    let (Some((south, north)), Some((west, east))) = (extent(file, &lat)?, extent(file, &lon)?)
    else {
        return Ok(None);
    };
    let (west, east) = longitude_interval(west, east);
    Ok(Some([
        round_outward(west, f64::floor).clamp(-180.0, 180.0),
        round_outward(south, f64::floor).clamp(-90.0, 90.0),
        round_outward(east, f64::ceil).clamp(-180.0, 180.0),
        round_outward(north, f64::ceil).clamp(-90.0, 90.0),
    ]))
}

/// `value` rounded with `round` (floor or ceil) to 1e-6 degrees; a value within 1e-9 degrees of
/// a step counts as on it, so arithmetic noise does not widen the box.
fn round_outward(value: f64, round: fn(f64) -> f64) -> f64 {
    let micro = value * 1e6;
    let nearest = micro.round();
    let rounded = if (micro - nearest).abs() < 1e-3 {
        nearest
    } else {
        round(micro)
    };
    rounded / 1e6
}

/// The coordinate variable for `axis`: by `standard_name`, else by units, else by name.
fn coordinate(file: &File, axis: Axis) -> Option<Variable<'_>> {
    let lower = |v: &Variable, attribute: &str| {
        text_attribute(v, attribute).map(|t| t.trim().to_ascii_lowercase())
    };
    let tests: [&dyn Fn(&Variable) -> bool; 3] = [
        &|v| lower(v, "standard_name").as_deref() == Some(axis.standard_name()),
        &|v| lower(v, "units").is_some_and(|u| axis.units().contains(&u.as_str())),
        &|v| {
            axis.names()
                .contains(&v.name().to_ascii_lowercase().as_str())
        },
    ];
    tests
        .iter()
        .find_map(|test| file.variables().find(|v| test(v)))
}

/// The range of the coordinate's bounds, or of its values when it has no (valid) bounds.
fn extent(file: &File, coordinate: &Variable) -> Result<Option<(f64, f64)>, String> {
    if let Some(bounds) = linked_variable(file, coordinate, "bounds")
        && let Some(range) = extrema(&bounds)?
    {
        return Ok(Some(range));
    }
    extrema(coordinate)
}

/// Moves a longitude interval into -180..180; intervals of a full turn or crossing the
/// antimeridian become the whole circle.
pub(crate) fn longitude_interval(west: f64, east: f64) -> (f64, f64) {
    if east - west >= 360.0 {
        return (-180.0, 180.0);
    }
    let turns = ((west + 180.0) / 360.0).floor() * 360.0;
    let (west, east) = (west - turns, east - turns);
    if east > 180.0 {
        (-180.0, 180.0)
    } else {
        (west, east)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longitudes_move_into_minus_180_to_180() {
        assert_eq!(longitude_interval(-10.0, 40.0), (-10.0, 40.0));
        assert_eq!(longitude_interval(190.0, 250.0), (-170.0, -110.0));
        assert_eq!(longitude_interval(180.0, 200.0), (-180.0, -160.0));
        assert_eq!(longitude_interval(-190.0, -170.0), (-180.0, 180.0));
        assert_eq!(longitude_interval(400.0, 410.0), (40.0, 50.0));
    }

    #[test]
    fn rounding_is_outward_but_ignores_noise() {
        assert_eq!(round_outward(44.594_001_770_019_53, f64::floor), 44.594_001);
        assert_eq!(round_outward(44.594_001_770_019_53, f64::ceil), 44.594_002);
        assert_eq!(round_outward(-24.640_000_000_000_01, f64::floor), -24.64);
    }

    #[test]
    fn full_turns_and_antimeridian_crossings_become_global() {
        assert_eq!(longitude_interval(0.0, 360.0), (-180.0, 180.0));
        assert_eq!(longitude_interval(-1.25, 358.75), (-180.0, 180.0));
        assert_eq!(longitude_interval(22.5, 337.5), (-180.0, 180.0));
        assert_eq!(longitude_interval(170.0, 190.0), (-180.0, 180.0));
        assert_eq!(longitude_interval(-180.0, 180.0), (-180.0, 180.0));
    }
}
