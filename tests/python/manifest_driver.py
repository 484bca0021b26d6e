"""Drives the reference implementation (`blobmap==0.5.0`) through its Python API.

Two modes:
* `Reference(..., decided=False)`: the reference exactly as published.
* `Reference(..., decided=True)`: the reference with the fixes of DECISIONS.md ("Blob
  manifests") applied, which is what svcd is meant to equal everywhere. Each fix is small and
  named in `DECISIONS`; the differential tests use this mode to check that a difference
  between svcd and the reference is exactly the one a decision explains.

Also runnable as a script for a quick look: `python manifest_driver.py resolve MANIFESTS KEY...`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import re
import sys
from pathlib import Path
from typing import Iterator, Sequence

import importlib
from blobmap.backends import open_store
from blobmap.hierarchy import DEFAULT_EXCLUDE, read_arrays
from blobmap.manifests import ManifestStore
from blobmap.model import Manifest, Policy
from blobmap.partition import diff, partition
from blobmap.resolve import Trie
from blobmap.schema import validate_document
from blobmap.service import partition_store

logging.getLogger("blobmap").setLevel(logging.ERROR)

# the package re-exports functions named like these modules, so fetch the modules themselves
hierarchy = importlib.import_module("blobmap.hierarchy")
partitioning = importlib.import_module("blobmap.partition")
resolving = importlib.import_module("blobmap.resolve")

# The fixes, by the names the allow-list in test_manifest_diff.py uses.
DECISIONS = (
    "chunk index: strict ASCII digits",
    "blob ids: ASCII only",
    "v3 dimension_names",
    "--force keeps pins, bumps the epoch",
    "hot_always-only change is written",
    "an array at the scope root has path \"\"",
    "a marker on the trie root counts",
    "report counts instances per (scope, id)",
)

_ASCII_DIGITS = re.compile(r"[0-9]+")


def _strict_int(raw):
    """int() for chunk indices as decided: ASCII digits only, nothing else."""
    if not isinstance(raw, str) or not _ASCII_DIGITS.fullmatch(raw):
        raise ValueError(f"not a chunk index: {raw!r}")
    return int(raw)


def _ascii_ident(path: str) -> str:
    """Identifier from a path with only ASCII letters and digits kept (others become `_`)."""
    out = "".join(c if (c.isascii() and c.isalnum()) else "_" for c in path.strip("/"))
    out = re.sub("_+", "_", out)
    return out.strip("_").lower() or "root"


_ORIGINAL_IS_COORDINATE = hierarchy._is_coordinate
_ORIGINAL_RELATIVE = hierarchy._relative
_ORIGINAL_LOOKUP = resolving.Trie.lookup


def _is_coordinate_with_dimension_names(root, meta, shape):
    if _ORIGINAL_IS_COORDINATE(root, meta, shape):
        return True
    names = meta.get("dimension_names")
    return isinstance(names, list) and len(shape) == 1 and names == [posixpath.basename(root)]


def _relative_with_the_scope_root(key: str, prefix: str) -> str:
    """The reference's key-to-scope-relative helper, except that the scope itself (the
    directory of a root array's metadata, `scope/zarr.json`) is the scope root `""`, as its
    description has it (`c` is a root array's chunk prefix, `.` its provenance key)."""
    if prefix and key == prefix.rstrip("/"):
        return ""
    return _ORIGINAL_RELATIVE(key, prefix)


def _lookup_reading_the_root_marker(trie: Trie, key: str):
    """The reference's lookup, plus the marker on the trie's root node (scope `""`, prefix
    `""`), which it never reads. The root is the shallowest node, so its marker decides only
    a key that reaches no deeper marker."""
    result = _ORIGINAL_LOOKUP(trie, key)
    mark = trie._root.get(resolving._MARK)
    if result != resolving.UNMANAGED or mark is None:
        return result
    parts = resolving._split(key)
    node = trie._root
    for part in parts:
        node = node.get(part)
        if node is None:
            break
        if resolving._MARK in node:
            return result  # a deeper marker decided (its chunk index did not parse)
    if not parts:
        return result
    if isinstance(mark, resolving.Resolution):
        return mark
    n = resolving._bucket_index(mark.bucket, parts, 0)
    return result if n is None else resolving.Resolution("blob", mark.instance(n), mark, n)


class _TrieKeyedByScope(Trie):
    """Decided: a blob resolution's id carries the scope of the manifest that defined it, so
    the reference's report, which collects ids in a set, counts (scope, instance id) pairs."""

    def __init__(self):
        super().__init__()
        self._scope_of: dict[int, str] = {}

    def add(self, manifest):
        super().add(manifest)
        for blob in manifest.blobs:
            self._scope_of[id(blob)] = manifest.scope.strip("/")

    def lookup(self, key):
        r = super().lookup(key)
        if r.blob_id is None:
            return r
        return dataclasses.replace(r, blob_id=(self._scope_of[id(r.blob)], r.blob_id))


@contextlib.contextmanager
def decided(active: bool = True) -> Iterator[None]:
    """Apply the resolver/partitioner fixes of DECISIONS.md to the reference while inside."""
    if not active:
        yield
        return
    saved = (partitioning._ident, hierarchy._is_coordinate, resolving.__dict__.get("int"))
    partitioning._ident = _ascii_ident
    hierarchy._is_coordinate = _is_coordinate_with_dimension_names
    hierarchy._relative = _relative_with_the_scope_root
    resolving.Trie.lookup = _lookup_reading_the_root_marker
    resolving.int = _strict_int  # module global shadows the builtin inside _bucket_index
    try:
        yield
    finally:
        partitioning._ident, hierarchy._is_coordinate = saved[0], saved[1]
        hierarchy._relative = _ORIGINAL_RELATIVE
        resolving.Trie.lookup = _ORIGINAL_LOOKUP
        if saved[2] is None:
            del resolving.int
        else:
            resolving.int = saved[2]


def policy_of(values: dict | None) -> Policy | None:
    return Policy(**values) if values else None


class Reference:
    """The reference on a data directory and a manifest directory."""

    def __init__(self, data: Path, manifests: Path, *, decided: bool = False, exclude: Sequence[str] | None = None):
        self.data_dir, self.manifests_dir, self.decided = Path(data), Path(manifests), decided
        self.manifests_dir.mkdir(parents=True, exist_ok=True)
        self.data = open_store(str(self.data_dir))
        self.store = ManifestStore(open_store(str(self.manifests_dir), create=True))
        self.exclude = DEFAULT_EXCLUDE if exclude is None else tuple(e for e in exclude if e)

    def partition(self, scope: str, policy: dict | None = None, *, force: bool = False, dry_run: bool = False):
        """One partition run; returns (manifest now in effect, written)."""
        with decided(self.decided):
            if not self.decided:
                result = partition_store(self.data, self.store, scope, policy=policy_of(policy), force=force, dry_run=dry_run, exclude=self.exclude)
                return result.manifest, result.written
            return self._partition_decided(scope, policy_of(policy), force, dry_run)

    def _partition_decided(self, scope, policy, force, dry_run):
        stored = self.store.read(scope)
        previous = stored.manifest if stored else None
        arrays = read_arrays(self.data, scope, exclude=self.exclude)
        if force and previous is not None:
            # decided: a forced cut starts from no blobs but keeps the pins and the epoch
            # sequence; like the reference, it does not inherit the previous policy
            basis = dataclasses.replace(previous, blobs=())
            policy = policy or Policy()
        else:
            basis = previous
        manifest = partition(scope, arrays, policy=policy, previous=basis)
        changes = diff(previous, manifest)
        if previous is not None and changes.is_empty and manifest.hot_always == previous.hot_always:
            return previous, False
        if previous is not None:
            manifest = manifest.bumped()
        if dry_run:
            return manifest, False
        self.store.write(manifest, etag=stored.etag if stored else None, expect_absent=stored is None)
        return manifest, True

    def partition_output(self, scope: str, policy: dict | None = None) -> str:
        """What the reference's `partition` command prints for this run (the decision table,
        the diff, the epoch line), with any policy (its command line only has --t-max)."""
        from blobmap.cli import explain

        with decided(self.decided):
            result = partition_store(self.data, self.store, scope, policy=policy_of(policy), exclude=self.exclude)
            table = explain(read_arrays(self.data, scope, exclude=self.exclude), result.manifest)
        state = "written" if result.written else "not written"
        return f"{table}\n\n{result.diff.describe()}\n\nepoch {result.manifest.epoch}, {state}\n"

    def report_output(self, per_bucket: bool = False) -> str:
        """What the reference's `report [--per-bucket]` command prints (its own functions, run
        in-process so the decided mode applies)."""
        report_module = importlib.import_module("blobmap.report")
        from blobmap.storage import list_dirs

        saved = report_module.Trie
        if self.decided:
            report_module.Trie = _TrieKeyedByScope
        try:
            with decided(self.decided):
                prefixes = [p.strip("/") for p in list_dirs(self.data, "")] if per_bucket else [""]
                return report_module.render([report_module.report(self.data, self.store, p) for p in prefixes]) + "\n"
        finally:
            report_module.Trie = saved

    def manifests(self) -> list[Manifest]:
        """Every manifest in the directory the reference's reader accepts, parents before
        their nested scopes (when a parent and a child both place a marker on the same node,
        the one inserted last wins; the reference inserts in listing order, and lists a
        parent scope's manifest before those of the scopes below it on a local directory)."""
        out = []
        for path in self.manifests_dir.rglob("manifest.json"):
            scope = str(path.parent.relative_to(self.manifests_dir)).strip(".").strip("/")
            try:
                manifest = Manifest.loads(path.read_bytes())
            except ValueError:
                continue
            if manifest.scope.strip("/") == scope:
                out.append(manifest)
        return sorted(out, key=lambda m: (m.scope.strip("/").count("/") if m.scope.strip("/") else -1, m.scope))

    def trie(self) -> Trie:
        trie = Trie()
        trie.add_all(self.manifests())
        return trie

    def resolve(self, keys: Sequence[str], trie: Trie | None = None) -> list[str]:
        """What the reference's `resolve` prints after `->` for each key."""
        trie = trie or self.trie()
        with decided(self.decided):
            out = []
            for key in keys:
                r = trie.lookup(key)
                out.append(r.blob_id or r.kind)
            return out


def accepts(text: str | bytes) -> tuple[bool, str]:
    """Whether the reference's reader accepts a manifest document, and its message if not."""
    try:
        Manifest.loads(text)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def schema_accepts(document) -> tuple[bool, str]:
    try:
        validate_document(document)
    except ValueError as exc:
        return False, str(exc)
    return True, ""


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "resolve":
        ref = Reference(Path("."), Path(sys.argv[2]))
        keys = sys.argv[3:] or [line.rstrip("\n") for line in sys.stdin]
        for key, result in zip(keys, ref.resolve(keys)):
            print(f"{key}  ->  {result}")
    else:
        print(__doc__)
        sys.exit(2)
