#!/usr/bin/env python3
"""The mount and the cold tier, side by side in one run.

svcd serves a fresh data directory with the stores mounted (`--mount`), its manifest policy
set so that a store is cut into blobs of about `--blob-mib` MiB (`SVCD_TIER_T_MAX_BYTES`) and
only coordinates stay hot (`SVCD_TIER_T_HOT_BYTES=1024`). Two stores are converted from
generated NetCDF files of float32 noise (so chunks do not compress, and bytes read are bytes
stored): a large one (`--size-mib`, 1 GiB by default, one chunk per time step of
`--step-mib`, 1 MiB by default) and one of small chunks (`--small-chunks`, 8192 by default,
32 KiB each).

1. Sequential read of the large store: every chunk file in key order, read whole with 1 MiB
   reads by one reader, through the mount (`<mount>/<token>.zarr/<key>`) against directly
   from the hot tier (`<data>/stores/<token>/<key>`), each with a cold page cache (after
   `sync` and `echo 3 > /proc/sys/vm/drop_caches`) and warm (read once before), each side
   first in every other round (on this virtual disk, whichever of two cold reads of the same
   files goes second is the slower). MiB/s (medians of the rounds) and the ratio
   mount/direct (target >= 0.8 with passthrough): the geometric mean of the rounds' ratios, in
   which each side's place cancels out over an even number of rounds. For passthrough (the default)
   and for the fallback (svcd restarted with `SVCD_MOUNT_PASSTHROUGH=false`: every read goes
   through the daemon; warm only, as the daemon's mapped chunks keep their pages through
   `drop_caches`). Then what each file costs through the mount: `open` and `close` of every
   chunk file (through the mount and directly), and a FUSE round trip that does no work
   (`statvfs` of the mount), in microseconds; and the best warm ratio a mount that costs
   one such round trip per chunk file could reach (a file's direct read time over that time
   plus the round trip).
2. 16 parallel readers (`--readers`) of the small chunks, each reading every chunk (open,
   read whole, close) in its own shuffled order, warm page cache: as threads of one process
   through the mount, through HTTP (one keep-alive `requests` session per reader, the same
   Python client loop: this measures what a Python client gets, bound by `requests` itself;
   `bench/portal.py` section 3 measures the server with `wrk`), and directly from the hot
   tier; and as processes through the mount and directly (threads of one Python process
   share its interpreter lock, which shapes what they get; dask's threaded and process
   schedulers read these two ways). Chunks/s and the ratios to direct, with passthrough and
   for the fallback (mount and direct only), medians of `--rounds`.
3. Restore of a blob against a plain copy of its archived object: every blob of the large
   store archived (`svcd tier archive`), then for each blob in turn, the time from a read
   of one of its chunks through HTTP (which restores the whole blob, then answers) against
   `cp` of the same ZIP (the cold object) to a file on the hot tier's file system and
   `sync -f` of that file system (a restore is answered once the daemon has synced the
   blob's keys), each after dropping the page cache. MiB/s of blob and the ratio restore/cp (target
   >= 0.8), medians over the blobs of `--rounds` passes (each archives the store again),
   and the daemon's own time of a restore (from its log).
4. `xarray.open_zarr` of the large store through the mount while every blob is archived:
   the time, and the restores it caused (0), from `svcd tier status`.

Needs root (the mount, dropping caches) and /dev/fuse, and the Python of .venv-test.

Run: make bench-tier [BENCH_ARGS="--size-mib 256"], or
.venv-test/bin/python bench/tier.py --svcd $CARGO_TARGET_DIR/release/svcd [--size-mib 1024]
[--step-mib 1] [--blob-mib 128] [--small-chunks 8192] [--readers 16] [--rounds 4] [--data DIR] [--json FILE] [--only-tier] (sections 3 and 4 alone).
Sources are kept in `--data` (default /var/tmp/tier-bench/sources) and reused; svcd's data
directory and the mount live in a run directory removed at the end.
"""

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

API = "/api/svc-nextgen"
MIB = 1 << 20


