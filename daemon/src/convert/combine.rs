//! Combining several sources into one store (`aggregate`): the semantics of xarray's
//! `combine_by_coords`, `merge` and `concat` on datasets opened as the reference service
//! opens them (`decode_cf=False`, `decode_coords=False`: values undecoded, and the only
//! coordinates are index variables, named like their one dimension), worked out on the
//! sources' metadata before any chunk is read. The result says, for every variable of the
//! store, which slabs of which sources make it ([`Origin`]); a chunk is then read slab by slab
//! ([`read_block`]), so a store of many large files converts chunk by chunk in bounded memory.
//!
//! What each mode does (reference section 5, with its bugs fixed):
//! - `concat` along `dim` (the option; else `time` if every source has it; else the first
//!   dimension all sources share, by name): variables with `dim` are concatenated, and data
//!   variables without it too with `data_vars=all`, or those whose values differ with
//!   `different`. A variable that lacks `dim` is repeated along it; a new `dim` is added
//!   first. Variables not concatenated must agree by `compat`. Defaults: `join=outer`,
//!   `compat=override`, `data_vars=all`, `coords=minimal`.
//! - `merge`: the union of the variables; one name in several sources must agree by
//!   `compat`. Defaults: `join=outer`, `compat=no_conflicts`.
//! - `auto`: combine by coordinates (sources with the same data variables are concatenated
//!   along the one dimension whose index differs between them, ordered by its first value,
//!   and the results merged); else, with `dim`, concatenation along it with
//!   `combine_nested`'s defaults; else merge when no data variable is in two sources, else
//!   concat as above.
//! - When the combination fails, or `group_by` is set, the sources are grouped by a
//!   signature (`grid`: the sizes and shapes of `lat`, `lon`, `rlat`, `rlon`, `x`, `y`;
//!   `vars`: the data variable names) and each group is combined on its own, as `auto`
//!   without combining by coordinates. Groups become `group0`, `group1`, ... in order of first
//!   appearance. One group only fails with the combination's reason.
//!
//! Attributes (of the store and of each variable) are the first source's, as
//! `combine_attrs="override"`. Only the root group of each source is read, as xarray's
//! `open_dataset` does.
//!
//! Decided where xarray would go on and this server fails the store with a reason that says
//! so: indexes of a dimension that differ between sources (other than the concatenated one)
//! need `join` to realign them, which is not supported yet (`exact` fails as xarray does);
//! the same variable with different types, or with values that differ only where one is
//! missing under `no_conflicts`, is not combined; string variables are not combined; a
//! combination along two dimensions at once (a 2-D tiling) is not supported.

use serde_json::{Map, Value};

use super::metadata::{Dtype, GroupInfo, VarInfo};
use super::plan::Dim;
use super::write::to_usize;
use crate::stores::request::{Aggregation, Compat, Concatenated, GroupBy, Join, Mode};

/// Grid dimension and coordinate names of the `grid` signature.
const GRID: [&str; 6] = ["lat", "lon", "rlat", "rlon", "x", "y"];

/// Elements compared at a time when checking that two variables agree.
const COMPARE_ELEMENTS: u64 = 4 << 20;

/// Reads slabs of the sources' variables.
pub(crate) trait Slabs {
    /// The values of the hyperslab `start`/`count` of the root variable `name` of source
    /// `source`, in C order, little-endian.
    ///
    /// # Errors
    /// A sentence naming the file and variable.
    fn read(
        &mut self,
        source: usize,
        name: &str,
        start: &[u64],
        count: &[u64],
    ) -> Result<Vec<u8>, String>;
}

/// One source's root group, as the combination sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dataset {
    /// The source's name in messages (its path).
    pub(crate) name: String,
    /// Its global attributes.
    pub(crate) attrs: Map<String, Value>,
    /// Its variables, in file order.
    pub(crate) vars: Vec<VarInfo>,
}

/// Where a variable's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The whole variable of the same name of one source.
    Whole(usize),
    /// Slabs along one axis of the variable, in order, covering it.
    Along {
        /// The axis.
        axis: usize,
        /// The slabs.
        pieces: Vec<Piece>,
    },
}

/// A slab of a combined variable along its concatenation axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The source of the values; `None`: missing there, all NaN.
    pub(crate) source: Option<usize>,
    /// Its first position along the axis in the combined variable.
    pub(crate) start: u64,
    /// Its length along the axis.
    pub(crate) len: u64,
    /// Where this slab starts along the axis in the source's variable; `None`: the source's
    /// variable lacks the axis and is repeated `len` times.
    pub(crate) from: Option<u64>,
}

