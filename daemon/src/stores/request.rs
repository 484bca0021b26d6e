//! A conversion request as `zarr/convert` and `load` receive it: repeated query parameters or a
//! JSON body with the same names, validated into a [`ConvertRequest`].
//!
//! Both forms become one JSON object first (query values are strings; `path` may repeat), so
//! one validator reads them. It accepts what the unmodified freva-client sends: `data-vars`
//! for `data_vars`, explicit `null` for an absent option, `ttl_seconds` as a number with an
//! integral value (`86400.0`), booleans as `True`/`False`. Every other value that is not valid
//! is a 422 naming the option, at request time; so is an option this server does not know (a
//! misspelt option would otherwise be dropped without a word).
//!
//! Aggregation (`aggregate` with `join`, `compat`, `data_vars`, `coords`, `dim`, `group_by`)
//! makes one store of all sources ([`Aggregation`], carried out by
//! [`crate::convert::combine`]). Its options are validated whether or not `aggregate` is set
//! (freva-client sends them always) and do nothing without it, as spec 2 says.
//!
//! Temporal reduction (`time_freq` with `time_method`, `climatology`, `min_coverage`, `dtype`)
//! reduces each store in time ([`Reduction`], carried out by [`crate::convert::reduce`]). What
//! is wrong on its face is a 422 with the reference's message: an unknown value, a yearly or
//! decadal climatology, `time_method` or `climatology` without `time_freq`, `min_coverage`
//! outside 0..1, and the spatial options (`space`, `space_dims`, `weighting`), which the
//! reference reserves and does not implement. As in the reference, an option whose value is
//! empty, `false` or `0` is not set.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{Error, Fault, Result};

/// The most sources one request may name.
pub(crate) const MAX_SOURCES: usize = 10_000;

/// The most sources one aggregated store may combine: its conversion keeps each of them open
/// (checked for its owner) until it ends.
pub(crate) const MAX_AGGREGATED_SOURCES: usize = 1_000;

/// The shortest validity of a public URL, in seconds.
pub(crate) const MIN_TTL_SECONDS: u64 = 60;

/// Validity of a public URL when the request gives none, in seconds (one day).
pub(crate) const DEFAULT_TTL_SECONDS: u64 = 86_400;

/// How the chunks of a store are laid out (spec 2, `access_pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessPattern {
    /// Whole maps per chunk, a few time steps each.
    Map,
    /// Long time series of a small region per chunk.
    TimeSeries,
}

/// The chunking options of a store: recorded with it, not part of its token (whoever converts
/// first chooses them, until a `reload`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Chunking {
    /// The access pattern to optimise for.
    pub access_pattern: AccessPattern,
    /// Chunk length of the primary axis (time) for [`AccessPattern::Map`], 1 to 1024.
    pub map_primary_chunksize: u32,
    /// Target chunk size in MiB, 0.5 to 512.
    pub chunk_size_mib: f64,
}

impl Default for Chunking {
    fn default() -> Self {
        Chunking {
            access_pattern: AccessPattern::Map,
            map_primary_chunksize: 1,
            chunk_size_mib: 16.0,
        }
    }
}

/// A validated conversion request.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertRequest {
    /// Absolute paths of the sources, as given (`file://` prefixes removed), in order.
    pub sources: Vec<String>,
    /// Whether the stores are readable by anyone until `ttl_seconds` from now, and the URLs
    /// returned are share URLs.
    pub public: bool,
    /// Validity of public URLs in seconds.
    pub ttl_seconds: u64,
    /// Convert again even when the store exists.
    pub reload: bool,
    /// How to chunk the stores.
    pub chunking: Chunking,
    /// How to combine the sources into one store; `None`: one store per source.
    pub aggregation: Option<Aggregation>,
    /// How to reduce each store in time; `None`: the values as they are.
    pub reduction: Option<Reduction>,
}

/// A temporal reduction (DECISIONS, "Data portal"; reference section 6): every numeric
/// variable with the time dimension resampled to `freq` (or grouped into a climatology) by
/// `method`, as [`crate::convert::reduce`] describes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reduction {
    /// `time_freq`.
    pub freq: Freq,
    /// `time_method` (default mean).
    pub method: Method,
    /// `climatology`: group by the position within the year (or day) instead of resampling.
    pub climatology: bool,
    /// `min_coverage`: outputs of fewer valid inputs than this share of their group are
    /// missing (0: no check).
    pub min_coverage: f64,
    /// `dtype`: what floating-point variables are written as.
    pub dtype: OutputType,
}

/// `time_freq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freq {
    /// Hours.
    Hourly,
    /// Three hours from midnight.
    #[serde(rename = "3hourly")]
    ThreeHourly,
    /// Six hours from midnight.
    #[serde(rename = "6hourly")]
    SixHourly,
    /// Days.
    Daily,
    /// Calendar months.
    Monthly,
    /// Meteorological seasons: DJF, MAM, JJA, SON.
    Seasonal,
    /// Calendar years.
    Yearly,
    /// Ten calendar years from the first year of the data.
    Decadal,
}

