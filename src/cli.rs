//! Command-line types.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// svcd: find, open and archive climate data.
#[derive(Debug, Parser)]
#[command(name = "svcd", version, about)]
pub(crate) struct Cli {
    /// Configuration file (default: /etc/svc-nextgen/svcd.toml if it exists, else built-in).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Data directory (store and control socket); overrides the configuration.
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the daemon: HTTP API and control socket.
    Serve {
        /// Address to listen on (port 0 picks a free port); overrides the configuration.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Also mount the ready stores read-only at this directory (FUSE):
        /// `DIR/<token>.zarr/<key>`, as the HTTP layout names keys.
        #[arg(long, value_name = "DIR")]
        mount: Option<std::path::PathBuf>,
    },
    /// Manage the file catalogue.
    #[command(subcommand)]
    Index(IndexCommand),
    /// Issue bearer tokens signed with the daemon's key.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Inspect and remove Zarr stores.
    #[command(subcommand)]
    Store(StoreCommand),
    /// The cold tier: archive blobs of stores, restore them, show their state.
    #[command(subcommand)]
    Tier(TierCommand),
    /// Blob manifests: partition Zarr stores into blobs, resolve keys, pin, report.
    Manifest(crate::manifest::ManifestArgs),
    /// Read the metadata of source files handed over on standard input, bounded: what the
    /// daemon starts to read each source before it opens it (not for use by hand).
    #[command(name = svc_daemon::PROBE_SUBCOMMAND, hide = true)]
    ProbeSources,
    /// Convert sources handed over on standard input, or compute one document or chunk of
    /// their store, in a bounded process: where the daemon reads sources with the NetCDF
    /// library (not for use by hand).
    #[command(name = svc_daemon::CHILD_SUBCOMMAND, hide = true)]
    ConvertChild,
    /// Write a synthetic DRS tree of small CF-compliant NetCDF files.
    DemoData {
        /// Directory to write into.
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// One line per store: token, status, owner, first source.
    List,
    /// A store's record as JSON.
    Show {
        /// The store's token.
        token: uuid::Uuid,
    },
    /// Remove a store: its data is deleted and its URLs answer 404 from now on.
    Rm {
        /// The store's token.
        token: uuid::Uuid,
    },
    /// Convert files into stores owned by the login user; waits for them and prints their URLs.
    Convert {
        /// Absolute paths of NetCDF files.
        #[arg(required = true)]
        paths: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TierCommand {
    /// Pack the cold blobs of ready stores into the cold tier (one uncompressed ZIP per blob
    /// instance, verified before the hot copies are deleted). Hot, pinned and unmanaged
    /// keys, metadata and coordinates are never archived.
    Archive {
        /// Only stores nobody has read or converted for this long, e.g. 30d, 12h.
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        older_than: Option<std::time::Duration>,
        /// Only this store (its token is its manifest's scope).
        #[arg(long, value_name = "TOKEN")]
        scope: Option<uuid::Uuid>,
        /// Print what would be archived; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Restore archived blobs to the hot tier (a read restores a blob by itself; this
    /// restores ahead of reads).
    Restore {
        /// Only this store.
        #[arg(long, value_name = "TOKEN")]
        scope: Option<uuid::Uuid>,
        /// Print what would be restored; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// One line per blob instance: store, instance, state, keys, bytes, restores, last read.
    Status {
        /// Only this store.
        #[arg(long, value_name = "TOKEN")]
        scope: Option<uuid::Uuid>,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Clean the cold tier of every store (a start cleans only the stores archived,
    /// restored or removed since the last one): after restoring the database from a
    /// backup. Adopts an unrecorded cold object that holds the only copy of a blob.
    /// Offline: stop the daemon first.
    Repair,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Print a token for a user (and optionally write a freva-client token file).
    Issue {
        /// The user name the token carries.
        #[arg(long)]
        user: String,
        /// Give the token the admin role.
        #[arg(long)]
        admin: bool,
        /// How long the token is valid, e.g. 30m, 1h, 7d.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        ttl: std::time::Duration,
        /// Also write a token file for `freva-client --token-file` (mode 0600).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum IndexCommand {
    /// Add records from a JSON Lines file (`-` reads standard input).
    Add {
        /// The file, or `-`.
        file: PathBuf,
    },
    /// Crawl a tree of NetCDF files and index them.
    Crawl {
        /// Root of the tree.
        dir: PathBuf,
        /// DRS template for facets from paths: svc, cmip6, cmip5, cordex or auto.
        #[arg(long, default_value = "auto")]
        drs: String,
    },
    /// Remove records by file or by facet filters (all versions).
    Remove(RemoveArgs),
    /// Record counts, user data per user, terms per facet and store size.
    Stats,
}

#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// Remove every record of this file: the catalogue's and every user's entry.
    #[arg(long, value_name = "PATH", conflicts_with = "filters")]
    pub(crate) file: Option<String>,
    /// Filters as key=value (standard facet names), e.g. project=cmip6 variable=tas; they
    /// select crawled records. With user=NAME (the exact user name) they select that user's
    /// entries instead: `svcd index remove user=jane` removes all of them.
    #[arg(value_name = "KEY=VALUE")]
    pub(crate) filters: Vec<String>,
}
