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

use serde_json::Value;
use zip::write::SimpleFileOptions;

use crate::catalog::{Catalog, Cursor, Extent, Record, Selection};
use crate::error::{Error, Result};
use crate::stac::{Asset, Collection, Item, Link, StacCatalog, media_type};

use super::Search;

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
        let child = format!("./collections/{}/collection.json", self.collection_id);
        StacCatalog::new(
            "static-catalog",
            "Static STAC catalog of an svc-nextgen databrowser search",
            vec![
                Link::new("root", "./catalog.json", "application/json"),
                Link::new("child", child, "application/json"),
            ],
        )
        .to_value()
    }

    fn search_query(&self, extra: Option<(&str, &str)>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.search.params.filters {
            query.append_pair(k, v);
        }
        if self.search.params.multi_version {
            query.append_pair("multi-version", "true");
        }
        // The filters are under the names the search used: standard ones without translation.
        if !self.search.params.translate {
            query.append_pair("translate", "false");
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
        let facet_name = |std: &str| flavour.to_flavour(std).unwrap_or(std).to_owned();
        let intake = format!(
            "{}?{}",
            self.endpoint("intake-catalogue"),
            self.search_query(Some(("file", &record.file)))
        );
        let json = "application/json";
        Item::of_record(
            format!("item{n}"),
            record,
            facet_name,
            location,
            &self.collection_id,
        )
        .link(Link::new("self", format!("./item{n}.json"), json))
        .link(Link::new("root", "../../../catalog.json", json))
        .link(Link::new("parent", "../../../catalog.json", json))
        .link(Link::new("collection", "../collection.json", json))
        .asset(
            "access-data",
            Asset::new(
                location.clone(),
                "Access data",
                media_type(location),
                &["data"],
            )
            .described("The file or object this item describes."),
        )
        .asset(
            "intake-catalogue",
            Asset::new(intake, "intake-esm catalogue", json, &["metadata"]).described(
                "An intake-esm catalogue of this file: intake.open_esm_datastore(href).",
            ),
        )
        .to_value()
    }

    fn collection_json(&self, items: usize, extent: &Extent) -> Value {
        let json = "application/json";
        let query = self.search_query(None);
        let links = [
            Link::new("root", "../../catalog.json", json),
            Link::new("parent", "../../catalog.json", json),
        ]
        .into_iter()
        .chain((0..items).map(|n| Link::new("item", format!("./items/item{n}.json"), json)));
        let description = "Static STAC collection of an svc-nextgen databrowser search";
        Collection::new(&self.collection_id, description.into(), extent)
            .links(links)
            .asset(
                "intake-catalogue",
                Asset::new(
                    format!("{}?{query}", self.endpoint("intake-catalogue")),
                    "intake-esm catalogue",
                    json,
                    &["metadata"],
                ),
            )
            .asset(
                "stac-catalogue",
                Asset::new(
                    format!("{}?{query}", self.endpoint("stac-catalogue")),
                    "This STAC Catalogue",
                    "application/zip",
                    &["metadata"],
                ),
            )
            .asset(
                "data-search",
                Asset::new(
                    format!("{}?{query}", self.endpoint("data-search")),
                    "Locations of the search",
                    "text/plain",
                    &["metadata"],
                ),
            )
            .provider("svc-nextgen databrowser", &[], &self.links.api_base)
            .to_value()
    }
}

fn zip_error(e: zip::result::ZipError) -> Error {
    Error::io("write static catalogue", std::io::Error::other(e))
}
