#!/usr/bin/env python3
"""The data portal, side by side in one run: svcd against xarray and against nginx.

1. Conversion throughput, in MiB/s of source file bytes, on generated daily CMIP-like files
   (about `--size-mib` in all, 1 GiB by default): 3-D fields (time, lat, lon) and 4-D fields
   (time, plev, lat, lon), float32, NetCDF-4 (zlib level 4, one time step per HDF5 chunk) and
   NetCDF-3 (64-bit offset), with CF attributes, noleap time in "days since", bounds and
   coordinate variables. Values are smooth fields (latitude, season, pressure, waves) plus
   noise at full float32 precision, not rounded: zlib shrinks them about 1.6 times, as it
   does model output.
   - svcd: `POST data-portal/zarr/convert` of one file, then `zarr-utils/status` polled until
     the store is ready (status 0): the time from the request to ready.
   - xarray: `xr.open_dataset(file, engine="netcdf4", decode_cf=False)` then
     `to_zarr(dir, zarr_format=2, consolidated=True, encoding=...)`, with every array's chunks
     and compressor taken from the `.zarray` of svcd's store of the same file (Blosc LZ4,
     clevel 5, shuffle, given as `compressors` with zarr-python 3). `decode_cf=False` writes
     the raw values with their CF attributes undecoded, as svcd keeps them (no masking, no
     scaling, no time decoding), so both sides write the same arrays.
   One file at a time on each side; each source is read once before each timed conversion,
   so both start with it in the page cache. Reported per kind of file and in all, with the
   ratio svcd/xarray (target >= 3).
   With svcd's fast path, NetCDF-4 variables stored one time step per chunk (as these are)
   are copied with their zlib chunks, and xarray is given the same zlib and shuffle.
1b. Fast path: `--fast-mib` MiB (1 GiB by default) of such NetCDF-4 files, kept in
   `sources/<size>MiB-nc4/`: svcd's conversion against `cp` of the same file, both after
   reading the file once (a warm page cache) and after `sync` (no writeback of earlier work
   left to fall on either), in MiB/s of source (target >= 0.5 of cp).
2. First chunk after load: the time from `GET databrowser/load/user?file=F` to having the
   bytes of the first chunk (`tas/0.0.0`) of the store it answers, p50 and p99 over
   `--samples` fresh conversions (target p50 < 20 ms). The samples are distinct files (one
   month of daily 3-D data each, NetCDF-4 and NetCDF-3 in turn) added to the databrowser as
   user data; no store holds them before their sample. After each sample (not timed) the
   conversion is awaited and the store removed with `svcd store rm`.
3. Chunk throughput: `--clients` connections (wrk, 2 threads, a Lua script cycling through
   every data chunk of the largest converted store; the bearer token for svcd) for
   `--duration` seconds against svcd's `data-portal/zarr/<token>.zarr/<key>` and against
   nginx serving the same store directory (`<data_dir>/stores/<token>/`) as static files on
   127.0.0.1 with its own minimal configuration (`sendfile on`), the two in turn for
   `--rounds` rounds (default 3), so that the machine's noise falls on both alike.
   Requests/s and MiB/s (response bytes as sent), medians of the rounds, and the ratio
   svcd/nginx (target >= 0.7), also per round.

4. Aggregation and reduction: `--agg-files` (100) NetCDF-4 files of daily 3-D `tas` (about
   `--agg-mib` MiB in all, 1 GiB by default), in time order, kept in `sources/agg-*`:
   - concat: svcd's `aggregate=concat` of all of them along time (`data_vars`, `coords`
     minimal, `compat` override) against xarray's `open_mfdataset(combine="nested",
     concat_dim="time", ...)` with the same options + `to_zarr` with the chunks and compressor
     of svcd's store;
   - monthly mean: the same files concatenated and reduced with `time_freq=monthly` against
     xarray's `open_mfdataset` + the reference's reduction (`tests/python/test_reduce.py`:
     decode, `resample(time="MS").mean()`, cast to float32) + `to_zarr`.
   Both sides start with the files in the page cache. Seconds, MiB/s of source and the
   ratio (target >= 3), and the peak resident memory (VmHWM) of each side during its run:
   svcd's is reset before each (`/proc/<pid>/clear_refs`), xarray runs in a fresh process.

Every chunk request carries `Accept-Encoding: gzip, deflate` (`--accept-encoding`), as zarr's
HTTP clients send it (fsspec over aiohttp, and requests); `--accept-encoding identity` asks
for the bytes as stored. nginx's configuration leaves gzip off, as its default does.

svcd runs on a fresh data directory with an empty configuration file (the built-in
defaults, e.g. 2 conversion workers; SVCD_* environment variables still apply, e.g.
SVCD_STORES_WORKERS) and SVCD_STORES_ALLOWED_ROOTS set to `--data`. The generated files are
kept in `--data` (default /var/tmp/portal-bench: `sources/<size>MiB/` and `load/`) and reused;
everything else (svcd's data directory with its stores, xarray's stores, nginx's files) lives
in a run directory under it that is removed at the end.

Needs the Python of .venv-test (xarray, zarr 3, numcodecs, netCDF4, numpy, requests), and
nginx and wrk (Debian packages; `apt-get install -y nginx wrk` is tried when run as root).

Run: make bench-portal [BENCH_ARGS="--size-mib 64 --samples 10 --duration 3"], or
.venv-test/bin/python bench/portal.py --svcd $CARGO_TARGET_DIR/release/svcd [--size-mib 1024]
[--samples 50] [--duration 10] [--rounds 3] [--clients 16] [--agg-files 100] [--agg-mib 1024]
[--data DIR] [--json FILE]; `--only-aggregation` runs section 4 alone (e.g. with a larger
`--agg-mib`, to see that svcd's peak memory does not grow with the sources).
Prints one table with every figure and ratio (and writes them as JSON with --json).
"""

import argparse
import collections
import fcntl
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

API = "/api/svc-nextgen"
MIB = 2**20
# Bump when the generated files change, so cached ones are written again.
GENERATOR = 1
NOLEAP_MONTHS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
PLEV8 = np.array([100000, 85000, 70000, 50000, 25000, 10000, 5000, 1000], dtype="f8")
GRID_3D = (192, 384)  # about 0.94 degrees
GRID_4D = (96, 192)  # about 1.9 degrees, on 8 pressure levels