impl Freq {
    /// Every value, in the reference's order, with its name.
    pub(crate) const ALL: [(&'static str, Freq); 8] = [
        ("hourly", Freq::Hourly),
        ("3hourly", Freq::ThreeHourly),
        ("6hourly", Freq::SixHourly),
        ("daily", Freq::Daily),
        ("monthly", Freq::Monthly),
        ("seasonal", Freq::Seasonal),
        ("yearly", Freq::Yearly),
        ("decadal", Freq::Decadal),
    ];

    /// Its name in requests.
    pub(crate) fn name(self) -> &'static str {
        name_in(&Freq::ALL, self)
    }

    /// Whether a climatology of it means something (the reference: hourly, daily, monthly
    /// and seasonal).
    pub(crate) fn has_climatology(self) -> bool {
        matches!(
            self,
            Freq::Hourly | Freq::Daily | Freq::Monthly | Freq::Seasonal
        )
    }
}

/// `time_method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Mean of the valid values.
    Mean,
    /// Sum of the valid values (0 when there are none).
    Sum,
    /// Least valid value.
    Min,
    /// Greatest valid value.
    Max,
    /// Population standard deviation (ddof 0).
    Std,
    /// Population variance (ddof 0).
    Var,
    /// Median.
    Median,
    /// Number of valid values.
    Count,
}

impl Method {
    /// Every value with its name.
    pub(crate) const ALL: [(&'static str, Method); 8] = [
        ("mean", Method::Mean),
        ("sum", Method::Sum),
        ("min", Method::Min),
        ("max", Method::Max),
        ("std", Method::Std),
        ("var", Method::Var),
        ("median", Method::Median),
        ("count", Method::Count),
    ];

    /// Its name in requests and in `cell_methods`.
    pub(crate) fn name(self) -> &'static str {
        name_in(&Method::ALL, self)
    }
}

/// The name of `value` in a list of every value with its name.
fn name_in<T: PartialEq + Copy>(all: &[(&'static str, T)], value: T) -> &'static str {
    all.iter()
        .find(|(_, v)| *v == value)
        .map(|(name, _)| *name)
        .expect("every value is listed")
}

/// `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputType {
    /// 32-bit floats (the default).
    Float32,
    /// 64-bit floats.
    Float64,
    /// The type the reduction gives.
    Keep,
}

/// How the sources of one store are combined (spec 2, endpoint 2, `aggregate` and its
/// options): the semantics of xarray's `combine_by_coords`, `merge` and `concat` as
/// [`crate::convert::combine`] describes. An option left out takes the default of the mode
/// that is chosen.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Aggregation {
    /// Which combination.
    pub mode: Mode,
    /// How indexes of other dimensions are joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<Join>,
    /// How variables that are not concatenated must agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<Compat>,
    /// Which data variables a concatenation concatenates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_vars: Option<Concatenated>,
    /// Which coordinates a concatenation concatenates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coords: Option<Concatenated>,
    /// The dimension to concatenate along (existing or new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dim: Option<String>,
    /// Group the sources by this signature first, and combine each group on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<GroupBy>,
}

/// `aggregate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Combine by coordinates, else concatenate along `dim`, else infer merge or concat.
    Auto,
    /// Merge the sources' variables.
    Merge,
    /// Concatenate along a dimension.
    Concat,
}

/// `join`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Join {
    /// The union of the indexes.
    Outer,
    /// Their intersection.
    Inner,
    /// The first source's.
    Left,
    /// The last source's.
    Right,
    /// Indexes must be equal.
    Exact,
}

/// `compat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compat {
    /// Values and dimensions equal (NaN equals NaN).
    Equals,
    /// Values equal where neither is missing.
    NoConflicts,
    /// The first source's variable, unchecked.
    Override,
}

/// `data_vars` and `coords`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concatenated {
    /// Only variables that have the dimension.
    Minimal,
    /// Also variables whose values differ between sources.
    Different,
    /// All of them.
    All,
}

/// `group_by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The horizontal grid: sizes and shapes of `lat`, `lon`, `rlat`, `rlon`, `x`, `y`.
    Grid,
    /// The names of the data variables.
    Vars,
}

/// The reduction options: in time, and the spatial ones the reference reserves.
const REDUCTION: [&str; 8] = [
    "time_freq",
    "time_method",
    "climatology",
    "min_coverage",
    "dtype",
    "space",
    "space_dims",
    "weighting",
];

/// Options of a conversion besides its sources.
const OPTIONS: [&str; 13] = [
    "public",
    "ttl_seconds",
    "reload",
    "access_pattern",
    "map_primary_chunksize",
    "chunk_size",
    "aggregate",
    "join",
    "compat",
    "data_vars",
    "coords",
    "dim",
    "group_by",
];

