//! The catalogue as a STAC 1.1.0 API: landing page, conformance, collections, items, search
//! and queryables (spec 2, endpoints 8-17). The HTTP facade only routes and sets media types;
//! every document is built here.
//!
//! - **Collections** are the values of one facet, the *axis* (`project` unless the path names
//!   another), over the newest version of every crawled record; user data stays in the
//!   databrowser's `user` flavour and is not part of the STAC catalogue. Collection ids are
//!   the indexed (lower-case) terms. Their extents and summaries (the values of a few facets)
//!   are computed from the records and cached until the catalogue changes.
//! - **Items** are records. An item id is [`item_id`] of the record's file path: it depends
//!   on the location only, so it is the same after a restart or a rebuild of the catalogue.
//! - **Paging** is a keyset walk over a search's records in record-id order, so a page is cut
//!   straight from the result bitmap (its cost follows the page size). Tokens are
//!   `<next|prev>:<context>:<item id>.<record id>` with the neighbouring item as the pivot;
//!   the context is the collection id for `/items` and `search` for `/search`. The pivot's
//!   record id is the key a page continues from, so an iteration goes on when the pivot was
//!   removed meanwhile: every item present throughout is visited exactly once, whatever is
//!   added or removed (records keep their ids while they exist; an id freed by a removal may
//!   be given to a new record, which then shows up where that id stands).
//! - **Views**: `visible_collections` glob patterns (case-sensitive, `*` = all) restrict what a
//!   request exposes; a pattern matching no collection is 400. Navigational links carry the
//!   view on.
//! - **Free text** `q`: comma-separated terms, OR'ed; a term matches a record when any of its
//!   metadata values contains it, ignoring case.
//! - `intersects` takes any GeoJSON geometry and is exact against the item boxes: the records
//!   in the geometry's bounding box are found by the index, then each box is tested against
//!   the geometry ([`Shape`]).
//! - Decisions: a record without a time range matches no `datetime` filter, and one without a
//!   bounding box no `bbox` or `intersects` filter. The web-UI assets
//!   (`svc-databrowser`, `svc-data-viewer`) point at the public base URL's `/databrowser/` and
//!   `/inspect/` pages, which a deployment serves next to the API.

mod geometry;
mod model;
mod params;

use std::collections::HashMap;
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

pub(crate) use geometry::Shape;
pub(crate) use model::{
    Asset, Catalog as StacCatalog, Collection, Item, Link, STAC_VERSION, media_type,
};
pub(crate) use params::{Direction, Token};
pub use params::{SearchRequest, split_list};

use crate::catalog::facet::HIERARCHY;
use crate::catalog::query::{Field, Pattern};
use crate::catalog::time::SelectMode;
use crate::catalog::{Anchor, Catalog, Extent, Query, Record, item_id, parse_item_id};
use crate::error::{Error, Fault, Missing, Result};

/// The facets a collection axis may be, coarse to fine.
pub(crate) const AXES: &[&str] = &HIERARCHY;

/// The conformance classes: exactly what is implemented.
pub(crate) const CONFORMANCE: &[&str] = &[
    "https://api.stacspec.org/v1.0.0/core",
    "https://api.stacspec.org/v1.0.0/collections",
    "https://api.stacspec.org/v1.0.0/item-search",
];

/// The most collections a view may expose.
const MAX_VIEW: usize = 1000;
/// A facet with more terms than this is listed in the queryables without an enum.
const MAX_ENUM: usize = 1000;
/// The facets a collection summarises, and the most values a summary lists.
const SUMMARY_FACETS: &[&str] = &[
    "institute",
    "model",
    "experiment",
    "time_frequency",
    "variable",
];
const MAX_SUMMARY: usize = 100;

/// Media type of items and searches.
pub const GEO_JSON: &str = "application/geo+json";
/// Media type of queryables.
pub const SCHEMA_JSON: &str = "application/schema+json";
/// Media type of the OpenAPI document the landing page links to.
pub const OPENAPI_JSON: &str = "application/vnd.oai.openapi+json;version=3.0";

/// Which STAC request: the axis from the path, the view from the parameters, and where links
/// point.
#[derive(Debug, Clone)]
pub struct Scope {
    axis: String,
    /// Whether the path named the axis (links then name it too).
    explicit_axis: bool,
    /// Absolute base URL of the API, e.g. `http://host:7777/api/svc-nextgen`.
    api_base: String,
    view: Vec<String>,
}

