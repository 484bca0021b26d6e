"""The STAC API as STAC clients see it: the STAC API validator finds no errors, and
pystac-client searches, pages and counts agree with the databrowser over the demo catalogue."""

import pystac
import pytest
import requests
from pystac_client import Client
from pystac_client.stac_api_io import StacApiIO

from conftest import run_stac_api_validator


def databrowser_count(svcd, **filters):
    """Number of newest-version records the databrowser finds for `filters` (svc names)."""
    reply = requests.get(f"{svcd}/databrowser/metadata-search/svc/file", params={**filters, "facets": "project"}, timeout=60)
    reply.raise_for_status()
    return reply.json()["total_count"]


@pytest.fixture(scope="module")
def client(svcd):
    return Client.open(f"{svcd}/stacapi/")


def test_stac_api_validator_finds_no_errors(svcd):
    run_stac_api_validator(f"{svcd}/stacapi/", "cmip6")


def test_collections_are_the_projects(svcd, client):
    reply = requests.get(f"{svcd}/databrowser/metadata-search/svc/file", params={"facets": "project"}, timeout=60)
    projects = reply.json()["facets"]["project"][::2]
    collections = sorted(c.id for c in client.get_collections())
    assert collections == sorted(projects)
    for collection in client.get_collections():
        collection.validate()


def test_paging_yields_every_record_once(svcd, client):
    search = client.search(collections=["cmip6"], limit=7, method="GET")
    ids = [item.id for item in search.items()]
    assert len(ids) == len(set(ids)), "no item twice"
    expected = databrowser_count(svcd, project="cmip6")
    assert expected > 7, "the search spans several pages"
    assert len(ids) == expected
    assert search.matched() == expected
    post = client.search(collections=["cmip6"], limit=5, method="POST")
    assert sorted(item.id for item in post.items()) == sorted(ids)


def test_bbox_and_datetime_match_the_databrowser(svcd, client):
    search = client.search(bbox=[-10, 40, 10, 60], limit=50)
    items = list(search.items())
    assert len(items) == databrowser_count(svcd, bbox="-10,10,40,60")
    assert items, "the demo catalogue has records over Europe"
    for item in items:
        west, south, east, north = item.bbox
        assert west <= 10 and east >= -10 and south <= 60 and north >= 40, item.bbox
        item.validate()
    window = "2000-01-01T00:00:00Z/2010-12-31T23:59:59Z"
    found = list(client.search(datetime=window, limit=100).items())
    assert len(found) == databrowser_count(svcd, time="2000-01-01T00:00:00 to 2010-12-31T23:59:59")
    assert found
    for item in found:
        start = item.properties["start_datetime"]
        end = item.properties["end_datetime"]
        assert start <= "2010-12-31T23:59:59Z" and end >= "2000-01-01T00:00:00Z", (start, end)


def test_free_text_and_ids(svcd, client):
    # pystac-client's search() has no `q`; its API I/O pages through a POST search with one.
    pages = StacApiIO().get_pages(f"{svcd}/stacapi/search", method="POST", parameters={"q": "tas", "limit": 4})
    hits = [pystac.Item.from_dict(f) for page in pages for f in page["features"]]
    assert len(hits) > 4, "several pages"
    assert len({item.id for item in hits}) == len(hits)
    for item in hits:
        values = [v for vs in item.properties.values() if isinstance(vs, list) for v in vs]
        assert any("tas" in str(v).lower() for v in values), item.properties
    assert len(hits) >= databrowser_count(svcd, variable="tas")
    wanted = [hits[0].id, hits[-1].id]
    by_id = list(client.search(ids=wanted).items())
    assert sorted(i.id for i in by_id) == sorted(set(wanted))


def test_items_validate_and_resolve_their_links(svcd, client):
    collection = client.get_collection("cmip6")
    item = next(collection.get_items())
    item.validate()
    fetched = pystac.Item.from_dict(requests.get(item.get_self_href(), timeout=60).json())
    assert fetched.id == item.id
    assert set(fetched.assets) == {"svc-databrowser", "svc-data-viewer", "access-data", "intake-catalogue", "stac-catalogue"}
    catalogue = requests.get(fetched.assets["intake-catalogue"].href, timeout=60).json()
    assert catalogue["catalog_dict"][0]["file"] == fetched.properties["title"]