/// The longest `dim` accepted (NetCDF names are at most 256 bytes).
const MAX_DIM_NAME: usize = 256;

impl ConvertRequest {
    /// Reads the query pairs of `zarr/convert` (`path` repeated once per source).
    ///
    /// # Errors
    /// As [`ConvertRequest::from_object`].
    pub fn from_pairs(pairs: &[(String, String)], max_ttl_seconds: u64) -> Result<Self> {
        let mut object = Map::new();
        for (key, value) in pairs {
            if key == "path" {
                let paths = object
                    .entry("path")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(paths) = paths {
                    paths.push(Value::String(value.clone()));
                }
            } else {
                object.insert(key.clone(), Value::String(value.clone()));
            }
        }
        Self::from_object(object, true, max_ttl_seconds)
    }

    /// Reads the JSON body of `zarr/convert` (a request with a body has no query parameters).
    ///
    /// # Errors
    /// A body that is not a JSON object; as [`ConvertRequest::from_object`].
    pub fn from_body(body: &[u8], max_ttl_seconds: u64) -> Result<Self> {
        let object = match serde_json::from_slice(body) {
            Ok(Value::Object(object)) => object,
            Ok(_) => {
                return Err(Error::invalid(
                    "body",
                    Fault::WrongType,
                    "body: expected a JSON object",
                ));
            }
            Err(e) => {
                return Err(Error::invalid(
                    "body",
                    Fault::Syntax,
                    format!("body: invalid JSON: {e}"),
                ));
            }
        };
        Self::from_object(object, true, max_ttl_seconds)
    }

    /// Reads the options of `load/{flavour}` from its query pairs (its sources are the hits
    /// of its search, so `path` is not an option there and other keys are search facets).
    ///
    /// # Errors
    /// As [`ConvertRequest::from_object`].
    pub fn options_of_load(pairs: &[(String, String)], max_ttl_seconds: u64) -> Result<Self> {
        let object = pairs
            .iter()
            .filter(|(key, _)| is_option(key))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        Self::from_object(object, false, max_ttl_seconds)
    }

    /// Validates one request object; `with_sources` for `zarr/convert`, which needs `path`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the first option that is unknown, missing, of the
    /// wrong type or out of range.
    fn from_object(
        mut object: Map<String, Value>,
        with_sources: bool,
        max_ttl_seconds: u64,
    ) -> Result<Self> {
        if let Some(value) = object.remove("data-vars") {
            object.entry("data_vars").or_insert(value);
        }
        object.retain(|_, value| !value.is_null());
        let sources = if with_sources {
            sources(object.remove("path"))?
        } else {
            Vec::new()
        };
        let reduction = reduction(&mut object)?;
        let mut request = ConvertRequest {
            sources,
            public: false,
            ttl_seconds: DEFAULT_TTL_SECONDS,
            reload: false,
            chunking: Chunking::default(),
            aggregation: None,
            reduction,
        };
        let mut mode = None;
        let mut aggregation = Aggregation {
            mode: Mode::Auto,
            join: None,
            compat: None,
            data_vars: None,
            coords: None,
            dim: None,
            group_by: None,
        };
        for (name, value) in object {
            match name.as_str() {
                "aggregate" => {
                    mode = Some(choice(
                        &name,
                        &value,
                        &[
                            ("auto", Mode::Auto),
                            ("merge", Mode::Merge),
                            ("concat", Mode::Concat),
                        ],
                    )?);
                }
                "join" => {
                    aggregation.join = Some(choice(
                        &name,
                        &value,
                        &[
                            ("outer", Join::Outer),
                            ("inner", Join::Inner),
                            ("left", Join::Left),
                            ("right", Join::Right),
                            ("exact", Join::Exact),
                        ],
                    )?);
                }
                "compat" => {
                    aggregation.compat = Some(choice(
                        &name,
                        &value,
                        &[
                            ("equals", Compat::Equals),
                            ("no_conflicts", Compat::NoConflicts),
                            ("override", Compat::Override),
                        ],
                    )?);
                }
                "data_vars" | "coords" => {
                    let which = choice(
                        &name,
                        &value,
                        &[
                            ("minimal", Concatenated::Minimal),
                            ("different", Concatenated::Different),
                            ("all", Concatenated::All),
                        ],
                    )?;
                    if name == "coords" {
                        aggregation.coords = Some(which);
                    } else {
                        aggregation.data_vars = Some(which);
                    }
                }
                "group_by" => {
                    aggregation.group_by = Some(choice(
                        &name,
                        &value,
                        &[("grid", GroupBy::Grid), ("vars", GroupBy::Vars)],
                    )?);
                }
                "dim" => {
                    let dim = value.as_str().map(str::trim).unwrap_or_default();
                    if dim.is_empty() || dim.len() > MAX_DIM_NAME || dim.contains('\0') {
                        return Err(Error::invalid(
                            &name,
                            Fault::Refused,
                            format!(
                                "Option 'dim' must be a dimension name of 1 to {MAX_DIM_NAME} \
                                 bytes, got {value}."
                            ),
                        ));
                    }
                    aggregation.dim = Some(dim.to_string());
                }
                "public" => request.public = boolean(&name, &value)?,
                "reload" => request.reload = boolean(&name, &value)?,
                "ttl_seconds" => {
                    let seconds = whole_number(&name, &value)?;
                    request.ttl_seconds = within(&name, seconds, MIN_TTL_SECONDS, max_ttl_seconds)?;
                }
                "access_pattern" => {
                    request.chunking.access_pattern = match value.as_str() {
                        Some("map") => AccessPattern::Map,
                        Some("time_series") => AccessPattern::TimeSeries,
                        _ => {
                            return Err(Error::invalid(
                                &name,
                                Fault::Refused,
                                format!(
                                    "Option 'access_pattern' must be 'map' or 'time_series', \
                                     got {value}."
                                ),
                            ));
                        }
                    };
                }
                "map_primary_chunksize" => {
                    let size = whole_number(&name, &value)?;
                    let size = within(&name, size, 1, 1024)?;
                    request.chunking.map_primary_chunksize =
                        u32::try_from(size).expect("at most 1024");
                }
                "chunk_size" => {
                    let mib = number(&name, &value)?;
                    if !(0.5..=512.0).contains(&mib) {
                        return Err(Error::invalid(
                            &name,
                            Fault::Refused,
                            format!(
                                "Option 'chunk_size' must be from 0.5 to 512 (MiB), got {value}."
                            ),
                        ));
                    }
                    request.chunking.chunk_size_mib = mib;
                }
                other => {
                    let known = if with_sources { "path, " } else { "" };
                    return Err(Error::invalid(
                        other,
                        Fault::Unknown,
                        format!(
                            "Unknown option '{other}'; the options are {known}{}, {}.",
                            OPTIONS.join(", "),
                            REDUCTION.join(", ")
                        ),
                    ));
                }
            }
        }
        request.aggregation = mode.map(|mode| Aggregation {
            mode,
            ..aggregation
        });
        if request.aggregation.is_some() && request.sources.len() > MAX_AGGREGATED_SOURCES {
            return Err(Error::invalid(
                "path",
                Fault::Refused,
                format!(
                    "Option 'path' names {} files; at most {MAX_AGGREGATED_SOURCES} may be \
                     aggregated into one store.",
                    request.sources.len()
                ),
            ));
        }
        Ok(request)
    }
}

