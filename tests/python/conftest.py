"""Starts a real svcd on a free port with a crawled demo catalogue for the client tests."""

import os
import subprocess
import time
from pathlib import Path

import pytest
import requests


@pytest.fixture(scope="session")
def svcd(tmp_path_factory):
    """Yield the API base URL of a running svcd serving the demo data."""
    binary = os.environ.get("SVCD_BIN")
    assert binary, "set SVCD_BIN to the svcd binary"
    data = tmp_path_factory.mktemp("svcd")
    tree = data / "demo"
    run = lambda *args: subprocess.run([binary, "--data-dir", str(data), *args], check=False, capture_output=True, text=True)
    result = run("demo-data", str(tree))
    assert result.returncode == 0, result.stderr
    result = run("index", "crawl", str(tree))
    assert result.returncode == 0, result.stdout + result.stderr
    log = open(data / "svcd.log", "w")
    proc = subprocess.Popen([binary, "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0"], stderr=log, stdout=log)
    address = data / "svcd.addr"
    deadline = time.monotonic() + 60
    while not (address.exists() and address.read_text().endswith("\n")):
        assert proc.poll() is None, (data / "svcd.log").read_text()
        assert time.monotonic() < deadline, "svcd did not start"
        time.sleep(0.05)
    base = f"http://{address.read_text().strip()}/api/svc-nextgen"
    assert requests.get(f"{base}/ping", timeout=10).json() == {"ping": "pong"}
    yield base
    proc.terminate()
    assert proc.wait(timeout=30) == 0, "svcd shut down uncleanly"
