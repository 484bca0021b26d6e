"""The intake catalogue opens in intake-esm; the static STAC catalogue validates with pystac."""

import io
import json
import zipfile

import intake
import pystac
import pystac.validation
import requests

from conftest import assert_groups_are_their_files, open_groups


def count(base, flavour, query=""):
    return requests.get(f"{base}/databrowser/metadata-search/{flavour}/file?{query}", timeout=60).json()["total_count"]


def test_intake_catalogue_opens_in_intake_esm(svcd, tmp_path):
    reply = requests.get(f"{svcd}/databrowser/intake-catalogue/svc/file?project=cmip6", timeout=60)
    assert reply.status_code == 200
    path = tmp_path / "catalogue.json"
    path.write_bytes(reply.content)
    cat = intake.open_esm_datastore(str(path))
    expected = count(svcd, "svc", "project=cmip6")
    assert expected > 0
    assert len(cat.df) == expected
    assert set(cat.df["file"]) == set(requests.get(f"{svcd}/databrowser/data-search/svc/file?project=cmip6", timeout=60).text.split())
    subset = cat.search(variable="tas")
    assert 0 < len(subset.df) < len(cat.df)
    assert "tas" in cat.unique()["variable"]


def test_intake_catalogue_groups_and_opens_the_files(svcd, tmp_path):
    """keys() groups rows by the facet columns (strings, DECISIONS.md) and to_dataset_dict()
    opens every group from the real NetCDF files the demo catalogue points at."""
    query = "project=cmip6&variable=tas&time_frequency=mon"
    reply = requests.get(f"{svcd}/databrowser/intake-catalogue/svc/file?{query}", timeout=60)
    path = tmp_path / "catalogue.json"
    path.write_bytes(reply.content)
    cat = intake.open_esm_datastore(str(path))
    rows = reply.json()["catalog_dict"]
    assert all(isinstance(row["project"], str) and isinstance(row["variable"], list) for row in rows)
    keys = cat.keys()
    assert len(keys) > 1, "the demo catalogue has several monthly tas datasets"
    grouped = cat.df.groupby(cat.esmcat.aggregation_control.groupby_attrs).groups
    assert len(grouped) == len(keys)
    assert sum(len(cat[key].df) for key in keys) == len(rows)
    assert_groups_are_their_files(cat, open_groups(cat), "tas")


def test_cmip6_flavour_catalogue_uses_cmip6_columns(svcd, tmp_path):
    reply = requests.get(f"{svcd}/databrowser/intake-catalogue/cmip6/uri?mip_era=cmip6", timeout=60)
    path = tmp_path / "cmip6.json"
    path.write_bytes(reply.content)
    cat = intake.open_esm_datastore(str(path))
    assert "source_id" in cat.df.columns and "model" not in cat.df.columns
    assert cat.esmcat.aggregation_control.variable_column_name == "variable_id"


def test_static_catalogue_validates_as_stac(svcd, tmp_path):
    reply = requests.get(f"{svcd}/databrowser/stac-catalogue/svc/file?multi-version=true", timeout=120)
    assert reply.status_code == 200
    with zipfile.ZipFile(io.BytesIO(reply.content)) as archive:
        archive.extractall(tmp_path)
        names = archive.namelist()
    validated = 0
    for name in names:
        document = json.loads((tmp_path / name).read_text())
        pystac.validation.validate_dict(document)
        validated += 1
    total = count(svcd, "svc", "multi-version=true")
    assert validated == total + 2, "catalog, collection and one item per record"
    catalog = pystac.Catalog.from_file(str(tmp_path / "stac-catalog" / "catalog.json"))
    items = list(catalog.get_items(recursive=True))
    assert len(items) == total
    for item in items[:20]:
        assert item.get_root().id == "static-catalog"
        assert item.get_collection() is not None
    collection = next(catalog.get_collections())
    assert collection.extent.temporal.intervals[0][0] is not None