/// The value of option `name` among `choices` (by name, case as given).
///
/// # Errors
/// [`Error::InvalidParameter`] naming the option and the values it takes.
fn choice<T: Copy>(name: &str, value: &Value, choices: &[(&str, T)]) -> Result<T> {
    value
        .as_str()
        .and_then(|given| {
            choices
                .iter()
                .find(|(known, _)| *known == given.trim())
                .map(|(_, which)| *which)
        })
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(known, _)| *known).collect();
            Error::invalid(
                name,
                Fault::Refused,
                format!(
                    "Option '{name}' must be one of {}, got {value}.",
                    names.join(", ")
                ),
            )
        })
}

/// A request for a share URL (spec 2, endpoint 5): query pairs, or a JSON body, with `path`
/// (the URL of a store of this service) and `ttl_seconds` (default one day).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRequest {
    /// The store `path` names.
    pub token: uuid::Uuid,
    /// How long the share is valid (its range is checked with the configured maximum).
    pub ttl_seconds: u64,
}

impl ShareRequest {
    /// Reads a share request; the body's fields win over query pairs of the same name.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a body that is not a JSON object, a missing `path`, a
    /// `path` that is not a store URL of this service, or a `ttl_seconds` that is not whole.
    pub fn parse(pairs: &[(String, String)], body: &[u8]) -> Result<Self> {
        let mut object: Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        if !body.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice(body) {
                Ok(Value::Object(fields)) => object.extend(fields),
                _ => {
                    return Err(Error::invalid(
                        "body",
                        Fault::Syntax,
                        "body: expected a JSON object with path and ttl_seconds",
                    ));
                }
            }
        }
        let Some(Value::String(path)) = object.get("path") else {
            return Err(Error::invalid(
                "path",
                Fault::WrongType,
                "Parameter 'path' is required: the URL of a Zarr store of this service.",
            ));
        };
        let token = path
            .split_once("/data-portal/zarr/")
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|segment| segment.strip_suffix(".zarr"))
            .and_then(super::parse_token)
            .ok_or_else(|| {
                Error::invalid(
                    "path",
                    Fault::Refused,
                    format!("Only Zarr store URLs of this service can be shared, not {path:?}."),
                )
            })?;
        let ttl_seconds = match object.get("ttl_seconds") {
            None | Some(Value::Null) => DEFAULT_TTL_SECONDS,
            Some(value) => whole_number("ttl_seconds", value)?,
        };
        Ok(ShareRequest { token, ttl_seconds })
    }
}

