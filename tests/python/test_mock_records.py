"""The reference service's mock records (data svcd did not make) through the real STAC clients:
pystac-client reads every collection and item, the STAC API validator finds no errors, and the
static STAC catalogue validates. The records include time-invariant files given as
`[0 TO 9999]`, whose year 0 no STAC client can parse."""

import io
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pystac
import pystac.validation
import pytest
import requests
from pystac_client import Client

from conftest import run_stac_api_validator, serve

MOCK = Path(__file__).resolve().parents[2].parent / "shared" / "testdata" / "reference-mock" / "records.jsonl"


@pytest.fixture(scope="module")
def mock_api(tmp_path_factory):
    """A running svcd whose catalogue is the mock records; yields its API base URL."""
    binary = os.environ.get("SVCD_BIN")
    assert binary, "set SVCD_BIN to the svcd binary"
    assert MOCK.exists(), f"{MOCK} is missing"
    data = tmp_path_factory.mktemp("mock")
    added = subprocess.run([binary, "--data-dir", str(data), "index", "add", str(MOCK)], capture_output=True, text=True, check=False)
    assert added.returncode == 0, added.stdout + added.stderr
    assert "rejected 0" in added.stdout, added.stdout
    proc, host = serve(binary, data)
    yield f"{host}/api/svc-nextgen"
    proc.terminate()
    assert proc.wait(timeout=30) == 0


def catalogue_count(api):
    return requests.get(f"{api}/databrowser/metadata-search/svc/file", timeout=60).json()["total_count"]


def test_pystac_client_reads_every_collection_and_item(mock_api):
    client = Client.open(f"{mock_api}/stacapi/")
    collections = list(client.get_collections())
    assert collections
    for collection in collections:
        collection.validate()
        for interval in collection.extent.temporal.intervals:
            assert all(t is None or 1 <= t.year <= 9999 for t in interval)
    items = list(client.search(limit=10).items())
    assert len(items) == catalogue_count(mock_api)
    assert len({item.id for item in items}) == len(items)
    for item in items:
        item.validate()
        assert item.common_metadata.start_datetime.year >= 1
    assert any(item.common_metadata.start_datetime.year == 1 for item in items), "the [0 TO 9999] records"


def test_stac_api_validator_finds_no_errors_on_the_mock_records(mock_api):
    collection = next(Client.open(f"{mock_api}/stacapi/").get_collections()).id
    run_stac_api_validator(f"{mock_api}/stacapi/", collection)


def test_static_catalogue_of_the_mock_records_validates(mock_api, tmp_path):
    reply = requests.get(f"{mock_api}/databrowser/stac-catalogue/svc/file", timeout=120)
    assert reply.status_code == 200, reply.text
    with zipfile.ZipFile(io.BytesIO(reply.content)) as archive:
        archive.extractall(tmp_path)
        names = archive.namelist()
    for name in names:
        pystac.validation.validate_dict(json.loads((tmp_path / name).read_text()))
    catalog = pystac.Catalog.from_file(str(tmp_path / "stac-catalog" / "catalog.json"))
    items = list(catalog.get_items(recursive=True))
    assert len(items) == catalogue_count(mock_api)
    for item in items:
        assert item.common_metadata.start_datetime.year >= 1


@pytest.mark.parametrize("flavour", ["svc", "cmip6", "cordex"])
def test_the_intake_catalogue_of_records_of_several_projects_opens_in_intake_esm(mock_api, tmp_path, flavour):
    """The mock records mix projects whose records carry different facets (member_id in
    CMIP6's, grid_id in nextgems'): the catalogue of all of them still opens, groups and
    lists every record, a record without a facet giving an empty value."""
    import intake

    reply = requests.get(f"{mock_api}/databrowser/intake-catalogue/{flavour}/file", timeout=120)
    assert reply.status_code == 200, reply.text
    path = tmp_path / "catalogue.json"
    path.write_bytes(reply.content)
    cat = intake.open_esm_datastore(str(path))
    assert len(cat.df) == catalogue_count(mock_api)
    assert len(cat.keys()) > 1
    groupby = cat.esmcat.aggregation_control.groupby_attrs
    assert not cat.df[groupby].isna().any().any()
    # Records without a facet are still found by the ones they have.
    project = "project" if flavour != "cmip6" else "mip_era"
    projects = set(cat.df[project])
    assert len(projects) > 1, projects
    for value in projects:
        assert len(cat.search(**{project: value}).df) == (cat.df[project] == value).sum()
