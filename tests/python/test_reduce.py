"""Reduced stores (`time_freq`, `time_method`, `climatology`, `min_coverage`, `dtype`) against
xarray: for every case, the store svcd serves (opened with xarray over HTTP, CF-decoded) equals
what xarray computes from the same files with the reference's reduction rules (reference
section 6, written out below with xarray's own decode_cf, resample and groupby); where those
rules raise, svcd fails the store with a reason that says the same.

Floats are compared to 1e-6 of the variable's largest value: svcd computes in 64 bits, and
xarray reduces 32-bit floats in 32 bits (then casts them, with dtype=float64), in an order that
depends on its chunking, so a mean near zero of values near 30 differs in its last bits. Text
coordinates (seasons) are compared by value: zarr gives them back as numpy strings, where
xarray's groupby made objects."""

import numpy as np
import pytest
import requests
import xarray as xr

from test_aggregate import expected as aggregated, open_source
from test_portal import wait_ready

FREQ = {"hourly": "h", "3hourly": "3h", "6hourly": "6h", "daily": "D", "monthly": "MS",
        "seasonal": "QS-DEC", "yearly": "YS", "decadal": "10YS"}
NOMINAL = {"hourly": 3600.0, "3hourly": 10800.0, "6hourly": 21600.0, "daily": 86400.0,
           "monthly": 30.44 * 86400, "seasonal": 91.31 * 86400, "yearly": 365.25 * 86400,
           "decadal": 3652.5 * 86400}
CLIMATOLOGY = {"hourly": "hour", "daily": "dayofyear", "monthly": "month", "seasonal": "season"}
UNIT_SECONDS = {"second": 1, "seconds": 1, "sec": 1, "s": 1, "minute": 60, "minutes": 60, "min": 60,
                "hour": 3600, "hours": 3600, "hr": 3600, "h": 3600, "day": 86400, "days": 86400, "d": 86400}
METHODS = ["mean", "sum", "min", "max", "std", "var", "median", "count"]


class NotAReduction(Exception):
    pass


def write(path, step_hours, steps, calendar="standard", start="2001-01-01", gap=None, seed=0, accumulated=False, inner=False, missing=None):
    """A file of `steps` time steps `step_hours` apart (hours since `start`), with a float
    variable with NaNs, a packed int16 variable (scale_factor, add_offset, _FillValue), an int
    count, orography, a scalar grid mapping, time bounds and a fixed string-free layout.
    `gap` (first, last) removes a run of steps (a sparse axis with empty bins)."""
    rng = np.random.default_rng(seed)
    hours = np.arange(steps, dtype="f8") * step_hours
    if gap:
        hours = np.delete(hours, np.s_[gap[0]:gap[1]])
    n = hours.size
    units = f"hours since {start}"
    if accumulated:
        # Days summed step by step, as a model writes them: 0.9999999999999997 for day 1.
        hours = np.concatenate([[0.0], np.cumsum(np.full(n - 1, step_hours / 24.0))])
        units = f"days since {start}"
    tas = rng.normal(280, 8, (n, 3, 4)).astype("f4")
    tas[rng.random(tas.shape) < 0.2] = np.nan
    packed = rng.integers(-3000, 3000, (n, 3, 4)).astype("i2")
    packed[rng.random(packed.shape) < 0.1] = -32767
    ds = xr.Dataset(
        {
            "tas": (("time", "lat", "lon"), tas, {"units": "K", "cell_methods": "area: mean", "_FillValue": np.float32(np.nan)}),
            "pr": (("time", "lat", "lon"), packed, {"units": "kg m-2 s-1", "scale_factor": np.float32(0.01),
                                                    "add_offset": np.float32(5.0), "_FillValue": np.int16(-32767)}),
            "count": ("time", np.arange(n, dtype="i4") % 7),
            "orog": (("lat", "lon"), np.arange(12, dtype="f8").reshape(3, 4), {"units": "m"}),
            "crs": ((), np.int32(0), {"grid_mapping_name": "latitude_longitude"}),
            "time_bnds": (("time", "bnds"), np.stack([hours, hours + step_hours], axis=1)),
        },
        coords={
            "time": ("time", hours, {"units": units, "calendar": calendar, "standard_name": "time",
                                     "axis": "T", "bounds": "time_bnds"}),
            "lat": ("lat", [10.0, 20.0, 30.0], {"units": "degrees_north"}),
            "lon": ("lon", [0.0, 90.0, 180.0, 270.0], {"units": "degrees_east"}),
        },
        attrs={"title": path.stem, "frequency": f"{step_hours}h"},
    )
    if inner:
        # A variable whose time axis is not its first.
        ds["ua"] = (("lat", "time", "lon"), rng.normal(0, 10, (3, n, 4)).astype("f4"), {"units": "m s-1"})
    encoding = {name: {"_FillValue": None} for name in ("count", "orog", "crs", "time_bnds", "time", "lat", "lon")}
    if missing is not None:
        # One time step without its time.
        times = ds["time"].values.copy()
        times[missing] = -1.0
        ds = ds.assign_coords(time=("time", times, ds["time"].attrs))
        encoding["time"] = {"_FillValue": -1.0}
    ds.to_netcdf(path, engine="netcdf4", encoding=encoding)
    return str(path)


