"""The data portal as its users meet it: convert a NetCDF file, follow its status, open the
store with xarray over HTTP (zarr-python 3 through fsspec, with the bearer header) and find
every value netCDF4-python reads from the source; and the refusals a stranger meets."""

import concurrent.futures
import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import xarray as xr


def write_source(path):
    """A NetCDF-4 file with a packed integer variable, fill values, NaNs, a 0-d variable, a
    char variable, a string variable and an unlimited time axis in CF units."""
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "portal <test>"
        nc.createDimension("time", None)
        nc.createDimension("lat", 5)
        nc.createDimension("lon", 7)
        nc.createDimension("nchar", 4)
        time = nc.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time.calendar = "noleap"
        time.standard_name = "time"
        time[:] = np.arange(6) * 30.0
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = np.linspace(-60, 60, 5)
        lon = nc.createVariable("lon", "f4", ("lon",))
        lon.units = "degrees_east"
        lon[:] = np.linspace(0, 300, 7)
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), fill_value=np.float32(1e20))
        tas.units = "K"
        tas.comment = "<script>alert('x')</script>"
        values = np.arange(6 * 5 * 7, dtype="f4").reshape(6, 5, 7) + 200
        values[0, 0, 0] = np.nan
        tas[:] = np.ma.masked_where(values == 201, values)
        pr = nc.createVariable("pr", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767))
        pr.scale_factor = 0.01
        pr.add_offset = 1.0
        pr.set_auto_maskandscale(False)
        raw = (np.arange(6 * 5 * 7).reshape(6, 5, 7) % 1000).astype("i2")
        raw[1, 2, 3] = -32767
        pr[:] = raw
        height = nc.createVariable("height", "f8", ())
        height.units = "m"
        height[...] = 2.0
        label = nc.createVariable("label", "S1", ("nchar",))
        label[:] = netCDF4.stringtochar(np.array(["abcd"], dtype="S4"))[0]
        station = nc.createVariable("station", str, ("lat",))
        station.long_name = "station name"
        station[:] = np.array(["Hamburg", "Zürich", "", "a <b>", "x" * 300], dtype=object)
        site = nc.createVariable("site", str, ("lon",), fill_value="missing")
        site[0] = "first"
        site[6] = "last"


def comparable(values):
    """Values as assert_array_equal compares them: in an array of strings, xarray's NaN for
    a masked (fill) element becomes None, since NaN != NaN among Python objects."""
    if values.dtype != object:
        return values
    return np.array([None if isinstance(v, float) and np.isnan(v) else v for v in values.ravel()], dtype=object).reshape(values.shape)