/// A variable of a combined dataset.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CombinedVar {
    /// What the store says of it.
    pub(crate) info: VarInfo,
    /// Where its values come from.
    pub(crate) origin: Origin,
}

/// A combined dataset: one group of the store.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    /// Its attributes.
    pub(crate) attrs: Map<String, Value>,
    /// Its variables.
    pub(crate) vars: Vec<CombinedVar>,
    /// Names of the sources it was combined from, for messages.
    names: Vec<String>,
}

impl Part {
    fn of(source: usize, dataset: &Dataset) -> Self {
        Part {
            attrs: dataset.attrs.clone(),
            vars: dataset
                .vars
                .iter()
                .map(|info| CombinedVar {
                    info: info.clone(),
                    origin: Origin::Whole(source),
                })
                .collect(),
            names: vec![dataset.name.clone()],
        }
    }

    fn var(&self, name: &str) -> Option<&CombinedVar> {
        self.vars.iter().find(|v| v.info.name == name)
    }

    /// The length of dimension `name`, if a variable uses it.
    fn dim(&self, name: &str) -> Option<u64> {
        self.vars
            .iter()
            .flat_map(|v| &v.info.dims)
            .find(|d| d.name == name)
            .map(|d| d.len)
    }

    /// Its dimension names, in order of first use.
    fn dims(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for dim in self.vars.iter().flat_map(|v| &v.info.dims) {
            if !names.contains(&dim.name) {
                names.push(dim.name.clone());
            }
        }
        names
    }

    fn data_var_names(&self) -> Vec<&str> {
        self.vars
            .iter()
            .filter(|v| !v.info.is_coordinate())
            .map(|v| v.info.name.as_str())
            .collect()
    }

    /// Its index: the coordinate variable of dimension `name`.
    fn index(&self, name: &str) -> Option<&CombinedVar> {
        self.var(name).filter(|v| v.info.is_coordinate())
    }

    fn shown(&self) -> String {
        match self.names.as_slice() {
            [one] => one.clone(),
            [first, .., last] => format!("{first} ... {last}"),
            [] => String::new(),
        }
    }
}

/// Combines `datasets` (the sources, in request order) as `aggregation` says: the groups of
/// the store (one named `""`, the root, unless the sources were grouped).
///
/// # Errors
/// A reason for the store's failed status that says which variable, index or dimension
/// stands in the way, and why.
pub(crate) fn combine(
    datasets: &[Dataset],
    aggregation: &Aggregation,
    slabs: &mut dyn Slabs,
) -> Result<Vec<(String, Part)>, String> {
    if let Some(var) = datasets
        .iter()
        .flat_map(|d| d.vars.iter().map(move |v| (d, v)))
        .find(|(_, v)| v.dtype == Dtype::String)
    {
        return Err(format!(
            "{}: variable {:?} holds strings, which cannot be aggregated yet",
            var.0.name, var.1.name
        ));
    }
    let parts: Vec<Part> = datasets
        .iter()
        .enumerate()
        .map(|(n, d)| Part::of(n, d))
        .collect();
    if let Some(key) = aggregation.group_by {
        return grouped(parts, key, aggregation, slabs, None);
    }
    let direct = match aggregation.mode {
        Mode::Auto => auto(parts.clone(), aggregation, slabs),
        Mode::Merge => merge(&parts, aggregation, slabs),
        Mode::Concat => {
            let dim = concat_dim(&parts, aggregation);
            match dim {
                Some(dim) => concat(&parts, &dim, &concat_options(aggregation), slabs),
                None => Err("no dimension to concatenate along: the sources share none".into()),
            }
        }
    };
    match direct {
        Ok(part) => Ok(vec![(String::new(), part)]),
        Err(reason) => grouped(parts, GroupBy::Grid, aggregation, slabs, Some(&reason)),
    }
}

/// Groups `parts` by their `key` signature and combines each group by an inferred plan.
/// `failed` is the reason a direct combination failed (then one group is that failure).
fn grouped(
    parts: Vec<Part>,
    key: GroupBy,
    aggregation: &Aggregation,
    slabs: &mut dyn Slabs,
    failed: Option<&str>,
) -> Result<Vec<(String, Part)>, String> {
    let mut groups: Vec<(String, Vec<Part>)> = Vec::new();
    for part in parts {
        let signature = signature(&part, key);
        match groups.iter_mut().find(|(s, _)| *s == signature) {
            Some((_, members)) => members.push(part),
            None => groups.push((signature, vec![part])),
        }
    }
    if let (Some(reason), 1) = (failed, groups.len()) {
        return Err(format!("Aggregation failed for a single group: {reason}"));
    }
    let mut combined = Vec::with_capacity(groups.len());
    for (n, (_, members)) in groups.into_iter().enumerate() {
        let part = inferred(members, aggregation, slabs).map_err(|reason| {
            format!("Aggregation failed for at least one group: group{n}: {reason}")
        })?;
        combined.push((format!("group{n}"), part));
    }
    Ok(combined)
}