# name, label, NetCDF format, variable, 4-D
KINDS = [
    ("3d-nc4", "3-D NetCDF-4 zlib", "NETCDF4", "tas", False),
    ("4d-nc4", "4-D NetCDF-4 zlib", "NETCDF4", "ta", True),
    ("3d-nc3", "3-D NetCDF-3", "NETCDF3_64BIT_OFFSET", "tasmax", False),
    ("4d-nc3", "4-D NetCDF-3", "NETCDF3_64BIT_OFFSET", "ua", True),
]
VARIABLES = {
    "tas": ("air_temperature", "Near-Surface Air Temperature", "K"),
    "tasmax": ("air_temperature", "Daily Maximum Near-Surface Air Temperature", "K"),
    "ta": ("air_temperature", "Air Temperature", "K"),
    "ua": ("eastward_wind", "Eastward Wind", "m s-1"),
}


# ---------------------------------------------------------------------------------------
# Generated sources


def noleap_date(day):
    """YYYYMMDD of `day` days after 2000-01-01 in the noleap calendar."""
    year, day = divmod(day, 365)
    for month, length in enumerate(NOLEAP_MONTHS, 1):
        if day < length:
            return f"{2000 + year:04d}{month:02d}{day + 1:02d}"
        day -= length
    raise AssertionError


def field(variable, day, lat, lon, rng):
    """One daily field: a smooth climate-like pattern plus weather noise, float32."""
    phi = np.deg2rad(lat)[:, None]
    lam = np.deg2rad(lon)[None, :]
    season = np.cos(2 * np.pi * (day % 365 - 15) / 365)
    wave = np.sin(3 * lam + 2 * np.pi * day / 12) * np.cos(phi)
    if variable == "ua":
        jet = 25 * np.exp(-(((np.rad2deg(phi) - 45) / 12) ** 2)) + 20 * np.exp(-(((np.rad2deg(phi) + 45) / 12) ** 2))
        height = (1.2 - PLEV8 / 1e5)[:, None, None]
        values = height * (jet + 3 * season * np.sin(phi))[None] + 6 * wave[None]
        return (values + rng.normal(0, 2.5, values.shape)).astype("f4")
    surface = 255 + 45 * np.cos(phi) ** 2 - 12 * season * np.sin(phi) + 4 * wave
    if variable == "tasmax":
        surface = surface + 6
    if variable == "ta":
        values = surface[None] * ((PLEV8 / 1e5) ** 0.19)[:, None, None]
    else:
        values = surface
    return (values + rng.normal(0, 1.5, values.shape)).astype("f4")


def write_netcdf(path, fmt, variable, four_d, first_day, days, grid, seed):
    """A CMIP-like daily file of `days` days from `first_day`, written as `path`."""
    import netCDF4

    nlat, nlon = grid
    lat = np.linspace(-90 + 90 / nlat, 90 - 90 / nlat, nlat)
    lon = np.arange(nlon) * 360 / nlon
    rng = np.random.default_rng(seed)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with netCDF4.Dataset(partial, "w", format=fmt) as nc:
        standard_name, long_name, units = VARIABLES[variable]
        nc.setncatts({
            "Conventions": "CF-1.7 CMIP-6.2",
            "title": "BENCH-ESM output prepared for the svcd data-portal benchmark",
            "institution": "svc-nextgen benchmark",
            "source": "BENCH-ESM (synthetic)",
            "experiment_id": "historical",
            "frequency": "day",
            "variable_id": variable,
            "variant_label": "r1i1p1f1",
            "grid_label": "gn",
        })
        nc.createDimension("time", None)
        nc.createDimension("bnds", 2)
        dims = ["time"]
        if four_d:
            nc.createDimension("plev", len(PLEV8))
            plev = nc.createVariable("plev", "f8", ("plev",))
            plev.setncatts({"units": "Pa", "axis": "Z", "positive": "down", "standard_name": "air_pressure", "long_name": "pressure"})
            plev[:] = PLEV8
            dims.append("plev")
        for name, values, units_, axis, long in (("lat", lat, "degrees_north", "Y", "Latitude"), ("lon", lon, "degrees_east", "X", "Longitude")):
            nc.createDimension(name, len(values))
            coord = nc.createVariable(name, "f8", (name,))
            coord.setncatts({"units": units_, "axis": axis, "standard_name": long.lower(), "long_name": long, "bounds": f"{name}_bnds"})
            coord[:] = values
            step = values[1] - values[0]
            bounds = nc.createVariable(f"{name}_bnds", "f8", (name, "bnds"))
            bounds[:] = np.stack([values - step / 2, values + step / 2], axis=1)
            dims.append(name)
        time_ = nc.createVariable("time", "f8", ("time",))
        time_.setncatts({"units": "days since 2000-01-01 00:00:00", "calendar": "noleap", "axis": "T", "standard_name": "time", "long_name": "time", "bounds": "time_bnds"})
        time_bnds = nc.createVariable("time_bnds", "f8", ("time", "bnds"))
        shape = (len(PLEV8), nlat, nlon) if four_d else (nlat, nlon)
        extra = {"zlib": True, "complevel": 4, "shuffle": True, "chunksizes": (1, *shape)} if fmt == "NETCDF4" else {}
        data = nc.createVariable(variable, "f4", tuple(dims), fill_value=np.float32(1e20), **extra)
        data.setncatts({"standard_name": standard_name, "long_name": long_name, "units": units, "cell_methods": "area: time: mean", "missing_value": np.float32(1e20)})
        for start in range(0, days, 30):
            count = min(30, days - start)
            day0 = first_day + start
            data[start:start + count] = np.stack([field(variable, day0 + i, lat, lon, rng) for i in range(count)])
            time_[start:start + count] = np.arange(day0, day0 + count) + 0.5
            time_bnds[start:start + count] = np.stack([np.arange(day0, day0 + count), np.arange(day0 + 1, day0 + count + 1)], axis=1)
    partial.rename(path)


