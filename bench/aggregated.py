#!/usr/bin/env python3
"""Reads of an aggregated store against reads of the same chunks from a store of one source,
side by side in one run.

A store's record names its sources (up to 1,000 for an aggregation), and every chunk request
and every open through the mount reads the record. This measures what an aggregation's
sources cost its readers:

- "aggregated": `--sources` NetCDF files (1,000 by default, the most one store aggregates),
  one time step of `tas(time, lat, lon)` (64 x 128 float32, 32 KiB) each, with long CMIP-like
  names, converted with `aggregate=concat` along time: one chunk per file;
- "one source": one NetCDF file of as many time steps of the same shape: as many chunks of
  the same size.

1. HTTP: wrk (`--clients` connections, 2 threads, cycling through every chunk of the store;
   `bench/portal.py`'s script) for `--duration` seconds per round, the two stores in turn
   (each first in every other round), `--rounds` rounds; requests per second, medians, and
   the ratio aggregated / one source (target >= 0.9).
2. The mount: every chunk file opened and read whole, in key order, by one reader, warm;
   files per second, medians, and the ratio (report).

Run as root (it mounts): .venv-test/bin/python bench/aggregated.py --svcd
$CARGO_TARGET_DIR/release/svcd [--sources 1000] [--rounds 3] [--duration 6] [--clients 16]
[--data DIR] [--json FILE]. The sources are generated once into `--data` (default
/var/tmp/aggregated-bench) and reused.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import portal  # noqa: E402
import tier  # noqa: E402

LAT, LON = 64, 128


def generate_sources(directory, count):
    """`count` files of one time step each, written once and reused."""
    import netCDF4

    done = directory / "complete"
    if not done.exists():
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for n in range(count):
            name = f"tas_day_MPI-ESM1-2-LR_ssp585_r1i1p1f1_gn_{n:06d}-step-of-a-long-daily-run.nc"
            with netCDF4.Dataset(directory / name, "w", format="NETCDF3_64BIT_OFFSET") as nc:
                nc.createDimension("time", 1)
                nc.createDimension("lat", LAT)
                nc.createDimension("lon", LON)
                time_var = nc.createVariable("time", "f8", ("time",))
                time_var.units = "days since 2000-01-01"
                time_var[:] = [n]
                nc.createVariable("lat", "f8", ("lat",))[:] = np.linspace(-89.0, 89.0, LAT)
                nc.createVariable("lon", "f8", ("lon",))[:] = np.linspace(0.0, 359.0, LON)
                tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"))
                tas.units = "K"
                tas[:] = np.random.default_rng(n).random((1, LAT, LON), dtype="f4")
        done.write_text("")
    return sorted(directory.glob("*.nc"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svcd", default=os.environ.get("SVCD_BIN", "svcd"))
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=6, help="seconds of each wrk round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--data", type=Path, default=Path("/var/tmp/aggregated-bench"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it mounts")
    portal.ensure_tools()
    sources = args.data / "sources"
    aggregated = generate_sources(sources / f"steps-{args.sources}", args.sources)
    single = tier.generate(sources / f"one-{args.sources}.nc", args.sources, LAT, LON, seed=2)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=args.data))
    data, mount = run / "svcd", run / "mount"
    data.mkdir()
    mount.mkdir()
    svcd = tier.Svcd(args.svcd, data, mount, sources, 128)
    try:
        tokens = {
            "aggregated": svcd.convert(aggregated, aggregate="concat", dim="time")[1],
            "one source": svcd.convert(single)[1],
        }
        keys = {side: tier.chunk_keys(data / "stores" / token) for side, token in tokens.items()}
        assert len(keys["aggregated"]) == len(keys["one source"]) == args.sources, {k: len(v) for k, v in keys.items()}
        host = svcd.base.removesuffix(tier.API)
        paths = {side: [f"{tier.API}/data-portal/zarr/{tokens[side]}.zarr/{k}" for k in keys[side]] for side in tokens}
        token = svcd.headers["Authorization"].removeprefix("Bearer ")
        http = {side: [] for side in tokens}
        files = {side: [] for side in tokens}
        for number in range(args.rounds):
            order = list(tokens) if number % 2 == 0 else list(tokens)[::-1]
            for side in order:
                summary = portal.wrk(host, paths[side], token, args.clients, 2, args.duration, "", run)
                assert summary["non_2xx"] == 0, summary
                http[side].append(summary["requests_s"])
                mounted = [mount / f"{tokens[side]}.zarr" / k for k in keys[side]]
                tier.read_files(mounted)
                started = time.perf_counter()
                tier.read_files(mounted)
                files[side].append(len(mounted) / (time.perf_counter() - started))
            print(f"round {number + 1}: HTTP {http['aggregated'][-1]:.0f}/s against {http['one source'][-1]:.0f}/s, "
                  f"mount {files['aggregated'][-1]:.0f} against {files['one source'][-1]:.0f} files/s", flush=True)
    finally:
        svcd.stop()
        shutil.rmtree(run, ignore_errors=True)
    figures = {"sources": args.sources, "clients": args.clients, "rounds": args.rounds, "duration_s": args.duration,
               "http_requests_s": {side: statistics.median(v) for side, v in http.items()},
               "mount_files_s": {side: statistics.median(v) for side, v in files.items()}}
    figures["http_ratio"] = figures["http_requests_s"]["aggregated"] / figures["http_requests_s"]["one source"]
    figures["mount_ratio"] = figures["mount_files_s"]["aggregated"] / figures["mount_files_s"]["one source"]
    print(f"{'measure':<52} {'aggregated':>12} {'one source':>12} {'ratio':>7}  target")
    print(f"{f'HTTP chunk requests/s ({args.sources} sources)':<52} {figures['http_requests_s']['aggregated']:>12.0f} {figures['http_requests_s']['one source']:>12.0f} {figures['http_ratio']:>6.2f}x  >= 0.9")
    print(f"{'mount: chunk files opened and read per second':<52} {figures['mount_files_s']['aggregated']:>12.0f} {figures['mount_files_s']['one source']:>12.0f} {figures['mount_ratio']:>6.2f}x  report")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