/// A part's signature for grouping.
fn signature(part: &Part, key: GroupBy) -> String {
    match key {
        GroupBy::Vars => {
            let mut names = part.data_var_names();
            names.sort_unstable();
            names.join(",")
        }
        GroupBy::Grid => {
            let mut dims: Vec<String> = part
                .dims()
                .into_iter()
                .filter(|d| GRID.contains(&d.as_str()))
                .map(|d| format!("{d}={}", part.dim(&d).unwrap_or(0)))
                .collect();
            dims.sort_unstable();
            let mut coords: Vec<String> = part
                .vars
                .iter()
                .filter(|v| GRID.contains(&v.info.name.as_str()))
                .map(|v| {
                    let names: Vec<&str> = v.info.dims.iter().map(|d| d.name.as_str()).collect();
                    let shape: Vec<u64> = v.info.dims.iter().map(|d| d.len).collect();
                    format!("{}:{names:?}:{shape:?}", v.info.name)
                })
                .collect();
            coords.sort_unstable();
            format!("dims[{}]|coords[{}]", dims.join(","), coords.join(","))
        }
    }
}

/// `auto`: by coordinates; else along `dim` as `combine_nested`; else an inferred plan.
fn auto(
    parts: Vec<Part>,
    aggregation: &Aggregation,
    slabs: &mut dyn Slabs,
) -> Result<Part, String> {
    let by_coords = by_coords(parts.clone(), aggregation, slabs);
    if by_coords.is_ok() {
        return by_coords;
    }
    if let Some(dim) = &aggregation.dim {
        let nested = ConcatOptions {
            join: aggregation.join.unwrap_or(Join::Outer),
            compat: aggregation.compat.unwrap_or(Compat::NoConflicts),
            data_vars: aggregation.data_vars.unwrap_or(Concatenated::All),
            coords: aggregation.coords.unwrap_or(Concatenated::Different),
        };
        if let Ok(part) = concat(&parts, dim, &nested, slabs) {
            return Ok(part);
        }
    }
    inferred(parts, aggregation, slabs)
}

/// The plan the reference infers: merge when no data variable is in two parts, else concat
/// along [`concat_dim`], else merge.
fn inferred(
    parts: Vec<Part>,
    aggregation: &Aggregation,
    slabs: &mut dyn Slabs,
) -> Result<Part, String> {
    if parts.len() == 1 {
        return Ok(parts.into_iter().next().expect("one part"));
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut shared = false;
    for part in &parts {
        let names = part.data_var_names();
        shared |= names.iter().any(|n| seen.contains(n));
        seen.extend(names);
    }
    if !shared && !seen.is_empty() {
        return merge(&parts, aggregation, slabs);
    }
    match concat_dim(&parts, aggregation) {
        Some(dim) => concat(&parts, &dim, &concat_options(aggregation), slabs),
        None => merge(&parts, aggregation, slabs),
    }
}

/// The dimension to concatenate along: `dim`, else `time` if every part has it, else the
/// first dimension (by name) every part has.
fn concat_dim(parts: &[Part], aggregation: &Aggregation) -> Option<String> {
    if let Some(dim) = &aggregation.dim {
        return Some(dim.clone());
    }
    let all_have = |name: &str| parts.iter().all(|p| p.dim(name).is_some());
    if all_have("time") {
        return Some("time".into());
    }
    let mut common: Vec<String> = parts
        .first()?
        .dims()
        .into_iter()
        .filter(|d| all_have(d))
        .collect();
    common.sort_unstable();
    common.into_iter().next()
}

/// How a concatenation treats what it does not concatenate.
struct ConcatOptions {
    join: Join,
    compat: Compat,
    data_vars: Concatenated,
    /// Without effect on what is concatenated (sources opened with `decode_coords=False`
    /// have no coordinates but indexes), but `different` cannot go with `compat=override`.
    coords: Concatenated,
}

/// The reference's concat defaults under the user's options.
fn concat_options(aggregation: &Aggregation) -> ConcatOptions {
    ConcatOptions {
        join: aggregation.join.unwrap_or(Join::Outer),
        compat: aggregation.compat.unwrap_or(Compat::Override),
        data_vars: aggregation.data_vars.unwrap_or(Concatenated::All),
        coords: aggregation.coords.unwrap_or(Concatenated::Minimal),
    }
}

/// `combine_by_coords`: parts with the same data variables (groups in order of first
/// appearance) are concatenated along the one dimension whose index differs between them,
/// in the order of its first value; the results are merged.
fn by_coords(
    parts: Vec<Part>,
    aggregation: &Aggregation,
    slabs: &mut dyn Slabs,
) -> Result<Part, String> {
    let mut groups: Vec<(Vec<String>, Vec<Part>)> = Vec::new();
    for part in parts {
        let mut key: Vec<String> = part
            .data_var_names()
            .into_iter()
            .map(str::to_string)
            .collect();
        key.sort_unstable();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(part),
            None => groups.push((key, vec![part])),
        }
    }
    let options = ConcatOptions {
        join: aggregation.join.unwrap_or(Join::Outer),
        compat: aggregation.compat.unwrap_or(Compat::NoConflicts),
        data_vars: aggregation.data_vars.unwrap_or(Concatenated::All),
        coords: aggregation.coords.unwrap_or(Concatenated::Different),
    };
    let mut concatenated = Vec::with_capacity(groups.len());
    for (_, members) in groups {
        if members.len() == 1 {
            concatenated.extend(members);
            continue;
        }
        let (dim, ordered) = order_by_index(members, slabs)?;
        let part = concat(&ordered, &dim, &options, slabs)?;
        let index = part.index(&dim).expect("a concatenated index");
        let values = numbers(index, slabs)?;
        if !monotonic(&values) {
            return Err(format!(
                "Resulting object does not have monotonic global indexes along dimension {dim}"
            ));
        }
        concatenated.push(part);
    }
    merge(&concatenated, aggregation, slabs)
}