@pytest.fixture(scope="module")
def files(daemon):
    root = daemon.data / "reduce"
    root.mkdir()
    return {
        "hourly": write(root / "hourly.nc", 1, 24 * 9 + 5, start="2001-02-27 05:00:00", seed=1),
        "6hourly": write(root / "6hourly.nc", 6, 4 * 400, seed=2),
        "daily-noleap": write(root / "daily-noleap.nc", 24, 365 * 2 + 40, calendar="noleap", start="2003-11-20", seed=3),
        "daily-360": write(root / "daily-360.nc", 24, 360 * 2, calendar="360_day", start="1990-01-01", seed=4),
        "monthly": write(root / "monthly.nc", 24 * 30, 12 * 26, calendar="360_day", start="1853-06-01", seed=5),
        "sparse": write(root / "sparse.nc", 24, 200, start="2010-01-01", gap=(40, 100), seed=6),
        "accumulated": write(root / "accumulated.nc", 1, 24 * 6, start="2012-03-01", seed=7, accumulated=True),
        "inner": write(root / "inner.nc", 6, 4 * 70, calendar="julian", start="1701-01-01", seed=8, inner=True),
        "missing-time": write(root / "missing-time.nc", 3, 8 * 20, start="2020-01-01", seed=9, missing=17),
    }


@pytest.fixture(scope="module")
def headers(daemon, tmp_path_factory):
    token = daemon.token_file(tmp_path_factory.mktemp("reduce-token") / "rea.json", "rea")
    return {"Authorization": f"Bearer {token}"}


def time_dim(ds):
    for name in ("time", "valid_time", "t"):
        if name in ds.dims and name in ds.variables:
            return name
    for name in ds.dims:
        if name in ds.variables and " since " in str(ds[name].attrs.get("units", "")):
            return name
    return None


