//! Temporal reduction (`time_freq`, `time_method`, `climatology`, `min_coverage`, `dtype`):
//! each group of a store (one source, or what [`super::combine`] made of several) resampled
//! in time, or grouped into a climatology, before it is written. The semantics are the
//! reference's reducer (reference section 6) on xarray:
//!
//! - **Time dimension**: the first of `time`, `valid_time`, `t` that is a dimension with a
//!   variable of its name, else any dimension whose variable's `units` contain `" since "`.
//!   Without one: "Cannot reduce in time: the dataset has no time dimension."
//! - **Upsampling guard** (resampling only): from the undecoded axis in seconds (units of
//!   seconds, minutes, hours or days), `span // nominal(freq) + 1` output steps must not exceed
//!   `1.01 * n + 1`, else "... which is not a reduction." The same bound is applied to the
//!   bins themselves when the units are of months or years (which the reference skips), so a
//!   request's work is bounded in every case.
//! - **CF decoding** as `xr.decode_cf` (mask and scale): `_Unsigned` integers are read
//!   unsigned, `_FillValue` and `missing_value` become NaN, `scale_factor` and `add_offset`
//!   are applied, in the float type xarray chooses ([`Decoding`]). Times are decoded to the
//!   nanosecond, truncated as xarray does (a value a hair below midnight stays on the day
//!   before); a missing time is in no group, and resampling refuses it as xarray does. Bounds
//!   variables (named in a `bounds` attribute, or ending in `_bnds`, `_bounds`, `_vertices`)
//!   are dropped. A variable marked `dtype = "bool"` fails the store (not reduced yet).
//! - **Variables**: numeric data variables with the time dimension are reduced; data
//!   variables without it are carried over (decoded); non-numeric ones with it (and those
//!   whose units make them times) are dropped. None to reduce: an error.
//! - **Resampling** as pandas `resample` with the reference's offsets (`h`, `3h`, `6h`, `D`,
//!   `MS`, `QS-DEC`, `YS`, `10YS`): bins closed and labelled on the left; hourly bins counted
//!   from midnight of the first time step's day; decades from 1 January of its year. Every
//!   bin from the first to the last is an output step; an empty one is NaN for every method,
//!   which makes integer results floats as numpy does.
//! - **Climatology** groups by hour, day of year, month or season (`DJF`, `JJA`, `MAM`, `SON`,
//!   xarray's sorted order) and replaces the time dimension by `hour`, `dayofyear`, `month` or
//!   `season`, holding the groups present.
//! - **Dimensions**: the output axis is the first of every reduced variable, as xarray puts
//!   the dimension of its groups. A variable with the time dimension twice, or a name that
//!   the climatology's dimension would clash with, fails the store.
//! - **Methods** skip NaN as xarray does: `sum` of nothing is 0, `count` counts, `std` and
//!   `var` are of the population (ddof 0), the others of nothing are NaN.
//! - **min_coverage**: a float result whose group has fewer valid values than that share of
//!   its steps is NaN.
//! - **Output**: `cell_methods` of every data variable gets `time: mean (monthly)` (a
//!   climatology `time: mean over monthly`), floating-point data variables are cast to `dtype`,
//!   the time axis is re-encoded in whole days, hours, minutes or seconds since its first
//!   label, in the source's calendar.
//!
//! Resampling needs a time axis in increasing order, as xarray's does (sources concatenated
//! out of order, or of different calendars, fail with a reason).
//!
//! Values are computed in 64-bit floats, each output chunk from the slabs of the time steps
//! its groups cover, at most [`READ_ELEMENTS`] values at a time: running totals for `mean`,
//! `sum`, `count`, `min` and `max`, every value of a group for `std`, `var` and `median`. A
//! time axis of more than [`MAX_TIME_STEPS`] steps fails the store. They can differ from xarray's
//! in the last bits where xarray reduces 32-bit floats in 32 bits (as results of different
//! dask chunkings differ among themselves); with `dtype=float64`, xarray casts that 32-bit
//! result, and svcd keeps its 64-bit one. Integers beyond 2^53 lose precision in `sum`, `min`
//! and `max`.

use std::sync::Arc;

use netcdf::types::{FloatType, IntType};
use serde_json::{Map, Value, json};

use super::combine::{self, CombinedVar, Origin, Part, Slabs};
use super::metadata::{Dtype, Packing, VarInfo, float_json};
use super::plan::Dim;
use super::write::to_usize;
use crate::crawl::cf_time::{Calendar, Date, DateTime, TimeUnits};
use crate::stores::request::{Freq, Method, OutputType, Reduction};

const F32: Dtype = Dtype::Float(FloatType::F32);
const F64: Dtype = Dtype::Float(FloatType::F64);
const I64: Dtype = Dtype::Int(IntType::I64);

/// Values held at once while reducing one output chunk (32 MiB of 64-bit floats).
const READ_ELEMENTS: u64 = 4 << 20;

/// The longest time axis reduced (hourly steps of a thousand years fit): its values and
/// their dates are held in memory.
const MAX_TIME_STEPS: u64 = 10_000_000;

/// Names of the time dimension, in order of preference.
const TIME_NAMES: [&str; 3] = ["time", "valid_time", "t"];

/// How much longer than its input an output axis may be and still be a reduction.
const INFLATION_TOLERANCE: f64 = 1.01;

const SECONDS_PER_DAY: i64 = 86_400;

/// How xarray decodes a variable (`mask_and_scale`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decoding {
    /// Raw values that mean missing (`_FillValue`, `missing_value`).
    missing: Vec<f64>,
    /// `scale_factor`.
    scale: Option<f64>,
    /// `add_offset`.
    offset: Option<f64>,
    /// The type decoding gives.
    to: Dtype,
    /// The width of a signed integer read as unsigned (`_Unsigned = "true"`).
    unsigned_bits: Option<u64>,
}

/// The unsigned type of a signed integer variable marked `_Unsigned = "true"`.
fn unsigned_type(info: &VarInfo) -> Option<Dtype> {
    let marked = info
        .attrs
        .get("_Unsigned")
        .and_then(Value::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case("true"));
    match (marked, info.dtype) {
        (true, Dtype::Int(IntType::I8)) => Some(Dtype::Int(IntType::U8)),
        (true, Dtype::Int(IntType::I16)) => Some(Dtype::Int(IntType::U16)),
        (true, Dtype::Int(IntType::I32)) => Some(Dtype::Int(IntType::U32)),
        (true, Dtype::Int(IntType::I64)) => Some(Dtype::Int(IntType::U64)),
        _ => None,
    }
}

/// A signed integer of `bits` bits read as unsigned.
#[expect(
    clippy::cast_precision_loss,
    reason = "integers of at most 64 bits, as numpy"
)]
fn as_unsigned(value: f64, bits: u64) -> f64 {
    if value < 0.0 {
        value + (1u128 << bits) as f64
    } else {
        value
    }
}

impl Decoding {
    /// How `info` is decoded; `None` when decoding leaves it as it is.
    fn of(info: &VarInfo) -> Option<Decoding> {
        if !matches!(info.dtype, Dtype::Int(_) | Dtype::Float(_)) {
            return None;
        }
        let unsigned = unsigned_type(info);
        let mut missing: Vec<f64> = Vec::new();
        for value in [Some(&info.fill_value), info.attrs.get("missing_value")]
            .into_iter()
            .flatten()
        {
            match value {
                Value::Array(values) => missing.extend(values.iter().filter_map(number)),
                value => missing.extend(number(value)),
            }
        }
        missing.retain(|m| !m.is_nan());
        let scale = info.attrs.get("scale_factor").and_then(first_number);
        let offset = info.attrs.get("add_offset").and_then(first_number);
        let stored = unsigned.unwrap_or(info.dtype);
        let masks = !missing.is_empty() || info.attrs.contains_key("missing_value");
        let fill = !info.fill_value.is_null();
        let to = if !masks && !fill && scale.is_none() && offset.is_none() {
            stored
        } else {
            decoded_type(stored, info.packing)
        };
        if unsigned.is_none()
            && missing.is_empty()
            && scale.is_none()
            && offset.is_none()
            && to == info.dtype
        {
            return None;
        }
        let bits = unsigned.map(|_| 8 * info.dtype.size());
        if let Some(bits) = bits {
            // xarray casts the fill values to the unsigned type too.
            for m in &mut missing {
                *m = as_unsigned(*m, bits);
            }
        }
        Some(Decoding {
            missing,
            scale,
            offset,
            to,
            unsigned_bits: bits,
        })
    }