/// The one dimension along which the parts' indexes differ, and the parts in the order of
/// its first value.
fn order_by_index(parts: Vec<Part>, slabs: &mut dyn Slabs) -> Result<(String, Vec<Part>), String> {
    let mut along = Vec::new();
    for dim in parts[0].dims() {
        if parts[0].index(&dim).is_none() {
            continue;
        }
        let mut values = Vec::with_capacity(parts.len());
        for part in &parts {
            let index = part.index(&dim).ok_or_else(|| {
                format!(
                    "Every dimension needs a coordinate for inferring concatenation order: \
                     {} has no index of {dim:?}",
                    part.shown()
                )
            })?;
            values.push(numbers(index, slabs)?);
        }
        if values.iter().all(|v| *v == values[0]) {
            continue;
        }
        along.push((dim, values));
    }
    let (dim, values) = match along.len() {
        0 => {
            return Err(
                "Could not find any dimension coordinates to use to order the \
                        datasets for concatenation"
                    .into(),
            );
        }
        1 => along.pop().expect("one"),
        _ => {
            let names: Vec<&str> = along.iter().map(|(d, _)| d.as_str()).collect();
            return Err(format!(
                "the sources differ along {names:?}: combining along several dimensions at \
                 once is not supported"
            ));
        }
    };
    let increasing = values.iter().all(|v| v.windows(2).all(|w| w[0] <= w[1]));
    let decreasing = values.iter().all(|v| v.windows(2).all(|w| w[0] >= w[1]));
    if !increasing && !decreasing {
        return Err(format!(
            "Coordinate variable {dim} is neither monotonically increasing nor monotonically \
             decreasing on all datasets"
        ));
    }
    if values.iter().any(Vec::is_empty) {
        return Err(format!("Cannot handle size zero dimensions: {dim}"));
    }
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| {
        let ordering = values[a][0].total_cmp(&values[b][0]);
        if decreasing && !increasing {
            ordering.reverse()
        } else {
            ordering
        }
    });
    let mut slots: Vec<Option<Part>> = parts.into_iter().map(Some).collect();
    let ordered = order
        .into_iter()
        .map(|n| slots[n].take().expect("each once"))
        .collect();
    Ok((dim, ordered))
}

/// Whether values never go down, or never go up.
fn monotonic(values: &[f64]) -> bool {
    values.windows(2).all(|w| w[0] <= w[1]) || values.windows(2).all(|w| w[0] >= w[1])
}

