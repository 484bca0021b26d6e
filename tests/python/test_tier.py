"""The cold tier: `svcd tier archive|restore|status` on a running daemon, stores read through
HTTP and through the FUSE mount before archiving, while archived (opening a store restores
nothing; stat and readdir come from the key listing) and after the restore the first chunk
read triggers; one restore for many concurrent readers of a blob; the ZIPs recoverable with
`unzip`; and `kill -9` of the daemon during archive and restore, after which every key reads
back with its bytes and nothing is left over on either tier.

Blobs are made small with the manifest policy (`SVCD_TIER_T_HOT_BYTES`,
`SVCD_TIER_T_MAX_BYTES`) so that a store of a few MiB has several. Needs root and
/dev/fuse for the mount (as CI runs)."""

import concurrent.futures
import errno
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import requests
import xarray as xr

from conftest import serve, wait_mounted
from test_mount import OTHER, OWNER, as_user, local_user
from test_portal import wait_ready

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="mounting needs root and /dev/fuse")

BINARY = os.environ.get("SVCD_BIN", "svcd")


def tas(steps, lat, lon, seed):
    values = np.random.default_rng(seed).random((steps, lat, lon), dtype="f4")
    return xr.Dataset({"tas": (("time", "lat", "lon"), values, {"units": "K"})},
                      coords={"time": ("time", np.arange(float(steps)), {"units": "days since 2000-01-01"}),
                              "lat": ("lat", np.linspace(-89.0, 89.0, lat)), "lon": ("lon", np.linspace(0.0, 358.0, lon))})


def svcd(data, *args, check=True, input_text=None):
    return subprocess.run([BINARY, "--data-dir", str(data), *args], capture_output=True, text=True, check=check, timeout=600,
                          input=input_text)


def tier_rows(data, token=None):
    scope = ["--scope", token] if token else []
    return [json.loads(line) for line in svcd(data, "tier", "status", "--json", *scope).stdout.splitlines()]


def start(data, sources, mountpoint=None, max_bytes=1_000_000, env=None):
    env = {**os.environ, "SVCD_STORES_ALLOWED_ROOTS": str(sources), "SVCD_TIER_T_HOT_BYTES": "1024",
           "SVCD_TIER_T_MAX_BYTES": str(max_bytes), "SVCD_TIER_MANIFESTS": str(data / "manifests"), **(env or {})}
    (data / "svcd.addr").unlink(missing_ok=True)
    args = ("--mount", str(mountpoint)) if mountpoint else ()
    proc, host = serve(BINARY, data, env=env, args=args)
    if mountpoint:
        wait_mounted(mountpoint)
    return proc, host


def convert(base, headers, path, public=False):
    answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(path)], "public": public}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    assert wait_ready(base, headers, url, timeout=300)["status"] == 0
    return url, url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")


def status(base, headers, url):
    return requests.get(f"{base}/data-portal/zarr-utils/status", params={"url": url}, headers=headers, timeout=10).json()["status"]


