//! What the crawler reads from a NetCDF file: attributes as text, the data variables, and the
//! smallest and largest value of a coordinate, read in slices so huge grids stay cheap.

use std::collections::HashSet;
use std::path::Path;

use netcdf::types::NcVariableType;
use netcdf::{AttributeValue, Extent, Extents, File, Variable};

use super::attributes::Attributes;

/// NetCDF's `NC_ENOTNC`: the file has no NetCDF or HDF5 signature.
const NC_ENOTNC: i32 = -51;

/// Values read per slice when scanning a coordinate.
const SLICE_VALUES: usize = 1 << 20;

/// How the error of [`open`] starts for a file that is not NetCDF.
pub(crate) const NOT_NETCDF: &str = "not a NetCDF file";

/// Opens `path` read-only.
///
/// The HDF5 library below prints a report on standard error for every error it meets, also
/// for the ones the NetCDF library expects and handles (probing for an attribute that is not
/// there). Those reports are turned off for the calling thread first: the daemon reports
/// what fails itself, naming the file.
///
/// # Errors
/// [`NOT_NETCDF`]`: ...` when the format is unknown, `cannot open NetCDF file: ...` otherwise.
pub(crate) fn open(path: &Path) -> Result<File, String> {
    hdf5_metno::silence_errors(true);
    netcdf::open(path).map_err(|e| match e {
        netcdf::Error::Netcdf(NC_ENOTNC) => format!("{NOT_NETCDF}: {e}"),
        _ => format!("cannot open NetCDF file: {e}"),
    })
}

/// All global attributes that have a text or single-number value.
pub(crate) fn global_attributes(file: &File) -> Attributes {
    file.attributes()
        .filter_map(|attribute| {
            let text = attribute.value().ok().and_then(attribute_text)?;
            Some((attribute.name().to_string(), text))
        })
        .collect()
}

/// A variable attribute as text, if it is text or a single number.
pub(crate) fn text_attribute(variable: &Variable, name: &str) -> Option<String> {
    variable
        .attribute_value(name)?
        .ok()
        .and_then(attribute_text)
}

fn attribute_text(value: AttributeValue) -> Option<String> {
    let text = match value {
        AttributeValue::Str(s) => s,
        AttributeValue::Strs(list) => list.join("\n"),
        AttributeValue::Uchar(n) => n.to_string(),
        AttributeValue::Schar(n) => n.to_string(),
        AttributeValue::Ushort(n) => n.to_string(),
        AttributeValue::Short(n) => n.to_string(),
        AttributeValue::Uint(n) => n.to_string(),
        AttributeValue::Int(n) => n.to_string(),
        AttributeValue::Ulonglong(n) => n.to_string(),
        AttributeValue::Longlong(n) => n.to_string(),
        AttributeValue::Float(n) => n.to_string(),
        AttributeValue::Double(n) => n.to_string(),
        _ => return None,
    };
    Some(text.trim_end_matches('\0').to_string())
}

/// A numeric variable attribute (the first value of a list).
fn number_attribute(variable: &Variable, name: &str) -> Option<f64> {
    let value = variable.attribute_value(name)?.ok()?;
    let first = match value {
        AttributeValue::Floats(v) => v.first().map(|x| f64::from(*x)),
        AttributeValue::Doubles(v) => v.first().copied(),
        AttributeValue::Shorts(v) => v.first().map(|x| f64::from(*x)),
        AttributeValue::Ints(v) => v.first().map(|x| f64::from(*x)),
        scalar => f64::try_from(scalar).ok(),
    };
    first.filter(|x| x.is_finite())
}

/// The variables that hold data: not coordinate variables, not named by another variable's
/// `bounds`, `climatology`, `coordinates`, `grid_mapping` or `cell_measures`, not a grid mapping
/// themselves and not named `*_bnds`/`*_bounds`. In file order.
pub(crate) fn data_variables(file: &File) -> Vec<String> {
    let mut auxiliary: HashSet<String> = file.dimensions().map(|d| d.name()).collect();
    for variable in file.variables() {
        for attribute in [
            "bounds",
            "climatology",
            "coordinates",
            "grid_mapping",
            "cell_measures",
        ] {
            if let Some(text) = text_attribute(&variable, attribute) {
                auxiliary.extend(
                    text.split_whitespace()
                        .map(|t| t.trim_end_matches(':').to_string()),
                );
            }
        }
    }
    file.variables()
        .filter(|v| v.attribute("grid_mapping_name").is_none())
        .map(|v| v.name())
        .filter(|name| {
            !auxiliary.contains(name) && !name.ends_with("_bnds") && !name.ends_with("_bounds")
        })
        .collect()
}

/// The variable named by `variable`'s attribute `attribute` (e.g. `bounds`), if it exists.
pub(crate) fn linked_variable<'f>(
    file: &'f File,
    variable: &Variable,
    attribute: &str,
) -> Option<Variable<'f>> {
    let name = text_attribute(variable, attribute)?;
    file.variable(name.trim())
}

/// The smallest and largest valid value of a numeric variable, after `scale_factor` and
/// `add_offset`; fill values, missing values and non-finite values are skipped. `None` when the
/// variable holds no valid value or is not numeric.
///
/// # Errors
/// A message naming the variable when its values cannot be read.
pub(crate) fn extrema(variable: &Variable) -> Result<Option<(f64, f64)>, String> {
    if !matches!(
        variable.vartype(),
        NcVariableType::Int(_) | NcVariableType::Float(_)
    ) {
        return Ok(None);
    }
    let invalid: Vec<f64> = ["_FillValue", "missing_value"]
        .iter()
        .filter_map(|name| number_attribute(variable, name))
        .collect();
    let scale = number_attribute(variable, "scale_factor").unwrap_or(1.0);
    let offset = number_attribute(variable, "add_offset").unwrap_or(0.0);
    let mut range: Option<(f64, f64)> = None;
    for slice in slices(variable) {
        let values = variable
            .get_values::<f64, _>(slice)
            .map_err(|e| format!("cannot read variable '{}': {e}", variable.name()))?;
        for value in values {
            // NetCDF's default fill values are near 9.97e36; nothing real is that large.
            if !value.is_finite() || invalid.contains(&value) || value.abs() > 1e30 {
                continue;
            }
            let value = value * scale + offset;
            range = Some(range.map_or((value, value), |(lo, hi)| (lo.min(value), hi.max(value))));
        }
    }
    Ok(range)
}

/// Slices along the first dimension holding at most about [`SLICE_VALUES`] values each.
fn slices(variable: &Variable) -> Vec<Extents> {
    let lengths: Vec<usize> = variable.dimensions().iter().map(|d| d.len()).collect();
    let Some((&first, rest)) = lengths.split_first() else {
        return vec![Extents::All];
    };
    let inner: usize = rest.iter().product();
    if first == 0 || inner == 0 {
        return Vec::new();
    }
    let step = (SLICE_VALUES / inner).max(1);
    (0..first)
        .step_by(step)
        .map(|start| {
            let mut extents = vec![Extent::from(start..(start + step).min(first))];
            extents.extend(rest.iter().map(|_| Extent::from(..)));
            Extents::from(extents)
        })
        .collect()
}
