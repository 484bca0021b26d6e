"""The reference's side of the resolve benchmark (bench/benches/manifests.rs).

Usage: python blobmap_resolve.py MANIFEST_DIR KEYS_FILE ANSWERS_FILE

Loads every manifest under MANIFEST_DIR with blobmap's own ManifestStore (parents before
the scopes nested below them), builds its trie, times `Trie.lookup` over the keys in
KEYS_FILE (one per line) on one thread, writes what its `resolve` command would print after
`->` for each key to ANSWERS_FILE, and prints a JSON summary on stdout.
"""

import json
import sys
import time

from obstore.store import LocalStore

import blobmap
from blobmap.manifests import ManifestStore
from blobmap.resolve import Trie


def main() -> int:
    manifest_dir, keys_file, answers_file = sys.argv[1:4]
    start = time.perf_counter()
    manifests = ManifestStore(LocalStore(manifest_dir)).load_all()
    manifests.sort(key=lambda m: (m.scope.strip("/").count("/"), m.scope))
    trie = Trie()
    trie.add_all(manifests)
    load = time.perf_counter() - start

    with open(keys_file, encoding="utf-8") as f:
        keys = f.read().split("\n")
    if keys and keys[-1] == "":
        keys.pop()

    lookup = trie.lookup
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        for key in keys:
            lookup(key)
        best = min(best, time.perf_counter() - start)

    with open(answers_file, "w", encoding="utf-8") as out:
        for key in keys:
            r = lookup(key)
            out.write(f"{r.blob_id or r.kind}\n")

    print(json.dumps({
        "version": getattr(blobmap, "__version__", "?"),
        "manifests": len(manifests),
        "load_ms": load * 1000,
        "keys": len(keys),
        "seconds": best,
        "keys_per_s": len(keys) / best if best else 0.0,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
