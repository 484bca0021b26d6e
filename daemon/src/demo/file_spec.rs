//! A small builder for CF-compliant NetCDF files: one data variable on a grid, with optional
//! pressure levels, time axis and scalar height.

use std::path::Path;

use netcdf::{Extent, Extents, FileMut, Options};

use super::grid::{Grid, missing, put};

/// The fill value CMOR writes for missing data.
const FILL: f32 = 1e20;

/// A global attribute value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// Text.
    Text(String),
    /// A 32-bit integer.
    Int(i32),
    /// A double.
    Double(f64),
}

/// The on-disk format of a demo file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Format {
    /// NetCDF classic (CDF-1), as most CMIP5 and CORDEX files.
    #[default]
    Classic,
    /// NetCDF-4 (HDF5) restricted to the classic data model, as CMOR writes CMIP6.
    Netcdf4Classic,
}

/// The data variable of a demo file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VariableSpec {
    /// Variable name, e.g. `tas`.
    pub name: String,
    /// CF standard name.
    pub standard_name: String,
    /// Human-readable name.
    pub long_name: String,
    /// UDUNITS units.
    pub units: String,
    /// CF `cell_methods`, if any.
    pub cell_methods: Option<String>,
    /// Mean of the synthetic values.
    pub base: f64,
    /// Spread of the synthetic values around `base`.
    pub amplitude: f64,
}

/// A CF time axis, written as `time` (unlimited) with `time_bnds` when bounds are given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TimeAxis {
    /// `<unit> since <date>`.
    pub units: String,
    /// CF calendar name.
    pub calendar: String,
    /// One value per time step.
    pub values: Vec<f64>,
    /// Cell bounds per step, for time means; `None` for instantaneous values.
    pub bounds: Option<Vec<[f64; 2]>>,
}

/// Everything [`write_netcdf`] needs for one file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FileSpec {
    /// On-disk format.
    pub format: Format,
    /// Global attributes in writing order.
    pub global_attributes: Vec<(String, Value)>,
    /// The data variable.
    pub variable: VariableSpec,
    /// The horizontal grid.
    pub grid: Grid,
    /// Pressure levels in Pa (a `plev` axis); empty for none.
    pub levels: Vec<f64>,
    /// Height above the surface in m of a scalar `height` coordinate (2 m for `tas`).
    pub height: Option<f64>,
    /// The time axis; `None` for fixed fields (fx).
    pub time: Option<TimeAxis>,
}

/// Writes `spec` to `path`, replacing any file there. The bytes depend only on `spec` and the
/// NetCDF library version: values are synthetic but deterministic, and nothing records the
/// time of writing.
///
/// # Errors
/// A message naming `path` when the file cannot be written.
pub(crate) fn write_netcdf(path: &Path, spec: &FileSpec) -> Result<(), String> {
    write(path, spec).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write(path: &Path, spec: &FileSpec) -> netcdf::Result<()> {
    let options = match spec.format {
        Format::Classic => Options::default(),
        Format::Netcdf4Classic => Options::NETCDF4 | Options::CLASSIC,
    };
    let mut file = netcdf::create_with(path, options)?;
    for (name, value) in &spec.global_attributes {
        match value {
            Value::Text(text) => file.add_attribute(name, text.as_str())?,
            Value::Int(n) => file.add_attribute(name, *n)?,
            Value::Double(x) => file.add_attribute(name, *x)?,
        };
    }
    define(&mut file, spec)?;
    file.enddef()?;
    write_coordinates(&mut file, spec)?;
    write_data(&mut file, spec)?;
    file.close()
}

/// Defines dimensions and variables; classic files take no data before `enddef`.
fn define(file: &mut FileMut, spec: &FileSpec) -> netcdf::Result<()> {
    if let Some(time) = &spec.time {
        file.add_unlimited_dimension("time")?;
        define_time(file, time)?;
    }
    let time_bounds = spec.time.as_ref().is_some_and(|t| t.bounds.is_some());
    if time_bounds || spec.grid.needs_bnds() {
        file.add_dimension("bnds", 2)?;
    }
    if time_bounds {
        file.add_variable::<f64>("time_bnds", &["time", "bnds"])?;
    }
    if !spec.levels.is_empty() {
        file.add_dimension("plev", spec.levels.len())?;
        let mut plev = file.add_variable::<f64>("plev", &["plev"])?;
        for (name, value) in [
            ("standard_name", "air_pressure"),
            ("long_name", "pressure"),
            ("units", "Pa"),
        ] {
            plev.put_attribute(name, value)?;
        }
        plev.put_attribute("positive", "down")?;
        plev.put_attribute("axis", "Z")?;
    }
    spec.grid.define(file)?;
    if spec.height.is_some() {
        let mut variable = file.add_variable::<f64>("height", &[])?;
        for (name, value) in [
            ("standard_name", "height"),
            ("long_name", "height"),
            ("units", "m"),
        ] {
            variable.put_attribute(name, value)?;
        }
        variable.put_attribute("positive", "up")?;
        variable.put_attribute("axis", "Z")?;
    }
    define_data(file, spec)
}

fn define_time(file: &mut FileMut, time: &TimeAxis) -> netcdf::Result<()> {
    let mut variable = file.add_variable::<f64>("time", &["time"])?;
    variable.put_attribute("standard_name", "time")?;
    variable.put_attribute("long_name", "time")?;
    if time.bounds.is_some() {
        variable.put_attribute("bounds", "time_bnds")?;
    }
    variable.put_attribute("units", time.units.as_str())?;
    variable.put_attribute("calendar", time.calendar.as_str())?;
    variable.put_attribute("axis", "T")?;
    Ok(())
}

fn data_dimensions(spec: &FileSpec) -> Vec<&'static str> {
    let mut dims = Vec::new();
    if spec.time.is_some() {
        dims.push("time");
    }
    if !spec.levels.is_empty() {
        dims.push("plev");
    }
    dims.extend(spec.grid.dimensions().map(|(name, _)| name));
    dims
}