def eventually(check, seconds=10):
    """Whether `check()` holds within `seconds`: for what the daemon does just after it
    answers (a restore deletes the blob's cold object after its readers go on)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def chunk_files(data, token):
    root = data / "stores" / token
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    data = tmp_path_factory.mktemp("tier-svcd")
    mountpoint = Path(tempfile.mkdtemp(prefix="svcd-tier-mount-"))
    os.chmod(mountpoint, 0o755)
    sources = Path(tempfile.mkdtemp(prefix="svcd-tier-sources-"))
    os.chmod(sources, 0o755)
    owner, other = local_user(OWNER), local_user(OTHER)
    tas(64, 90, 180, seed=1).to_netcdf(sources / "private.nc")
    tas(32, 45, 90, seed=2).to_netcdf(sources / "public.nc")
    for name in ("private.nc", "public.nc"):
        os.chmod(sources / name, 0o644)
    proc, host = start(data, sources, mountpoint)
    try:
        token = svcd(data, "token", "issue", f"--user={OWNER}").stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        base = f"{host}/api/svc-nextgen"
        stores = {}
        for name, public in (("private", False), ("public", True)):
            url, store = convert(base, headers, sources / f"{name}.nc", public=public)
            directory = mountpoint / f"{store}.zarr"
            keys = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
            served = {}
            for key in keys:
                answer = requests.get(f"{url}/{key}", headers=headers, timeout=10)
                assert answer.status_code == 200, (key, answer.text)
                served[key] = answer.content
            stores[name] = {"url": url, "token": store, "dir": directory, "served": served, "source": sources / f"{name}.nc"}
        yield {"data": data, "base": base, "headers": headers, "stores": stores, "mount": mountpoint, "owner": owner, "other": other}
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        shutil.rmtree(sources, ignore_errors=True)
        if not os.path.ismount(mountpoint):
            os.rmdir(mountpoint)


def test_a_complete_store_is_cut_into_blobs_and_its_manifest_mirrored(tiered):
    store = tiered["stores"]["private"]
    rows = tier_rows(tiered["data"], store["token"])
    assert [r["instance"] for r in rows] == ["b_tas_0", "b_tas_1", "b_tas_2", "b_tas_3"]
    assert all(r["state"] == "hot" for r in rows)
    # Every chunk of tas is in a blob; metadata and coordinates are in none.
    chunks = [k for k in store["served"] if k.startswith("tas/") and not k.split("/")[-1].startswith(".")]
    assert sum(r["objects"] for r in rows) == len(chunks) == 64
    assert sum(r["bytes"] for r in rows) == sum(len(store["served"][k]) for k in chunks)
    mirrored = json.loads((tiered["data"] / "manifests" / store["token"] / "manifest.json").read_text())
    assert mirrored["scope"] == store["token"] and {b["id"] for b in mirrored["blobs"]} == {"b_tas"}
    # The reference tools' resolver, over the mirrored manifest, agrees with the tier.
    resolved = svcd(tiered["data"], "manifest", "resolve", "--data", str(tiered["data"] / "stores"),
                    "--manifests", str(tiered["data"] / "manifests"), f"{store['token']}/tas/17.0.0",
                    f"{store['token']}/lat/0", f"{store['token']}/.zmetadata").stdout
    assert [line.split("  ->  ")[1] for line in resolved.splitlines()] == ["b_tas_1", "hot", "hot"], resolved


def all_hot(data, token):
    svcd(data, "tier", "restore", "--scope", token)
    assert {r["state"] for r in tier_rows(data, token)} == {"hot"}


def all_archived(data, token):
    svcd(data, "tier", "archive", "--scope", token)
    assert {r["state"] for r in tier_rows(data, token)} == {"archived"}


def test_archive_moves_blobs_to_zips_and_every_key_still_reads_the_same(tiered):
    data, headers = tiered["data"], tiered["headers"]
    store = tiered["stores"]["private"]
    all_hot(data, store["token"])
    dry = svcd(data, "tier", "archive", "--scope", store["token"], "--dry-run").stdout
    assert dry.count("would archive") == 4 and len(chunk_files(data, store["token"])) == 64 + 3
    archived = svcd(data, "tier", "archive", "--scope", store["token"])
    assert archived.stdout.count(" archived") == 4, archived.stdout
    assert "4 blobs" in archived.stdout and "0 failed" in archived.stdout
    # Only the coordinates' chunks are left hot; status 3 while archived.
    assert chunk_files(data, store["token"]) == ["lat/0", "lon/0", "time/0"]
    assert status(tiered["base"], headers, store["url"]) == 3
    rows = tier_rows(data, store["token"])
    assert {r["state"] for r in rows} == {"archived"}
    # One object per blob, `<instance>.<archive>.zip`, each as its blob's state names it.
    cold = sorted(p.name for p in (data / "cold" / store["token"]).iterdir())
    assert [name.split(".")[0] for name in cold] == ["b_tas_0", "b_tas_1", "b_tas_2", "b_tas_3"]
    assert all(re.fullmatch(r"b_tas_\d\.[0-9a-f]+\.zip", name) for name in cold), cold
    assert sorted(f"{store['token']}/{name}" for name in cold) == sorted(r["cold_key"] for r in rows)
    # Recoverable without the daemon: a plain ZIP whose members are the keys' bytes.
    zip_path = data / "cold" / store["token"] / cold[1]
    assert subprocess.run(["unzip", "-tq", str(zip_path)], capture_output=True, check=False).returncode == 0
    with zipfile.ZipFile(zip_path) as archive:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
        for name in archive.namelist():
            assert archive.read(name) == store["served"][name], name
    # Listing and stat through the mount come from the key listing: exact, no restore.
    directory = store["dir"]
    listed = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    assert listed == sorted(store["served"])
    for key, content in store["served"].items():
        assert (directory / key).stat().st_size == len(content), key
    assert subprocess.run(["ls", "-lR", str(directory)], capture_output=True, check=True).stdout
    assert tier_rows(data, store["token"]) == rows


def test_opening_an_archived_store_restores_nothing_and_reading_restores_its_blobs(tiered):
    data, store = tiered["data"], tiered["stores"]["private"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    before = {r["instance"]: r["restores"] for r in tier_rows(data, store["token"])}
    opened = xr.open_zarr(store["dir"], consolidated=True, zarr_format=2)
    assert opened["tas"].shape == (64, 90, 180)
    np.testing.assert_array_equal(opened["lat"].values, np.linspace(-89.0, 89.0, 90))
    rows = tier_rows(data, store["token"])
    assert {r["state"] for r in rows} == {"archived"}
    assert {r["instance"]: r["restores"] for r in rows} == before
    # The first chunk read restores its blob alone.
    first = opened["tas"][0].values
    rows = {r["instance"]: r for r in tier_rows(data, store["token"])}
    assert rows["b_tas_0"]["state"] == "hot" and rows["b_tas_0"]["restores"] == before["b_tas_0"] + 1
    assert all(rows[f"b_tas_{n}"]["state"] == "archived" for n in (1, 2, 3))
    expected = xr.open_dataset(store["source"])
    np.testing.assert_array_equal(first, expected["tas"][0].values)
    # Every value as the source has it; every blob restored once.
    xr.testing.assert_equal(opened.load()[["tas"]], expected[["tas"]])
    rows = tier_rows(data, store["token"])
    assert {r["state"] for r in rows} == {"hot"}
    assert {r["instance"]: r["restores"] for r in rows} == {i: n + 1 for i, n in before.items()}
    assert status(tiered["base"], tiered["headers"], store["url"]) == 0
    assert eventually(lambda: not any((data / "cold" / store["token"]).iterdir()))
    assert len(chunk_files(data, store["token"])) == 64 + 3


def test_cat_through_the_mount_gives_the_bytes_http_gave_and_restores(tiered):
    data, store = tiered["data"], tiered["stores"]["public"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    for key, content in store["served"].items():
        read = subprocess.run(["cat", str(store["dir"] / key)], capture_output=True, check=True).stdout
        assert read == content, key
    assert {r["state"] for r in tier_rows(data, store["token"])} == {"hot"}


def test_an_open_hot_chunk_is_read_by_the_kernel_from_the_hot_tier(tiered):
    """Passthrough: a chunk opened while hot is read from its hot copy by the kernel, not
    through the daemon. Archiving unlinks the hot copy; the open file still reads its bytes,
    and no restore happens (a read through the daemon would restore the blob)."""
    data, store = tiered["data"], tiered["stores"]["private"]
    all_hot(data, store["token"])
    key = "tas/63.0.0"
    with open(store["dir"] / key, "rb", buffering=0) as held:
        svcd(data, "tier", "archive", "--scope", store["token"])
        assert not (data / "stores" / store["token"] / key).exists()
        assert held.read() == store["served"][key]
    rows = {r["instance"]: r for r in tier_rows(data, store["token"])}
    assert rows["b_tas_3"]["state"] == "archived", rows
    svcd(data, "tier", "restore", "--scope", store["token"])


def test_a_chunk_read_while_hot_is_read_from_the_cold_tier_once_archived(tiered):
    """A chunk read (twice) and closed through the mount while hot, then archived, is read
    from the cold tier: the next read restores its blob. Nothing the mount keeps of the
    deleted hot copy (such as a backing file kept registered between opens) may serve it."""
    data, store = tiered["data"], tiered["stores"]["private"]
    all_hot(data, store["token"])
    key = "tas/62.0.0"
    for _ in range(2):
        assert (store["dir"] / key).read_bytes() == store["served"][key]
    before = {r["instance"]: r["restores"] for r in tier_rows(data, store["token"])}
    all_archived(data, store["token"])
    assert not (data / "stores" / store["token"] / key).exists()
    assert (store["dir"] / key).read_bytes() == store["served"][key]
    rows = {r["instance"]: r for r in tier_rows(data, store["token"])}
    assert rows["b_tas_3"]["state"] == "hot", rows
    assert rows["b_tas_3"]["restores"] == before["b_tas_3"] + 1, rows
    assert (data / "stores" / store["token"] / key).exists()
    all_hot(data, store["token"])


def test_a_chunk_open_while_archived_and_again_once_restored_reads_both_ways(tiered):
    """The kernel refuses one inode open both through the daemon and by passthrough: a
    chunk opened while archived (read through the daemon, which restores it) and opened again
    while that handle is open (now hot) must read, and so must a chunk held open by
    passthrough once archiving has unlinked its hot copy."""
    data, store = tiered["data"], tiered["stores"]["private"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    key = "tas/20.0.0"
    with open(store["dir"] / key, "rb", buffering=0) as first:
        assert first.read() == store["served"][key]
        assert (data / "stores" / store["token"] / key).exists()
        with open(store["dir"] / key, "rb", buffering=0) as second:
            assert second.read() == store["served"][key]
    all_hot(data, store["token"])
    key = "tas/40.0.0"
    with open(store["dir"] / key, "rb", buffering=0) as held:
        all_archived(data, store["token"])
        with open(store["dir"] / key, "rb", buffering=0) as again:
            assert again.read() == store["served"][key]
        assert held.read() == store["served"][key]
    assert tier_rows(data, store["token"])[2]["state"] == "archived"
    all_hot(data, store["token"])


def test_a_store_has_one_name_in_the_mount(tiered):
    store = tiered["stores"]["public"]
    token = store["token"]
    assert store["dir"].is_dir()
    for other in (token.upper(), token.replace("-", ""), "{" + token + "}", "urn:uuid:" + token):
        assert not (tiered["mount"] / f"{other}.zarr").exists(), other


def test_the_mount_reads_the_same_after_the_kernel_forgets_its_inodes(tiered):
    """Dropping the kernel's dentries and inodes makes it forget the mount's inodes; the
    tree drops what it made below each store, and builds it again on the next lookup."""
    data, store = tiered["data"], tiered["stores"]["public"]
    all_hot(data, store["token"])
    for round in range(2):
        listed = sorted(str(p.relative_to(store["dir"])) for p in store["dir"].rglob("*") if p.is_file())
        assert listed == sorted(store["served"]), round
        for key, content in store["served"].items():
            assert (store["dir"] / key).read_bytes() == content, (round, key)
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("2\n")


def test_many_concurrent_readers_of_an_archived_blob_cause_one_restore(tiered):
    data, headers = tiered["data"], tiered["headers"]
    store = tiered["stores"]["private"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    before = {r["instance"]: r["restores"] for r in tier_rows(data, store["token"])}
    # b_tas_2 holds time steps 32..47: half the readers through HTTP, half through the mount.
    keys = [f"tas/{step}.0.0" for step in range(32, 48)]

    def read(index):
        key = keys[index % len(keys)]
        if index % 2:
            return key, requests.get(f"{store['url']}/{key}", headers=headers, timeout=60).content
        return key, (store["dir"] / key).read_bytes()

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(read, range(32)))
    for key, content in results:
        assert content == store["served"][key], key
    after = {r["instance"]: r for r in tier_rows(data, store["token"])}
    assert after["b_tas_2"]["restores"] == before["b_tas_2"] + 1
    assert after["b_tas_2"]["state"] == "hot"
    assert {after[i]["state"] for i in ("b_tas_0", "b_tas_1", "b_tas_3")} == {"archived"}
    # `svcd tier restore` brings back the rest ahead of reads.
    restored = svcd(data, "tier", "restore", "--scope", store["token"]).stdout
    assert restored.count(" restored") == 3, restored
    assert {r["state"] for r in tier_rows(data, store["token"])} == {"hot"}


def test_another_user_cannot_read_an_archived_private_store_nor_restore_it(tiered):
    data, store = tiered["data"], tiered["stores"]["private"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    before = tier_rows(data, store["token"])
    denied = as_user(tiered["other"], "cat", str(store["dir"] / "tas" / "0.0.0"))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    stranger = svcd(data, "token", "issue", "--user=stranger").stdout.strip()
    answer = requests.get(f"{store['url']}/tas/0.0.0", headers={"Authorization": f"Bearer {stranger}"}, timeout=10)
    assert answer.status_code == 404
    assert requests.get(f"{store['url']}/tas/0.0.0", timeout=10).status_code == 401
    # Refused before the read path: nothing was restored.
    assert tier_rows(data, store["token"]) == before
    owner = subprocess.run(["setpriv", f"--reuid={tiered['owner'].pw_uid}", f"--regid={tiered['owner'].pw_gid}", "--clear-groups",
                            "cat", str(store["dir"] / "tas" / "0.0.0")], capture_output=True, check=False)
    assert owner.returncode == 0 and owner.stdout == store["served"]["tas/0.0.0"]


def test_a_store_converted_again_drops_its_archived_blobs(tiered):
    data, headers, base = tiered["data"], tiered["headers"], tiered["base"]
    store = tiered["stores"]["public"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    assert any((data / "cold" / store["token"]).iterdir())
    answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(store["source"])], "public": True, "reload": True}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert wait_ready(base, headers, store["url"], timeout=120)["status"] == 0
    assert not (data / "cold" / store["token"]).exists() or not any((data / "cold" / store["token"]).iterdir())
    assert {r["state"] for r in tier_rows(data, store["token"])} == {"hot"}
    for key, content in store["served"].items():
        if not key.startswith("."):
            assert requests.get(f"{store['url']}/{key}", headers=headers, timeout=10).content == content, key


def test_a_pin_in_the_mirrored_manifest_keeps_its_keys_hot(tiered):
    data, store = tiered["data"], tiered["stores"]["private"]
    all_hot(data, store["token"])
    manifests = ["--data", str(data / "stores"), "--manifests", str(data / "manifests")]
    svcd(data, "manifest", *manifests, "pin", "add", "--reason", "paper revision", store["token"], "tas")
    try:
        archived = svcd(data, "tier", "archive", "--scope", store["token"]).stdout
        assert "0 blobs" in archived, archived
        assert len(chunk_files(data, store["token"])) == 64 + 3
        assert {r["state"] for r in tier_rows(data, store["token"])} <= {"hot"}
    finally:
        svcd(data, "manifest", *manifests, "pin", "remove", store["token"], "tas")
    archived = svcd(data, "tier", "archive", "--scope", store["token"]).stdout
    assert archived.count(" archived") == 4, archived
    all_hot(data, store["token"])


def test_another_database_on_the_same_cold_tier_leaves_its_objects_alone(tiered, tmp_path):
    data, store = tiered["data"], tiered["stores"]["public"]
    all_hot(data, store["token"])
    all_archived(data, store["token"])
    cold = sorted(p.name for p in (data / "cold" / store["token"]).iterdir())
    assert cold
    env = dict(os.environ, SVCD_TIER_COLD=str(data / "cold"))
    other = subprocess.run([BINARY, "--data-dir", str(tmp_path / "other"), "tier", "status"], capture_output=True, text=True, env=env, check=False)
    assert other.returncode == 0, other.stderr
    assert sorted(p.name for p in (data / "cold" / store["token"]).iterdir()) == cold
    # The mirror of manifests may not be the cold tier.
    env = dict(os.environ, SVCD_TIER_MANIFESTS=str(data / "cold"))
    refused = subprocess.run([BINARY, "--data-dir", str(data), "tier", "status"], capture_output=True, text=True, env=env, check=False)
    assert refused.returncode != 0 and "tier.manifests must not be the cold tier" in refused.stderr
    all_hot(data, store["token"])


# ---- crash safety ------------------------------------------------------------------------


def leftovers(data):
    """Files no record names: staging, partial restores, interrupted cold writes."""
    found = [str(p) for p in (data / "stores").rglob("*.partial")]
    found += [str(p) for p in (data / "cold").rglob("*") if "#" in p.name]
    staging = data / "staging"
    if staging.exists():
        found += [str(p) for p in staging.rglob("*") if p.is_file()]
    return found


def check_after_crash(data, headers, url, token, served):
    """After a restart: nothing left over, every cold object named by an archived blob, no
    hot copy missing unless its blob is archived, and every key reads back its bytes."""
    assert leftovers(data) == []
    rows = tier_rows(data, token)
    assert {r["state"] for r in rows} <= {"hot", "archived"}, rows
    archived = {r["cold_key"] for r in rows if r["state"] == "archived"}
    cold = {str(p.relative_to(data / "cold")) for p in (data / "cold").rglob("*") if p.is_file()}
    assert cold == archived, (cold, archived)
    hot_blobs = {r["instance"] for r in rows if r["state"] == "hot"}
    if hot_blobs == {r["instance"] for r in rows}:
        assert len(chunk_files(data, token)) == len([k for k in served if not k.split("/")[-1].startswith(".")])
    for key, content in served.items():
        answer = requests.get(f"{url}/{key}", headers=headers, timeout=120)
        assert answer.status_code == 200 and answer.content == content, key


def kill_when(proc, ready, what, timeout=60):
    """Kill `proc` as soon as `ready()` holds. Polled without pause: some moments last a few
    milliseconds (a restored blob's sync and record before its cold object goes)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"the moment to kill ({what}) never came"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


class NoiseStore:
    """A daemon on a fresh data directory with one store of `steps` time steps of 512 x 512
    float32 noise (1 MiB each) in blobs of about `max_bytes`; `served` holds every key's
    bytes as HTTP gave them before anything was archived. A context manager: leaving it
    stops the daemon that runs and removes the source."""

    def __init__(self, tmp_path, steps, seed, max_bytes, env=None, mount=None):
        self.env = env
        self.mount = mount
        self.data = tmp_path / "data"
        self.data.mkdir()
        self.sources = Path(tempfile.mkdtemp(prefix="svcd-tier-noise-"))
        os.chmod(self.sources, 0o755)
        self.max_bytes = max_bytes
        self.proc = None
        self.url = None
        try:
            tas(steps, 512, 512, seed=seed).to_netcdf(self.sources / "noise.nc")
            os.chmod(self.sources / "noise.nc", 0o644)
            self.start()
            token = svcd(self.data, "token", "issue", "--user=noise").stdout.strip()
            self.headers = {"Authorization": f"Bearer {token}"}
            self.url, self.store = convert(f"{self.host}/api/svc-nextgen", self.headers, self.sources / "noise.nc")
            meta = requests.get(f"{self.url}/.zmetadata", headers=self.headers, timeout=10).json()["metadata"]
            keys = [k for k in meta] + [".zmetadata"] + chunk_files(self.data, self.store)
            self.served = {k: requests.get(f"{self.url}/{k}", headers=self.headers, timeout=30).content for k in keys}
        except BaseException:
            self.__exit__()
            raise

    def start(self):
        """Starts the daemon (again)."""
        self.proc, self.host = start(self.data, self.sources, self.mount, max_bytes=self.max_bytes, env=self.env)
        if self.url:
            self.url = self.url.replace(self.url.split("/api/")[0], self.host)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.mount is not None:
            # A killed daemon's mount answers "not connected" (not a mount to ismount).
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True, check=False)
        shutil.rmtree(self.sources, ignore_errors=True)


