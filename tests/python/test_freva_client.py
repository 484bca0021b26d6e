"""The unmodified freva-client CLI against svcd on the /api/freva-nextgen compat prefix.

freva-client exits 0 even when the server answers with an error, so every test asserts on
what the command printed, compared with what the API itself answers."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from conftest import assert_groups_are_their_files, open_groups

CLIENT = str(Path(sys.executable).parent / "freva-client")


@pytest.fixture(scope="module")
def client(daemon, tmp_path_factory):
    """Run `freva-client databrowser ...` with an isolated HOME; return stdout."""
    home = tmp_path_factory.mktemp("home")

    def run(*args):
        env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
        result = subprocess.run(
            [CLIENT, "databrowser", *args, "--host", daemon.host],
            capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    return run


def api(daemon, path, **params):
    reply = requests.get(f"{daemon.base}/databrowser/{path}", params=params, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply


def test_searches_match_the_api(daemon, client):
    expected = api(daemon, "data-search/svc/file", project="cmip6", variable="tas").text.split()
    assert expected
    assert client("data-search", "project=cmip6", "variable=tas").split() == expected

    total = api(daemon, "metadata-search/svc/file", project="cmip6").json()["total_count"]
    assert json.loads(client("data-count", "--json", "project=cmip6")) == total

    facets = json.loads(client("metadata-search", "--json", "project=cmip6"))
    assert "tas" in facets["variable"]

    overview = client("data-overview")
    for flavour in ("svc", "cmip6", "cordex", "nextgems"):
        assert flavour in overview


def test_intake_catalogue_is_written(daemon, client, tmp_path):
    target = tmp_path / "cat.json"
    client("intake-catalogue", "--filename", str(target), "project=cmip6")
    catalogue = json.loads(target.read_text())
    total = api(daemon, "metadata-search/svc/file", project="cmip6").json()["total_count"]
    assert len(catalogue["catalog_dict"]) == total


def test_intake_catalogue_through_the_python_api(daemon):
    """freva-client's own intake_catalogue() groups the files and opens every group."""
    from freva_client import databrowser

    search = databrowser(host=daemon.host, project="cmip6", variable="tas", time_frequency="mon")
    cat = search.intake_catalogue()
    keys = cat.keys()
    assert len(keys) > 1
    assert sum(len(cat[key].df) for key in keys) == len(search)
    assert_groups_are_their_files(cat, open_groups(cat), "tas")


def test_user_data_add_search_and_delete(daemon, client, tmp_path):
    token = tmp_path / "jane.json"
    daemon.token_file(token, "jane")
    # A copy of a demo file at a new location: the client reads it with xarray.
    source = next((daemon.data / "demo").rglob("*.nc"))
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(source, mine / "copy.nc")
    out = client("user-data", "add", "--path", str(mine), "--facet", "project=janes",
                 "--token-file", str(token))
    assert "1 files have been successfully added" in out, out
    found = api(daemon, "data-search/user/file", project="janes").text.split()
    assert found == [str(mine / "copy.nc")]
    assert api(daemon, "data-search/user/file", user="jane").text.split() == found

    out = client("user-data", "add", "--path", str(mine), "--facet", "project=janes",
                 "--token-file", str(token))
    assert "1 files were duplicates" in out, out

    client("user-data", "delete", "-s", "project=janes", "--token-file", str(token))
    assert api(daemon, "data-search/user/file", project="janes").text == ""


def test_flavour_add_list_use_and_delete(daemon, client, tmp_path):
    admin = tmp_path / "admin.json"
    daemon.token_file(admin, "ada", admin=True)
    out = client("flavour", "add", "clientflav", "--map", "model=source", "--map",
                 "experiment=exp", "--global", "--token-file", str(admin))
    assert "added successfully" in out, out
    names = [f["flavour_name"] for f in json.loads(client("flavour", "list", "--json"))]
    assert "clientflav" in names and "svc" in names

    expected = api(daemon, "data-search/svc/file", experiment="historical").text.split()
    assert expected
    assert client("data-search", "--flavour", "clientflav", "exp=historical").split() == expected

    out = client("flavour", "delete", "clientflav", "--global", "--token-file", str(admin))
    assert "deleted successfully" in out, out
    names = [f["flavour_name"] for f in json.loads(client("flavour", "list", "--json"))]
    assert "clientflav" not in names


