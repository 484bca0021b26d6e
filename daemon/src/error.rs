//! The daemon's error type and the kinds the facades map to status codes and errnos.

use std::path::PathBuf;

/// What a caller can do about an error: a domain classification that each facade maps to its
/// own codes (HTTP statuses in `svc-http`'s `error.rs`, errno values with [`ErrorKind::errno`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A parameter of the request cannot be used (see [`Fault`] for how).
    Invalid,
    /// A search matched nothing where the endpoint requires at least one hit.
    NoResults,
    /// The result, or what the request would add, is larger than allowed.
    TooLarge,
    /// The caller is not authenticated.
    Unauthenticated,
    /// The caller is authenticated but not allowed.
    Forbidden,
    /// The named thing does not exist.
    NotFound,
    /// The thing exists already.
    Conflict,
    /// The service cannot answer right now; the same request may succeed later.
    Unavailable,
    /// Work the request depends on failed before (a store's conversion); the detail says why.
    Failed,
    /// A bug or an environment failure.
    Internal,
}

impl ErrorKind {
    /// The errno a file-system facade (the FUSE mount) answers with for this kind.
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::Invalid => libc::EINVAL,
            ErrorKind::NoResults | ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::TooLarge => libc::EFBIG,
            ErrorKind::Unauthenticated | ErrorKind::Forbidden => libc::EACCES,
            ErrorKind::Conflict => libc::EEXIST,
            ErrorKind::Unavailable => libc::EAGAIN,
            ErrorKind::Internal | ErrorKind::Failed => libc::EIO,
        }
    }
}

/// How a request parameter is wrong. Facades choose their codes from it: the STAC API answers
/// most faults with 400 and the databrowser all of them with 422 (see `svc-http`'s `error.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The text does not parse as the parameter's type: a number, a date, a box, a geometry,
    /// a paging token, a JSON document.
    Syntax,
    /// The request names a parameter, body field or facet that the endpoint does not take.
    Unknown,
    /// A JSON body is not JSON or not an object, a field of it has the wrong JSON type, or a
    /// required field is missing.
    WrongType,
    /// The value parses but is not allowed: out of range, reserved, in conflict with another
    /// parameter, or matching nothing.
    Refused,
}

/// What a request named that does not exist for its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// A flavour, as the request named it.
    Flavour(String),
    /// A STAC collection.
    Collection(String),
    /// A Zarr store, by its token (or what the request gave as one).
    Store(String),
    /// A key of a Zarr store.
    StoreKey(String),
    /// Zarr v3 metadata (`zarr.json`): stores are Zarr v2.
    ZarrV3,
    /// A STAC item of a collection.
    Item {
        /// The collection's id.
        collection: String,
        /// The item's id.
        id: String,
    },
    /// A STAC collection axis (a facet that collections group by).
    Axis {
        /// The axis as the request named it.
        name: String,
        /// The axes there are.
        axes: &'static [&'static str],
    },
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Flavour(name) => write!(f, "Flavour '{name}' not found."),
            Missing::Collection(id) => write!(f, "Collection {id} not found."),
            Missing::Store(token) => write!(f, "Zarr store {token} not found."),
            Missing::StoreKey(key) => write!(f, "Key not found: {key}."),
            Missing::ZarrV3 => write!(f, "Zarr v3 not supported: the store is Zarr v2."),
            Missing::Item { collection, id } => {
                write!(f, "Item {id} not found in collection {collection}.")
            }
            Missing::Axis { name, axes } => write!(
                f,
                "Unknown STAC collection axis: {name}. Axes: {}.",
                axes.join(", ")
            ),
        }
    }
}

/// What already holds a flavour name that a create or a rename asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// A built-in flavour (only global names clash with built-ins).
    BuiltIn,
    /// A global flavour, on create.
    Global,
    /// One of the caller's personal flavours, on create.
    Personal,
    /// Another flavour of the same scope, on rename.
    Other,
}

