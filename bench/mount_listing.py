#!/usr/bin/env python3
"""Listing and `stat`-ing a large directory through the mount: time and the daemon's memory.

One store of `--chunks` chunks in one array (`tas`, one chunk per time step of a 2 x 2 grid),
converted once into a data directory kept in `--data`, is served by each svcd binary given
(`--svcd`, in turn, on the same data directory) with the stores mounted. For each: the
daemon's resident memory (MiB) once serving, `os.listdir` of `tas` through the mount
(seconds, and the memory after it: a listing makes no inodes), then `os.scandir` with
`stat` of every entry (seconds: a second listing and one lookup per entry, and the memory
after it). The page cache
and the kernel's dentries are dropped before each binary starts.

Needs root (the mount, dropping caches) and /dev/fuse, and the Python of .venv-test.

Run: .venv-test/bin/python bench/mount_listing.py --svcd OLD --svcd NEW [--chunks 200000]
[--data /var/tmp/mount-listing]
"""

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import requests

PORT = 7793
BASE = f"http://127.0.0.1:{PORT}/api/svc-nextgen"


def generate(path, steps):
    """A NetCDF-3 file of `tas(time=steps, lat=2, lon=2)`: one small chunk per time step."""
    if path.exists():
        return
    import netCDF4

    partial = path.with_suffix(".partial")
    with netCDF4.Dataset(partial, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.createDimension("time", steps)
        nc.createDimension("lat", 2)
        nc.createDimension("lon", 2)
        time_var = nc.createVariable("time", "f8", ("time",))
        time_var.units = "days since 2000-01-01"
        time_var[:] = np.arange(steps)
        nc.createVariable("lat", "f8", ("lat",))[:] = [0.0, 1.0]
        nc.createVariable("lon", "f8", ("lon",))[:] = [0.0, 1.0]
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"))
        tas.units = "K"
        tas[:] = np.random.default_rng(1).random((steps, 2, 2), dtype="f4")
    partial.rename(path)


def serve(binary, data, sources, mount, log):
    env = {**os.environ, "SVCD_STORES_ALLOWED_ROOTS": str(sources), "SVCD_HTTP_LISTEN": f"127.0.0.1:{PORT}"}
    proc = subprocess.Popen([binary, "--data-dir", str(data), "serve", "--mount", str(mount)],
                            env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            requests.get(f"{BASE}/ping", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.2)
    else:
        raise RuntimeError(f"{binary} did not start")
    deadline = time.monotonic() + 30
    while not os.path.ismount(mount) and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def rss_mib(proc):
    with open(f"/proc/{proc.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return None


def drop_caches():
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)


def convert(binary, data, sources, mount, log, source):
    """Converts `source` (once; its token is kept beside the data directory)."""
    token_file = data.parent / f"token-{source.stem}"
    if token_file.exists():
        return token_file.read_text()
    proc = serve(binary, data, sources, mount, log)
    try:
        bearer = subprocess.run([binary, "--data-dir", str(data), "token", "issue", "--user=bench"],
                                capture_output=True, text=True, check=True).stdout.strip()
        headers = {"Authorization": f"Bearer {bearer}"}
        answer = requests.post(f"{BASE}/data-portal/zarr/convert", json={"path": [str(source)]}, headers=headers, timeout=60)
        answer.raise_for_status()
        [url] = answer.json()["urls"]
        while True:
            status = requests.get(f"{BASE}/data-portal/zarr-utils/status", params={"url": url}, headers=headers, timeout=60).json()
            if status["status"] != 2:
                assert status["status"] == 0, status
                break
            time.sleep(1)
    finally:
        stop(proc)
    token = url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
    token_file.write_text(token)
    return token


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svcd", action="append", required=True, help="an svcd binary (repeat to compare)")
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--data", type=Path, default=Path("/var/tmp/mount-listing"))
    args = parser.parse_args()
    root = args.data / str(args.chunks)
    sources, data, mount = root / "sources", root / "data", root / "mount"
    for directory in (sources, mount):
        directory.mkdir(parents=True, exist_ok=True)
    source = sources / f"chunks-{args.chunks}.nc"
    generate(source, args.chunks)
    with open(root / "svcd.log", "a") as log:
        token = convert(args.svcd[-1], data, sources, mount, log, source)
        tas = mount / f"{token}.zarr" / "tas"
        print(f"{args.chunks} chunks in {tas}")
        for binary in args.svcd:
            drop_caches()
            proc = serve(binary, data, sources, mount, log)
            try:
                row = {"svcd": binary, "rss_serving_mib": rss_mib(proc)}
                started = time.perf_counter()
                row["entries"] = len(os.listdir(tas))
                row["listdir_s"] = round(time.perf_counter() - started, 2)
                # Every chunk and the array's two documents: a listing cut short is no result.
                assert row["entries"] == args.chunks + 2, row
                row["rss_after_listdir_mib"] = rss_mib(proc)
                started = time.perf_counter()
                with os.scandir(tas) as entries:
                    row["bytes"] = sum(entry.stat().st_size for entry in entries)
                row["stat_every_entry_s"] = round(time.perf_counter() - started, 2)
                row["rss_after_stat_mib"] = rss_mib(proc)
                print(json.dumps(row), flush=True)
            finally:
                stop(proc)


if __name__ == "__main__":
    main()
