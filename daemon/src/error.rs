//! The daemon's error type and the kinds the facades map to status codes and errnos.

use std::path::PathBuf;

/// What a caller can do about an error: a domain classification that each facade maps to its
/// own codes (HTTP statuses in `svc-http`'s `error.rs`, errno values with [`ErrorKind::errno`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or names something that does not exist in its vocabulary.
    Invalid,
    /// The request cannot be parsed at all (a syntax error in a parameter, as opposed to a
    /// well-formed value that is not allowed).
    Malformed,
    /// A search matched nothing where the endpoint requires at least one hit.
    NoResults,
    /// The result is larger than the caller allowed.
    TooLarge,
    /// The caller is not authenticated.
    Unauthenticated,
    /// The caller is authenticated but not allowed.
    Forbidden,
    /// The named thing does not exist.
    NotFound,
    /// The thing exists already.
    Conflict,
    /// The service cannot answer right now.
    Unavailable,
    /// A bug or an environment failure.
    Internal,
}

impl ErrorKind {
    /// The errno a file-system facade (the FUSE mount) answers with for this kind.
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::Invalid | ErrorKind::Malformed => libc::EINVAL,
            ErrorKind::NoResults | ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::TooLarge => libc::EFBIG,
            ErrorKind::Unauthenticated | ErrorKind::Forbidden => libc::EACCES,
            ErrorKind::Conflict => libc::EEXIST,
            ErrorKind::Unavailable => libc::EAGAIN,
            ErrorKind::Internal => libc::EIO,
        }
    }
}

/// Everything that can go wrong in the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request parameter has a bad value; `detail` is shown to the user.
    #[error("{detail}")]
    InvalidParameter {
        /// What was wrong, naming the parameter.
        detail: String,
    },
    /// A parameter does not parse; `detail` is shown to the user.
    #[error("{0}")]
    Malformed(String),
    /// The flavour is not known to the caller.
    #[error("{detail}")]
    UnknownFlavour {
        /// Message listing the available flavours.
        detail: String,
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
    /// No valid credentials; `detail` says what is wrong with the token.
    #[error("{detail}")]
    Unauthenticated {
        /// What was wrong.
        detail: String,
    },
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The named thing does not exist (for this caller).
    #[error("{0}")]
    NotFound(String),
    /// The thing exists already.
    #[error("{0}")]
    Conflict(String),
    /// A service the daemon depends on cannot be reached.
    #[error("{0}")]
    Unavailable(String),
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

impl Error {
    /// The kind of this error, for mapping to a status code or errno.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidParameter { .. } | Error::UnknownFlavour { .. } => ErrorKind::Invalid,
            Error::Malformed(_) => ErrorKind::Malformed,
            Error::NoResults => ErrorKind::NoResults,
            Error::TooManyResults { .. } => ErrorKind::TooLarge,
            Error::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            Error::Forbidden(_) => ErrorKind::Forbidden,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::Unavailable(_) | Error::Busy { .. } => ErrorKind::Unavailable,
            Error::SchemaVersion { .. }
            | Error::Corrupt { .. }
            | Error::Config(_)
            | Error::Store(_)
            | Error::Io { .. }
            | Error::WorkerFailed { .. } => ErrorKind::Internal,
        }
    }

    /// Shorthand for [`Error::InvalidParameter`].
    pub fn invalid(detail: impl Into<String>) -> Self {
        Error::InvalidParameter {
            detail: detail.into(),
        }
    }

    /// Shorthand for [`Error::Unauthenticated`].
    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Error::Unauthenticated {
            detail: detail.into(),
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
        assert_eq!(errno(Error::NotFound("no such store".into())), libc::ENOENT);
        assert_eq!(errno(Error::Forbidden("not yours".into())), libc::EACCES);
        assert_eq!(errno(Error::unauthenticated("no token")), libc::EACCES);
        let busy = Error::Busy {
            retry: std::time::Duration::from_secs(2),
        };
        assert_eq!(errno(busy), libc::EAGAIN);
        let disk = Error::io("read blob", std::io::Error::other("disk on fire"));
        assert_eq!(errno(disk), libc::EIO);
        assert_eq!(errno(Error::invalid("bad")), libc::EINVAL);
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
