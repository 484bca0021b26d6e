#!/usr/bin/env python3
"""Pathological requests, side by side: a baseline svcd binary against a candidate, one run.

For each binary, on a fresh data directory with the same N synthetic records (default 1M):
1. `file=` wildcards: a data-search with 100 wildcard values (both accept it) and one with
   500 (the candidate refuses more than 100 with a 422), timed over HTTP;
2. acknowledged writes: 200 single-entry user-data adds in a row (each synced to disk in the
   candidate), mean time per add;
3. a responsive server under heavy requests: the slowest of 20 `/ping`s while 6 concurrent
   STAC searches with a 1,000-vertex `intersects` run;
4. memory: resident and peak memory after adding 800,000 user-data entries (one request
   for the baseline; 100,000 per request for the candidate, its limit) and after deleting
   them all.

Run: python3 bench/pathological.py --baseline OLD/svcd --candidate NEW/svcd [--records N]
[--baseline-batch N]. Both binaries should be release builds; a baseline that already limits
user-data adds takes `--baseline-batch 100000`. Prints one table with the ratio
candidate/baseline.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ENTRIES = 800_000


def records(path: Path, n: int) -> None:
    with path.open("w") as out:
        for i in range(n):
            d = i // 20
            out.write(
                json.dumps(
                    {
                        "file": f"/work/archive/p{d % 5}/m{d % 97:02d}/x{d:06d}/v20210101/f{i:08d}.nc",
                        "project": f"p{d % 5}",
                        "model": f"m{d % 97:02d}",
                        "variable": f"v{d % 50}",
                        "time_frequency": "mon",
                        "version": "v20210101",
                        "time": "[2000-01 TO 2000-12]",
                        "bbox": [d % 20, 40, d % 20 + 5, 50],
                    }
                )
                + "\n"
            )


def memory(pid: int) -> tuple[float, float]:
    """Resident and peak resident memory in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def request(method, url, token=None, body=None, timeout=600):
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def ping_under_load(api: str) -> float:
    """The slowest of 20 pings while heavy STAC searches run."""
    import math
    import threading

    ring = [[10 + 5 * math.cos(2 * math.pi * k / 1000), 45 + 5 * math.sin(2 * math.pi * k / 1000)] for k in range(1000)]
    ring.append(ring[0])
    body = {"intersects": {"type": "Polygon", "coordinates": [ring]}, "limit": 100}
    threads = [threading.Thread(target=request, args=("POST", f"{api}/stacapi/search", None, body)) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    slowest = 0.0
    for _ in range(20):
        started = time.monotonic()
        request("GET", f"{api}/ping")
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)
    for t in threads:
        t.join()
    return slowest


def measure(binary: str, jsonl: Path, entries_per_request: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SVC")}
        subprocess.run(
            [binary, "--data-dir", tmp, "index", "add", str(jsonl)],
            check=True, stdout=subprocess.DEVNULL, env=env,
        )
        token = subprocess.run(
            [binary, "--data-dir", tmp, "token", "issue", "--user", "jane"],
            check=True, capture_output=True, text=True, env=env,
        ).stdout.strip()
        server = subprocess.Popen(
            [binary, "--data-dir", tmp, "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        try:
            address = data / "svcd.addr"
            while not address.exists() or not address.read_text().endswith("\n"):
                time.sleep(0.1)
            api = f"http://{address.read_text().strip()}/api/svc-nextgen"

            for n in (100, 500):
                query = "&".join(f"file=*x{i:06d}/*" for i in range(n))
                started = time.monotonic()
                status, body = request("GET", f"{api}/databrowser/data-search/svc/file?{query}")
                out[f"{n} file wildcards (s)"] = time.monotonic() - started
                out[f"{n} file wildcards status"] = status
                if status == 200:
                    out[f"{n} file wildcards paths"] = body.count(b"\n")

            started = time.monotonic()
            for i in range(200):
                entry = {"file": f"/home/jane/one/{i}.nc", "variable": "tas",
                         "time_frequency": "mon", "time": "[2000 TO 2001]"}
                status, _ = request("POST", f"{api}/databrowser/userdata", token,
                                    {"user_metadata": [entry]})
                assert status == 202, status
            out["single add (ms)"] = (time.monotonic() - started) / 200 * 1000

            out["slowest ping under load (s)"] = ping_under_load(api)

            out["RSS at start (MiB)"] = memory(server.pid)[0]
            for first in range(0, ENTRIES, entries_per_request):
                # Short entries, so 800,000 fit the baseline's 64 MiB body limit.
                batch = [
                    {"file": f"/h/{i}.nc", "variable": "t", "time_frequency": "m", "time": "fx"}
                    for i in range(first, min(first + entries_per_request, ENTRIES))
                ]
                status, body = request("POST", f"{api}/databrowser/userdata", token,
                                       {"user_metadata": batch})
                assert status == 202, (status, body[:200])
            rss, peak = memory(server.pid)
            out["RSS after 800k adds (MiB)"] = rss
            out["peak RSS (MiB)"] = peak
            status, _ = request("DELETE", f"{api}/databrowser/userdata", token, {})
            assert status == 202, status
            out["RSS after deleting them (MiB)"] = memory(server.pid)[0]
        finally:
            server.terminate()
            server.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--baseline-batch", type=int, default=ENTRIES,
                        help="user-data entries per add request for the baseline")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "records.jsonl"
        records(jsonl, args.records)
        print(f"# {args.records} records; baseline {args.baseline}; candidate {args.candidate}")
        base = measure(args.baseline, jsonl, args.baseline_batch)
        print("baseline:", base, flush=True)
        cand = measure(args.candidate, jsonl, 100_000)
        print("candidate:", cand, flush=True)
    print(f"{'measure':34} {'baseline':>12} {'candidate':>12} {'ratio':>8}")
    for key in base:
        b, c = base[key], cand.get(key)
        ratio = f"{c / b:8.3f}" if isinstance(b, float) and b and isinstance(c, float) else ""
        fmt = lambda v: f"{v:12.3f}" if isinstance(v, float) else f"{v!s:>12}"
        print(f"{key:34} {fmt(b)} {fmt(c)} {ratio}")


if __name__ == "__main__":
    main()
