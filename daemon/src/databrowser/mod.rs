//! The databrowser searches: a request (flavour, caller, query pairs) becomes a [`Search`];
//! metadata counts, location streams, intake-esm and static STAC catalogues are computed from
//! it. The HTTP facade only extracts and shapes.

mod intake;
pub(crate) mod params;
mod static_stac;

use std::collections::HashMap;
use std::sync::Arc;

pub use intake::IntakeCatalogue;
pub(crate) use static_stac::StaticCatalogue;

use crate::catalog::facet::{self, default_count_facets};
use crate::catalog::query::{Field, Pattern};
use crate::catalog::{Catalog, Cursor, FacetCounts, Query, Selection, Source, UniqKey};
use crate::error::{Error, Fault, Result};
use crate::flavours::{Flavour, Flavours};
use params::{SearchParams, build_query};

/// A validated search request.
#[derive(Debug, Clone)]
pub struct Search {
    /// The flavour the request speaks.
    pub flavour: Flavour,
    /// The request's options and raw filters.
    pub params: SearchParams,
    /// The filters over standard names.
    pub query: Query,
    /// File paths or URIs.
    pub uniq_key: UniqKey,
}

/// The answer of a metadata search.
#[derive(Debug, Clone)]
pub struct MetadataResult {
    /// Number of matching records.
    pub total_count: u64,
    /// Facet name (as requested) -> term counts.
    pub facets: Vec<(String, FacetCounts)>,
    /// Standard name -> flavour name for each counted facet the flavour has.
    pub facet_mapping: Vec<(String, String)>,
    /// The flavour's primary facets.
    pub primary_facets: Vec<String>,
}

/// The searches of the databrowser over a catalogue and its flavours.
pub struct Databrowser {
    catalog: Arc<Catalog>,
    flavours: Arc<Flavours>,
}

impl Databrowser {
    /// The databrowser over a catalogue.
    pub fn new(catalog: Arc<Catalog>, flavours: Arc<Flavours>) -> Self {
        Databrowser { catalog, flavours }
    }

    /// The flavours.
    pub fn flavours(&self) -> &Flavours {
        &self.flavours
    }

    /// The catalogue.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Validates a request.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] or [`Error::UnknownFlavour`] saying what was wrong.
    pub fn prepare(
        &self,
        flavour: &str,
        uniq_key: &str,
        caller: Option<&str>,
        pairs: &[(String, String)],
    ) -> Result<Search> {
        let uniq_key = UniqKey::parse(uniq_key).ok_or_else(|| {
            Error::invalid(
                "uniq_key",
                Fault::Refused,
                format!("Invalid uniq_key '{uniq_key}': use 'file' or 'uri'."),
            )
        })?;
        let flavour = self.flavours.resolve(flavour, caller)?;
        let params = SearchParams::parse(pairs)?;
        let query = build_query(&flavour, &params)?;
        Ok(Search {
            flavour,
            params,
            query,
            uniq_key,
        })
    }

    /// The records a search matches.
    pub fn select(&self, search: &Search) -> Selection {
        self.catalog.select(&search.query)
    }

    /// Facet counts of a search.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a facet name the flavour does not have.
    pub fn metadata(&self, search: &Search) -> Result<MetadataResult> {
        let flavour = &search.flavour;
        let translate = search.params.translate;
        let facets = self.count_facets(search)?;
        let selection = self.select(search);
        let names: Vec<&str> = facets.iter().map(String::as_str).collect();
        let counts = self.catalog.facet_counts(&selection, &names);
        let shown = |std: &str| {
            if translate {
                flavour.to_flavour(std).unwrap_or(std)
            } else {
                std
            }
            .to_string()
        };
        Ok(MetadataResult {
            total_count: selection.len(),
            facets: facets.iter().map(|f| shown(f)).zip(counts).collect(),
            facet_mapping: facets
                .iter()
                .filter_map(|f| flavour.to_flavour(f).map(|to| (f.clone(), to.to_string())))
                .collect(),
            primary_facets: flavour.primary_facets(translate),
        })
    }

    /// The standard facets a metadata search counts.
    fn count_facets(&self, search: &Search) -> Result<Vec<String>> {
        let flavour = &search.flavour;
        let mut facets: Vec<String> = if search.params.facets.is_empty() {
            default_count_facets()
                .filter(|f| flavour.has(f))
                .map(String::from)
                .collect()
        } else {
            search
                .params
                .facets
                .iter()
                .map(|name| {
                    let std = if search.params.translate {
                        flavour.to_standard(name)
                    } else {
                        Some(name.as_str())
                    };
                    std.filter(|s| facet::is_term_facet(s) && (flavour.has(s) || *s == "version"))
                        .map(String::from)
                        .ok_or_else(|| {
                            Error::invalid(
                                "facets",
                                Fault::Unknown,
                                format!(
                                    "Unknown facet '{name}' in 'facets' for flavour '{}'.",
                                    flavour.name
                                ),
                            )
                        })
                })
                .collect::<Result<_>>()?
        };
        // Each counted once, however often it is asked for (in its own or the flavour's
        // name): a request naming one facet thousands of times asked for as many counts.
        let mut counted = std::collections::HashSet::new();
        facets.retain(|facet| counted.insert(facet.clone()));
        if search.params.multi_version && !facets.iter().any(|f| f == "version") {
            facets.push("version".to_string());
        }
        Ok(facets)
    }

    /// A cursor over the matching records in result order, after `start`.
    pub fn locations(&self, search: &Search) -> Cursor {
        self.catalog
            .cursor(self.select(search), search.params.start)
    }