impl Scope {
    /// A scope for the axis in the path (`None`: `project`).
    ///
    /// # Errors
    /// [`Error::NotFound`] for an axis that is not a collection facet.
    pub fn new(api_base: &str, axis: Option<&str>) -> Result<Self> {
        let name = axis.unwrap_or("project");
        if !AXES.contains(&name) {
            return Err(Error::NotFound(Missing::Axis {
                name: name.to_string(),
                axes: AXES,
            }));
        }
        Ok(Scope {
            axis: name.to_string(),
            explicit_axis: axis.is_some(),
            api_base: api_base.trim_end_matches('/').to_string(),
            view: Vec::new(),
        })
    }

    /// Restricts the scope to the collections matching `patterns` (none: no restriction).
    pub fn with_view(mut self, patterns: Vec<String>) -> Self {
        self.view = patterns;
        self
    }

    /// The `visible_collections` patterns.
    pub fn view(&self) -> &[String] {
        &self.view
    }

    fn root(&self) -> String {
        if self.explicit_axis {
            format!("{}/stacapi/{}", self.api_base, self.axis)
        } else {
            format!("{}/stacapi", self.api_base)
        }
    }

    /// A navigational link target: the root plus `path`, the query, and the view.
    fn href(&self, path: &str, query: &[(&str, String)]) -> String {
        let mut pairs = form_urlencoded::Serializer::new(String::new());
        for (k, v) in query {
            pairs.append_pair(k, v);
        }
        if self.has_view() {
            pairs.append_pair("visible_collections", &self.view.join(","));
        }
        let query = pairs.finish();
        let base = format!("{}{path}", self.root());
        if query.is_empty() {
            base
        } else {
            format!("{base}?{query}")
        }
    }

    fn has_view(&self) -> bool {
        !self.view.is_empty() && !self.view.iter().all(|p| p == "*")
    }

    fn link(&self, rel: &str, path: &str, media: &str, title: &str) -> Link {
        Link::new(rel, self.href(path, &[]), media).titled(title)
    }

    /// The web pages next to the API (the public base URL without the API prefix).
    fn web_base(&self) -> &str {
        self.api_base
            .strip_suffix(crate::config::API_PREFIX)
            .unwrap_or(&self.api_base)
    }
}

/// A collection with the figures its document shows.
#[derive(Debug, Clone)]
struct CollectionSummary {
    id: String,
    items: u64,
    extent: Extent,
    /// STAC `summaries`: the values of [`SUMMARY_FACETS`] in the collection.
    summaries: Map<String, Value>,
}

/// All collections of one axis at one catalogue generation.
struct Summaries {
    generation: u64,
    collections: Arc<Vec<CollectionSummary>>,
}

/// The STAC API over a catalogue.
pub struct StacApi {
    catalog: Arc<Catalog>,
    /// Per axis (a few collection facets), the summaries last computed. Each axis has its
    /// own lock, held while computing: requests of that axis wait for the one computation
    /// instead of each doing it again, and other axes are not held up.
    summaries: Mutex<HashMap<String, Arc<Mutex<Option<Summaries>>>>>,
}

/// How a search came in, for its paging links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Query parameters.
    Get,
    /// A JSON body.
    Post,
}

