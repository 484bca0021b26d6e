//! The controlled vocabulary behind the demo files: variables, tables, institutions and
//! experiments with the descriptions real files carry, and deterministic ids and dates.

/// A variable's CF metadata and the range of its synthetic values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Variable {
    pub(crate) name: &'static str,
    pub(crate) standard_name: &'static str,
    pub(crate) long_name: &'static str,
    pub(crate) units: &'static str,
    /// Empty for none.
    pub(crate) cell_methods: &'static str,
    pub(crate) base: f64,
    pub(crate) amplitude: f64,
    /// Height of a scalar `height` coordinate in m.
    pub(crate) height: Option<f64>,
    /// Whether the variable lives on pressure levels.
    pub(crate) levels: bool,
}

const VARIABLES: [Variable; 8] = [
    variable_row(
        "tas",
        "air_temperature",
        "Near-Surface Air Temperature",
        "K",
        "area: time: mean",
        278.0,
        30.0,
        Some(2.0),
    ),
    variable_row(
        "pr",
        "precipitation_flux",
        "Precipitation",
        "kg m-2 s-1",
        "area: time: mean",
        3e-5,
        2e-5,
        None,
    ),
    variable_row(
        "psl",
        "air_pressure_at_mean_sea_level",
        "Sea Level Pressure",
        "Pa",
        "area: time: mean",
        101_325.0,
        1500.0,
        None,
    ),
    variable_row(
        "tos",
        "sea_surface_temperature",
        "Sea Surface Temperature",
        "degC",
        "area: mean where sea time: mean",
        15.0,
        14.0,
        None,
    ),
    variable_row(
        "mrso",
        "mass_content_of_water_in_soil",
        "Total Soil Moisture Content",
        "kg m-2",
        "area: mean where land time: mean",
        800.0,
        300.0,
        None,
    ),
    variable_row(
        "orog",
        "surface_altitude",
        "Surface Altitude",
        "m",
        "area: mean",
        400.0,
        600.0,
        None,
    ),
    variable_row(
        "sftlf",
        "land_area_fraction",
        "Percentage of the grid cell occupied by land (including lakes)",
        "%",
        "area: mean",
        40.0,
        60.0,
        None,
    ),
    Variable {
        levels: true,
        ..variable_row(
            "ua",
            "eastward_wind",
            "Eastward Wind",
            "m s-1",
            "time: mean",
            8.0,
            12.0,
            None,
        )
    },
];

#[allow(clippy::too_many_arguments)] // a table row: every column is needed
const fn variable_row(
    name: &'static str,
    standard_name: &'static str,
    long_name: &'static str,
    units: &'static str,
    cell_methods: &'static str,
    base: f64,
    amplitude: f64,
    height: Option<f64>,
) -> Variable {
    Variable {
        name,
        standard_name,
        long_name,
        units,
        cell_methods,
        base,
        amplitude,
        height,
        levels: false,
    }
}

/// The variable `name`; an unknown name gets dimensionless placeholder metadata.
pub(crate) fn variable(name: &'static str) -> Variable {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .copied()
        .unwrap_or(variable_row(name, name, name, "1", "", 0.0, 1.0, None))
}

/// Frequency and realm of a CMIP6 table.
pub(crate) fn cmip6_table(table: &str) -> (&'static str, &'static str) {
    match table {
        "Omon" => ("mon", "ocean"),
        "Lmon" => ("mon", "land"),
        "day" => ("day", "atmos"),
        "3hr" => ("3hr", "atmos"),
        "E1hr" => ("1hr", "atmos"),
        "fx" => ("fx", "atmos"),
        "Ofx" => ("fx", "ocean"),
        _ => ("mon", "atmos"),
    }
}