def test_a_removed_store_leaves_nothing_on_either_tier_nor_in_the_mirror(tmp_path):
    with NoiseStore(tmp_path, 4, seed=10, max_bytes=1 << 20) as noise:
        data, store = noise.data, noise.store
        svcd(data, "tier", "archive", "--scope", store)
        mirrored = data / "manifests" / store / "manifest.json"
        cold = data / "cold" / store
        assert mirrored.exists() and any(cold.iterdir())
        svcd(data, "store", "rm", store)
        assert requests.get(f"{noise.url}/.zmetadata", headers=noise.headers, timeout=10).status_code == 404
        assert eventually(lambda: not (data / "stores" / store).exists())
        assert eventually(lambda: not mirrored.exists())
        assert not cold.exists() or not any(cold.iterdir())
        assert tier_rows(data, store) == []


def test_a_removed_stores_manifest_the_mirror_refuses_to_delete_is_deleted_when_asked_again(tmp_path):
    with NoiseStore(tmp_path, 2, seed=12, max_bytes=1 << 20) as noise:
        data, store = noise.data, noise.store
        mirrored = data / "manifests" / store / "manifest.json"
        hot = data / "stores" / store
        assert mirrored.is_file()
        # The mirror refuses the deletion: a directory, not empty, stands at its key.
        mirrored.unlink()
        (mirrored / "held").mkdir(parents=True)
        svcd(data, "store", "rm", store)
        # The data goes; the store's directory stays, empty, for the deletion to be tried again.
        assert eventually(lambda: hot.exists() and not any(hot.iterdir()))
        # Reported as the deletion ends, which may be just after the data is gone.
        assert eventually(lambda: "cannot delete the mirrored manifest" in (data / "svcd.log").read_text())
        assert tier_rows(data, store) == []
        # The mirror lets it go: asked again (here by the operator; else by the hourly sweep).
        shutil.rmtree(mirrored)
        mirrored.write_text("{}")
        svcd(data, "store", "rm", store)
        assert eventually(lambda: not hot.exists() and not mirrored.exists())