impl StacApi {
    /// The STAC API over `catalog`.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        StacApi {
            catalog,
            summaries: Mutex::new(HashMap::new()),
        }
    }

    /// The landing page.
    ///
    /// # Errors
    /// A view pattern matching nothing.
    pub fn landing(&self, scope: &Scope) -> Result<Value> {
        let mut links = vec![
            json!({"rel": "self", "href": scope.href("/", &[]), "type": "application/json", "title": "Landing page"}),
            json!({"rel": "root", "href": scope.href("/", &[]), "type": "application/json", "title": "Landing page"}),
            json!({"rel": "conformance", "href": format!("{}/conformance", scope.root()), "type": "application/json", "title": "Conformance classes"}),
            json!({"rel": "data", "href": scope.href("/collections", &[]), "type": "application/json", "title": "Collections"}),
            json!({"rel": "search", "href": scope.href("/search", &[]), "type": GEO_JSON, "title": "Item search", "method": "GET"}),
            json!({"rel": "search", "href": scope.href("/search", &[]), "type": GEO_JSON, "title": "Item search", "method": "POST"}),
            json!({"rel": "http://www.opengis.net/def/rel/ogc/1.0/queryables", "href": scope.href("/queryables", &[]), "type": SCHEMA_JSON, "title": "Queryables"}),
            json!({"rel": "service-desc", "href": format!("{}/help/openapi.json", scope.api_base), "type": OPENAPI_JSON, "title": "OpenAPI description"}),
            json!({"rel": "service-doc", "href": format!("{}/help", scope.api_base), "type": "text/html", "title": "API documentation"}),
        ];
        for collection in self.visible(scope)?.iter() {
            links.push(json!({
                "rel": "child",
                "href": scope.href(&format!("/collections/{}", collection.id), &[]),
                "type": "application/json",
                "title": collection.id.to_uppercase(),
            }));
        }
        Ok(json!({
            "type": "Catalog",
            "id": "svc-nextgen",
            "title": "svc-nextgen STAC API",
            "description": format!("The svc-nextgen catalogue of climate data; one collection per {}.", scope.axis),
            "stac_version": STAC_VERSION,
            "stac_extensions": [],
            "conformsTo": CONFORMANCE,
            "links": links,
        }))
    }

    /// The conformance classes.
    pub fn conformance() -> Value {
        json!({ "conformsTo": CONFORMANCE })
    }

    /// All collections of the view.
    ///
    /// # Errors
    /// A view pattern matching nothing.
    pub fn collections(&self, scope: &Scope) -> Result<Value> {
        let collections: Vec<Value> = self
            .visible(scope)?
            .iter()
            .map(|c| collection_json(scope, c))
            .collect();
        Ok(json!({
            "collections": collections,
            "links": [
                scope.link("self", "/collections", "application/json", "Collections"),
                scope.link("root", "/", "application/json", "Landing page"),
                scope.link("parent", "/", "application/json", "Landing page"),
            ],
        }))
    }

    /// One collection.
    ///
    /// # Errors
    /// [`Error::NotFound`] when it does not exist or is outside the view.
    pub fn collection(&self, scope: &Scope, id: &str) -> Result<Value> {
        Ok(collection_json(scope, &self.find_collection(scope, id)?))
    }

    /// A page of a collection's items.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a hidden or unknown collection; a token of another listing.
    pub fn items(&self, scope: &Scope, collection: &str, request: &SearchRequest) -> Result<Value> {
        let found = self.find_collection(scope, collection)?;
        if let Some(other) = request
            .collections
            .iter()
            .flatten()
            .find(|c| c.to_lowercase() != found.id)
        {
            return Err(Error::invalid(
                "collections",
                Fault::Refused,
                format!(
                    "'collections={other}' does not match the collection {} of this path.",
                    found.id
                ),
            ));
        }
        let mut query = Query::default();
        require_axis(&mut query, &scope.axis, [found.id.clone()]);
        filter(&mut query, request);
        let path = format!("/collections/{}/items", found.id);
        self.page(scope, &query, request, &found.id, &path, Method::Get)
    }

    /// One item, with its assets.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the collection or the item is unknown or hidden.
    pub fn item(&self, scope: &Scope, collection: &str, id: &str) -> Result<Value> {
        let found = self.find_collection(scope, collection)?;
        let not_found = || {
            Error::NotFound(Missing::Item {
                collection: collection.to_string(),
                id: id.to_string(),
            })
        };
        let key = parse_item_id(id).ok_or_else(not_found)?;
        let mut query = Query::default();
        require_axis(&mut query, &scope.axis, [found.id.clone()]);
        query.set_item_keys(vec![key]);
        let selection = self.catalog.select(&query);
        let page = self.catalog.page(&selection, Anchor::Start, 1);
        let record = self
            .catalog
            .records(&page.ids)?
            .pop()
            .ok_or_else(not_found)?;
        Ok(item_json(scope, &record, &found.id))
    }

    /// A page of a search over all visible collections.
    ///
    /// # Errors
    /// Collections outside the view (400), a token of another listing.
    pub fn search(&self, scope: &Scope, request: &SearchRequest, method: Method) -> Result<Value> {
        let visible = self.visible(scope)?;
        let mut query = Query::default();
        match &request.collections {
            Some(wanted) => {
                if scope.has_view() {
                    let hidden: Vec<&str> = wanted
                        .iter()
                        .filter(|w| !visible.iter().any(|c| c.id == w.to_lowercase()))
                        .map(String::as_str)
                        .collect();
                    if !hidden.is_empty() {
                        return Err(Error::invalid(
                            "collections",
                            Fault::Refused,
                            format!(
                                "Requested collections are not visible in this view: {}.",
                                hidden.join(", ")
                            ),
                        ));
                    }
                }
                require_axis(
                    &mut query,
                    &scope.axis,
                    wanted.iter().map(|c| c.to_lowercase()),
                );
            }
            None if scope.has_view() => {
                require_axis(
                    &mut query,
                    &scope.axis,
                    visible.iter().map(|c| c.id.clone()),
                );
            }
            None => {}
        }
        filter(&mut query, request);
        self.page(scope, &query, request, "search", "/search", method)
    }

    /// The queryables of all visible collections, or of one.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a hidden or unknown collection; a view pattern matching
    /// nothing.
    pub fn queryables(&self, scope: &Scope, collection: Option<&str>) -> Result<Value> {
        let (collections, path, title) = match collection {
            Some(id) => {
                let found = self.find_collection(scope, id)?;
                let path = format!("/collections/{}/queryables", found.id);
                let title = format!("Queryables of collection {}", found.id);
                (vec![found], path, title)
            }
            None => (
                self.visible(scope)?.to_vec(),
                "/queryables".to_string(),
                "Queryables of the svc-nextgen STAC API".to_string(),
            ),
        };
        let mut query = Query::default();
        require_axis(
            &mut query,
            &scope.axis,
            collections.iter().map(|c| c.id.clone()),
        );
        let selection = self.catalog.select(&query);
        let facets: Vec<&str> = crate::catalog::facet::default_count_facets()
            .filter(|f| *f != "user")
            .collect();
        let counts = self.catalog.facet_counts(&selection, &facets);
        let mut properties = Map::new();
        properties.insert(
            "id".into(),
            json!({"description": "Item identifier", "type": "string"}),
        );
        properties.insert(
            "collection".into(),
            json!({
                "description": format!("Collection identifier (collection axis: {})", scope.axis),
                "type": "string",
                "enum": collections.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
            }),
        );
        properties.insert(
            "geometry".into(),
            json!({"description": "Item geometry", "$ref": "https://geojson.org/schema/Geometry.json"}),
        );
        properties.insert(
            "datetime".into(),
            json!({"description": "Item datetime", "type": "string", "format": "date-time"}),
        );
        for (facet, terms) in facets.iter().zip(counts) {
            if terms.is_empty() {
                continue;
            }
            let mut property =
                json!({"description": format!("Search facet {facet}"), "type": "string"});
            if terms.len() <= MAX_ENUM {
                property["enum"] = terms.into_iter().map(|(t, _)| Value::String(t)).collect();
            }
            properties.insert((*facet).to_string(), property);
        }
        Ok(json!({
            "$schema": "https://json-schema.org/draft/2019-09/schema",
            "$id": scope.href(&path, &[]),
            "type": "object",
            "title": title,
            "description": "Properties items can be searched by",
            "properties": properties,
            "additionalProperties": true,
        }))
    }

    /// The collections of the axis in the scope's view.
    fn visible(&self, scope: &Scope) -> Result<Arc<Vec<CollectionSummary>>> {
        let all = self.summaries(&scope.axis);
        if !scope.has_view() {
            return Ok(all);
        }
        let mut shown = vec![false; all.len()];
        for pattern in &scope.view {
            let matcher = view_matcher(pattern)?;
            let mut matched = false;
            for (i, c) in all.iter().enumerate() {
                if matcher.is_match(&c.id) {
                    shown[i] = true;
                    matched = true;
                }
            }
            if !matched {
                return Err(Error::invalid(
                    "visible_collections",
                    Fault::Refused,
                    format!("visible_collections pattern '{pattern}' matched no collections."),
                ));
            }
        }
        let visible: Vec<CollectionSummary> = all
            .iter()
            .zip(shown)
            .filter(|(_, shown)| *shown)
            .map(|(c, _)| c.clone())
            .collect();
        if visible.len() > MAX_VIEW {
            return Err(Error::invalid(
                "visible_collections",
                Fault::Refused,
                format!(
                    "visible_collections expands to too many collections ({} > {MAX_VIEW}); use a narrower pattern.",
                    visible.len()
                ),
            ));
        }
        Ok(Arc::new(visible))
    }

    fn find_collection(&self, scope: &Scope, id: &str) -> Result<CollectionSummary> {
        let id = id.to_lowercase();
        self.visible(scope)?
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or_else(|| Error::NotFound(Missing::Collection(id.to_string())))
    }

    /// The collections of an axis, recomputed when the catalogue has changed.
    fn summaries(&self, axis: &str) -> Arc<Vec<CollectionSummary>> {
        // The catalogue as this request found it: summaries computed meanwhile by another
        // request, of it or a later one, are as good (while records are being added, waiting
        // requests must not each compute them again).
        let wanted = self.catalog.generation();
        let slot = Arc::clone(self.summaries.lock().entry(axis.to_string()).or_default());
        let mut cached = slot.lock();
        if let Some(s) = cached.as_ref().filter(|s| s.generation >= wanted) {
            return Arc::clone(&s.collections);
        }
        let generation = self.catalog.generation();
        let all = self.catalog.select(&Query::default());
        let terms = self
            .catalog
            .facet_counts(&all, &[axis])
            .pop()
            .unwrap_or_default();
        let collections: Vec<CollectionSummary> = terms
            .into_iter()
            .map(|(id, items)| {
                let mut query = Query::default();
                require_axis(&mut query, axis, [id.clone()]);
                let selection = self.catalog.select(&query);
                let extent = self.catalog.extent(&selection);
                let counts = self.catalog.facet_counts(&selection, SUMMARY_FACETS);
                let summaries = SUMMARY_FACETS
                    .iter()
                    .zip(counts)
                    .filter(|(_, terms)| !terms.is_empty() && terms.len() <= MAX_SUMMARY)
                    .map(|(facet, terms)| {
                        let values = terms.into_iter().map(|(t, _)| Value::String(t)).collect();
                        ((*facet).to_string(), Value::Array(values))
                    })
                    .collect();
                CollectionSummary {
                    id,
                    items,
                    extent,
                    summaries,
                }
            })
            .collect();
        let collections = Arc::new(collections);
        *cached = Some(Summaries {
            generation,
            collections: Arc::clone(&collections),
        });
        collections
    }

    fn page(
        &self,
        scope: &Scope,
        query: &Query,
        request: &SearchRequest,
        context: &str,
        path: &str,
        method: Method,
    ) -> Result<Value> {
        let anchor = match &request.token {
            None => Anchor::Start,
            Some(token) => {
                if token.context != context {
                    return Err(Error::invalid(
                        "token",
                        Fault::Refused,
                        "Pagination token does not match this request context.",
                    ));
                }
                // The pivot's position is the sort key: paging goes on from there even
                // when the pivot has been removed since the token was made.
                let pivot = token.position.or_else(|| self.catalog.record_of_item(&token.item)).ok_or_else(|| {
                    Error::invalid("token", Fault::Refused, format!(
                        "Pagination token names item {} which is no longer in the catalogue; start again without a token.",
                        token.item
                    ))
                })?;
                match token.direction {
                    Direction::Next => Anchor::After(pivot),
                    Direction::Prev => Anchor::Before(pivot),
                }
            }
        };
        let mut selection = self.catalog.select(query);
        if let Some(shape) = &request.intersects {
            self.catalog
                .retain_boxes(&mut selection, |b| shape.intersects_box(b));
        }
        let page = self.catalog.page(&selection, anchor, request.limit);
        let records = self.catalog.records(&page.ids)?;
        let features: Vec<Value> = records
            .iter()
            .map(|r| {
                let collection = r.first(&scope.axis).unwrap_or_default().to_lowercase();
                item_json(scope, r, &collection)
            })
            .collect();
        let mut links = vec![
            paging_link(scope, "self", path, request, None, method),
            json!(scope.link("root", "/", "application/json", "Landing page")),
        ];
        // `next` pivots on the page's last item, `prev` on its first.
        for (rel, direction, wanted, pivot) in [
            (
                "next",
                Direction::Next,
                page.has_next,
                records.last().zip(page.ids.last()),
            ),
            (
                "prev",
                Direction::Prev,
                page.has_previous,
                records.first().zip(page.ids.first()),
            ),
        ] {
            if let (true, Some((pivot, position))) = (wanted, pivot) {
                let token = Token {
                    direction,
                    context: context.to_string(),
                    item: item_id(&pivot.file),
                    position: Some(*position),
                };
                links.push(paging_link(scope, rel, path, request, Some(&token), method));
            }
        }
        Ok(json!({
            "type": "FeatureCollection",
            "features": features,
            "links": links,
            "numberMatched": selection.len(),
            "numberReturned": features.len(),
        }))
    }
}