    /// Decodes one raw value.
    fn value(&self, raw: f64) -> f64 {
        let mut one = [raw];
        self.apply(&mut one);
        one[0]
    }

    /// Decodes raw values in place, a pass per step (so that each loop is simple).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "32-bit results are computed in 32 bits, as xarray does"
    )]
    fn apply(&self, values: &mut [f64]) {
        if let Some(bits) = self.unsigned_bits {
            for v in values.iter_mut() {
                *v = as_unsigned(*v, bits);
            }
        }
        match self.missing.as_slice() {
            [] => {}
            [missing] => {
                for v in values.iter_mut() {
                    if *v == *missing {
                        *v = f64::NAN;
                    }
                }
            }
            missing => {
                for v in values.iter_mut() {
                    if missing.contains(v) {
                        *v = f64::NAN;
                    }
                }
            }
        }
        if self.scale.is_none() && self.offset.is_none() {
            // Masked only: the values are exact in the type they decode to (integers of at
            // most 2 bytes, or floats, for 32-bit results).
            return;
        }
        // Only the attributes present are applied, as xarray does: `-0.0 + 0.0` would lose
        // the sign of a negative zero.
        if self.to == F32 {
            let (scale, offset) = (self.scale.map(|s| s as f32), self.offset.map(|o| o as f32));
            for v in values.iter_mut() {
                let mut x = *v as f32;
                if let Some(scale) = scale {
                    x *= scale;
                }
                if let Some(offset) = offset {
                    x += offset;
                }
                *v = f64::from(x);
            }
        } else {
            for v in values.iter_mut() {
                if let Some(scale) = self.scale {
                    *v *= scale;
                }
                if let Some(offset) = self.offset {
                    *v += offset;
                }
            }
        }
    }
}

/// The float type xarray decodes a masked or packed variable of `dtype` to
/// (`_choose_float_dtype`): the packing attributes' type when both have one float type (64
/// bits for 32-bit integers), 64 bits with any other `add_offset`, the `scale_factor`'s float
/// type alone; unpacked, 32 bits for floats of at most 4 bytes and integers of at most 2.
fn decoded_type(dtype: Dtype, packing: Packing) -> Dtype {
    match (packing.scale, packing.offset) {
        (Some(scale), Some(offset)) if scale == offset && matches!(scale, Dtype::Float(_)) => {
            if matches!(dtype, Dtype::Int(_)) && dtype.size() == 4 {
                F64
            } else {
                scale
            }
        }
        (_, Some(_)) => F64,
        (Some(Dtype::Float(float)), None) => Dtype::Float(float),
        (Some(_), None) => F64,
        (None, None) => match dtype {
            Dtype::Float(_) if dtype.size() <= 4 => F32,
            Dtype::Int(_) if dtype.size() <= 2 => F32,
            _ => F64,
        },
    }
}

/// A JSON number, or the string zarr writes for a non-finite one.
fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// An attribute's number, or the first of its numbers.
fn first_number(value: &Value) -> Option<f64> {
    match value {
        Value::Array(values) => values.first().and_then(number),
        value => number(value),
    }
}

/// Raw little-endian values of `from` as decoded numbers.
fn decode(raw: &[u8], from: Dtype, decoding: Option<&Decoding>) -> Result<Vec<f64>, String> {
    let mut values = combine::floats(raw, from).ok_or("strings cannot be decoded as numbers")?;
    if let Some(decoding) = decoding {
        decoding.apply(&mut values);
    }
    Ok(values)
}

/// Numbers as little-endian values of `dtype` (integers are whole here; NaN never is one).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "the values are of `dtype`: whole and in range for integers"
)]
fn encode(values: &[f64], dtype: Dtype) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * to_usize(dtype.size()));
    for &v in values {
        match dtype {
            Dtype::Float(FloatType::F32) => out.extend((v as f32).to_le_bytes()),
            Dtype::Float(FloatType::F64) => out.extend(v.to_le_bytes()),
            Dtype::Int(IntType::I8) => out.extend((v as i8).to_le_bytes()),
            Dtype::Int(IntType::U8) => out.extend((v as u8).to_le_bytes()),
            Dtype::Int(IntType::I16) => out.extend((v as i16).to_le_bytes()),
            Dtype::Int(IntType::U16) => out.extend((v as u16).to_le_bytes()),
            Dtype::Int(IntType::I32) => out.extend((v as i32).to_le_bytes()),
            Dtype::Int(IntType::U32) => out.extend((v as u32).to_le_bytes()),
            Dtype::Int(IntType::I64) => out.extend((v as i64).to_le_bytes()),
            Dtype::Int(IntType::U64) => out.extend((v as u64).to_le_bytes()),
            Dtype::Char | Dtype::String => {}
        }
    }
    out
}

/// A variable carried over decoded (and cast).
#[derive(Debug, PartialEq)]
pub(crate) struct Decoded {
    /// The variable as it was.
    source: CombinedVar,
    /// How it is decoded (`None`: only cast).
    decoding: Option<Decoding>,
}

/// The block `start`/`count` of a decoded variable of type `info.dtype`.
///
/// # Errors
/// A sentence naming the file and variable that could not be read.
pub(crate) fn read_decoded(
    slabs: &mut dyn Slabs,
    decoded: &Decoded,
    info: &VarInfo,
    start: &[u64],
    count: &[u64],
) -> Result<Vec<u8>, String> {
    let raw = combine::read_block(slabs, &decoded.source, start, count)?;
    let values = decode(&raw, decoded.source.info.dtype, decoded.decoding.as_ref())?;
    Ok(encode(&values, info.dtype))
}

/// A variable reduced in time.
#[derive(Debug, PartialEq)]
pub(crate) struct Reduced {
    /// The variable as it was.
    source: CombinedVar,
    /// How its values are decoded first.
    decoding: Option<Decoding>,
    /// Its time axis.
    axis: usize,
    /// The time steps of each output step, as runs `(first, length)`.
    groups: Arc<[Vec<(u64, u64)>]>,
    /// How a group's values become one.
    method: Method,
    /// Results of groups with a smaller share of valid values are NaN.
    min_coverage: Option<f64>,
}

impl Reduced {
    /// Whether its method needs every value of a group (else running totals do).
    fn needs_every_value(&self) -> bool {
        matches!(self.method, Method::Std | Method::Var | Method::Median)
    }