def guard(ds, dim, freq):
    """The reference's upsampling check on the undecoded axis."""
    var = ds[dim]
    units = str(var.attrs.get("units", "")).lower()
    scale = UNIT_SECONDS.get(units.split(" since ", 1)[0].strip()) if " since " in units else None
    if var.size < 2 or scale is None:
        return
    axis = var.values.astype("f8") * scale
    span = float(np.nanmax(axis) - np.nanmin(axis))
    if span > 0 and int(span // NOMINAL[freq]) + 1 > axis.size * 1.01 + 1:
        raise NotAReduction(freq)


def reduce(ds, options):
    """The reference's reduction of one undecoded dataset, with xarray."""
    freq = options["time_freq"]
    method = options.get("time_method", "mean")
    climatology = options.get("climatology", False)
    min_coverage = options.get("min_coverage", 0.0)
    dtype = options.get("dtype", "float32")
    dim = time_dim(ds)
    if dim is None:
        raise ValueError("no time dimension")
    if not climatology:
        guard(ds, dim, freq)
    out = xr.decode_cf(ds, decode_times=True, decode_coords=False)
    bounds = {v.attrs["bounds"] for v in out.variables.values() if isinstance(v.attrs.get("bounds"), str) and v.attrs["bounds"] in out.variables}
    bounds |= {str(n) for n in out.variables if str(n).endswith(("_bnds", "_bounds", "_vertices"))}
    out = out.drop_vars(sorted(bounds))
    to_reduce = [n for n, v in out.data_vars.items() if dim in v.dims and (np.issubdtype(v.dtype, np.number) or v.dtype == bool)]
    to_keep = [n for n, v in out.data_vars.items() if dim not in v.dims]
    if not to_reduce:
        raise ValueError("nothing to reduce")
    source = out[to_reduce]
    if climatology:
        grouped = source.groupby(f"{dim}.{CLIMATOLOGY[freq]}")
    else:
        grouped = source.resample({dim: FREQ[freq]})
    reduced = getattr(grouped, method)(keep_attrs=True)
    if min_coverage > 0:
        for name in to_reduce:
            da = source[name]
            if not np.issubdtype(da.dtype, np.floating):
                continue
            valid = da.notnull()
            ones = xr.ones_like(da[dim], dtype="int64")
            if climatology:
                key = f"{dim}.{CLIMATOLOGY[freq]}"
                fraction = valid.groupby(key).sum(dim) / ones.groupby(key).sum(dim)
            else:
                total = ones.resample({dim: FREQ[freq]}).sum(dim)
                fraction = valid.resample({dim: FREQ[freq]}).sum(dim) / total.where(total > 0)
            reduced[name] = reduced[name].where(fraction >= min_coverage)
            reduced[name].attrs = dict(da.attrs)
    for name in to_keep:
        reduced[name] = out[name]
    fragment = f"{dim}: {method} over {freq}" if climatology else f"{dim}: {method} ({freq})"
    for name in reduced.data_vars:
        existing = str(reduced[name].attrs.get("cell_methods", "")).strip()
        reduced[name].attrs["cell_methods"] = f"{existing} {fragment}".strip()
    if dtype != "keep":
        for name, da in reduced.data_vars.items():
            if np.issubdtype(da.dtype, np.floating) and da.dtype != np.dtype(dtype):
                reduced[name] = da.astype(dtype)
                reduced[name].attrs = dict(da.attrs)
    return reduced


def convert(daemon, headers, paths, options):
    answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json=dict(options, path=paths), headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    return url, wait_ready(daemon.base, headers, url, timeout=120)


def assert_close(got, want, where):
    assert got.dims == want.dims, where
    if want.dtype.kind in "OUT":
        assert got.dtype.kind in "OUT", (where, got.dtype)
        assert [str(v) for v in got.values] == [str(v) for v in want.values], where
        return
    assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
    if np.issubdtype(want.dtype, np.floating):
        rtol = 1e-6
        values = want.values
        scale = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0
        np.testing.assert_allclose(got.values, values, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got.values, want.values, err_msg=where)


def assert_same(served, want, where):
    assert dict(served.sizes) == dict(want.sizes), where
    assert set(served.variables) == set(want.variables), (where, set(served.variables) ^ set(want.variables))
    for name in want.variables:
        assert_close(served[name].variable, want[name].variable, f"{where}: {name}")
        attrs = {k: v for k, v in served[name].attrs.items() if k != "_FillValue"}
        assert attrs == {k: v for k, v in want[name].attrs.items() if k != "_FillValue"}, (where, name)
    assert served.attrs == want.attrs, where


def open_served(url, headers, group=None):
    return xr.open_zarr(url, group=group, storage_options={"headers": headers}, consolidated=True, decode_coords=False)


def check(daemon, headers, paths, options, where, plan=None):
    """svcd's reduced store of `paths` is what xarray computes, or fails where it raises."""
    try:
        groups = aggregated(paths, plan) if plan else {"": open_source(paths[0])}
        want = {name: reduce(ds, options) for name, ds in groups.items()}
    except Exception as error:
        want = error
    url, status = convert(daemon, headers, paths, dict(options, **(plan or {})))
    if isinstance(want, Exception):
        assert status["status"] == 1, (where, status, want)
        assert status["reason"], where
        return status["reason"]
    assert status == {"status": 0, "reason": ""}, (where, status)
    for group, dataset in want.items():
        assert_same(open_served(url, headers, group or None), dataset, where)
    return None


RESAMPLE_SOURCES = {"hourly": "hourly", "3hourly": "hourly", "6hourly": "hourly", "daily": "6hourly",
                    "monthly": "daily-noleap", "seasonal": "daily-noleap", "yearly": "daily-360", "decadal": "monthly"}


@pytest.mark.parametrize("freq", list(FREQ))
@pytest.mark.parametrize("method", METHODS)
def test_every_frequency_and_method_is_what_xarray_computes(daemon, headers, files, freq, method):
    source = files[RESAMPLE_SOURCES[freq]]
    check(daemon, headers, [source], {"time_freq": freq, "time_method": method}, f"{freq}/{method}")


CLIMATOLOGY_CASES = [
    ("hourly", "hourly", "mean"), ("hourly", "hourly", "max"),
    ("daily", "daily-noleap", "mean"), ("daily", "6hourly", "median"),
    ("monthly", "daily-360", "mean"), ("monthly", "monthly", "std"), ("monthly", "daily-noleap", "count"),
    ("seasonal", "daily-noleap", "mean"), ("seasonal", "monthly", "sum"),
]


@pytest.mark.parametrize("freq,source,method", CLIMATOLOGY_CASES)
def test_climatologies_are_what_xarray_computes(daemon, headers, files, freq, source, method):
    check(daemon, headers, [files[source]], {"time_freq": freq, "time_method": method, "climatology": True},
          f"climatology {freq}/{method} of {source}")


OPTION_CASES = [
    ("coverage-half", "6hourly", {"time_freq": "daily", "min_coverage": 0.5}),
    ("coverage-most", "daily-noleap", {"time_freq": "monthly", "time_method": "max", "min_coverage": 0.9}),
    ("coverage-count", "6hourly", {"time_freq": "daily", "time_method": "count", "min_coverage": 0.75}),
    ("coverage-climatology", "daily-noleap", {"time_freq": "monthly", "climatology": True, "min_coverage": 0.81}),
    ("coverage-all", "hourly", {"time_freq": "6hourly", "min_coverage": 1.0}),
    ("float64", "daily-noleap", {"time_freq": "monthly", "dtype": "float64"}),
    ("keep", "daily-noleap", {"time_freq": "monthly", "dtype": "keep"}),
    ("keep-sum", "6hourly", {"time_freq": "daily", "time_method": "sum", "dtype": "keep"}),
    ("keep-min", "6hourly", {"time_freq": "daily", "time_method": "min", "dtype": "keep"}),
    ("keep-climatology-median", "monthly", {"time_freq": "seasonal", "climatology": True, "time_method": "median", "dtype": "keep"}),
    # Empty bins: NaN for every method, integers promoted to floats.
    ("sparse-mean", "sparse", {"time_freq": "daily", "dtype": "keep"}),
    ("sparse-sum", "sparse", {"time_freq": "daily", "time_method": "sum", "dtype": "keep"}),
    ("sparse-count", "sparse", {"time_freq": "daily", "time_method": "count"}),
    ("sparse-min-keep", "sparse", {"time_freq": "daily", "time_method": "min", "dtype": "keep"}),
    ("sparse-monthly-coverage", "sparse", {"time_freq": "monthly", "min_coverage": 0.5}),
    # Times a hair below midnight belong to the day before, as xarray decodes them.
    ("accumulated-daily", "accumulated", {"time_freq": "daily", "time_method": "sum"}),
    ("accumulated-hourly-climatology", "accumulated", {"time_freq": "hourly", "climatology": True, "time_method": "count"}),
    # A variable with time as its second axis: the output axis comes first, as xarray's.
    ("inner-time-axis", "inner", {"time_freq": "monthly", "time_method": "median"}),
    ("inner-time-axis-climatology", "inner", {"time_freq": "seasonal", "climatology": True, "time_method": "std"}),
    # A step without its time is in no group; resampling needs every time, as xarray.
    ("missing-time-climatology", "missing-time", {"time_freq": "hourly", "climatology": True, "time_method": "count"}),
    ("missing-time-resample", "missing-time", {"time_freq": "daily"}),
]


@pytest.mark.parametrize("case", OPTION_CASES, ids=[c[0] for c in OPTION_CASES])
def test_coverage_dtype_and_empty_bins_are_what_xarray_computes(daemon, headers, files, case):
    name, source, options = case
    check(daemon, headers, [files[source]], options, name)


def test_upsampling_and_sparse_axes_fail_with_the_reference_reason(daemon, headers, files):
    for source, freq in [("monthly", "daily"), ("daily-noleap", "hourly"), ("6hourly", "hourly")]:
        reason = check(daemon, headers, [files[source]], {"time_freq": freq}, f"{source} to {freq}")
        assert reason is not None and "which is not a reduction" in reason, reason
        assert f"Cannot reduce to '{freq}'" in reason, reason


def test_a_file_without_time_fails_with_the_reference_reason(daemon, headers, files):
    path = daemon.data / "reduce" / "fixed.nc"
    xr.Dataset({"orog": (("lat", "lon"), np.zeros((2, 2), "f4"))}).to_netcdf(path)
    url, status = convert(daemon, headers, [str(path)], {"time_freq": "monthly"})
    assert status["status"] == 1 and "no time dimension" in status["reason"], status


def test_reduced_aggregations_reduce_each_group(daemon, headers, files):
    paths = [files["daily-noleap"], files["daily-360"]]
    # Two calendars cannot be concatenated on one axis by time: both are reduced as groups
    # or the store fails as xarray does.
    check(daemon, headers, paths, {"time_freq": "yearly", "time_method": "max"}, "groups", plan={"aggregate": "concat", "group_by": "vars"})
    from test_aggregate import write as write_cmip
    root = daemon.data / "reduce"
    t1 = write_cmip(root / "agg-t1.nc", time=range(0, 40), seed=1)
    t2 = write_cmip(root / "agg-t2.nc", time=range(40, 75), seed=2)
    check(daemon, headers, [str(t2), str(t1)], {"time_freq": "monthly"}, "auto then monthly", plan={"aggregate": "auto"})
    check(daemon, headers, [str(t1), str(t2)], {"time_freq": "monthly", "time_method": "sum", "climatology": True},
          "concat then climatology", plan={"aggregate": "concat"})


def test_the_reduction_names_the_store_and_bad_options_are_422(daemon, headers, files):
    source = [files["6hourly"]]
    plain, _ = convert(daemon, headers, source, {})
    daily, _ = convert(daemon, headers, source, {"time_freq": "daily"})
    again, _ = convert(daemon, headers, source, {"time_freq": "daily", "time_method": "mean", "dtype": "float32"})
    daily_max, _ = convert(daemon, headers, source, {"time_freq": "daily", "time_method": "max"})
    assert daily == again and len({plain, daily, daily_max}) == 3
    for options, words in [
        ({"time_freq": "weekly"}, "Unknown time_freq 'weekly'"),
        ({"time_freq": "daily", "time_method": "mode"}, "Unknown time_method 'mode'"),
        ({"time_freq": "yearly", "climatology": True}, "A 'yearly' climatology is not meaningful."),
        ({"time_method": "max"}, "require 'time_freq' to be set"),
        ({"time_freq": "daily", "min_coverage": 2}, "min_coverage must be between 0 and 1"),
        ({"time_freq": "daily", "dtype": "int8"}, "Unknown dtype 'int8'"),
        ({"space": "mean"}, "Spatial reduction is not implemented yet"),
    ]:
        answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json=dict(options, path=source), headers=headers, timeout=30)
        assert answer.status_code == 422, (options, answer.text)
        assert words in answer.json()["detail"], (options, answer.text)


