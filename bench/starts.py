#!/usr/bin/env python3
"""How long svcd takes to start after many conversions, per build, side by side.

For each `--svcd` build in turn: a fresh data directory; one user asks for the conversion of
`--failed` files that do not exist (requests of 10,000 paths, the most one request names), so
every store fails at once; once the last has failed, the daemon is stopped (SIGTERM) and
started again, and the time from its start to its answering (its address file written) is
reported. What a start does before it answers (the tier's repair over every store recorded)
is what this measures; a user can make thousands of stores in a minute.

Run: .venv-test/bin/python bench/starts.py --svcd OLD --svcd NEW [--failed 20000]
"""

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import requests

API = "/api/svc-nextgen"
PER_REQUEST = 10_000


def start(binary, data, env):
    """svcd serving `data`; the process, seconds until it answered, and its API base."""
    (data / "svcd.addr").unlink(missing_ok=True)
    started = time.monotonic()
    log = open(data / "svcd.log", "a")
    proc = subprocess.Popen([binary, "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0"], stdout=log, stderr=log, env=env)
    address = data / "svcd.addr"
    while not (address.exists() and address.read_text().endswith("\n")):
        if proc.poll() is not None:
            raise SystemExit(f"svcd did not start: {(data / 'svcd.log').read_text()[-2000:]}")
        time.sleep(0.02)
    return proc, time.monotonic() - started, f"http://{address.read_text().strip()}{API}"


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def measure(binary, failed, scratch):
    run = Path(tempfile.mkdtemp(prefix="starts-", dir=scratch))
    data, sources = run / "svcd", run / "sources"
    data.mkdir()
    sources.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCD_")}
    env["SVCD_STORES_ALLOWED_ROOTS"] = str(sources)
    try:
        proc, _, base = start(binary, data, env)
        token = subprocess.run([binary, "--data-dir", str(data), "token", "issue", "--user", "bench"], capture_output=True, text=True, check=True, env=env).stdout.strip()
        headers = {"Authorization": f"Bearer {token}"}
        for first in range(0, failed, PER_REQUEST):
            paths = [str(sources / f"missing-{n}.nc") for n in range(first, min(failed, first + PER_REQUEST))]
            answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": paths}, headers=headers, timeout=600)
            assert answer.status_code == 200, answer.text
        last = answer.json()["urls"][-1]
        while requests.get(f"{base}/data-portal/zarr-utils/status", params={"url": last}, headers=headers, timeout=60).json()["status"] == 2:
            time.sleep(0.5)
        stop(proc)
        proc, seconds, _ = start(binary, data, env)
        stop(proc)
        return seconds
    finally:
        shutil.rmtree(run, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--svcd", action="append", required=True, help="a build to measure (repeat for more)")
    parser.add_argument("--failed", type=int, default=20_000, help="stores that fail before the restart")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args()
    for binary in args.svcd:
        seconds = measure(binary, args.failed, args.scratch)
        print(f"{binary}: start after {args.failed:,} failed conversions took {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