/// The newest version of every crawled record.
/// Requires the record's `axis` facet to be one of `values` (collection ids, literal).
fn require_axis(query: &mut Query, axis: &str, values: impl IntoIterator<Item = String>) {
    query.require_one_of(
        Field::Facet(axis.to_string()),
        values.into_iter().map(Pattern::literal),
    );
}

/// Adds the request's filters other than the collections.
fn filter(query: &mut Query, request: &SearchRequest) {
    if let Some(range) = request.datetime {
        query.set_time(range, SelectMode::Flexible);
    }
    let bbox = request
        .bbox
        .or_else(|| request.intersects.as_ref().map(Shape::bounds));
    if let Some([minx, miny, maxx, maxy]) = bbox {
        query.set_bbox([minx, maxx, miny, maxy], SelectMode::Flexible);
    }
    query.set_text(request.q.clone());
    if let Some(ids) = &request.ids {
        // An id that is not one of ours matches nothing.
        query.set_item_keys(ids.iter().filter_map(|id| parse_item_id(id)).collect());
    }
}

/// The longest `visible_collections` pattern.
const MAX_VIEW_PATTERN: usize = 256;

/// The deepest nesting of `{...}` alternatives in a `visible_collections` pattern.
const MAX_VIEW_NESTING: usize = 4;

