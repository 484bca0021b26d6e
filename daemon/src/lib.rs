//! `svc-daemon`: the core of `svcd`. It owns the RocksDB store (`db`), bearer tokens
//! (`auth`), the file catalogue and its search index (`catalog`), the flavours (`flavours`),
//! the databrowser searches (`databrowser`), the STAC API (`stac`), users' own entries
//! (`userdata`), NetCDF crawling (`crawl`) and, with the `demo` feature, demo data (`demo`).
//! Its modules are private; what the facades and the command line use is re-exported here.
//!
//! It knows no HTTP, no control socket and no FUSE: those transports call [`Daemon`]'s parts
//! and map [`ErrorKind`] to their own codes. Async callers run its blocking work (RocksDB,
//! column scans, NetCDF reads) through [`Daemon::run`] and [`Daemon::run_expensive`].

mod auth;
mod catalog;
mod config;
mod convert;
mod crawl;
mod databrowser;
mod db;
#[cfg(any(test, feature = "demo"))]
mod demo;
mod error;
mod fair;
mod flavours;
#[cfg(test)]
mod hostile;
mod jobs;
mod memory;
mod secret;
mod stac;
mod stores;
mod tier;
mod userdata;
mod work;

use std::sync::Arc;

pub use auth::{Auth, Caller, SERVICE_RETRY};
pub use catalog::{
    Catalog, LOAD_BATCH, LoadSummary, Loader, Record, Rejection, Stats, WriteCounts, write_to_store,
};
pub use config::{
    API_PREFIX, Config, MountConfig, Overrides, StoresConfig, TierConfig, home_dir, login_name,
};
pub use convert::Compressor;
pub use convert::child::{SUBCOMMAND as CHILD_SUBCOMMAND, serve as serve_child};
pub use convert::external::read_without_file_locks;
pub use convert::probe::{SUBCOMMAND as PROBE_SUBCOMMAND, serve as serve_probes};
pub use convert::{read_sources_apart, start_conversion_processes};
pub use crawl::{Drs, find_netcdf_files, read_record};
pub use databrowser::params::{flavour_delete_is_global, flavour_list_filter};
pub use databrowser::{Databrowser, IntakeCatalogue, Search, StaticLinks};
pub use db::Db;
#[cfg(feature = "demo")]
pub use demo::{DemoSummary, write_demo_tree};
pub use error::{Error, ErrorKind, Fault, Holder, Missing, Result};
pub use fair::FairPool;
pub use flavours::{FlavourRequest, Flavours, ListFilter};
pub use jobs::{Handler, Job, Outcome, Queue, Stop};
pub use stac::{
    GEO_JSON, Method, OPENAPI_JSON, SCHEMA_JSON, Scope, SearchRequest, StacApi, split_list,
};
pub use stores::access::user_account;
pub use stores::cold::Progress as TierProgress;
pub use stores::read::{KeyBytes, KeyKind};
pub use stores::request::{AccessPattern, Chunking, ConvertRequest, ShareRequest};
pub use stores::share::SHARE_METHOD;
pub use stores::{CONVERT, Share, Status, StoreRecord, Stores, parse_token};
pub use tier::{
    ArchiveOptions, ArchiveRow, Asked, BlobState, InstanceRow, Listed, ListedPage,
    State as TierState,
};
pub use work::{ExpensiveSlot, SLOT_WAIT, StreamSlot};

/// What `load/{flavour}` made of a search: [`Daemon::load`].
pub struct Load {
    /// The conversion options, with the hits as its sources.
    pub request: ConvertRequest,
    /// The search, for an intake-esm catalogue of the stores
    /// ([`Databrowser::intake`]).
    pub search: Search,
    /// One store per hit, in the order of `request.sources`.
    pub stores: Vec<StoreRecord>,
}

/// The version of this build.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// An open daemon core: store, catalogue, flavours.
pub struct Daemon {
    config: Config,
    auth: Auth,
    catalog: Arc<Catalog>,
    flavours: Arc<Flavours>,
    databrowser: Databrowser,
    stac: StacApi,
    slots: work::Slots,
    queue: Arc<Queue>,
    stores: Arc<Stores>,
    /// The sweep of unread stores, while the jobs run.
    sweeper: parking_lot::Mutex<Option<(Stop, std::thread::JoinHandle<()>)>>,
}