def generate(path, steps, lat, lon, seed):
    """A NetCDF-3 file of float32 noise `tas(time, lat, lon)`, written once and reused."""
    if path.exists():
        return path
    import netCDF4

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(partial, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.createDimension("time", steps)
        nc.createDimension("lat", lat)
        nc.createDimension("lon", lon)
        time_var = nc.createVariable("time", "f8", ("time",))
        time_var.units = "days since 2000-01-01"
        time_var[:] = np.arange(steps)
        nc.createVariable("lat", "f8", ("lat",))[:] = np.linspace(-89.0, 89.0, lat)
        nc.createVariable("lon", "f8", ("lon",))[:] = np.linspace(0.0, 359.0, lon)
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"))
        tas.units = "K"
        for start in range(0, steps, 64):
            stop = min(steps, start + 64)
            tas[start:stop] = rng.random((stop - start, lat, lon), dtype="f4")
    partial.rename(path)
    return path


def drop_caches():
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def read_files(paths):
    """Reads every file whole with 1 MiB reads; the bytes read."""
    buffer = bytearray(MIB)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while n := handle.readinto(buffer):
                total += n
    return total


class Svcd:
    """svcd serving `data` with the stores mounted at `mount`."""

    def __init__(self, binary, data, mount, sources, blob_mib, passthrough=True):
        self.binary, self.data, self.mount = binary, data, mount
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SVCD_")}
        self.env.update(SVCD_STORES_ALLOWED_ROOTS=str(sources), SVCD_TIER_T_HOT_BYTES="1024",
                        SVCD_TIER_T_MAX_BYTES=str(blob_mib * MIB), SVCD_MOUNT_PASSTHROUGH=str(passthrough).lower(),
                        SVCD_TIER_MANIFESTS=str(data / "manifests"))
        (data / "svcd.addr").unlink(missing_ok=True)
        self.log = open(data / "svcd.log", "a")
        self.proc = subprocess.Popen([binary, "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0", "--mount", str(mount)],
                                     stdout=self.log, stderr=self.log, env=self.env)
        deadline = time.monotonic() + 60
        address = data / "svcd.addr"
        while not (address.exists() and address.read_text().endswith("\n") and os.path.ismount(mount)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"svcd did not start: {(data / 'svcd.log').read_text()[-2000:]}")
            time.sleep(0.05)
        self.base = f"http://{address.read_text().strip()}{API}"
        token = self.cli("token", "issue", "--user", "bench", "--ttl", "1d").strip()
        self.headers = {"Authorization": f"Bearer {token}"}

    def cli(self, *args):
        result = subprocess.run([self.binary, "--data-dir", str(self.data), *args], capture_output=True, text=True, env=self.env, timeout=3600)
        if result.returncode != 0:
            raise RuntimeError(f"svcd {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def convert(self, path, **options):
        """The URL and token of the store of `path` (a file, or a list of files) with the
        conversion `options`, once it is ready."""
        paths = [str(p) for p in path] if isinstance(path, list) else [str(path)]
        answer = requests.post(f"{self.base}/data-portal/zarr/convert", json={"path": paths, **options}, headers=self.headers, timeout=60)
        assert answer.status_code == 200, answer.text
        [url] = answer.json()["urls"]
        while True:
            status = requests.get(f"{self.base}/data-portal/zarr-utils/status", params={"url": url}, headers=self.headers, timeout=30).json()
            if status["status"] != 2:
                assert status["status"] == 0, status
                return url, url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
            time.sleep(0.2)

    def store_url(self, token):
        return f"{self.base}/data-portal/zarr/{token}.zarr"

    def tier(self, token):
        return [json.loads(line) for line in self.cli("tier", "status", "--json", "--scope", token).splitlines()]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        self.log.close()


def chunk_keys(store_dir):
    keys = [str(p.relative_to(store_dir)) for p in store_dir.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return sorted(k for k in keys if k.startswith("tas/"))


# ---------------------------------------------------------------------------------------


def sequential(svcd, token, keys, rounds):
    hot = svcd.data / "stores" / token
    mounted = svcd.mount / f"{token}.zarr"
    sides = {"mount": [mounted / k for k in keys], "direct": [hot / k for k in keys]}
    results = {}
    for cache in ("cold", "warm"):
        for number in range(rounds):
            # Each side goes first in every other round: on this VM's disk, of two cold reads
            # of the same files (each after dropping the page cache), the second is the
            # slower whatever its side (two stores read in turn: 1,150 to 1,490 MiB/s first,
            # 880 to 990 MiB/s second). So the ratio is that of the rounds together (the
            # geometric mean of the rounds' ratios), not that of the medians of each side,
            # which falls on either side of the gap at random.
            order = list(sides.items())
            for side, paths in order if number % 2 == 0 else reversed(order):
                if cache == "cold":
                    drop_caches()
                else:
                    read_files(paths)
                started = time.perf_counter()
                total = read_files(paths)
                seconds = time.perf_counter() - started
                results.setdefault((cache, side), []).append(total / MIB / seconds)
    figures = {f"{cache} {side}": statistics.median(v) for (cache, side), v in results.items()}
    for cache in ("cold", "warm"):
        ratios = [m / d for m, d in zip(results[(cache, "mount")], results[(cache, "direct")])]
        figures[f"{cache} ratio"] = statistics.geometric_mean(ratios)
    return figures


def request_costs(svcd, token, keys, rounds):
    """What a warm read through the mount pays per chunk file: microseconds per `open` and
    `close` of each file through the mount and directly, and per FUSE round trip that does
    no work (`statvfs` of the mount), medians of `rounds`."""
    sides = {"mount": svcd.mount / f"{token}.zarr", "direct": svcd.data / "stores" / token}
    costs = {}
    for _ in range(rounds):
        for side, root in sides.items():
            paths = [str(root / k) for k in keys]
            started = time.perf_counter()
            for path in paths:
                os.close(os.open(path, os.O_RDONLY))
            costs.setdefault(f"open+close {side}", []).append((time.perf_counter() - started) / len(paths) * 1e6)
        started = time.perf_counter()
        for _ in keys:
            os.statvfs(svcd.mount)
        costs.setdefault("round trip", []).append((time.perf_counter() - started) / len(keys) * 1e6)
    return {k: statistics.median(v) for k, v in costs.items()}


def read_shuffled(root, keys, seed):
    """Reads every key below `root` whole (64 KiB reads) in an order shuffled by `seed`: one
    parallel reader (a module-level function, so that a process can run it too)."""
    order = keys[:]
    random.Random(seed).shuffle(order)
    buffer = bytearray(1 << 16)
    for key in order:
        with open(root / key, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass


PARALLEL_SIDES = ("mount", "http", "direct", "mount, processes", "direct, processes")


def parallel(svcd, token, keys, readers, rounds, sides=PARALLEL_SIDES):
    """Chunks per second of `readers` parallel readers of every key, for each of `sides`:
    threads of this process through the mount, through HTTP and directly, and as many
    processes through the mount and directly (threads of one Python process share its
    interpreter lock, which shapes what they get; processes do not)."""
    url = svcd.store_url(token)
    hot = svcd.data / "stores" / token
    mounted = svcd.mount / f"{token}.zarr"

    def files(root):
        return lambda seed: read_shuffled(root, keys, seed)

    def http(seed):
        order = keys[:]
        random.Random(seed).shuffle(order)
        with requests.Session() as session:
            session.headers.update(svcd.headers)
            for key in order:
                answer = session.get(f"{url}/{key}", timeout=60)
                assert answer.status_code == 200, answer.text

    threads = {"mount": files(mounted), "http": http, "direct": files(hot)}
    roots = {"mount, processes": mounted, "direct, processes": hot}
    read_files([hot / k for k in keys])
    read_files([mounted / k for k in keys])
    results = {}
    with concurrent.futures.ProcessPoolExecutor(readers) as processes:
        for _ in range(rounds):
            for side in sides:
                started = time.perf_counter()
                if side in threads:
                    with concurrent.futures.ThreadPoolExecutor(readers) as pool:
                        list(pool.map(threads[side], range(readers)))
                else:
                    list(processes.map(read_shuffled, [roots[side]] * readers, [keys] * readers, range(readers)))
                results.setdefault(side, []).append(readers * len(keys) / (time.perf_counter() - started))
    return {side: statistics.median(v) for side, v in results.items()}


def restore_against_copy(svcd, token, keys, rounds):
    url = svcd.store_url(token)
    by_blob = chunk_keys_by_blob(svcd, token, keys)
    scratch = svcd.data / "copy-scratch"
    scratch.mkdir(exist_ok=True)
    log = svcd.data / "svcd.log"
    logged_from = log.stat().st_size
    restore_rates, copy_rates, sizes = [], [], []
    for _ in range(rounds):
        svcd.cli("tier", "archive", "--scope", token)
        rows = svcd.tier(token)
        assert rows and all(r["state"] == "archived" for r in rows), rows
        for row in rows:
            key = by_blob[row["instance"]]
            cold = svcd.data / "cold" / row["cold_key"]
            size = cold.stat().st_size
            sizes.append(size)
            drop_caches()
            started = time.perf_counter()
            subprocess.run(["cp", str(cold), str(scratch / "blob.zip")], check=True)
            subprocess.run(["sync", "-f", str(scratch)], check=True)
            copy_rates.append(size / MIB / (time.perf_counter() - started))
            (scratch / "blob.zip").unlink()
            drop_caches()
            started = time.perf_counter()
            # Answered once the blob's keys are on disk: the daemon syncs them before it
            # records the blob hot (the cold object's deletion follows the answer).
            answer = requests.get(f"{url}/{key}", headers=svcd.headers, timeout=600)
            restore_rates.append(size / MIB / (time.perf_counter() - started))
            assert answer.status_code == 200, answer.text
        after = svcd.tier(token)
        assert all(r["state"] == "hot" for r in after), after
    shutil.rmtree(scratch)
    with open(log, errors="replace") as handle:
        handle.seek(logged_from)
        # The daemon's own time of each restore, from its log line ("restored ... ms=N").
        inside = [int(m) for m in re.findall(r"restored.*?ms\D*?(\d+)", re.sub(r"\x1b\[[0-9;]*m", "", handle.read()))]
    return {"restore": statistics.median(restore_rates), "cp": statistics.median(copy_rates), "blobs": len(rows),
            "samples": len(restore_rates), "blob MiB": statistics.median(sizes) / MIB, "daemon ms": statistics.median(inside) if inside else None}


def chunk_keys_by_blob(svcd, token, keys):
    """One chunk key (of `keys`) of each blob instance, from the resolver over the mirrored
    manifest."""
    stores = svcd.data / "stores"
    resolved = subprocess.run([svcd.binary, "manifest", "resolve", "--data", str(stores), "--manifests", str(svcd.data / "manifests"), "-"],
                              input="\n".join(f"{token}/{k}" for k in keys), capture_output=True, text=True, check=True).stdout
    first = {}
    for line in resolved.splitlines():
        key, instance = line.split("  ->  ")
        first.setdefault(instance, key.split("/", 1)[1])
    return first


def open_archived(svcd, token):
    restores_before = sum(r["restores"] for r in svcd.tier(token))
    svcd.cli("tier", "archive", "--scope", token)
    import xarray as xr

    drop_caches()
    started = time.perf_counter()
    dataset = xr.open_zarr(svcd.mount / f"{token}.zarr", consolidated=True, zarr_format=2)
    seconds = time.perf_counter() - started
    assert "tas" in dataset
    rows = svcd.tier(token)
    return {"seconds": seconds, "restores": sum(r["restores"] for r in rows) - restores_before, "archived": sum(r["state"] == "archived" for r in rows), "blobs": len(rows)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svcd", default=os.environ.get("SVCD_BIN", "svcd"))
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--step-mib", type=int, default=1, help="MiB per time step (and chunk) of the large store")
    parser.add_argument("--blob-mib", type=int, default=128)
    parser.add_argument("--small-chunks", type=int, default=8192)
    parser.add_argument("--readers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each measurement (each side of a sequential read goes first in half of them)")
    parser.add_argument("--data", type=Path, default=Path("/var/tmp/tier-bench"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only-tier", action="store_true", help="sections 3 and 4 alone (restore, open_zarr)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it mounts and drops the page cache")
    lat, lon = 512, 512 * args.step_mib  # --step-mib MiB per time step
    sources = args.data / "sources"
    step = "" if args.step_mib == 1 else f"-{args.step_mib}MiB-steps"
    large = generate(sources / f"large-{args.size_mib}MiB{step}.nc", args.size_mib // args.step_mib, lat, lon, seed=1)
    small = generate(sources / f"small-{args.small_chunks}.nc", args.small_chunks, 64, 128, seed=2)
    os.chmod(args.data, 0o755)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=args.data))
    data, mount = run / "svcd", run / "mount"
    data.mkdir()
    mount.mkdir()
    figures = {}
    svcd = None
    try:
        svcd = Svcd(args.svcd, data, mount, sources, args.blob_mib)
        _, large_token = svcd.convert(large)
        _, small_token = svcd.convert(small)
        large_keys = chunk_keys(data / "stores" / large_token)
        small_keys = chunk_keys(data / "stores" / small_token)
        print(f"large store: {len(large_keys)} chunks; small store: {len(small_keys)} chunks", file=sys.stderr)
        if not args.only_tier:
            figures["sequential, passthrough"] = sequential(svcd, large_token, large_keys, args.rounds)
            figures["per file"] = request_costs(svcd, large_token, large_keys, args.rounds)
            print(json.dumps(figures), file=sys.stderr, flush=True)
            figures["parallel"] = parallel(svcd, small_token, small_keys, args.readers, args.rounds)
            print(json.dumps(figures), file=sys.stderr, flush=True)
            svcd.stop()
            svcd = Svcd(args.svcd, data, mount, sources, args.blob_mib, passthrough=False)
            figures["sequential, fallback"] = sequential(svcd, large_token, large_keys, args.rounds)
            # HTTP does not go through the mount: without passthrough it is the same.
            figures["parallel, fallback"] = parallel(svcd, small_token, small_keys, args.readers, args.rounds,
                                                     sides=[side for side in PARALLEL_SIDES if side != "http"])
            print(json.dumps(figures), file=sys.stderr, flush=True)
        figures["restore"] = restore_against_copy(svcd, large_token, large_keys, args.rounds)
        figures["open_zarr archived"] = open_archived(svcd, large_token)
    except BaseException:
        log = data / "svcd.log"
        if log.exists():
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        if svcd:
            svcd.stop()
        shutil.rmtree(run, ignore_errors=True)
    # A virtual machine's idle vCPUs that halt at once make every wake-up across vCPUs (each
    # FUSE round trip has two) cost a trip through the hypervisor: this setting decides much
    # of what a FUSE request costs there, so the figures are labelled with it.
    halt_poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if halt_poll.exists():
        print(f"guest_halt_poll_ns = {halt_poll.read_text().strip()} (idle vCPUs poll this long before halting)")
    print(f"{'measurement':<56} {'figure':>12}  ratio")
    for mode in () if args.only_tier else ("passthrough", "fallback"):
        seq = figures[f"sequential, {mode}"]
        # Without passthrough the daemon maps the chunks it serves, and mapped pages survive
        # drop_caches: the fallback's "cold" reads are not cold, so only warm ones are shown.
        for cache in ("cold", "warm") if mode == "passthrough" else ("warm",):
            mount_rate, direct = seq[f"{cache} mount"], seq[f"{cache} direct"]
            print(f"{'sequential ' + cache + ', mount (' + mode + ')':<56} {mount_rate:>8.0f} MiB/s  {seq[cache + ' ratio']:.2f}x direct (rounds' ratios)")
            print(f"{'sequential ' + cache + ', direct':<56} {direct:>8.0f} MiB/s  (medians of the rounds)")
    if not args.only_tier:
        costs = figures["per file"]
        print(f"{'per chunk file: open+close, mount':<56} {costs['open+close mount']:>8.1f} us     {costs['open+close direct']:.1f} us directly")
        print(f"{'a FUSE round trip that does nothing (statfs)':<56} {costs['round trip']:>8.1f} us")
        # Each chunk file opened through the mount costs at least one round trip (its open):
        # the warm ratio cannot pass what one round trip more per file allows.
        per_file = args.step_mib / figures["sequential, passthrough"]["warm direct"] * 1e6
        ceiling = per_file / (per_file + costs["round trip"])
        print(f"{'warm ratio one round trip per file allows':<56} {ceiling:>8.2f}x    ({per_file:.0f} us per file directly)")
        par, fallback = figures["parallel"], figures["parallel, fallback"]
        for kind, suffix in (("threads", ""), ("processes", ", processes")):
            readers = f"{args.readers} reader {kind}, small chunks, "
            for side in ("mount", "http", "direct") if kind == "threads" else ("mount", "direct"):
                label = "http (python requests)" if side == "http" else side
                rate, direct = par[side + suffix], par["direct" + suffix]
                print(f"{readers + label:<56} {rate:>8.0f} /s     {rate / direct:.2f}x direct")
            rate, direct = fallback["mount" + suffix], fallback["direct" + suffix]
            print(f"{readers + 'mount (fallback)':<56} {rate:>8.0f} /s     {rate / direct:.2f}x direct")
    restore = figures["restore"]
    print(f"{'restore of a blob (' + str(restore['samples']) + ' restores, median)':<56} {restore['restore']:>8.0f} MiB/s  {restore['restore'] / restore['cp']:.2f}x cp")
    print(f"{'cp of its archived object':<56} {restore['cp']:>8.0f} MiB/s")
    print(f"{'a restore in the daemon (its log, median)':<56} {restore['daemon ms']:>8} ms     blobs of {restore['blob MiB']:.0f} MiB (median)")
    opened = figures["open_zarr archived"]
    print(f"{'open_zarr of an archived store (mount)':<56} {opened['seconds'] * 1000:>8.0f} ms     {opened['restores']} restores, {opened['archived']}/{opened['blobs']} blobs archived")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
