//! intake-esm catalogues: the esmcat JSON with the matching records inline in `catalog_dict`.
//!
//! The body is produced piece by piece ([`IntakeCatalogue::next_chunk`]) so a large result is
//! streamed, never held whole. The column set is the facet hierarchy restricted to facets with
//! at least one value in the result, so intake-esm gets no all-empty columns.
//!
//! Shape (DECISIONS.md, intake catalogue): the variable column
//! (`aggregation_control.variable_column_name`) is an array of strings; every other facet
//! column, `fs_type` and the location are strings, a record with several values giving its
//! first. Every row has every column: a record without a facet gives `""` (`[]` for the
//! variable), since intake-esm refuses a grouping column that is empty in some rows only. intake-esm groups rows by the `groupby_attrs` columns, and array values there make
//! its `keys()` and `to_dataset_dict()` fail with "unhashable type".
//!
//! A catalogue of Zarr stores (`load/{flavour}` with `catalogue-type=intake`) is the same
//! catalogue with each file replaced by its store's URL in a `uri` column and `zarr` in the
//! `format` column, which intake-esm reads to open a row with xarray's Zarr engine.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::catalog::{Catalog, Cursor, Record, Selection};
use crate::error::Result;

use super::Search;
use crate::catalog::facet::HIERARCHY;

/// Records fetched from the store per chunk.
const BATCH: usize = 2_000;

/// A streamed intake-esm catalogue.
pub struct IntakeCatalogue {
    header: Option<String>,
    cursor: Cursor,
    /// `(standard name, column name)` of each column.
    columns: Vec<(String, String)>,
    uniq_key: &'static str,
    /// The name of the variable column, the one column that holds arrays.
    variable: String,
    /// The name of the format column.
    format: String,
    /// For a catalogue of Zarr stores: the store URL of each file.
    zarr: Option<HashMap<String, String>>,
    first: bool,
    done: bool,
}

impl IntakeCatalogue {
    pub(super) fn new(
        catalog: &Arc<Catalog>,
        search: &Search,
        selection: Selection,
        version: &str,
        zarr: Option<HashMap<String, String>>,
    ) -> Self {
        let flavour = &search.flavour;
        let present: Vec<&str> = HIERARCHY.to_vec();
        let counts = catalog.facet_counts(&selection, &present);
        let columns: Vec<(String, String)> = HIERARCHY
            .iter()
            .zip(counts)
            .filter(|(std, c)| !c.is_empty() || (zarr.is_some() && **std == "format"))
            .map(|(std, _)| {
                let name = if search.params.translate {
                    flavour.to_flavour(std).unwrap_or(std)
                } else {
                    std
                };
                (std.to_string(), name.to_string())
            })
            .collect();
        let uniq_key = if zarr.is_some() {
            "uri"
        } else {
            search.uniq_key.as_str()
        };
        let variable = columns
            .iter()
            .find(|(s, _)| s == "variable")
            .map_or("variable", |(_, n)| n.as_str());
        let format = columns
            .iter()
            .find(|(s, _)| s == "format")
            .map_or("format", |(_, n)| n.as_str());
        let header = json!({
            "esmcat_version": "0.1.0",
            "attributes": columns.iter().map(|(_, n)| json!({"column_name": n, "vocabulary": ""})).collect::<Vec<_>>(),
            "assets": {"column_name": uniq_key, "format_column_name": format},
            "id": flavour.name,
            "description": format!("Catalogue from svc-nextgen databrowser v{version}"),
            "title": "svc-nextgen databrowser catalogue",
            "last_updated": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "aggregation_control": {
                "variable_column_name": variable,
                "groupby_attrs": columns.iter().map(|(_, n)| n.as_str()).filter(|n| *n != variable).collect::<Vec<_>>(),
                "aggregations": columns.iter().map(|(_, n)| json!({"type": "union", "attribute_name": n, "options": {}})).collect::<Vec<_>>(),
            },
        });
        let mut header = serde_json::to_string_pretty(&header).expect("JSON values serialise");
        header.truncate(header.len() - 2);
        header.push_str(",\n  \"catalog_dict\": [");
        let variable = variable.to_string();
        let format = format.to_string();
        IntakeCatalogue {
            variable,
            format,
            zarr,
            header: Some(header),
            cursor: catalog.cursor(selection, search.params.start),
            columns,
            uniq_key,
            first: true,
            done: false,
        }
    }

    /// The row of a record; `None` in a catalogue of stores for a file without a store, or
    /// whose store has its row already (several records, users' own entries, name one file).
    fn entry(&mut self, record: &Record) -> Option<Value> {
        let mut object = serde_json::Map::new();
        let location = match &mut self.zarr {
            Some(urls) => urls.remove(&record.file)?,
            None if self.uniq_key == "uri" => record.uri.clone(),
            None => record.file.clone(),
        };
        object.insert(self.uniq_key.to_string(), Value::String(location));
        for (std, name) in &self.columns {
            if self.zarr.is_some() && *name == self.format {
                object.insert(name.clone(), Value::String("zarr".into()));
                continue;
            }
            // A facet the record lacks is an empty value, never a missing one: intake-esm
            // refuses a grouping column that some rows leave out ("should either be all
            // NaN or there should be no NaNs"), as in a catalogue spanning projects.
            let values = record.facets.get(std).map_or(&[][..], Vec::as_slice);
            let value = if *name == self.variable {
                values.iter().cloned().map(Value::String).collect()
            } else {
                Value::String(values.first().cloned().unwrap_or_default())
            };
            object.insert(name.clone(), value);
        }
        Some(Value::Object(object))
    }

    /// The next piece of the body; `None` at the end.
    ///
    /// # Errors
    /// A store error while reading records.
    pub fn next_chunk(&mut self) -> Result<Option<String>> {
        if let Some(header) = self.header.take() {
            return Ok(Some(header));
        }
        if self.done {
            return Ok(None);
        }
        let records = self.cursor.next_records(BATCH)?;
        if records.is_empty() {
            self.done = true;
            return Ok(Some("\n  ]\n}\n".to_string()));
        }
        let mut out = String::new();
        for entry in records
            .iter()
            .filter_map(|r| self.entry(r))
            .collect::<Vec<_>>()
        {
            out.push_str(if self.first { "\n    " } else { ",\n    " });
            self.first = false;
            out.push_str(&entry.to_string());
        }
        Ok(Some(out))
    }
}