/// Whether `key` is a conversion option of `load/{flavour}` rather than a search facet.
pub(crate) fn is_option(key: &str) -> bool {
    key == "data-vars" || OPTIONS.contains(&key) || REDUCTION.contains(&key)
}

/// Takes the reduction options out of `object` and validates them as the reference plans a
/// reduction (its messages, its defaults).
///
/// # Errors
/// [`Error::InvalidParameter`] naming the first option that is not valid.
fn reduction(object: &mut Map<String, Value>) -> Result<Option<Reduction>> {
    let mut given: HashMap<&str, Value> = HashMap::new();
    for name in REDUCTION {
        // As the reference: a value that is empty, false or zero is not set, and neither is
        // the default of an option that only means something with another (its schema
        // fills them in).
        if let Some(value) = object.remove(name)
            && !is_falsy(&value)
            && !(name == "time_method" && value.as_str().map(str::trim) == Some("mean"))
            && !(name == "weighting" && value.as_str().map(str::trim) == Some("auto"))
        {
            given.insert(name, value);
        }
    }
    let refuse = |name: &str, message: String| Err(Error::invalid(name, Fault::Refused, message));
    if let Some(name) = ["space", "space_dims", "weighting"]
        .into_iter()
        .find(|name| given.contains_key(name))
    {
        return refuse(
            name,
            format!(
                "Spatial reduction is not implemented yet (option '{name}'). Only temporal \
                 reduction is currently supported."
            ),
        );
    }
    let dtype = match given.get("dtype") {
        None => OutputType::Float32,
        Some(value) => reduction_choice(
            "dtype",
            value,
            &[
                ("float32", OutputType::Float32),
                ("float64", OutputType::Float64),
                ("keep", OutputType::Keep),
            ],
        )?,
    };
    let climatology = match given.get("climatology") {
        None => false,
        // A JSON 1 is true, as the reference's schema reads it.
        Some(Value::Number(n)) if n.as_f64() == Some(1.0) => true,
        Some(value) => boolean("climatology", value)?,
    };
    let min_coverage = match given.get("min_coverage") {
        None => 0.0,
        Some(value) => number("min_coverage", value)?,
    };
    if !(0.0..=1.0).contains(&min_coverage) {
        return refuse(
            "min_coverage",
            format!("min_coverage must be between 0 and 1, got {min_coverage:?}."),
        );
    }
    let Some(freq) = given.get("time_freq") else {
        if given.contains_key("time_method") || climatology {
            let name = if climatology {
                "climatology"
            } else {
                "time_method"
            };
            return refuse(
                name,
                "'time_method'/'climatology' require 'time_freq' to be set.".into(),
            );
        }
        return Ok(None);
    };
    let freq = reduction_choice("time_freq", freq, &Freq::ALL)?;
    let method = match given.get("time_method") {
        None => Method::Mean,
        Some(value) => reduction_choice("time_method", value, &Method::ALL)?,
    };
    if climatology && !freq.has_climatology() {
        return refuse(
            "climatology",
            format!(
                "A '{}' climatology is not meaningful. Allowed: hourly, daily, monthly, \
                 seasonal.",
                freq.name()
            ),
        );
    }
    Ok(Some(Reduction {
        freq,
        method,
        climatology,
        min_coverage,
        dtype,
    }))
}

/// Whether the reference takes `value` for "not set": null, false, zero, an empty string
/// (and, from a query string, `False` or `0`).
fn is_falsy(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => {
            let s = s.trim();
            s.is_empty() || s.eq_ignore_ascii_case("false") || s.parse::<f64>() == Ok(0.0)
        }
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
    }
}

/// A reduction option's value among `choices`, with the reference's message otherwise.
fn reduction_choice<T: Copy>(name: &str, value: &Value, choices: &[(&str, T)]) -> Result<T> {
    value
        .as_str()
        .and_then(|given| {
            choices
                .iter()
                .find(|(known, _)| *known == given.trim())
                .map(|(_, which)| *which)
        })
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(known, _)| *known).collect();
            let shown = match value {
                Value::String(s) => format!("'{s}'"),
                other => other.to_string(),
            };
            Error::invalid(
                name,
                Fault::Refused,
                format!("Unknown {name} {shown}. Allowed: {}.", names.join(", ")),
            )
        })
}

