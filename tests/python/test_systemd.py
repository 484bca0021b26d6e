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
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import xarray as xr

from conftest import serve
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


def without_capabilities(drop_in, tmp_path):
    """The README's variant of `drop_in` for a mount without `CAP_SYS_ADMIN`: its capability
    lines dropped and `NoNewPrivileges=false`, so that the setuid `fusermount3` mounts."""
    lines = [line for line in drop_in.read_text().splitlines()
             if not line.startswith(("AmbientCapabilities=", "CapabilityBoundingSet="))]
    variant = tmp_path / "svcd-mount-fusermount3.conf"
    variant.write_text("\n".join(lines + ["NoNewPrivileges=false", ""]))
    return variant


def launcher_of(settings, user, directory):
    """A script that runs svcd as `settings` say (as `user`), through `setpriv`."""
    setpriv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    names = lambda key: [cap.removeprefix("CAP_").lower() for cap in settings.get(key, [])]
    if "CapabilityBoundingSet" in settings:
        setpriv.append("--bounding-set=" + ",".join(["-all"] + ["+" + cap for cap in names("CapabilityBoundingSet")]))
    if ambient := ",".join("+" + cap for cap in names("AmbientCapabilities")):
        setpriv += [f"--inh-caps={ambient}", f"--ambient-caps={ambient}"]
    if settings.get("NoNewPrivileges") == "true":
        setpriv.append("--no-new-privs")
    launcher = directory / "svcd-as-the-unit"
    launcher.write_text(f"#!/bin/sh\nexec {' '.join(setpriv)} {os.environ['SVCD_BIN']} \"$@\"\n")
    launcher.chmod(0o755)
    return launcher


@pytest.mark.parametrize("variant", ["drop-in", "fusermount3"])
def test_the_daemon_mounts_serves_and_recovers_the_stores_as_the_unit_runs_it(tmp_path, variant):
    """As the unit with the drop-in runs it (`CAP_SYS_ADMIN`: mount(2) and passthrough), and
    as the README's variant without it (the setuid `fusermount3`, `user_allow_other`, no
    passthrough): mounted, read by another user, killed (a stale mount left), started again
    (the stale mount detached, mounted again), stopped (unmounted)."""
    drop_in = SYSTEMD / "svcd-mount.conf"
    if variant == "fusermount3":
        drop_in = without_capabilities(drop_in, tmp_path)
    settings = service_settings(SYSTEMD / "svcd.service", drop_in)
    assert ("AmbientCapabilities" in settings) == (variant == "drop-in")
    user, other = local_user(SERVICE_USER), local_user(OTHER)
    launcher = launcher_of(settings, user, tmp_path)
    # Outside pytest's root-only directories: the daemon's user reaches its data directory
    # (its own, as StateDirectory= makes it), the sources and the mount point (its own too:
    # fusermount3 mounts only where its caller may write).
    work = Path(tempfile.mkdtemp(prefix="svcd-unit-"))
    os.chmod(work, 0o755)
    data, sources, mountpoint = work / "data", work / "sources", work / "mount"
    for directory in (data, sources, mountpoint):
        directory.mkdir(mode=0o755)
    for directory in (data, mountpoint):
        os.chown(directory, user.pw_uid, user.pw_gid)
    ds = xr.Dataset({"tas": (("time", "lat"), np.arange(12, dtype="f4").reshape(4, 3))},
                    coords={"time": ("time", np.arange(4.0), {"units": "days since 2000-01-01"})})
    ds.to_netcdf(sources / "public.nc")
    os.chmod(sources / "public.nc", 0o644)
    fuse_mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    fuse_conf = Path("/etc/fuse.conf")
    fuse_conf_before = fuse_conf.read_text() if fuse_conf.exists() else None
    env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(sources))
    proc = None

    def start():
        (data / "svcd.addr").unlink(missing_ok=True)
        proc, host = serve(str(launcher), data, env=env, args=("--mount", str(mountpoint)))
        # Mounted once it says so (a stale mount left at the mount point is a mount point too).
        log = data / "svcd.log"
        deadline = time.monotonic() + 30
        while "stores mounted" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "stores mounted" in log.read_text(), log.read_text()
        return proc, host

    def read_as_other(path):
        return subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--clear-groups", "cat", str(path)],
                              capture_output=True, check=False)

    try:
        # The device is world-readable and writable on a standard system (udev's rule);
        # here it may be root's alone. `user_allow_other` is the variant's own set-up.
        os.chmod("/dev/fuse", 0o666)
        if variant == "fusermount3":
            fuse_conf.write_text((fuse_conf_before or "") + "\nuser_allow_other\n")
        proc, host = start()
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert f"Uid:\t{user.pw_uid}\t" in status
        assert ("NoNewPrivs:\t1" in status) == (settings["NoNewPrivileges"] == "true")
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
        served = {key: requests.get(f"{url}/{key}", timeout=10).content for key in (".zmetadata", "tas/0.0")}
        # Another local user reads the store through the mount as HTTP serves it. The hot
        # chunk goes through passthrough when the daemon has the capability it needs; else
        # the daemon says the kernel refused it, and reads the chunk itself.
        for key, content in served.items():
            read = read_as_other(store / key)
            assert read.returncode == 0 and read.stdout == content, (key, read.stderr)
        log = (data / "svcd.log").read_text()
        through_daemon = "refuses passthrough" in log or "offers no FUSE passthrough" in log
        assert through_daemon == (variant == "fusermount3"), log
        # Killed: its mount is left stale; started again, the daemon detaches and remounts it.
        proc.kill()
        proc.wait(timeout=30)
        with pytest.raises(OSError):
            os.listdir(mountpoint)
        proc, host = start()
        read = read_as_other(store / "tas/0.0")
        assert read.returncode == 0 and read.stdout == served["tas/0.0"], read.stderr
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
        if fuse_conf_before is None:
            fuse_conf.unlink(missing_ok=True)
        else:
            fuse_conf.write_text(fuse_conf_before)
        shutil.rmtree(work, ignore_errors=True)
