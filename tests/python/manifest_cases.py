"""The stores the blob-manifest differential tests partition, and the policies they use.

Each `Case` builds one store (or, for nested scopes, several) with `zarrgen` and names the
scope to partition and the policy. Tiny policies make 64 B objects behave like a large
archive: with `t_max` 1280 B a 40-object array is bucketed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from zarrgen import Store

DEFAULT = {"t_max_bytes": 100 * 1024**3, "t_min_bytes": 0, "t_hot_bytes": 16 * 1024**2, "width_clamp": 8, "pow2_floor": 64}
TINY = {"t_max_bytes": 1280, "t_min_bytes": 0, "t_hot_bytes": 32, "width_clamp": 8, "pow2_floor": 1 << 40}
COALESCE = {"t_max_bytes": 1280, "t_min_bytes": 600, "t_hot_bytes": 32, "width_clamp": 8, "pow2_floor": 1 << 40}
ROUNDING = {"t_max_bytes": 1500, "t_min_bytes": 0, "t_hot_bytes": 32, "width_clamp": 64, "pow2_floor": 4}


@dataclass
class Case:
    """One partition target: `build()` returns the stores to write, `scope` is partitioned."""

    name: str
    scope: str
    build: Callable[[], list[Store]]
    policy: dict = field(default_factory=lambda: dict(TINY))
    notes: str = ""
    # decisions of DECISIONS.md this case exercises (names of ALLOWED entries)
    decisions: tuple[str, ...] = ()


def _climate(s: Store, prefix: str = "", encoding: str | None = None, time_n: int = 400) -> Store:
    """tas (400,4,4)/(10,4,4): 40 objects; pr (200,4,4)/(10,4,4): 20; time and lat coordinates."""
    kw = {"encoding": encoding} if encoding else {}
    p = f"{prefix}/" if prefix else ""
    s.array(f"{p}tas", (400, 4, 4), (10, 4, 4), dims=("time", "lat", "lon"), **kw)
    s.array(f"{p}pr", (200, 4, 4), (10, 4, 4), dims=("time", "lat", "lon"), **kw)
    s.coordinate(f"{p}time", time_n, 100, **kw)
    s.coordinate(f"{p}lat", 4, **kw)
    return s


def v2_flat():
    return [_climate(Store("cordex/v2_flat.zarr", fmt=2))]


def v2_slash():
    return [_climate(Store("cordex/v2_slash.zarr", fmt=2), encoding="v2_slash")]


def v3_default():
    return [_climate(Store("cordex/v3_default.zarr", fmt=3))]


def v3_v2keys_dot():
    return [_climate(Store("cordex/v3_v2keys_dot.zarr", fmt=3), encoding="v2_flat")]


def v3_v2keys_slash():
    return [_climate(Store("cordex/v3_v2keys_slash.zarr", fmt=3), encoding="v2_slash")]


def v3_sharded():
    s = Store("era5/sharded.zarr", fmt=3)
    s.array("tas", (400, 4, 4), (10, 4, 4), shards=(40, 4, 4), object_size=512, dims=("time", "lat", "lon"))
    s.array("u10", (800, 4, 4), (10, 2, 2), shards=(20, 4, 4), object_size=256)
    s.array("small", (40, 4), (10, 4), shards=(20, 4))
    s.coordinate("time", 800, 100)
    return [s]


def v3_datatree():
    s = Store("healpix/tree.zarr", fmt=3)
    for zoom in (0, 1, 2):
        s.array(f"zoom_{zoom}/tas", (400, 4 * (zoom + 1)), (10, 4 * (zoom + 1)), dims=("time", "cell"))
        s.array(f"zoom_{zoom}/pr", (100, 4), (10, 4), dims=("time", "cell"))
        s.coordinate(f"zoom_{zoom}/time", 400, 100)
        s.coordinate(f"zoom_{zoom}/cell", 4 * (zoom + 1))
    deep = "multiscales/zoom_10/region/eu/daily"
    s.array(f"{deep}/tas", (300, 4), (10, 4), dims=("time", "cell"))
    s.coordinate(f"{deep}/time", 300, 100)
    s.array("multiscales/zoom_9/tas", (20, 4), (10, 4))
    s.array("multiscales/zoom_90/tas", (400, 4), (10, 4))
    return [s]


def v2_nested_groups():
    s = Store("cmip6/nested.zarr", fmt=2)
    _climate(s, "atmos/day")
    _climate(s, "ocean/mon", encoding="v2_slash")
    s.array("atmos/fx/orog", (4, 4), (4, 4))
    s.group("empty/group")
    return [s]


def v3_dimension_names():
    s = Store("cordex/dimnames.zarr", fmt=3)
    s.array("tas", (400, 4, 4), (10, 4, 4), dims=("time", "lat", "lon"), dims_as="dimension_names")
    s.coordinate("time", 400, 10, dims_as="dimension_names")
    s.coordinate("lat", 40, 10, dims_as="dimension_names")
    s.coordinate("lon", 4, dims_as="both")
    s.array("station", (40,), (10,), dims=("id",), dims_as="dimension_names")
    return [s]


def v2_partial():
    s = Store("cordex/partial.zarr", fmt=2)
    s.array("tas", (400, 4, 4), (10, 4, 4), written=0.5, dims=("time", "lat", "lon"))
    s.array("pr", (400, 4, 4), (10, 4, 4), written=0.1, object_size=40)
    s.array("empty", (400, 4, 4), (10, 4, 4), written=0.0)
    s.coordinate("time", 400, 100)
    return [s]


def v3_partial_sharded():
    s = Store("cordex/partial_v3.zarr", fmt=3)
    s.array("tas", (400, 4, 4), (10, 4, 4), written=0.3)
    s.array("psl", (800, 4), (10, 4), shards=(40, 4), written=0.5, object_size=200)
    return [s]


def v2_consolidated_strays():
    s = _climate(Store("cordex/consolidated.zarr", fmt=2, consolidated=True))
    s.stray("README.md", 300).stray("tas/notes.txt", 64).stray("atmos/notes.txt", 64)
    s.stage(".sgwtmp/multipart/upload-1").stage("tas/.sgwtmp/part-3").stage(".versitygw/x/y")
    return [s]


def v3_consolidated_strays():
    s = _climate(Store("cordex/consolidated_v3.zarr", fmt=3, consolidated=True))
    s.stray("provenance.txt", 100).stray("grp/loose/object.bin", 2000)
    s.group("grp")
    s.stage(".sgwtmp/staging-abc").stage("pr/c/.sgwtmp/9/0/0").stage(".snapshot/daily/tas/c/0/0/0")
    return [s]


def one_dimensional():
    s = Store("obs/series.zarr", fmt=2)
    s.array("flat", (4000,), (100,))
    s.array("slashed", (4000,), (100,), encoding="v2_slash")
    s.array("declared_dot_keys_slash", (400, 4), (10, 4), encoding="v2_slash", declared="v2_flat")
    s.array("declared_slash_keys_dot", (400, 4), (10, 4), encoding="v2_flat", declared="v2_slash")
    s.coordinate("time", 4000, 100)
    return [s]


def v3_one_dimensional():
    s = Store("obs/series_v3.zarr", fmt=3)
    s.array("flat", (4000,), (100,), encoding="v2_flat")
    s.array("slashed", (4000,), (100,), encoding="v2_slash")
    s.array("default", (4000,), (100,))
    s.array("declared_v2_keys_c", (400, 4), (10, 4), encoding="v3_slash", declared="v2_slash")
    return [s]


def multi_chunked():
    s = Store("cordex/multichunk.zarr", fmt=3)
    s.array("tas", (400, 8, 8), (10, 4, 4), dims=("time", "lat", "lon"))
    s.array("pr", (400, 8, 8), (20, 2, 8), encoding="v2_flat", object_size=32)
    s.array("hurs", (400, 8, 8), (40, 8, 2), fmt=3, encoding="v2_slash", object_size=100)
    return [s]


def collisions():
    s = Store("cordex/collide.zarr", fmt=3)
    s.array("a-b", (400, 4), (10, 4))
    s.array("a_b", (400, 4), (10, 4))
    s.array("A.B", (400, 4), (10, 4))
    s.array("x-y", (8, 4), (4, 4))
    s.array("x_y", (8, 4), (4, 4))
    s.array("pr_c", (400, 4), (10, 4))
    s.array("pr", (8, 4), (4, 4))
    s.array("__", (400, 4), (10, 4))
    return [s]


def non_ascii():
    s = Store("cordex/unicode.zarr", fmt=3)
    s.array("température", (400, 4), (10, 4))
    s.array("niederschlag_ü", (8, 4), (4, 4))
    s.array("tas", (400, 4), (10, 4))
    return [s]


def group_named_c():
    s = Store("cordex/group_c.zarr", fmt=3)
    s.array("c/tas", (400, 4), (10, 4))
    s.array("c/c", (400, 4), (10, 4))
    s.array("g/c/pr", (200, 4), (10, 4), encoding="v2_slash")
    return [s]


def v2_group_named_c():
    s = Store("cordex/group_c_v2.zarr", fmt=2)
    s.array("c/tas", (400, 4), (10, 4))
    s.array("c/0", (400, 4), (10, 4), encoding="v2_slash")
    return [s]


def _large(s: Store) -> Store:
    """Arrays that clear the default t_hot (16 MiB): 1 MiB objects, and a declared grid of
    40 MB objects with nothing written yet (sized from its shape)."""
    s.array("tas", (20, 512, 512), (1, 512, 512), object_size=1 << 20, dims=("time", "lat", "lon"))
    s.array("pr", (1000, 100, 100), (10, 100, 100), written=0.0)
    s.array("small", (4, 4), (4, 4))
    s.coordinate("time", 20, 20)
    return s


def default_small_v3():
    return [_large(Store("cmip6/small_v3.zarr", fmt=3))]


def default_small_v2_strays():
    s = _large(Store("cmip6/small_v2.zarr", fmt=2))
    s.stray("README", 10).stray("notes/a.txt", 10)
    return [s]


def coalesce_v2():
    s = Store("cmip6/coalesce.zarr", fmt=2)
    for name, n in (("a", 8), ("b", 2), ("c", 4), ("d", 12), ("e", 6), ("f", 1)):
        s.array(name, (n * 4, 4), (4, 4), object_size=64)
    s.array("big", (400, 4), (10, 4))
    s.coordinate("time", 400, 100)
    return [s]


def coalesce_v3_tail():
    s = Store("cmip6/coalesce_v3.zarr", fmt=3)
    for name, n in (("hurs", 12), ("pr", 4), ("ps", 3), ("uas", 1), ("vas", 1)):
        s.array(name, (n * 4, 4), (4, 4), object_size=64)
    s.array("tas", (400, 4, 4), (10, 4, 4))
    return [s]


def pow2_rounding():
    s = Store("era5/rounding.zarr", fmt=3)
    s.array("tas", (4000, 4), (10, 4), object_size=100)
    s.array("pr", (4000, 4), (10, 4), object_size=30)
    s.array("q", (400, 4), (10, 4), object_size=200)
    return [s]


def root_array_v3():
    s = Store("single/root_v3.zarr", fmt=3)
    s.array("", (400, 4), (10, 4))
    return [s]


def root_array_v2():
    s = Store("single/root_v2.zarr", fmt=2)
    s.array("", (400, 4), (10, 4))
    return [s]


def mixed_encodings():
    s = Store("cordex/mixed.zarr", fmt=3)
    s.array("v3", (400, 4), (10, 4))
    s.array("v2slash", (400, 4), (10, 4), encoding="v2_slash")
    s.array("v2flat", (400, 4), (10, 4), encoding="v2_flat")
    s.array("legacy", (400, 4), (10, 4), fmt=2, encoding="v2_flat")
    s.array("legacy_slash", (400, 4), (10, 4), fmt=2, encoding="v2_slash")
    return [s]


def unreadable():
    s = Store("cordex/unreadable.zarr", fmt=2)
    _climate(s)
    s.array("broken", (400, 4), (10, 4), broken=True)
    s.array("bytes", (400, 4), (10, 4), dtype="uint8", object_size=64)
    return [s]


def nested_parent():
    """A parent scope covering three stores; the child scope gets its own manifest too."""
    stores = [
        _climate(Store("nested/eur11.zarr", fmt=3)),
        _climate(Store("nested/afr44.zarr", fmt=2)),
        _climate(Store("nested/sub/deep.zarr", fmt=3), encoding="v2_slash"),
    ]
    return stores


CASES = [
    Case("v2_flat", "cordex/v2_flat.zarr", v2_flat),
    Case("v2_slash", "cordex/v2_slash.zarr", v2_slash),
    Case("v3_default", "cordex/v3_default.zarr", v3_default),
    Case("v3_v2keys_dot", "cordex/v3_v2keys_dot.zarr", v3_v2keys_dot),
    Case("v3_v2keys_slash", "cordex/v3_v2keys_slash.zarr", v3_v2keys_slash),
    Case("v3_sharded", "era5/sharded.zarr", v3_sharded, dict(TINY, t_max_bytes=2048)),
    Case("v3_datatree", "healpix/tree.zarr", v3_datatree),
    Case("v2_nested_groups", "cmip6/nested.zarr", v2_nested_groups),
    Case("v3_dimension_names", "cordex/dimnames.zarr", v3_dimension_names, decisions=("v3 dimension_names",)),
    Case("v2_partial", "cordex/partial.zarr", v2_partial),
    Case("v3_partial_sharded", "cordex/partial_v3.zarr", v3_partial_sharded),
    Case("v2_consolidated_strays", "cordex/consolidated.zarr", v2_consolidated_strays),
    Case("v3_consolidated_strays", "cordex/consolidated_v3.zarr", v3_consolidated_strays),
    Case("one_dimensional", "obs/series.zarr", one_dimensional),
    Case("v3_one_dimensional", "obs/series_v3.zarr", v3_one_dimensional),
    Case("multi_chunked", "cordex/multichunk.zarr", multi_chunked),
    Case("collisions", "cordex/collide.zarr", collisions),
    Case("non_ascii", "cordex/unicode.zarr", non_ascii, decisions=("ascii ids",)),
    Case("group_named_c", "cordex/group_c.zarr", group_named_c),
    Case("v2_group_named_c", "cordex/group_c_v2.zarr", v2_group_named_c),
    Case("default_small_v3", "cmip6/small_v3.zarr", default_small_v3, dict(DEFAULT)),
    Case("default_small_v2_strays", "cmip6/small_v2.zarr", default_small_v2_strays, dict(DEFAULT)),
    Case("coalesce_v2", "cmip6/coalesce.zarr", coalesce_v2, dict(COALESCE)),
    Case("coalesce_v3_tail", "cmip6/coalesce_v3.zarr", coalesce_v3_tail, dict(COALESCE, t_min_bytes=1000)),
    Case("pow2_rounding", "era5/rounding.zarr", pow2_rounding, dict(ROUNDING)),
    Case("root_array_v3", "single/root_v3.zarr", root_array_v3, decisions=('an array at the scope root has path ""',)),
    Case("root_array_v2", "single/root_v2.zarr", root_array_v2, decisions=('an array at the scope root has path ""',)),
    Case("mixed_encodings", "cordex/mixed.zarr", mixed_encodings),
    Case("unreadable", "cordex/unreadable.zarr", unreadable),
    Case("nested_parent", "nested", nested_parent),
    Case("nested_child", "nested/eur11.zarr", lambda: [], dict(TINY, t_max_bytes=1000)),
]
