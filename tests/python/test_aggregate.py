"""Aggregated stores (`aggregate`) against xarray: for every case, the store svcd serves
(opened with xarray over HTTP) equals what xarray computes from the same files with the same
options, opened as the reference service opens them (decode_cf=False, decode_coords=False);
where xarray raises, svcd fails the store with a reason.

`expected` is the combination the service documents (daemon/src/convert/combine.rs), written
with xarray's own merge, concat, combine_by_coords and combine_nested, every option passed
explicitly so that xarray's changing defaults do not change the meaning."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import requests
import xarray as xr

from test_portal import wait_ready

GRID = ("lat", "lon", "rlat", "rlon", "x", "y")


def write(path, time=None, lat=3, lat0=0.0, variables=("tas",), seed=0, drop=(), mask_offset=0.0, ints=False):
    """A small CMIP-like file: `variables` on (time, lat, lon), or (lat, lon) without time,
    with orog (lat, lon), mask (lat, lon; shifted by `mask_offset`), a scalar height, time
    bounds and an int count per time step."""
    rng = np.random.default_rng(seed)
    lats = lat0 + np.arange(lat, dtype="f8") * 10.0
    lons = np.arange(4, dtype="f8") * 90.0
    ds = xr.Dataset(coords={"lat": ("lat", lats, {"units": "degrees_north"}), "lon": ("lon", lons, {"units": "degrees_east"})})
    grid = (lat, 4)
    if time is not None:
        ds["time"] = ("time", np.asarray(time, dtype="f8"), {"units": "days since 2000-01-01", "calendar": "standard"})
        ds = ds.set_coords("time")
        for name in variables:
            values = rng.normal(280, 5, (len(time),) + grid).astype("f4")
            values[0, 0, 0] = np.nan
            ds[name] = (("time", "lat", "lon"), values, {"units": "K", "long_name": name})
        ds["time_bnds"] = (("time", "bnds"), np.stack([ds.time.values, ds.time.values + 1], axis=1))
        ds["count"] = ("time", np.arange(len(time), dtype="i4") + int(time[0]))
    else:
        for name in variables:
            ds[name] = (("lat", "lon"), rng.normal(0, 1, grid).astype("f4"), {"long_name": name})
    ds["orog"] = (("lat", "lon"), np.arange(lat * 4, dtype="f4").reshape(grid), {"units": "m"})
    ds["mask"] = (("lat", "lon"), np.ones(grid, dtype="f4") + mask_offset)
    ds["height"] = ((), 2.0, {"units": "m"})
    if ints:
        ds["band"] = ("lat", np.arange(lat, dtype="i4"))
    ds = ds.drop_vars(list(drop))
    ds.attrs = {"title": path.stem, "source": "test"}
    ds.to_netcdf(path, engine="netcdf4")
    return path


@pytest.fixture(scope="module")
def files(daemon):
    root = daemon.data / "aggregate"
    root.mkdir()
    made = {
        "t1": write(root / "t1.nc", time=range(0, 4), seed=1),
        "t2": write(root / "t2.nc", time=range(4, 8), seed=2, mask_offset=1.0),
        "t3": write(root / "t3.nc", time=range(8, 10), seed=3),
        "p1": write(root / "p1.nc", time=range(0, 4), variables=("pr",), seed=4),
        "c1": write(root / "c1.nc", time=range(0, 4), seed=5),
        "g1": write(root / "g1.nc", time=range(4, 8), lat=5, seed=6),
        "l1": write(root / "l1.nc", time=range(4, 8), lat0=5.0, seed=7),
        "m1": write(root / "m1.nc", time=range(10, 12), seed=8, drop=("height",)),
        "f1": write(root / "f1.nc", variables=("sftlf",), seed=9),
        "n1": write(root / "n1.nc", time=range(0, 4), seed=13, drop=("count",)),
        "p2": write(root / "p2.nc", time=range(2, 6), variables=("pr",), seed=10, drop=("count",)),
        "i1": write(root / "i1.nc", time=range(0, 4), seed=11, ints=True),
        "i2": write(root / "i2.nc", time=range(4, 8), lat0=5.0, seed=12, ints=True),
    }
    return {name: str(path) for name, path in made.items()}


@pytest.fixture(scope="module")
def headers(daemon, tmp_path_factory):
    token = daemon.token_file(tmp_path_factory.mktemp("agg-token") / "ann.json", "ann")
    return {"Authorization": f"Bearer {token}"}


def open_source(path):
    return xr.open_dataset(path, decode_cf=False, decode_coords=False, cache=False).load()


def concat_dim(dsets, plan):
    if plan.get("dim"):
        return plan["dim"]
    if all("time" in d.dims for d in dsets):
        return "time"
    common = sorted(set.intersection(*(set(d.dims) for d in dsets)))
    if not common:
        raise ValueError("no dimension to concatenate along")
    return common[0]


def concat(dsets, plan):
    return xr.concat(
        dsets,
        dim=concat_dim(dsets, plan),
        join=plan.get("join", "outer"),
        compat=plan.get("compat", "override"),
        data_vars=plan.get("data_vars", "all"),
        coords=plan.get("coords", "minimal"),
        combine_attrs="override",
    )


def merge(dsets, plan):
    return xr.merge(dsets, join=plan.get("join", "outer"), compat=plan.get("compat", "no_conflicts"), combine_attrs="override")


def inferred(dsets, plan):
    if len(dsets) == 1:
        return dsets[0]
    names = [set(d.data_vars) for d in dsets]
    shared = any(names[i] & names[j] for i in range(len(names)) for j in range(i))
    if not shared and set().union(*names):
        return merge(dsets, plan)
    try:
        dim = concat_dim(dsets, plan)
    except ValueError:
        return merge(dsets, plan)
    return concat(dsets, dict(plan, dim=dim))


def auto(dsets, plan):
    try:
        return xr.combine_by_coords(
            dsets,
            join=plan.get("join", "outer"),
            compat=plan.get("compat", "no_conflicts"),
            data_vars=plan.get("data_vars", "all"),
            coords=plan.get("coords", "different"),
            combine_attrs="override",
        )
    except Exception:
        pass
    if plan.get("dim"):
        try:
            return xr.combine_nested(
                dsets,
                concat_dim=plan["dim"],
                join=plan.get("join", "outer"),
                compat=plan.get("compat", "no_conflicts"),
                data_vars=plan.get("data_vars", "all"),
                coords="different",
                combine_attrs="override",
            )
        except Exception:
            pass
    return inferred(dsets, plan)


def signature(ds, key):
    if key == "vars":
        return ",".join(sorted(ds.data_vars))
    dims = sorted(f"{d}={n}" for d, n in ds.sizes.items() if d in GRID)
    coords = sorted(f"{k}:{ds[k].dims}:{ds[k].shape}" for k in ds.variables if k in GRID)
    return f"dims[{','.join(dims)}]|coords[{','.join(coords)}]"


def grouped(dsets, key, plan, failed):
    groups = {}
    for ds in dsets:
        groups.setdefault(signature(ds, key), []).append(ds)
    if failed is not None and len(groups) == 1:
        raise failed
    return {f"group{n}": inferred(members, plan) for n, members in enumerate(groups.values())}


def expected(paths, plan):
    """The groups of the store, or the exception xarray raises."""
    dsets = [open_source(p) for p in paths]
    if plan.get("group_by"):
        return grouped(dsets, plan["group_by"], plan, None)
    try:
        mode = plan["aggregate"]
        if mode == "auto":
            return {"": auto(dsets, plan)}
        if mode == "merge":
            return {"": merge(dsets, plan)}
        return {"": concat(dsets, plan)}
    except Exception as failed:
        return grouped(dsets, "grid", plan, failed)


def without_fill(attrs):
    return {k: v for k, v in attrs.items() if k != "_FillValue"}


def assert_same(served, want, where):
    assert dict(served.sizes) == dict(want.sizes), where
    assert set(served.variables) == set(want.variables), where
    for name, var in want.variables.items():
        got = served.variables[name]
        assert got.dims == var.dims, (where, name)
        assert got.dtype == var.dtype, (where, name)
        np.testing.assert_array_equal(got.values, var.values, err_msg=f"{where}: {name}")
        assert_same_attrs(without_fill(got.attrs), without_fill(var.attrs), (where, name))
    assert_same_attrs(served.attrs, want.attrs, where)


def assert_same_attrs(got, want, where):
    """Attributes equal; an attribute of several values is a list in one and an array in the
    other."""
    assert set(got) == set(want), where
    for key, value in want.items():
        assert np.array_equal(np.asarray(got[key]), np.asarray(value)), (where, key, got[key], value)


def convert(daemon, headers, paths, plan):
    body = dict(plan, path=paths)
    answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    return url, wait_ready(daemon.base, headers, url)


CASES = [
    ("concat-time", ["t1", "t2", "t3"], {"aggregate": "concat"}),
    ("concat-minimal", ["t1", "t2", "t3"], {"aggregate": "concat", "data_vars": "minimal"}),
    ("concat-different", ["t1", "t2", "t3"], {"aggregate": "concat", "data_vars": "different"}),
    ("concat-minimal-equals-conflict", ["t1", "t2"], {"aggregate": "concat", "data_vars": "minimal", "compat": "equals"}),
    ("concat-minimal-no-conflicts", ["t1", "t3"], {"aggregate": "concat", "data_vars": "minimal", "compat": "no_conflicts"}),
    ("concat-new-dim", ["t1", "c1"], {"aggregate": "concat", "dim": "member"}),
    ("concat-keeps-order", ["t2", "t1"], {"aggregate": "concat", "dim": "time"}),
    ("concat-inner-equal-indexes", ["t1", "t2"], {"aggregate": "concat", "join": "inner", "coords": "all"}),
    ("concat-exact-differing-lat", ["t1", "l1"], {"aggregate": "concat", "join": "exact"}),
    ("concat-missing-variable", ["t1", "m1"], {"aggregate": "concat", "data_vars": "all"}),
    # Along lat (not all have time): time and tas are merged from the one file that has them.
    ("concat-some-lack-a-variable", ["t1", "f1"], {"aggregate": "concat", "data_vars": "minimal"}),
    ("concat-some-lack-a-variable-equals", ["t1", "f1", "t2"], {"aggregate": "concat", "data_vars": "minimal", "compat": "equals"}),
    ("concat-outer-differing-lat", ["t1", "l1"], {"aggregate": "concat", "join": "outer"}),
    ("concat-inner-differing-lat", ["t1", "l1"], {"aggregate": "concat", "join": "inner"}),
    ("concat-inner-no-common-label", ["t1", "l1"], {"aggregate": "concat", "join": "inner", "dim": "member"}),
    ("concat-left-grids", ["t1", "g1"], {"aggregate": "concat", "join": "left"}),
    ("concat-right-grids", ["t1", "g1"], {"aggregate": "concat", "join": "right"}),
    ("concat-outer-grids-equals", ["t1", "g1"], {"aggregate": "concat", "data_vars": "minimal", "compat": "equals"}),
    ("auto-sorts-by-time", ["t2", "t3", "t1"], {"aggregate": "auto"}),
    ("auto-realigns-grids", ["t1", "g1"], {"aggregate": "auto"}),
    ("auto-merges-variables", ["t1", "p1"], {"aggregate": "auto"}),
    ("auto-nested-new-dim", ["t1", "c1"], {"aggregate": "auto", "dim": "member"}),
    ("concat-exact-falls-back-to-groups", ["t1", "g1", "t2"], {"aggregate": "concat", "join": "exact"}),
    ("merge", ["t1", "p1"], {"aggregate": "merge"}),
    ("merge-different-times", ["n1", "p2"], {"aggregate": "merge"}),
    ("merge-different-times-ints", ["t1", "p2"], {"aggregate": "merge", "compat": "override"}),
    ("merge-different-times-inner", ["t1", "p2"], {"aggregate": "merge", "join": "inner"}),
    ("merge-different-times-equals", ["n1", "p2"], {"aggregate": "merge", "compat": "equals"}),
    ("concat-ints-realigned", ["i1", "i2"], {"aggregate": "concat"}),
    ("auto-ints-realigned", ["i1", "i2"], {"aggregate": "auto"}),
    ("merge-fixed-field", ["t1", "f1"], {"aggregate": "merge", "compat": "equals"}),
    ("merge-conflict-equals", ["t1", "c1"], {"aggregate": "merge", "compat": "equals"}),
    ("merge-conflict-no-conflicts", ["t1", "c1"], {"aggregate": "merge"}),
    ("merge-conflict-override", ["t1", "c1"], {"aggregate": "merge", "compat": "override"}),
    ("merge-exact-differing-lat", ["t1", "l1"], {"aggregate": "merge", "join": "exact", "compat": "override"}),
    ("group-by-grid", ["t1", "g1", "t2"], {"aggregate": "concat", "group_by": "grid"}),
    ("group-by-vars", ["t1", "p1", "t2"], {"aggregate": "auto", "group_by": "vars"}),
]


def assert_served_is_expected(daemon, headers, name, paths, plan):
    """svcd's store of `paths` combined by `plan` is what xarray computes, or fails with a
    reason where xarray raises."""
    try:
        want = expected(paths, plan)
    except Exception as error:
        want = error
    url, status = convert(daemon, headers, paths, plan)
    if isinstance(want, Exception):
        assert status["status"] == 1, (name, status, want)
        assert status["reason"], name
        return
    assert status == {"status": 0, "reason": ""}, (name, want)
    options = {"headers": headers}
    for group, dataset in want.items():
        served = xr.open_zarr(url, group=group or None, storage_options=options, consolidated=True, decode_cf=False)
        assert_same(served, dataset, f"{name} {group}")
    if set(want) != {""}:
        root = xr.open_zarr(url, storage_options=options, consolidated=True, decode_cf=False)
        assert not root.variables, name


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_aggregated_stores_are_what_xarray_computes(daemon, headers, files, case):
    name, which, plan = case
    assert_served_is_expected(daemon, headers, name, [files[w] for w in which], plan)


def test_the_same_aggregation_twice_is_one_store_and_options_name_stores(daemon, headers, files):
    paths = [files["t1"], files["t2"]]
    one, _ = convert(daemon, headers, paths, {"aggregate": "concat"})
    again, _ = convert(daemon, headers, paths, {"aggregate": "concat"})
    other, _ = convert(daemon, headers, paths, {"aggregate": "merge", "compat": "override"})
    reversed_, _ = convert(daemon, headers, paths[::-1], {"aggregate": "concat"})
    assert one == again
    assert len({one, other, reversed_}) == 3


def test_bad_aggregation_options_are_422_naming_them(daemon, headers, files):
    for option, value in [("aggregate", "stack"), ("join", "outerr"), ("compat", "identical"), ("data_vars", "some"),
                          ("coords", 1), ("group_by", "model"), ("dim", ""), ("dim", "x" * 300)]:
        body = {"path": [files["t1"]], "aggregate": "concat", option: value}
        answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json=body, headers=headers, timeout=30)
        assert answer.status_code == 422, (option, answer.text)
        assert option in answer.text, (option, answer.text)


REFERENCE_MOCK = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "reference-mock"


@pytest.fixture(scope="module")
def mock_files(daemon):
    """The reference service's mock NetCDF files (data this project did not make), copied
    where the test users may convert them."""
    root = daemon.data / "reference-mock"
    shutil.copytree(REFERENCE_MOCK, root)
    ua = sorted(str(p) for p in (root / "data").rglob("ua_*.nc"))
    assert len(ua) >= 4, ua
    return {"ua": ua, "not-netcdf": str(root / "not-netcdf.nc")}


MOCK_CASES = [
    ("auto", "ua", {"aggregate": "auto"}),
    ("concat", "ua", {"aggregate": "concat"}),
    ("merge-override", "ua", {"aggregate": "merge", "compat": "override"}),
    ("group-by-grid", "ua", {"aggregate": "auto", "group_by": "grid"}),
    # A NetCDF-3 file of another kind (dimensions i and j, no time) beside a model file.
    ("with-another-kind-concat", "mixed", {"aggregate": "concat"}),
    ("with-another-kind-auto", "mixed", {"aggregate": "auto"}),
]


@pytest.mark.parametrize("case", MOCK_CASES, ids=[c[0] for c in MOCK_CASES])
def test_the_reference_mock_files_combine_as_xarray_combines_them(daemon, headers, mock_files, case):
    name, which, plan = case
    paths = mock_files["ua"] if which == "ua" else [mock_files["ua"][0], mock_files["not-netcdf"]]
    assert_served_is_expected(daemon, headers, name, paths, plan)


def test_an_aggregated_store_is_its_owners_only(daemon, headers, files, tmp_path):
    url, status = convert(daemon, headers, [files["t1"], files["t2"]], {"aggregate": "concat"})
    assert status["status"] == 0, status
    assert requests.get(f"{url}/.zmetadata", timeout=10).status_code == 401
    # ("global" is refused as a user name when a token is issued.)
    for user in ("*", "-jane", "ann2"):
        other = daemon.token_file(tmp_path / f"{user}.json", user)
        answer = requests.get(f"{url}/.zmetadata", headers={"Authorization": f"Bearer {other}"}, timeout=10)
        assert answer.status_code == 404, (user, answer.text)
        # The same request by another user is another store, made from the same files.
        theirs = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": [files["t1"], files["t2"]], "aggregate": "concat"},
                               headers={"Authorization": f"Bearer {other}"}, timeout=30)
        assert theirs.status_code == 200, theirs.text
        assert theirs.json()["urls"] != [url]
    assert requests.get(f"{url}/.zmetadata", headers=headers, timeout=10).status_code == 200
