"""The FUSE mount (`svcd serve --mount DIR`): `DIR/<token>.zarr/<key>` holds exactly the bytes
HTTP serves, xarray opens a store from it as from its URL, files belong to the store owner's
local account with the store's permissions, enforced by the kernel for another local user,
the mount is read-only, and it is gone when the daemon stops.

Needs root and /dev/fuse (as CI runs): it creates two local users and mounts."""

import errno
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import xarray as xr

from conftest import serve, wait_mounted
from test_portal import wait_ready

OWNER, OTHER = "svcd-mount-owner", "svcd-mount-other"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="mounting needs root and /dev/fuse")


def local_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    binary = os.environ["SVCD_BIN"]
    data = tmp_path_factory.mktemp("mount-svcd")
    # Outside pytest's root-only directories, so that the local users can reach it.
    mountpoint = Path(tempfile.mkdtemp(prefix="svcd-mount-"))
    os.chmod(mountpoint, 0o755)
    # The owner has a local account, so the daemon lets it convert what its POSIX
    # permissions let it read: the sources live outside pytest's root-only directories.
    sources = Path(tempfile.mkdtemp(prefix="svcd-mount-sources-"))
    os.chmod(sources, 0o755)
    owner, other = local_user(OWNER), local_user(OTHER)
    ds = xr.Dataset({"tas": (("time", "lat"), np.arange(12, dtype="f4").reshape(4, 3), {"units": "K"})},
                    coords={"time": ("time", np.arange(4.0), {"units": "days since 2000-01-01"}), "lat": ("lat", [0.0, 10.0, 20.0])})
    # Two files, so two stores: one private, one public (public is a store's flag).
    for name in ("private", "public"):
        ds.attrs["title"] = name
        ds.to_netcdf(sources / f"{name}.nc")
        os.chmod(sources / f"{name}.nc", 0o644)
    env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(sources))
    proc, host = serve(binary, data, env=env, args=("--mount", str(mountpoint)))
    try:
        token = subprocess.run([binary, "--data-dir", str(data), "token", "issue", f"--user={OWNER}"], capture_output=True, text=True, check=True).stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        base = f"{host}/api/svc-nextgen"
        urls = {}
        for name, public in (("private", False), ("public", True)):
            answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(sources / f"{name}.nc")], "public": public}, headers=headers, timeout=30)
            assert answer.status_code == 200, answer.text
            [url] = answer.json()["urls"]
            assert wait_ready(base, headers, url)["status"] == 0
            urls[name] = url
        wait_mounted(mountpoint)
        yield {"mount": mountpoint, "headers": headers, "urls": urls, "owner": owner, "other": other, "proc": proc, "data": data}
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        shutil.rmtree(sources, ignore_errors=True)
        if not os.path.ismount(mountpoint):
            os.rmdir(mountpoint)


def store_dir(mounted, name):
    url = mounted["urls"][name]
    token = url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
    return mounted["mount"] / f"{token}.zarr", token


def test_every_key_holds_the_bytes_http_serves(mounted):
    directory, token = store_dir(mounted, "private")
    keys = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
    assert {".zmetadata", ".zgroup", "tas/.zarray", "tas/0.0"} <= set(keys), keys
    base = mounted["urls"]["private"]
    for key in keys:
        served = requests.get(f"{base}/{key}", headers=mounted["headers"], timeout=10)
        assert served.status_code == 200, (key, served.text)
        on_disk = (directory / key).read_bytes()
        assert on_disk == served.content, key
        assert (directory / key).stat().st_size == len(served.content), key
    listed = subprocess.run(["ls", "-R", str(directory)], capture_output=True, text=True, check=True).stdout
    assert "tas" in listed and "0.0" in listed


def test_xarray_opens_a_store_from_the_mount_as_from_its_url(mounted):
    directory, _ = store_dir(mounted, "public")
    from_mount = xr.open_zarr(directory, consolidated=True, zarr_format=2).load()
    from_http = xr.open_zarr(mounted["urls"]["public"], storage_options={"headers": mounted["headers"]}, zarr_format=2).load()
    xr.testing.assert_identical(from_mount, from_http)
    np.testing.assert_array_equal(from_mount["tas"].values, np.arange(12, dtype="f4").reshape(4, 3))


def as_user(user, *command):
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *command], capture_output=True, text=True, check=False)