def test_zarr_utils_and_zarr_streams_through_the_client(daemon, tmp_path):
    """`freva-client zarr-utils convert|status` and `databrowser data-search --zarr`, unmodified,
    on the compat prefix; the URLs open with xarray and hold the files' values."""
    import numpy as np
    import xarray as xr

    home = tmp_path / "home"
    home.mkdir()
    token = tmp_path / "jane.json"
    access = daemon.token_file(token, "jane")
    headers = {"Authorization": f"Bearer {access}"}

    def run(*args):
        env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
        result = subprocess.run([CLIENT, *args, "--host", daemon.host, "--token-file", str(token)],
                                capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    source = str(next((daemon.data / "demo").rglob("*.nc")))
    out = run("zarr-utils", "convert", source, "--json")
    [url] = json.loads(out)
    assert "/data-portal/zarr/" in url and url.endswith(".zarr"), out
    deadline = time.monotonic() + 120
    while True:
        status = json.loads(run("zarr-utils", "status", url))
        if status["status"] != 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == {"status": 0, "reason": ""}, status
    served = xr.open_zarr(url, storage_options={"headers": headers})
    with xr.open_dataset(source, engine="netcdf4") as expected:
        for name in expected.data_vars:
            np.testing.assert_array_equal(served[name].values, expected[name].values, err_msg=name)

    files = api(daemon, "data-search/svc/file", project="cordex").text.split()
    urls = run("databrowser", "data-search", "--zarr", "project=cordex").split()
    assert len(urls) == len(files) > 1 and all("/data-portal/zarr/" in u for u in urls), urls

    # The intake catalogue of the stores: one row per file, located at its store, opened
    # by intake-esm with xarray's Zarr engine.
    import intake

    target = tmp_path / "zarr-cat.json"
    run("databrowser", "intake-catalogue", "--zarr", "--filename", str(target), "project=cordex")
    cat = intake.open_esm_datastore(str(target))
    assert sorted(cat.df["uri"]) == sorted(urls) and set(cat.df["format"]) == {"zarr"}
    datasets = cat.to_dataset_dict(progressbar=False, storage_options={"headers": headers})
    # `load` answers in the order of the search, as data-search does.
    sources = dict(zip(urls, files))
    for variable in {row[0] for row in cat.df["variable"]}:
        part = cat.search(variable=variable)
        opened = {key: datasets[key] for key in part.keys()}
        assert_groups_are_their_files(part, opened, variable, sources)


def test_aggregation_through_the_client(daemon, tmp_path):
    """`freva-client zarr-utils convert --aggregate concat` and the Python API's
    `databrowser(...).aggregate(...)`, unmodified: each gives one URL whose store opens with
    xarray and holds what xarray makes of the same files with the options the client sends."""
    import xarray as xr

    from test_aggregate import assert_same, expected, write
    from test_portal import wait_ready

    home = tmp_path / "home"
    home.mkdir()
    token = tmp_path / "ann.json"
    access = daemon.token_file(token, "ann")
    headers = {"Authorization": f"Bearer {access}"}
    env = dict(os.environ, HOME=str(home), NO_COLOR="1", COLUMNS="200")
    # What the Python API sends besides `aggregate` (its defaults); the CLI sends null for
    # every option it is not given, which leaves the server's defaults.
    sent = {"join": "outer", "compat": "override", "data_vars": "minimal", "coords": "minimal"}

    root = daemon.data / "client-aggregate"
    root.mkdir()
    paths = [str(write(root / f"part{n}.nc", time=range(4 * n, 4 * n + 4), seed=n)) for n in range(3)]
    result = subprocess.run([CLIENT, "zarr-utils", "convert", *paths, "--aggregate", "concat", "--json",
                             "--host", daemon.host, "--token-file", str(token)],
                            capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    [url] = json.loads(result.stdout)
    assert wait_ready(daemon.base, headers, url, timeout=120) == {"status": 0, "reason": ""}
    served = xr.open_zarr(url, storage_options={"headers": headers}, decode_cf=False)
    [want] = expected(paths, {"aggregate": "concat"}).values()
    assert_same(served, want, "zarr-utils convert --aggregate concat")
    decoded = xr.open_zarr(url, storage_options={"headers": headers})
    assert decoded.sizes["time"] == 12 and str(decoded.time.values[0]).startswith("2000-01-01")

    # The Python API: the search's files, in its order, combined into one store.
    script = f"""
import json, freva_client
freva_client.authenticate(token_file={str(token)!r}, host={daemon.host!r})
url = freva_client.databrowser(project="cordex", host={daemon.host!r}).aggregate("auto")
print(json.dumps(url))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                            stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    url = json.loads(result.stdout.strip().splitlines()[-1])
    assert "/data-portal/zarr/" in url and url.endswith(".zarr"), url
    files = api(daemon, "data-search/svc/file", project="cordex").text.split()
    status = wait_ready(daemon.base, headers, url, timeout=120)
    groups = expected(files, dict(sent, aggregate="auto"))
    assert status == {"status": 0, "reason": ""}, status
    for group, dataset in groups.items():
        served = xr.open_zarr(url, group=group or None, storage_options={"headers": headers}, decode_cf=False)
        assert_same(served, dataset, f"databrowser(project=cordex).aggregate('auto') {group}")
