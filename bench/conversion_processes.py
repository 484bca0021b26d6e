#!/usr/bin/env python3
"""What reading sources in conversions' processes costs: two svcd release builds side by side.

Each binary (`--svcd NEW --svcd OLD`: the first is compared with the second) serves a fresh
data directory in turn, `--rounds` rounds (3), the order reversed every other round. Per
round:
- 20 small files converted one after another: POST to ready, the median;
- with the one conversion worker (`SVCD_STORES_WORKERS=1`) kept busy by a 500 MiB source,
  10 small stores asked for and left queued: each one's `.zmetadata`, then its first chunk,
  computed on request; the median of each;
- an aggregation (`concat`) of `--sources` files (1000) of one time step: POST to ready.

Reported: each binary's median over the rounds, in ms, and the ratio of the first to the
second. The generated files are kept in `--data` (/var/tmp/conversion-processes).

Run: .venv-test/bin/python bench/conversion_processes.py --svcd NEW --svcd OLD
[--sources 1000] [--rounds 3]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from aggregated import generate_sources  # noqa: E402
from conftest import Svcd, serve  # noqa: E402


def small(directory, count):
    """`count` files of a 4 x 16 x 32 float field, written once and reused."""
    import netCDF4

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = directory / f"small-{i}.nc"
        if not path.exists():
            with netCDF4.Dataset(path, "w") as nc:
                nc.title = "small"
                nc.createDimension("time", 4)
                nc.createDimension("lat", 16)
                nc.createDimension("lon", 32)
                var = nc.createVariable("tas", "f4", ("time", "lat", "lon"))
                var.units = "K"
                var[:] = np.random.default_rng(i).random((4, 16, 32), dtype="f4")
        paths.append(path)
    return paths


def large(path):
    """A NetCDF-3 source of 1000 x 256 x 512 random floats (500 MiB), written once."""
    import netCDF4

    if not path.exists():
        with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
            nc.createDimension("time", 1000)
            nc.createDimension("lat", 256)
            nc.createDimension("lon", 512)
            var = nc.createVariable("pr", "f4", ("time", "lat", "lon"))
            rng = np.random.default_rng(7)
            for step in range(1000):
                var[step] = rng.random((256, 512), dtype="f4")
    return path


def run(binary, smalls, later, big, aggregated):
    """One round of one binary: the four figures, in seconds."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as directory:
        data = Path(directory)
        env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS="/", SVCD_STORES_WORKERS="1")
        proc, host = serve(binary, data, env)
        try:
            base = f"{host}/api/svc-nextgen"
            token = Svcd(base, host, data, binary).token_file(data / "jane.json", "jane")
            headers = {"Authorization": f"Bearer {token}"}

            def post(body):
                answer = requests.post(f"{base}/data-portal/zarr/convert", json=body, headers=headers, timeout=60)
                assert answer.status_code == 200, answer.text
                return answer.json()["urls"][0]

            def status(url):
                return requests.get(f"{base}/data-portal/zarr-utils/status", params={"url": url}, headers=headers, timeout=60).json()

            def convert(body):
                started = time.perf_counter()
                url = post(body)
                while (now := status(url))["status"] == 2:
                    time.sleep(0.002)
                assert now["status"] == 0, now
                return time.perf_counter() - started

            one = [convert({"path": [str(path)]}) for path in smalls]
            blocker = post({"path": [str(big)]})
            metadata, chunks = [], []
            for path in later:
                url = post({"path": [str(path)]})
                started = time.perf_counter()
                answer = requests.get(f"{url}/.zmetadata", headers=headers, timeout=60)
                between = time.perf_counter()
                chunk = requests.get(f"{url}/tas/0.0.0", headers=headers, timeout=60)
                done = time.perf_counter()
                assert answer.status_code == 200 and chunk.status_code == 200, (answer.text, chunk.status_code)
                metadata.append(between - started)
                chunks.append(done - between)
            assert status(blocker)["status"] == 2, "the large conversion ended before the requests: they were not computed on request"
            while status(blocker)["status"] == 2:
                time.sleep(0.05)
            whole = convert({"path": [str(path) for path in aggregated], "aggregate": "concat"})
            return statistics.median(one), statistics.median(metadata), statistics.median(chunks), whole
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svcd", action="append", required=True, help="an svcd release binary (twice: the new, then the one to compare with)")
    parser.add_argument("--sources", type=int, default=1000, help="sources of the aggregation (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--data", type=Path, default=Path("/var/tmp/conversion-processes"))
    args = parser.parse_args()
    if len(args.svcd) != 2:
        raise SystemExit("give --svcd twice: the new binary, then the one to compare with")
    smalls = small(args.data / "small", 20)
    later = small(args.data / "later", 10)
    big = large(args.data / "large.nc")
    aggregated = generate_sources(args.data / "aggregated", args.sources)
    labels = [
        "one small file, POST to ready (median of 20)",
        "metadata computed on request (median of 10)",
        "chunk computed on request (median of 10)",
        f"aggregation of {len(aggregated)} sources, POST to ready",
    ]
    new, old = args.svcd
    results = {new: [], old: []}
    for round_ in range(args.rounds):
        order = [old, new] if round_ % 2 == 0 else [new, old]
        for binary in order:
            results[binary].append(run(binary, smalls, later, big, aggregated))
            print(round_, binary, [round(x * 1000, 1) for x in results[binary][-1]], "ms", flush=True)
    for i, label in enumerate(labels):
        first = statistics.median(x[i] for x in results[new]) * 1000
        second = statistics.median(x[i] for x in results[old]) * 1000
        print(f"{label}: {first:.1f} ms against {second:.1f} ms, ratio {first / second:.2f}")


if __name__ == "__main__":
    main()