def test_kill_9_during_archive_and_restore_loses_nothing_and_leaves_nothing(tmp_path):
    # 96 MiB of noise in blobs of about 16 MiB: each archive and restore takes a while.
    with NoiseStore(tmp_path, 96, seed=3, max_bytes=16 << 20) as noise:
        data, store = noise.data, noise.store
        assert len(tier_rows(data, store)) >= 4
        # A blob is packed straight into its cold object (written as `<object>#<n>`, renamed
        # once whole).
        moments = [
            ("while packing into the cold object", lambda: any("#" in p.name for p in (data / "cold").rglob("*"))),
            ("after the first blob is archived", lambda: any(p.suffix == ".zip" for p in (data / "cold").rglob("*"))),
        ]

        def crash_during(command, what, moment):
            """Kill the daemon at `moment` of `svcd tier <command>`, start it again, check."""
            running = subprocess.Popen([BINARY, "--data-dir", str(data), "tier", command, "--scope", store], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            kill_when(noise.proc, moment, what)
            running.wait(timeout=60)
            noise.start()
            check_after_crash(data, noise.headers, noise.url, store, noise.served)

        for what, moment in moments:
            crash_during("archive", what, moment)
        # Restores: archive everything, then kill while `svcd tier restore` (in the daemon)
        # fetches a blob, and while it unpacks one (some of a blob's files are there).
        width = next(r["objects"] for r in tier_rows(data, store) if r["instance"] == "b_tas_0")
        tas_dir = data / "stores" / store / "tas"
        cold_dir = data / "cold" / store

        def hot_chunks():
            return len([p for p in tas_dir.iterdir() if not p.name.startswith(".")])

        def between_unpacked_and_deleted():
            n = hot_chunks()
            return n > 0 and n % width == 0 and any(cold_dir.glob(f"b_tas_{n // width - 1}.*.zip"))

        moments = [
            ("while unpacking", lambda: any(p.name.endswith(".partial") for p in tas_dir.iterdir())),
            ("before the cold object is deleted", between_unpacked_and_deleted),
        ]
        for what, moment in moments:
            svcd(data, "tier", "archive", "--scope", store)
            assert {r["state"] for r in tier_rows(data, store)} == {"archived"}
            crash_during("restore", what, moment)
        noise.stop()


def test_archive_and_restore_without_a_running_daemon(tmp_path):
    """`svcd tier archive` and `restore` work on the database directly when no daemon runs,
    with blobs of several upload parts (8 MiB each), and the store reads back the same."""
    with NoiseStore(tmp_path, 48, seed=4, max_bytes=24 << 20) as noise:
        data, store = noise.data, noise.store
        noise.stop()
        archived = svcd(data, "tier", "archive", "--scope", store)
        rows = tier_rows(data, store)
        assert len(rows) >= 2 and {r["state"] for r in rows} == {"archived"}, (archived.stderr, rows)
        assert all(r["bytes"] > 16 << 20 for r in rows), rows
        for row in rows:
            zipped = data / "cold" / row["cold_key"]
            assert subprocess.run(["unzip", "-tq", str(zipped)], capture_output=True).returncode == 0
        assert [k for k in chunk_files(data, store) if k.startswith("tas/")] == []
        svcd(data, "tier", "restore", "--scope", store)
        assert {r["state"] for r in tier_rows(data, store)} == {"hot"}
        assert not any(p.is_file() for p in (data / "cold").rglob("*"))
        noise.start()
        for key, content in noise.served.items():
            answer = requests.get(f"{noise.url}/{key}", headers=noise.headers, timeout=60)
            assert answer.status_code == 200 and answer.content == content, key


def test_a_database_restored_from_a_backup_finds_what_was_archived_since(tmp_path):
    """A database restored from a backup made before an archive records the blobs hot,
    while their keys are only on the cold tier. Put back alone, the next start sees it is
    older than the last archive (the tier clock beside it) and adopts the blobs' objects;
    put back with the clock (a whole data directory restored), `svcd tier repair` does
    (until then its keys answer 503, not 404). Every key then reads back the same. The repair refuses while a daemon serves the data
    directory."""
    with NoiseStore(tmp_path, 40, seed=6, max_bytes=20 << 20) as noise:
        data, store = noise.data, noise.store
        refused = svcd(data, "tier", "repair", check=False)
        assert refused.returncode != 0 and "stop it first" in refused.stderr, refused.stderr
        noise.stop()
        shutil.copytree(data / "db", tmp_path / "backup")
        assert not (data / "tier-clock").exists()
        svcd(data, "tier", "archive", "--scope", store)
        archived = {r["instance"] for r in tier_rows(data, store) if r["state"] == "archived"}
        assert archived, tier_rows(data, store)

        def put_back_the_backup():
            shutil.rmtree(data / "db")
            shutil.copytree(tmp_path / "backup", data / "db")

        put_back_the_backup()
        assert {r["instance"] for r in tier_rows(data, store) if r["state"] == "archived"} == archived
        put_back_the_backup()
        (data / "tier-clock").unlink()
        assert {r["state"] for r in tier_rows(data, store)} == {"hot"}
        # Until the repair: its keys are not "missing" (readers would take the fill value).
        gone = next(k for k in noise.served if k.startswith("tas/") and not (data / "stores" / store / k).exists())
        noise.start()
        answer = requests.get(f"{noise.url}/{gone}", headers=noise.headers, timeout=60)
        assert answer.status_code == 503 and "svcd tier repair" in answer.json()["detail"], answer.text
        noise.stop()
        repaired = svcd(data, "tier", "repair")
        assert "cleaned the cold tier of every store" in repaired.stdout, repaired.stderr
        assert {r["instance"] for r in tier_rows(data, store) if r["state"] == "archived"} == archived
        noise.start()
        for key, content in noise.served.items():
            answer = requests.get(f"{noise.url}/{key}", headers=noise.headers, timeout=60)
            assert answer.status_code == 200 and answer.content == content, key


@pytest.fixture()
def s3():
    """An S3 server (moto's, in this process) on a free port: its endpoint, and a boto3
    client of it."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="svcd", aws_secret_access_key="svcd-secret")
    try:
        yield endpoint, client
    finally:
        server.stop()


def test_a_cold_tier_on_s3(tmp_path, s3):
    """With `tier.cold` and `tier.manifests` on S3: blobs are archived as ZIP objects of
    several parts there, a read restores its blob from there leaving no object, upload or
    staged file behind, and a missing object fails the read with 503, naming the blob."""
    endpoint, client = s3
    client.create_bucket(Bucket="cold")
    client.create_bucket(Bucket="manifests")
    env = {"SVCD_TIER_COLD": "s3://cold/tier", "SVCD_TIER_MANIFESTS": "s3://manifests", "AWS_ENDPOINT": endpoint,
           "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "svcd", "AWS_SECRET_ACCESS_KEY": "svcd-secret",
           "AWS_REGION": "us-east-1"}
    with NoiseStore(tmp_path, 40, seed=5, max_bytes=20 << 20, env=env) as noise:
        data, store, headers = noise.data, noise.store, noise.headers

        def objects(bucket, prefix=""):
            listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
            return {o["Key"]: o["Size"] for o in listed}

        assert f"{store}/manifest.json" in objects("manifests")
        archived = svcd(data, "tier", "archive", "--scope", store)
        rows = tier_rows(data, store)
        assert len(rows) == 2 and {r["state"] for r in rows} == {"archived"}, (archived.stderr, rows)
        assert objects("cold") == {f"tier/{r['cold_key']}": r["cold_bytes"] for r in rows}
        assert all(r["cold_bytes"] > 8 << 20 for r in rows), rows  # uploads of several 8 MiB parts
        assert not (data / "cold").exists() or not any((data / "cold").rglob("*"))
        # An object is a ZIP of the blob's keys, with the bytes HTTP served.
        first = rows[0]
        body = client.get_object(Bucket="cold", Key=f"tier/{first['cold_key']}")["Body"].read()
        with zipfile.ZipFile(io.BytesIO(body)) as packed:
            assert packed.testzip() is None
            assert len(packed.namelist()) == first["objects"]
            for name in packed.namelist():
                assert packed.read(name) == noise.served[name]
        # A read restores its blob from S3, and only that one.
        chunks = [k for k in noise.served if k.startswith("tas/") and not k.endswith((".zarray", ".zattrs"))]
        key = chunks[0]
        answer = requests.get(f"{noise.url}/{key}", headers=headers, timeout=60)
        assert answer.status_code == 200 and answer.content == noise.served[key]
        rows = {r["instance"]: r for r in tier_rows(data, store)}
        assert sorted(r["state"] for r in rows.values()) == ["archived", "hot"]
        hot = next(r for r in rows.values() if r["state"] == "hot")
        assert hot["restores"] == 1
        archived_row = next(r for r in rows.values() if r["state"] == "archived")
        assert eventually(lambda: objects("cold") == {f"tier/{archived_row['cold_key']}": archived_row["cold_bytes"]})
        # The other blob's object gone from S3: its keys cannot be read, and say why.
        client.delete_object(Bucket="cold", Key=f"tier/{archived_row['cold_key']}")
        on_hot_tier = set(chunk_files(data, store))
        other = next(k for k in chunks if k not in on_hot_tier)
        failed = requests.get(f"{noise.url}/{other}", headers=headers, timeout=60)
        assert failed.status_code == 503 and "Retry-After" in failed.headers, failed.text
        assert archived_row["instance"] in failed.json()["detail"], failed.text
        assert objects("cold") == {}
        assert client.list_multipart_uploads(Bucket="cold").get("Uploads", []) == []
        assert leftovers(data) == []


def test_an_archive_run_stops_when_its_operator_goes(tmp_path, s3):
    """Interrupting `svcd tier archive` against a running daemon stops the daemon's run
    after the blob under way (it does not archive the rest on its own), and loses nothing:
    every blob is hot or archived, and every key reads back the same."""
    endpoint, client = s3
    client.create_bucket(Bucket="cold")
    env = {"SVCD_TIER_COLD": "s3://cold", "AWS_ENDPOINT": endpoint, "AWS_ALLOW_HTTP": "true",
           "AWS_ACCESS_KEY_ID": "svcd", "AWS_SECRET_ACCESS_KEY": "svcd-secret", "AWS_REGION": "us-east-1"}
    with NoiseStore(tmp_path, 48, seed=8, max_bytes=1 << 20, env=env) as noise:
        data, store = noise.data, noise.store
        total = len(tier_rows(data, store))
        assert total >= 24

        def archived():
            return sum(r["state"] != "hot" for r in tier_rows(data, store))

        run = subprocess.Popen([BINARY, "--data-dir", str(data), "tier", "archive", "--scope", store],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while archived() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        run.send_signal(signal.SIGINT)
        run.wait(timeout=30)
        # The blob under way finishes; then nothing more is archived.
        stopped, deadline = archived(), time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(3)
            if (now := archived()) == stopped:
                break
            stopped = now
        time.sleep(3)
        assert archived() == stopped < total, (stopped, total)
        assert {r["state"] for r in tier_rows(data, store)} <= {"hot", "archived"}
        for key, content in noise.served.items():
            answer = requests.get(f"{noise.url}/{key}", headers=noise.headers, timeout=60)
            assert answer.status_code == 200 and answer.content == content, key


class Switch:
    """A TCP proxy to `port` on this host that can fall silent: from `silence()` on, it takes
    every request (on connections old and new) and answers nothing, as a stalled gateway
    does."""

    def __init__(self, port):
        self.target = port
        self.silent = threading.Event()
        self.held = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def silence(self):
        self.silent.set()

    def speak(self):
        self.silent.clear()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        """Closes the listener and every connection (the threads that served them end at
        their next read)."""
        self.listener.close()
        for held in self.held:
            held.close()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(client)
            if self.silent.is_set():
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.held.append(upstream)
            threading.Thread(target=self.pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client), daemon=True).start()

    def pump(self, source, sink):
        try:
            while data := source.recv(1 << 16):
                if not self.silent.is_set():
                    sink.sendall(data)
            if not self.silent.is_set():
                sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.mark.parametrize("passthrough", ["true", "false"])
def test_a_cold_tier_that_never_answers_fails_reads_after_their_timeout(tmp_path, s3, passthrough):
    """A restore from a cold tier that stops answering holds no reader past its bound: every
    read through the mount of an archived chunk fails with EIO within
    `mount.read_timeout_seconds` of being asked, those beyond the 16 of the mount's threads
    for waiting reads one user may hold (which wait for a thread first) too, while lookups, metadata reads and reads of hot
    chunks go on (through the daemon too, without passthrough); HTTP answers 503 with
    Retry-After."""
    endpoint, client = s3
    client.create_bucket(Bucket="cold")
    mountpoint = tmp_path / "mount"
    mountpoint.mkdir()
    timeout = 5
    with Switch(int(endpoint.rsplit(":", 1)[1])) as gateway, NoiseStore(
            tmp_path, 48, seed=6, max_bytes=16 << 20, mount=mountpoint,
            env={"SVCD_TIER_COLD": "s3://cold", "AWS_ENDPOINT": f"http://127.0.0.1:{gateway.port}",
                 "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "svcd", "AWS_SECRET_ACCESS_KEY": "svcd-secret",
                 "AWS_REGION": "us-east-1", "SVCD_MOUNT_READ_TIMEOUT_SECONDS": str(timeout),
                 "SVCD_MOUNT_PASSTHROUGH": passthrough}) as noise:
        data, store = noise.data, noise.store
        chunks = [k for k in chunk_files(data, store) if k.startswith("tas/")]
        assert len(chunks) == 48
        svcd(data, "tier", "archive", "--scope", store)
        assert {r["state"] for r in tier_rows(data, store)} == {"archived"}
        gateway.silence()
        directory = mountpoint / f"{store}.zarr"

        def read(key):
            asked = time.monotonic()
            try:
                (directory / key).read_bytes()
                return "read", time.monotonic() - asked
            except OSError as e:
                return errno.errorcode.get(e.errno, str(e.errno)), time.monotonic() - asked

        with concurrent.futures.ThreadPoolExecutor(len(chunks)) as pool:
            reads = [pool.submit(read, key) for key in chunks]
            time.sleep(0.5)
            # Lookups and metadata reads are answered meanwhile, at once.
            started = time.monotonic()
            assert json.loads((directory / ".zmetadata").read_bytes())["metadata"]
            assert (directory / "lat" / "0").read_bytes() == noise.served["lat/0"]
            assert time.monotonic() - started < timeout / 2
            answer = requests.get(f"{noise.url}/{chunks[0]}", params={"timeout": 1}, headers=noise.headers, timeout=30)
            assert answer.status_code == 503 and "Retry-After" in answer.headers, answer.text
            outcomes = [r.result() for r in reads]
        assert {outcome for outcome, _ in outcomes} == {"EIO"}, outcomes
        # Asked at once, all fail after one bound: not before it, and not after two, for the
        # 32 that waited for a reader thread (give or take the machine's scheduling).
        seconds = sorted(seconds for _, seconds in outcomes)
        assert 0.8 * timeout < seconds[0] and seconds[-1] < timeout + 2, seconds
        assert {r["state"] for r in tier_rows(data, store)} <= {"archived", "restoring"}
        # A start while the cold tier does not answer is not held up by it (the repair lists
        # the store, marked by the archive, waits its 10 s, and leaves the rest to the next
        # start), and loses nothing.
        noise.stop()
        started = time.monotonic()
        noise.start()
        assert time.monotonic() - started < 40
        assert {r["state"] for r in tier_rows(data, store)} == {"archived"}
        gateway.speak()
        answer = requests.get(f"{noise.url}/{chunks[0]}", headers=noise.headers, timeout=120)
        assert answer.status_code == 200 and answer.content == noise.served[chunks[0]]


def restore_threads(pid):
    """The daemon's threads that run restores (`tier-restore-N`)."""
    tasks = Path(f"/proc/{pid}/task")
    return [t for t in tasks.iterdir() if (t / "comm").read_text().startswith("tier-restore")]


def test_one_users_reads_stalled_on_the_cold_tier_hold_up_no_other_users(tmp_path):
    """A job reading many archived chunks of a store whose cold objects stall (here: each is
    a FIFO nobody writes, so its restore waits in `open`) holds at most half of the mount's
    threads for waiting reads and half of the restores (`tier.max_restores`, 8): another
    local user's read of another store's archived chunk is answered at once, through the
    mount, and so is an anonymous one over HTTP; once the cold objects are back, every key
    reads as before."""
    mountpoint = Path(tempfile.mkdtemp(prefix="svcd-tier-fair-"))
    os.chmod(mountpoint, 0o755)
    try:
        other = local_user(OTHER)
        timeout = 60
        with NoiseStore(tmp_path, 40, seed=7, max_bytes=1 << 20, mount=mountpoint,
                        env={"SVCD_MOUNT_READ_TIMEOUT_SECONDS": str(timeout)}) as noise:
            data, stalled = noise.data, noise.store
            tas(4, 512, 512, seed=8).to_netcdf(noise.sources / "quick.nc")
            os.chmod(noise.sources / "quick.nc", 0o644)
            base = noise.url.split("/data-portal/")[0]
            quick_url, quick = convert(base, noise.headers, noise.sources / "quick.nc", public=True)
            quick_chunks = [k for k in chunk_files(data, quick) if k.startswith("tas/")]
            quick_served = {k: requests.get(f"{quick_url}/{k}", headers=noise.headers, timeout=30).content for k in quick_chunks}
            svcd(data, "tier", "archive")
            assert {r["state"] for r in tier_rows(data)} == {"archived"}
            assert len(tier_rows(data, stalled)) >= 32 and len(tier_rows(data, quick)) >= 2
            objects = sorted((data / "cold" / stalled).rglob("*.zip"))
            for cold in objects:
                cold.rename(cold.with_suffix(".kept"))
                os.mkfifo(cold)
            chunks = [k for k in noise.served if k.startswith("tas/") and not k.startswith("tas/.")]
            assert len(chunks) == 40
            directory = mountpoint / f"{stalled}.zarr"

            def read(key):
                asked = time.monotonic()
                try:
                    return (directory / key).read_bytes() == noise.served[key], time.monotonic() - asked
                except OSError as e:
                    return errno.errorcode.get(e.errno, str(e.errno)), time.monotonic() - asked

            with concurrent.futures.ThreadPoolExecutor(len(chunks)) as pool:
                reads = [pool.submit(read, key) for key in chunks]
                def restoring():
                    return sum(r["state"] == "restoring" for r in tier_rows(data, stalled))

                # One user's 40 reads run half of the 8 restores at once, whatever they wait for.
                assert eventually(lambda: restoring() >= 4)
                time.sleep(1)
                assert restoring() == 4 and len(restore_threads(noise.proc.pid)) <= 8
                # Another user's read of another store's archived chunk, through the mount and
                # over HTTP, is answered at once.
                started = time.monotonic()
                key = quick_chunks[0]
                got = as_user(other, "sha256sum", str(mountpoint / f"{quick}.zarr" / key))
                assert got.returncode == 0, got.stderr
                assert got.stdout.split()[0] == hashlib.sha256(quick_served[key]).hexdigest()
                key = quick_chunks[-1]
                answer = requests.get(f"{quick_url}/{key}", params={"timeout": 20}, timeout=30)
                assert answer.status_code == 200 and answer.content == quick_served[key], answer.text
                assert time.monotonic() - started < timeout / 3
                assert not any(r.done() for r in reads), "the stalled store's reads waited"
                # The cold objects come back: a restore that opened its FIFO reads it empty and
                # fails (its readers get EIO), the others restore. (Opened read-write, a FIFO
                # opens at once, and lets a restore blocked opening it go on.)
                for cold in objects:
                    writer = os.open(cold, os.O_RDWR)
                    cold.with_suffix(".kept").rename(cold)
                    os.close(writer)
                outcomes = [r.result(timeout=timeout + 30) for r in reads]
            assert {outcome for outcome, _ in outcomes} <= {True, "EIO"}, outcomes
            assert all(seconds < timeout + 10 for _, seconds in outcomes), outcomes
            for key in chunks:
                answer = requests.get(f"{noise.url}/{key}", headers=noise.headers, timeout=120)
                assert answer.status_code == 200 and answer.content == noise.served[key], key
    finally:
        if not os.path.ismount(mountpoint):
            os.rmdir(mountpoint)


def test_a_reader_joining_another_readers_queued_restore_waits_in_its_own_turn(tmp_path):
    """One reader (root, through the mount) holds its half of the restores with four that
    stall (their cold objects are FIFOs nobody writes) and has a fifth queued behind them.
    Another reader (the owner, over HTTP) asks for a key of that fifth blob: it joins the
    restore, which is queued in its own turn too and runs there, so it is answered at once
    rather than after the first reader's stalled restores."""
    mountpoint = tmp_path / "mount"
    mountpoint.mkdir()
    with NoiseStore(tmp_path, 8, seed=11, max_bytes=1 << 20, mount=mountpoint,
                    env={"SVCD_MOUNT_READ_TIMEOUT_SECONDS": "60"}) as noise:
        data, store = noise.data, noise.store
        chunks = [k for k in noise.served if k.startswith("tas/") and not k.startswith("tas/.")]
        resolved = svcd(data, "manifest", "resolve", "--data", str(data / "stores"), "--manifests", str(data / "manifests"),
                        "-", input_text="\n".join(f"{store}/{k}" for k in chunks)).stdout
        key_of = {}
        for line in resolved.splitlines():
            key, instance = line.split("  ->  ")
            key_of.setdefault(instance, key.split("/", 1)[1])
        assert len(key_of) >= 5, key_of
        svcd(data, "tier", "archive", "--scope", store)
        instances = sorted(key_of)
        stalled, target = instances[:4], instances[4]
        objects = {instance: [p for p in (data / "cold" / store).rglob("*.zip") if p.name.startswith(instance.rsplit("/", 1)[-1] + ".")]
                   for instance in instances}
        assert all(len(found) == 1 for found in objects.values()), objects
        fifos = [objects[instance][0] for instance in stalled]
        for cold in fifos:
            cold.rename(cold.with_suffix(".kept"))
            os.mkfifo(cold)

        def state(instance):
            return next(r["state"] for r in tier_rows(data, store) if r["instance"] == instance)

        def read(key):
            try:
                return (mountpoint / f"{store}.zarr" / key).read_bytes() == noise.served[key]
            except OSError as e:
                return errno.errorcode.get(e.errno, str(e.errno))

        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            held = [pool.submit(read, key_of[instance]) for instance in stalled]
            assert eventually(lambda: all(state(instance) == "restoring" for instance in stalled))
            queued = pool.submit(read, key_of[target])
            time.sleep(1)
            assert state(target) == "archived" and not queued.done()
            started = time.monotonic()
            answer = requests.get(f"{noise.url}/{key_of[target]}", params={"timeout": 20}, headers=noise.headers, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.content == noise.served[key_of[target]]
            assert time.monotonic() - started < 15
            # The first reader's own read of it is answered by the same restore.
            assert queued.result(timeout=30) is True
            for cold in fifos:
                writer = os.open(cold, os.O_RDWR)
                cold.with_suffix(".kept").rename(cold)
                os.close(writer)
            assert {r.result(timeout=90) for r in held} <= {True, "EIO"}


def mapped_bytes(path):
    """The bytes of `path` read through `mmap`, in a child process: a fault that fails is
    SIGBUS, which would end the test run."""
    script = ("import mmap, sys\n"
              "with open(sys.argv[1], 'rb') as h, mmap.mmap(h.fileno(), 0, access=mmap.ACCESS_READ) as m:\n"
              "    sys.stdout.buffer.write(m[:])\n")
    child = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=300)
    assert child.returncode == 0, (path, child.returncode, child.stderr)
    return child.stdout


@pytest.mark.skipif(tuple(int(n) for n in re.findall(r"\d+", os.uname().release)[:2]) < (6, 6),
                    reason="mapping a file opened with FOPEN_DIRECT_IO needs Linux 6.6")
def test_an_archived_chunk_can_be_mapped_through_the_mount(tmp_path):
    """A chunk opened while archived (read past the page cache) can still be mapped, as a
    hot one can: `mmap` restores its blob and gives its bytes."""
    mountpoint = tmp_path / "mount"
    mountpoint.mkdir()
    with NoiseStore(tmp_path, 8, seed=7, max_bytes=4 << 20, mount=mountpoint) as noise:
        data, store = noise.data, noise.store
        svcd(data, "tier", "archive", "--scope", store)
        assert {r["state"] for r in tier_rows(data, store)} == {"archived"}
        directory = mountpoint / f"{store}.zarr"
        archived, hot = "tas/0.0.0", "tas/7.0.0"
        requests.get(f"{noise.url}/{hot}", headers=noise.headers, timeout=60).raise_for_status()
        assert sorted(r["state"] for r in tier_rows(data, store))[0] == "archived"
        assert not (data / "stores" / store / archived).exists()
        for key in (archived, hot):
            assert mapped_bytes(directory / key) == noise.served[key], key
        assert (data / "stores" / store / archived).exists()


def test_a_restore_that_fails_at_once_fails_a_read_through_the_mount_once(tmp_path):
    """A read through the mount first asks without waiting (which starts the restore) and
    then waits for that restore: when it fails at once (its cold object is gone), the read
    gets EIO, well before `mount.read_timeout_seconds`, from one restore. The next read
    tries again, and reads the bytes once the object is back. (Here the waiting read mostly
    joins the restore still under way; that a read which comes back after its restore failed
    gets that failure is pinned by the tier's own test of it.)"""
    mountpoint = tmp_path / "mount"
    mountpoint.mkdir()
    timeout = 120
    with NoiseStore(tmp_path, 8, seed=8, max_bytes=4 << 20, mount=mountpoint,
                    env={"SVCD_MOUNT_READ_TIMEOUT_SECONDS": str(timeout)}) as noise:
        data, store = noise.data, noise.store
        svcd(data, "tier", "archive", "--scope", store)
        assert {r["state"] for r in tier_rows(data, store)} == {"archived"}
        cold, aside = data / "cold" / store, tmp_path / "cold-aside"
        shutil.move(cold, aside)
        log = data / "svcd.log"

        def failed_restores():
            return log.read_text().count("a restore failed")

        def first_page(key):
            descriptor = os.open(mountpoint / f"{store}.zarr" / key, os.O_RDONLY)
            try:
                return os.pread(descriptor, 4096, 0)
            finally:
                os.close(descriptor)

        key = "tas/0.0.0"
        for attempt in (1, 2):
            asked = time.monotonic()
            with pytest.raises(OSError) as failure:
                first_page(key)
            assert failure.value.errno == errno.EIO
            assert time.monotonic() - asked < timeout / 2
            # One restore per read: the read that waits got the failure of the one its
            # first try started.
            assert eventually(lambda: failed_restores() == attempt), (attempt, failed_restores())
        assert not (data / "stores" / store / key).exists()
        shutil.move(aside, cold)
        assert first_page(key) == noise.served[key][:4096]
        assert failed_restores() == 2


def test_a_read_through_the_mount_that_fails_after_its_store_was_converted_again_is_stale(tmp_path):
    """A read through the mount waits for a restore (its cold object is a FIFO nobody writes,
    so the restore waits in `open`); the store is converted again meanwhile; then the restore
    fails. The read answers ESTALE (the file it was opened as is of an earlier conversion),
    not EIO, which a reader takes for a fault of the store. The path, looked up again, reads
    the new conversion."""
    mountpoint = tmp_path / "mount"
    mountpoint.mkdir()
    with NoiseStore(tmp_path, 4, seed=9, max_bytes=1 << 20, mount=mountpoint,
                    env={"SVCD_MOUNT_READ_TIMEOUT_SECONDS": "120"}) as noise:
        data, store = noise.data, noise.store
        svcd(data, "tier", "archive", "--scope", store)
        assert {r["state"] for r in tier_rows(data, store)} == {"archived"}
        objects = sorted((data / "cold" / store).rglob("*.zip"))
        for cold in objects:
            cold.rename(cold.with_suffix(".kept"))
            os.mkfifo(cold)
        key = "tas/0.0.0"
        path = mountpoint / f"{store}.zarr" / key

        def read():
            try:
                return path.read_bytes()
            except OSError as e:
                return errno.errorcode.get(e.errno, str(e.errno))

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            reading = pool.submit(read)
            assert eventually(lambda: any(r["state"] == "restoring" for r in tier_rows(data, store)))
            answer = requests.post(f"{noise.url.split('/data-portal/')[0]}/data-portal/zarr/convert",
                                   json={"path": [str(noise.sources / "noise.nc")], "reload": True},
                                   headers=noise.headers, timeout=30)
            assert answer.status_code == 200, answer.text
            assert not reading.done()
            # The restore that opened its FIFO reads it empty and fails.
            for cold in objects:
                writer = os.open(cold, os.O_RDWR)
                cold.with_suffix(".kept").rename(cold)
                os.close(writer)
            assert reading.result(timeout=60) == "ESTALE"
        base = noise.url.split("/data-portal/")[0]
        assert wait_ready(base, noise.headers, noise.url, timeout=120)["status"] == 0
        # The store's directory entry is kept by the kernel for a few seconds.
        assert eventually(lambda: read() == noise.served[key], seconds=15)


def test_a_serving_daemon_cleans_leftover_cold_objects_of_the_stores_it_touched(tmp_path):
    """Every `tier.cleaning_interval_seconds` the daemon lists the cold tier of the stores
    archived or restored lately and deletes what no record names, without a restart; the
    archived blobs' own objects stay, and their keys read back."""
    with NoiseStore(tmp_path, 8, seed=9, max_bytes=4 << 20,
                    env={"SVCD_TIER_CLEANING_INTERVAL_SECONDS": "1"}) as noise:
        data, store = noise.data, noise.store
        svcd(data, "tier", "archive", "--scope", store)
        rows = tier_rows(data, store)
        assert {r["state"] for r in rows} == {"archived"}
        objects = sorted(p.name for p in (data / "cold" / store).iterdir())
        # An object no record names, as an upload the object store completed after the
        # archive gave up on it leaves one (an older archive of a blob of the store).
        leftover = data / "cold" / store / f"{rows[0]['instance']}.1.zip"
        leftover.write_bytes(b"PK\x05\x06" + bytes(18))
        assert eventually(lambda: not leftover.exists(), seconds=30), "the leftover was not cleaned"
        assert sorted(p.name for p in (data / "cold" / store).iterdir()) == objects
        assert noise.proc.poll() is None
        key = "tas/0.0.0"
        answer = requests.get(f"{noise.url}/{key}", headers=noise.headers, timeout=60)
        assert answer.status_code == 200 and answer.content == noise.served[key]


def test_a_large_chunk_reads_through_the_daemon_without_passthrough(tmp_path):
    """Without passthrough every read goes through the daemon, a page-cache-sized request at
    a time: a chunk of about 38 MiB (`chunk_size` 64) gives, request by request, the bytes
    HTTP gives; archived, it is restored and read the same way."""
    data, sources, mountpoint = tmp_path / "data", tmp_path / "sources", tmp_path / "mount"
    for d in (data, sources, mountpoint):
        d.mkdir()
    os.chmod(sources, 0o755)
    tas(2, 3400, 3400, seed=11).to_netcdf(sources / "large.nc")
    os.chmod(sources / "large.nc", 0o644)
    proc, host = start(data, sources, mountpoint, max_bytes=1 << 20, env={"SVCD_MOUNT_PASSTHROUGH": "false"})
    try:
        token = svcd(data, "token", "issue", "--user=large").stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        base = f"{host}/api/svc-nextgen"
        answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(sources / "large.nc")], "chunk_size": 64},
                               headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        [url] = answer.json()["urls"]
        assert wait_ready(base, headers, url, timeout=300)["status"] == 0
        store = url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
        key = "tas/1.0.0"
        served = requests.get(f"{url}/{key}", headers=headers, timeout=60).content
        assert len(served) > 32 << 20
        path = mountpoint / f"{store}.zarr" / key

        def through_mount():
            with open(path, "rb", buffering=0) as handle:
                parts = []
                while part := handle.read(1 << 20):
                    parts.append(part)
            return b"".join(parts)

        assert through_mount() == served
        svcd(data, "tier", "archive", "--scope", store)
        assert not (data / "stores" / store / key).exists()
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        assert through_mount() == served
        assert (data / "stores" / store / key).exists()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