fn view_matcher(pattern: &str) -> Result<GlobMatcher> {
    // globset compiles a glob into a regex and panics when the regex exceeds its limits
    // (a deep nesting of alternatives, a very long pattern): bounding both keeps every
    // pattern a request can send well inside them.
    let mut depth = 0usize;
    let mut deepest = 0usize;
    for c in pattern.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    if pattern.len() > MAX_VIEW_PATTERN || deepest > MAX_VIEW_NESTING {
        return Err(Error::invalid(
            "visible_collections",
            Fault::Refused,
            format!(
                "visible_collections patterns are at most {MAX_VIEW_PATTERN} bytes with \
                 {MAX_VIEW_NESTING} levels of {{...}}; got {} bytes, {deepest} levels.",
                pattern.len()
            ),
        ));
    }
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            Error::invalid(
                "visible_collections",
                Fault::Syntax,
                format!("visible_collections pattern '{pattern}' is not a glob: {e}."),
            )
        })
}

fn paging_link(
    scope: &Scope,
    rel: &str,
    path: &str,
    request: &SearchRequest,
    token: Option<&Token>,
    method: Method,
) -> Value {
    if method == Method::Post && rel != "self" {
        return json!({
            "rel": rel,
            "href": scope.href(path, &[]),
            "type": GEO_JSON,
            "method": "POST",
            "body": post_body(scope, request, token),
            "merge": false,
        });
    }
    let mut query: Vec<(&str, String)> = vec![("limit", request.limit.to_string())];
    if let Some(c) = &request.collections {
        query.push(("collections", c.join(",")));
    }
    if let Some(ids) = &request.ids {
        query.push(("ids", ids.join(",")));
    }
    if let Some([a, b, c, d]) = request.bbox {
        query.push(("bbox", format!("{a},{b},{c},{d}")));
    }
    if let Some(d) = &request.datetime_text {
        query.push(("datetime", d.clone()));
    }
    if !request.q.is_empty() {
        query.push(("q", request.q.join(",")));
    }
    if let Some(shape) = &request.intersects {
        query.push(("intersects", shape.geojson().to_string()));
    }
    if let Some(t) = token {
        query.push(("token", t.to_text()));
    }
    json!({"rel": rel, "href": scope.href(path, &query), "type": GEO_JSON, "method": "GET"})
}