def test_files_belong_to_the_owner_and_another_user_reads_only_public_stores(mounted):
    private, _ = store_dir(mounted, "private")
    public, _ = store_dir(mounted, "public")
    owner, other = mounted["owner"], mounted["other"]
    for directory, mode in ((private, 0o400), (public, 0o444)):
        key = directory / ".zmetadata"
        stat = key.stat()
        assert (stat.st_uid, stat.st_mode & 0o777) == (owner.pw_uid, mode), directory
    assert as_user(owner, "cat", str(private / ".zmetadata")).returncode == 0
    denied = as_user(other, "cat", str(private / ".zmetadata"))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    assert as_user(other, "ls", str(private)).returncode != 0
    allowed = as_user(other, "cat", str(public / ".zmetadata"))
    assert allowed.returncode == 0 and allowed.stdout.startswith("{"), allowed


def test_the_mount_is_read_only(mounted):
    directory, _ = store_dir(mounted, "private")
    for attempt in (lambda: open(directory / ".zmetadata", "a"), lambda: (directory / "new").write_bytes(b"x"), lambda: (directory / ".zgroup").unlink()):
        with pytest.raises(OSError) as raised:
            attempt()
        assert raised.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM), raised.value


def test_unknown_names_are_not_there(mounted):
    assert not (mounted["mount"] / "00000000-0000-0000-0000-000000000000.zarr").exists()
    assert not (mounted["mount"] / "not-a-store").exists()
    directory, _ = store_dir(mounted, "private")
    assert not (directory / "tas" / "9.9").exists()


def test_reading_through_the_mount_logs_nothing_to_warn_of(mounted):
    """Programs open, read and close files as they do anywhere (Python's `open` asks whether
    the file is a terminal): nothing of it is a warning in the daemon's log. (The private
    store: a later test needs the public one's files out of the page cache.)"""
    directory, _ = store_dir(mounted, "private")
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path) if path.name.startswith(".") else open(path, "rb") as handle:
            handle.read()
    warnings = [line for line in (mounted["data"] / "svcd.log").read_text().splitlines()
                if " WARN" in line and "SVCD_BIN names no configuration key" not in line]
    assert warnings == []


def test_a_removed_store_leaves_the_mount(mounted):
    directory, token = store_dir(mounted, "public")
    # Opened before, and never read (xarray read the consolidated metadata only), so
    # nothing of it is in the page cache.
    held = open(directory / "tas" / ".zattrs", "rb")
    binary = os.environ["SVCD_BIN"]
    subprocess.run([binary, "--data-dir", str(mounted["data"]), "store", "rm", token], check=True, capture_output=True)
    # An open file's reads fail at once; the name goes once the kernel's entry (a few
    # seconds) is out.
    with pytest.raises(OSError) as raised:
        held.read()
    assert raised.value.errno == errno.ENOENT
    held.close()
    deadline = time.monotonic() + 15
    while directory.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not directory.exists()
    assert directory.name not in os.listdir(mounted["mount"])


def test_a_second_daemon_does_not_mount_over_a_live_mount(mounted, tmp_path):
    # Over it, it would hide the first daemon's stores, and stopping either would unmount
    # the other's mount.
    binary = os.environ["SVCD_BIN"]
    data = tmp_path / "second"
    data.mkdir()
    second = subprocess.run([binary, "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0", "--mount", str(mounted["mount"])],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode != 0
    assert f"{mounted['mount']} is a FUSE mount point already" in second.stderr, second.stderr[-2000:]
    directory, _ = store_dir(mounted, "private")
    assert (directory / ".zmetadata").is_file(), "the first daemon's mount is the one seen"
    assert mounted["proc"].poll() is None


def test_stopping_the_daemon_unmounts(mounted):
    proc = mounted["proc"]
    assert os.path.ismount(mounted["mount"])
    proc.terminate()
    proc.wait(timeout=60)
    assert not os.path.ismount(mounted["mount"])


def test_a_mount_left_by_a_killed_daemon_is_recovered_at_the_next_start(tmp_path):
    binary = os.environ["SVCD_BIN"]
    data = tmp_path / "data"
    data.mkdir()
    mountpoint = Path(tempfile.mkdtemp(prefix="svcd-mount-stale-"))
    proc, _ = serve(binary, data, args=("--mount", str(mountpoint)))
    try:
        wait_mounted(mountpoint)
        proc.kill()
        proc.wait(timeout=30)
        with pytest.raises(OSError) as raised:
            os.listdir(mountpoint)
        assert raised.value.errno == errno.ENOTCONN
        (data / "svcd.addr").unlink(missing_ok=True)
        proc, _ = serve(binary, data, args=("--mount", str(mountpoint)))
        assert os.listdir(mountpoint) == []
        proc.terminate()
        proc.wait(timeout=60)
        assert not os.path.ismount(mountpoint)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if os.path.ismount(mountpoint):
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)
        os.rmdir(mountpoint)