/// An institution's full name.
pub(crate) fn institution(id: &str) -> &'static str {
    match id {
        "MPI-M" => "Max Planck Institute for Meteorology, Hamburg 20146, Germany",
        "CSIRO-ARCCSS" => {
            "CSIRO (Commonwealth Scientific and Industrial Research Organisation, Aspendale, Victoria 3195, Australia), ARCCSS (Australian Research Council Centre of Excellence for Climate System Science)"
        }
        "NCAR" => {
            "National Center for Atmospheric Research, Climate and Global Dynamics Laboratory, Boulder, CO 80307, USA"
        }
        "NOAA-GFDL" => {
            "National Oceanic and Atmospheric Administration, Geophysical Fluid Dynamics Laboratory, Princeton, NJ 08540, USA"
        }
        "MOHC" => "Met Office Hadley Centre, Fitzroy Road, Exeter, Devon, EX1 3PB, UK",
        "EC-Earth-Consortium" => {
            "AEMET, Spain; BSC, Spain; CNR-ISAC, Italy; DMI, Denmark; ENEA, Italy; FMI, Finland; KNMI, The Netherlands; SMHI, Sweden and others"
        }
        "GERICS" => "Helmholtz-Zentrum Geesthacht, Climate Service Center Germany",
        "CLMcom" => "Climate Limited-area Modelling Community (CLM-Community)",
        "SMHI" => "Swedish Meteorological and Hydrological Institute, Rossby Centre",
        "CPC" => {
            "Climate Prediction Center, 5830 University Research Ct, College Park, MD 20740, United States"
        }
        "DWD" => "Deutscher Wetterdienst, Offenbach am Main, Germany",
        "ECMWF" => "European Centre for Medium-Range Weather Forecasts",
        "NOAA" => "NOAA National Centers for Environmental Information",
        _ => "unknown institution",
    }
}

/// An experiment's title, as CMIP files give it in `experiment`.
pub(crate) fn experiment_title(id: &str) -> &'static str {
    match id {
        "historical" => "all-forcing simulation of the recent past",
        "amip" => "AMIP",
        "ssp585" => "update of RCP8.5 based on SSP5",
        "rcp85" => "RCP8.5",
        "rcp45" => "RCP4.5",
        _ => "observations",
    }
}

/// The CMIP6 `grid` description for a grid label.
pub(crate) fn grid_description(label: &str) -> &'static str {
    if label == "gr" {
        "data regridded to a regular lat-lon grid"
    } else {
        "native grid of the model"
    }
}

/// The licence text of CMIP6 files (shortened).
pub(crate) const CMIP6_LICENSE: &str = "CMIP6 model data produced by this demo is licensed under a Creative Commons Attribution 4.0 International License (https://creativecommons.org/licenses/). Consult https://pcmdi.llnl.gov/CMIP6/TermsOfUse for terms of use governing CMIP6 output.";

/// The numbers of a member label `r<r>i<i>p<p>[f<f>]`, 1 where missing.
pub(crate) fn member_indices(label: &str) -> [i32; 4] {
    let mut indices = [1; 4];
    for (slot, prefix) in ['r', 'i', 'p', 'f'].iter().enumerate() {
        let Some(start) = label.find(*prefix) else {
            continue;
        };
        let digits: String = label[start + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        indices[slot] = digits.parse().unwrap_or(1);
    }
    indices
}

/// A creation date from a version `vYYYYMMDD` (noon), so files of a version share one date.
pub(crate) fn creation_date(version: &str) -> String {
    let digits = version.trim_start_matches('v');
    match (digits.get(0..4), digits.get(4..6), digits.get(6..8)) {
        (Some(y), Some(m), Some(d)) => format!("{y}-{m}-{d}T12:00:00Z"),
        _ => "2020-01-01T12:00:00Z".to_string(),
    }
}

/// A UUID-shaped id derived from `seed` with FNV-1a, so every run writes the same id.
pub(crate) fn tracking_id(seed: &str) -> String {
    let hash = |salt: u8| {
        seed.bytes()
            .chain([salt])
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
    };
    let hex = format!("{:016x}{:016x}", hash(1), hash(2));
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_dates_are_deterministic() {
        assert_eq!(tracking_id("a"), tracking_id("a"));
        assert_ne!(tracking_id("a"), tracking_id("b"));
        assert_eq!(tracking_id("a").len(), 36);
        assert_eq!(creation_date("v20190710"), "2019-07-10T12:00:00Z");
        assert_eq!(member_indices("r12i1p2f3"), [12, 1, 2, 3]);
        assert_eq!(member_indices("r1i1p1"), [1, 1, 1, 1]);
    }
}