def wait_ready(base, headers, url, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        status = requests.get(f"{base}/data-portal/zarr-utils/status", params={"url": url}, headers=headers, timeout=10)
        assert status.status_code == 200, status.text
        body = status.json()
        if body["status"] != 2 or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


@pytest.fixture(scope="module")
def portal(daemon, tmp_path_factory):
    source_dir = daemon.data / "sources"
    source_dir.mkdir()
    source = source_dir / "tas.nc"
    write_source(source)
    token = daemon.token_file(tmp_path_factory.mktemp("tok") / "jane.json", "jane")
    headers = {"Authorization": f"Bearer {token}"}
    answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": [str(source)]}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    assert url.startswith(f"{daemon.base}/data-portal/zarr/") and url.endswith(".zarr")
    assert wait_ready(daemon.base, headers, url) == {"status": 0, "reason": ""}
    return source, url, headers


@pytest.mark.parametrize("decode_times", [True, False])
def test_xarray_reads_every_value_of_the_source(portal, decode_times):
    source, url, headers = portal
    served = xr.open_zarr(url, storage_options={"headers": headers}, consolidated=True, decode_times=decode_times)
    with xr.open_dataset(source, engine="netcdf4", decode_times=decode_times) as expected:
        expected = expected.load()
        served = served.load()
        assert set(served.variables) == set(expected.variables)
        for name, variable in expected.variables.items():
            np.testing.assert_array_equal(comparable(served[name].values), comparable(variable.values), err_msg=name)
            assert served[name].dims == variable.dims, name
        assert served.attrs == expected.attrs
        assert served["tas"].attrs["units"] == "K"
        assert np.isnan(served["tas"].values[0, 0, 0]) and np.isnan(served["tas"].values[0, 0, 1])
        assert np.isnan(served["pr"].values[1, 2, 3])


@pytest.mark.parametrize("compression", ["zstd", "bzip2"])
def test_a_source_compressed_by_a_filter_plugin_converts_with_every_value(daemon, compression, tmp_path):
    """HDF5 loads the filter of a zstd or bzip2 variable from a plugin (`HDF5_PLUGIN_PATH`,
    here netCDF4's, which it sets as it is imported), as it reads the first chunk: in the
    conversion's confined process, which could open neither the plugin nor the libraries it
    needs, so they are loaded before it is forked."""
    import os

    import netCDF4

    assert os.path.isdir(os.environ["HDF5_PLUGIN_PATH"]), "set by netCDF4"
    source = tmp_path / f"{compression}.nc"
    with netCDF4.Dataset(source, "w") as nc:
        nc.createDimension("time", 10)
        nc.createDimension("x", 50)
        variable = nc.createVariable("tas", "f4", ("time", "x"), compression=compression)
        variable[:] = np.arange(500, dtype="f4").reshape(10, 50)
    with netCDF4.Dataset(source) as nc:
        assert nc["tas"].filters()[compression]
    with daemon_of_its_own(daemon, tmp_path, tmp_path) as (convert, headers):
        url, status = convert(source)
        assert status == {"status": 0, "reason": ""}
        base = url.split("/data-portal/")[0]
        assert_ready_with_every_value(base, headers, url, source)


def test_raw_values_and_encoding_are_the_sources(portal):
    source, url, headers = portal
    served = xr.open_zarr(url, storage_options={"headers": headers}, decode_cf=False)
    with xr.open_dataset(source, engine="netcdf4", decode_cf=False) as expected:
        np.testing.assert_array_equal(served["pr"].values, expected["pr"].values)
        assert served["pr"].dtype == np.int16
        assert served["pr"].attrs["scale_factor"] == pytest.approx(0.01)
        assert served["time"].attrs["calendar"] == "noleap"


def test_keys_and_refusals(daemon, portal, tmp_path):
    _, url, headers = portal
    get = lambda key, **kw: requests.get(f"{url}/{key}", timeout=30, **kw)
    meta = get(".zmetadata", headers=headers)
    assert meta.status_code == 200 and meta.headers["content-type"] == "application/json"
    chunk = get("tas/0.0.0", headers=headers)
    assert chunk.status_code == 200 and chunk.headers["content-type"] == "application/octet-stream"
    assert chunk.content[:2] == b"\x02\x01", "Blosc header"
    # Chunks are compressed already: sent as stored, whatever the client accepts.
    assert "content-encoding" not in chunk.headers and "gzip" in chunk.request.headers["accept-encoding"]
    assert int(chunk.headers["content-length"]) == len(chunk.content)
    etag = chunk.headers["etag"]
    # Kept by a client, but asked for again before use: a store converted again serves other
    # bytes under the same URL.
    assert chunk.headers["cache-control"] == "private, no-cache"
    assert get("tas/0.0.0", headers={**headers, "If-None-Match": etag}).status_code == 304
    assert requests.head(f"{url}/tas/0.0.0", headers=headers, timeout=10).status_code == 200
    assert get("zarr.json", headers=headers).status_code == 404
    # A store is named by its token as the service writes it, as on the mount.
    base, name = url.rsplit("/", 1)
    token = name.removesuffix(".zarr")
    for spelling in (token.upper(), token.replace("-", ""), f"{{{token}}}", f"urn:uuid:{token}"):
        answer = requests.get(f"{base}/{spelling}.zarr/.zmetadata", headers=headers, timeout=10)
        assert answer.status_code == 404, spelling
    assert get("tas/99.0.0", headers=headers).status_code == 404
    # A key no chunk could have (another number of indices, leading zeros) is malformed: 400,
    # not the 404 clients read as fill values.
    for malformed in ("tas/0.0", "tas/0.0.0.0", "tas/00.0.0"):
        answer = get(malformed, headers=headers)
        assert answer.status_code == 400 and malformed in answer.json()["detail"], (malformed, answer.text)
    assert get("nothere/0", headers=headers).status_code == 404
    for bad in ("tas", ".zarray", "tas/abc", "tas/0..0"):
        answer = get(bad, headers=headers)
        assert answer.status_code == 400, (bad, answer.text)
        assert "detail" in answer.json()
    assert get(".zmetadata").status_code == 401, "no token on a private store"
    john = daemon.token_file(tmp_path / "john.json", "john")
    stranger = get(".zmetadata", headers={"Authorization": f"Bearer {john}"})
    unknown = requests.get(f"{daemon.base}/data-portal/zarr/00000000-0000-0000-0000-000000000000.zarr/.zmetadata", headers={"Authorization": f"Bearer {john}"}, timeout=10)
    assert stranger.status_code == unknown.status_code == 404
    status = requests.get(f"{daemon.base}/data-portal/zarr-utils/status", params={"url": url}, headers={"Authorization": f"Bearer {john}"}, timeout=10)
    assert status.status_code == 404
    # Two names of one store are one store; of two stores, the request is refused.
    token = url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
    status_url = f"{daemon.base}/data-portal/zarr-utils/status"
    same = requests.get(status_url, params={"url": url, "token": token}, headers=headers, timeout=10)
    assert same.status_code == 200, same.text
    other = requests.get(status_url, params={"url": url, "token": "00000000-0000-0000-0000-000000000000"}, headers=headers, timeout=10)
    assert other.status_code == 422 and "more than one store" in other.json()["detail"], other.text


def test_bad_requests_and_failed_sources(daemon, portal):
    _, _, headers = portal
    convert = f"{daemon.base}/data-portal/zarr/convert"
    answer = requests.post(convert, json={"path": ["/x.nc"], "chunk_size": 1000}, headers=headers, timeout=10)
    assert answer.status_code == 422 and "chunk_size" in answer.json()["detail"]
    # Both a body and query parameters: one of them would be dropped.
    answer = requests.post(convert, params={"path": "/y.nc"}, json={"path": ["/x.nc"]}, headers=headers, timeout=10)
    assert answer.status_code == 422 and "'path' given with a JSON body" in answer.json()["detail"], answer.text
    answer = requests.post(convert, json={"path": ["/x.nc"], "map_primary_chunksize": -1}, headers=headers, timeout=10)
    assert answer.status_code == 422 and "must not be negative, got -1" in answer.json()["detail"], answer.text
    answer = requests.post(convert, json={"path": ["/etc/shadow"]}, headers=headers, timeout=10)
    assert answer.status_code == 403 and "/etc/shadow" in answer.json()["detail"]
    assert requests.post(convert, json={"path": ["/x.nc"]}, timeout=10).status_code == 401
    bogus = daemon.data / "sources" / "bogus.nc"
    bogus.write_text("not netcdf")
    answer = requests.post(convert, params=[("path", str(bogus))], headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    status = wait_ready(daemon.base, headers, url)
    assert status["status"] == 1 and "bogus.nc" in status["reason"], status
    failed = requests.get(f"{url}/.zmetadata", headers=headers, timeout=10)
    assert failed.status_code == 500 and "bogus.nc" in failed.json()["detail"]


def test_a_source_whose_names_lead_out_of_its_store_writes_nothing_there(daemon, portal, tmp_path):
    """An HDF5 file may name a group `..` (netCDF-C reads it; it never makes one): a group
    `..`/<another store's token>/ holding `tas` would write into that store. Such names, and
    names that would take a metadata document's place, fail the conversion with their name,
    and nothing is written outside the new store's directory."""
    import h5netcdf

    _, victim_url, _ = portal
    victim = victim_url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
    stores = daemon.data / "stores"

    def tree():
        """Every path below the hot tier, and every file's bytes (directories as None)."""
        return {p: p.read_bytes() if p.is_file() else None for p in stores.rglob("*")}

    before = tree()
    top = set(daemon.data.iterdir())
    token = daemon.token_file(tmp_path / "mallory.json", "mallory")
    headers = {"Authorization": f"Bearer {token}"}
    sources = daemon.data / "sources"
    escaping = sources / "escaping.nc"
    with h5netcdf.File(escaping, "w") as f:
        f.dimensions = {"x": 4}
        f.create_variable("x", ("x",), data=np.arange(4, dtype="f4"))
        inside = f.create_group("..").create_group(victim)
        inside.dimensions = {"time": 2, "lat": 3, "lon": 4}
        inside.create_variable("tas", ("time", "lat", "lon"), data=np.full((2, 3, 4), 666, dtype="f4"))
    document = sources / "document.nc"
    with h5netcdf.File(document, "w") as f:
        f.dimensions = {"x": 4}
        f.create_variable(".zattrs", ("x",), data=np.arange(4, dtype="f4"))
    for path, name in ((escaping, ".."), (document, ".zattrs")):
        answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": [str(path)]}, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        [url] = answer.json()["urls"]
        status = wait_ready(daemon.base, headers, url)
        assert status["status"] == 1 and f'"{name}"' in status["reason"], status
        assert "cannot hold" in status["reason"], status
    # The failed stores' directories are gone, and nothing else below the hot tier or beside
    # it changed: no file or directory written, the other store's bytes as they were.
    assert tree() == before
    assert set(daemon.data.iterdir()) == top


def test_a_source_that_keeps_data_in_other_files_is_refused_before_any_is_read(daemon, tmp_path):
    """HDF5 lets a dataset's bytes live in other files: external raw storage (any byte range
    of any file), external links and virtual datasets. The NetCDF library follows them with
    the daemon's rights, so a user's file could copy the daemon's keys, or another user's
    data, into a store of its own. Each fails its store with a reason naming the object,
    and no byte of the other files reaches a store."""
    import os

    import h5py

    secret = tmp_path / "signing-key.pem"
    secret.write_bytes(b"-----BEGIN PRIVATE KEY----- not for users " * 2)
    secret.chmod(0o600)
    victim = tmp_path / "victim.h5"
    with h5py.File(victim, "w") as f:
        f["private"] = np.arange(10, dtype="f8") * 1.5
    victim.chmod(0o600)
    sources = daemon.data / "sources"
    sources.mkdir(exist_ok=True)
    made = {}
    # External raw storage: the dataset's bytes are the secret's.
    path = sources / "external-storage.nc"
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f.create_dataset("key", shape=(64,), dtype="u1", external=[(str(secret), 0, 64)])
    made[path] = "/key keeps its data in other files"
    # An external link to another file's dataset.
    path = sources / "external-link.nc"
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f["x"] = np.arange(3, dtype="f4")
        f["linked"] = h5py.ExternalLink(str(victim), "/private")
    made[path] = "/linked is a link to another file"
    # An external link to a FIFO: following it would hold the NetCDF library's open (and its
    # process-wide lock) until someone writes to the FIFO.
    fifo = tmp_path / "never-written.h5"
    os.mkfifo(fifo)
    path = sources / "external-fifo.nc"
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f["stalls"] = h5py.ExternalLink(str(fifo), "/x")
    made[path] = "/stalls is a link to another file"
    # A virtual dataset of another file's.
    path = sources / "virtual.nc"
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        layout = h5py.VirtualLayout(shape=(10,), dtype="f8")
        layout[:] = h5py.VirtualSource(str(victim), "private", shape=(10,))
        f.create_virtual_dataset("virtual", layout)
    made[path] = "/virtual is a virtual dataset of other files"
    # And groups nested deeper than the libraries' recursion should be asked to go.
    path = sources / "deep.nc"
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        group = f
        for depth in range(70):
            group = group.create_group(f"g{depth}")
    made[path] = "groups nested more than 64 deep"
    token = daemon.token_file(tmp_path / "mallory.json", "mallory")
    headers = {"Authorization": f"Bearer {token}"}
    for path, reason in made.items():
        answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": [str(path)]}, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        [url] = answer.json()["urls"]
        status = wait_ready(daemon.base, headers, url)
        assert status["status"] == 1 and reason in status["reason"] and path.name in status["reason"], status
        store = daemon.data / "stores" / url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
        assert not store.exists(), sorted(store.rglob("*"))
        for key in ("key/0", "linked/0", "virtual/0"):
            chunk = requests.get(f"{url}/{key}", headers=headers, timeout=30)
            assert chunk.status_code in (404, 500), (key, chunk.status_code)
    # The files do reach the data (h5py follows them): the refusal keeps it out.
    with h5py.File(sources / "external-storage.nc") as f:
        assert bytes(f["key"][:]) == secret.read_bytes()[:64]


def test_share_urls_open_without_a_token_and_refuse_forgeries(daemon, portal, tmp_path):
    source, url, headers = portal
    share = f"{daemon.base}/data-portal/share-zarr"
    answer = requests.post(share, json={"path": url, "ttl_seconds": 600}, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    record = answer.json()
    assert set(record) == {"url", "sig", "token", "expires", "method"}
    assert record["method"] == "GET" and record["token"] in url
    assert record["expires"] - time.time() == pytest.approx(600, abs=30)
    shared = record["url"]
    assert shared == f"{daemon.base}/data-portal/share/{record['sig']}/{record['token']}.zarr"
    # The query form, with the trailing slash, as freva-client's older versions send it.
    again = requests.post(f"{share}/", params={"path": url}, headers=headers, timeout=10)
    assert again.status_code == 200, again.text
    assert again.json()["expires"] - time.time() == pytest.approx(86400, abs=30)
    # Anyone with the URL reads the store, with no token.
    served = xr.open_zarr(shared, consolidated=True)
    with xr.open_dataset(source, engine="netcdf4") as expected:
        np.testing.assert_array_equal(served["tas"].values, expected["tas"].values)
    chunk = requests.get(f"{shared}/tas/0.0.0", timeout=10)
    assert chunk.status_code == 200 and chunk.headers["content-type"] == "application/octet-stream"
    # Forged, truncated or re-dated signatures are 403.
    sig = record["sig"]
    expires, tag = sig.split(".")
    for forged in (sig[:-3], f"{int(expires) + 1000}.{tag}", f"{expires}.{'A' * len(tag)}", "nonsense"):
        answer = requests.get(f"{daemon.base}/data-portal/share/{forged}/{record['token']}.zarr/.zmetadata", timeout=10)
        assert answer.status_code == 403, (forged, answer.text)
    # A signature of one store opens no other.
    other = requests.get(f"{daemon.base}/data-portal/share/{sig}/00000000-0000-0000-0000-000000000000.zarr/.zmetadata", timeout=10)
    assert other.status_code == 403
    # Bad requests.
    assert requests.post(share, json={"path": "https://example.org/x.zarr"}, headers=headers, timeout=10).status_code == 400
    bad_ttl = requests.post(share, json={"path": url, "ttl_seconds": 59}, headers=headers, timeout=10)
    assert bad_ttl.status_code == 422 and "ttl_seconds" in bad_ttl.json()["detail"]
    assert requests.post(share, json={"path": url}, timeout=10).status_code == 401
    john = daemon.token_file(tmp_path / "john.json", "john")
    stranger = requests.post(share, json={"path": url}, headers={"Authorization": f"Bearer {john}"}, timeout=10)
    assert stranger.status_code == 404


def test_a_public_conversion_answers_share_urls(daemon, portal):
    _, _, headers = portal
    # A file of its own: making the shared fixture's store public would change other tests.
    source = daemon.data / "sources" / "public.nc"
    write_source(source)
    answer = requests.post(
        f"{daemon.base}/data-portal/zarr/convert",
        json={"path": [str(source)], "public": True, "ttl_seconds": 3600},
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    assert "/data-portal/share/" in url, url
    token = url.rsplit("/", 1)[1]
    private_url = f"{daemon.base}/data-portal/zarr/{token}"
    assert wait_ready(daemon.base, headers, private_url)["status"] == 0
    served = xr.open_zarr(url, consolidated=True)
    with xr.open_dataset(source, engine="netcdf4") as expected:
        np.testing.assert_array_equal(served["tas"].values, expected["tas"].values)
    # The store itself is public until then too.
    assert requests.get(f"{private_url}/.zmetadata", timeout=10).status_code == 200


def test_the_html_summary_escapes_everything(daemon, portal, tmp_path):
    _, url, headers = portal
    page = requests.get(f"{daemon.base}/data-portal/zarr-utils/html", params={"url": url}, headers=headers, timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    assert "<script>" not in text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in text
    assert "portal &lt;test&gt;" in text
    for name in ("tas", "pr", "time", "lat", "lon", "Dimensions", "Coordinates", "Variables"):
        assert name in text, name
    assert requests.get(f"{daemon.base}/data-portal/zarr-utils/html", params={"url": url}, timeout=10).status_code == 401
    john = daemon.token_file(tmp_path / "john.json", "john")
    stranger = requests.get(f"{daemon.base}/data-portal/zarr-utils/html", params={"url": url}, headers={"Authorization": f"Bearer {john}"}, timeout=10)
    assert stranger.status_code == 404


def a_long_conversion_begun(daemon, tmp_path, netcdf_format="NETCDF4", options=None, workers=2, stores_on=None, **settings):
    """A daemon of its own (its data in `tmp_path / "svcd"`, `workers` conversions at once,
    its stores in the directory `stores_on` if given, with the `SVCD_*` `settings` given)
    converting a 155 MB source of 600 time steps (random values) in `netcdf_format`, with
    conversion `options`, once it wrote a few chunks: the daemon's process, its base URL, the environment it runs with,
    the headers of jane's token, the store's URL, the store's `tas` directory, the source."""
    import os

    import netCDF4

    from conftest import Svcd, serve

    data = tmp_path / "svcd"
    data.mkdir()
    source = data / "big.nc"
    with netCDF4.Dataset(source, "w", format=netcdf_format) as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 180)
        nc.createDimension("lon", 360)
        var = nc.createVariable("tas", "f4", ("time", "lat", "lon"))
        for start in range(0, 600, 100):
            var[start:start + 100] = np.random.default_rng(start).random((100, 180, 360), dtype="f4")
    if stores_on is not None:
        (data / "stores").symlink_to(stores_on)
    env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(data), SVCD_STORES_WORKERS=str(workers), **{k: str(v) for k, v in settings.items()})
    proc, host = serve(daemon.binary, data, env)
    base = f"{host}/api/svc-nextgen"
    token = Svcd(base, host, data, daemon.binary).token_file(tmp_path / "jane.json", "jane")
    headers = {"Authorization": f"Bearer {token}"}
    answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(source)], **(options or {})}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    store_dir = data / "stores" / url.rsplit("/", 1)[1].removesuffix(".zarr") / "tas"
    deadline = time.monotonic() + 60
    while not (store_dir.exists() and len(list(store_dir.iterdir())) > 5):
        assert time.monotonic() < deadline, "the conversion did not start"
        time.sleep(0.01)
    return proc, base, env, headers, url, store_dir, source


def assert_ready_with_every_value(base, headers, url, source):
    """The store at `url` ends ready, and xarray reads from it every value of `tas` in
    `source`."""
    assert wait_ready(base, headers, url, timeout=300) == {"status": 0, "reason": ""}
    served = xr.open_zarr(url, storage_options={"headers": headers})
    with xr.open_dataset(source, engine="netcdf4") as expected:
        np.testing.assert_array_equal(served["tas"].values, expected["tas"].values)


def assert_ready_after_a_restart(daemon, data, env, base, headers, url, source):
    """A daemon started again on `data` with `env` (the one of `base` stopped) brings the
    store at `url` to ready with every value of `tas` in `source`."""
    from conftest import serve

    proc, host = serve(daemon.binary, data, env)
    try:
        url = url.replace(base, f"{host}/api/svc-nextgen")
        base = f"{host}/api/svc-nextgen"
        assert_ready_with_every_value(base, headers, url, source)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_conversion_killed_midway_resumes_after_a_restart(daemon, tmp_path):
    """`kill -9` while a store is being written: after a restart the queued job runs again
    and the store ends ready with every value, and no chunk read ever answered 404."""
    import os
    import signal

    from conftest import serve

    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path)
    data = tmp_path / "svcd"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    written = len(list(store_dir.iterdir()))
    assert written < 600, f"killed too late: {written} chunks already written"
    (data / "svcd.addr").unlink()  # left by the killed daemon
    proc, host = serve(daemon.binary, data, env)
    try:
        url = url.replace(base, f"{host}/api/svc-nextgen")
        base = f"{host}/api/svc-nextgen"
        # A chunk asked for while the store is written again is waited for, never a 404.
        last = requests.get(f"{url}/tas/599.0.0", headers=headers, params={"timeout": 120}, timeout=130)
        assert last.status_code == 200, last.text
        assert_ready_with_every_value(base, headers, url, source)
        # It was computed from the source before the conversion wrote it: the same bytes.
        assert (store_dir / "599.0.0").read_bytes() == last.content
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_service_stop_that_signals_every_process_leaves_the_conversion_queued(daemon, tmp_path):
    """systemd stops a service by sending SIGTERM to every process in it, the conversion's
    own process among them (and Ctrl-C reaches the whole process group): the conversion is
    interrupted by the daemon as it stops, not failed by the signal, and after a restart it
    runs again and the store ends ready with every value."""
    import math
    import os
    import signal

    # NetCDF-3 read as long time series (each chunk gathered from every time step): slow
    # enough for the stop to come midway.
    options = {"access_pattern": "time_series", "chunk_size": 1}
    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options)
    data = tmp_path / "svcd"
    processes = process_group(proc.pid)
    assert proc.pid in processes and len(processes) > 1, "the daemon and its children"
    # The children first (systemd signals the processes in no order the daemon chooses): a
    # child killed by it would fail the conversion before the daemon knows it is stopping.
    for pid in sorted(processes, key=lambda pid: pid == proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if pid != proc.pid:
            time.sleep(0.2)
    assert proc.wait(timeout=60) == 0, (data / "svcd.log").read_text()[-3000:]
    zarray = json.loads((store_dir / ".zarray").read_text())
    chunks = math.prod(-(-n // c) for n, c in zip(zarray["shape"], zarray["chunks"]))
    written = [p for p in store_dir.iterdir() if not p.name.startswith(".")]
    assert len(written) < chunks, f"stopped too late: all {chunks} chunks already written"
    assert_ready_after_a_restart(daemon, data, env, base, headers, url, source)


def test_a_daemon_stop_ends_the_waits_of_readers_at_once(daemon, tmp_path):
    """A reader may wait up to 25 minutes for a chunk (`timeout`); a daemon told to stop
    (SIGTERM, as systemd does, which kills what is left after 60 s) answers it at once,
    503 with a `Retry-After`, instead of draining it: the stop takes seconds, the conversion
    stays queued, and after a restart the store ends ready with every value."""
    import math

    # Aggregated (of one source), so the chunk is never computed on the request: the reader
    # waits for the conversion, which is slow (NetCDF-3 read as long time series).
    options = {"access_pattern": "time_series", "chunk_size": 1, "aggregate": "concat"}
    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options)
    data = tmp_path / "svcd"
    zarray = json.loads((store_dir / ".zarray").read_text())
    last = ".".join(str(-(-n // c) - 1) for n, c in zip(zarray["shape"], zarray["chunks"]))
    chunks = math.prod(-(-n // c) for n, c in zip(zarray["shape"], zarray["chunks"]))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(requests.get, f"{url}/tas/{last}", headers=headers, params={"timeout": 1500}, timeout=600) for _ in range(2)]
        time.sleep(1)
        assert not any(w.done() for w in waiting), [w.result().text for w in waiting if w.done()]
        stopped_at = time.monotonic()
        proc.terminate()
        assert proc.wait(timeout=120) == 0, (data / "svcd.log").read_text()[-3000:]
        took = time.monotonic() - stopped_at
        answers = [w.result() for w in waiting]
    written = [p for p in store_dir.iterdir() if not p.name.startswith(".")]
    assert len(written) < chunks, f"stopped too late: all {chunks} chunks already written"
    assert took < 10, f"the stop took {took:.1f} s"
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert "stopping" in answer.json()["detail"], answer.text
        assert int(answer.headers["Retry-After"]) >= 1
    assert_ready_after_a_restart(daemon, data, env, base, headers, url, source)


def test_a_complete_stores_long_consolidated_metadata_is_read_whole(daemon, tmp_path):
    """A store converted before conversions were bounded to 16 MiB of consolidated metadata
    (here, one whose `.zmetadata` is made longer once it is ready) is read whole, as before:
    only a store being converted is held to the bound."""
    import netCDF4

    data = tmp_path / "svcd"
    data.mkdir()
    source = data / "tas.nc"
    with netCDF4.Dataset(source, "w") as nc:
        nc.createDimension("time", 4)
        nc.createVariable("tas", "f4", ("time",))[:] = [1, 2, 3, 4]
    with own_daemon(daemon.binary, tmp_path, data) as (base, headers, convert):
        url = convert(source)
        assert wait_ready(base, headers, url) == {"status": 0, "reason": ""}
        consolidated = data / "stores" / url.rsplit("/", 1)[1].removesuffix(".zarr") / ".zmetadata"
        document = json.loads(consolidated.read_text())
        document["metadata"][".zattrs"]["history"] = "x" * (17 << 20)
        written = consolidated.with_name("zmetadata.tmp")
        written.write_text(json.dumps(document))
        written.rename(consolidated)
        answer = requests.get(f"{url}/.zmetadata", headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        assert len(answer.json()["metadata"][".zattrs"]["history"]) == 17 << 20


def test_a_client_that_sends_nothing_does_not_hold_the_daemons_stop(daemon, tmp_path):
    """A client that opened a request and sends no more (nor reads) would hold the server's
    drain of its requests, and the stop, past systemd's 60 s: requests still open 10 s after
    the stop began are closed, and the daemon ends cleanly."""
    import socket

    from conftest import serve

    data = tmp_path / "svcd"
    data.mkdir()
    proc, host = serve(daemon.binary, data)
    address = host.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((address[0], int(address[1])), timeout=30) as silent:
        silent.sendall(b"GET /api/svc-nextgen/databrowser/overview HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.5)
        stopped_at = time.monotonic()
        proc.terminate()
        assert proc.wait(timeout=60) == 0, (data / "svcd.log").read_text()[-3000:]
        took = time.monotonic() - stopped_at
    assert took < 20, f"the stop took {took:.1f} s"
    assert "still open" in (data / "svcd.log").read_text()


def test_a_daemon_whose_stores_link_to_a_hot_tier_not_mounted_yet_starts(daemon, tmp_path):
    """`stores` may be a link to the hot tier's file system, mounted later: the daemon starts
    (and makes nothing in its place), and serves its catalogue."""
    from conftest import serve

    data = tmp_path / "svcd"
    data.mkdir()
    (data / "stores").symlink_to(tmp_path / "not-mounted-yet")
    proc, host = serve(daemon.binary, data)
    try:
        assert requests.get(f"{host}/api/svc-nextgen/databrowser/overview", timeout=30).status_code == 200
        assert (data / "stores").is_symlink() and not (tmp_path / "not-mounted-yet").exists()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_a_conversions_process_is_confined_and_has_none_of_the_daemons_environment(daemon, tmp_path):
    """The process that converts a store (forked for this conversion by a `convert-child`
    process, which reads no source itself) gains no privilege, runs under a seccomp filter,
    has none of the daemon's environment (which may hold the cold tier's credentials), and
    has open no file of the daemon's but its source and its store's (its standard output
    and error are a pipe, not the daemon's log); the store ends ready with every value."""
    import os

    options = {"access_pattern": "time_series", "chunk_size": 1}
    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options)
    data = tmp_path / "svcd"
    try:
        forkers, task = conversion_processes(proc.pid)
        status = dict(line.split(":", 1) for line in open(f"/proc/{task}/status").read().splitlines())
        assert status["NoNewPrivs"].strip() == "1", status["NoNewPrivs"]
        assert status["Seccomp"].strip() == "2", status["Seccomp"]
        assert any(name.startswith(b"SVCD_") for name in environ(proc.pid)), "the daemon's own"
        for pid in [*forkers, task]:
            assert not [name for name in environ(pid) if name.startswith(b"SVCD_")], environ(pid)
        opened = []
        for fd in os.listdir(f"/proc/{task}/fd"):
            with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                opened.append(os.readlink(f"/proc/{task}/fd/{fd}"))
        assert str(source) in opened, opened
        # Not even the daemon's log (which this test keeps in the data directory): what it
        # prints goes to a pipe of its own, which its convert-child writes to the log quoted.
        of_the_daemon = [path for path in opened if path.startswith(str(data)) and path != str(source) and not path.startswith(str(store_dir.parent))]
        assert not of_the_daemon, of_the_daemon
        for printed in (1, 2):
            assert os.readlink(f"/proc/{task}/fd/{printed}").startswith("pipe:"), printed
        assert_ready_with_every_value(base, headers, url, source)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_conversions_process_that_writes_past_the_reserve_is_killed_by_the_daemon(daemon, tmp_path):
    """A conversion's process looks at the room left on the hot tier itself; one that does
    not (a file that made the libraries run code of its choosing) is killed by the daemon as
    soon as the hot tier has less room than the reserve. Here the process is stopped
    (SIGSTOP), so only the daemon can act, and the file system is filled past the reserve
    in its store: the store fails with the reserve's reason within seconds, and its data
    is removed."""
    import os
    import signal
    import subprocess

    tier = tmp_path / "tier"
    tier.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(tier)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.strip()}")
    try:
        options = {"access_pattern": "time_series", "chunk_size": 1}
        proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(
            daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options, stores_on=tier, SVCD_STORES_HOT_RESERVE_MIB=16, SVCD_STORES_MAX_USER_MIB=0)
        try:
            _, task = conversion_processes(proc.pid)
            os.kill(task, signal.SIGSTOP)
            room = os.statvfs(tier)
            left = room.f_bavail * room.f_frsize - (8 << 20)
            with open(store_dir.parent / "written-past-the-reserve", "wb") as f:
                while left > 0:
                    left -= f.write(b"\xff" * min(left, 1 << 20))
            failed = wait_ready(base, headers, url, timeout=30)
            assert failed["status"] == 1 and RESERVED in failed["reason"] and "killed" in failed["reason"], failed
            assert not store_dir.parent.exists(), "the failed store's data is removed"
            deadline = time.monotonic() + 10
            while alive(task):
                assert time.monotonic() < deadline, "the conversion's process was not killed"
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        subprocess.run(["umount", str(tier)], check=False)


def write_a_file(store):
    (store / "written-without-the-allowance").write_bytes(b"\xff" * (1 << 20))


def write_files_no_reader_asks_for(store):
    # What the store's listing leaves out: a name no key has, a file being written.
    (store / b"\xff-not-utf-8".decode("utf-8", "surrogateescape")).write_bytes(b"\xff" * (1 << 19))
    (store / "tas" / ".0.0.0.partial").write_bytes(b"\xff" * (1 << 19))


def make_empty_directories(store):
    for n in range(300):
        (store / "empty" / str(n)).mkdir(parents=True)


@pytest.mark.parametrize("write", [write_a_file, write_files_no_reader_asks_for, make_empty_directories])
def test_a_store_that_holds_more_than_its_conversion_took_from_the_allowance_fails(daemon, tmp_path, write):
    """A conversion's process takes each file it writes from its owner's allowance first;
    one that wrote without (a file that made the libraries run code of its choosing) leaves
    a store that holds more than it took: it fails once its process ended, and its data is
    removed. Here files, also ones the store's listing leaves out, or directories, are
    written into the store beside the conversion's."""
    options = {"access_pattern": "time_series", "chunk_size": 1}
    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options)
    try:
        write(store_dir.parent)
        failed = wait_ready(base, headers, url, timeout=300)
        assert failed["status"] == 1 and "took" in failed["reason"] and "allowance" in failed["reason"], failed
        assert not store_dir.parent.exists(), "the failed store's data is removed"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_consolidated_metadata_longer_than_a_conversion_writes_is_not_read(daemon, tmp_path):
    """The daemon reads a store's `.zmetadata`, written by a process that read a user's
    file, only up to the 16 MiB a conversion may write: a longer one (valid JSON, written
    over the conversion's) is not served (500) and fails the store as its conversion
    ends."""
    options = {"access_pattern": "time_series", "chunk_size": 1}
    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options)
    try:
        consolidated = store_dir.parent / ".zmetadata"
        document = json.loads(consolidated.read_text())
        document["padding"] = "x" * (17 << 20)
        written = store_dir.parent / "zmetadata.tmp"
        written.write_text(json.dumps(document))
        written.rename(consolidated)
        del document
        answer = requests.get(f"{url}/.zmetadata", headers=headers, timeout=60)
        assert answer.status_code == 500, (answer.status_code, len(answer.content))
        failed = wait_ready(base, headers, url, timeout=300)
        assert failed["status"] == 1 and "longer than the 16777216 bytes a conversion writes" in failed["reason"], failed
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_conversion_waits_for_a_process_while_the_machine_has_none_to_spare(daemon, tmp_path):
    """A `convert-child` process that cannot fork a conversion's process (no process left
    under a limit: EAGAIN) tries again, and the store converts once one can be had, instead
    of failing. Here the waiting `convert-child` processes are moved into a cgroup that
    allows no further process, and the limit is lifted after a while."""
    import os

    import netCDF4

    cgroup = Path("/sys/fs/cgroup/pids") / f"svcd-test-{os.getpid()}"
    try:
        cgroup.mkdir()
    except OSError as e:
        pytest.skip(f"no cgroup of the pids controller here: {e}")
    data = tmp_path / "svcd"
    data.mkdir()
    source = data / "tas.nc"
    with netCDF4.Dataset(source, "w") as nc:
        nc.createDimension("time", 10)
        nc.createDimension("lat", 18)
        var = nc.createVariable("tas", "f4", ("time", "lat"))
        var[:] = np.random.default_rng(0).random((10, 18), dtype="f4")
    try:
        with own_daemon(daemon.binary, tmp_path, data) as (base, headers, convert):
            deadline = time.monotonic() + 30
            while len(forkers := [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if b"convert-child" in cmdline(pid) and str(data).encode() in cmdline(parent(pid))]) < 2:
                assert time.monotonic() < deadline, "no convert-child process started ahead"
                time.sleep(0.05)
            (cgroup / "pids.max").write_text(str(len(forkers)))
            for pid in forkers:
                (cgroup / "cgroup.procs").write_text(str(pid))
            assert int((cgroup / "pids.current").read_text()) == len(forkers)
            url = convert(source)
            time.sleep(3)
            status = requests.get(f"{base}/data-portal/zarr-utils/status", params={"url": url}, headers=headers, timeout=10).json()
            assert status["status"] == 2, status
            assert "trying again" in (data / "svcd.log").read_text()
            (cgroup / "pids.max").write_text("max")
            assert wait_ready(base, headers, url, timeout=120) == {"status": 0, "reason": ""}
            served = xr.open_zarr(url, storage_options={"headers": headers})
            with xr.open_dataset(source, engine="netcdf4") as expected:
                np.testing.assert_array_equal(served["tas"].values, expected["tas"].values)
    finally:
        deadline = time.monotonic() + 10
        while cgroup.exists():
            try:
                cgroup.rmdir()
            except OSError:
                assert time.monotonic() < deadline, "the cgroup's processes did not end"
                time.sleep(0.1)


def test_a_queued_stores_metadata_and_chunks_computed_on_request_are_the_bytes_its_conversion_writes(daemon, tmp_path):
    """With the one worker busy, a second store of the same owner waits: its `.zmetadata`
    and each of its 24 chunks, asked for now by two readers at once, are computed on
    request, by the conversions' processes (kept between requests, each computing many);
    once converted, the store's files hold the same bytes."""
    import netCDF4

    options = {"access_pattern": "time_series", "chunk_size": 1}
    proc, base, env, headers, url, store_dir, source = a_long_conversion_begun(daemon, tmp_path, "NETCDF3_64BIT_OFFSET", options, workers=1)
    try:
        queued = tmp_path / "svcd" / "queued.nc"
        with netCDF4.Dataset(queued, "w") as nc:
            nc.createDimension("time", 24)
            nc.createDimension("x", 8)
            var = nc.createVariable("tas", "f4", ("time", "x"))
            var[:] = np.random.default_rng(1).random((24, 8), dtype="f4")
        answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(queued)]}, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        [second] = answer.json()["urls"]
        metadata = requests.get(f"{second}/.zmetadata", headers=headers, timeout=60)
        assert metadata.status_code == 200, metadata.text
        zarray = metadata.json()["metadata"]["tas/.zarray"]
        keys = [f"tas/{i}.0" for i in range(-(-24 // zarray["chunks"][0]))]

        def read(key):
            answer = requests.get(f"{second}/{key}", headers=headers, timeout=60)
            assert answer.status_code == 200, (key, answer.status_code, answer.text)
            return key, answer.content

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            computed = dict(pool.map(read, keys))
        status = requests.get(f"{base}/data-portal/zarr-utils/status", params={"url": second}, headers=headers, timeout=30).json()
        assert status["status"] == 2, "computed on request: the store was still queued"
        assert wait_ready(base, headers, second, timeout=300) == {"status": 0, "reason": ""}
        written = tmp_path / "svcd" / "stores" / second.rsplit("/", 1)[1].removesuffix(".zarr")
        assert json.loads((written / ".zmetadata").read_text()) == metadata.json()
        for key, content in computed.items():
            assert (written / key).read_bytes() == content, key
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_load_gives_one_store_per_file_the_search_finds(daemon, portal):
    _, _, headers = portal
    load = f"{daemon.base}/databrowser/load/svc"
    files = requests.get(f"{daemon.base}/databrowser/data-search/svc/file", params={"project": "cordex"}, timeout=30).text.split()
    answer = requests.get(load, params={"project": "cordex"}, headers=headers, timeout=60)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain"), answer.text
    urls = answer.text.split()
    assert len(urls) == len(files) > 1
    assert all("/data-portal/zarr/" in url for url in urls)
    # One file, opened and compared with its source.
    source = files[0]
    [url] = requests.get(load, params={"file": source}, headers=headers, timeout=60).text.split()
    assert url in urls
    assert wait_ready(daemon.base, headers, url, timeout=120)["status"] == 0
    served = xr.open_zarr(url, storage_options={"headers": headers})
    with xr.open_dataset(source, engine="netcdf4") as expected:
        for name in expected.data_vars:
            np.testing.assert_array_equal(served[name].values, expected[name].values, err_msg=name)
    public = requests.get(load, params={"file": source, "public": "true"}, headers=headers, timeout=60).text.split()
    assert len(public) == 1 and "/data-portal/share/" in public[0]
    assert requests.get(f"{public[0]}/.zmetadata", timeout=10).status_code == 200
    # The intake catalogue of the stores (opened with intake-esm in test_freva_client).
    intake = requests.get(load, params={"project": "cordex", "catalogue-type": "intake"}, headers=headers, timeout=60)
    assert intake.status_code == 200 and intake.headers["content-type"] == "application/json", intake.text
    catalogue = intake.json()
    assert catalogue["assets"] == {"column_name": "uri", "format_column_name": "format"}
    assert sorted(row["uri"] for row in catalogue["catalog_dict"]) == sorted(urls)
    assert {row["format"] for row in catalogue["catalog_dict"]} == {"zarr"}
    bad = requests.get(load, params={"project": "cordex", "catalogue-type": "stac"}, headers=headers, timeout=30)
    assert bad.status_code == 422 and "catalogue-type" in bad.json()["detail"]
    # Refusals: no hits, a bad facet or option, no token.
    assert requests.get(load, params={"project": "nothing-like-it"}, headers=headers, timeout=30).status_code == 400
    assert requests.get(load, params={"colour": "red"}, headers=headers, timeout=30).status_code == 422
    bad = requests.get(load, params={"project": "cordex", "chunk_size": "0"}, headers=headers, timeout=30)
    assert bad.status_code == 422 and "chunk_size" in bad.json()["detail"]
    assert requests.get(load, params={"project": "cordex"}, timeout=30).status_code == 401


def test_operators_list_show_and_remove_stores(daemon, portal):
    import subprocess

    _, _, headers = portal
    source = daemon.data / "sources" / "operator.nc"
    write_source(source)
    answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": [str(source)]}, headers=headers, timeout=30)
    [url] = answer.json()["urls"]
    assert wait_ready(daemon.base, headers, url)["status"] == 0
    token = url.rsplit("/", 1)[1].removesuffix(".zarr")
    cli = lambda *args: subprocess.run([daemon.binary, "--data-dir", str(daemon.data), "store", *args], capture_output=True, text=True, timeout=60)
    listed = cli("list")
    assert listed.returncode == 0, listed.stderr
    assert f"{token}  ready  jane  {source}" in listed.stdout.splitlines()
    shown = cli("show", token)
    assert shown.returncode == 0 and json.loads(shown.stdout)["sources"] == [str(source)]
    removed = cli("rm", token)
    assert removed.returncode == 0 and removed.stdout.strip() == f"removed {token}"
    assert requests.get(f"{url}/.zmetadata", headers=headers, timeout=10).status_code == 404
    # Its data is deleted by the store's job, which a worker runs next.
    deadline = time.monotonic() + 30
    while (daemon.data / "stores" / token).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (daemon.data / "stores" / token).exists()
    status = requests.get(f"{daemon.base}/data-portal/zarr-utils/status", params={"url": url}, headers=headers, timeout=10)
    assert status.json()["status"] == 4
    missing = cli("rm", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode != 0 and "not found" in missing.stderr


def test_operators_convert_with_and_without_a_running_daemon(daemon, tmp_path):
    import getpass
    import os
    import subprocess

    source = daemon.data / "sources" / "cli.nc"
    source.parent.mkdir(exist_ok=True)
    write_source(source)
    # The login (root here) converts as a user without a local account: under the allowed roots.
    env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(daemon.data))
    run = lambda data, *args: subprocess.run([daemon.binary, "--data-dir", str(data), "store", *args], capture_output=True, text=True, timeout=300, env=env)
    online = run(daemon.data, "convert", str(source))
    assert online.returncode == 0, online.stderr
    [url] = online.stdout.split()
    assert url.startswith(f"{daemon.base}/data-portal/zarr/") and url.endswith(".zarr")
    owner = daemon.token_file(tmp_path / "owner.json", getpass.getuser())
    meta = requests.get(f"{url}/.zmetadata", headers={"Authorization": f"Bearer {owner}"}, timeout=10)
    assert meta.status_code == 200, meta.text
    # A stopped store: the CLI converts with the daemon's workers itself.
    offline_data = tmp_path / "offline"
    offline = run(offline_data, "convert", str(source))
    assert offline.returncode == 0, offline.stderr
    token = offline.stdout.split()[0].rsplit("/", 1)[1].removesuffix(".zarr")
    assert (offline_data / "stores" / token / ".zmetadata").exists()
    listed = run(offline_data, "list")
    assert f"{token}  ready" in listed.stdout, listed.stdout + listed.stderr
    # Removed on a stopped store: its data is deleted before the CLI returns, or the CLI
    # says it was not (here a file stands where the store's directory was).
    store_dir = offline_data / "stores" / token
    shutil.rmtree(store_dir)
    store_dir.write_bytes(b"not a directory")
    refused = run(offline_data, "rm", token)
    assert refused.returncode != 0 and f"svcd store rm {token}` tries again" in refused.stderr, refused.stderr
    assert f"{token}  gone" in run(offline_data, "list").stdout
    store_dir.unlink()
    (store_dir / "tas").mkdir(parents=True)
    removed = run(offline_data, "rm", token)
    assert removed.returncode == 0, removed.stderr
    assert not store_dir.exists()
    failed = run(offline_data, "convert", str(daemon.data / "sources" / "nothere.nc"))
    assert failed.returncode != 0 and "nothere.nc" in failed.stderr


def test_zarr_python_2_reads_every_value(portal):
    """The same store through zarr-python 2 (its own virtualenv: ZARR2_PYTHON)."""
    import os
    import subprocess
    from pathlib import Path

    source, url, headers = portal
    python = os.environ.get("ZARR2_PYTHON")
    assert python, "set ZARR2_PYTHON to the python of a zarr-python 2 virtualenv (make test does)"
    token = headers["Authorization"].removeprefix("Bearer ")
    reader = Path(__file__).parent / "zarr2_reader.py"
    result = subprocess.run([python, str(reader), url, token, str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("zarr 2."), result.stdout


@contextlib.contextmanager
def own_daemon(binary, tmp_path, data, **settings):
    """svcd serving `data` (where jane, a user without a local account, may convert) with
    the `SVCD_*` settings given (`None`: unset): its API's base URL, jane's headers, and a
    conversion of one file that gives its store's URL."""
    import os

    from conftest import Svcd, serve

    env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(data))
    for name, value in settings.items():
        env.pop(name, None)
        if value is not None:
            env[name] = str(value)
    proc, host = serve(binary, data, env)
    try:
        base = f"{host}/api/svc-nextgen"
        token = Svcd(base, host, data, binary).token_file(tmp_path / "jane.json", "jane")
        headers = {"Authorization": f"Bearer {token}"}
        convert = lambda path: requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(path)]}, headers=headers, timeout=30).json()["urls"][0]
        yield base, headers, convert
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


FULL = "No space left on device"
RESERVED = "the hot tier is nearly full"


@pytest.mark.parametrize("reserve_mib, reasons", [(0, [FULL]), (1, [RESERVED]), (None, [FULL, RESERVED])])
def test_a_full_disk_fails_only_that_store_and_removes_its_data(daemon, tmp_path, reserve_mib, reasons):
    """The hot tier on a 2 MiB file system: a store that does not fit fails with a reason
    that says so (the disk full, or, with a reserve, the reserve reached first), its partial
    data is removed, and a store that fits is converted after it. With no reserve set, the
    default (`auto`) is 1% of the file system (20 KiB here), not a GiB that would fail every
    store."""
    import subprocess

    import netCDF4

    data = tmp_path / "svcd"
    tier = tmp_path / "tier"
    data.mkdir()
    tier.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(tier)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.strip()}")
    try:
        (data / "stores").symlink_to(tier)
        big, small = data / "big.nc", data / "small.nc"
        for path, steps in ((big, 200), (small, 2)):
            with netCDF4.Dataset(path, "w") as nc:
                nc.createDimension("time", steps)
                nc.createDimension("lat", 90)
                nc.createDimension("lon", 180)
                var = nc.createVariable("tas", "f4", ("time", "lat", "lon"))
                var[:] = np.random.default_rng(steps).random((steps, 90, 180), dtype="f4")
        # No bound on one user's stores: by default a quarter of the file system, it would
        # be met first.
        with own_daemon(daemon.binary, tmp_path, data, SVCD_STORES_HOT_RESERVE_MIB=reserve_mib, SVCD_STORES_MAX_USER_MIB=0) as (base, headers, convert):
            big_url = convert(big)
            failed = wait_ready(base, headers, big_url, timeout=120)
            reason = next((reason for reason in reasons if reason in failed["reason"]), None)
            assert failed["status"] == 1 and reason and "big.nc" in failed["reason"], failed
            assert list(tier.iterdir()) == [], "the failed store's partial data is removed"
            chunk = requests.get(f"{big_url}/tas/0.0.0", headers=headers, timeout=30)
            assert chunk.status_code == 500 and reason in chunk.json()["detail"], chunk.text
            small_url = convert(small)
            assert wait_ready(base, headers, small_url, timeout=120) == {"status": 0, "reason": ""}
            served = xr.open_zarr(small_url, storage_options={"headers": headers})
            with xr.open_dataset(small, engine="netcdf4") as expected:
                np.testing.assert_array_equal(served["tas"].values, expected["tas"].values)
    finally:
        subprocess.run(["umount", str(tier)], check=False)


def sparse_and_small_sources(data, steps, side):
    """Two sources in `data`: `sparse.nc`, a NetCDF-4 file whose `tas` claims `steps` time
    steps of `side` (lat, lon) values, one chunk each, never written (the file takes a few
    KiB), and `small.nc`, two values."""
    import netCDF4

    sparse, small = data / "sparse.nc", data / "small.nc"
    with netCDF4.Dataset(sparse, "w") as nc:
        nc.createDimension("time", steps)
        nc.createDimension("lat", side[0])
        nc.createDimension("lon", side[1])
        nc.createVariable("tas", "f4", ("time", "lat", "lon"), chunksizes=(1, *side))
    with netCDF4.Dataset(small, "w") as nc:
        nc.createDimension("time", 2)
        var = nc.createVariable("tas", "f4", ("time",))
        var[:] = [1.0, 2.0]
    return sparse, small


def test_a_conversion_past_its_time_limit_fails_its_store_and_frees_its_worker(daemon, tmp_path):
    """A NetCDF-4 file of a few KiB that claims 16 GiB of fill values (chunks never written)
    would hold a worker for minutes, or days at a larger claim; with
    `stores.max_conversion_seconds` at 1 its store fails with a reason that says so, its
    partial data is removed, and the next store is converted by the freed worker."""
    data = tmp_path / "svcd"
    data.mkdir()
    sparse, small = sparse_and_small_sources(data, steps=2048, side=(2048, 1024))
    assert sparse.stat().st_size < 1 << 20
    with own_daemon(daemon.binary, tmp_path, data, SVCD_STORES_MAX_CONVERSION_SECONDS=1, SVCD_STORES_WORKERS=1) as (base, headers, convert):
        sparse_url = convert(sparse)
        small_url = convert(small)
        failed = wait_ready(base, headers, sparse_url, timeout=120)
        assert failed["status"] == 1 and "took longer than 1 s" in failed["reason"], failed
        store = data / "stores" / sparse_url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
        assert not store.exists()
        assert wait_ready(base, headers, small_url, timeout=120) == {"status": 0, "reason": ""}


def test_one_users_stores_take_at_most_their_bound_and_other_users_convert_as_before(daemon, tmp_path):
    """A NetCDF-4 file of a few KiB that claims 2,000 chunks of fill values makes a store of
    2,000 chunk files (8 MB on disk); with `stores.max_user_mib` at 2, jane's store fails
    with a reason that says so and its partial data is removed, while john's store, and a
    small one of hers, are converted."""
    from conftest import Svcd

    data = tmp_path / "svcd"
    data.mkdir()
    sparse, small = sparse_and_small_sources(data, steps=2000, side=(64, 64))
    assert sparse.stat().st_size < 64 << 10
    with own_daemon(daemon.binary, tmp_path, data, SVCD_STORES_MAX_USER_MIB=2) as (base, headers, convert):
        sparse_url = convert(sparse)
        failed = wait_ready(base, headers, sparse_url, timeout=120)
        assert failed["status"] == 1, failed
        assert 'sparse.nc: the stores of "jane" would take more than the 2.0 MiB' in failed["reason"], failed
        store = data / "stores" / sparse_url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr")
        assert not store.exists()
        host = base.removesuffix("/api/svc-nextgen")
        john = {"Authorization": f"Bearer {Svcd(base, host, data, daemon.binary).token_file(tmp_path / 'john.json', 'john')}"}
        johns = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(small)]}, headers=john, timeout=30).json()["urls"][0]
        assert wait_ready(base, john, johns, timeout=120) == {"status": 0, "reason": ""}
        assert wait_ready(base, headers, convert(small), timeout=120) == {"status": 0, "reason": ""}