/// The sources of a request: `path` as a string or a list of strings, each absolute.
fn sources(value: Option<Value>) -> Result<Vec<String>> {
    let missing = || {
        Error::invalid(
            "path",
            Fault::WrongType,
            "Option 'path' is required: one or more absolute paths of files to convert.",
        )
    };
    let paths = match value.ok_or_else(missing)? {
        Value::String(path) => vec![path],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(path) => Ok(path),
                other => Err(Error::invalid(
                    "path",
                    Fault::WrongType,
                    format!("Option 'path' must hold strings, got {other}."),
                )),
            })
            .collect::<Result<_>>()?,
        other => {
            return Err(Error::invalid(
                "path",
                Fault::WrongType,
                format!("Option 'path' must be a string or a list of strings, got {other}."),
            ));
        }
    };
    if paths.is_empty() {
        return Err(missing());
    }
    if paths.len() > MAX_SOURCES {
        return Err(Error::invalid(
            "path",
            Fault::Refused,
            format!(
                "Option 'path' names {} files; at most {MAX_SOURCES} may be converted per request.",
                paths.len()
            ),
        ));
    }
    paths.iter().map(|path| source(path)).collect()
}

/// One source path: absolute, normalised (no `.` or `..` components, no `file://`).
fn source(path: &str) -> Result<String> {
    let bare = path.strip_prefix("file://").unwrap_or(path);
    let refuse = |why: &str| {
        Error::invalid(
            "path",
            Fault::Refused,
            format!("Option 'path': {path:?} {why}."),
        )
    };
    if !bare.starts_with('/') {
        return Err(refuse("is not an absolute path"));
    }
    if bare.contains('\0') {
        return Err(refuse("contains a NUL byte"));
    }
    if bare
        .split('/')
        .any(|component| component == "." || component == "..")
    {
        return Err(refuse("has '.' or '..' components"));
    }
    let mut normal = String::with_capacity(bare.len());
    for component in bare.split('/').filter(|c| !c.is_empty()) {
        normal.push('/');
        normal.push_str(component);
    }
    if normal.is_empty() {
        return Err(refuse("names no file"));
    }
    Ok(normal)
}

fn boolean(name: &str, value: &Value) -> Result<bool> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => crate::databrowser::params::parse_bool(name, s),
        other => Err(Error::invalid(
            name,
            Fault::WrongType,
            format!("Option '{name}' must be a boolean (true or false), got {other}."),
        )),
    }
}

fn number(name: &str, value: &Value) -> Result<f64> {
    let parsed = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    parsed.filter(|n| n.is_finite()).ok_or_else(|| {
        Error::invalid(
            name,
            Fault::Syntax,
            format!("Option '{name}' must be a number, got {value}."),
        )
    })
}

/// A non-negative whole number, also when written with a zero fraction (`86400.0`).
fn whole_number(name: &str, value: &Value) -> Result<u64> {
    let n = number(name, value)?;
    let wrong = if n.fract() != 0.0 {
        Some((Fault::Syntax, "must be a whole number"))
    } else if n < 0.0 {
        Some((Fault::Refused, "must not be negative"))
    } else if n > 1e15 {
        Some((Fault::Refused, "must be at most 10^15"))
    } else {
        None
    };
    if let Some((fault, what)) = wrong {
        return Err(Error::invalid(
            name,
            fault,
            format!("Option '{name}' {what}, got {value}."),
        ));
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "checked to be whole and below 1e15"
    )]
    Ok(n as u64)
}