/// Checks that the parts' indexes and dimension sizes agree on every dimension but `except`.
fn align(
    parts: &[Part],
    join: Join,
    except: Option<&str>,
    slabs: &mut dyn Slabs,
) -> Result<(), String> {
    let mut dims: Vec<String> = Vec::new();
    for part in parts {
        for dim in part.dims() {
            if !dims.contains(&dim) && Some(dim.as_str()) != except {
                dims.push(dim);
            }
        }
    }
    for dim in dims {
        let with: Vec<&Part> = parts.iter().filter(|p| p.dim(&dim).is_some()).collect();
        let indexed: Vec<&Part> = with
            .iter()
            .copied()
            .filter(|p| p.index(&dim).is_some())
            .collect();
        if indexed.len() > 1 {
            let first = block(indexed[0].index(&dim).expect("indexed"), slabs)?;
            for other in &indexed[1..] {
                if block(other.index(&dim).expect("indexed"), slabs)? != first {
                    return Err(match join {
                        Join::Exact => format!(
                            "cannot align objects with join='exact' where index/labels/sizes \
                             are not equal along these coordinates (dimensions): {dim:?}: \
                             {} and {} differ",
                            indexed[0].shown(),
                            other.shown()
                        ),
                        _ => format!(
                            "the index {dim:?} differs between {} and {}: realigning \
                             indexes (join='{}') is not supported yet",
                            indexed[0].shown(),
                            other.shown(),
                            join_name(join)
                        ),
                    });
                }
            }
        }
        let sizes: Vec<u64> = with.iter().filter_map(|p| p.dim(&dim)).collect();
        if let Some(n) = sizes.iter().position(|&s| s != sizes[0]) {
            return Err(format!(
                "dimension {dim:?} has size {} in {} and {} in {}",
                sizes[0],
                with[0].shown(),
                sizes[n],
                with[n].shown()
            ));
        }
    }
    Ok(())
}

fn join_name(join: Join) -> &'static str {
    match join {
        Join::Outer => "outer",
        Join::Inner => "inner",
        Join::Left => "left",
        Join::Right => "right",
        Join::Exact => "exact",
    }
}

/// `xr.merge`: the union of the parts' variables; a name in several parts must agree.
fn merge(parts: &[Part], aggregation: &Aggregation, slabs: &mut dyn Slabs) -> Result<Part, String> {
    let join = aggregation.join.unwrap_or(Join::Outer);
    let compat = aggregation.compat.unwrap_or(Compat::NoConflicts);
    align(parts, join, None, slabs)?;
    let mut vars: Vec<CombinedVar> = Vec::new();
    let mut names = Vec::new();
    for part in parts {
        names.extend(part.names.iter().cloned());
        for var in &part.vars {
            match vars.iter().find(|v| v.info.name == var.info.name) {
                None => vars.push(var.clone()),
                Some(first) => agree(first, var, compat, slabs)?,
            }
        }
    }
    Ok(Part {
        attrs: parts.first().map(|p| p.attrs.clone()).unwrap_or_default(),
        vars,
        names,
    })
}

/// Checks that `other` agrees with `first` by `compat`.
fn agree(
    first: &CombinedVar,
    other: &CombinedVar,
    compat: Compat,
    slabs: &mut dyn Slabs,
) -> Result<(), String> {
    if compat == Compat::Override {
        return Ok(());
    }
    let name = &first.info.name;
    if first.info.dims != other.info.dims {
        return Err(format!(
            "conflicting values for variable {name:?}: its dimensions differ ({:?} and {:?})",
            dim_names(&first.info.dims),
            dim_names(&other.info.dims)
        ));
    }
    if first.info.dtype != other.info.dtype {
        return Err(format!(
            "variable {name:?} is {} in one source and {} in another: combining different \
             types is not supported",
            first.info.dtype.zarr(),
            other.info.dtype.zarr()
        ));
    }
    match compare(first, other, slabs)? {
        Agreement::Equal => Ok(()),
        Agreement::MissingDiffers if compat == Compat::NoConflicts => Err(format!(
            "variable {name:?} is missing in different places in different sources: \
             filling one from another (compat='no_conflicts') is not supported yet"
        )),
        Agreement::MissingDiffers | Agreement::Conflict => Err(format!(
            "conflicting values for variable {name:?} on objects to be combined. You can \
             skip this check by specifying compat='override'."
        )),
    }
}

fn dim_names(dims: &[Dim]) -> Vec<&str> {
    dims.iter().map(|d| d.name.as_str()).collect()
}

/// How two variables of the same shape and type compare.
#[derive(Debug, PartialEq, Eq)]
enum Agreement {
    /// Equal, NaN equal to NaN.
    Equal,
    /// Equal where both have values; one misses values where the other has them.
    MissingDiffers,
    /// Different values somewhere both have one.
    Conflict,
}

/// Compares two variables of the same dimensions and type, a slab along the first axis at a
/// time.
fn compare(a: &CombinedVar, b: &CombinedVar, slabs: &mut dyn Slabs) -> Result<Agreement, String> {
    let shape: Vec<u64> = a.info.dims.iter().map(|d| d.len).collect();
    let mut result = Agreement::Equal;
    for (start, count) in slab_ranges(&shape, a.info.dtype.size()) {
        let x = read_block(slabs, a, &start, &count)?;
        let y = read_block(slabs, b, &start, &count)?;
        match compare_values(&x, &y, a.info.dtype) {
            Agreement::Conflict => return Ok(Agreement::Conflict),
            Agreement::MissingDiffers => result = Agreement::MissingDiffers,
            Agreement::Equal => {}
        }
    }
    Ok(result)
}

