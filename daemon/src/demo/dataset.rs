//! One demo dataset: its DRS identifiers, grid and time layout, and the files of each version.

use std::path::PathBuf;

use crate::crawl::cf_time::Calendar;

use super::file_spec::{FileSpec, Format, Value, VariableSpec};
use super::grid::Grid;
use super::period::{Period, TimeBase};
use super::vocabulary::{self, Variable};

/// The DRS a dataset is stored under, below the demo root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `model/global/cmip6/CMIP6/<activity>/<institute>/<source>/<experiment>/<member>/<table>/<variable>/<grid>/<version>`
    Cmip6,
    /// `model/global/cmip5/cmip5/<product>/<institute>/<model>/<experiment>/<frequency>/<realm>/<table>/<ensemble>/<version>/<variable>`
    Cmip5,
    /// `model/regional/cordex/output/<domain>/<institute>/<driving model>/<experiment>/<ensemble>/<rcm>/<rcm version>/<frequency>/<variable>/<version>`
    Cordex,
    /// `observations/<product>/<institute>/<model>/<experiment>/<frequency>/<realm>/<table>/<ensemble>/<version>/<variable>`
    Observations,
}

/// The identifiers of a dataset, named as the standard facets.
#[derive(Debug, Clone, Copy, Default)]
struct Ids {
    product: &'static str,
    institute: &'static str,
    /// The source/model; for CORDEX the driving model.
    model: &'static str,
    experiment: &'static str,
    ensemble: &'static str,
    frequency: &'static str,
    realm: &'static str,
    table: &'static str,
    variable: &'static str,
    grid_label: &'static str,
    rcm_name: &'static str,
    rcm_version: &'static str,
}

/// One dataset of the demo tree, written once per version.
#[derive(Debug, Clone)]
pub(crate) struct Dataset {
    layout: Layout,
    ids: Ids,
    variable: Variable,
    grid: Grid,
    calendar: &'static str,
    base: TimeBase,
    periods: Vec<Period>,
    /// Each version and how many of the leading periods it holds: a newer version may extend
    /// the older one.
    versions: Vec<(&'static str, usize)>,
}

/// A global grid of 45-degree cells with longitudes 0..360, as most CMIP models write them.
pub(crate) const GLOBAL_0_360: Grid = Grid::Regular {
    west: 0.0,
    east: 360.0,
    south: -90.0,
    north: 90.0,
    nlat: 4,
    nlon: 8,
    cell_bounds: true,
};

/// The same grid with longitudes -180..180, as regridded (`gr`) products write them.
pub(crate) const GLOBAL_180: Grid = Grid::Regular {
    west: -180.0,
    east: 180.0,
    south: -90.0,
    north: 90.0,
    nlat: 4,
    nlon: 8,
    cell_bounds: true,
};

impl Dataset {
    /// A dataset from its DRS directories between the project segment and the version, without
    /// the version (e.g. `CMIP/MPI-M/MPI-ESM1-2-LR/historical/r1i1p1f1/Amon/tas/gn` for CMIP6);
    /// it starts on [`GLOBAL_0_360`] in the proleptic Gregorian calendar, with days since 1850.
    pub(crate) fn new(layout: Layout, drs: &'static str) -> Self {
        let ids = parse_ids(layout, drs);
        Dataset {
            layout,
            ids,
            variable: vocabulary::variable(ids.variable),
            grid: GLOBAL_0_360,
            calendar: "proleptic_gregorian",
            base: TimeBase {
                unit: "days",
                since: (1850, 1, 1),
            },
            periods: vec![Period::Fixed],
            versions: Vec::new(),
        }
    }

    /// Uses `grid`.
    pub(crate) fn grid(mut self, grid: Grid) -> Self {
        self.grid = grid;
        self
    }

    /// Uses the CF calendar `name`.
    pub(crate) fn calendar(mut self, name: &'static str) -> Self {
        self.calendar = name;
        self
    }

    /// Counts time in `unit` since midnight of `since`.
    pub(crate) fn time_base(mut self, unit: &'static str, since: (i64, u32, u32)) -> Self {
        self.base = TimeBase { unit, since };
        self
    }

    /// One file per period.
    pub(crate) fn periods(mut self, periods: impl IntoIterator<Item = Period>) -> Self {
        self.periods = periods.into_iter().collect();
        self
    }

