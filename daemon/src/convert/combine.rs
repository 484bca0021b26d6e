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
//! Indexes of a dimension that differ between sources are aligned by `join` as `xr.align`
//! does ([`align`]): variables are realigned to the joined index, NaN where a source lacks a
//! label. Variables merged under `no_conflicts` that miss values in different places are
//! combined, each element the first value present.
//!
//! Decided where xarray would go on and this server fails the store with a reason that says
//! so: an integer variable that realigning would give missing values (xarray makes it a
//! float); the same variable with different types; string variables; a combination along
//! two dimensions at once (a 2-D tiling).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::metadata::{Dtype, GroupInfo, MetadataBudget, VarInfo};
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

    /// What the conversion's metadata may still take, which the slabs a combination
    /// describes take from too ([`super::metadata::MetadataBudget::take_slabs`]): a
    /// concatenation describes each variable of any part once for every part, so 1,000
    /// sources of a few variables each but 4,000 in all would be 4 million slabs.
    fn budget(&self) -> &MetadataBudget;
}

/// `attempt(slabs)`, with what it described given back when it fails: a way of combining
/// that fails frees what it built, and the next way is tried.
fn attempt<T>(
    slabs: &mut dyn Slabs,
    attempt: impl FnOnce(&mut dyn Slabs) -> Result<T, String>,
) -> Result<T, String> {
    let left = slabs.budget().left();
    let result = attempt(slabs);
    if result.is_err() {
        slabs.budget().give_back(left);
    }
    result
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
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Origin {
    /// The variable of the same name of one source.
    Source(usize),
    /// Values worked out from the sources: a joined index (small).
    Values(Arc<[u8]>),
    /// Slabs along one axis, in order, covering it.
    Along {
        /// The axis.
        axis: usize,
        /// The slabs.
        pieces: Vec<Piece>,
    },
    /// Another origin's values, of type `from`, as the variable's type.
    Cast {
        /// The type `inner` gives.
        from: Dtype,
        /// What is cast.
        inner: Box<Origin>,
    },
    /// Element by element, the first of these origins' values that is not NaN (variables
    /// merged under `compat=no_conflicts` that miss values in different places).
    FirstPresent(Vec<Origin>),
    /// Another origin realigned along one axis to a joined index: position `j` of the
    /// result is position `map[j]` of `inner` (`None`: a label `inner` lacks, NaN).
    Realigned {
        /// The axis.
        axis: usize,
        /// Positions in `inner` by position in the result.
        map: Arc<[Option<u64>]>,
        /// What is realigned.
        inner: Box<Origin>,
    },
    /// Another variable's values CF-decoded (masked and scaled) and cast to the variable's
    /// type ([`super::reduce`]).
    Decoded(Arc<super::reduce::Decoded>),
    /// Another variable's values reduced in time ([`super::reduce`]).
    Reduced(Arc<super::reduce::Reduced>),
    /// Strings worked out from the sources (the seasons of a climatology; small).
    Strings(Arc<[String]>),
}

/// A slab of a combined variable along its concatenation axis.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Piece {
    /// Where its values come from, from position 0 along the axis; `None`: missing from
    /// that source, all NaN.
    pub(crate) origin: Option<Origin>,
    /// Its first position along the axis in the combined variable.
    pub(crate) start: u64,
    /// Its length along the axis.
    pub(crate) len: u64,
    /// Whether `origin` lacks the axis and is repeated `len` times along it.
    pub(crate) repeated: bool,
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
    pub(crate) names: Vec<String>,
}

