#!/usr/bin/env python3
"""The data portal, side by side in one run:

1. conversion throughput (MiB/s of source file bytes) of svcd against xarray `to_zarr`
   (zarr-python 3, Zarr v2 output) on generated daily fields: 3-D (time, lat, lon) and 4-D
   (time, plev, lat, lon) float32, NetCDF-4 with zlib and NetCDF-3 (64-bit offset), about
   `--size-mib` in all. xarray writes the same chunks with the same compressor (read from each
   svcd store's `.zarray`) and, like svcd, the raw values with their CF attributes undecoded
   (`decode_cf=False`). One file at a time on both sides.
2. first chunk after `load`: the time from a `databrowser/load/user?file=...` request to the
   bytes of the first data chunk of the new store, p50 and p99 over `--samples` fresh files
   (each sample converts a file no store holds yet).
3. chunk throughput: `--clients` concurrent connections (wrk, 2 threads) reading every data
   chunk of the largest converted store for `--duration` seconds: svcd (bearer token) against
   nginx serving the same store directory as static files on 127.0.0.1.

Needs `nginx` and `wrk` (Debian packages; installed with apt-get when missing) and the
Python of `.venv-test` (xarray, zarr, netCDF4, requests).

Run: make bench-portal, or
.venv-test/bin/python bench/portal.py --svcd $CARGO_TARGET_DIR/release/svcd
[--size-mib 1024] [--samples 50] [--duration 10] [--data /var/tmp/portal-bench] [--json F]
"""

import argparse
import getpass
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

API = "/api/svc-nextgen"
KINDS = [
    # name, NetCDF format, variable, shape of one time step
    ("3d-nc4", "NETCDF4", "tas", (192, 384)),
    ("4d-nc4", "NETCDF4", "ta", (8, 96, 192)),
    ("3d-nc3", "NETCDF3_64BIT_OFFSET", "pr", (192, 384)),
    ("4d-nc3", "NETCDF3_64BIT_OFFSET", "ua", (8, 96, 192)),
]


def field(step, shape, rng):
    """A smooth daily field with weather-like noise, at the precision of a model output."""
    grids = np.meshgrid(*[np.linspace(0, np.pi, n, dtype="f4") for n in shape], indexing="ij")
    base = 250 + 40 * np.sin(grids[-2]) * np.cos(grids[-1] + step / 30)
    if len(shape) == 3:
        base = base - 6 * grids[0]
    noise = rng.normal(0, 1.5, shape).astype("f4")
    return np.round(base + noise, 2).astype("f4")