fn within(name: &str, n: u64, min: u64, max: u64) -> Result<u64> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(Error::invalid(
            name,
            Fault::Refused,
            format!("Option '{name}' must be from {min} to {max}, got {n}."),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TTL: u64 = 7 * 86_400;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    fn body(json: &str) -> Result<ConvertRequest> {
        ConvertRequest::from_body(json.as_bytes(), MAX_TTL)
    }

    #[test]
    fn what_freva_client_sends_is_accepted() {
        let request = body(
            r#"{"aggregate": null, "join": null, "compat": null, "data-vars": null,
                "coords": null, "dim": null, "group_by": null,
                "path": ["/data/a.nc", "file:///data//b.nc"],
                "public": false, "ttl_seconds": 86400.0, "access_pattern": "map",
                "chunk_size": 16.0, "map_primary_chunksize": 1, "reload": false}"#,
        )
        .unwrap();
        assert_eq!(request.sources, ["/data/a.nc", "/data/b.nc"]);
        assert!(!request.public);
        assert_eq!(request.ttl_seconds, 86_400);
        assert_eq!(request.chunking, Chunking::default());
    }

    #[test]
    fn query_pairs_repeat_path_and_spell_booleans_as_python_does() {
        let request = ConvertRequest::from_pairs(
            &pairs(&[
                ("path", "/a.nc"),
                ("path", "/b.nc"),
                ("public", "True"),
                ("access_pattern", "time_series"),
                ("chunk_size", "2"),
                ("ttl_seconds", "600"),
            ]),
            MAX_TTL,
        )
        .unwrap();
        assert_eq!(request.sources, ["/a.nc", "/b.nc"]);
        assert!(request.public);
        assert_eq!(request.ttl_seconds, 600);
        assert_eq!(request.chunking.access_pattern, AccessPattern::TimeSeries);
        assert!((request.chunking.chunk_size_mib - 2.0).abs() < f64::EPSILON);
    }

    #[test]
    fn bad_values_are_refused_naming_the_option() {
        for (json, option) in [
            (r#"{}"#, "path"),
            (r#"{"path": []}"#, "path"),
            (r#"{"path": 5}"#, "path"),
            (r#"{"path": "relative/a.nc"}"#, "path"),
            (r#"{"path": "/data/../etc/shadow"}"#, "path"),
            (r#"{"path": "/a.nc", "ttl_seconds": 59}"#, "ttl_seconds"),
            (r#"{"path": "/a.nc", "ttl_seconds": 604801}"#, "ttl_seconds"),
            (
                r#"{"path": "/a.nc", "ttl_seconds": 86400.5}"#,
                "ttl_seconds",
            ),
            (r#"{"path": "/a.nc", "chunk_size": 0.1}"#, "chunk_size"),
            (r#"{"path": "/a.nc", "chunk_size": 1000}"#, "chunk_size"),
            (
                r#"{"path": "/a.nc", "map_primary_chunksize": 5000}"#,
                "map_primary_chunksize",
            ),
            (
                r#"{"path": "/a.nc", "map_primary_chunksize": 0}"#,
                "map_primary_chunksize",
            ),
            (
                r#"{"path": "/a.nc", "access_pattern": "diagonal"}"#,
                "access_pattern",
            ),
            (r#"{"path": "/a.nc", "public": "perhaps"}"#, "public"),
            (r#"{"path": "/a.nc", "chunksize": 4}"#, "chunksize"),
            (r#"{"path": "/a.nc", "aggregate": "stack"}"#, "aggregate"),
            (r#"{"path": "/a.nc", "aggregate": true}"#, "aggregate"),
            (r#"{"path": "/a.nc", "data-vars": "every"}"#, "data_vars"),
            (r#"{"path": "/a.nc", "join": "full"}"#, "join"),
            (r#"{"path": "/a.nc", "compat": "identical"}"#, "compat"),
            (
                r#"{"path": "/a.nc", "coords": null, "group_by": "model"}"#,
                "group_by",
            ),
            (r#"{"path": "/a.nc", "dim": ""}"#, "dim"),
            (r#"{"path": "/a.nc", "dim": 3}"#, "dim"),
            (r#"{"path": "/a.nc", "time_freq": "weekly"}"#, "time_freq"),
            (r#"{"path": "/a.nc", "time_freq": 3}"#, "time_freq"),
            (
                r#"{"path": "/a.nc", "time_freq": "daily", "time_method": "mode"}"#,
                "time_method",
            ),
            (
                r#"{"path": "/a.nc", "time_freq": "daily", "dtype": "int8"}"#,
                "dtype",
            ),
            (r#"{"path": "/a.nc", "dtype": "float16"}"#, "dtype"),
            (
                r#"{"path": "/a.nc", "time_freq": "daily", "min_coverage": 1.5}"#,
                "min_coverage",
            ),
            (
                r#"{"path": "/a.nc", "time_freq": "daily", "min_coverage": -0.1}"#,
                "min_coverage",
            ),
            (
                r#"{"path": "/a.nc", "time_freq": "daily", "min_coverage": "most"}"#,
                "min_coverage",
            ),
            (r#"{"path": "/a.nc", "climatology": true}"#, "climatology"),
            (r#"{"path": "/a.nc", "time_method": "max"}"#, "time_method"),
            (r#"{"path": "/a.nc", "min_coverage": 1.5}"#, "min_coverage"),
            (
                r#"{"path": "/a.nc", "min_coverage": "lots"}"#,
                "min_coverage",
            ),
            (
                r#"{"path": "/a.nc", "time_freq": "yearly", "climatology": true}"#,
                "climatology",
            ),
            (
                r#"{"path": "/a.nc", "time_freq": "daily", "climatology": "often"}"#,
                "climatology",
            ),
            (r#"{"path": "/a.nc", "space": "mean"}"#, "space"),
            (r#"{"path": "/a.nc", "weighting": "cos_lat"}"#, "weighting"),
        ] {
            let err = body(json).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Invalid, "{json}");
            let Error::InvalidParameter { parameter, .. } = &err else {
                panic!("{json}: {err}");
            };
            assert_eq!(parameter, option, "{json}: {err}");
            assert!(err.to_string().contains(option), "{json}: {err}");
        }
    }

    #[test]
    fn reduction_options_without_time_freq_reduce_nothing() {
        let request = body(
            r#"{"path": "/a.nc", "climatology": false, "min_coverage": 0.0, "dtype": "float32",
                "time_freq": "", "space": null, "time_method": "mean", "weighting": "auto"}"#,
        )
        .unwrap();
        assert_eq!(request.sources, ["/a.nc"]);
        assert_eq!(request.reduction, None);
    }

    #[test]
    fn reduction_options_are_read_with_the_reference_defaults_and_messages() {
        let request = body(r#"{"path": "/a.nc", "time_freq": "monthly"}"#).unwrap();
        assert_eq!(
            request.reduction,
            Some(Reduction {
                freq: Freq::Monthly,
                method: Method::Mean,
                climatology: false,
                min_coverage: 0.0,
                dtype: OutputType::Float32,
            })
        );
        let query = pairs(&[
            ("path", "/a.nc"),
            ("time_freq", "seasonal"),
            ("time_method", "median"),
            ("climatology", "True"),
            ("min_coverage", "0.75"),
            ("dtype", "keep"),
        ]);
        let request = ConvertRequest::from_pairs(&query, MAX_TTL).unwrap();
        assert_eq!(
            request.reduction,
            Some(Reduction {
                freq: Freq::Seasonal,
                method: Method::Median,
                climatology: true,
                min_coverage: 0.75,
                dtype: OutputType::Keep,
            })
        );
        let message = |json: &str| body(json).unwrap_err().to_string();
        assert!(
            message(r#"{"path": "/a.nc", "time_freq": "decadal", "climatology": true}"#)
                .contains("A 'decadal' climatology is not meaningful.")
        );
        assert!(
            message(r#"{"path": "/a.nc", "time_freq": "weekly"}"#)
                .contains("Unknown time_freq 'weekly'.")
        );
        assert!(
            message(r#"{"path": "/a.nc", "climatology": true}"#)
                .contains("'time_method'/'climatology' require 'time_freq' to be set.")
        );
        assert!(
            message(r#"{"path": "/a.nc", "space_dims": ["lat"]}"#)
                .contains("Spatial reduction is not implemented yet")
        );
    }

    #[test]
    fn a_number_out_of_range_is_refused_saying_what_is_wrong_with_it() {
        let message = |json: &str| body(json).unwrap_err().to_string();
        for (json, expected) in [
            (
                r#"{"path": "/a.nc", "map_primary_chunksize": -1}"#,
                "Option 'map_primary_chunksize' must not be negative, got -1.",
            ),
            (
                r#"{"path": "/a.nc", "ttl_seconds": 1e20}"#,
                "Option 'ttl_seconds' must be at most 10^15, got 1e+20.",
            ),
            (
                r#"{"path": "/a.nc", "ttl_seconds": 90.5}"#,
                "Option 'ttl_seconds' must be a whole number, got 90.5.",
            ),
            (
                r#"{"path": "/a.nc", "map_primary_chunksize": 0}"#,
                "Option 'map_primary_chunksize' must be from 1 to 1024, got 0.",
            ),
        ] {
            assert!(
                message(json).contains(expected),
                "{json}: {}",
                message(json)
            );
        }
    }

    #[test]
    fn aggregation_options_are_read_as_freva_client_sends_them() {
        let request = body(
            r#"{"path": ["/a.nc", "/b.nc"], "aggregate": "concat", "join": "outer",
                "compat": "override", "data-vars": "minimal", "coords": "minimal",
                "dim": " time ", "group_by": null}"#,
        )
        .unwrap();
        assert_eq!(
            request.aggregation,
            Some(Aggregation {
                mode: Mode::Concat,
                join: Some(Join::Outer),
                compat: Some(Compat::Override),
                data_vars: Some(Concatenated::Minimal),
                coords: Some(Concatenated::Minimal),
                dim: Some("time".into()),
                group_by: None,
            })
        );
        let query = ConvertRequest::from_pairs(
            &pairs(&[
                ("path", "/a.nc"),
                ("aggregate", "auto"),
                ("group_by", "vars"),
            ]),
            MAX_TTL,
        )
        .unwrap();
        let aggregation = query.aggregation.unwrap();
        assert_eq!(aggregation.mode, Mode::Auto);
        assert_eq!(aggregation.group_by, Some(GroupBy::Vars));
        let many: Vec<String> = (0..=MAX_AGGREGATED_SOURCES)
            .map(|n| format!("\"/f{n}.nc\""))
            .collect();
        let err = body(&format!(
            r#"{{"path": [{}], "aggregate": "concat"}}"#,
            many.join(",")
        ))
        .unwrap_err();
        assert!(err.to_string().contains("aggregated"), "{err}");
        // The options alone aggregate nothing.
        assert_eq!(
            body(r#"{"path": "/a.nc", "dim": "time"}"#)
                .unwrap()
                .aggregation,
            None
        );
    }

    #[test]
    fn load_takes_only_options_and_leaves_facets_to_the_search() {
        let request = ConvertRequest::options_of_load(
            &pairs(&[("variable", "tas"), ("public", "true"), ("path", "/x")]),
            MAX_TTL,
        )
        .unwrap();
        assert!(request.public);
        assert!(request.sources.is_empty());
        assert!(!is_option("variable"));
        assert!(is_option("chunk_size"));
    }
}