/// Slabs along the first axis of a variable of `shape`, each of at most
/// [`COMPARE_ELEMENTS`] elements (or one index of the first axis).
fn slab_ranges(shape: &[u64], _item: u64) -> Vec<(Vec<u64>, Vec<u64>)> {
    if shape.is_empty() {
        return vec![(Vec::new(), Vec::new())];
    }
    let row: u64 = shape[1..].iter().product::<u64>().max(1);
    let step = (COMPARE_ELEMENTS / row).max(1);
    let mut ranges = Vec::new();
    let mut at = 0;
    while at < shape[0] {
        let n = step.min(shape[0] - at);
        let mut start = vec![0; shape.len()];
        start[0] = at;
        let mut count = shape.to_vec();
        count[0] = n;
        ranges.push((start, count));
        at += n;
    }
    ranges
}

/// Compares values as numbers of `dtype`: NaN equals NaN, and is missing.
fn compare_values(x: &[u8], y: &[u8], dtype: Dtype) -> Agreement {
    use netcdf::types::FloatType;
    fn floats<const N: usize>(x: &[u8], y: &[u8], value: impl Fn([u8; N]) -> f64) -> Agreement {
        let mut result = Agreement::Equal;
        for (a, b) in x.chunks_exact(N).zip(y.chunks_exact(N)) {
            let a = value(a.try_into().expect("N bytes"));
            let b = value(b.try_into().expect("N bytes"));
            if a == b || (a.is_nan() && b.is_nan()) {
                continue;
            }
            if a.is_nan() || b.is_nan() {
                result = Agreement::MissingDiffers;
            } else {
                return Agreement::Conflict;
            }
        }
        result
    }
    match dtype {
        Dtype::Float(FloatType::F32) => floats::<4>(x, y, |b| f64::from(f32::from_le_bytes(b))),
        Dtype::Float(FloatType::F64) => floats::<8>(x, y, f64::from_le_bytes),
        _ if x == y => Agreement::Equal,
        _ => Agreement::Conflict,
    }
}

/// The values of a 1-D numeric variable as floats (for ordering indexes).
fn numbers(var: &CombinedVar, slabs: &mut dyn Slabs) -> Result<Vec<f64>, String> {
    use netcdf::types::{FloatType, IntType};
    let bytes = block(var, slabs)?;
    let each = |n: usize, f: &dyn Fn(&[u8]) -> f64| bytes.chunks_exact(n).map(f).collect();
    #[expect(
        clippy::cast_precision_loss,
        reason = "ordering, as numpy compares them"
    )]
    let values = match var.info.dtype {
        Dtype::Float(FloatType::F32) => each(4, &|b| {
            f64::from(f32::from_le_bytes(b.try_into().expect("4")))
        }),
        Dtype::Float(FloatType::F64) => each(8, &|b| f64::from_le_bytes(b.try_into().expect("8"))),
        Dtype::Int(IntType::I8) => each(1, &|b| f64::from(b[0] as i8)),
        Dtype::Int(IntType::U8) | Dtype::Char => each(1, &|b| f64::from(b[0])),
        Dtype::Int(IntType::I16) => each(2, &|b| {
            f64::from(i16::from_le_bytes(b.try_into().expect("2")))
        }),
        Dtype::Int(IntType::U16) => each(2, &|b| {
            f64::from(u16::from_le_bytes(b.try_into().expect("2")))
        }),
        Dtype::Int(IntType::I32) => each(4, &|b| {
            f64::from(i32::from_le_bytes(b.try_into().expect("4")))
        }),
        Dtype::Int(IntType::U32) => each(4, &|b| {
            f64::from(u32::from_le_bytes(b.try_into().expect("4")))
        }),
        Dtype::Int(IntType::I64) => {
            each(8, &|b| i64::from_le_bytes(b.try_into().expect("8")) as f64)
        }
        Dtype::Int(IntType::U64) => {
            each(8, &|b| u64::from_le_bytes(b.try_into().expect("8")) as f64)
        }
        Dtype::String => {
            return Err(format!("index {:?} holds strings", var.info.name));
        }
    };
    Ok(values)
}

/// All values of a variable (an index: small).
fn block(var: &CombinedVar, slabs: &mut dyn Slabs) -> Result<Vec<u8>, String> {
    let shape: Vec<u64> = var.info.dims.iter().map(|d| d.len).collect();
    read_block(slabs, var, &vec![0; shape.len()], &shape)
}