def generate_sources(root, size_mib, kinds=KINDS, label=""):
    """The conversion sources, about `size_mib` MiB of files, an equal share per kind of
    `kinds`: files of up to one year each. Kept in `root/sources/<size>MiB<label>` and reused
    when complete."""
    directory = root / "sources" / f"{size_mib}MiB{label}"
    manifest = directory / "manifest.json"
    if manifest.exists():
        listed = json.loads(manifest.read_text())
        if listed.get("generator") == GENERATOR and all((directory / f["name"]).exists() and (directory / f["name"]).stat().st_size == f["bytes"] for f in listed["files"]):
            return [(f["kind"], directory / f["name"], f["variable"]) for f in listed["files"]]
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    share = size_mib * MIB / len(kinds)
    files = []
    for number, (kind, _, fmt, variable, four_d) in enumerate(kinds):
        grid = GRID_4D if four_d else GRID_3D
        per_day = 4 * np.prod(grid) * (len(PLEV8) if four_d else 1)
        written, day = 0, 0
        while written < 0.95 * share:
            days = int(min(365, max(10, math.ceil((share - written) / per_day))))
            name = f"{variable}_day_BENCH-ESM_historical_r1i1p1f1_gn_{noleap_date(day)}-{noleap_date(day + days - 1)}.nc"
            path = directory / name
            print(f"  writing {path} ({days} days)", flush=True)
            write_netcdf(path, fmt, variable, four_d, day, days, grid, seed=1000 * number + day)
            size = path.stat().st_size
            per_day = size / days  # what compression gives, for the next file of this kind
            written += size
            day += days
            files.append({"kind": kind, "name": name, "variable": variable, "bytes": size})
    manifest.write_text(json.dumps({"generator": GENERATOR, "files": files}, indent=1))
    return [(f["kind"], directory / f["name"], f["variable"]) for f in files]


def generate_samples(root, count):
    """`count` distinct one-month files of daily 3-D `tas`, NetCDF-4 and NetCDF-3 in turn,
    kept in `root/load` and reused."""
    directory = root / "load"
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        fmt = "NETCDF4" if i % 2 == 0 else "NETCDF3_64BIT_OFFSET"
        path = directory / f"tas_day_BENCH-ESM_sample{i:04d}_g{GENERATOR}_{'nc4' if i % 2 == 0 else 'nc3'}.nc"
        if not path.exists():
            write_netcdf(path, fmt, "tas", False, 31 * i, 31, GRID_3D, seed=7919 + i)
        paths.append(path)
    return paths


def read_through(path):
    """Read a file once, so it is in the page cache."""
    with open(path, "rb") as f:
        while f.read(16 * MIB):
            pass