    /// The file paths a search matches, in the result order: at most `max` of them.
    ///
    /// # Errors
    /// [`Error::NoResults`], or [`Error::TooManyResults`] beyond `max` (or `max-results`).
    pub fn files(&self, search: &Search, max: u64) -> Result<Vec<String>> {
        let selection = self.bounded_selection(search)?;
        let count = selection.len().saturating_sub(search.params.start);
        if count > max {
            return Err(Error::TooManyResults { count, max });
        }
        let mut files = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut cursor = self.catalog.cursor(selection, search.params.start);
        while cursor.next_batch(1024, |_, path, _| files.push(path.to_string())) > 0 {}
        Ok(files)
    }

    /// Checks the result size against `max-results` and that something matched.
    fn bounded_selection(&self, search: &Search) -> Result<Selection> {
        let selection = self.select(search);
        let count = selection.len().saturating_sub(search.params.start);
        if count == 0 {
            return Err(Error::NoResults);
        }
        if let Some(max) = search.params.max_results
            && count > max
        {
            return Err(Error::TooManyResults { count, max });
        }
        Ok(selection)
    }

    /// An intake-esm catalogue of the search. With `stores` it is the catalogue of the Zarr
    /// stores of the search's files (`load/{flavour}` with `catalogue-type=intake`): `stores`
    /// maps each file to its store's URL, the location column (`uri`, as the reference) holds
    /// the URL and the `format` column says `zarr`, so intake-esm opens each row with xarray's
    /// Zarr engine; a file the search finds but `stores` does not name (indexed since the
    /// stores were made) has no row.
    ///
    /// # Errors
    /// [`Error::NoResults`] or [`Error::TooManyResults`].
    pub fn intake(
        &self,
        search: &Search,
        version: &str,
        stores: Option<HashMap<String, String>>,
    ) -> Result<IntakeCatalogue> {
        let selection = self.bounded_selection(search)?;
        Ok(IntakeCatalogue::new(
            &self.catalog,
            search,
            selection,
            version,
            stores,
        ))
    }

    /// A static STAC catalogue (ZIP) of the search.
    ///
    /// # Errors
    /// [`Error::NoResults`] or [`Error::TooManyResults`].
    pub fn static_catalogue(
        &self,
        search: &Search,
        links: static_stac::Links,
    ) -> Result<StaticCatalogue> {
        let selection = self.bounded_selection(search)?;
        let count = selection.len().saturating_sub(search.params.start);
        if count > MAX_STATIC_ITEMS {
            return Err(Error::StaticCatalogueTooLarge {
                count,
                max: MAX_STATIC_ITEMS,
            });
        }
        Ok(StaticCatalogue::new(
            &self.catalog,
            search,
            selection,
            links,
        ))
    }

    /// Removes the records `filters` select ([`Databrowser::removal_query`]), every version;
    /// the one removal of `svcd index remove`, through the control socket or offline.
    ///
    /// # Errors
    /// As [`Databrowser::removal_query`], or a store failure.
    pub fn remove(&self, filters: &[(String, String)]) -> Result<u64> {
        self.catalog.remove(&self.removal_query(filters)?)
    }

    /// The query a removal runs: the filters over standard names, every version.
    ///
    /// Which records: the crawled catalogue; with `user=NAME` (exactly one, an exact identity)
    /// only that user's entries; with nothing but `file=` filters every record at those locations,
    /// the catalogue's and every user's, so an operator can clear a location completely. A
    /// `file=` value of a removal is an exact path, never a pattern: `*`, `?` and a leading
    /// `-`, `!` or `not ` are part of the name, so a removal never reaches a file it does not
    /// name.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an unknown facet or malformed value.
    fn removal_query(&self, filters: &[(String, String)]) -> Result<Query> {
        if filters.is_empty() {
            return Err(Error::invalid(
                "filters",
                Fault::Refused,
                "refusing to remove everything: give --file or at least one key=value filter",
            ));
        }
        let owners: Vec<&str> = filters
            .iter()
            .filter(|(k, _)| k == facet::OWNER)
            .map(|(_, v)| v.as_str())
            .collect();
        let flavour = self
            .flavours
            .resolve(if owners.is_empty() { "svc" } else { "user" }, None)?;
        let mut pairs: Vec<(String, String)> = filters
            .iter()
            .filter(|(k, _)| k != facet::OWNER && k != "file")
            .cloned()
            .collect();
        pairs.push(("multi-version".into(), "true".into()));
        pairs.push(("translate".into(), "false".into()));
        let params = SearchParams::parse(&pairs)?;
        let mut query = build_query(&flavour, &params)?;
        let files: Vec<Pattern> = filters
            .iter()
            .filter(|(k, _)| k == "file")
            .map(|(_, path)| Pattern::literal(path.as_str()))
            .collect();
        if !files.is_empty() {
            query.require_one_of(Field::File, files);
        }
        match owners.as_slice() {
            [] if filters.iter().all(|(k, _)| k == "file") => {
                query.set_source(Source::Everything);
            }
            [] => {}
            [owner] => query.only_owner(owner),
            _ => {
                return Err(Error::invalid(
                    "user",
                    Fault::Refused,
                    "give at most one user=NAME: an owner is an exact name, not a list",
                ));
            }
        }
        Ok(query)
    }
}

pub use static_stac::Links as StaticLinks;

/// The most items a static STAC catalogue holds: its collection document lists every item,
/// so its memory grows with them (413 beyond, as for `max-results`).
pub(crate) const MAX_STATIC_ITEMS: u64 = 100_000;