impl Daemon {
    /// Opens the store in the configured data directory and loads the catalogue.
    ///
    /// # Errors
    /// When the store cannot be opened (locked by another process, unknown schema) or is
    /// corrupt.
    pub fn open(config: Config) -> Result<Self> {
        let auth = Auth::open(&config)?;
        let db = Arc::new(Db::open(&config.store_dir())?);
        let catalog = Arc::new(Catalog::open(Arc::clone(&db))?);
        let flavours = Arc::new(Flavours::open(Arc::clone(&db))?);
        let queue = Arc::new(Queue::open(Arc::clone(&db))?);
        let tier = Arc::new(tier::Tier::open(&config, Arc::clone(&db))?);
        let stores = Arc::new(Stores::open(
            db,
            Arc::clone(&queue),
            config.stores.clone(),
            config.stores_dir(),
            &config.share_key_file(),
            tier,
        )?);
        let databrowser = Databrowser::new(Arc::clone(&catalog), Arc::clone(&flavours));
        let stac = StacApi::new(Arc::clone(&catalog));
        let slots = work::Slots::new(config.http.expensive_slots());
        Ok(Daemon {
            slots,
            config,
            auth,
            catalog,
            flavours,
            databrowser,
            stac,
            queue,
            stores,
            sweeper: parking_lot::Mutex::new(None),
        })
    }

    /// Starts the conversion workers (`stores.workers` threads): queued conversions, and
    /// those a crash or a stop interrupted, resume; the hourly sweep of stores nobody
    /// reads, and the cleaning of the cold tier every `tier.cleaning_interval_seconds`. Only
    /// a serving daemon runs them.
    ///
    /// # Errors
    /// When a worker thread cannot be started.
    pub fn start_jobs(&self) -> Result<()> {
        self.queue
            .start(self.config.stores.workers, &self.store_jobs())?;
        let stop = Stop::default();
        let sweeping = (Arc::clone(&self.stores), stop.clone());
        let cleaning = std::time::Duration::from_secs(self.config.tier.cleaning_interval_seconds);
        let sweeper = std::thread::Builder::new()
            .name("store-sweep".into())
            .spawn(move || stores::sweep::sweep_until(&sweeping.0, &sweeping.1, cleaning))
            .map_err(|e| Error::io("start the store sweep", e))?;
        *self.sweeper.lock() = Some((stop, sweeper));
        Ok(())
    }

    /// What does the jobs of the stores.
    fn store_jobs(&self) -> Arc<dyn Handler> {
        Arc::new(stores::job::ConvertJob {
            stores: Arc::clone(&self.stores),
        })
    }

    /// Removes store `token` for `reason` at `now` ([`Stores::remove`]): it is gone at once
    /// and its job deletes its data, run by the workers of a serving daemon, or here (before
    /// this returns) on a stopped daemon's store. Blocking.
    ///
    /// # Errors
    /// As [`Stores::remove`]; on a stopped daemon's store, a deletion that failed (the store
    /// is gone; removing it again retries).
    pub fn remove_store(&self, token: uuid::Uuid, reason: &str, now: i64) -> Result<StoreRecord> {
        let record = self.stores.remove(token, reason, now)?;
        let ran = self.queue.run_waiting(
            stores::CONVERT,
            &token.to_string(),
            self.store_jobs().as_ref(),
        );
        if ran && self.stores.data_left(token) {
            return Err(Error::io(
                format!("delete the data of the removed store {token}"),
                std::io::Error::other(format!(
                    "{} or its tier state is still there (the log says why); `svcd store rm \
                     {token}` tries again",
                    self.stores.dir(token).display()
                )),
            ));
        }
        Ok(record)
    }

    /// Waits until no conversion is queued or running (for `svcd store convert` on a stopped
    /// daemon's store).
    pub fn wait_for_jobs(&self) {
        self.queue.wait_idle();
    }