/// `xr.concat` along `dim`.
fn concat(
    parts: &[Part],
    dim: &str,
    options: &ConcatOptions,
    slabs: &mut dyn Slabs,
) -> Result<Part, String> {
    for (option, which) in [("data_vars", options.data_vars), ("coords", options.coords)] {
        if which == Concatenated::Different && options.compat == Compat::Override {
            return Err(format!(
                "Cannot specify both {option}='different' and compat='override'."
            ));
        }
    }
    align(parts, options.join, Some(dim), slabs)?;
    // Each part's length along `dim` (1 where it does not have it).
    let lens: Vec<u64> = parts.iter().map(|p| p.dim(dim).unwrap_or(1)).collect();
    let total: u64 = lens.iter().sum();
    // The variables in order of first appearance.
    let mut order: Vec<String> = Vec::new();
    for part in parts {
        for var in &part.vars {
            if !order.contains(&var.info.name) {
                order.push(var.info.name.clone());
            }
        }
    }
    let mut vars = Vec::with_capacity(order.len());
    for name in &order {
        let present: Vec<(usize, &CombinedVar)> = parts
            .iter()
            .enumerate()
            .filter_map(|(n, p)| p.var(name).map(|v| (n, v)))
            .collect();
        let (_, first) = present[0];
        let has_dim = present
            .iter()
            .any(|(_, v)| v.info.dims.iter().any(|d| d.name == dim));
        let concatenated = has_dim
            || (!first.info.is_coordinate()
                && match options.data_vars {
                    Concatenated::All => true,
                    Concatenated::Minimal => false,
                    Concatenated::Different => {
                        let mut differs = present.len() != parts.len();
                        for (_, other) in &present[1..] {
                            if differs {
                                break;
                            }
                            differs = other.info.dims != first.info.dims
                                || other.info.dtype != first.info.dtype
                                || compare(first, other, slabs)? != Agreement::Equal;
                        }
                        differs
                    }
                });
        if !concatenated {
            if present.len() != parts.len() {
                return Err(format!(
                    "variable {name:?} is present in some datasets but not others"
                ));
            }
            for (_, other) in &present[1..] {
                agree(first, other, options.compat, slabs)?;
            }
            vars.push(first.clone());
            continue;
        }
        vars.push(concatenated_var(parts, &lens, total, dim, name, &present)?);
    }
    let mut names = Vec::new();
    for part in parts {
        names.extend(part.names.iter().cloned());
    }
    Ok(Part {
        attrs: parts[0].attrs.clone(),
        vars,
        names,
    })
}

/// Variable `name` concatenated along `dim` from the parts that have it (`present`).
fn concatenated_var(
    parts: &[Part],
    lens: &[u64],
    total: u64,
    dim: &str,
    name: &str,
    present: &[(usize, &CombinedVar)],
) -> Result<CombinedVar, String> {
    let (_, first) = present[0];
    // The dimensions of the result: the variable's own, with `dim` first if it lacks it.
    let with_dim = present
        .iter()
        .find(|(_, v)| v.info.dims.iter().any(|d| d.name == dim))
        .map(|(_, v)| v);
    let mut dims: Vec<Dim> = match with_dim {
        Some(v) => v.info.dims.clone(),
        None => {
            let mut dims = vec![Dim {
                name: dim.to_string(),
                len: 0,
            }];
            dims.extend(first.info.dims.iter().cloned());
            dims
        }
    };
    let axis = dims
        .iter()
        .position(|d| d.name == dim)
        .expect("the result has the axis");
    dims[axis].len = total;
    let others: Vec<&Dim> = dims.iter().filter(|d| d.name != dim).collect();
    let mut pieces = Vec::new();
    let mut start = 0;
    for (n, part) in parts.iter().enumerate() {
        let len = lens[n];
        let Some(var) = part.var(name) else {
            if !matches!(first.info.dtype, Dtype::Float(_)) {
                return Err(format!(
                    "variable {name:?} is missing from {} and is not a float variable that \
                     could be filled with NaN",
                    part.shown()
                ));
            }
            pieces.push(Piece {
                source: None,
                start,
                len,
                from: Some(0),
            });
            start += len;
            continue;
        };
        if var.info.dtype != first.info.dtype {
            return Err(format!(
                "variable {name:?} is {} in {} and {} in {}: combining different types is \
                 not supported",
                first.info.dtype.zarr(),
                parts[present[0].0].shown(),
                var.info.dtype.zarr(),
                part.shown()
            ));
        }
        let own: Vec<&Dim> = var.info.dims.iter().filter(|d| d.name != dim).collect();
        if own != others {
            return Err(format!(
                "variable {name:?} has dimensions {:?} in {} but {:?} in {}",
                dim_names(&var.info.dims),
                part.shown(),
                dim_names(&dims),
                parts[present[0].0].shown()
            ));
        }
        let has_axis = var.info.dims.iter().any(|d| d.name == dim);
        if has_axis && var.info.dims.iter().position(|d| d.name == dim) != Some(axis) {
            return Err(format!(
                "variable {name:?} has {dim:?} at another position in {}",
                part.shown()
            ));
        }
        match (&var.origin, has_axis) {
            (Origin::Whole(source), true) => pieces.push(Piece {
                source: Some(*source),
                start,
                len,
                from: Some(0),
            }),
            (Origin::Whole(source), false) => pieces.push(Piece {
                source: Some(*source),
                start,
                len,
                from: None,
            }),
            (
                Origin::Along {
                    axis: inner,
                    pieces: inner_pieces,
                },
                true,
            ) if *inner == axis => {
                pieces.extend(inner_pieces.iter().map(|p| Piece {
                    start: start + p.start,
                    ..p.clone()
                }));
            }
            _ => {
                return Err(format!(
                    "variable {name:?} would be combined along two dimensions at once, which \
                     is not supported"
                ));
            }
        }
        start += len;
    }
    Ok(CombinedVar {
        info: VarInfo {
            dims,
            ..first.info.clone()
        },
        origin: Origin::Along { axis, pieces },
    })
}