/// The body of a POST search link: the request's own fields, the view and the token.
fn post_body(scope: &Scope, request: &SearchRequest, token: Option<&Token>) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("limit".into(), json!(request.limit));
    if let Some(c) = &request.collections {
        body.insert("collections".into(), json!(c));
    }
    if let Some(ids) = &request.ids {
        body.insert("ids".into(), json!(ids));
    }
    if let Some(b) = request.bbox {
        body.insert("bbox".into(), json!(b));
    }
    if let Some(d) = &request.datetime_text {
        body.insert("datetime".into(), json!(d));
    }
    if !request.q.is_empty() {
        body.insert("q".into(), json!(request.q.join(",")));
    }
    if let Some(shape) = &request.intersects {
        body.insert("intersects".into(), shape.geojson().clone());
    }
    if scope.has_view() {
        body.insert("visible_collections".into(), json!(scope.view));
    }
    if let Some(t) = token {
        body.insert("token".into(), json!(t.to_text()));
    }
    body
}

fn collection_json(scope: &Scope, c: &CollectionSummary) -> Value {
    let path = format!("/collections/{}", c.id);
    let title = c.id.to_uppercase();
    let description = format!(
        "Records whose {} is {}: {} items.",
        scope.axis, c.id, c.items
    );
    let keywords = vec![c.id.clone(), scope.axis.clone(), "climate".into()];
    Collection::new(&c.id, description, &c.extent)
        .titled(&title)
        .summarised(c.summaries.clone(), keywords)
        .provider("svc-nextgen", &["host"], &scope.root())
        .links([
            scope.link("self", &path, "application/json", &title),
            scope.link("root", "/", "application/json", "Landing page"),
            scope.link("parent", "/", "application/json", "Landing page"),
            scope.link("items", &format!("{path}/items"), GEO_JSON, "Items"),
            scope.link(
                "http://www.opengis.net/def/rel/ogc/1.0/queryables",
                &format!("{path}/queryables"),
                SCHEMA_JSON,
                "Queryables",
            ),
        ])
        .to_value()
}