    /// Whether `valid` values of `n` are too few for `min_coverage`.
    #[expect(
        clippy::cast_precision_loss,
        reason = "a group has far fewer than 2^53 values"
    )]
    fn too_few(&self, valid: usize, n: usize) -> bool {
        self.min_coverage
            .is_some_and(|least| (valid as f64 / n as f64) < least)
    }

    /// The result of a method that keeps running totals, from the number of valid values of
    /// the `n` of a group and their sum, least or greatest value.
    fn of_running_totals(&self, valid: u32, total: f64, n: usize) -> f64 {
        if self.too_few(valid as usize, n) {
            return f64::NAN;
        }
        match (self.method, valid) {
            (Method::Sum | Method::Count, 0) => 0.0,
            (_, 0) => f64::NAN,
            (Method::Mean, _) => total / f64::from(valid),
            (Method::Count, _) => f64::from(valid),
            _ => total,
        }
    }

    /// The result of one group's values (NaN: missing), which it reorders.
    #[expect(
        clippy::cast_precision_loss,
        reason = "a group has far fewer than 2^53 values"
    )]
    fn reduce(&self, xs: &mut [f64]) -> f64 {
        let n = xs.len();
        let mut k = 0;
        for i in 0..n {
            if !xs[i].is_nan() {
                xs[k] = xs[i];
                k += 1;
            }
        }
        if self.too_few(k, n) {
            return f64::NAN;
        }
        let valid = &mut xs[..k];
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let variance = |v: &[f64]| {
            let m = mean(v);
            v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
        };
        if k == 0 {
            return match self.method {
                Method::Sum | Method::Count => 0.0,
                _ => f64::NAN,
            };
        }
        match self.method {
            Method::Mean => mean(valid),
            Method::Sum => valid.iter().sum(),
            Method::Min => valid.iter().copied().fold(f64::INFINITY, f64::min),
            Method::Max => valid.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Method::Var => variance(valid),
            Method::Std => variance(valid).sqrt(),
            Method::Median => {
                valid.sort_unstable_by(f64::total_cmp);
                if k % 2 == 1 {
                    valid[k / 2]
                } else {
                    f64::midpoint(valid[k / 2 - 1], valid[k / 2])
                }
            }
            Method::Count => k as f64,
        }
    }
}

/// One group's values over a block of elements, gathered for the method: running totals
/// (count and sum, least or greatest value) per element, or every value per element for the
/// methods that need them. Its buffers are kept from block to block.
struct Gather {
    /// Values of each element's group (`needs_every_value`), element by element.
    columns: Vec<f64>,
    /// Valid values per element (running totals).
    valid: Vec<u32>,
    /// Sum, least or greatest valid value per element (running totals).
    total: Vec<f64>,
    /// Values per group.
    steps: usize,
}

impl Gather {
    fn new() -> Self {
        Gather {
            columns: Vec::new(),
            valid: Vec::new(),
            total: Vec::new(),
            steps: 0,
        }
    }

    /// Starts a block of `elements` elements with `steps` values each.
    fn start(&mut self, reduced: &Reduced, elements: usize, steps: usize) {
        self.steps = steps;
        if reduced.needs_every_value() {
            self.columns.clear();
            self.columns.resize(elements * steps, f64::NAN);
        } else {
            let initial = match reduced.method {
                Method::Min => f64::INFINITY,
                Method::Max => f64::NEG_INFINITY,
                _ => 0.0,
            };
            self.valid.clear();
            self.valid.resize(elements, 0);
            self.total.clear();
            self.total.resize(elements, initial);
        }
    }

    /// Adds the values of `len` consecutive steps, from step `done` of the group, laid out
    /// as `outer` x `len` x `inner` in C order (the block's elements are `outer` x `inner`).
    fn add(
        &mut self,
        reduced: &Reduced,
        values: &[f64],
        (outer, len, inner): (usize, usize, usize),
        done: usize,
    ) {
        let steps = self.steps;
        for o in 0..outer {
            for k in 0..len {
                let row = &values[(o * len + k) * inner..(o * len + k + 1) * inner];
                let at = o * inner;
                if reduced.needs_every_value() {
                    for (i, &v) in row.iter().enumerate() {
                        self.columns[(at + i) * steps + done + k] = v;
                    }
                    continue;
                }
                let valid = &mut self.valid[at..at + inner];
                let total = &mut self.total[at..at + inner];
                for ((count, sum), &v) in valid.iter_mut().zip(total.iter_mut()).zip(row) {
                    if v.is_nan() {
                        continue;
                    }
                    *count += 1;
                    *sum = match reduced.method {
                        Method::Min => sum.min(v),
                        Method::Max => sum.max(v),
                        _ => *sum + v,
                    };
                }
            }
        }
    }

    /// The results of the block's elements, into `out`.
    fn finish(&mut self, reduced: &Reduced, out: &mut [f64]) {
        if reduced.needs_every_value() {
            for (result, column) in out
                .iter_mut()
                .zip(self.columns.chunks_exact_mut(self.steps))
            {
                *result = reduced.reduce(column);
            }
        } else {
            for ((result, &valid), &total) in out.iter_mut().zip(&self.valid).zip(&self.total) {
                *result = reduced.of_running_totals(valid, total, self.steps);
            }
        }
    }
}

/// One piece of a block of a reduced variable: the elements of one sub-block of the block's
/// other axes for one output step, and the slabs of the source that make them.
struct Piece {
    /// Its output step within the block.
    step: usize,
    /// Its first element within that step's elements (C order of the other axes).
    offset: usize,
    /// Its elements.
    elements: usize,
    /// Its elements as `outer` x `inner` (the other axes before and after the time axis).
    outer: usize,
    inner: usize,
    /// The time steps of its group.
    steps: usize,
    /// The source slabs to read: start, count and length along the time axis.
    reads: Vec<(Vec<u64>, Vec<u64>, usize)>,
}

/// The pieces of the block `start`/`count` of a reduced variable (its first axis the output
/// steps, the others the source's other axes in order), each of at most [`READ_ELEMENTS`]
/// values of the source, made one at a time (a climatology's group has a run per year).
fn pieces<'a>(
    reduced: &'a Reduced,
    start: &'a [u64],
    count: &'a [u64],
) -> impl Iterator<Item = Piece> + 'a {
    let axis = reduced.axis;
    let (other_start, other_count) = (&start[1..], &count[1..]);
    (0..to_usize(count[0])).flat_map(move |step| {
        let group = &reduced.groups[to_usize(start[0]) + step];
        let n: u64 = group.iter().map(|(_, len)| len).sum();
        let blocks = READ_ELEMENTS
            .checked_div(n)
            .map(|most| combine::slab_ranges(other_count, most));
        blocks
            .into_iter()
            .flatten()
            .map(move |(sub_start, sub_count)| {
                let reads = group
                    .iter()
                    .map(|&(first, len)| {
                        let mut s: Vec<u64> = other_start
                            .iter()
                            .zip(&sub_start)
                            .map(|(a, b)| a + b)
                            .collect();
                        s.insert(axis, first);
                        let mut c = sub_count.clone();
                        c.insert(axis, len);
                        (s, c, to_usize(len))
                    })
                    .collect();
                Piece {
                    step,
                    offset: flat_index(&sub_start, other_count),
                    elements: to_usize(sub_count.iter().product()),
                    outer: to_usize(sub_count[..axis].iter().product()),
                    inner: to_usize(sub_count[axis..].iter().product()),
                    steps: to_usize(n),
                    reads,
                }
            })
    })
}

/// Reads the slabs of a piece.
fn read_piece(
    slabs: &mut dyn Slabs,
    reduced: &Reduced,
    piece: &Piece,
) -> Result<Vec<Vec<u8>>, String> {
    piece
        .reads
        .iter()
        .map(|(s, c, _)| combine::read_block(slabs, &reduced.source, s, c))
        .collect()
}

/// Reduces a piece from its slabs `raw` into `out` (the block's values, step by step).
fn reduce_piece(
    reduced: &Reduced,
    gather: &mut Gather,
    piece: &Piece,
    raw: &[Vec<u8>],
    spatial: usize,
    out: &mut [f64],
) -> Result<(), String> {
    gather.start(reduced, piece.elements, piece.steps);
    let mut done = 0;
    for (bytes, (_, _, len)) in raw.iter().zip(&piece.reads) {
        let values = decode(bytes, reduced.source.info.dtype, reduced.decoding.as_ref())?;
        gather.add(reduced, &values, (piece.outer, *len, piece.inner), done);
        done += len;
    }
    let at = piece.step * spatial + piece.offset;
    gather.finish(reduced, &mut out[at..at + piece.elements]);
    Ok(())
}

