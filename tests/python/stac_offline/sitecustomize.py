"""Offline JSON schemas for STAC validators.

stac-api-validator (through stac-validator and stac-check) downloads the STAC 1.1.0 and GeoJSON
schemas while it checks collections and items. The test machine has no internet, so with this
folder on PYTHONPATH every `requests` call to a schema host is answered from the copies pystac
bundles. The URL of each copy is its declared `$id` folder plus its file name (one bundled file
declares a slightly wrong `$id`). A schema without a local copy, such as an extension's, is a 404
that names it, so a validator reports it instead of hanging on the network."""

import json
from pathlib import Path
from urllib.parse import urlsplit

SCHEMA_HOSTS = {"schemas.stacspec.org", "geojson.org", "stac-extensions.github.io", "cdn.staclint.com"}


def _bundled_schemas():
    import pystac.validation.jsonschemas as bundle

    by_url = {}
    for path in Path(bundle.__file__).parent.rglob("*.json"):
        declared = json.loads(path.read_text()).get("$id", "").split("#")[0]
        folder = declared.rsplit("/", 1)[0]
        if folder.startswith("https://"):
            by_url[f"{folder}/{path.name}"] = path.read_bytes()
    return by_url


def _install():
    import requests
    from requests.adapters import HTTPAdapter

    schemas = _bundled_schemas()
    online_send = HTTPAdapter.send

    def send(adapter, request, *args, **kwargs):
        parts = urlsplit(request.url)
        if parts.hostname not in SCHEMA_HOSTS:
            return online_send(adapter, request, *args, **kwargs)
        url = f"https://{parts.hostname}{parts.path}"
        response = requests.Response()
        response.url, response.request, response.encoding = request.url, request, "utf-8"
        response.headers["Content-Type"] = "application/json"
        if url in schemas:
            response.status_code, response._content = 200, schemas[url]
        else:
            response.status_code = 404
            response._content = json.dumps({"detail": f"no offline copy of {url}"}).encode()
        return response

    HTTPAdapter.send = send


try:
    _install()
except ImportError:
    # Not a STAC test environment (no pystac or requests): leave networking alone.
    pass