    /// Begins the daemon's stop and returns at once: conversions stop at their next chunk
    /// (and stay queued), the sweep and the cleaning of the cold tier stop, and every reader
    /// waiting for the daemon's work (a conversion, a restore, a chunk computed on its
    /// request) is answered [`Error::Stopping`] now, so that the server drains in moments
    /// ([`Daemon::stop_jobs`] then waits for the workers).
    pub fn begin_stop(&self) {
        if let Some((stop, _)) = &*self.sweeper.lock() {
            stop.request();
        }
        self.queue.begin_stop();
    }

    /// Stops the conversion workers, the sweep and the cleaning of the cold tier: running
    /// conversions stop at their next chunk and stay queued for the next start. Blocking (up
    /// to a second for the sweep; a cleaning stops before its next cold-tier call, each
    /// bounded by 10 s, or after the adoption's read of a whole object under way).
    pub fn stop_jobs(&self) {
        let sweeper = self.sweeper.lock().take();
        // Both asked to stop first: a conversion being removed may wait for a cleaning.
        if let Some((stop, _)) = &sweeper {
            stop.request();
        }
        self.queue.stop();
        if let Some((_, sweeper)) = sweeper {
            let _ = sweeper.join();
        }
    }

    /// The Zarr stores.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// `load/{flavour}` (spec 2, endpoint 1): the stores of the files a search by `caller`
    /// finds, created or reused at `now`, with the request's conversion options (whose
    /// `sources` are the hits).
    /// Conversion options are told apart from search facets by name
    /// ([`ConvertRequest::options_of_load`]); at most [`stores::request::MAX_SOURCES`] hits.
    ///
    /// # Errors
    /// As [`Databrowser::prepare`] and [`Databrowser::files`] (no hits, too many), and as
    /// [`Stores::request`] (a file the caller may not read).
    pub fn load(
        &self,
        caller: &Caller,
        flavour: &str,
        pairs: &[(String, String)],
        now: i64,
    ) -> Result<Load> {
        let max_ttl = self.config.stores.max_ttl_seconds;
        let mut request = ConvertRequest::options_of_load(pairs, max_ttl)?;
        let search_pairs: Vec<(String, String)> = pairs
            .iter()
            .filter(|(key, _)| !stores::request::is_option(key) && key != "catalogue-type")
            .cloned()
            .collect();
        let search =
            self.databrowser
                .prepare(flavour, "file", Some(&caller.user), &search_pairs)?;
        request.sources = self
            .databrowser
            .files(&search, stores::request::MAX_SOURCES as u64)?;
        // One store per file, also when several records (users' own entries) name it.
        let mut seen = std::collections::HashSet::new();
        request.sources.retain(|file| seen.insert(file.clone()));
        let most = stores::request::MAX_AGGREGATED_SOURCES;
        if request.aggregation.is_some() && request.sources.len() > most {
            return Err(Error::invalid(
                "aggregate",
                crate::error::Fault::Refused,
                format!(
                    "The search finds {} files; at most {most} may be aggregated into one \
                     store. Narrow the search.",
                    request.sources.len()
                ),
            ));
        }
        let stores = self.stores.request(caller, &request, now)?;
        Ok(Load {
            request,
            search,
            stores,
        })
    }

    /// The configuration the daemon runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Token issuing and verification.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The file catalogue.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The flavours.
    pub fn flavours(&self) -> &Flavours {
        &self.flavours
    }

    /// The databrowser searches.
    pub fn databrowser(&self) -> &Databrowser {
        &self.databrowser
    }

    /// The catalogue as a STAC API.
    pub fn stac(&self) -> &StacApi {
        &self.stac
    }

    /// Adds the caller's own entries (a JSON body, spec 1 endpoint 6); returns the status
    /// message.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming each bad entry; nothing is stored then.
    pub fn add_user_data(&self, body: &[u8], caller: &Caller) -> Result<String> {
        userdata::add(&self.catalog, body, caller)
    }

    /// Deletes the caller's own entries that a JSON body selects (spec 1 endpoint 7); returns
    /// the status message.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a body that is not an object of facet filters or that
    /// names another owner.
    pub fn delete_user_data(&self, body: &[u8], caller: &Caller) -> Result<String> {
        userdata::delete(&self.catalog, body, caller)
    }
}