/// The number of values of the block's other axes, per output step.
fn spatial_of(count: &[u64]) -> usize {
    to_usize(count[1..].iter().product())
}

/// The block `start`/`count` of a reduced variable of type `info.dtype` (its first axis the
/// output steps, the others the source's other axes in order), read and reduced piece by
/// piece: at most [`READ_ELEMENTS`] source values in memory at a time.
///
/// # Errors
/// A sentence naming the file and variable that could not be read.
pub(crate) fn read_reduced(
    slabs: &mut dyn Slabs,
    reduced: &Reduced,
    info: &VarInfo,
    start: &[u64],
    count: &[u64],
) -> Result<Vec<u8>, String> {
    let spatial = spatial_of(count);
    let mut out = vec![f64::NAN; to_usize(count[0]) * spatial];
    let mut gather = Gather::new();
    for piece in pieces(reduced, start, count) {
        let raw = read_piece(slabs, reduced, &piece)?;
        reduce_piece(reduced, &mut gather, &piece, &raw, spatial, &mut out)?;
    }
    Ok(encode(&out, info.dtype))
}

/// Source values of a block that the reader may read ahead for an encoder to reduce: as
/// many as one piece ([`READ_ELEMENTS`]), so that a block in flight holds at most 32 MiB of
/// source and decodes it a slab at a time, whatever the source's type.
const DEFERRED_VALUES: u64 = READ_ELEMENTS;

/// The block `start`/`count` of a reduced variable as [`read_reduced`] gives it, its slabs
/// read now and reduced by the function returned, which an encoder thread runs; `None` when
/// the block needs more than [`DEFERRED_VALUES`] source values (then [`read_reduced`] reads
/// it piece by piece).
///
/// # Errors
/// A sentence naming the file and variable that could not be read.
#[expect(
    clippy::type_complexity,
    reason = "the one place the computation is handed over"
)]
pub(crate) fn read_reduced_later(
    slabs: &mut dyn Slabs,
    reduced: &Arc<Reduced>,
    info: &VarInfo,
    start: &[u64],
    count: &[u64],
) -> Result<Option<Box<dyn FnOnce() -> Result<Vec<u8>, String> + Send>>, String> {
    // The source values the block needs: each output step's time steps over its elements.
    let values_per_step = count[1..].iter().product::<u64>();
    let values = (0..count[0])
        .map(|j| {
            let group = &reduced.groups[to_usize(start[0] + j)];
            group.iter().map(|(_, len)| len).sum::<u64>()
        })
        .fold(0u64, |total, n| {
            total.saturating_add(n.saturating_mul(values_per_step))
        });
    if values > DEFERRED_VALUES {
        return Ok(None);
    }
    let pieces: Vec<Piece> = pieces(reduced, start, count).collect();
    let raw = pieces
        .iter()
        .map(|piece| read_piece(slabs, reduced, piece))
        .collect::<Result<Vec<_>, _>>()?;
    let reduced = Arc::clone(reduced);
    let (dtype, count) = (info.dtype, count.to_vec());
    Ok(Some(Box::new(move || {
        let spatial = spatial_of(&count);
        let mut out = vec![f64::NAN; to_usize(count[0]) * spatial];
        let mut gather = Gather::new();
        for (piece, raw) in pieces.iter().zip(&raw) {
            reduce_piece(&reduced, &mut gather, piece, raw, spatial, &mut out)?;
        }
        Ok(encode(&out, dtype))
    })))
}

/// The position of `index` in C order within `shape`.
fn flat_index(index: &[u64], shape: &[u64]) -> usize {
    let mut flat = 0u64;
    for (i, len) in index.iter().zip(shape) {
        flat = flat * len + i;
    }
    to_usize(flat)
}

/// The type a method gives for values of the (decoded) type `dtype`, as numpy.
fn reduced_type(dtype: Dtype, method: Method) -> Dtype {
    match (dtype, method) {
        (_, Method::Count) => I64,
        (Dtype::Float(_), _) => dtype,
        (Dtype::Int(_), Method::Mean | Method::Std | Method::Var | Method::Median) => F64,
        (Dtype::Int(IntType::U8 | IntType::U16 | IntType::U32 | IntType::U64), Method::Sum) => {
            Dtype::Int(IntType::U64)
        }
        (Dtype::Int(_), Method::Sum) => I64,
        _ => dtype,
    }
}

/// Where a group's time steps fall on the output axis.
struct Grouping {
    /// The output axis.
    axis: CombinedVar,
    /// The time steps of each output step.
    groups: Vec<Vec<u64>>,
}

