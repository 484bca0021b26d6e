//! The STAC 1.1.0 documents svcd writes, as typed structs: [`Item`], [`Collection`] and
//! [`Catalog`] with their [`Link`]s and [`Asset`]s. Both the STAC API (`stac/mod.rs`) and the
//! static catalogues (`databrowser/static_stac.rs`) build their items and collections here, so
//! what a record contributes (properties, times, geometry, media type) is computed in one
//! place; the two differ only in ids, links and assets.

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::catalog::time::format_instant;
use crate::catalog::{Extent, Record};

/// The STAC version of every document.
pub(crate) const STAC_VERSION: &str = "1.1.0";

/// The whole globe, the spatial extent of a collection none of whose records has a box.
const GLOBE: [f64; 4] = [-180.0, -90.0, 180.0, 90.0];

/// A link of a STAC document.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Link {
    rel: String,
    href: String,
    #[serde(rename = "type")]
    media_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
}

impl Link {
    /// A link without a title.
    pub(crate) fn new(rel: &str, href: impl Into<String>, media_type: &str) -> Self {
        Link {
            rel: rel.to_owned(),
            href: href.into(),
            media_type: media_type.to_owned(),
            title: None,
        }
    }

    /// The link with a title.
    pub(crate) fn titled(mut self, title: &str) -> Self {
        self.title = Some(title.to_owned());
        self
    }
}

/// An asset of an item or a collection.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Asset {
    href: String,
    title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    roles: Vec<&'static str>,
    #[serde(rename = "type")]
    media_type: String,
    /// Authentication schemes the href needs (`oauth2` for the data portal's stores).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    requires: Vec<&'static str>,
    /// `local` (the service reads the file) or `remote` (clients open it themselves).
    #[serde(rename = "svc:storage", skip_serializing_if = "Option::is_none")]
    storage: Option<&'static str>,
}

impl Asset {
    /// An asset with its roles.
    pub(crate) fn new(
        href: impl Into<String>,
        title: &str,
        media_type: &str,
        roles: &[&'static str],
    ) -> Self {
        Asset {
            href: href.into(),
            title: title.to_owned(),
            description: None,
            roles: roles.to_vec(),
            media_type: media_type.to_owned(),
            requires: Vec::new(),
            storage: None,
        }
    }

    /// The asset with a description.
    pub(crate) fn described(mut self, description: &str) -> Self {
        self.description = Some(description.to_owned());
        self
    }

    /// The asset with the authentication its href needs and where its data is stored.
    pub(crate) fn stored(mut self, storage: &'static str, requires: &[&'static str]) -> Self {
        self.storage = Some(storage);
        self.requires = requires.to_vec();
        self
    }
}

/// Named assets in the order they were added.
type Assets = Vec<(&'static str, Asset)>;

fn as_map<S: Serializer>(assets: &Assets, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(assets.iter().map(|(name, asset)| (name, asset)))
}

/// A STAC item: one record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Item {
    #[serde(rename = "type")]
    kind: &'static str,
    stac_version: &'static str,
    stac_extensions: [&'static str; 0],
    id: String,
    geometry: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bbox: Option<[f64; 4]>,
    properties: Map<String, Value>,
    links: Vec<Link>,
    #[serde(serialize_with = "as_map")]
    assets: Assets,
    collection: String,
}

impl Item {
    /// The item of `record` in `collection`: its geometry and box, and its properties (every
    /// facet as an array of strings under the name `facet_name` gives it, `version`, `title`
    /// and the item times). Links and assets are the caller's.
    pub(crate) fn of_record(
        id: String,
        record: &Record,
        facet_name: impl Fn(&str) -> String,
        title: &str,
        collection: &str,
    ) -> Self {
        Item {
            kind: "Feature",
            stac_version: STAC_VERSION,
            stac_extensions: [],
            id,
            geometry: record.bbox.map(polygon),
            bbox: record.bbox,
            properties: item_properties(record, facet_name, title),
            links: Vec::new(),
            assets: Vec::new(),
            collection: collection.to_owned(),
        }
    }

    /// Adds a link.
    pub(crate) fn link(mut self, link: Link) -> Self {
        self.links.push(link);
        self
    }

    /// Adds an asset.
    pub(crate) fn asset(mut self, name: &'static str, asset: Asset) -> Self {
        self.assets.push((name, asset));
        self
    }

    /// The item as a JSON value.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("STAC items serialise")
    }
}

/// A STAC collection.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Collection {
    #[serde(rename = "type")]
    kind: &'static str,
    stac_version: &'static str,
    stac_extensions: [&'static str; 0],
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    summaries: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    keywords: Vec<String>,
    license: &'static str,
    providers: Vec<Provider>,
    extent: CollectionExtent,
    links: Vec<Link>,
    #[serde(serialize_with = "as_map", skip_serializing_if = "Vec::is_empty")]
    assets: Assets,
}

/// A provider of a collection.
#[derive(Debug, Clone, Serialize)]
struct Provider {
    name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    roles: Vec<&'static str>,
    url: String,
}

#[derive(Debug, Clone, Serialize)]
struct CollectionExtent {
    spatial: SpatialExtent,
    temporal: TemporalExtent,
}

#[derive(Debug, Clone, Serialize)]
struct SpatialExtent {
    bbox: [[f64; 4]; 1],
}

#[derive(Debug, Clone, Serialize)]
struct TemporalExtent {
    interval: [[Option<String>; 2]; 1],
}