def generate(data, size_mib):
    """Write the source files (kept in `data` and reused when they are there)."""
    import netCDF4

    data.mkdir(parents=True, exist_ok=True)
    files = []
    for name, fmt, var, shape in KINDS:
        # NetCDF-4 files are compressed about 2x: give them twice the values.
        share = size_mib * 2**20 / len(KINDS) * (2 if fmt == "NETCDF4" else 1)
        steps = max(2, int(share // (4 * np.prod(shape))))
        path = data / f"{name}-{steps}.nc"
        files.append((name, path, var))
        if path.exists():
            continue
        print(f"writing {path} ({steps} days)", flush=True)
        rng = np.random.default_rng(len(name))
        partial = path.with_suffix(".partial")
        with netCDF4.Dataset(partial, "w", format=fmt) as nc:
            nc.Conventions = "CF-1.8"
            nc.createDimension("time", None)
            dims = ["time"]
            for dim, n in zip(["plev", "lat", "lon"][-len(shape):], shape):
                nc.createDimension(dim, n)
                coord = nc.createVariable(dim, "f8", (dim,))
                coord[:] = np.linspace(-90, 90, n) if dim == "lat" else np.linspace(0, 360, n, endpoint=False) if dim == "lon" else np.linspace(100000, 10000, n)
                coord.units = {"lat": "degrees_north", "lon": "degrees_east", "plev": "Pa"}[dim]
                dims.append(dim)
            time_var = nc.createVariable("time", "f8", ("time",))
            time_var.units = "days since 2000-01-01"
            time_var.calendar = "standard"
            extra = {"zlib": True, "complevel": 4, "chunksizes": (1, *shape)} if fmt == "NETCDF4" else {}
            values = nc.createVariable(var, "f4", tuple(dims), fill_value=np.float32(1e20), **extra)
            values.units = "K"
            values.standard_name = "air_temperature"
            for start in range(0, steps, 10):
                count = min(10, steps - start)
                values[start:start + count] = np.stack([field(start + i, shape, rng) for i in range(count)])
                time_var[start:start + count] = np.arange(start, start + count)
        partial.rename(path)
    return files


class Daemon:
    """svcd serving a fresh data directory, with a token of one user."""

    def __init__(self, binary, sources, work):
        self.binary, self.data = binary, work / "svcd"
        self.data.mkdir()
        env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(sources))
        self.log = open(self.data / "svcd.log", "w")
        self.proc = subprocess.Popen([binary, "--data-dir", str(self.data), "serve", "--listen", "127.0.0.1:0"], stdout=self.log, stderr=self.log, env=env)
        address = self.data / "svcd.addr"
        deadline = time.monotonic() + 60
        while not (address.exists() and address.read_text().endswith("\n")):
            assert self.proc.poll() is None and time.monotonic() < deadline, "svcd did not start"
            time.sleep(0.05)
        self.host = address.read_text().strip()
        self.base = f"http://{self.host}{API}"
        token = subprocess.run([binary, "--data-dir", str(self.data), "token", "issue", "--user", "bench"], capture_output=True, text=True, check=True)
        self.token = token.stdout.strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.session = requests.Session()
        self.session.headers.update(self.headers)

    def convert(self, path):
        answer = self.session.post(f"{self.base}/data-portal/zarr/convert", json={"path": [str(path)]}, timeout=60)
        answer.raise_for_status()
        return answer.json()["urls"][0]

    def wait_ready(self, url, timeout=3600):
        deadline = time.monotonic() + timeout
        while True:
            status = self.session.get(f"{self.base}/data-portal/zarr-utils/status", params={"url": url}, timeout=30).json()
            if status["status"] == 0:
                return
            assert status["status"] == 2 and time.monotonic() < deadline, f"{url}: {status}"
            time.sleep(0.005)

    def store_dir(self, url):
        return self.data / "stores" / url.rsplit("/", 1)[1].removesuffix(".zarr")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def conversion(daemon, files, work):
    """MiB/s of each file and in all, svcd and xarray."""
    import numcodecs
    import xarray as xr

    rows, stores = [], []
    for name, path, var in files:
        mib = path.stat().st_size / 2**20
        start = time.perf_counter()
        url = daemon.convert(path)
        daemon.wait_ready(url)
        svcd_s = time.perf_counter() - start
        store = daemon.store_dir(url)
        stores.append((mib, url, store, var))
        encoding = {}
        for zarray in store.glob("*/.zarray"):
            meta = json.loads(zarray.read_text())
            compressor = meta["compressor"]
            encoding[zarray.parent.name] = {
                "chunks": tuple(meta["chunks"]),
                "compressors": [numcodecs.Blosc(cname=compressor["cname"], clevel=compressor["clevel"], shuffle=compressor["shuffle"])],
            }
        target = work / f"{name}.zarr"
        start = time.perf_counter()
        with xr.open_dataset(path, decode_cf=False) as ds:
            ds.to_zarr(target, zarr_format=2, consolidated=True, encoding=encoding, mode="w")
        xarray_s = time.perf_counter() - start
        shutil.rmtree(target)
        rows.append((name, mib, svcd_s, xarray_s))
        print(f"  {name}: {mib:.0f} MiB, svcd {mib / svcd_s:.0f} MiB/s, xarray {mib / xarray_s:.0f} MiB/s", flush=True)
    total = sum(r[1] for r in rows)
    rows.append(("all", total, sum(r[2] for r in rows), sum(r[3] for r in rows)))
    return rows, max(stores)


def first_chunk(daemon, sources, samples):
    """Seconds from `load` to the bytes of the first data chunk, one fresh file per sample."""
    import netCDF4

    tiny = sources / "load"
    tiny.mkdir(exist_ok=True)
    entries = []
    for i in range(samples):
        path = tiny / f"sample-{i:04d}.nc"
        if not path.exists():
            with netCDF4.Dataset(path, "w") as nc:
                nc.createDimension("time", None)
                nc.createDimension("lat", 96)
                nc.createDimension("lon", 192)
                var = nc.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True)
                var[:] = np.random.default_rng(i).normal(280, 5, (30, 96, 192)).astype("f4")
        entries.append({"file": str(path), "variable": "tas", "time_frequency": "day", "time": "[2000-01-01T00:00:00Z TO 2000-01-30T00:00:00Z]"})
    added = daemon.session.post(f"{daemon.base}/databrowser/userdata", json={"user_metadata": entries, "facets": {"project": "loadbench"}}, timeout=120)
    added.raise_for_status()
    times = []
    for entry in entries:
        start = time.perf_counter()
        load = daemon.session.get(f"{daemon.base}/databrowser/load/user", params={"file": entry["file"]}, timeout=60)
        load.raise_for_status()
        [url] = load.text.split()
        chunk = daemon.session.get(f"{url}/tas/0.0.0", timeout=60)
        times.append(time.perf_counter() - start)
        assert chunk.status_code == 200 and len(chunk.content) > 0, chunk.text
    times.sort()
    return times