fn define_data(file: &mut FileMut, spec: &FileSpec) -> netcdf::Result<()> {
    let meta = &spec.variable;
    let mut variable = file.add_variable::<f32>(&meta.name, &data_dimensions(spec))?;
    variable.put_attribute("standard_name", meta.standard_name.as_str())?;
    variable.put_attribute("long_name", meta.long_name.as_str())?;
    variable.put_attribute("units", meta.units.as_str())?;
    variable.put_attribute("_FillValue", FILL)?;
    variable.put_attribute("missing_value", FILL)?;
    if let Some(methods) = &meta.cell_methods {
        variable.put_attribute("cell_methods", methods.as_str())?;
    }
    let coordinates: Vec<&str> = spec
        .height
        .map(|_| "height")
        .into_iter()
        .chain(spec.grid.auxiliary_coordinates())
        .collect();
    if !coordinates.is_empty() {
        variable.put_attribute("coordinates", coordinates.join(" ").as_str())?;
    }
    if let Some(mapping) = spec.grid.grid_mapping() {
        variable.put_attribute("grid_mapping", mapping)?;
    }
    Ok(())
}

fn write_coordinates(file: &mut FileMut, spec: &FileSpec) -> netcdf::Result<()> {
    if let Some(time) = &spec.time {
        let steps = time.values.len();
        put_extent(file, "time", &time.values, &[steps])?;
        if let Some(bounds) = &time.bounds {
            put_extent(file, "time_bnds", bounds.as_flattened(), &[steps, 2])?;
        }
    }
    if !spec.levels.is_empty() {
        put(file, "plev", &spec.levels)?;
    }
    if let Some(height) = spec.height {
        put(file, "height", &[height])?;
    }
    spec.grid.write(file)
}

/// Synthetic values: `base` plus a smooth pattern of latitude, longitude, step and level, so
/// maps and time series look plausible.
fn write_data(file: &mut FileMut, spec: &FileSpec) -> netcdf::Result<()> {
    let centres = spec.grid.centres();
    let steps = spec.time.as_ref().map_or(1, |t| t.values.len());
    let levels = spec.levels.len().max(1);
    let meta = &spec.variable;
    let mut values = Vec::with_capacity(steps * levels * centres.len());
    for step in 0..steps {
        let season = (step as f64 * std::f64::consts::TAU / 12.0).sin();
        for level in 0..levels {
            for &(lat, lon) in &centres {
                let pattern = lat.to_radians().cos() - 0.5
                    + 0.2 * (lon.to_radians() * 2.0).sin()
                    + 0.1 * season;
                values.push(
                    (meta.base + meta.amplitude * pattern * (1.0 - 0.2 * level as f64)) as f32,
                );
            }
        }
    }
    let mut shape = Vec::new();
    if spec.time.is_some() {
        shape.push(steps);
    }
    if !spec.levels.is_empty() {
        shape.push(levels);
    }
    shape.extend(spec.grid.dimensions().map(|(_, len)| len));
    let mut variable = file
        .variable_mut(&meta.name)
        .ok_or_else(|| missing(&meta.name))?;
    variable.put_values(&values, whole(&shape))
}

/// Writes `values` over `shape`; explicit extents because `..` on an unlimited dimension that
/// holds nothing yet selects nothing.
fn put_extent(
    file: &mut FileMut,
    name: &str,
    values: &[f64],
    shape: &[usize],
) -> netcdf::Result<()> {
    let mut variable = file.variable_mut(name).ok_or_else(|| missing(name))?;
    variable.put_values(values, whole(shape))
}

fn whole(shape: &[usize]) -> Extents {
    Extents::from(
        shape
            .iter()
            .map(|&len| Extent::from(0..len))
            .collect::<Vec<_>>(),
    )
}