/// Whether a record's file is on a file system the service can read (as opposed to an
/// object in a remote store that clients open themselves).
fn is_local(record: &Record) -> bool {
    match record.first("fs_type") {
        Some(fs) => matches!(
            fs.trim().to_lowercase().as_str(),
            "posix" | "local" | "nfs" | "lustre"
        ),
        None => !record.uri.contains("://") || record.uri.starts_with("file://"),
    }
}

fn item_json(scope: &Scope, record: &Record, collection: &str) -> Value {
    let file_query = form_urlencoded::Serializer::new(String::new())
        .append_pair("file", &record.file)
        .finish();
    let api = &scope.api_base;
    let access = if is_local(record) {
        Asset::new(
            format!("{api}/databrowser/load/svc?{file_query}"),
            "Access data (Zarr stream)",
            "application/vnd+zarr",
            &["data"],
        )
        .described("The file converted to a Zarr store on request; needs a bearer token.")
        .stored("local", &["oauth2"])
    } else {
        Asset::new(
            record.uri.clone(),
            "Access data",
            media_type(&record.uri),
            &["data"],
        )
        .described("The object this item describes.")
        .stored("remote", &[])
    };
    let web = scope.web_base();
    let id = item_id(&record.file);
    let item_path = format!("/collections/{collection}/items/{id}");
    let collection_path = format!("/collections/{collection}");
    let title = collection.to_uppercase();
    Item::of_record(id, record, str::to_owned, &record.file, collection)
        .link(scope.link("self", &item_path, GEO_JSON, "This item"))
        .link(scope.link("root", "/", "application/json", "Landing page"))
        .link(scope.link("parent", &collection_path, "application/json", &title))
        .link(scope.link("collection", &collection_path, "application/json", &title))
        .asset(
            "svc-databrowser",
            Asset::new(
                format!(
                    "{web}/databrowser/?{}={collection}&{file_query}",
                    scope.axis
                ),
                "Databrowser",
                "text/html",
                &["overview"],
            ),
        )
        .asset(
            "svc-data-viewer",
            Asset::new(
                format!("{web}/inspect/?{file_query}"),
                "Data viewer",
                "text/html",
                &["overview", "visual"],
            ),
        )
        .asset("access-data", access)
        .asset(
            "intake-catalogue",
            Asset::new(
                format!("{api}/databrowser/intake-catalogue/svc/file?{file_query}"),
                "intake-esm catalogue",
                "application/json",
                &["metadata"],
            ),
        )
        .asset(
            "stac-catalogue",
            Asset::new(
                format!("{api}/databrowser/stac-catalogue/svc/file?{file_query}"),
                "Static STAC catalogue",
                "application/zip",
                &["metadata"],
            ),
        )
        .to_value()
}