/// Everything that can go wrong in the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request parameter, body field or path segment cannot be used.
    #[error("{detail}")]
    InvalidParameter {
        /// The parameter as the request named it (`bbox`, `facets.model`, `body`, ...).
        parameter: String,
        /// How it is wrong.
        fault: Fault,
        /// The explanation shown to the user; it names the parameter and, where it helps,
        /// the value and what is expected.
        detail: String,
    },
    /// The flavour is not known to the caller.
    #[error("{}", unknown_flavour(name, available))]
    UnknownFlavour {
        /// The name the request gave.
        name: String,
        /// The flavours the caller can use.
        available: Vec<String>,
    },
    /// A search found nothing.
    #[error("No results found.")]
    NoResults,
    /// More results than `max-results`.
    #[error("Result stream too big: {count} results, max-results is {max}.")]
    TooManyResults {
        /// How many results the search found.
        count: u64,
        /// The caller's bound.
        max: u64,
    },
    /// A static STAC catalogue would list more items than it may.
    #[error(
        "A static STAC catalogue holds at most {max} items; this search has {count}. \
         Narrow the search, or use the STAC API or the intake catalogue."
    )]
    StaticCatalogueTooLarge {
        /// How many items the search found.
        count: u64,
        /// The most a static catalogue holds.
        max: u64,
    },
    /// The catalogue holds as many records as its 32-bit record ids can number.
    #[error("The catalogue is full ({capacity} records); remove records before adding more.")]
    CatalogueFull {
        /// How many records it can hold.
        capacity: u64,
    },
    /// No valid credentials; `reason` says what is wrong with the token.
    #[error("{reason}")]
    Unauthenticated {
        /// What was wrong.
        reason: String,
    },
    /// Only administrators may do this.
    #[error("Only admin users can {action} {what}.")]
    AdminOnly {
        /// The verb (`create`, `update`, `delete`).
        action: &'static str,
        /// What it was asked of (`global flavours`).
        what: &'static str,
    },
    /// The caller may not read a file it asked to convert.
    #[error("You may not read {path:?}; only files you may read can be converted.")]
    SourceForbidden {
        /// The file.
        path: String,
    },
    /// A share URL whose signature is not valid or has expired.
    #[error("{reason}")]
    ShareDenied {
        /// Which.
        reason: &'static str,
    },
    /// The named thing does not exist (for this caller).
    #[error("{0}")]
    NotFound(Missing),
    /// The flavour name is taken.
    #[error("{}", flavour_exists(name, *holder))]
    FlavourExists {
        /// The name asked for.
        name: String,
        /// What holds it.
        holder: Holder,
    },
    /// A service the daemon depends on cannot be reached.
    #[error("{service}: {reason}")]
    Unavailable {
        /// The service (an address).
        service: String,
        /// What failed.
        reason: String,
    },
    /// The conversion of a store failed; it has no keys to read.
    #[error("The conversion of Zarr store {token} failed: {reason}")]
    StoreFailed {
        /// The store.
        token: String,
        /// Why.
        reason: String,
    },
    /// A key of a store being converted is not written yet.
    #[error("The store is still being prepared; try again in a moment.")]
    NotReady {
        /// How long a client should wait before retrying.
        retry: std::time::Duration,
    },
    /// The daemon is stopping: a reader's wait (for a conversion, a restore, a chunk
    /// computed on its request) ended with it. Asked again, the next start answers.
    #[error("The daemon is stopping; try again in a moment.")]
    Stopping {
        /// How long a client should wait before retrying.
        retry: std::time::Duration,
    },
    /// Every slot of expensive work stayed taken; `retry` is worth waiting before trying again.
    #[error("The server is busy with other searches; try again in a moment.")]
    Busy {
        /// How long a client should wait before retrying.
        retry: std::time::Duration,
    },
    /// Work on the blocking pool panicked or was cancelled (a bug).
    #[error("a worker failed: {reason}")]
    WorkerFailed {
        /// The panic or cancellation.
        reason: String,
    },
    /// A key's blob is being restored from the cold tier, or its restore failed (the next
    /// read tries again): either way, worth asking again.
    #[error("{detail}")]
    Restoring {
        /// What is happening, or what failed.
        detail: String,
        /// How long a client should wait before retrying.
        retry: std::time::Duration,
    },
    /// The cold tier failed: an archive, a restore, or the tier's own check at start.
    #[error("{0}")]
    Tier(String),
    /// The database on disk has a schema this build does not know.
    #[error("store at {path} has schema version {found}, this svcd knows version {expected}")]
    SchemaVersion {
        /// Database directory.
        path: PathBuf,
        /// Version found on disk.
        found: u32,
        /// Version this build writes.
        expected: u32,
    },
    /// A stored value cannot be decoded.
    #[error("corrupt value in column family {family}: {reason}")]
    Corrupt {
        /// Column family name.
        family: &'static str,
        /// What failed.
        reason: String,
    },
    /// The configuration is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// RocksDB failed.
    #[error("store: {0}")]
    Store(#[from] rocksdb::Error),
    /// File system or socket failure.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The detail of [`Error::UnknownFlavour`]: the available flavours and any that look alike.
fn unknown_flavour(name: &str, available: &[String]) -> String {
    let mut detail = format!(
        "Invalid flavour '{name}'. Available flavours: {}",
        available.join(", ")
    );
    let similar: Vec<&str> = available
        .iter()
        .map(String::as_str)
        .filter(|n| n.contains(name) || name.contains(n))
        .collect();
    if !similar.is_empty() {
        detail.push_str(&format!(". Did you mean: {}", similar.join(", ")));
    }
    detail.push('.');
    detail
}

/// The detail of [`Error::FlavourExists`].
fn flavour_exists(name: &str, holder: Holder) -> String {
    match holder {
        Holder::BuiltIn => format!("Flavour '{name}' conflicts with a built-in flavour."),
        Holder::Global | Holder::Personal => {
            let scope = if holder == Holder::Global {
                "Global"
            } else {
                "Personal"
            };
            format!(
                "{scope} flavour '{name}' already exists. Use the update endpoint to change it."
            )
        }
        Holder::Other => format!("Flavour '{name}' already exists."),
    }
}

impl Error {
    /// The kind of this error, for mapping to a status code or errno.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidParameter { .. } | Error::UnknownFlavour { .. } => ErrorKind::Invalid,
            Error::NoResults => ErrorKind::NoResults,
            Error::TooManyResults { .. } | Error::StaticCatalogueTooLarge { .. } => {
                ErrorKind::TooLarge
            }
            Error::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            Error::AdminOnly { .. } | Error::SourceForbidden { .. } | Error::ShareDenied { .. } => {
                ErrorKind::Forbidden
            }
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::FlavourExists { .. } => ErrorKind::Conflict,
            // A full catalogue is the server's limit, not the request's size: 503, like a
            // service that cannot take more now.
            Error::Unavailable { .. }
            | Error::Busy { .. }
            | Error::NotReady { .. }
            | Error::Stopping { .. }
            | Error::Restoring { .. }
            | Error::CatalogueFull { .. } => ErrorKind::Unavailable,
            Error::StoreFailed { .. } => ErrorKind::Failed,
            Error::SchemaVersion { .. }
            | Error::Corrupt { .. }
            | Error::Config(_)
            | Error::Store(_)
            | Error::Io { .. }
            | Error::Tier(_)
            | Error::WorkerFailed { .. } => ErrorKind::Internal,
        }
    }

    /// How a parameter is wrong, for [`Error::InvalidParameter`] and [`Error::UnknownFlavour`]
    /// (a flavour a request names that it cannot use is a value refused).
    pub fn fault(&self) -> Option<Fault> {
        match self {
            Error::InvalidParameter { fault, .. } => Some(*fault),
            Error::UnknownFlavour { .. } => Some(Fault::Refused),
            _ => None,
        }
    }

    /// An [`Error::InvalidParameter`].
    pub fn invalid(parameter: impl Into<String>, fault: Fault, detail: impl Into<String>) -> Self {
        Error::InvalidParameter {
            parameter: parameter.into(),
            fault,
            detail: detail.into(),
        }
    }

    /// An [`Error::Unauthenticated`].
    pub fn unauthenticated(reason: impl Into<String>) -> Self {
        Error::Unauthenticated {
            reason: reason.into(),
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl Error {
    /// The error and every source under it, as one line (`outer: inner: ...`), for logs of
    /// internal failures. A source whose text the line already ends with is not repeated.
    pub fn chain(&self) -> String {
        let mut line = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            source = cause.source();
        }
        line
    }
}

/// Result with the daemon's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_the_errnos_a_mount_needs() {
        let errno = |e: Error| e.kind().errno();
        assert_eq!(
            errno(Error::NotFound(Missing::Collection("c".into()))),
            libc::ENOENT
        );
        let admin_only = Error::AdminOnly {
            action: "delete",
            what: "global flavours",
        };
        assert_eq!(errno(admin_only), libc::EACCES);
        assert_eq!(errno(Error::unauthenticated("no token")), libc::EACCES);
        let busy = Error::Busy {
            retry: std::time::Duration::from_secs(2),
        };
        assert_eq!(errno(busy), libc::EAGAIN);
        let disk = Error::io("read blob", std::io::Error::other("disk on fire"));
        assert_eq!(errno(disk), libc::EIO);
        assert_eq!(
            errno(Error::invalid("limit", Fault::Syntax, "bad")),
            libc::EINVAL
        );
    }

    #[test]
    fn the_chain_names_every_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("robot arm jammed")]
        struct Jammed;
        #[derive(Debug, thiserror::Error)]
        #[error("tape library offline")]
        struct Offline(#[source] Jammed);
        let nested = std::io::Error::other(Offline(Jammed));
        let error = Error::io("restore blob 7", nested);
        assert_eq!(error.to_string(), "restore blob 7: tape library offline");
        assert_eq!(
            error.chain(),
            "restore blob 7: tape library offline: robot arm jammed"
        );
    }
}