impl Part {
    /// Source `source` as it is.
    pub(crate) fn of(source: usize, dataset: &Dataset) -> Self {
        Part {
            attrs: dataset.attrs.clone(),
            vars: dataset
                .vars
                .iter()
                .map(|info| CombinedVar {
                    info: info.clone(),
                    origin: Origin::Source(source),
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

    /// Its dimension names in xarray's order: of first use by its data variables, then by
    /// its indexes (xarray lists a dataset's data variables before its coordinates).
    fn dims(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let (indexes, data): (Vec<&CombinedVar>, Vec<&CombinedVar>) =
            self.vars.iter().partition(|v| v.info.is_coordinate());
        for dim in data.iter().chain(&indexes).flat_map(|v| &v.info.dims) {
            if seen.insert(dim.name.as_str()) {
                names.push(dim.name.clone());
            }
        }
        names
    }

    /// Its dimensions' lengths and its indexes' positions in `vars`, by dimension name.
    fn dims_by_name(&self) -> DimsByName {
        let mut by_name = DimsByName::default();
        for (at, var) in self.vars.iter().enumerate() {
            if var.info.is_coordinate() {
                by_name.index.entry(var.info.name.clone()).or_insert(at);
            }
            for dim in &var.info.dims {
                by_name.len.entry(dim.name.clone()).or_insert(dim.len);
            }
        }
        by_name
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

/// A part's dimensions looked up by name, as [`Part::dim`] and [`Part::index`] find them
/// (sources may have thousands of variables and dimensions each).
#[derive(Default)]
struct DimsByName {
    len: HashMap<String, u64>,
    index: HashMap<String, usize>,
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
    let direct = attempt(slabs, |slabs| match aggregation.mode {
        Mode::Auto => auto(parts.clone(), aggregation, slabs),
        Mode::Merge => merge(&parts, aggregation, slabs),
        Mode::Concat => {
            let dim = concat_dim(&parts, aggregation);
            match dim {
                Some(dim) => concat(&parts, &dim, &concat_options(aggregation), slabs),
                None => Err("no dimension to concatenate along: the sources share none".into()),
            }
        }
    });
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
    let mut at: HashMap<String, usize> = HashMap::new();
    for part in parts {
        let signature = signature(&part, key);
        match at.get(&signature) {
            Some(&n) => groups[n].1.push(part),
            None => {
                at.insert(signature.clone(), groups.len());
                groups.push((signature, vec![part]));
            }
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
    let by_coords = attempt(slabs, |slabs| by_coords(parts.clone(), aggregation, slabs));
    if by_coords.is_ok() {
        return by_coords;
    }
    if let Some(dim) = &aggregation.dim
        && let Ok(part) = attempt(slabs, |slabs| {
            concat(&parts, dim, &combine_options(aggregation), slabs)
        })
    {
        return Ok(part);
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
    let mut seen = std::collections::HashSet::new();
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
    let by_name: Vec<DimsByName> = parts.iter().map(Part::dims_by_name).collect();
    let all_have = |name: &str| by_name.iter().all(|b| b.len.contains_key(name));
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

/// The defaults of `combine_by_coords` and `combine_nested` under the user's options.
fn combine_options(aggregation: &Aggregation) -> ConcatOptions {
    ConcatOptions {
        join: aggregation.join.unwrap_or(Join::Outer),
        compat: aggregation.compat.unwrap_or(Compat::NoConflicts),
        data_vars: aggregation.data_vars.unwrap_or(Concatenated::All),
        coords: aggregation.coords.unwrap_or(Concatenated::Different),
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
    let mut at: HashMap<Vec<String>, usize> = HashMap::new();
    for part in parts {
        let mut key: Vec<String> = part
            .data_var_names()
            .into_iter()
            .map(str::to_string)
            .collect();
        key.sort_unstable();
        match at.get(&key) {
            Some(&n) => groups[n].1.push(part),
            None => {
                at.insert(key.clone(), groups.len());
                groups.push((key, vec![part]));
            }
        }
    }
    let options = combine_options(aggregation);
    let mut concatenated = Vec::with_capacity(groups.len());
    for (_, members) in groups {
        if members.len() == 1 {
            concatenated.extend(members);
            continue;
        }
        let (dims, dim, mut current) = order_by_index(members, slabs)?;
        for along in &dims {
            current = if *along == dim {
                vec![concat(&current, along, &options, slabs)?]
            } else {
                current
                    .iter()
                    .map(|part| concat(std::slice::from_ref(part), along, &options, slabs))
                    .collect::<Result<_, _>>()?
            };
        }
        let part = current.pop().expect("one part");
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

/// The concatenation order `combine_by_coords` infers: the dimensions whose indexes differ
/// between the parts (in the first part's order), the one of them along which the parts are
/// concatenated (the first values of its indexes all differ), and the parts in the order of
/// that first value. Along the others the first values are all equal: each part is
/// "concatenated" alone along them, as xarray does, which adds them to data variables that
/// lack them.
fn order_by_index(
    parts: Vec<Part>,
    slabs: &mut dyn Slabs,
) -> Result<(Vec<String>, String, Vec<Part>), String> {
    let mut differing = Vec::new();
    // The values of every dimension's indexes are kept until the order is found: bounded
    // together.
    let dims = parts[0].dims();
    let by_name: Vec<DimsByName> = parts.iter().map(Part::dims_by_name).collect();
    let index = |n: usize, dim: &str| by_name[n].index.get(dim).map(|&at| &parts[n].vars[at]);
    check_index_values(
        &dims.join(", "),
        dims.iter()
            .filter(|dim| index(0, dim).is_some())
            .flat_map(|dim| (0..parts.len()).filter_map(move |n| index(n, dim))),
    )?;
    for dim in dims {
        if index(0, &dim).is_none() {
            continue;
        }
        let mut values = Vec::with_capacity(parts.len());
        for (n, part) in parts.iter().enumerate() {
            let index = index(n, &dim).ok_or_else(|| {
                format!(
                    "Every dimension requires a corresponding 1D coordinate and index for \
                     inferring concatenation order: {} has no index of {dim:?}",
                    part.shown()
                )
            })?;
            values.push(numbers(index, slabs)?);
        }
        if values.iter().all(|v| *v == values[0]) {
            continue;
        }
        let increasing = values.iter().all(|v| v.windows(2).all(|w| w[0] <= w[1]));
        let decreasing = values.iter().all(|v| v.windows(2).all(|w| w[0] >= w[1]));
        if !increasing && !decreasing {
            return Err(format!(
                "Coordinate variable {dim} is neither monotonically increasing nor \
                 monotonically decreasing on all datasets"
            ));
        }
        if values.iter().any(Vec::is_empty) {
            return Err("Cannot handle size zero dimensions".into());
        }
        differing.push((dim, values, increasing));
    }
    if differing.is_empty() {
        return Err(
            "Could not find any dimension coordinates to use to order the datasets \
                    for concatenation"
                .into(),
        );
    }
    let firsts_differ = |values: &[Vec<f64>]| {
        let mut firsts: Vec<u64> = values.iter().map(|v| key(v[0])).collect();
        firsts.sort_unstable();
        firsts.dedup();
        firsts.len()
    };
    let real: Vec<usize> = (0..differing.len())
        .filter(|&d| firsts_differ(&differing[d].1) > 1)
        .collect();
    let [along] = real.as_slice() else {
        let names: Vec<&str> = real.iter().map(|&d| differing[d].0.as_str()).collect();
        return Err(format!(
            "The supplied objects do not form a hypercube along one dimension: they differ \
             along {names:?}, and combining along several dimensions at once (or along none) \
             is not supported"
        ));
    };
    let (dim, values, increasing) = &differing[*along];
    if firsts_differ(values) != parts.len() {
        return Err(format!(
            "The supplied objects do not form a hypercube because sub-lists do not have \
             consistent lengths: two sources start at the same {dim:?}"
        ));
    }
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| {
        let ordering = values[a][0].total_cmp(&values[b][0]);
        if *increasing {
            ordering
        } else {
            ordering.reverse()
        }
    });
    let dims = differing.iter().map(|(d, _, _)| d.clone()).collect();
    let dim = dim.clone();
    let mut slots: Vec<Option<Part>> = parts.into_iter().map(Some).collect();
    let ordered = order
        .into_iter()
        .map(|n| slots[n].take().expect("each once"))
        .collect();
    Ok((dims, dim, ordered))
}

/// Whether values never go down, or never go up.
fn monotonic(values: &[f64]) -> bool {
    values.windows(2).all(|w| w[0] <= w[1]) || values.windows(2).all(|w| w[0] >= w[1])
}

/// The parts aligned on every dimension but `except`, as `xr.align` with `join`: where
/// their indexes of a dimension differ, each part's variables along it are realigned to the
/// joined index (`outer`: the sorted union of the labels; `inner`: the first part's labels
/// that every part has; `left` / `right`: the first / last part's), NaN where a part lacks a
/// label. Dimensions without an index must have one size.
fn align(
    parts: &[Part],
    join: Join,
    except: Option<&str>,
    slabs: &mut dyn Slabs,
) -> Result<Vec<Part>, String> {
    let mut parts = parts.to_vec();
    let mut dims: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for part in &parts {
        for dim in part.dims() {
            if Some(dim.as_str()) != except && seen.insert(dim.clone()) {
                dims.push(dim);
            }
        }
    }
    // Realigning changes the lengths of the dimension realigned, and nothing else of them.
    let mut by_name: Vec<DimsByName> = parts.iter().map(Part::dims_by_name).collect();
    for dim in dims {
        let indexed: Vec<usize> = (0..parts.len())
            .filter(|&n| by_name[n].index.contains_key(&dim))
            .collect();
        fn index<'p>(
            parts: &'p [Part],
            by_name: &[DimsByName],
            n: usize,
            dim: &str,
        ) -> &'p CombinedVar {
            &parts[n].vars[by_name[n].index[dim]]
        }
        if indexed.len() > 1 {
            check_index_values(
                &dim,
                indexed.iter().map(|&n| index(&parts, &by_name, n, &dim)),
            )?;
            let mut bytes = Vec::with_capacity(indexed.len());
            for &n in &indexed {
                bytes.push(block(index(&parts, &by_name, n, &dim), slabs)?);
            }
            if let Some(other) = (1..bytes.len()).find(|&i| bytes[i] != bytes[0]) {
                if join == Join::Exact {
                    return Err(format!(
                        "cannot align objects with join='exact' where index/labels/sizes are \
                         not equal along these coordinates (dimensions): {dim:?}: {} and {} \
                         differ",
                        parts[indexed[0]].shown(),
                        parts[indexed[other]].shown()
                    ));
                }
                realign(&mut parts, &indexed, &bytes, &dim, join)?;
                for &n in &indexed {
                    if let Some(len) = parts[n].dim(&dim) {
                        by_name[n].len.insert(dim.clone(), len);
                    }
                }
            }
        }
        let (with, sizes): (Vec<&Part>, Vec<u64>) = parts
            .iter()
            .zip(&by_name)
            .filter_map(|(p, by_name)| Some((p, *by_name.len.get(&dim)?)))
            .unzip();
        if let Some(n) = sizes.iter().position(|&s| s != sizes[0]) {
            return Err(format!(
                "cannot reindex or align along dimension {dim:?} because of conflicting \
                 dimension sizes: {} in {} and {} in {}",
                sizes[0],
                with[0].shown(),
                sizes[n],
                with[n].shown()
            ));
        }
    }
    Ok(parts)
}

/// Realigns the parts `indexed` (those with an index of `dim`, whose indexes differ; their
/// values are `raws`) to their joined index.
fn realign(
    parts: &mut [Part],
    indexed: &[usize],
    raws: &[Vec<u8>],
    dim: &str,
    join: Join,
) -> Result<(), String> {
    let first = parts[indexed[0]].index(dim).expect("indexed").info.clone();
    let item = to_usize(first.dtype.size());
    // Each part's labels as numbers, with the bytes of each label.
    let mut labels: Vec<Vec<f64>> = Vec::with_capacity(indexed.len());
    let mut bytes_of: HashMap<u64, Vec<u8>> = HashMap::new();
    for (&n, raw) in indexed.iter().zip(raws) {
        let index = parts[n].index(dim).expect("indexed");
        if index.info.dtype != first.dtype {
            return Err(format!(
                "the index {dim:?} is {} in {} and {} in {}: combining different types is \
                 not supported",
                first.dtype.zarr(),
                parts[indexed[0]].shown(),
                index.info.dtype.zarr(),
                parts[n].shown()
            ));
        }
        let values =
            floats(raw, index.info.dtype).ok_or_else(|| format!("index {dim:?} holds strings"))?;
        let mut seen = std::collections::HashSet::new();
        for (value, bytes) in values.iter().zip(raw.chunks_exact(item)) {
            if !seen.insert(key(*value)) {
                return Err(format!(
                    "cannot reindex or align along dimension {dim:?} because the index of {} \
                     has duplicate values",
                    parts[n].shown()
                ));
            }
            bytes_of
                .entry(key(*value))
                .or_insert_with(|| bytes.to_vec());
        }
        labels.push(values);
    }
    let joined: Vec<f64> = match join {
        Join::Outer => {
            let mut all: Vec<f64> = labels.iter().flatten().copied().collect();
            all.sort_by(f64::total_cmp);
            all.dedup_by(|a, b| key(*a) == key(*b));
            all
        }
        Join::Inner => {
            let others: Vec<std::collections::HashSet<u64>> = labels[1..]
                .iter()
                .map(|l| l.iter().map(|w| key(*w)).collect())
                .collect();
            labels[0]
                .iter()
                .copied()
                .filter(|v| others.iter().all(|l| l.contains(&key(*v))))
                .collect()
        }
        Join::Left => labels[0].clone(),
        Join::Right => labels[labels.len() - 1].clone(),
        Join::Exact => unreachable!("exact fails before"),
    };
    let values: Vec<u8> = joined
        .iter()
        .flat_map(|v| bytes_of[&key(*v)].iter().copied())
        .collect();
    let values: Arc<[u8]> = values.into();
    let len = joined.len() as u64;
    for (slot, &n) in indexed.iter().enumerate() {
        let position: HashMap<u64, u64> = labels[slot]
            .iter()
            .enumerate()
            .map(|(p, v)| (key(*v), p as u64))
            .collect();
        let map: Vec<Option<u64>> = joined
            .iter()
            .map(|v| position.get(&key(*v)).copied())
            .collect();
        let identity = map.len() == labels[slot].len()
            && map.iter().enumerate().all(|(j, p)| *p == Some(j as u64));
        let map: Arc<[Option<u64>]> = map.into();
        let shown = parts[n].shown();
        for var in &mut parts[n].vars {
            let Some(axis) = var.info.dims.iter().position(|d| d.name == dim) else {
                continue;
            };
            var.info.dims[axis].len = len;
            if var.info.is_coordinate() {
                var.origin = Origin::Values(values.clone());
                continue;
            }
            if identity {
                continue;
            }
            if map.iter().any(Option::is_none) && !matches!(var.info.dtype, Dtype::Float(_)) {
                let Some(float) = with_missing(var.info.dtype) else {
                    return Err(format!(
                        "variable {:?} of {shown} would need missing values where it lacks \
                         labels of {dim:?}, and holds characters: filling it is not supported",
                        var.info.name
                    ));
                };
                var.origin = Origin::Cast {
                    from: var.info.dtype,
                    inner: Box::new(var.origin.clone()),
                };
                var.info.dtype = float;
            }
            var.origin = Origin::Realigned {
                axis,
                map: map.clone(),
                inner: Box::new(var.origin.clone()),
            };
        }
    }
    Ok(())
}

/// A label as a hash key: its bits, with -0 as 0 (they are one label).
fn key(value: f64) -> u64 {
    if value == 0.0 { 0 } else { value.to_bits() }
}

/// `xr.merge`: the union of the parts' variables; a name in several parts must agree.
fn merge(parts: &[Part], aggregation: &Aggregation, slabs: &mut dyn Slabs) -> Result<Part, String> {
    let join = aggregation.join.unwrap_or(Join::Outer);
    let compat = aggregation.compat.unwrap_or(Compat::NoConflicts);
    let parts = &align(parts, join, None, slabs)?;
    let mut vars: Vec<CombinedVar> = Vec::new();
    // Where each name is in `vars`.
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut names = Vec::new();
    for part in parts {
        names.extend(part.names.iter().cloned());
        for var in &part.vars {
            match at.get(&var.info.name) {
                None => {
                    at.insert(var.info.name.clone(), vars.len());
                    vars.push(var.clone());
                }
                Some(&first) => agree(&mut vars[first], var, compat, slabs)?,
            }
        }
    }
    Ok(Part {
        attrs: parts.first().map(|p| p.attrs.clone()).unwrap_or_default(),
        vars,
        names,
    })
}

/// Checks that `other` agrees with `first` by `compat`; under `no_conflicts`, `first` then
/// takes `other`'s values where it misses them.
fn agree(
    first: &mut CombinedVar,
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
        Agreement::MissingDiffers if compat == Compat::NoConflicts => {
            let mut origins = match &first.origin {
                Origin::FirstPresent(origins) => origins.clone(),
                origin => vec![origin.clone()],
            };
            origins.push(other.origin.clone());
            first.origin = Origin::FirstPresent(origins);
            Ok(())
        }
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
    for (start, count) in slab_ranges(&shape, COMPARE_ELEMENTS) {
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

/// Blocks covering a variable of `shape` in C order, each of at most `most` elements (at
/// least one): whole trailing axes as far as they fit, then a part of the next one. So each
/// block is one run of the variable's elements in C order.
pub(crate) fn slab_ranges(
    shape: &[u64],
    most: u64,
) -> impl Iterator<Item = (Vec<u64>, Vec<u64>)> + use<> {
    let most = most.max(1);
    let mut block = vec![1; shape.len()];
    let mut size = 1u64;
    for d in (0..shape.len()).rev() {
        let len = shape[d].max(1);
        if size.saturating_mul(len) <= most {
            block[d] = len;
            size *= len;
        } else {
            block[d] = (most / size).max(1);
            break;
        }
    }
    let counts: Vec<u64> = shape
        .iter()
        .zip(&block)
        .map(|(len, b)| len.div_ceil(*b))
        .collect();
    let total: u64 = counts.iter().product();
    let shape = shape.to_vec();
    (0..total).map(move |mut n| {
        let mut start = vec![0; shape.len()];
        let mut count = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            start[d] = (n % counts[d]) * block[d];
            count[d] = block[d].min(shape[d] - start[d]);
            n /= counts[d];
        }
        (start, count)
    })
}

/// Compares values as numbers of `dtype`: NaN equals NaN, and is missing.
fn compare_values(x: &[u8], y: &[u8], dtype: Dtype) -> Agreement {
    let (Dtype::Float(_), Some(x), Some(y)) = (dtype, floats(x, dtype), floats(y, dtype)) else {
        return if x == y {
            Agreement::Equal
        } else {
            Agreement::Conflict
        };
    };
    let mut result = Agreement::Equal;
    for (a, b) in x.into_iter().zip(y) {
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

/// The values of a 1-D numeric variable as floats (for ordering indexes).
fn numbers(var: &CombinedVar, slabs: &mut dyn Slabs) -> Result<Vec<f64>, String> {
    let bytes = block(var, slabs)?;
    floats(&bytes, var.info.dtype).ok_or_else(|| format!("index {:?} holds strings", var.info.name))
}

/// Little-endian values of `dtype` as floats (`None` for strings).
pub(crate) fn floats(bytes: &[u8], dtype: Dtype) -> Option<Vec<f64>> {
    use netcdf::types::{FloatType, IntType};
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        bytes
            .chunks_exact(N)
            .map(|b| f(b.try_into().expect("N bytes")))
            .collect()
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "as numpy converts 64-bit integers to floats"
    )]
    Some(match dtype {
        Dtype::Float(FloatType::F32) => each(bytes, |b| f64::from(f32::from_le_bytes(b))),
        Dtype::Float(FloatType::F64) => each(bytes, f64::from_le_bytes),
        Dtype::Int(IntType::I8) => each(bytes, |b| f64::from(i8::from_le_bytes(b))),
        Dtype::Int(IntType::U8) | Dtype::Char => each(bytes, |b: [u8; 1]| f64::from(b[0])),
        Dtype::Int(IntType::I16) => each(bytes, |b| f64::from(i16::from_le_bytes(b))),
        Dtype::Int(IntType::U16) => each(bytes, |b| f64::from(u16::from_le_bytes(b))),
        Dtype::Int(IntType::I32) => each(bytes, |b| f64::from(i32::from_le_bytes(b))),
        Dtype::Int(IntType::U32) => each(bytes, |b| f64::from(u32::from_le_bytes(b))),
        Dtype::Int(IntType::I64) => each(bytes, |b| i64::from_le_bytes(b) as f64),
        Dtype::Int(IntType::U64) => each(bytes, |b| u64::from_le_bytes(b) as f64),
        Dtype::String => return None,
    })
}

/// Little-endian integers of `dtype` as `i128` (`None` unless `dtype` is an integer).
fn integers(bytes: &[u8], dtype: Dtype) -> Option<Vec<i128>> {
    use netcdf::types::IntType;
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> i128) -> Vec<i128> {
        bytes
            .chunks_exact(N)
            .map(|b| f(b.try_into().expect("N bytes")))
            .collect()
    }
    let Dtype::Int(int) = dtype else {
        return None;
    };
    Some(match int {
        IntType::I8 => each(bytes, |b| i128::from(i8::from_le_bytes(b))),
        IntType::U8 => each(bytes, |b| i128::from(u8::from_le_bytes(b))),
        IntType::I16 => each(bytes, |b| i128::from(i16::from_le_bytes(b))),
        IntType::U16 => each(bytes, |b| i128::from(u16::from_le_bytes(b))),
        IntType::I32 => each(bytes, |b| i128::from(i32::from_le_bytes(b))),
        IntType::U32 => each(bytes, |b| i128::from(u32::from_le_bytes(b))),
        IntType::I64 => each(bytes, |b| i128::from(i64::from_le_bytes(b))),
        IntType::U64 => each(bytes, |b| i128::from(u64::from_le_bytes(b))),
    })
}

/// Values of `from` as values of `to`, a type [`promote`] gave (so nothing is lost but what
/// numpy loses too: 64-bit integers as floats).
fn cast(bytes: &[u8], from: Dtype, to: Dtype) -> Vec<u8> {
    use netcdf::types::{FloatType, IntType};
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the values fit: `to` is the promoted type of `from`"
    )]
    match to {
        Dtype::Float(FloatType::F32) => floats(bytes, from)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|v| (v as f32).to_le_bytes())
            .collect(),
        Dtype::Float(FloatType::F64) => floats(bytes, from)
            .unwrap_or_default()
            .into_iter()
            .flat_map(f64::to_le_bytes)
            .collect(),
        Dtype::Int(int) => {
            let values = integers(bytes, from).unwrap_or_default();
            let mut out = Vec::with_capacity(values.len() * to_usize(to.size()));
            for v in values {
                match int {
                    IntType::I8 => out.extend((v as i8).to_le_bytes()),
                    IntType::U8 => out.extend((v as u8).to_le_bytes()),
                    IntType::I16 => out.extend((v as i16).to_le_bytes()),
                    IntType::U16 => out.extend((v as u16).to_le_bytes()),
                    IntType::I32 => out.extend((v as i32).to_le_bytes()),
                    IntType::U32 => out.extend((v as u32).to_le_bytes()),
                    IntType::I64 => out.extend((v as i64).to_le_bytes()),
                    IntType::U64 => out.extend((v as u64).to_le_bytes()),
                }
            }
            out
        }
        Dtype::Char | Dtype::String => bytes.to_vec(),
    }
}

/// The type numpy gives values of types `a` and `b` together (`result_type`), for numbers.
fn promote(a: Dtype, b: Dtype) -> Option<Dtype> {
    use netcdf::types::{FloatType, IntType};
    let signed = |int: IntType| {
        matches!(
            int,
            IntType::I8 | IntType::I16 | IntType::I32 | IntType::I64
        )
    };
    match (a, b) {
        _ if a == b => Some(a),
        (Dtype::Float(_), Dtype::Float(_)) => Some(Dtype::Float(FloatType::F64)),
        (Dtype::Float(f), Dtype::Int(i)) | (Dtype::Int(i), Dtype::Float(f)) => Some(
            if f == FloatType::F32 && a.size().min(b.size()) <= 2 && Dtype::Int(i).size() <= 2 {
                Dtype::Float(FloatType::F32)
            } else {
                Dtype::Float(FloatType::F64)
            },
        ),
        (Dtype::Int(x), Dtype::Int(y)) => {
            let size = a.size().max(b.size());
            let int = if signed(x) == signed(y) {
                if a.size() >= b.size() { x } else { y }
            } else {
                // Mixed signs: a signed type wider than the unsigned one.
                let unsigned = if signed(x) { b.size() } else { a.size() };
                match size.max(unsigned * 2) {
                    1 | 2 => IntType::I16,
                    4 => IntType::I32,
                    8 if unsigned < 8 => IntType::I64,
                    _ => return Some(Dtype::Float(FloatType::F64)),
                }
            };
            Some(Dtype::Int(int))
        }
        _ => None,
    }
}

/// The float type an integer variable becomes when it needs missing values (xarray's
/// `maybe_promote`): 32-bit for integers of one or two bytes, else 64-bit.
pub(crate) fn with_missing(dtype: Dtype) -> Option<Dtype> {
    use netcdf::types::FloatType;
    match dtype {
        Dtype::Float(_) => Some(dtype),
        Dtype::Int(_) if dtype.size() <= 2 => Some(Dtype::Float(FloatType::F32)),
        Dtype::Int(_) => Some(Dtype::Float(FloatType::F64)),
        Dtype::Char | Dtype::String => None,
    }
}

/// The most values the indexes of one dimension may hold in all the sources of an
/// aggregation, which aligning or ordering them reads whole (128 MiB of 64-bit values). A
/// file may claim any length, and a classic file gives zeros past its end.
const MOST_INDEX_VALUES: u64 = 1 << 24;

/// Fails when `indexes`, those of `dim` in the parts, hold more than [`MOST_INDEX_VALUES`]
/// values in all: checked before any of them is read.
fn check_index_values<'v>(
    dim: &str,
    indexes: impl Iterator<Item = &'v CombinedVar>,
) -> Result<(), String> {
    let total = indexes
        .map(|var| {
            var.info
                .dims
                .iter()
                .map(|d| d.len)
                .fold(1, u64::saturating_mul)
        })
        .fold(0, u64::saturating_add);
    if total > MOST_INDEX_VALUES {
        return Err(format!(
            "the indexes of {dim:?} hold {total} values in all, more than the \
             {MOST_INDEX_VALUES} an aggregation aligns or orders"
        ));
    }
    Ok(())
}

/// All values of a variable (an index, checked by [`check_index_values`]).
fn block(var: &CombinedVar, slabs: &mut dyn Slabs) -> Result<Vec<u8>, String> {
    check_index_values(&var.info.name, std::iter::once(var))?;
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
    let parts = &align(parts, options.join, Some(dim), slabs)?;
    // Each part's length along `dim` (1 where it does not have it).
    let lens: Vec<u64> = parts.iter().map(|p| p.dim(dim).unwrap_or(1)).collect();
    let total: u64 = lens.iter().sum();
    // The variables in order of first appearance, and the parts that have each, in order
    // (looked up by name: sources may have thousands of variables each).
    let mut order: Vec<&str> = Vec::new();
    let mut present_in: HashMap<&str, Vec<(usize, &CombinedVar)>> = HashMap::new();
    for (n, part) in parts.iter().enumerate() {
        for var in &part.vars {
            let name = var.info.name.as_str();
            let present = present_in.entry(name).or_insert_with(|| {
                order.push(name);
                Vec::new()
            });
            // A part's first variable of a name is its variable of that name.
            if present.last().is_none_or(|&(last, _)| last != n) {
                present.push((n, var));
            }
        }
    }
    // Each variable concatenated is described by a slab of each part.
    slabs
        .budget()
        .take_slabs(order.len().saturating_mul(parts.len()))
        .map_err(|e| {
            format!(
                "concatenating {} sources of {} variables in all along {dim:?}: {e}",
                parts.len(),
                order.len()
            )
        })?;
    let mut vars = Vec::with_capacity(order.len());
    for name in order {
        let present = &present_in[name];
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
            // Merged from the parts that have it, as xarray merges variables it does not
            // concatenate (a part without it does not count).
            let mut merged = first.clone();
            for (_, other) in &present[1..] {
                agree(&mut merged, other, options.compat, slabs)?;
            }
            vars.push(merged);
            continue;
        }
        vars.push(concatenated_var(parts, &lens, total, dim, name, present)?);
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
    // The type of the result: numpy's for all parts' types, a float where a part lacks the
    // variable (NaN there).
    let mut dtype = first.info.dtype;
    for (_, var) in &present[1..] {
        dtype = promote(dtype, var.info.dtype).ok_or_else(|| {
            format!(
                "variable {name:?} is {} in {} and {} in another source: they cannot be \
                 combined",
                first.info.dtype.zarr(),
                parts[present[0].0].shown(),
                var.info.dtype.zarr()
            )
        })?;
    }
    if present.len() != parts.len() {
        dtype = with_missing(dtype).ok_or_else(|| {
            format!(
                "variable {name:?} is missing from some sources and holds characters, which \
                 cannot be filled"
            )
        })?;
    }
    let mut pieces = Vec::with_capacity(parts.len());
    let mut start = 0;
    let mut having = present.iter().peekable();
    for (n, part) in parts.iter().enumerate() {
        let len = lens[n];
        let Some((_, var)) = having.next_if(|(at, _)| *at == n) else {
            pieces.push(Piece {
                origin: None,
                start,
                len,
                repeated: false,
            });
            start += len;
            continue;
        };
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
        let origin = if var.info.dtype == dtype {
            var.origin.clone()
        } else {
            Origin::Cast {
                from: var.info.dtype,
                inner: Box::new(var.origin.clone()),
            }
        };
        pieces.push(Piece {
            origin: Some(origin),
            start,
            len,
            repeated: !has_axis,
        });
        start += len;
    }
    Ok(CombinedVar {
        info: VarInfo {
            dims,
            dtype,
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
    read_origin(slabs, &var.origin, &var.info, start, count)
}

/// The block `start`/`count` of the values `origin` gives for the variable `info`.
fn read_origin(
    slabs: &mut dyn Slabs,
    origin: &Origin,
    info: &VarInfo,
    start: &[u64],
    count: &[u64],
) -> Result<Vec<u8>, String> {
    let item = to_usize(info.dtype.size());
    match origin {
        Origin::Source(source) => slabs.read(*source, &info.name, start, count),
        Origin::Values(values) => {
            // A 1-D index.
            let (from, n) = (to_usize(start[0]) * item, to_usize(count[0]) * item);
            Ok(values[from..from + n].to_vec())
        }
        Origin::Along { axis, pieces } => {
            let axis = *axis;
            let mut out = vec![0u8; to_usize(count.iter().product()) * item];
            let outer = to_usize(count[..axis].iter().product());
            let inner = to_usize(count[axis + 1..].iter().product()) * item;
            let along = to_usize(count[axis]);
            let (first, end) = (start[axis], start[axis] + count[axis]);
            for piece in pieces {
                let (lo, hi) = (first.max(piece.start), end.min(piece.start + piece.len));
                if lo >= hi {
                    continue;
                }
                let k = to_usize(hi - lo);
                let at = to_usize(lo - first);
                let mut s = start.to_vec();
                let mut c = count.to_vec();
                if piece.repeated {
                    s.remove(axis);
                    c.remove(axis);
                } else {
                    s[axis] = lo - piece.start;
                    c[axis] = hi - lo;
                }
                let width = if piece.repeated { 1 } else { k };
                let slab = match &piece.origin {
                    Some(origin) => read_origin(slabs, origin, info, &s, &c)?,
                    None => nan(info.dtype, outer * width * inner / item),
                };
                for o in 0..outer {
                    for j in 0..k {
                        let source = (o * width + if piece.repeated { 0 } else { j }) * inner;
                        let target = (o * along + at + j) * inner;
                        out[target..target + inner].copy_from_slice(&slab[source..source + inner]);
                    }
                }
            }
            Ok(out)
        }
        Origin::Cast { from, inner } => {
            let given = VarInfo {
                dtype: *from,
                ..info.clone()
            };
            let values = read_origin(slabs, inner, &given, start, count)?;
            Ok(cast(&values, *from, info.dtype))
        }
        Origin::FirstPresent(origins) => {
            let mut out = read_origin(slabs, &origins[0], info, start, count)?;
            for origin in &origins[1..] {
                let next = read_origin(slabs, origin, info, start, count)?;
                fill_missing(&mut out, &next, info.dtype);
            }
            Ok(out)
        }
        Origin::Realigned { axis, map, inner } => {
            let axis = *axis;
            let wanted = &map[to_usize(start[axis])..to_usize(start[axis] + count[axis])];
            let present = wanted.iter().flatten();
            let (Some(&lo), Some(&hi)) = (present.clone().min(), present.max()) else {
                return Ok(nan(info.dtype, to_usize(count.iter().product())));
            };
            let mut s = start.to_vec();
            let mut c = count.to_vec();
            s[axis] = lo;
            c[axis] = hi - lo + 1;
            let slab = read_origin(slabs, inner, info, &s, &c)?;
            let outer = to_usize(count[..axis].iter().product());
            let row = to_usize(count[axis + 1..].iter().product()) * item;
            let (along, read) = (to_usize(count[axis]), to_usize(c[axis]));
            let missing = nan(info.dtype, row / item.max(1));
            let mut out = Vec::with_capacity(outer * along * row);
            for o in 0..outer {
                for position in wanted {
                    match position {
                        Some(p) => {
                            let from = (o * read + to_usize(p - lo)) * row;
                            out.extend_from_slice(&slab[from..from + row]);
                        }
                        None => out.extend_from_slice(&missing),
                    }
                }
            }
            debug_assert_eq!(out.len(), outer * along * row);
            Ok(out)
        }
        Origin::Decoded(decoded) => super::reduce::read_decoded(slabs, decoded, info, start, count),
        Origin::Reduced(reduced) => super::reduce::read_reduced(slabs, reduced, info, start, count),
        Origin::Strings(_) => Err(format!(
            "variable {:?} holds strings, which are not read as numbers",
            info.name
        )),
    }
}

/// Where `values` holds NaN, `other`'s value (floats; nothing else can be missing).
fn fill_missing(values: &mut [u8], other: &[u8], dtype: Dtype) {
    use netcdf::types::FloatType;
    match dtype {
        Dtype::Float(FloatType::F32) => {
            for (a, b) in values.chunks_exact_mut(4).zip(other.chunks_exact(4)) {
                if f32::from_le_bytes(a.try_into().expect("4")).is_nan() {
                    a.copy_from_slice(b);
                }
            }
        }
        Dtype::Float(FloatType::F64) => {
            for (a, b) in values.chunks_exact_mut(8).zip(other.chunks_exact(8)) {
                if f64::from_le_bytes(a.try_into().expect("8")).is_nan() {
                    a.copy_from_slice(b);
                }
            }
        }
        _ => {}
    }
}

/// `n` NaNs of a float type, little-endian.
pub(crate) fn nan(dtype: Dtype, n: usize) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_blocks_cover_a_variable_once_and_stay_bounded() {
        for shape in [
            vec![],
            vec![0],
            vec![7],
            vec![3, 5_000_000],
            vec![2, 3000, 3000],
            vec![5, 4, 3],
        ] {
            let mut covered = 0u64;
            for (start, count) in slab_ranges(&shape, COMPARE_ELEMENTS) {
                let n: u64 = count.iter().product();
                assert!(n <= COMPARE_ELEMENTS, "{shape:?}: {count:?}");
                for ((s, c), len) in start.iter().zip(&count).zip(&shape) {
                    assert!(s + c <= *len, "{shape:?}: {start:?} {count:?}");
                }
                covered += n;
            }
            let total: u64 = shape.iter().product();
            assert_eq!(covered, total, "{shape:?}");
        }
    }

    /// Reads a source's index as `index(n)`, source `n`, describing slabs from `budget`.
    struct Sources {
        budget: MetadataBudget,
        index: fn(usize) -> Vec<f64>,
    }

    impl Slabs for Sources {
        fn read(&mut self, n: usize, _: &str, _: &[u64], _: &[u64]) -> Result<Vec<u8>, String> {
            Ok((self.index)(n)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect())
        }

        fn budget(&self) -> &MetadataBudget {
            &self.budget
        }
    }

    /// Sources whose index is their number, with a conversion's whole budget.
    fn numbered() -> Sources {
        Sources {
            budget: MetadataBudget::new(),
            index: |n| vec![n as f64],
        }
    }

    /// An aggregation as a request gives it.
    fn aggregation(request: Value) -> Aggregation {
        serde_json::from_value(request).unwrap()
    }

    fn along_time(name: &str) -> VarInfo {
        VarInfo {
            name: name.into(),
            dims: vec![Dim {
                name: "time".into(),
                len: 1,
            }],
            dtype: Dtype::Float(netcdf::types::FloatType::F64),
            attrs: Map::new(),
            fill_value: Value::Null,
            packing: super::super::metadata::Packing::default(),
        }
    }

    #[test]
    fn a_concatenation_describing_more_slabs_than_a_conversion_may_is_refused() {
        // 1,000 sources, the first with 4,200 variables and the others with none but their
        // index: few variables in all, but each of the first's is described by a slab of
        // every source, 4.2 million in all, 64 bytes each: more than the 256 MiB.
        let datasets: Vec<Dataset> = (0..1000)
            .map(|n| Dataset {
                name: format!("s{n}.nc"),
                attrs: Map::new(),
                vars: std::iter::once(along_time("time"))
                    .chain((0..if n == 0 { 4200 } else { 0 }).map(|v| along_time(&format!("v{v}"))))
                    .collect(),
            })
            .collect();
        let aggregation = aggregation(serde_json::json!({"mode": "concat", "dim": "time"}));
        let Err(err) = combine(&datasets, &aggregation, &mut numbered()) else {
            panic!("combined");
        };
        assert!(
            err.contains(
                "concatenating 1000 sources of 4201 variables in all along \"time\": 4201000 \
                 slabs of the sources"
            ),
            "{err}"
        );
        // A tenth of them are combined.
        let parts = combine(&datasets[..100], &aggregation, &mut numbered()).unwrap();
        assert_eq!(parts[0].1.vars.len(), 4201);
        // Combined in groups (by grid, as when combining them together fails), the groups'
        // slabs are counted together: ten groups of 100 sources (each source of a group
        // with its grid, `lat` of the group's length; the first with 4,200 variables,
        // the others with one) are refused as one of 1,000 is.
        let grouped = Aggregation {
            group_by: Some(GroupBy::Grid),
            ..aggregation
        };
        let datasets: Vec<Dataset> = (0..1000)
            .map(|n| {
                let group = n / 100;
                let mut lat = along_time("lat");
                lat.dims = vec![Dim {
                    name: "lat".into(),
                    len: group as u64 + 1,
                }];
                let own = if n % 100 == 0 { 4200 } else { 1 };
                Dataset {
                    name: format!("s{n}.nc"),
                    attrs: Map::new(),
                    vars: [along_time("time"), lat]
                        .into_iter()
                        .chain((0..own).map(|v| along_time(&format!("g{group}v{v}"))))
                        .collect(),
                }
            })
            .collect();
        let Err(err) = combine(&datasets, &grouped, &mut numbered()) else {
            panic!("combined");
        };
        // The first nine groups fit, and the tenth is refused.
        assert!(
            err.contains("group9: concatenating 100 sources of 4202 variables in all"),
            "{err}"
        );
        assert!(err.contains("slabs of the sources"), "{err}");
    }

    #[test]
    fn what_a_way_of_combining_that_fails_described_is_given_back_for_the_next() {
        // Combining by coordinates describes 2 x 1,001 slabs (128,128 bytes) and then
        // fails (the times overlap: not monotonic); concatenating in order describes as
        // many again, and fits in 200,000 bytes only if the first attempt's are given back.
        let datasets: Vec<Dataset> = (0..2)
            .map(|n| Dataset {
                name: format!("s{n}.nc"),
                attrs: Map::new(),
                vars: std::iter::once("time".to_string())
                    .chain((0..1000).map(|v| format!("v{v}")))
                    .map(|name| {
                        let mut var = along_time(&name);
                        var.dims[0].len = 2;
                        var
                    })
                    .collect(),
            })
            .collect();
        let aggregation = aggregation(serde_json::json!({"mode": "auto"}));
        // Source `n`'s times are `n` and `n + 2`.
        let mut slabs = Sources {
            budget: MetadataBudget::of(200_000),
            index: |n| vec![n as f64, n as f64 + 2.0],
        };
        let parts = match combine(&datasets, &aggregation, &mut slabs) {
            Ok(parts) => parts,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].1.vars.len(), 1001);
        assert_eq!(parts[0].1.vars[0].info.dims[0].len, 4);
        assert_eq!(slabs.budget.left(), 200_000 - 2002 * 64);
    }
}
