//! Static STAC catalogues: a ZIP with one catalog, one collection and one item per record,
//! every JSON a valid STAC 1.1.0 object.
//!
//! Layout: `stac-catalog/catalog.json`, `stac-catalog/collections/<id>/items/item<N>.json` in
//! result order, then `stac-catalog/collections/<id>/collection.json` (last, when the extents
//! are known). Relative links point where the files are: an item's root and parent are
//! `../../../catalog.json`. Decision: a record without a time range is time-invariant (fx) and
//! gets `datetime: null` with the open interval 0001-01-01..9999-12-31, which STAC requires for
//! a null datetime; a collection with no timed item has the interval `[[null, null]]`.

use std::io::Write;
use std::sync::Arc;

use serde_json::{Value, json};
use zip::write::SimpleFileOptions;

use crate::catalog::time::format_instant;
use crate::catalog::{Catalog, Cursor, Extent, Record, Selection};
use crate::error::{Error, Result};

use super::Search;
use crate::stac::STAC_VERSION;

const BATCH: usize = 2_000;

/// Where the catalogue's assets point.
#[derive(Debug, Clone)]
pub struct Links {
    /// Absolute base URL of the API, e.g. `http://host:7777/api/svc-nextgen`.
    pub api_base: String,
}

/// A static catalogue ready to be written.
pub struct StaticCatalogue {
    cursor: Cursor,
    search: Search,
    links: Links,
    /// The collection id, `Dataset-<uuid prefix>`.
    pub collection_id: String,
    /// The suggested file name of the ZIP.
    pub file_name: String,
}