/// The values of the block `start`/`count` of a combined variable, in C order.
///
/// # Errors
/// A sentence naming the file and variable that could not be read.
pub(crate) fn read_block(
    slabs: &mut dyn Slabs,
    var: &CombinedVar,
    start: &[u64],
    count: &[u64],
) -> Result<Vec<u8>, String> {
    let name = &var.info.name;
    let (axis, pieces) = match &var.origin {
        Origin::Whole(source) => return slabs.read(*source, name, start, count),
        Origin::Along { axis, pieces } => (*axis, pieces),
    };
    let item = to_usize(var.info.dtype.size());
    let total: u64 = count.iter().product();
    let mut out = vec![0u8; to_usize(total) * item];
    let outer = to_usize(count[..axis].iter().product());
    let inner = to_usize(count[axis + 1..].iter().product()) * item;
    let (first, end) = (start[axis], start[axis] + count[axis]);
    for piece in pieces {
        let (lo, hi) = (first.max(piece.start), end.min(piece.start + piece.len));
        if lo >= hi {
            continue;
        }
        let k = to_usize(hi - lo);
        let at = to_usize(lo - first);
        let along = to_usize(count[axis]);
        // The slab, `k` long along the axis (once, to be repeated, when `from` is None).
        let (slab, repeated) = match (piece.source, piece.from) {
            (None, _) => (nan(var.info.dtype, outer * k * inner / item.max(1)), false),
            (Some(source), Some(from)) => {
                let mut s = start.to_vec();
                let mut c = count.to_vec();
                s[axis] = from + (lo - piece.start);
                c[axis] = hi - lo;
                (slabs.read(source, name, &s, &c)?, false)
            }
            (Some(source), None) => {
                let mut s = start.to_vec();
                let mut c = count.to_vec();
                s.remove(axis);
                c.remove(axis);
                (slabs.read(source, name, &s, &c)?, true)
            }
        };
        for o in 0..outer {
            if repeated {
                let row = &slab[o * inner..(o + 1) * inner];
                for j in 0..k {
                    let target = (o * along + at + j) * inner;
                    out[target..target + inner].copy_from_slice(row);
                }
            } else {
                let target = (o * along + at) * inner;
                let source = o * k * inner;
                out[target..target + k * inner].copy_from_slice(&slab[source..source + k * inner]);
            }
        }
    }
    Ok(out)
}

/// `n` NaNs of a float type, little-endian.
fn nan(dtype: Dtype, n: usize) -> Vec<u8> {
    use netcdf::types::FloatType;
    match dtype {
        Dtype::Float(FloatType::F32) => f32::NAN.to_le_bytes().repeat(n),
        Dtype::Float(FloatType::F64) => f64::NAN.to_le_bytes().repeat(n),
        other => vec![0; n * to_usize(other.size())],
    }
}

/// The groups of the store from the combined parts.
pub(crate) fn groups(parts: &[(String, Part)]) -> Vec<GroupInfo> {
    parts
        .iter()
        .map(|(name, part)| GroupInfo {
            name: name.clone(),
            attrs: part.attrs.clone(),
            vars: part.vars.iter().map(|v| v.info.clone()).collect(),
        })
        .collect()
}