/// Reduces one group of a store as `reduction` says.
///
/// # Errors
/// The reason for the store's failed status, with the reference's sentence where it has one.
pub(crate) fn reduce(
    part: Part,
    reduction: &Reduction,
    slabs: &mut dyn Slabs,
) -> Result<Part, String> {
    let Some(time) = time_dim(&part) else {
        let mut dims = dim_names(&part);
        dims.sort();
        return Err(format!(
            "Cannot reduce in time: the dataset has no time dimension. Dimensions: {}.",
            dims.join(", ")
        ));
    };
    let time_var = part
        .vars
        .iter()
        .find(|v| v.info.name == time)
        .expect("the time dimension has a variable")
        .clone();
    if time_var.info.dims.len() != 1 || time_var.info.dims[0].name != time {
        return Err(format!(
            "Cannot reduce in time: variable {time:?} is not the coordinate of dimension {time:?}"
        ));
    }
    // Checked before the values are read: a string's values are read by the NetCDF library
    // as C strings of any length each, and chars are no instants.
    if matches!(time_var.info.dtype, Dtype::String | Dtype::Char) {
        return Err(format!(
            "Cannot reduce in time: time coordinate {time:?} holds {}, not numbers",
            if time_var.info.dtype == Dtype::String {
                "strings"
            } else {
                "characters"
            }
        ));
    }
    let steps = time_var.info.dims[0].len;
    if steps > MAX_TIME_STEPS {
        return Err(format!(
            "Cannot reduce in time: the time axis {time:?} has {steps} steps; at most \
             {MAX_TIME_STEPS} can be reduced"
        ));
    }
    let raw = combine::read_block(slabs, &time_var, &[0], &[steps])?;
    let raw = combine::floats(&raw, time_var.info.dtype).expect("a numeric time coordinate");
    let units = time_var
        .info
        .attrs
        .get("units")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let guarded = !reduction.climatology && check_not_inflating(&raw, &units, reduction.freq)?;
    let calendar_attr = time_var.info.attrs.get("calendar").and_then(Value::as_str);
    let time_units = TimeUnits::parse(&units, calendar_attr)
        .map_err(|e| format!("Cannot reduce in time: time coordinate {time:?}: {e}"))?;
    let calendar = Calendar::parse(calendar_attr).expect("parsed with the units");
    // The time values decoded as xarray decodes them: masked (a missing step is in no
    // group, as pandas drops NaT), unpacked, then to the nanosecond.
    let time_decoding = Decoding::of(&time_var.info);
    let stamps = raw
        .iter()
        .map(|&v| {
            let v = time_decoding.as_ref().map_or(v, |d| d.value(v));
            if v.is_nan() {
                return Ok(None);
            }
            time_units.instant(v).map(Some).ok_or_else(|| {
                format!("Cannot reduce in time: time value {v} of {time:?} is not a date")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let grouping = if reduction.climatology {
        climatology(&stamps, reduction.freq, calendar, &part)?
    } else {
        resample(
            &stamps,
            reduction.freq,
            calendar,
            &time_var,
            calendar_attr,
            guarded,
        )?
    };
    let empty = grouping.groups.iter().any(Vec::is_empty);
    let groups: Arc<[Vec<(u64, u64)>]> = grouping.groups.iter().map(|g| runs(g)).collect();
    let out_len = grouping.axis.info.dims[0].len;
    let out_dim = grouping.axis.info.name.clone();
    let fragment = if reduction.climatology {
        format!(
            "{time}: {} over {}",
            reduction.method.name(),
            reduction.freq.name()
        )
    } else {
        format!(
            "{time}: {} ({})",
            reduction.method.name(),
            reduction.freq.name()
        )
    };
    let bounds = bounds_variables(&part);
    let mut vars = Vec::with_capacity(part.vars.len());
    let mut reduced_any = false;
    for var in part.vars {
        let name = var.info.name.clone();
        if bounds.contains(&name) {
            continue;
        }
        if name == time {
            vars.push(grouping.axis.clone());
            continue;
        }
        let Some(axis) = var.info.dims.iter().position(|d| d.name == time) else {
            vars.push(carried(var, reduction.dtype, &fragment));
            continue;
        };
        if var.info.is_coordinate() || !is_numeric(&var.info) {
            // Not reducible, and its length would no longer match: dropped.
            continue;
        }
        if var.info.dims.iter().filter(|d| d.name == time).count() > 1 {
            return Err(format!(
                "Cannot reduce in time: variable {name:?} has the dimension {time:?} twice"
            ));
        }
        if var.info.attrs.get("dtype").and_then(Value::as_str) == Some("bool") {
            return Err(format!(
                "Cannot reduce in time: variable {name:?} holds booleans (dtype = \"bool\"), \
                 which cannot be reduced yet"
            ));
        }
        reduced_any = true;
        let decoding = Decoding::of(&var.info);
        let decoded = decoding.as_ref().map_or(var.info.dtype, |d| d.to);
        let mut dtype = reduced_type(decoded, reduction.method);
        if empty {
            dtype = combine::with_missing(dtype).unwrap_or(dtype);
        }
        let masked = reduction.min_coverage > 0.0 && matches!(decoded, Dtype::Float(_));
        if masked {
            dtype = combine::with_missing(dtype).unwrap_or(dtype);
        }
        dtype = cast_type(dtype, reduction.dtype);
        // The output axis comes first, as xarray puts the dimension of its groups.
        let mut dims = var.info.dims.clone();
        dims.remove(axis);
        dims.insert(
            0,
            Dim {
                name: out_dim.clone(),
                len: out_len,
            },
        );
        let mut attrs = decoded_attrs(&var.info.attrs, decoding.is_some());
        tag(&mut attrs, &fragment);
        let info = VarInfo {
            name,
            dims,
            dtype,
            fill_value: fill_of(dtype),
            attrs,
            packing: Packing::default(),
        };
        vars.push(CombinedVar {
            info,
            origin: Origin::Reduced(Arc::new(Reduced {
                source: var,
                decoding,
                axis,
                groups: groups.clone(),
                method: reduction.method,
                min_coverage: masked.then_some(reduction.min_coverage),
            })),
        });
    }
    if !reduced_any {
        return Err(format!(
            "No numeric variable spans the time dimension {time:?}; nothing can be reduced."
        ));
    }
    Ok(Part {
        attrs: part.attrs,
        vars,
        names: part.names,
    })
}

/// The time dimension of `part`, as the reference finds it.
fn time_dim(part: &Part) -> Option<String> {
    let dims = dim_names(part);
    let has_var = |name: &str| part.vars.iter().any(|v| v.info.name == name);
    if let Some(name) = TIME_NAMES
        .iter()
        .find(|name| dims.iter().any(|d| d == *name) && has_var(name))
    {
        return Some((*name).to_string());
    }
    dims.into_iter().find(|name| {
        part.vars
            .iter()
            .any(|v| &v.info.name == name && is_time_like(&v.info))
    })
}

/// The dimension names of `part`, in order of first use.
fn dim_names(part: &Part) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for dim in part.vars.iter().flat_map(|v| &v.info.dims) {
        if !names.contains(&dim.name) {
            names.push(dim.name.clone());
        }
    }
    names
}

/// Whether xarray decodes the variable to times (its units are `<unit> since <date>`).
fn is_time_like(info: &VarInfo) -> bool {
    info.attrs
        .get("units")
        .and_then(Value::as_str)
        .is_some_and(|units| units.contains(" since "))
}

/// Whether a variable's decoded values are numbers.
fn is_numeric(info: &VarInfo) -> bool {
    matches!(info.dtype, Dtype::Int(_) | Dtype::Float(_)) && !is_time_like(info)
}

/// The bounds variables of `part`: named by a `bounds` attribute, or by their suffix.
fn bounds_variables(part: &Part) -> Vec<String> {
    let mut names = Vec::new();
    for var in &part.vars {
        if let Some(bounds) = var.info.attrs.get("bounds").and_then(Value::as_str)
            && part.vars.iter().any(|v| v.info.name == bounds)
        {
            names.push(bounds.to_string());
        }
        let name = &var.info.name;
        if name.ends_with("_bnds") || name.ends_with("_bounds") || name.ends_with("_vertices") {
            names.push(name.clone());
        }
    }
    names
}

/// A variable without the time dimension as the reduced store holds it: decoded, and a
/// floating-point data variable cast to `dtype` and tagged with `fragment`.
fn carried(var: CombinedVar, dtype: OutputType, fragment: &str) -> CombinedVar {
    if is_time_like(&var.info) || !matches!(var.info.dtype, Dtype::Int(_) | Dtype::Float(_)) {
        // Times stay encoded (a reader decodes them as xarray did); text stays text.
        let mut var = var;
        if !var.info.is_coordinate() {
            tag(&mut var.info.attrs, fragment);
        }
        return var;
    }
    let data = !var.info.is_coordinate();
    let decoding = Decoding::of(&var.info);
    let decoded = decoding.as_ref().map_or(var.info.dtype, |d| d.to);
    let out = if data {
        cast_type(decoded, dtype)
    } else {
        decoded
    };
    let mut attrs = decoded_attrs(&var.info.attrs, decoding.is_some());
    if data {
        tag(&mut attrs, fragment);
    }
    if decoding.is_none() && out == var.info.dtype {
        return CombinedVar {
            info: VarInfo { attrs, ..var.info },
            origin: var.origin,
        };
    }
    let fill_value = if decoding.is_some() {
        fill_of(out)
    } else {
        var.info.fill_value.clone()
    };
    CombinedVar {
        info: VarInfo {
            name: var.info.name.clone(),
            dims: var.info.dims.clone(),
            dtype: out,
            attrs,
            fill_value,
            packing: Packing::default(),
        },
        origin: Origin::Decoded(Arc::new(Decoded {
            source: var,
            decoding,
        })),
    }
}

/// A float type as `dtype` asks; other types as they are.
fn cast_type(dtype: Dtype, asked: OutputType) -> Dtype {
    match (dtype, asked) {
        (Dtype::Float(_), OutputType::Float32) => F32,
        (Dtype::Float(_), OutputType::Float64) => F64,
        _ => dtype,
    }
}

/// The `fill_value` of a decoded array: NaN for floats, none for integers.
fn fill_of(dtype: Dtype) -> Value {
    match dtype {
        Dtype::Float(_) => float_json(f64::NAN),
        _ => Value::Null,
    }
}

/// Attributes after decoding: the masking and packing ones are spent.
fn decoded_attrs(attrs: &Map<String, Value>, decoded: bool) -> Map<String, Value> {
    let mut attrs = attrs.clone();
    if decoded {
        for spent in ["missing_value", "scale_factor", "add_offset", "_Unsigned"] {
            attrs.remove(spent);
        }
    }
    attrs
}

/// Appends `fragment` to `cell_methods`.
fn tag(attrs: &mut Map<String, Value>, fragment: &str) {
    let existing = match attrs.get("cell_methods") {
        Some(Value::String(s)) => s.trim().to_string(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let tagged = format!("{existing} {fragment}").trim().to_string();
    attrs.insert("cell_methods".into(), Value::String(tagged));
}

/// Consecutive time steps as runs `(first, length)`.
fn runs(steps: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &step in steps {
        match runs.last_mut() {
            Some((first, len)) if *first + *len == step => *len += 1,
            _ => runs.push((step, 1)),
        }
    }
    runs
}

/// Seconds of a CF time unit, as the reference reads an undecoded axis.
fn unit_seconds(unit: &str) -> Option<f64> {
    Some(match unit {
        "second" | "seconds" | "sec" | "s" => 1.0,
        "minute" | "minutes" | "min" => 60.0,
        "hour" | "hours" | "hr" | "h" => 3600.0,
        "day" | "days" | "d" => 86_400.0,
        _ => return None,
    })
}

/// The nominal length of `freq` in seconds (mean lengths for calendar periods).
fn nominal_seconds(freq: Freq) -> f64 {
    match freq {
        Freq::Hourly => 3600.0,
        Freq::ThreeHourly => 3.0 * 3600.0,
        Freq::SixHourly => 6.0 * 3600.0,
        Freq::Daily => 86_400.0,
        Freq::Monthly => 30.44 * 86_400.0,
        Freq::Seasonal => 91.31 * 86_400.0,
        Freq::Yearly => 365.25 * 86_400.0,
        Freq::Decadal => 3652.5 * 86_400.0,
    }
}

/// The reference's upsampling guard on the undecoded axis `raw` with `units`: skipped when
/// the axis has fewer than two steps or its unit is not one of seconds to days. Whether it
/// checked the axis.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "step counts of a bounded axis"
)]
fn check_not_inflating(raw: &[f64], units: &str, freq: Freq) -> Result<bool, String> {
    let lower = units.to_lowercase();
    let Some((unit, _)) = lower.split_once(" since ") else {
        return Ok(false);
    };
    let Some(scale) = unit_seconds(unit.trim()) else {
        return Ok(false);
    };
    if raw.len() < 2 {
        return Ok(false);
    }
    let seconds: Vec<f64> = raw
        .iter()
        .map(|v| v * scale)
        .filter(|v| !v.is_nan())
        .collect();
    let (lo, hi) = seconds
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 {
        return Ok(true);
    }
    let target = nominal_seconds(freq);
    let produced = (span / target).floor() + 1.0;
    let n = raw.len();
    if produced <= n as f64 * INFLATION_TOLERANCE + 1.0 {
        return Ok(true);
    }
    let mut steps: Vec<f64> = raw.windows(2).map(|w| (w[1] - w[0]) * scale).collect();
    steps.sort_unstable_by(f64::total_cmp);
    let step = match steps.len() {
        0 => None,
        k if k % 2 == 1 => Some(steps[k / 2]),
        k => Some(f64::midpoint(steps[k / 2 - 1], steps[k / 2])),
    };
    Err(not_a_reduction(
        freq,
        produced.min(u64::MAX as f64) as u64,
        n,
        Some((span, step)),
    ))
}

/// The reference's message for a resampling that would grow the time axis.
fn not_a_reduction(
    freq: Freq,
    produced: u64,
    n: usize,
    axis: Option<(f64, Option<f64>)>,
) -> String {
    let mut message = format!(
        "Cannot reduce to '{}': that would produce {produced} time steps from {n}, which is \
         not a reduction.",
        freq.name()
    );
    if let Some((span, step)) = axis {
        message.push_str(&format!(
            " The source spans {} with a step of {}; '{}' is {}.",
            describe_seconds(span),
            step.map_or_else(|| "unknown".to_string(), describe_seconds),
            freq.name(),
            describe_seconds(nominal_seconds(freq)),
        ));
    }
    message.push_str(
        " Either the requested frequency is finer than the data, or the time axis is sparse \
         -- resampling fills every period between the first and last time step.",
    );
    message
}

/// A duration in the largest unit that keeps it at least 1, as the reference writes it.
fn describe_seconds(seconds: f64) -> String {
    for (scale, unit) in [(86_400.0, "day"), (3600.0, "hour"), (60.0, "minute")] {
        if seconds >= scale {
            let value = seconds / scale;
            let plural = if (value - 1.0).abs() < f64::EPSILON {
                ""
            } else {
                "s"
            };
            return format!("{} {unit}{plural}", six_digits(value));
        }
    }
    format!("{} seconds", six_digits(seconds))
}

/// A number with at most six significant digits, as Python's `{:.6g}`.
fn six_digits(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    #[expect(clippy::cast_possible_truncation, reason = "a decimal exponent")]
    let exponent = x.abs().log10().floor() as i32;
    if !(-4..6).contains(&exponent) {
        let text = format!("{x:.5e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let decimals = usize::try_from(5 - exponent).unwrap_or(0);
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Seconds since the calendar's day zero.
fn absolute(stamp: DateTime, calendar: Calendar) -> i64 {
    calendar.day_number(stamp.date) * SECONDS_PER_DAY + stamp.seconds
}

/// The date-time `seconds` after the calendar's day zero.
fn from_absolute(seconds: i64, calendar: Calendar) -> DateTime {
    DateTime {
        date: calendar.date(seconds.div_euclid(SECONDS_PER_DAY)),
        seconds: seconds.rem_euclid(SECONDS_PER_DAY),
    }
}

/// A time step as decoded: the date-time of its whole second and the nanoseconds past it
/// (`None`: missing).
type Stamp = Option<(DateTime, u32)>;

/// Nanoseconds since the calendar's day zero.
fn absolute_nanos((at, nanos): (DateTime, u32), calendar: Calendar) -> i128 {
    i128::from(absolute(at, calendar)) * 1_000_000_000 + i128::from(nanos)
}

/// Resampling bins (pandas' `resample` with the reference's offsets), closed and labelled on
/// the left: the output axis and the time steps of each bin. `guarded`: the reference's guard
/// has checked the axis (else the bins are bounded here, the same way).
fn resample(
    stamps: &[Stamp],
    freq: Freq,
    calendar: Calendar,
    time_var: &CombinedVar,
    calendar_attr: Option<&str>,
    guarded: bool,
) -> Result<Grouping, String> {
    if let Some(step) = stamps.iter().position(Option::is_none) {
        return Err(format!(
            "Cannot resample: the time axis {:?} is missing its value at step {step}, and \
             resampling needs a time in increasing order at every step",
            time_var.info.name
        ));
    }
    let present: Vec<(usize, (DateTime, u32))> = stamps
        .iter()
        .enumerate()
        .filter_map(|(step, stamp)| stamp.map(|s| (step, s)))
        .collect();
    let Some(&(_, (first, _))) = present.first() else {
        return Err("Cannot reduce in time: the time axis has no valid time".into());
    };
    if let Some(at) = present
        .windows(2)
        .position(|w| absolute_nanos(w[1].1, calendar) < absolute_nanos(w[0].1, calendar))
    {
        return Err(format!(
            "Cannot resample: the time axis {:?} is not in increasing order (step {} goes back \
             from {} to {}); concatenate the sources in time order, or use aggregate=auto",
            time_var.info.name,
            present[at + 1].0,
            shown(present[at].1.0),
            shown(present[at + 1].1.0),
        ));
    }
    let month = |s: &DateTime| s.date.year * 12 + i64::from(s.date.month) - 1;
    let origin = calendar.day_number(first.date) * SECONDS_PER_DAY;
    let tick_seconds = match freq {
        Freq::Hourly => Some(3600),
        Freq::ThreeHourly => Some(3 * 3600),
        Freq::SixHourly => Some(6 * 3600),
        Freq::Daily => Some(SECONDS_PER_DAY),
        _ => None,
    };
    let bin = |stamp: (DateTime, u32)| -> i64 {
        let at = stamp.0;
        match (freq, tick_seconds) {
            (_, Some(step)) => {
                let since = absolute_nanos(stamp, calendar) - i128::from(origin) * 1_000_000_000;
                i64::try_from(since.div_euclid(i128::from(step) * 1_000_000_000))
                    .expect("within MAX_OFFSET_YEARS")
            }
            (Freq::Monthly, _) => month(&at),
            (Freq::Seasonal, _) => (month(&at) + 1).div_euclid(3),
            (Freq::Yearly, _) => at.date.year,
            _ => (at.date.year - first.date.year).div_euclid(10),
        }
    };
    let label = |b: i64| -> DateTime {
        let day_one = |m: i64| DateTime {
            date: Date {
                year: m.div_euclid(12),
                month: u32::try_from(m.rem_euclid(12) + 1).expect("1 to 12"),
                day: 1,
            },
            seconds: 0,
        };
        match (freq, tick_seconds) {
            (_, Some(step)) => from_absolute(origin + b * step, calendar),
            (Freq::Monthly, _) => day_one(b),
            (Freq::Seasonal, _) => day_one(b * 3 - 1),
            (Freq::Yearly, _) => day_one(b * 12),
            _ => day_one((first.date.year + 10 * b) * 12),
        }
    };
    let bins: Vec<(usize, i64)> = present.iter().map(|&(step, s)| (step, bin(s))).collect();
    let lo = bins.first().expect("not empty").1;
    let hi = bins.last().expect("not empty").1;
    let produced = u64::try_from(hi - lo).unwrap_or(u64::MAX).saturating_add(1);
    // The bins themselves are held to the reference's bound where its guard could not read
    // the axis (units of months or years), and to twice the steps where it did: its guard
    // reads raw values, and nominal period lengths leave a bin or two of slack, but a
    // `scale_factor` on the time axis could otherwise make billions of bins of a hundred
    // steps. So no request makes unbounded work.
    let n = stamps.len() as u64;
    #[expect(clippy::cast_precision_loss, reason = "step counts")]
    let too_many = if guarded {
        produced > 2 * n + 2
    } else {
        produced as f64 > n as f64 * INFLATION_TOLERANCE + 1.0
    };
    if too_many {
        return Err(not_a_reduction(freq, produced, stamps.len(), None));
    }
    let mut groups = vec![Vec::new(); to_usize(produced)];
    for &(step, b) in &bins {
        groups[to_usize(u64::try_from(b - lo).expect("increasing"))].push(step as u64);
    }
    let labels: Vec<DateTime> = (lo..=hi).map(label).collect();
    Ok(Grouping {
        axis: time_axis(time_var, &labels, calendar, calendar_attr),
        groups,
    })
}

/// A date-time as `YYYY-MM-DD hh:mm:ss`.
fn shown(stamp: DateTime) -> String {
    let Date { year, month, day } = stamp.date;
    let (h, m, s) = (
        stamp.seconds / 3600,
        stamp.seconds / 60 % 60,
        stamp.seconds % 60,
    );
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}")
}

/// The time coordinate of resampled labels: whole units since the first label.
fn time_axis(
    time_var: &CombinedVar,
    labels: &[DateTime],
    calendar: Calendar,
    calendar_attr: Option<&str>,
) -> CombinedVar {
    let first = labels[0];
    let base = absolute(first, calendar);
    let offsets: Vec<i64> = labels
        .iter()
        .map(|l| absolute(*l, calendar) - base)
        .collect();
    let (unit, seconds) = [
        ("days", SECONDS_PER_DAY),
        ("hours", 3600),
        ("minutes", 60),
        ("seconds", 1),
    ]
    .into_iter()
    .find(|(_, s)| offsets.iter().all(|o| o % s == 0))
    .expect("every offset is whole seconds");
    let mut attrs = time_var.info.attrs.clone();
    for spent in [
        "units",
        "calendar",
        "missing_value",
        "scale_factor",
        "add_offset",
    ] {
        attrs.remove(spent);
    }
    attrs.insert(
        "units".into(),
        json!(format!("{unit} since {}", shown(first))),
    );
    if let Some(calendar) = calendar_attr {
        attrs.insert("calendar".into(), json!(calendar));
    }
    let values: Vec<u8> = offsets
        .iter()
        .flat_map(|o| (o / seconds).to_le_bytes())
        .collect();
    let name = time_var.info.name.clone();
    CombinedVar {
        info: VarInfo {
            name: name.clone(),
            dims: vec![Dim {
                name,
                len: labels.len() as u64,
            }],
            dtype: I64,
            attrs,
            fill_value: Value::Null,
            packing: Packing::default(),
        },
        origin: Origin::Values(values.into()),
    }
}

/// Climatology groups (xarray's `groupby("time.<key>")`): the groups present, in sorted order.
fn climatology(
    stamps: &[Stamp],
    freq: Freq,
    calendar: Calendar,
    part: &Part,
) -> Result<Grouping, String> {
    const SEASONS: [&str; 4] = ["DJF", "JJA", "MAM", "SON"];
    let key = |s: &DateTime| -> i64 {
        match freq {
            Freq::Hourly => s.seconds / 3600,
            Freq::Daily => {
                let new_year = Date {
                    year: s.date.year,
                    month: 1,
                    day: 1,
                };
                calendar.day_number(s.date) - calendar.day_number(new_year) + 1
            }
            Freq::Seasonal => match s.date.month {
                12 | 1 | 2 => 0,
                6..=8 => 1,
                3..=5 => 2,
                _ => 3,
            },
            _ => i64::from(s.date.month),
        }
    };
    let name = match freq {
        Freq::Hourly => "hour",
        Freq::Daily => "dayofyear",
        Freq::Seasonal => "season",
        _ => "month",
    };
    if part
        .vars
        .iter()
        .any(|v| v.info.name == name || v.info.dims.iter().any(|d| d.name == name))
    {
        return Err(format!(
            "Cannot make a climatology: the dataset already has a variable or dimension \
             named {name:?}"
        ));
    }
    let keys: Vec<Option<i64>> = stamps.iter().map(|s| s.map(|(at, _)| key(&at))).collect();
    let mut present: Vec<i64> = keys.iter().flatten().copied().collect();
    present.sort_unstable();
    present.dedup();
    let mut groups = vec![Vec::new(); present.len()];
    for (step, k) in keys.iter().enumerate() {
        if let Some(k) = k {
            let at = present.binary_search(k).expect("present");
            groups[at].push(step as u64);
        }
    }
    let dims = vec![Dim {
        name: name.to_string(),
        len: present.len() as u64,
    }];
    let (dtype, origin) = if freq == Freq::Seasonal {
        let labels: Vec<String> = present
            .iter()
            .map(|&k| SEASONS[to_usize(u64::try_from(k).expect("0 to 3"))].to_string())
            .collect();
        (Dtype::String, Origin::Strings(labels.into()))
    } else if keys.iter().any(Option::is_none) {
        // A missing time makes xarray's keys floats (NaN for it), and its groups' labels too.
        #[expect(clippy::cast_precision_loss, reason = "hours, days and months")]
        let values: Vec<u8> = present
            .iter()
            .flat_map(|&k| (k as f64).to_le_bytes())
            .collect();
        (F64, Origin::Values(values.into()))
    } else {
        let values: Vec<u8> = present.iter().flat_map(|k| k.to_le_bytes()).collect();
        (I64, Origin::Values(values.into()))
    };
    Ok(Grouping {
        axis: CombinedVar {
            info: VarInfo {
                name: name.to_string(),
                dims,
                dtype,
                attrs: Map::new(),
                fill_value: Value::Null,
                packing: Packing::default(),
            },
            origin,
        },
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reducer(method: Method, min_coverage: Option<f64>) -> Reduced {
        Reduced {
            source: CombinedVar {
                info: VarInfo {
                    name: "x".into(),
                    dims: Vec::new(),
                    dtype: F64,
                    attrs: Map::new(),
                    fill_value: Value::Null,
                    packing: Packing::default(),
                },
                origin: Origin::Source(0),
            },
            decoding: None,
            axis: 0,
            groups: Arc::from(Vec::new()),
            method,
            min_coverage,
        }
    }

    #[test]
    fn methods_skip_missing_values_as_xarray() {
        let nan = f64::NAN;
        let cases = [
            (Method::Mean, vec![1.0, nan, 3.0], 2.0),
            (Method::Sum, vec![1.0, nan, 3.0], 4.0),
            (Method::Sum, vec![nan, nan], 0.0),
            (Method::Count, vec![nan, 2.0], 1.0),
            (Method::Min, vec![5.0, nan, -1.0], -1.0),
            (Method::Max, vec![5.0, nan, -1.0], 5.0),
            (Method::Var, vec![1.0, 2.0, 3.0, nan], 2.0 / 3.0),
            (Method::Std, vec![1.0, 3.0], 1.0),
            (Method::Median, vec![4.0, 1.0, nan, 3.0, 2.0], 2.5),
            (Method::Median, vec![4.0, 1.0, 3.0], 3.0),
        ];
        for (method, values, expected) in cases {
            let got = gathered(&reducer(method, None), &values);
            assert!(
                (got - expected).abs() < 1e-12,
                "{method:?}: {got} != {expected}"
            );
        }
        for method in [Method::Mean, Method::Min, Method::Std, Method::Median] {
            assert!(
                gathered(&reducer(method, None), &[nan, nan]).is_nan(),
                "{method:?}"
            );
        }
        // Two of four valid: kept at 0.5, missing above it.
        for method in [Method::Mean, Method::Median] {
            assert_eq!(
                gathered(&reducer(method, Some(0.5)), &[1.0, nan, 3.0, nan]),
                2.0
            );
            assert!(gathered(&reducer(method, Some(0.6)), &[1.0, nan, 3.0, nan]).is_nan());
        }
    }

    /// One element's group of `values`, gathered in two runs as a block read gives them.
    fn gathered(reduced: &Reduced, values: &[f64]) -> f64 {
        let mut gather = Gather::new();
        let split = values.len() / 2;
        gather.start(reduced, 1, values.len());
        gather.add(reduced, &values[..split], (1, split, 1), 0);
        gather.add(
            reduced,
            &values[split..],
            (1, values.len() - split, 1),
            split,
        );
        let mut out = [0.0];
        gather.finish(reduced, &mut out);
        out[0]
    }

    #[test]
    fn blocks_of_several_elements_are_gathered_element_by_element() {
        // Two outer rows x three steps x two inner elements: element (o, i) has the values
        // 10 * o + i + 100 * k over the steps k.
        let values: Vec<f64> = (0..2)
            .flat_map(|o| {
                (0..3).flat_map(move |k| (0..2).map(move |i| f64::from(10 * o + i + 100 * k)))
            })
            .collect();
        for (method, want) in [
            (Method::Max, [200.0, 201.0, 210.0, 211.0]),
            (Method::Median, [100.0, 101.0, 110.0, 111.0]),
            (Method::Sum, [300.0, 303.0, 330.0, 333.0]),
        ] {
            let reduced = reducer(method, None);
            let mut gather = Gather::new();
            gather.start(&reduced, 4, 3);
            gather.add(&reduced, &values, (2, 3, 2), 0);
            let mut out = [0.0; 4];
            gather.finish(&reduced, &mut out);
            assert_eq!(out, want, "{method:?}");
        }
    }

    #[test]
    fn decoding_chooses_the_float_type_xarray_chooses() {
        let i16 = Dtype::Int(IntType::I16);
        let i32 = Dtype::Int(IntType::I32);
        let packing = |scale, offset| Packing { scale, offset };
        assert_eq!(decoded_type(i16, packing(Some(F32), None)), F32);
        assert_eq!(decoded_type(i16, packing(Some(F64), None)), F64);
        assert_eq!(decoded_type(i32, packing(Some(F32), None)), F32);
        assert_eq!(decoded_type(i32, packing(Some(F32), Some(F32))), F64);
        assert_eq!(decoded_type(i16, packing(Some(F32), Some(F32))), F32);
        assert_eq!(decoded_type(i16, packing(Some(F32), Some(F64))), F64);
        assert_eq!(decoded_type(F32, packing(Some(F64), None)), F64);
        assert_eq!(
            decoded_type(Dtype::Int(IntType::U8), Packing::default()),
            F32
        );
        assert_eq!(decoded_type(i32, Packing::default()), F64);
        assert_eq!(decoded_type(F32, Packing::default()), F32);
    }

    #[test]
    fn decoding_applies_only_the_attributes_present() {
        let decoding = |scale, offset, to| Decoding {
            missing: vec![-1.0],
            scale,
            offset,
            to,
            unsigned_bits: None,
        };
        // A negative zero keeps its sign when there is no offset to add, as in xarray.
        for to in [F32, F64] {
            let mut values = [-0.0, 2.0, -1.0];
            decoding(Some(0.5), None, to).apply(&mut values);
            assert!(values[0] == 0.0 && values[0].is_sign_negative(), "{to:?}");
            assert_eq!(values[1], 1.0);
            assert!(values[2].is_nan());
        }
        let mut values = [3.0];
        decoding(Some(0.5), Some(10.0), F64).apply(&mut values);
        assert_eq!(values, [11.5]);
        // Unsigned: -1 is 255 as a byte, and its fill value is cast the same way.
        let mut unsigned = Decoding {
            missing: vec![255.0],
            scale: None,
            offset: None,
            to: F32,
            unsigned_bits: Some(8),
        };
        let mut values = [-1.0, -2.0, 7.0];
        unsigned.apply(&mut values);
        assert!(values[0].is_nan());
        assert_eq!(&values[1..], [254.0, 7.0]);
        unsigned.missing.clear();
        assert_eq!(unsigned.value(-128.0), 128.0);
    }

    #[test]
    fn durations_are_written_as_the_reference_writes_them() {
        assert_eq!(describe_seconds(86_400.0), "1 day");
        assert_eq!(describe_seconds(3.0 * 86_400.0), "3 days");
        assert_eq!(describe_seconds(30.44 * 86_400.0), "30.44 days");
        assert_eq!(describe_seconds(5400.0), "1.5 hours");
        assert_eq!(describe_seconds(12.0), "12 seconds");
        assert_eq!(six_digits(1_234_567.0), "1.23457e+06");
        assert_eq!(six_digits(0.000_012_5), "1.25e-05");
    }

    #[test]
    fn runs_join_consecutive_steps() {
        assert_eq!(runs(&[0, 1, 2, 5, 6, 9]), vec![(0, 3), (5, 2), (9, 1)]);
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn the_guard_refuses_upsampling_and_sparse_axes() {
        // Monthly values to daily: 30 times as many steps.
        let monthly: Vec<f64> = (0..12).map(|m| f64::from(m) * 30.0).collect();
        let refused = check_not_inflating(&monthly, "days since 2000-01-01", Freq::Daily);
        assert!(refused.unwrap_err().contains("which is not a reduction"));
        assert!(check_not_inflating(&monthly, "days since 2000-01-01", Freq::Monthly).is_ok());
        // Two steps 1,500 years apart, yearly.
        let sparse = [0.0, 1500.0 * 365.0];
        assert!(check_not_inflating(&sparse, "days since 0001-01-01", Freq::Yearly).is_err());
        // Units the reference cannot read skip it.
        assert!(check_not_inflating(&monthly, "months since 2000-01-01", Freq::Daily).is_ok());
    }
}