WRK_SCRIPT = """
local paths = {}
for line in io.lines(os.getenv("WRK_PATHS")) do paths[#paths + 1] = line end
local n = math.random(#paths)
request = function()
  n = n % #paths + 1
  return wrk.format("GET", paths[n])
end
done = function(summary, latency, requests)
  io.stderr:write(string.format('{"requests": %d, "bytes": %d, "seconds": %f, "errors": %d}\\n',
    summary.requests, summary.bytes, summary.duration / 1e6,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""


def wrk(base, paths, headers, clients, duration, work):
    listing = work / "paths.txt"
    listing.write_text("".join(f"{path}\n" for path in paths))
    script = work / "paths.lua"
    script.write_text(WRK_SCRIPT)
    args = ["wrk", "-t", "2", "-c", str(clients), "-d", f"{duration}s", "-s", str(script)]
    for key, value in headers.items():
        args += ["-H", f"{key}: {value}"]
    result = subprocess.run(args + [base], capture_output=True, text=True, env=dict(os.environ, WRK_PATHS=str(listing)), check=True)
    summary = json.loads(result.stderr.strip().splitlines()[-1])
    assert summary["errors"] == 0, result.stdout + result.stderr
    return summary["requests"] / summary["seconds"], summary["bytes"] / summary["seconds"] / 2**20


def throughput(daemon, store, url, clients, duration, work):
    """(requests/s, MiB/s) of svcd and of nginx over every data chunk of one store."""
    var = store[3]
    directory = store[2]
    chunks = sorted(p.name for p in (directory / var).iterdir() if not p.name.startswith("."))
    prefix = url.split(daemon.host, 1)[1]
    svcd = wrk(f"http://{daemon.host}", [f"{prefix}/{var}/{c}" for c in chunks], daemon.headers, clients, duration, work)
    port = free_port()
    conf = work / "nginx.conf"
    conf.write_text(f"""
daemon off;
user {getpass.getuser()};
worker_processes auto;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port};
    root {directory};
  }}
}}
""")
    nginx = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(work)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/{var}/{chunks[0]}", timeout=1).raise_for_status()
                break
            except requests.RequestException:
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.1)
        static = wrk(f"http://127.0.0.1:{port}", [f"/{var}/{c}" for c in chunks], {}, clients, duration, work)
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
    return svcd, static, len(chunks)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--svcd", default=os.environ.get("SVCD_BIN"), help="the svcd binary (a release build)")
    parser.add_argument("--data", type=Path, default=Path("/var/tmp/portal-bench"), help="where the generated sources are kept")
    parser.add_argument("--size-mib", type=int, default=1024, help="source files in all (default 1024)")
    parser.add_argument("--samples", type=int, default=50, help="first-chunk samples (default 50)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of each throughput run (default 10)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    assert args.svcd, "--svcd or SVCD_BIN"
    for tool, package in (("nginx", "nginx"), ("wrk", "wrk")):
        if not shutil.which(tool):
            subprocess.run(["apt-get", "install", "-y", "-q", package], check=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    sources = args.data / "sources"
    files = generate(sources, args.size_mib)
    print(f"sources: {sum(p.stat().st_size for _, p, _ in files) / 2**20:.0f} MiB in {len(files)} files", flush=True)
    with tempfile.TemporaryDirectory(dir=args.data) as scratch:
        work = Path(scratch)
        daemon = Daemon(args.svcd, args.data, work)
        try:
            print("conversion", flush=True)
            rows, largest = conversion(daemon, files, work)
            print("first chunk after load", flush=True)
            first = first_chunk(daemon, sources, args.samples)
            print("chunk throughput", flush=True)
            svcd, static, chunk_count = throughput(daemon, largest, largest[1], args.clients, args.duration, work)
        finally:
            daemon.stop()
    figures = {
        "conversion": [{"source": n, "mib": m, "svcd_mib_s": m / s, "xarray_mib_s": m / x, "ratio": x / s} for n, m, s, x in rows],
        "first_chunk_ms": {"p50": percentile(first, 50) * 1e3, "p99": percentile(first, 99) * 1e3, "samples": len(first)},
        "throughput": {"clients": args.clients, "chunks": chunk_count, "svcd": {"requests_s": svcd[0], "mib_s": svcd[1]}, "nginx": {"requests_s": static[0], "mib_s": static[1]}},
    }
    print()
    print("| conversion | MiB | svcd MiB/s | xarray MiB/s | svcd/xarray |")
    print("|---|---|---|---|---|")
    for row in figures["conversion"]:
        print(f"| {row['source']} | {row['mib']:.0f} | {row['svcd_mib_s']:.1f} | {row['xarray_mib_s']:.1f} | {row['ratio']:.2f} |")
    print()
    f = figures["first_chunk_ms"]
    print(f"first chunk after load ({f['samples']} fresh stores): p50 {f['p50']:.1f} ms, p99 {f['p99']:.1f} ms")
    print()
    t = figures["throughput"]
    print(f"| {args.clients} clients, {chunk_count} chunks | requests/s | MiB/s |")
    print("|---|---|---|")
    print(f"| svcd | {t['svcd']['requests_s']:.0f} | {t['svcd']['mib_s']:.0f} |")
    print(f"| nginx | {t['nginx']['requests_s']:.0f} | {t['nginx']['mib_s']:.0f} |")
    print(f"| svcd/nginx | {t['svcd']['requests_s'] / t['nginx']['requests_s']:.2f} | {t['svcd']['mib_s'] / t['nginx']['mib_s']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