def write_stored_chunks_source(path):
    """A NetCDF-4 file whose variables are stored one time step per chunk, compressed, as
    model output mostly is: little- and big-endian, with and without shuffle, and one
    variable never written (its chunk holds the fill value)."""
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 6)
        nc.createDimension("lon", 8)
        time = nc.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time[:] = np.arange(4.0)
        shape = (4, 6, 8)
        chunks = (1, 6, 8)
        tas = nc.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, complevel=4, shuffle=True, chunksizes=chunks, fill_value=np.float32(1e20))
        values = np.random.default_rng(1).normal(280, 10, shape).astype("f4")
        values[1, 2, 3] = np.nan
        tas[:] = np.ma.masked_where(values > 300, values)
        pr = nc.createVariable("pr", ">i2", ("time", "lat", "lon"), zlib=True, complevel=1, shuffle=False, chunksizes=chunks, endian="big", fill_value=np.int16(-32767))
        pr.scale_factor = 0.5
        pr.set_auto_maskandscale(False)
        pr[:] = (np.arange(4 * 6 * 8).reshape(shape) * 37 % 2000 - 1000).astype("i2")
        ps = nc.createVariable("ps", ">f8", ("time", "lat", "lon"), zlib=True, complevel=9, shuffle=True, chunksizes=chunks, endian="big")
        ps[:] = np.linspace(90000, 105000, 4 * 6 * 8).reshape(shape)
        orog = nc.createVariable("orog", "f4", ("lat", "lon"), zlib=True, shuffle=True, chunksizes=(6, 8), fill_value=np.float32(-1))
        orog.units = "m"


