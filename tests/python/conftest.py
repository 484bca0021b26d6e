"""Starts a real svcd on a free port with a crawled demo catalogue for the client tests.

The daemon also answers on /api/freva-nextgen (config `http.compat_prefixes`), the prefix
freva-client has hard-coded."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests


class Svcd:
    """A running daemon: its API base URL, host URL, data directory and binary."""

    def __init__(self, base, host, data, binary):
        self.base, self.host, self.data, self.binary = base, host, data, binary

    def token_file(self, path, user, admin=False):
        """Write a freva-client token file for `user` with `svcd token issue`."""
        args = [self.binary, "--data-dir", str(self.data), "token", "issue", f"--user={user}", "--token-file", str(path)]
        result = subprocess.run(args + (["--admin"] if admin else []), capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()


def serve(binary, data, env=None, args=()):
    """Start `svcd serve` on `data` on a free port (with `args`, e.g. `--mount DIR`); return
    the process and its host URL. It leads a process group of its own, which its children
    (probes, conversions' processes) join: `process_group(proc.pid)` lists them."""
    log = open(data / "svcd.log", "w")
    proc = subprocess.Popen([binary, "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0", *args], stderr=log, stdout=log, env=env, process_group=0)
    address = data / "svcd.addr"
    deadline = time.monotonic() + 60
    while not (address.exists() and address.read_text().endswith("\n")):
        assert proc.poll() is None, (data / "svcd.log").read_text()
        assert time.monotonic() < deadline, "svcd did not start"
        time.sleep(0.05)
    return proc, f"http://{address.read_text().strip()}"


def wait_mounted(mountpoint, timeout=30):
    """Wait until `mountpoint` is a mount point (a daemon started with `--mount` mounts it
    after it answers HTTP), at most `timeout` seconds; the callers' checks say if it is not."""
    deadline = time.monotonic() + timeout
    while not os.path.ismount(mountpoint) and time.monotonic() < deadline:
        time.sleep(0.1)


def run_stac_api_validator(root_url, collection):
    """Run stac-api-validator (core, collections, item-search, paging) and assert no errors."""
    validator = Path(sys.executable).parent / "stac-api-validator"
    geometry = '{"type": "Polygon", "coordinates": [[[0, 40], [20, 40], [20, 60], [0, 60], [0, 40]]]}'
    args = [str(validator), "--root-url", root_url, "--collection", collection, "--geometry", geometry, "--validate-pagination"]
    for conformance in ("core", "collections", "item-search"):
        args += ["--conformance", conformance]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent / "stac_offline"))
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Errors: none" in output, output


def open_groups(cat):
    """Open every group of an intake-esm catalogue with to_dataset_dict().

    intake-esm opens groups on a thread pool; xarray's default netCDF4 engine is not safe
    across threads and crashes the interpreter now and then (SIGSEGV or SIGBUS; pydata/xarray
    issue 9779). The h5netcdf engine reads the same NetCDF-4 files through h5py, which
    serialises every HDF5 call, so that is what a threaded client uses."""
    return cat.to_dataset_dict(progressbar=False, xarray_open_kwargs={"engine": "h5netcdf"})


def assert_groups_are_their_files(cat, datasets, variable, sources=None):
    """Every key is opened, and each dataset is its files' `variable` joined along time:
    as many time steps as the files hold, in order, with the files' values. A catalogue of
    Zarr stores locates its rows by `uri`; `sources` maps each to its source file. Its
    datasets hold no NetCDF handles, so the sources are read with netCDF4, which also reads
    NetCDF-3 (h5netcdf does not)."""
    import numpy as np
    import xarray as xr

    assert set(datasets) == set(cat.keys())
    for key, dataset in datasets.items():
        if sources is None:
            files = sorted(cat[key].df["file"])
        else:
            files = sorted(sources[uri] for uri in cat[key].df["uri"])
        assert files, key
        parts = []
        engine = "h5netcdf" if sources is None else "netcdf4"
        for path in files:  # one at a time: see open_groups
            with xr.open_dataset(path, engine=engine) as part:
                parts.append(part[[variable]].load())
        if "time" not in parts[0][variable].dims:
            # A fixed field (orography, a land mask) is one file.
            assert len(parts) == 1, key
            np.testing.assert_array_equal(dataset[variable].values, parts[0][variable].values)
            continue
        expected = xr.concat(parts, dim="time").sortby("time")
        times = dataset["time"].to_index()
        assert times.is_monotonic_increasing and times.is_unique, key
        assert len(times) == sum(part.sizes["time"] for part in parts), key
        np.testing.assert_array_equal(dataset["time"].values, expected["time"].values)
        np.testing.assert_array_equal(dataset[variable].values, expected[variable].values)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    """Yield a running svcd serving the demo data."""
    binary = os.environ.get("SVCD_BIN")
    assert binary, "set SVCD_BIN to the svcd binary"
    data = tmp_path_factory.mktemp("svcd")
    tree = data / "demo"
    run = lambda *args: subprocess.run([binary, "--data-dir", str(data), *args], check=False, capture_output=True, text=True)
    result = run("demo-data", str(tree))
    assert result.returncode == 0, result.stderr
    result = run("index", "crawl", str(tree))
    assert result.returncode == 0, result.stdout + result.stderr
    # Token users have no local account here: they may convert what lies under `data`.
    env = dict(os.environ, SVCD_HTTP_COMPAT_PREFIXES="/api/freva-nextgen", SVCD_STORES_ALLOWED_ROOTS=str(data))
    proc, host = serve(binary, data, env)
    base = f"{host}/api/svc-nextgen"
    assert requests.get(f"{base}/ping", timeout=10).json() == {"ping": "pong"}
    yield Svcd(base, host, data, binary)
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "svcd shut down uncleanly"


@pytest.fixture(scope="session")
def svcd(daemon):
    """The API base URL of the running svcd."""
    return daemon.base