def test_load_reduces_every_store_it_starts(daemon, headers):
    load = f"{daemon.base}/databrowser/load/svc"
    files = requests.get(f"{daemon.base}/databrowser/data-search/svc/file", params={"project": "cordex"}, timeout=30).text.split()
    source = files[0]
    [plain] = requests.get(load, params={"file": source}, headers=headers, timeout=60).text.split()
    answer = requests.get(load, params={"file": source, "time_freq": "yearly", "time_method": "max"}, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    [url] = answer.text.split()
    assert url != plain
    status = wait_ready(daemon.base, headers, url, timeout=120)
    want = None
    try:
        want = reduce(open_source(source), {"time_freq": "yearly", "time_method": "max"})
    except Exception:
        assert status["status"] == 1 and status["reason"], status
    if want is not None:
        assert status == {"status": 0, "reason": ""}, status
        assert_same(open_served(url, headers), want, "load yearly max")
    bad = requests.get(load, params={"file": source, "time_freq": "decadal", "climatology": "true"}, headers=headers, timeout=30)
    assert bad.status_code == 422 and "not meaningful" in bad.json()["detail"], bad.text


def test_a_file_claiming_a_billion_time_steps_fails_its_store_and_the_daemon_stays_up(daemon, headers, files):
    """8 MB on disk, a time dimension of 10^9 steps in chunks never written: neither its
    plain nor its reduced store may make the daemon allocate what the file claims."""
    import netCDF4

    path = daemon.data / "reduce" / "billion.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("time", 10**9)
        t = f.createVariable("time", "f8", ("time",), chunksizes=(1 << 20,), fill_value=False)
        t.units = "days since 2000-01-01"
        f.createVariable("x", "f4", ("time",), chunksizes=(1 << 20,))
        t[0:3] = [0, 1, 2]
    assert path.stat().st_size < 64 * 2**20
    for options, words in [({"time_freq": "yearly"}, "at most 10000000 can be reduced"), ({}, "chunks")]:
        url, status = convert(daemon, headers, [str(path)], options)
        assert status["status"] == 1 and words in status["reason"], (options, status)
    assert requests.get(f"{daemon.base}/ping", timeout=10).status_code == 200


def test_string_variables_without_time_are_carried_over(daemon, headers, files):
    """A NetCDF-4 string variable without time rides along (the reference carries every
    variable without the time dimension); one with time is dropped."""
    import netCDF4

    path = daemon.data / "reduce" / "strings.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("time", 48)
        f.createDimension("station", 3)
        t = f.createVariable("time", "f8", ("time",))
        t.units = "hours since 2001-01-01"
        t[:] = np.arange(48.0)
        names = f.createVariable("station_name", str, ("station",))
        for i, name in enumerate(["Zürich", "Hamburg", "Oslo-Blindern"]):
            names[i] = name
        flags = f.createVariable("flag", str, ("time",))
        for i in range(48):
            flags[i] = "ok" if i % 5 else "bad"
        v = f.createVariable("tas", "f4", ("time", "station"))
        v[:] = np.arange(48 * 3, dtype="f4").reshape(48, 3)
    check(daemon, headers, [str(path)], {"time_freq": "daily", "time_method": "max"}, "strings")


def test_a_time_coordinate_of_strings_is_refused_before_it_is_read(daemon, headers, files):
    """The NetCDF library reads a string variable as C strings of whatever length each
    element claims, which the daemon would neither bound nor free: a reduction refuses a
    string time coordinate by its type, before reading it, and the daemon stays up."""
    import netCDF4

    path = daemon.data / "reduce" / "string-time.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("time", 48)
        t = f.createVariable("time", str, ("time",))
        for i in range(48):
            t[i] = f"2001-01-{1 + i // 24:02d}T{i % 24:02d}:00"
        f.createVariable("tas", "f4", ("time",))[:] = np.arange(48.0, dtype="f4")
    url, status = convert(daemon, headers, [str(path)], {"time_freq": "daily"})
    assert status["status"] == 1, status
    assert 'time coordinate "time" holds strings, not numbers' in status["reason"], status
    assert requests.get(f"{daemon.base}/ping", timeout=10).status_code == 200


def test_a_scaled_time_axis_cannot_make_billions_of_bins(daemon, headers, files):
    """The reference's guard reads the raw axis (100 steps of hours); decoded with its
    scale_factor the axis spans 570,000 years of hours. The store fails, the daemon stays."""
    path = daemon.data / "reduce" / "scaled-time.nc"
    ds = xr.Dataset({"tas": (("time",), np.arange(100, dtype="f4"))},
                    coords={"time": ("time", np.arange(100, dtype="f8"), {"units": "hours since 2000-01-01", "scale_factor": 5e7})})
    ds.to_netcdf(path, encoding={"time": {"_FillValue": None}})
    url, status = convert(daemon, headers, [str(path)], {"time_freq": "hourly"})
    assert status["status"] == 1 and "not a reduction" in status["reason"], status
    assert requests.get(f"{daemon.base}/ping", timeout=10).status_code == 200