def test_stored_chunks_are_copied_and_read_as_the_source(daemon, portal, tmp_path):
    _, _, headers = portal
    source = daemon.data / "sources" / "stored.nc"
    write_stored_chunks_source(source)
    answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": [str(source)]}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    assert wait_ready(daemon.base, headers, url) == {"status": 0, "reason": ""}
    zarray = lambda name: requests.get(f"{url}/{name}/.zarray", headers=headers, timeout=10).json()
    # Copied: the source's own chunks, declared as they are stored.
    assert zarray("tas")["compressor"] == {"id": "zlib", "level": 4}
    assert zarray("tas")["filters"] == [{"id": "shuffle", "elementsize": 4}]
    assert zarray("pr")["compressor"] == {"id": "zlib", "level": 1} and zarray("pr")["filters"] is None
    assert zarray("pr")["dtype"] == ">i2" and zarray("ps")["dtype"] == ">f8"
    assert zarray("orog")["compressor"]["id"] == "zlib"
    # The coordinate is not stored compressed: encoded as every other array.
    assert zarray("time")["compressor"]["id"] == "blosc"
    # The chunks served are the file's own bytes.
    import h5py

    with h5py.File(source, "r") as h5:
        for name in ("tas", "pr", "ps"):
            _, stored = h5[name].id.read_direct_chunk((2, 0, 0))
            served = requests.get(f"{url}/{name}/2.0.0", headers=headers, timeout=10)
            assert served.status_code == 200 and served.content == stored, name
    for decode_cf in (True, False):
        served = xr.open_zarr(url, storage_options={"headers": headers}, consolidated=True, decode_cf=decode_cf).load()
        with xr.open_dataset(source, engine="netcdf4", decode_cf=decode_cf) as expected:
            for name, variable in expected.load().variables.items():
                np.testing.assert_array_equal(served[name].values, variable.values, err_msg=f"{name} decode_cf={decode_cf}")
    assert np.isnan(served["tas"].values[1, 2, 3])
    page = requests.get(f"{daemon.base}/data-portal/zarr-utils/html", params={"url": url}, headers=headers, timeout=10)
    assert page.status_code == 200
    assert page.text.count("as the source file stores it") == 4, page.text
    # zarr-python 2 decodes the same chunks.
    import os
    import subprocess
    from pathlib import Path

    token = headers["Authorization"].removeprefix("Bearer ")
    reader = Path(__file__).parent / "zarr2_reader.py"
    result = subprocess.run([os.environ["ZARR2_PYTHON"], str(reader), url, token, str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def heap_string_references(data, text):
    """The offsets in the HDF5 file `data` (bytes) of every stored reference to the string
    `text` in a global heap: its length, the heap collection's address and the object's
    index (16 bytes), the length first."""
    import struct

    found = []
    collection = data.find(b"GCOL")
    while collection >= 0:
        end = collection + struct.unpack_from("<Q", data, collection + 8)[0]
        at = collection + 16
        while at + 16 <= end:
            index, _, _, size = struct.unpack_from("<HHIQ", data, at)
            if index == 0:
                break
            if data[at + 16:at + 16 + size] == text:
                reference = struct.pack("<IQI", len(text), collection, index)
                place = data.find(reference)
                while place >= 0:
                    found.append(place)
                    place = data.find(reference, place + 1)
            at += 16 + (size + 7) // 8 * 8
        collection = data.find(b"GCOL", collection + 4)
    return found


def claim_heap_string(path, text, claim):
    """Patches `path` so that every stored reference to the string `text` in an HDF5 global
    heap claims `claim` bytes; returns how many it patched."""
    import struct

    data = bytearray(path.read_bytes())
    found = heap_string_references(data, text)
    for place in found:
        struct.pack_into("<I", data, place, claim)
    path.write_bytes(bytes(data))
    return len(found)


@contextlib.contextmanager
def daemon_of_its_own(daemon, tmp_path, allowed):
    """A daemon for one test (its data in `tmp_path / "svcd"`), whose users may convert what
    lies under `allowed`: yields `convert(path, reload=False, wait=True)`, which gives the
    store's URL and its final status (`None` when not waited for), and the headers of mallory's token. Once the test is done with
    it, the daemon still answers, its peak resident memory stayed under 1 GiB, and it stops
    cleanly."""
    import os

    from conftest import Svcd, serve

    data = tmp_path / "svcd"
    data.mkdir(exist_ok=True)
    env = dict(os.environ, SVCD_STORES_ALLOWED_ROOTS=str(allowed))
    proc, host = serve(daemon.binary, data, env)
    try:
        base = f"{host}/api/svc-nextgen"
        token = Svcd(base, host, data, daemon.binary).token_file(tmp_path / "mallory.json", "mallory")
        headers = {"Authorization": f"Bearer {token}"}

        def convert(path, reload=False, wait=True):
            answer = requests.post(f"{base}/data-portal/zarr/convert", json={"path": [str(path)], "reload": reload}, headers=headers, timeout=30)
            assert answer.status_code == 200, answer.text
            [url] = answer.json()["urls"]
            return url, wait_ready(base, headers, url, timeout=120) if wait else None

        # Two conversions' processes wait for work from the start.
        deadline = time.monotonic() + 10
        while len([pid for pid in process_group(proc.pid) if b"convert-child" in cmdline(pid)]) < 2:
            assert time.monotonic() < deadline, "no conversion's process waits for work"
            time.sleep(0.05)
        yield convert, headers
        assert requests.get(f"{base}/ping", timeout=10).status_code == 200
        peak = next(line for line in open(f"/proc/{proc.pid}/status") if line.startswith("VmHWM:"))
        assert int(peak.split()[1]) < 1 << 20, f"the daemon's peak resident memory: {peak.strip()}"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, (data / "svcd.log").read_text()[-3000:]
        # Its children (probes, conversions' processes, those started ahead, the tasks'
        # processes these forked) end with it: found by the process group they joined.
        deadline = time.monotonic() + 10
        while left := process_group(proc.pid):
            assert time.monotonic() < deadline, f"the daemon's children outlive it: {left}"
            time.sleep(0.1)


def cmdline(pid):
    """The command line of process `pid` (empty once it ended)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def parent(pid):
    """The parent of process `pid` (0 once it ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError):
        return 0


def process_group(group):
    """The processes of process group `group`."""
    import os

    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                # After the command's name in parentheses: state, parent, group.
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group:
            found.append(int(pid))
    return found


def alive(pid):
    """Whether process `pid` runs (not ended, nor a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def conversion_processes(daemon_pid):
    """The `convert-child` processes of the daemon `daemon_pid`, and the process of the one
    task they run (forked by one of them)."""
    group = process_group(daemon_pid)
    forkers = [pid for pid in group if b"convert-child" in cmdline(pid) and parent(pid) == daemon_pid]
    [task] = [pid for pid in group if parent(pid) in forkers]
    return forkers, task


def environ(pid):
    """The environment process `pid` started with (nothing once it ended)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def test_metadata_that_claims_gigabytes_or_overruns_the_library_is_refused_by_a_probe(daemon, tmp_path):
    """HDF5 keeps a string attribute, and a string variable's fill value, as a length and a
    place in a global heap. Opening the file and reading its metadata, the library allocates
    and fills the length the file claims (8 GiB for a file of a few KiB, before the daemon
    sees anything) and copies the whole heap object into it (a claim shorter than its
    object overruns the buffer: SIGSEGV). The daemon has each source's metadata read first
    by a child process bounded in memory and time: each such file fails its store with a
    reason, the daemon stays up and small, and the same files unpatched convert."""
    import h5py

    data = tmp_path / "svcd"
    data.mkdir()
    hostile = {}
    # The library reports an allocation past the probe's bound as an error, or crashes on it
    # (HDF5 1.10 does not always check).
    reasons = ("the NetCDF library cannot read its metadata within the 128 MiB", "the NetCDF library failed reading its metadata")
    value = "hostile value"
    for kind in ("attribute", "fill"):
        long_value = "y" * 200_000
        for text, claim in ((value, 0xFFFFFFF0), (long_value, 1)):
            path = data / f"{kind}-claims-{claim}.nc"
            # Version 1 object headers, which carry no checksum the patch would break.
            with h5py.File(path, "w", libver=("earliest", "v110")) as f:
                f["x"] = np.arange(4, dtype="f4")
                if kind == "attribute":
                    f.attrs["title"] = text
                else:
                    f.create_dataset("s", shape=(4,), dtype=h5py.string_dtype(), fillvalue=text)
            twin = data / f"{kind}-{len(text)}-unpatched.nc"
            twin.write_bytes(path.read_bytes())
            assert claim_heap_string(path, text.encode(), claim) >= 1
            hostile[path] = (twin, reasons)
    with daemon_of_its_own(daemon, tmp_path, data) as (convert, headers):
        for path, (twin, reasons) in hostile.items():
            url, status = convert(path)
            assert status["status"] == 1 and path.name in status["reason"], status
            assert any(reason in status["reason"] for reason in reasons), status
            metadata = requests.get(f"{url}/.zmetadata", headers=headers, timeout=30)
            assert metadata.status_code == 500 and path.name in metadata.json()["detail"], metadata.text
            url, status = convert(twin)
            assert status == {"status": 0, "reason": ""}, (twin.name, status)
            served = xr.open_zarr(url, storage_options={"headers": headers})
            if "attribute" in twin.name:
                title = served.attrs["title"]
                assert (title if isinstance(title, str) else title[0]) in (value, long_value), title
        # A refused file written again as it should be is probed again (its answer is kept
        # only while it is unchanged) and converts.
        path = next(iter(hostile))
        path.write_bytes(hostile[path][0].read_bytes())
        url, status = convert(path)
        assert status == {"status": 0, "reason": ""}, (path.name, status)


def test_a_source_changed_after_its_probe_fails_its_conversion_in_the_conversions_own_process(daemon, tmp_path):
    """A file's owner can change it after the probe read it without changing its size or
    times: writing through a shared mapping whose page is already dirty changes neither, so
    the probe's answer, kept by those, still stands. The NetCDF library then reads what no
    probe read: a string claiming 4 GiB, or claiming 1 byte of its 200,000 (an overrun).
    The library reads sources only in a conversion's own process, bounded in memory: each
    reload fails its store with a reason naming the file, the daemon stays up and small,
    and another file converts meanwhile and after."""
    import mmap
    import os
    import struct

    import h5py

    data = tmp_path / "svcd"
    data.mkdir()
    # On tmpfs, stores through a mapping never change a file's times (on ext4, once the page
    # is dirty and until it is written back).
    shared = Path("/dev/shm") if os.path.ismount("/dev/shm") else tmp_path
    sources = Path(tempfile.mkdtemp(dir=shared))
    other = sources / "other.nc"
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(3, dtype="f4")
    try:
        with daemon_of_its_own(daemon, tmp_path, sources) as (convert, headers):
            # The library fails, or crashes (which, depends on what the process read before).
            reasons = ("the NetCDF library failed reading it (", "the conversion's process ended reading the sources (signal")
            for text, claim in (("hostile value", 0xFFFFFFF0), ("y" * 200_000, 1)):
                path = sources / f"claims-{claim}.nc"
                with h5py.File(path, "w", libver=("earliest", "v110")) as f:
                    f["x"] = np.arange(4, dtype="f4")
                    f.attrs["title"] = text
                with open(path, "r+b") as f:
                    mapped = mmap.mmap(f.fileno(), 0)
                references = heap_string_references(mapped, text.encode())
                assert references
                # The first store dirties the page (and may change the times): before the probe.
                mapped[references[0]] = mapped[references[0]]
                before = os.stat(path)
                url, status = convert(path)
                assert status == {"status": 0, "reason": ""}, status
                for place in references:
                    struct.pack_into("<I", mapped, place, claim)
                after = os.stat(path)
                key = lambda st: (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                assert key(after) == key(before), "the file's size and times did not change"
                assert struct.unpack_from("<I", path.read_bytes(), references[0])[0] == claim
                url, status = convert(path, reload=True)
                assert status["status"] == 1 and path.name in status["reason"], status
                assert any(reason in status["reason"] for reason in reasons), status
                mapped.close()
                # The daemon and its other conversions go on.
                url, status = convert(other, reload=True)
                assert status == {"status": 0, "reason": ""}, status
                assert xr.open_zarr(url, storage_options={"headers": headers})["x"].values.tolist() == [0, 1, 2]
    finally:
        shutil.rmtree(sources, ignore_errors=True)


def test_a_string_fill_value_allocated_for_each_element_never_written_fails_in_the_conversions_process(daemon, tmp_path):
    """HDF5 gives each element of a string variable that was never written its fill value,
    allocating the length the fill value claims each time. The probe reads the fill value
    once: a claim of 48 MiB passes its bound (128 MiB). 128 such elements take 6 GiB: the
    conversion's own process fails at its bound (4 GiB by default), the daemon stays up and
    small, and the unpatched twin converts."""
    import h5py

    data = tmp_path / "svcd"
    data.mkdir()
    path = data / "fill-claims-48-mib.nc"
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        f["x"] = np.arange(4, dtype="f4")
        f.create_dataset("s", shape=(128,), chunks=(128,), dtype=h5py.string_dtype(), fillvalue="FILLMARK")
    twin = data / "fill-unpatched.nc"
    twin.write_bytes(path.read_bytes())
    assert claim_heap_string(path, b"FILLMARK", 48 << 20) >= 1
    with daemon_of_its_own(daemon, tmp_path, data) as (convert, headers):
        # A chunk asked for as the store is converted is computed on request (in a process
        # bounded at 1 GiB, which fails too), then waited for; the conversion fails: the
        # reader is told so, not answered 404, which readers take for the fill value.
        url, _ = convert(path, wait=False)
        chunk = requests.get(f"{url}/s/0", headers=headers, params={"timeout": 120}, timeout=130)
        assert chunk.status_code == 500 and path.name in chunk.json()["detail"], (chunk.status_code, chunk.text)
        url, status = convert(path)
        assert status["status"] == 1 and path.name in status["reason"], status
        # The process came near its bound (what the library allocates for the claims, it
        # fills), which the reason says.
        assert "its process took" in status["reason"] and "stores.max_conversion_memory_mib" in status["reason"], status
        url, status = convert(twin)
        assert status == {"status": 0, "reason": ""}, status
        assert xr.open_zarr(url, storage_options={"headers": headers})["s"].values.tolist() == ["FILLMARK"] * 128


def test_an_aggregation_of_more_sources_than_one_probe_reads_converts_whole(daemon, portal, tmp_path):
    """A probe reads at most 64 sources before another takes over, and the conversion's
    process is handed at most 250 descriptors in one message: 300 sources, probed by at
    least five in turn and handed over in two messages, combine into one store with every
    time step, in order."""
    import netCDF4

    _, _, headers = portal
    sources = daemon.data / "sources" / "many"
    sources.mkdir(parents=True)
    paths = []
    for step in range(300):
        path = sources / f"step-{step:03d}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", 1)
            nc.createDimension("x", 3)
            time = nc.createVariable("time", "f8", ("time",))
            time.units = "days since 2000-01-01"
            time[:] = [step]
            nc.createVariable("tas", "f4", ("time", "x"))[:] = np.full((1, 3), step, dtype="f4")
        paths.append(str(path))
    answer = requests.post(f"{daemon.base}/data-portal/zarr/convert", json={"path": paths, "aggregate": "concat"}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    [url] = answer.json()["urls"]
    assert wait_ready(daemon.base, headers, url, timeout=120) == {"status": 0, "reason": ""}
    served = xr.open_zarr(url, storage_options={"headers": headers}, decode_times=False)
    np.testing.assert_array_equal(served["time"].values, np.arange(300.0))
    np.testing.assert_array_equal(served["tas"].values[:, 0], np.arange(300, dtype="f4"))