impl StaticCatalogue {
    pub(super) fn new(
        catalog: &Arc<Catalog>,
        search: &Search,
        selection: Selection,
        links: Links,
    ) -> Self {
        let uuid = uuid::Uuid::new_v4().to_string();
        let collection_id = format!("Dataset-{}", &uuid[..18]);
        let file_name = format!(
            "stac-catalog-{collection_id}-{}.zip",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        StaticCatalogue {
            cursor: catalog.cursor(selection, search.params.start),
            search: search.clone(),
            links,
            collection_id,
            file_name,
        }
    }

    /// Writes the ZIP to a (possibly unseekable) writer.
    ///
    /// # Errors
    /// A store error, or an I/O error of the writer.
    pub fn write_to<W: Write>(mut self, writer: W) -> Result<()> {
        let mut zip = zip::ZipWriter::new_stream(writer);
        let options =
            SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        let cid = self.collection_id.clone();
        let put = |zip: &mut zip::ZipWriter<_>, name: String, value: &Value| -> Result<()> {
            zip.start_file(name, options).map_err(zip_error)?;
            let bytes = serde_json::to_vec_pretty(value).expect("JSON values serialise");
            zip.write_all(&bytes)
                .map_err(|e| Error::io("write static catalogue", e))
        };
        put(
            &mut zip,
            "stac-catalog/catalog.json".into(),
            &self.catalog_json(),
        )?;
        let mut extent = Extent::default();
        let mut n = 0usize;
        loop {
            let records = self.cursor.next_records(BATCH)?;
            if records.is_empty() {
                break;
            }
            for record in &records {
                extent.include(record.bbox, record.time_range().map(|t| (t.start, t.end)));
                let item = self.item_json(n, record);
                put(
                    &mut zip,
                    format!("stac-catalog/collections/{cid}/items/item{n}.json"),
                    &item,
                )?;
                n += 1;
            }
        }
        put(
            &mut zip,
            format!("stac-catalog/collections/{cid}/collection.json"),
            &self.collection_json(n, &extent),
        )?;
        zip.finish().map_err(zip_error)?;
        Ok(())
    }

    fn catalog_json(&self) -> Value {
        json!({
            "type": "Catalog",
            "stac_version": STAC_VERSION,
            "id": "static-catalog",
            "description": "Static STAC catalog of an svc-nextgen databrowser search",
            "links": [
                {"rel": "root", "href": "./catalog.json", "type": "application/json"},
                {"rel": "child", "href": format!("./collections/{}/collection.json", self.collection_id), "type": "application/json"},
            ],
        })
    }

    fn search_query(&self, extra: Option<(&str, &str)>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.search.params.filters {
            query.append_pair(k, v);
        }
        if self.search.params.multi_version {
            query.append_pair("multi-version", "true");
        }
        if let Some((k, v)) = extra {
            query.append_pair(k, v);
        }
        query.finish()
    }

    fn endpoint(&self, name: &str) -> String {
        format!(
            "{}/databrowser/{name}/{}/{}",
            self.links.api_base,
            self.search.flavour.name,
            self.search.uniq_key.as_str()
        )
    }

    fn item_json(&self, n: usize, record: &Record) -> Value {
        let flavour = &self.search.flavour;
        let location = match self.search.uniq_key.as_str() {
            "uri" => &record.uri,
            _ => &record.file,
        };
        let properties = item_properties(
            record,
            |std| flavour.to_flavour(std).unwrap_or(std).to_owned(),
            location,
        );
        let mut item = json!({
            "type": "Feature",
            "stac_version": STAC_VERSION,
            "stac_extensions": [],
            "id": format!("item{n}"),
            "geometry": record.bbox.map(polygon),
            "properties": properties,
            "links": [
                {"rel": "self", "href": format!("./item{n}.json"), "type": "application/json"},
                {"rel": "root", "href": "../../../catalog.json", "type": "application/json"},
                {"rel": "parent", "href": "../../../catalog.json", "type": "application/json"},
                {"rel": "collection", "href": "../collection.json", "type": "application/json"},
            ],
            "assets": {
                "access-data": {
                    "href": location,
                    "title": "Access data",
                    "description": "The file or object this item describes.",
                    "roles": ["data"],
                    "type": media_type(location),
                },
                "intake-catalogue": {
                    "href": format!("{}?{}", self.endpoint("intake-catalogue"), self.search_query(Some(("file", &record.file)))),
                    "title": "intake-esm catalogue",
                    "description": "An intake-esm catalogue of this file: intake.open_esm_datastore(href).",
                    "roles": ["metadata"],
                    "type": "application/json",
                },
            },
            "collection": self.collection_id,
        });
        if let Some(b) = record.bbox {
            item["bbox"] = json!(b);
        }
        item
    }

    fn collection_json(&self, items: usize, extent: &Extent) -> Value {
        let mut links = vec![
            json!({"rel": "root", "href": "../../catalog.json", "type": "application/json"}),
            json!({"rel": "parent", "href": "../../catalog.json", "type": "application/json"}),
        ];
        links.extend((0..items).map(|n| json!({"rel": "item", "href": format!("./items/item{n}.json"), "type": "application/json"})));
        let query = self.search_query(None);
        json!({
            "type": "Collection",
            "stac_version": STAC_VERSION,
            "stac_extensions": [],
            "id": self.collection_id,
            "description": "Static STAC collection of an svc-nextgen databrowser search",
            "license": "other",
            "extent": {
                "spatial": {"bbox": [extent.bbox.unwrap_or([-180.0, -90.0, 180.0, 90.0])]},
                "temporal": {"interval": [[extent.start.map(stac_instant), extent.end.map(stac_instant)]]},
            },
            "links": links,
            "assets": {
                "intake-catalogue": {
                    "href": format!("{}?{query}", self.endpoint("intake-catalogue")),
                    "title": "intake-esm catalogue",
                    "roles": ["metadata"],
                    "type": "application/json",
                },
                "stac-catalogue": {
                    "href": format!("{}?{query}", self.endpoint("stac-catalogue")),
                    "title": "This STAC Catalogue",
                    "roles": ["metadata"],
                    "type": "application/zip",
                },
                "data-search": {
                    "href": format!("{}?{query}", self.endpoint("data-search")),
                    "title": "Locations of the search",
                    "roles": ["metadata"],
                    "type": "text/plain",
                },
            },
            "providers": [{"name": "svc-nextgen databrowser", "url": self.links.api_base}],
        })
    }
}

/// A record's STAC item properties, for the static catalogue and the STAC API alike: every
/// facet as an array of strings (under the name `facet_name` gives it), `version`, `title`,
/// and the item times.
pub(crate) fn item_properties(
    record: &Record,
    facet_name: impl Fn(&str) -> String,
    title: &str,
) -> serde_json::Map<String, Value> {
    let mut properties = serde_json::Map::new();
    for (facet, values) in &record.facets {
        properties.insert(
            facet_name(facet),
            values.iter().cloned().map(Value::String).collect(),
        );
    }
    if let Some(v) = &record.version {
        properties.insert("version".into(), Value::String(v.clone()));
    }
    properties.insert("title".into(), Value::String(title.to_owned()));
    insert_times(&mut properties, record);
    properties
}

/// The first and last second STAC documents can show: RFC 3339 and the clients' date types
/// (Python's `datetime`) know the years 1 to 9999 only.
const FIRST_INSTANT: i64 = -62_135_596_800;
const LAST_INSTANT: i64 = 253_402_300_799;

/// Formats a time for a STAC document (API and static catalogue). Catalogue ranges may reach
/// beyond what RFC 3339 can say: time-invariant files are often given as `[0 TO 9999]`, whose
/// start is in year 0. Decision: such a time is shown as the nearest instant that can be
/// written (0001-01-01T00:00:00Z), as the open interval of a time-invariant item is.
pub(crate) fn stac_instant(seconds: i64) -> String {
    format_instant(seconds.clamp(FIRST_INSTANT, LAST_INSTANT))
}

/// Adds an item's `datetime`, `start_datetime` and `end_datetime`. A record without a time
/// range is time-invariant (fx): `datetime: null` with the open interval 0001..9999, which
/// STAC requires for a null datetime.
fn insert_times(properties: &mut serde_json::Map<String, Value>, record: &Record) {
    let (start, end, datetime) = match record.time_range() {
        Some(t) => (
            stac_instant(t.start),
            stac_instant(t.end),
            Value::String(stac_instant(t.start)),
        ),
        None => (
            stac_instant(FIRST_INSTANT),
            stac_instant(LAST_INSTANT),
            Value::Null,
        ),
    };
    properties.insert("datetime".into(), datetime);
    properties.insert("start_datetime".into(), Value::String(start));
    properties.insert("end_datetime".into(), Value::String(end));
}

/// The closed polygon of a box `[min_lon, min_lat, max_lon, max_lat]`.
pub(crate) fn polygon([min_lon, min_lat, max_lon, max_lat]: [f64; 4]) -> Value {
    json!({
        "type": "Polygon",
        "coordinates": [[[min_lon, min_lat], [max_lon, min_lat], [max_lon, max_lat], [min_lon, max_lat], [min_lon, min_lat]]],
    })
}

/// The media type of a location, from its suffix.
pub(crate) fn media_type(location: &str) -> &'static str {
    let lower = location.to_ascii_lowercase();
    let suffix = lower.rsplit('.').next().unwrap_or("");
    match suffix {
        "zarr" => "application/vnd+zarr",
        "nc" | "nc4" | "cdf" | "netcdf" => "application/netcdf",
        "grb" | "grib" | "grb2" | "grib2" => "application/wmo-GRIB2",
        "h5" | "hdf5" | "hdf" => "application/x-hdf5",
        "tif" | "tiff" => "image/tiff; application=geotiff",
        "json" => "application/json",
        _ => "application/octet-stream",
    }
}

fn zip_error(e: zip::result::ZipError) -> Error {
    Error::io("write static catalogue", std::io::Error::other(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stac_times_stay_within_years_1_to_9999() {
        let mut r = Record::new("/fx.nc");
        r.time = Some("[0 TO 9999]".into());
        let p = item_properties(&r, str::to_owned, "fx");
        assert_eq!(p["start_datetime"], "0001-01-01T00:00:00Z");
        assert_eq!(p["datetime"], "0001-01-01T00:00:00Z");
        assert_eq!(p["end_datetime"], "9999-12-31T23:59:59Z");
        assert_eq!(stac_instant(0), "1970-01-01T00:00:00Z");
    }
}