impl Collection {
    /// A collection over `extent` (the globe when no record has a box; an open interval when
    /// none has a time range), licensed `other`.
    pub(crate) fn new(id: &str, description: String, extent: &Extent) -> Self {
        Collection {
            kind: "Collection",
            stac_version: STAC_VERSION,
            stac_extensions: [],
            id: id.to_owned(),
            title: None,
            description,
            summaries: None,
            keywords: Vec::new(),
            license: "other",
            providers: Vec::new(),
            extent: CollectionExtent {
                spatial: SpatialExtent {
                    bbox: [extent.bbox.unwrap_or(GLOBE)],
                },
                temporal: TemporalExtent {
                    interval: [[extent.start.map(stac_instant), extent.end.map(stac_instant)]],
                },
            },
            links: Vec::new(),
            assets: Vec::new(),
        }
    }

    /// The collection with a title.
    pub(crate) fn titled(mut self, title: &str) -> Self {
        self.title = Some(title.to_owned());
        self
    }

    /// The collection with its summaries and keywords.
    pub(crate) fn summarised(
        mut self,
        summaries: Map<String, Value>,
        keywords: Vec<String>,
    ) -> Self {
        self.summaries = Some(summaries);
        self.keywords = keywords;
        self
    }

    /// Adds a provider.
    pub(crate) fn provider(mut self, name: &str, roles: &[&'static str], url: &str) -> Self {
        self.providers.push(Provider {
            name: name.to_owned(),
            roles: roles.to_vec(),
            url: url.to_owned(),
        });
        self
    }

    /// Adds links.
    pub(crate) fn links(mut self, links: impl IntoIterator<Item = Link>) -> Self {
        self.links.extend(links);
        self
    }

    /// Adds an asset.
    pub(crate) fn asset(mut self, name: &'static str, asset: Asset) -> Self {
        self.assets.push((name, asset));
        self
    }

    /// The collection as a JSON value.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("STAC collections serialise")
    }
}

/// A STAC catalog: the root of a static catalogue.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Catalog {
    #[serde(rename = "type")]
    kind: &'static str,
    stac_version: &'static str,
    id: String,
    description: String,
    links: Vec<Link>,
}

impl Catalog {
    /// A catalog with its links.
    pub(crate) fn new(id: &str, description: &str, links: Vec<Link>) -> Self {
        Catalog {
            kind: "Catalog",
            stac_version: STAC_VERSION,
            id: id.to_owned(),
            description: description.to_owned(),
            links,
        }
    }

    /// The catalog as a JSON value.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("STAC catalogs serialise")
    }
}

/// A record's STAC item properties: every facet as an array of strings (under the name
/// `facet_name` gives it), `version`, `title`, and the item times.
fn item_properties(
    record: &Record,
    facet_name: impl Fn(&str) -> String,
    title: &str,
) -> Map<String, Value> {
    let mut properties = Map::new();
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

/// Formats a time for a STAC document. Catalogue ranges may reach beyond what RFC 3339 can
/// say: time-invariant files are often given as `[0 TO 9999]`, whose start is in year 0.
/// Decision: such a time is shown as the nearest instant that can be written
/// (0001-01-01T00:00:00Z), as the open interval of a time-invariant item is.
pub(crate) fn stac_instant(seconds: i64) -> String {
    format_instant(seconds.clamp(FIRST_INSTANT, LAST_INSTANT))
}

/// Adds an item's `datetime`, `start_datetime` and `end_datetime`. A record without a time
/// range is time-invariant (fx): `datetime: null` with the open interval 0001..9999, which
/// STAC requires for a null datetime.
fn insert_times(properties: &mut Map<String, Value>, record: &Record) {
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
fn polygon([min_lon, min_lat, max_lon, max_lat]: [f64; 4]) -> Value {
    serde_json::json!({
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

    #[test]
    fn an_item_has_every_field_stac_requires_and_keeps_asset_order() {
        let mut r = Record::new("/data/tas.nc");
        r.bbox = Some([0.0, -10.0, 20.0, 10.0]);
        r.time = Some("[2000-01-01T00:00:00Z TO 2000-12-31T00:00:00Z]".into());
        let item = Item::of_record("i1".into(), &r, str::to_owned, "tas", "cmip6")
            .link(Link::new("self", "./i1.json", "application/json"))
            .asset("b", Asset::new("/b", "B", "text/plain", &["metadata"]))
            .asset("a", Asset::new("/a", "A", "text/plain", &["data"]))
            .to_value();
        for field in [
            "type",
            "stac_version",
            "id",
            "geometry",
            "bbox",
            "properties",
            "links",
            "assets",
            "collection",
        ] {
            assert!(item.get(field).is_some(), "{field} missing: {item}");
        }
        assert_eq!(item["type"], "Feature");
        assert_eq!(
            item["geometry"]["coordinates"][0][2],
            serde_json::json!([20.0, 10.0])
        );
        let names: Vec<&String> = item["assets"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["b", "a"]);
        assert!(item["links"][0].get("title").is_none());
        assert_eq!(item["properties"]["datetime"], "2000-01-01T00:00:00Z");
    }

    #[test]
    fn a_collection_without_boxes_or_times_covers_the_globe_and_an_open_interval() {
        let c = Collection::new("c", "d".into(), &Extent::default()).to_value();
        assert_eq!(
            c["extent"],
            serde_json::json!({
                "spatial": {"bbox": [[-180.0, -90.0, 180.0, 90.0]]},
                "temporal": {"interval": [[null, null]]},
            })
        );
        assert!(c.get("assets").is_none() && c.get("title").is_none());
        assert_eq!(c["license"], "other");
    }
}