def tree_bytes(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------
# svcd


class Svcd:
    """svcd serving a fresh data directory, with a bearer token of one user."""

    def __init__(self, binary, allowed_root, run, encoding):
        self.binary = binary
        self.data = run / "svcd"
        self.data.mkdir()
        config = run / "svcd.toml"
        config.write_text("# empty: the built-in defaults\n")
        self.flags = ["--config", str(config), "--data-dir", str(self.data)]
        self.env = {k: v for k, v in os.environ.items() if k != "SVCD_BIN"}
        self.env["SVCD_STORES_ALLOWED_ROOTS"] = str(allowed_root)
        self.log_path = self.data / "svcd.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([binary, *self.flags, "serve", "--listen", "127.0.0.1:0"], stdout=self.log, stderr=self.log, env=self.env)
        try:
            self.connect(encoding)
        except BaseException:
            self.stop()
            raise

    def connect(self, encoding):
        address = self.data / "svcd.addr"
        deadline = time.monotonic() + 60
        while not (address.exists() and address.read_text().endswith("\n")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"svcd did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        self.host = address.read_text().strip()
        self.base = f"http://{self.host}{API}"
        self.token = self.cli("token", "issue", "--user", "bench", "--ttl", "7d").strip()
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy for 127.0.0.1
        self.session.headers["Authorization"] = f"Bearer {self.token}"
        self.session.headers["Accept-Encoding"] = encoding
        ping = self.session.get(f"{self.base}/ping", timeout=10)
        assert ping.status_code == 200, ping.text

    def cli(self, *args):
        result = subprocess.run([self.binary, *self.flags, *args], capture_output=True, text=True, env=self.env, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"svcd {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def convert(self, path):
        answer = self.session.post(f"{self.base}/data-portal/zarr/convert", json={"path": [str(path)]}, timeout=60)
        assert answer.status_code == 200, f"convert {path}: {answer.status_code} {answer.text}"
        [url] = answer.json()["urls"]
        return url

    def status(self, url):
        answer = self.session.get(f"{self.base}/data-portal/zarr-utils/status", params={"url": url}, timeout=30)
        assert answer.status_code == 200, f"status {url}: {answer.status_code} {answer.text}"
        return answer.json()

    def wait_ready(self, url, started, timeout=7200):
        """Poll until the store is ready; the polls are at most 1% of the time waited apart."""
        while True:
            status = self.status(url)
            if status["status"] == 0:
                return
            elapsed = time.perf_counter() - started
            if status["status"] != 2 or elapsed > timeout:
                raise RuntimeError(f"{url}: {status} after {elapsed:.1f} s")
            time.sleep(min(0.05, max(0.002, elapsed / 100)))

    def timed_conversion(self, path):
        """The store URL of `path` and the seconds from the request to its being ready, the
        file read once before (in the page cache)."""
        read_through(path)
        started = time.perf_counter()
        url = self.convert(path)
        self.wait_ready(url, started)
        return url, time.perf_counter() - started

    def store_dir(self, url):
        return self.data / "stores" / self.token_of(url)

    @staticmethod
    def token_of(url):
        return url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")

    def problems(self):
        """The warnings and errors svcd logged (HDF5's diagnostics count one per report)."""
        self.log.flush()
        text = re.sub(r"\x1b\[[0-9;]*m", "", self.log_path.read_text(errors="replace"))
        return [line for line in text.splitlines() if " WARN " in line or " ERROR " in line or "panicked" in line or line.startswith("HDF5-DIAG")]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------------------------
# 4. Aggregation and reduction


def generate_aggregation_sources(root, files, size_mib):
    """`files` NetCDF-4 files of daily 3-D tas in time order, about `size_mib` MiB in all,
    kept in `root/sources/agg-<files>x<size>MiB` and reused when complete."""
    directory = root / "sources" / f"agg-{files}x{size_mib}MiB"
    manifest = directory / "manifest.json"
    if manifest.exists():
        listed = json.loads(manifest.read_text())
        if listed.get("generator") == GENERATOR and all((directory / f["name"]).exists() and (directory / f["name"]).stat().st_size == f["bytes"] for f in listed["files"]):
            return [directory / f["name"] for f in listed["files"]]
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    # About 180 KiB a day compressed on GRID_3D; measured on the first file.
    days = max(2, int(size_mib * MIB / files / (180 * 1024)))
    listed = []
    for number in range(files):
        first = number * days
        name = f"tas_day_BENCH-ESM_historical_r1i1p1f1_gn_{noleap_date(first)}-{noleap_date(first + days - 1)}.nc"
        path = directory / name
        print(f"  writing {path} ({days} days)", flush=True)
        write_netcdf(path, "NETCDF4", "tas", False, first, days, GRID_3D, seed=50_000 + number)
        listed.append({"name": name, "bytes": path.stat().st_size})
    manifest.write_text(json.dumps({"generator": GENERATOR, "files": listed}, indent=1))
    return [directory / f["name"] for f in listed]


# The options both sides combine the files with.
AGGREGATION = {"aggregate": "concat", "dim": "time", "data_vars": "minimal", "coords": "minimal", "compat": "override", "join": "outer"}

XARRAY_AGGREGATION = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numcodecs, xarray as xr
from test_reduce import reduce
task = json.loads(sys.stdin.read())
started = time.perf_counter()
ds = xr.open_mfdataset(task["paths"], combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
                       compat="override", join="outer", combine_attrs="override", decode_cf=False,
                       decode_coords=False, engine="netcdf4", parallel=False)
if task["reduction"]:
    ds = reduce(ds, task["reduction"])
encoding = {}
for name, e in task["encoding"].items():
    c = e["compressor"]
    codec = numcodecs.Blosc(cname=c["cname"], clevel=c["clevel"], shuffle=c["shuffle"], blocksize=c.get("blocksize", 0))
    encoding[name] = {"chunks": tuple(e["chunks"]), "compressors": [codec]}
    if task["reduction"] and name in ds.variables and ds[name].dtype.kind == "f":
        encoding[name]["_FillValue"] = float("nan")
ds.to_zarr(task["target"], zarr_format=2, consolidated=True, mode="w", encoding=encoding)
seconds = time.perf_counter() - started
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "vmhwm_kib": hwm}))
'''


def vmhwm_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def reset_vmhwm(pid):
    """Reset a process's peak resident memory to its current one (Linux: clear_refs 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")


def measure_aggregation(svcd, paths, run):
    """Concatenation, then concatenation with a monthly mean: svcd, then xarray, each from
    a warm page cache."""
    size = sum(p.stat().st_size for p in paths)
    tests = Path(__file__).resolve().parent.parent / "tests" / "python"
    results = []
    for label, reduction in (("concat", None), ("monthly mean", {"time_freq": "monthly", "time_method": "mean"})):
        for path in paths:
            read_through(path)
        body = dict(AGGREGATION, path=[str(p) for p in paths], **(reduction or {}))
        reset_vmhwm(svcd.proc.pid)
        started = time.perf_counter()
        answer = svcd.session.post(f"{svcd.base}/data-portal/zarr/convert", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        [url] = answer.json()["urls"]
        svcd.wait_ready(url, started)
        svcd_s = time.perf_counter() - started
        svcd_hwm = vmhwm_kib(svcd.proc.pid)
        store = svcd.store_dir(url)
        encoding = {z.parent.name: json.loads(z.read_text()) for z in store.glob("*/.zarray")}
        for path in paths:
            read_through(path)
        task = {"paths": [str(p) for p in paths], "reduction": reduction, "encoding": encoding, "target": str(run / f"xarray-{label.replace(' ', '-')}.zarr")}
        done = subprocess.run([sys.executable, "-c", XARRAY_AGGREGATION, str(tests)], input=json.dumps(task), capture_output=True, text=True, timeout=7200)
        if done.returncode != 0:
            raise RuntimeError(f"xarray {label}: {done.stderr[-3000:]}")
        xarray = json.loads(done.stdout.strip().splitlines()[-1])
        shutil.rmtree(task["target"], ignore_errors=True)
        row = {"label": label, "files": len(paths), "mib": size / MIB, "svcd_s": svcd_s, "xarray_s": xarray["seconds"], "ratio": xarray["seconds"] / svcd_s,
               "svcd_vmhwm_mib": svcd_hwm / 1024, "xarray_vmhwm_mib": xarray["vmhwm_kib"] / 1024, "svcd_store_mib": tree_bytes(store) / MIB}
        print(f"  {label}: svcd {svcd_s:.2f} s (VmHWM {row['svcd_vmhwm_mib']:.0f} MiB), xarray {xarray['seconds']:.2f} s (VmHWM {row['xarray_vmhwm_mib']:.0f} MiB)", flush=True)
        results.append(row)
    return results


# ---------------------------------------------------------------------------------------
# 1. Conversion


def xarray_encoding(store):
    """Every array's chunks, filters and compressor, as svcd wrote them, for xarray's
    to_zarr: Blosc, or zlib after shuffle where svcd copied the source's chunks."""
    import numcodecs

    encoding = {}
    for zarray in sorted(store.glob("*/.zarray")):
        meta = json.loads(zarray.read_text())
        compressor = meta["compressor"]
        if compressor["id"] == "blosc":
            codec = numcodecs.Blosc(cname=compressor["cname"], clevel=compressor["clevel"], shuffle=compressor["shuffle"], blocksize=compressor.get("blocksize", 0))
        else:
            assert compressor["id"] == "zlib", compressor
            codec = numcodecs.Zlib(level=compressor["level"])
        encoding[zarray.parent.name] = {"chunks": tuple(meta["chunks"]), "compressors": [codec]}
        filters = [numcodecs.Shuffle(elementsize=f["elementsize"]) for f in meta["filters"] or [] if f["id"] == "shuffle"]
        if filters:
            encoding[zarray.parent.name]["filters"] = filters
    return encoding


def xarray_warm_up(run):
    """One tiny to_zarr, so xarray's and zarr's first-use costs are not timed."""
    import numcodecs
    import xarray as xr

    target = run / "warm-up.zarr"
    ds = xr.Dataset({"x": (("t",), np.zeros(4, dtype="f4"))})
    ds.to_zarr(target, zarr_format=2, consolidated=True, mode="w", encoding={"x": {"compressors": [numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1)]}})
    shutil.rmtree(target)


def measure_conversion(svcd, sources, run):
    """Per source file: bytes, svcd seconds, xarray seconds, both stores' bytes."""
    import xarray as xr

    xarray_warm_up(run)
    rows = []
    # xarray's stores are kept until the run ends: removing thousands of chunk files just
    # before svcd creates its own (here, or in the fast-path run next) makes the file
    # system's inode allocation several times slower for svcd (ext4 without a journal skips
    # inodes freed in the last 30 s, one lookup each).
    xarray_stores = run / "xarray"
    xarray_stores.mkdir()
    for number, (kind, path, variable) in enumerate(sources):
        size = path.stat().st_size
        url, svcd_s = svcd.timed_conversion(path)
        store = svcd.store_dir(url)
        encoding = xarray_encoding(store)
        assert variable in encoding, f"{store} has no {variable}"

        target = xarray_stores / f"{number}.zarr"
        read_through(path)
        started = time.perf_counter()
        with xr.open_dataset(path, engine="netcdf4", decode_cf=False) as ds:
            ds.to_zarr(target, zarr_format=2, consolidated=True, mode="w", encoding=encoding)
        xarray_s = time.perf_counter() - started
        xarray_bytes = tree_bytes(target)

        rows.append({"kind": kind, "file": path.name, "variable": variable, "bytes": size, "svcd_s": svcd_s, "xarray_s": xarray_s, "url": url, "store": str(store), "svcd_store_bytes": tree_bytes(store), "xarray_store_bytes": xarray_bytes})
        print(f"  {path.name}: {size / MIB:.1f} MiB, svcd {svcd_s:.2f} s ({size / MIB / svcd_s:.1f} MiB/s), xarray {xarray_s:.2f} s ({size / MIB / xarray_s:.1f} MiB/s)", flush=True)
    return rows


def measure_fast_path(svcd, sources, run):
    """NetCDF-4 files whose stored chunks are the store's chunks, so svcd copies them: svcd's
    conversion against `cp` of the same file, each after reading the file once (a warm page
    cache for both). svcd's time is a user's: from the request to the ready status, so it
    includes the HTTP request, the job queue and the status polls."""
    import h5py

    rows = []
    copies = run / "cp"
    copies.mkdir()
    for number, (kind, path, variable) in enumerate(sources):
        size = path.stat().st_size
        # Each side starts with no dirty pages of earlier work left to write back.
        os.sync()
        url, svcd_s = svcd.timed_conversion(path)
        zarray = json.loads((svcd.store_dir(url) / variable / ".zarray").read_text())
        assert zarray["compressor"]["id"] == "zlib", f"{path.name}: {variable} was not copied: {zarray['compressor']}"
        # The first chunk is the file's own bytes.
        with h5py.File(path, "r") as h5:
            _, stored = h5[variable].id.read_direct_chunk((0,) * len(zarray["shape"]))
        first = svcd.store_dir(url) / variable / ".".join("0" * len(zarray["shape"]))
        assert first.read_bytes() == stored, f"{first} is not the stored chunk of {path.name}"
        read_through(path)
        os.sync()
        started = time.perf_counter()
        # A real copy of the bytes, never a reflink (a file system that clones would make
        # cp's time meaningless).
        subprocess.run(["cp", "--reflink=never", str(path), str(copies / f"{number}.nc")], check=True)
        cp_s = time.perf_counter() - started
        rows.append({"file": path.name, "bytes": size, "svcd_s": svcd_s, "cp_s": cp_s})
        print(f"  {path.name}: {size / MIB:.1f} MiB, svcd {svcd_s:.2f} s ({size / MIB / svcd_s:.1f} MiB/s), cp {cp_s:.2f} s ({size / MIB / cp_s:.1f} MiB/s)", flush=True)
    shutil.rmtree(copies)
    size = sum(r["bytes"] for r in rows) / MIB
    svcd_s = sum(r["svcd_s"] for r in rows)
    cp_s = sum(r["cp_s"] for r in rows)
    return {"files": rows, "mib": size, "svcd_mib_s": size / svcd_s, "cp_mib_s": size / cp_s, "ratio": cp_s / svcd_s}


def conversion_summary(rows):
    """MiB/s of svcd and xarray per kind and in all."""
    groups = [(label, [r for r in rows if r["kind"] == kind]) for kind, label, *_ in KINDS]
    groups.append(("all", rows))
    summary = []
    for label, members in groups:
        if not members:
            continue
        size = sum(r["bytes"] for r in members)
        svcd_s = sum(r["svcd_s"] for r in members)
        xarray_s = sum(r["xarray_s"] for r in members)
        summary.append({
            "label": label,
            "files": len(members),
            "mib": size / MIB,
            "svcd_mib_s": size / MIB / svcd_s,
            "xarray_mib_s": size / MIB / xarray_s,
            "ratio": xarray_s / svcd_s,
            "svcd_store_mib": sum(r["svcd_store_bytes"] for r in members) / MIB,
            "xarray_store_mib": sum(r["xarray_store_bytes"] for r in members) / MIB,
        })
    return summary


# ---------------------------------------------------------------------------------------
# 2. First chunk after load


def measure_first_chunk(svcd, samples):
    """Seconds from each `load` request to its answer and to the first chunk's bytes."""
    iso = lambda day: f"{noleap_date(day)[:4]}-{noleap_date(day)[4:6]}-{noleap_date(day)[6:]}T00:00:00Z"
    entries = [{"file": str(path), "variable": "tas", "time_frequency": "day", "time": f"[{iso(31 * i)} TO {iso(31 * i + 30)}]"} for i, path in enumerate(samples)]
    added = svcd.session.post(f"{svcd.base}/databrowser/userdata", json={"user_metadata": entries, "facets": {"project": "portal-bench"}}, timeout=300)
    assert added.status_code == 202, f"userdata: {added.status_code} {added.text}"
    load, first, converting = [], [], 0
    for path in samples:
        started = time.perf_counter()
        answer = svcd.session.get(f"{svcd.base}/databrowser/load/user", params={"file": str(path)}, timeout=60)
        answered = time.perf_counter()
        assert answer.status_code == 200, f"load {path}: {answer.status_code} {answer.text}"
        [url] = answer.text.split()
        chunk = svcd.session.get(f"{url}/tas/0.0.0", timeout=60)
        done = time.perf_counter()
        # A Blosc chunk, or the source's own zlib chunk (NetCDF-4 samples are stored one day
        # per chunk, as the store is chunked).
        assert chunk.status_code == 200 and chunk.content[:1] in (b"\x02", b"\x78"), f"{url}/tas/0.0.0: {chunk.status_code} {chunk.content[:16]!r}"
        load.append(answered - started)
        first.append(done - started)
        # Not timed: was the store still being written, then wait for it and remove it.
        converting += svcd.status(url)["status"] == 2
        svcd.wait_ready(url, time.perf_counter(), timeout=600)
        svcd.cli("store", "rm", svcd.token_of(url))
    return {"load_s": load, "first_chunk_s": first, "still_converting": converting}


def percentile(values, p):
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# ---------------------------------------------------------------------------------------
# 3. Chunk throughput


WRK_SCRIPT = r"""
-- Cycles through the paths listed in $BENCH_PATHS (each thread from its own offset), with
-- the bearer token of $BENCH_TOKEN when it is set and the Accept-Encoding header of
-- $BENCH_ACCEPT_ENCODING; prints a JSON summary at the end.
local threads = 0
function setup(thread)
  thread:set("offset", threads)
  threads = threads + 1
end

function init(args)
  paths = {}
  for line in io.lines(os.getenv("BENCH_PATHS")) do paths[#paths + 1] = line end
  local token = os.getenv("BENCH_TOKEN")
  if token and token ~= "" then wrk.headers["Authorization"] = "Bearer " .. token end
  local encoding = os.getenv("BENCH_ACCEPT_ENCODING")
  if encoding and encoding ~= "" then wrk.headers["Accept-Encoding"] = encoding end
  n = math.floor(offset * #paths / tonumber(os.getenv("BENCH_THREADS")))
end

function request()
  n = n % #paths + 1
  return wrk.format("GET", paths[n])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('BENCH-JSON {"requests": %d, "bytes": %d, "seconds": %.6f, "non_2xx": %d, "socket_errors": %d, "p50_ms": %.3f, "p99_ms": %.3f}\n',
    summary.requests, summary.bytes, summary.duration / 1e6, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
"""


def wrk(url, paths, token, clients, threads, duration, encoding, run):
    listing = run / "paths.txt"
    listing.write_text("".join(f"{path}\n" for path in paths))
    script = run / "chunks.lua"
    script.write_text(WRK_SCRIPT)
    env = dict(os.environ, BENCH_PATHS=str(listing), BENCH_TOKEN=token or "", BENCH_THREADS=str(threads), BENCH_ACCEPT_ENCODING=encoding)
    args = ["wrk", "-t", str(threads), "-c", str(clients), "-d", f"{duration}s", "--timeout", "30s", "-s", str(script), url]
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=duration + 120)
    lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH-JSON ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    summary = json.loads(lines[-1].removeprefix("BENCH-JSON "))
    summary["requests_s"] = summary["requests"] / summary["seconds"]
    summary["mib_s"] = summary["bytes"] / summary["seconds"] / MIB
    return summary


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_binary():
    """nginx, also where Debian puts it when /usr/sbin is not on the PATH."""
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def start_nginx(store, run):
    """nginx serving `store` as static files on a free port of 127.0.0.1."""
    port = free_port()
    home = run / "nginx"
    home.mkdir()
    user = "user root root;\n" if os.geteuid() == 0 else ""
    temp = "".join(f"  {name}_temp_path {home}/{name};\n" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = home / "nginx.conf"
    conf.write_text(f"""daemon off;
{user}worker_processes auto;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  types {{ }}
  default_type application/octet-stream;
{temp}  server {{
    listen 127.0.0.1:{port};
    root {store};
  }}
}}
""")
    log = open(home / "stderr.log", "w")
    proc = subprocess.Popen([nginx_binary(), "-p", f"{home}/", "-c", str(conf), "-e", str(home / "error.log")], stdout=log, stderr=log)
    return proc, port, home


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure_throughput(svcd, row, clients, threads, duration, rounds, encoding, run):
    """wrk over every data chunk of one store, svcd and nginx (on the same directory) in
    turn, `rounds` times: the machine's noise then falls on both sides alike, and the
    medians of the rounds are reported."""
    store, variable, url = Path(row["store"]), row["variable"], row["url"]
    chunks = sorted(p.name for p in (store / variable).iterdir() if not p.name.startswith("."))
    chunk_bytes = sum((store / variable / c).stat().st_size for c in chunks)
    prefix = url.split(svcd.host, 1)[1]
    svcd_paths = [f"{prefix}/{variable}/{c}" for c in chunks]
    static_paths = [f"/{variable}/{c}" for c in chunks]
    # The same bytes on both sides.
    expected = (store / variable / chunks[0]).read_bytes()
    served = svcd.session.get(f"http://{svcd.host}{svcd_paths[0]}", headers={"Accept-Encoding": "identity"}, timeout=30)
    assert served.status_code == 200 and served.content == expected, f"svcd answers {served.status_code} for {svcd_paths[0]}"

    proc, port, home = start_nginx(store, run)
    try:
        session = requests.Session()
        session.trust_env = False
        deadline = time.monotonic() + 15
        while True:
            try:
                answer = session.get(f"http://127.0.0.1:{port}{static_paths[0]}", headers={"Accept-Encoding": "identity"}, timeout=1)
                if answer.status_code == 200 and answer.content == expected:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not serve {store}:\n{(home / 'stderr.log').read_text()}{(home / 'error.log').read_text() if (home / 'error.log').exists() else ''}")
            time.sleep(0.1)
        print(f"  {len(chunks)} chunks of {variable} ({chunk_bytes / MIB:.1f} MiB), {clients} connections, {rounds} rounds of {duration} s each, nginx on 127.0.0.1:{port}", flush=True)
        svcd_rounds, nginx_rounds = [], []
        for n in range(rounds):
            svcd_rounds.append(wrk(f"http://{svcd.host}", svcd_paths, svcd.token, clients, threads, duration, encoding, run))
            nginx_rounds.append(wrk(f"http://127.0.0.1:{port}", static_paths, None, clients, threads, duration, encoding, run))
            print(f"  round {n + 1}: svcd {svcd_rounds[-1]['requests_s']:.0f}/s, nginx {nginx_rounds[-1]['requests_s']:.0f}/s", flush=True)
    finally:
        stop(proc)
    median = lambda runs: {key: percentile([r[key] for r in runs], 50) for key in runs[0]}
    return {"store": row["file"], "variable": variable, "chunks": len(chunks), "chunk_mib": chunk_bytes / MIB, "clients": clients, "threads": threads, "duration_s": duration, "rounds": rounds, "accept_encoding": encoding,
            "svcd": median(svcd_rounds), "nginx": median(nginx_rounds), "svcd_rounds": svcd_rounds, "nginx_rounds": nginx_rounds,
            "round_ratios": [s["requests_s"] / g["requests_s"] for s, g in zip(svcd_rounds, nginx_rounds)]}


# ---------------------------------------------------------------------------------------


def ensure_tools():
    """nginx and wrk, installed with apt-get when missing and run as root."""
    missing = [name for name, found in (("nginx", nginx_binary()), ("wrk", shutil.which("wrk"))) if not found]
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        print(f"installing {' '.join(missing)} with apt-get", flush=True)
        if subprocess.run(["apt-get", "install", "-y", "-q", *missing], env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, check=False)
            subprocess.run(["apt-get", "install", "-y", "-q", *missing], env=env, check=False)
        missing = [name for name, found in (("nginx", nginx_binary()), ("wrk", shutil.which("wrk"))) if not found]
    if missing:
        raise SystemExit(f"{' and '.join(missing)} not found: the chunk throughput needs nginx and wrk (Debian: apt-get install -y {' '.join(missing)})")


def table(figures):
    """One table: every figure, the ratio and the target."""
    rows = []
    for c in figures["conversion"]["summary"]:
        name = f"convert {c['label']} ({c['files']} file{'s' if c['files'] > 1 else ''}, {c['mib']:.0f} MiB), MiB/s"
        rows.append((name, f"{c['svcd_mib_s']:.1f}", f"xarray {c['xarray_mib_s']:.1f}", f"{c['ratio']:.2f}", ">= 3" if c["label"] == "all" else ""))
    for c in figures["conversion"]["summary"]:
        if c["label"] == "all":
            rows.append(("  stores written, MiB", f"{c['svcd_store_mib']:.1f}", f"xarray {c['xarray_store_mib']:.1f}", f"{c['svcd_store_mib'] / c['xarray_store_mib']:.2f}", ""))
    fast = figures["fast_path"]
    rows.append((f"fast path: NetCDF-4 chunks copied ({len(fast['files'])} files, {fast['mib']:.0f} MiB), MiB/s", f"{fast['svcd_mib_s']:.1f}", f"cp {fast['cp_mib_s']:.1f}", f"{fast['ratio']:.2f}", ">= 0.5"))
    f = figures["first_chunk"]
    n = len(f["first_chunk_s"])
    rows.append((f"first chunk after load, p50 ms ({n} fresh)", f"{f['p50_ms']:.1f}", "", "", "< 20"))
    rows.append(("first chunk after load, p99 ms", f"{f['p99_ms']:.1f}", "", "", ""))
    rows.append(("  load answer alone, p50 / p99 ms", f"{f['load_p50_ms']:.1f} / {f['load_p99_ms']:.1f}", "", "", ""))
    rows.append(("  stores still converting at the chunk", f"{f['still_converting']} of {n}", "", "", ""))
    for a in figures.get("aggregation", []):
        name = f"{a['label']} of {a['files']} files ({a['mib']:.0f} MiB), MiB/s"
        rows.append((name, f"{a['mib'] / a['svcd_s']:.1f}", f"xarray {a['mib'] / a['xarray_s']:.1f}", f"{a['ratio']:.2f}", ">= 3"))
        rows.append(("  peak memory (VmHWM), MiB", f"{a['svcd_vmhwm_mib']:.0f}", f"xarray {a['xarray_vmhwm_mib']:.0f}", f"{a['svcd_vmhwm_mib'] / a['xarray_vmhwm_mib']:.2f}", ""))
    t = figures["throughput"]
    s, g = t["svcd"], t["nginx"]
    label = f"{t['clients']} clients, {t['chunks']} chunks, median of {t['rounds']}"
    rows.append(("chunk requests' Accept-Encoding", repr(t["accept_encoding"]), "", "", ""))
    rows.append((f"chunks, {label}, requests/s", f"{s['requests_s']:.0f}", f"nginx {g['requests_s']:.0f}", f"{s['requests_s'] / g['requests_s']:.2f}", ">= 0.7"))
    rows.append(("  ratio of requests/s, each round", " ".join(f"{r:.2f}" for r in t["round_ratios"]), "", "", ""))
    rows.append((f"chunks, {label}, MiB/s", f"{s['mib_s']:.1f}", f"nginx {g['mib_s']:.1f}", f"{s['mib_s'] / g['mib_s']:.2f}", ">= 0.7"))
    rows.append(("  latency p50 / p99 ms", f"{s['p50_ms']:.1f} / {s['p99_ms']:.1f}", f"nginx {g['p50_ms']:.1f} / {g['p99_ms']:.1f}", "", ""))
    rows.append(("  non-2xx answers / socket errors", f"{s['non_2xx']} / {s['socket_errors']}", f"nginx {g['non_2xx']} / {g['socket_errors']}", "", ""))
    widths = [max(len(r[i]) for r in rows + [("measure", "svcd", "reference", "svcd/ref", "target")]) for i in range(5)]
    header = ("measure", "svcd", "reference", "svcd/ref", "target")
    line = lambda r: f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]:<{widths[4]}}".rstrip()
    print(line(header))
    print("-" * len(line(header)))
    for r in rows:
        print(line(r))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svcd", default=os.environ.get("SVCD_BIN"), help="the svcd binary, a release build (default: $SVCD_BIN)")
    parser.add_argument("--data", type=Path, default=Path("/var/tmp/portal-bench"), help="where generated files are kept and the run directory is made (default /var/tmp/portal-bench)")
    parser.add_argument("--size-mib", type=int, default=1024, help="conversion sources in all, MiB (default 1024)")
    parser.add_argument("--fast-mib", type=int, default=1024, help="NetCDF-4 sources of the fast-path run, MiB (default 1024)")
    parser.add_argument("--samples", type=int, default=50, help="first-chunk-after-load samples (default 50)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of each chunk-throughput run (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="chunk-throughput rounds, svcd then nginx in each (default 3)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent connections of the chunk-throughput runs (default 16)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument("--accept-encoding", default="gzip, deflate", help='the Accept-Encoding header of chunk requests (default "gzip, deflate", as fsspec and requests send it)')
    parser.add_argument("--agg-files", type=int, default=100, help="files of the aggregation run (default 100)")
    parser.add_argument("--agg-mib", type=int, default=1024, help="their size in all, MiB (default 1024)")
    parser.add_argument("--only-aggregation", action="store_true", help="run section 4 alone")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args()
    if not args.svcd or not os.access(args.svcd, os.X_OK):
        raise SystemExit(f"svcd binary not found: {args.svcd!r} (--svcd or SVCD_BIN)")
    if args.samples < 1 or args.size_mib < 1 or args.fast_mib < 1 or args.duration < 1 or args.rounds < 1 or args.clients < 1:
        raise SystemExit("--size-mib, --fast-mib, --samples, --duration, --rounds and --clients must be positive")
    ensure_tools()
    root = args.data.resolve()
    root.mkdir(parents=True, exist_ok=True)

    print(f"sources ({args.size_mib} MiB) and load samples ({args.samples}) in {root}", flush=True)
    with open(root / ".generating", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one run at a time writes the shared files
        sources, fast_sources, samples = [], [], []
        if not args.only_aggregation:
            sources = generate_sources(root, args.size_mib)
            nc4_kinds = [k for k in KINDS if k[2] == "NETCDF4"]
            fast_sources = generate_sources(root, args.fast_mib, kinds=nc4_kinds, label="-nc4")
            samples = generate_samples(root, args.samples)
        aggregated = generate_aggregation_sources(root, args.agg_files, args.agg_mib)
    total = sum(p.stat().st_size for _, p, _ in sources)
    print(f"  {len(sources)} sources, {total / MIB:.0f} MiB; {len(samples)} load samples, {sum(p.stat().st_size for p in samples) / MIB:.0f} MiB", flush=True)

    figures = {"svcd": str(args.svcd), "size_mib": args.size_mib, "data": str(root), "accept_encoding": args.accept_encoding}
    run = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    svcd = None
    try:
        svcd = Svcd(args.svcd, root, run, args.accept_encoding)
        print(f"svcd on {svcd.host}, data directory {svcd.data}", flush=True)

        if args.only_aggregation:
            print(f"4. aggregation of {len(aggregated)} files: svcd, then xarray", flush=True)
            figures["aggregation"] = measure_aggregation(svcd, aggregated, run)
            for a in figures["aggregation"]:
                print(f"{a['label']}: svcd {a['mib'] / a['svcd_s']:.1f} MiB/s, xarray {a['mib'] / a['xarray_s']:.1f} MiB/s, ratio {a['ratio']:.2f}; VmHWM svcd {a['svcd_vmhwm_mib']:.0f} MiB, xarray {a['xarray_vmhwm_mib']:.0f} MiB")
            return
        print("1. conversion: svcd, then xarray, one file at a time", flush=True)
        rows = measure_conversion(svcd, sources, run)
        figures["conversion"] = {"files": rows, "summary": conversion_summary(rows)}

        print(f"1b. fast path: svcd copying stored chunks, then cp, one file at a time", flush=True)
        figures["fast_path"] = measure_fast_path(svcd, fast_sources, run)

        print(f"2. first chunk after load: {len(samples)} fresh stores", flush=True)
        first = measure_first_chunk(svcd, samples)
        first.update({
            "p50_ms": percentile(first["first_chunk_s"], 50) * 1e3,
            "p99_ms": percentile(first["first_chunk_s"], 99) * 1e3,
            "load_p50_ms": percentile(first["load_s"], 50) * 1e3,
            "load_p99_ms": percentile(first["load_s"], 99) * 1e3,
        })
        figures["first_chunk"] = first

        print("3. chunk throughput: svcd and nginx in turn", flush=True)
        largest = max(rows, key=lambda r: r["svcd_store_bytes"])
        figures["throughput"] = measure_throughput(svcd, largest, args.clients, args.threads, args.duration, args.rounds, args.accept_encoding, run)

        print(f"4. aggregation of {len(aggregated)} files: svcd, then xarray", flush=True)
        figures["aggregation"] = measure_aggregation(svcd, aggregated, run)
        figures["svcd_log_problems"] = svcd.problems()
    finally:
        if svcd is not None:
            svcd.stop()
        shutil.rmtree(run, ignore_errors=True)

    print()
    table(figures)
    problems = figures["svcd_log_problems"]
    if problems:
        print(f"\nsvcd logged {len(problems)} warnings or errors:")
        for line, count in collections.Counter(re.sub(r"^\S+Z ", "", line) for line in problems).most_common(10):
            print(f"  {count} x {line}")
    print(f"\n{root} holds {tree_bytes(root) / MIB:.0f} MiB (generated files, kept for the next run)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
