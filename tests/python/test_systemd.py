"""The shipped systemd unit with its mount drop-in (`systemd/svcd.service`,
`systemd/svcd-mount.conf`): they give the daemon what it needs to mount the stores where users'
jobs see them. systemd is not the init here, so the test merges the two files as systemd does,
checks that no setting gives the service a mount namespace of its own (systemd propagates no
mount from such a namespace to the host: the mount would be there for the daemon alone), and
runs the daemon as they say (`setpriv`): as an unprivileged user, with no new privileges, and
with the capabilities they grant and no other."""

import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import requests
import xarray as xr

from conftest import serve, wait_mounted
from test_mount import local_user
from test_portal import wait_ready

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
SERVICE_USER, OTHER = "svcd-unit-test", "svcd-unit-other"

# Settings that give a service a mount namespace of its own when set (systemd.exec(5)).
NAMESPACING = ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateUsers",
               "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
               "ProtectClock", "ProtectHostname", "ProtectProc", "ProcSubset", "ReadWritePaths", "ReadOnlyPaths",
               "InaccessiblePaths", "ExecPaths", "NoExecPaths", "TemporaryFileSystem", "BindPaths",
               "BindReadOnlyPaths", "RootDirectory", "RootImage", "MountFlags", "MountAPIVFS", "LogNamespace",
               "DynamicUser", "PrivateNetwork", "PrivateIPC", "NetworkNamespacePath")
# Settings whose assignments add up (an empty one resets the list); the others are replaced.
LISTS = {"ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths", "TemporaryFileSystem",
         "BindPaths", "BindReadOnlyPaths", "AmbientCapabilities", "CapabilityBoundingSet"}


def service_settings(*files):
    """The [Service] settings of `files` merged in order, as systemd merges a unit and its
    drop-ins: key -> value (a list of words for the list settings)."""
    settings = {}
    for path in files:
        section = None
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            if section != "[Service]":
                continue
            key, _, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if key in LISTS:
                settings[key] = settings.get(key, []) + value.split() if value else []
            else:
                settings[key] = value
    return settings


def is_off(value):
    return value in (None, "", [], "no", "false", "0", "off")


def test_the_unit_with_the_mount_drop_in_gives_the_service_no_mount_namespace():
    alone = service_settings(SYSTEMD / "svcd.service")
    # Without the drop-in the unit is hardened (and could not show a mount to anyone).
    assert alone["ProtectSystem"] == "strict" and alone["NoNewPrivileges"] == "true"
    merged = service_settings(SYSTEMD / "svcd.service", SYSTEMD / "svcd-mount.conf")
    assert {key: merged[key] for key in NAMESPACING if not is_off(merged.get(key))} == {}
    assert merged["AmbientCapabilities"] == ["CAP_SYS_ADMIN"] == merged["CapabilityBoundingSet"]
    assert merged["User"] == "svcd" and merged["NoNewPrivileges"] == "true"


def test_the_daemon_mounts_and_serves_the_stores_as_the_unit_runs_it(tmp_path):
    merged = service_settings(SYSTEMD / "svcd.service", SYSTEMD / "svcd-mount.conf")
    user, other = local_user(SERVICE_USER), local_user(OTHER)
    caps = ",".join("+" + cap.removeprefix("CAP_").lower() for cap in merged["AmbientCapabilities"])
    bounding = ",".join(["-all"] + ["+" + cap.removeprefix("CAP_").lower() for cap in merged["CapabilityBoundingSet"]])
    setpriv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", f"--bounding-set={bounding}"]
    if caps:
        setpriv += [f"--inh-caps={caps}", f"--ambient-caps={caps}"]
    if merged["NoNewPrivileges"] == "true":
        setpriv.append("--no-new-privs")
    launcher = tmp_path / "svcd-as-the-unit"
    launcher.write_text(f"#!/bin/sh\nexec {' '.join(setpriv)} {os.environ['SVCD_BIN']} \"$@\"\n")
    launcher.chmod(0o755)
    # Outside pytest's root-only directories: the daemon's user reaches its data directory
    # (its own, as StateDirectory= makes it), the sources and the mount point.
    work = Path(tempfile.mkdtemp(prefix="svcd-unit-"))
    os.chmod(work, 0o755)
    data, sources, mountpoint = work / "data", work / "sources", work / "mount"
    for directory in (data, sources, mountpoint):
        directory.mkdir()
    os.chown(data, user.pw_uid, user.pw_gid)
    os.chmod(sources, 0o755)
    os.chmod(mountpoint, 0o755)
    ds = xr.Dataset({"tas": (("time", "lat"), np.arange(12, dtype="f4").reshape(4, 3))},
                    coords={"time": ("time", np.arange(4.0), {"units": "days since 2000-01-01"})})
    ds.to_netcdf(sources / "public.nc")
    os.chmod(sources / "public.nc", 0o644)
    # The device is world-readable and writable on a standard system (udev's rule); here it
    # may be root's alone.
    fuse_mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    os.chmod("/dev/fuse", 0o666)
    proc = None
    try:
        env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(sources))
        proc, host = serve(str(launcher), data, env=env, args=("--mount", str(mountpoint)))
        wait_mounted(mountpoint)
        assert os.path.ismount(mountpoint), (data / "svcd.log").read_text()
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert f"Uid:\t{user.pw_uid}\t" in status
        assert "NoNewPrivs:\t1" in status
        base = f"{host}/api/svc-nextgen"
        token = subprocess.run([os.environ["SVCD_BIN"], "--data-dir", str(data), "token", "issue", "--user=jane"],
                               capture_output=True, text=True, check=True).stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(sources / "public.nc")], "public": True},
                               headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        [url] = answer.json()["urls"]
        assert wait_ready(base, headers, url)["status"] == 0
        store = mountpoint / url.rsplit("/", 1)[1]
        # Another local user reads the store through the mount as HTTP serves it. (The hot
        # chunk goes through passthrough, which needs the capability: refused, the daemon
        # says so in its log and reads the chunk itself.)
        for key in (".zmetadata", "tas/0.0"):
            read = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--clear-groups",
                                   "cat", str(store / key)], capture_output=True, check=False)
            assert read.returncode == 0, read.stderr
            assert read.stdout == requests.get(f"{url}/{key}", timeout=10).content, key
        assert "refuses passthrough" not in (data / "svcd.log").read_text()
        # Stopped as systemd stops it: unmounted.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not os.path.ismount(mountpoint)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)
        os.chmod("/dev/fuse", fuse_mode)
        shutil.rmtree(work, ignore_errors=True)