    /// The versions, each with the number of leading periods it holds.
    pub(crate) fn versions(mut self, versions: &[(&'static str, usize)]) -> Self {
        self.versions = versions.to_vec();
        self
    }

    /// Every file of every version: its path below the root and its content.
    pub(crate) fn files(&self) -> Vec<(PathBuf, FileSpec)> {
        let calendar = Calendar::parse(Some(self.calendar)).unwrap_or(Calendar::Standard);
        let mut files = Vec::new();
        for &(version, count) in &self.versions {
            for period in self.periods.iter().take(count) {
                let path = self
                    .directory(version)
                    .join(self.file_name(*period, calendar));
                let spec = FileSpec {
                    format: if self.layout == Layout::Cmip6 {
                        Format::Netcdf4Classic
                    } else {
                        Format::Classic
                    },
                    global_attributes: self.global_attributes(version, &path.to_string_lossy()),
                    variable: self.variable_spec(),
                    grid: self.grid.clone(),
                    levels: if self.variable.levels {
                        vec![100_000.0, 50_000.0, 25_000.0]
                    } else {
                        Vec::new()
                    },
                    height: self.variable.height,
                    time: period.time_axis(calendar, self.calendar, self.base),
                };
                files.push((path, spec));
            }
        }
        files
    }

    fn directory(&self, version: &'static str) -> PathBuf {
        let Ids {
            product,
            institute,
            model,
            experiment,
            ensemble,
            frequency,
            realm,
            table,
            variable,
            ..
        } = self.ids;
        let segments: Vec<&str> = match self.layout {
            Layout::Cmip6 => vec![
                "model",
                "global",
                "cmip6",
                "CMIP6",
                product,
                institute,
                model,
                experiment,
                ensemble,
                table,
                variable,
                self.ids.grid_label,
                version,
            ],
            Layout::Cmip5 => vec![
                "model", "global", "cmip5", "cmip5", product, institute, model, experiment,
                frequency, realm, table, ensemble, version, variable,
            ],
            Layout::Cordex => vec![
                "model",
                "regional",
                "cordex",
                "output",
                product,
                institute,
                model,
                experiment,
                ensemble,
                self.ids.rcm_name,
                self.ids.rcm_version,
                frequency,
                variable,
                version,
            ],
            Layout::Observations => vec![
                "observations",
                product,
                institute,
                model,
                experiment,
                frequency,
                realm,
                table,
                ensemble,
                version,
                variable,
            ],
        };
        segments.iter().collect()
    }

    fn file_name(&self, period: Period, calendar: Calendar) -> String {
        let Ids {
            product,
            model,
            experiment,
            ensemble,
            frequency,
            table,
            variable,
            ..
        } = self.ids;
        let mut parts = match self.layout {
            Layout::Cmip6 => vec![
                variable,
                table,
                model,
                experiment,
                ensemble,
                self.ids.grid_label,
            ],
            Layout::Cmip5 | Layout::Observations => {
                vec![variable, table, model, experiment, ensemble]
            }
            Layout::Cordex => vec![
                variable,
                product,
                model,
                experiment,
                ensemble,
                self.ids.rcm_name,
                self.ids.rcm_version,
                frequency,
            ],
        };
        let stamp = period.stamp(calendar);
        parts.extend(stamp.as_deref());
        format!("{}.nc", parts.join("_"))
    }

    fn variable_spec(&self) -> VariableSpec {
        let v = self.variable;
        VariableSpec {
            name: v.name.to_string(),
            standard_name: v.standard_name.to_string(),
            long_name: v.long_name.to_string(),
            units: v.units.to_string(),
            cell_methods: (!v.cell_methods.is_empty()).then(|| v.cell_methods.to_string()),
            base: v.base,
            amplitude: v.amplitude,
        }
    }

    /// Global attributes as the project's files carry them.
    fn global_attributes(&self, version: &str, path: &str) -> Vec<(String, Value)> {
        let ids = &self.ids;
        let created = vocabulary::creation_date(version);
        let tracking = vocabulary::tracking_id(path);
        let pairs: Vec<(&str, Value)> = match self.layout {
            Layout::Cmip6 => {
                let [r, i, p, f] = vocabulary::member_indices(ids.ensemble);
                vec![
                    ("Conventions", text("CF-1.7 CMIP-6.2")),
                    ("activity_id", text(ids.product)),
                    ("creation_date", text(&created)),
                    ("data_specs_version", text("01.00.30")),
                    (
                        "experiment",
                        text(vocabulary::experiment_title(ids.experiment)),
                    ),
                    ("experiment_id", text(ids.experiment)),
                    ("forcing_index", Value::Int(f)),
                    ("frequency", text(ids.frequency)),
                    ("grid", text(vocabulary::grid_description(ids.grid_label))),
                    ("grid_label", text(ids.grid_label)),
                    ("initialization_index", Value::Int(i)),
                    ("institution", text(vocabulary::institution(ids.institute))),
                    ("institution_id", text(ids.institute)),
                    ("license", text(vocabulary::CMIP6_LICENSE)),
                    ("mip_era", text("CMIP6")),
                    ("nominal_resolution", text("500 km")),
                    ("physics_index", Value::Int(p)),
                    ("product", text("model-output")),
                    ("realization_index", Value::Int(r)),
                    ("realm", text(ids.realm)),
                    ("source_id", text(ids.model)),
                    ("source_type", text("AOGCM")),
                    ("sub_experiment", text("none")),
                    ("sub_experiment_id", text("none")),
                    ("table_id", text(ids.table)),
                    ("tracking_id", text(&format!("hdl:21.14100/{tracking}"))),
                    ("variable_id", text(ids.variable)),
                    ("variant_label", text(ids.ensemble)),
                ]
            }
            Layout::Cmip5 => {
                let [r, i, p, _] = vocabulary::member_indices(ids.ensemble);
                vec![
                    ("institution", text(vocabulary::institution(ids.institute))),
                    ("institute_id", text(ids.institute)),
                    ("experiment_id", text(ids.experiment)),
                    ("model_id", text(ids.model)),
                    ("forcing", text("GHG,Oz,SD,Sl,Vl,LU")),
                    ("parent_experiment_id", text("piControl")),
                    ("branch_time", Value::Double(0.0)),
                    ("contact", text("cmip5@example.invalid")),
                    ("initialization_method", Value::Int(i)),
                    ("physics_version", Value::Int(p)),
                    ("tracking_id", text(&tracking)),
                    ("product", text(ids.product)),
                    (
                        "experiment",
                        text(vocabulary::experiment_title(ids.experiment)),
                    ),
                    ("frequency", text(ids.frequency)),
                    ("creation_date", text(&created)),
                    ("Conventions", text("CF-1.4")),
                    ("project_id", text("CMIP5")),
                    (
                        "table_id",
                        text(&format!("Table {} (12 January 2012)", ids.table)),
                    ),
                    ("modeling_realm", text(ids.realm)),
                    ("realization", Value::Int(r)),
                    ("cmor_version", text("2.7.1")),
                ]
            }
            Layout::Cordex => vec![
                ("Conventions", text("CF-1.4")),
                ("contact", text("cordex@example.invalid")),
                ("creation_date", text(&created)),
                (
                    "experiment",
                    text(vocabulary::experiment_title(ids.experiment)),
                ),
                ("experiment_id", text(ids.experiment)),
                (
                    "driving_experiment",
                    text(&format!(
                        "{}, {}, {}",
                        ids.model, ids.experiment, ids.ensemble
                    )),
                ),
                ("driving_model_id", text(ids.model)),
                ("driving_model_ensemble_member", text(ids.ensemble)),
                ("driving_experiment_name", text(ids.experiment)),
                ("frequency", text(ids.frequency)),
                ("modeling_realm", text(ids.realm)),
                ("institution", text(vocabulary::institution(ids.institute))),
                ("institute_id", text(ids.institute)),
                ("model_id", text(ids.rcm_name)),
                ("rcm_version_id", text(ids.rcm_version)),
                ("project_id", text("CORDEX")),
                ("CORDEX_domain", text(ids.product)),
                ("product", text("output")),
                ("tracking_id", text(&tracking)),
            ],
            Layout::Observations => vec![
                ("Conventions", text("CF-1.6")),
                (
                    "title",
                    text(&format!(
                        "{} {} {}",
                        ids.model, ids.experiment, self.variable.long_name
                    )),
                ),
                ("institution_id", text(ids.institute)),
                ("institution", text(vocabulary::institution(ids.institute))),
                ("experiment_id", text(ids.experiment)),
                ("ensemble", text(ids.ensemble)),
                ("project_id", text("observations")),
                ("frequency", text(ids.frequency)),
                ("modeling_realm", text(ids.realm)),
                ("grid_label", text(ids.grid_label)),
                ("creation_date", text(&created)),
                ("tracking_id", text(&tracking)),
            ],
        };
        pairs
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect()
    }
}

fn text(value: &str) -> Value {
    Value::Text(value.to_string())
}

/// Names the `/`-separated DRS segments after the layout's template.
fn parse_ids(layout: Layout, drs: &'static str) -> Ids {
    let s: Vec<&'static str> = drs.split('/').collect();
    let at = |i: usize| s.get(i).copied().unwrap_or_default();
    match layout {
        Layout::Cmip6 => {
            let (frequency, realm) = vocabulary::cmip6_table(at(5));
            Ids {
                product: at(0),
                institute: at(1),
                model: at(2),
                experiment: at(3),
                ensemble: at(4),
                table: at(5),
                variable: at(6),
                grid_label: at(7),
                frequency,
                realm,
                ..Ids::default()
            }
        }
        Layout::Cmip5 | Layout::Observations => Ids {
            product: at(0),
            institute: at(1),
            model: at(2),
            experiment: at(3),
            frequency: at(4),
            realm: at(5),
            table: at(6),
            ensemble: at(7),
            variable: at(8),
            grid_label: "gn",
            ..Ids::default()
        },
        Layout::Cordex => Ids {
            product: at(0),
            institute: at(1),
            model: at(2),
            experiment: at(3),
            ensemble: at(4),
            rcm_name: at(5),
            rcm_version: at(6),
            frequency: at(7),
            table: at(7),
            variable: at(8),
            realm: "atmos",
            grid_label: "gn",
        },
    }
}
