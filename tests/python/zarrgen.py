"""Synthetic Zarr stores written as raw files, for the blob-manifest tests.

No zarr-python: metadata objects are written as the Zarr v2/v3 specifications lay them out
and every chunk (or shard) object is a run of filler bytes, 64 B unless told otherwise. A
store is described with `Store` (groups, arrays, strays, staging objects) and written with
`Store.write()`; `Store.objects` then lists every key written, relative to the data root,
with its size, and `Store.arrays` describes each array for key generation.

Covered layouts: v2 with `.` and `/` separators, v3 with the default and the v2 chunk key
encodings, v3 sharding (`sharding_indexed`), nested groups and datatrees, coordinates marked
by `_ARRAY_DIMENSIONS` (v2 `.zattrs`, v3 attributes) or by v3 `dimension_names` only,
partially written arrays, consolidated `.zmetadata`, stray objects, excluded staging
segments, root arrays, declared encodings that the keys contradict, and unreadable
metadata.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

V2_DTYPES = {"float32": "<f4", "float64": "<f8", "int16": "<i2", "uint8": "|u1", "int32": "<i4", "int64": "<i8"}
ITEMSIZE = {"float32": 4, "float64": 8, "int16": 2, "uint8": 1, "int32": 4, "int64": 8}


@dataclass
class ArraySpec:
    """One array of a store, enough to write it and to generate keys for it.

    `encoding` is the chunk key layout of the keys written: `v3_slash`, `v3_dot` (v3 default
    encoding with `.`), `v2_slash` or `v2_flat`. `declared` is what the metadata says when
    it differs (observed-beats-declared tests)."""

    path: str
    fmt: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str = "float32"
    encoding: str = "v3_slash"
    declared: str | None = None
    shards: tuple[int, ...] | None = None
    dims: tuple[str, ...] | None = None
    dims_as: str = "attrs"  # attrs | dimension_names | both
    written: float = 1.0
    object_size: int = 64
    broken: bool = False

    @property
    def object_shape(self) -> tuple[int, ...]:
        return self.shards or self.chunks

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(math.ceil(s / c) for s, c in zip(self.shape, self.object_shape))

    @property
    def chunk_prefix(self) -> str:
        """The key prefix under which the chunk objects live (relative to the store)."""
        if self.encoding in ("v3_slash", "v3_dot"):
            return f"{self.path}/c" if self.path else "c"
        return self.path

    def chunk_key(self, index: tuple[int, ...]) -> str:
        """The object key (relative to the store) of the chunk or shard at `index`."""
        parts = [str(i) for i in index]
        if self.encoding == "v3_slash":
            tail = "/".join(["c", *parts])
        elif self.encoding == "v3_dot":
            tail = ".".join(["c", *parts])
        elif self.encoding == "v2_slash":
            tail = "/".join(parts)
        else:
            tail = ".".join(parts)
        return f"{self.path}/{tail}" if self.path else tail

    def written_indices(self):
        rows = math.ceil(self.grid[0] * self.written) if self.grid else 0
        ranges = [range(rows)] + [range(g) for g in self.grid[1:]]
        return itertools.product(*ranges)


@dataclass
class Store:
    """A store to write under `scope` (a key prefix of the data root)."""

    scope: str
    fmt: int = 3
    arrays: list[ArraySpec] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    strays: list[tuple[str, int]] = field(default_factory=list)
    staging: list[str] = field(default_factory=list)
    consolidated: bool = False
    objects: dict[str, int] = field(default_factory=dict)

    def group(self, path: str) -> Store:
        """Add a group and its ancestors (the root group is always written)."""
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            g = "/".join(parts[:i])
            if g not in self.groups:
                self.groups.append(g)
        return self

    def array(self, path: str, shape, chunks, **kw) -> ArraySpec:
        """Add an array; its parent groups are added too. Keywords as in `ArraySpec`."""
        fmt = kw.pop("fmt", self.fmt)
        encoding = kw.pop("encoding", "v3_slash" if fmt == 3 else "v2_flat")
        spec = ArraySpec(path, fmt, tuple(shape), tuple(chunks), encoding=encoding, **kw)
        if "/" in path:
            self.group(path.rsplit("/", 1)[0])
        self.arrays.append(spec)
        return spec

    def coordinate(self, path: str, n: int, chunk: int | None = None, dims_as: str = "attrs", **kw) -> ArraySpec:
        """Add a 1-D coordinate array named after its own dimension."""
        name = path.rsplit("/", 1)[-1]
        return self.array(path, (n,), (chunk or n,), dims=(name,), dims_as=dims_as, dtype=kw.pop("dtype", "float64"), **kw)

    def stray(self, path: str, size: int = 64) -> Store:
        """Add an object that belongs to no array (relative to the store)."""
        self.strays.append((path, size))
        return self

    def stage(self, path: str) -> Store:
        """Add an object under an excluded staging segment such as `.sgwtmp`."""
        self.staging.append(path)
        return self

    # -- writing -----------------------------------------------------------

    def write(self, root: Path) -> Store:
        """Write the store below `root`; fills `objects` (data-root-relative key -> size)."""
        base = root / self.scope if self.scope else root
        base.mkdir(parents=True, exist_ok=True)
        metadata: dict[str, dict] = {}

        def put(rel: str, body: bytes) -> None:
            target = base / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
            key = f"{self.scope}/{rel}" if self.scope else rel
            self.objects[key] = len(body)

        def put_json(rel: str, doc: dict) -> None:
            metadata[rel] = doc
            put(rel, json.dumps(doc, indent=2).encode())

        for g in ["", *self.groups]:
            if any(a.path == g for a in self.arrays):
                continue  # an array lives here (root array)
            name = (f"{g}/" if g else "")
            if self.fmt == 3:
                put_json(f"{name}zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {}})
            else:
                put_json(f"{name}.zgroup", {"zarr_format": 2})
                if not g:
                    put_json(".zattrs", {"title": "synthetic"})

        for a in self.arrays:
            name = f"{a.path}/" if a.path else ""
            if a.broken:
                put(f"{name}{'zarr.json' if a.fmt == 3 else '.zarray'}", b"{not json")
            elif a.fmt == 3:
                put_json(f"{name}zarr.json", _v3_array(a))
            else:
                put_json(f"{name}.zarray", _v2_array(a))
                if a.dims and a.dims_as in ("attrs", "both"):
                    put_json(f"{name}.zattrs", {"_ARRAY_DIMENSIONS": list(a.dims), "units": "K"})
            for index in a.written_indices():
                put(a.chunk_key(index), b"\x5a" * a.object_size)

        for rel, size in self.strays:
            put(rel, b"s" * size)
        for rel in self.staging:
            put(rel, b"t" * 64)

        if self.consolidated:
            if self.fmt == 2:
                doc = {"metadata": {k: v for k, v in metadata.items()}, "zarr_consolidated_format": 1}
                put(".zmetadata", json.dumps(doc, indent=2).encode())
            else:
                root_doc = metadata.get("zarr.json") or {"zarr_format": 3, "node_type": "group", "attributes": {}}
                if root_doc.get("node_type") == "group":
                    inner = {k[: -len("/zarr.json")]: v for k, v in metadata.items() if k.endswith("/zarr.json")}
                    root_doc = dict(root_doc, consolidated_metadata={"kind": "inline", "must_understand": False, "metadata": inner})
                    put("zarr.json", json.dumps(root_doc, indent=2).encode())
        return self

    def data_keys(self) -> list[str]:
        return list(self.objects)


def _v3_array(a: ArraySpec) -> dict:
    encoding = a.declared or a.encoding
    if encoding in ("v3_slash", "v3_dot"):
        key_encoding = {"name": "default", "configuration": {"separator": "/" if encoding == "v3_slash" else "."}}
    else:
        key_encoding = {"name": "v2", "configuration": {"separator": "/" if encoding == "v2_slash" else "."}}
    codecs: list[dict] = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 0, "checksum": False}}]
    if a.shards:
        codecs = [{
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(a.chunks),
                "codecs": codecs,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end",
            },
        }]
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(a.shape),
        "data_type": a.dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(a.object_shape)}},
        "chunk_key_encoding": key_encoding,
        "fill_value": 0,
        "codecs": codecs,
        "attributes": {},
    }
    if a.dims and a.dims_as in ("attrs", "both"):
        doc["attributes"] = {"_ARRAY_DIMENSIONS": list(a.dims), "units": "K"}
    if a.dims and a.dims_as in ("dimension_names", "both"):
        doc["dimension_names"] = list(a.dims)
    return doc


def _v2_array(a: ArraySpec) -> dict:
    encoding = a.declared or a.encoding
    doc = {
        "zarr_format": 2,
        "shape": list(a.shape),
        "chunks": list(a.chunks),
        "dtype": V2_DTYPES[a.dtype],
        "compressor": {"id": "zstd", "level": 0},
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
    if encoding == "v2_slash":
        doc["dimension_separator"] = "/"
    return doc
