//! `svc-daemon`: the core of `svcd`. It owns the RocksDB store ([`db`]), bearer tokens
//! ([`auth`]), the file catalogue
//! and its search index ([`catalog`]), the flavours ([`flavours`]), the databrowser searches
//! ([`databrowser`]), NetCDF crawling ([`crawl`]) and demo data ([`demo`]), and the control
//! socket ([`control`]).
//!
//! It knows no HTTP and no FUSE: the facades call [`Daemon`]'s parts and map
//! [`ErrorKind`] to their own codes. Blocking work (RocksDB scans, NetCDF reads) is the
//! caller's to move off async runtime workers; the HTTP facade uses `spawn_blocking`.

pub mod auth;
pub mod catalog;
pub mod config;
pub mod control;
pub mod crawl;
pub mod databrowser;
pub mod db;
pub mod demo;
mod error;
pub mod flavours;
#[cfg(test)]
mod hostile;
mod memory;
pub mod stac;
pub mod userdata;

use std::sync::Arc;

pub use config::Config;
pub use error::{Error, ErrorKind, Result};

use auth::Auth;
use catalog::Catalog;
use databrowser::Databrowser;
use db::Db;
use flavours::Flavours;
use stac::StacApi;

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
        let flavours = Arc::new(Flavours::open(db)?);
        let databrowser = Databrowser::new(Arc::clone(&catalog), Arc::clone(&flavours));
        let stac = StacApi::new(Arc::clone(&catalog));
        Ok(Daemon {
            config,
            auth,
            catalog,
            flavours,
            databrowser,
            stac,
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
}
