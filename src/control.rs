//! The control socket, a transport of the daemon like HTTP: lets `svcd index ...` reach a
//! running daemon, whose store is locked while it runs. A Unix socket in the data directory,
//! mode 0600 from its creation on (see `bind_owner_only`), so only the daemon's user can write
//! to the catalogue through it. The work runs through the daemon's [`Daemon::run`].
//!
//! Protocol: the client sends one JSON request line; for `add` the JSON Lines records follow
//! until the client shuts down its write half. The daemon answers with JSON lines: `progress`
//! events during an add, then one final `done` or `error` line.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use svc_daemon::{Daemon, Error, LoadSummary, Loader, Result, Stats};

/// A request on the control socket.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Add JSON Lines records (they follow the request line).
    Add,
    /// Remove the records matching the filters (standard facet names, all versions).
    Remove {
        /// `(key, value)` filters, as in a search.
        filters: Vec<(String, String)>,
    },
    /// Report catalogue statistics.
    Stats,
    /// List the Zarr stores.
    StoreList,
    /// Remove a Zarr store.
    StoreRemove {
        /// Its token.
        token: String,
    },
    /// Archive blobs (`svcd tier archive`).
    TierArchive(svc_daemon::ArchiveOptions),
    /// Restore archived blobs (`svcd tier restore`).
    TierRestore {
        /// Only this store.
        scope: Option<uuid::Uuid>,
        /// Change nothing.
        dry_run: bool,
    },
    /// The tier state (`svcd tier status`).
    TierStatus {
        /// Only this store.
        scope: Option<uuid::Uuid>,
    },
    /// Convert files into stores of `user`.
    StoreConvert {
        /// Absolute paths.
        paths: Vec<String>,
        /// The owner.
        user: String,
    },
}

/// A reply line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    /// Lines processed so far.
    Progress {
        /// Input lines read.
        lines: u64,
    },
    /// Result of an add.
    Loaded(LoadSummary),
    /// Result of a remove.
    Removed {
        /// Records removed.
        removed: u64,
    },
    /// Result of stats.
    Stats(Stats),
    /// Zarr stores, as `StoreRecord::summary` gives them.
    Stores {
        /// One object per store.
        stores: Vec<serde_json::Value>,
    },
    /// One blob instance archived or restored (during `TierArchive`, `TierRestore`).
    TierProgress {
        /// What became of it.
        row: svc_daemon::ArchiveRow,
        /// Instances in the run.
        total: usize,
    },
    /// The result of `TierArchive` or `TierRestore`.
    TierDone {
        /// One row per instance.
        rows: Vec<svc_daemon::ArchiveRow>,
    },
    /// The result of `TierStatus`.
    TierStatus {
        /// One row per instance.
        rows: Vec<svc_daemon::InstanceRow>,
    },
    /// The request failed.
    Error {
        /// Why.
        detail: String,
    },
}

/// Serves the control socket until the task is dropped.
///
/// # Errors
/// When the socket cannot be created.
pub(crate) async fn serve(daemon: Arc<Daemon>, path: &Path) -> Result<()> {
    let listener = bind_owner_only(path)?;
    loop {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| Error::io("accept on control socket", e))?;
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            if let Err(e) = handle(daemon, stream).await {
                tracing::warn!(error = %e, "control connection failed");
            }
        });
    }
}

/// Binds the socket so that it is never reachable by others, not even for a moment: it is
/// created inside a fresh directory only the daemon's user can enter, made owner-only there,
/// and then moved into place (a rename keeps the bound socket). A chmod after binding in place
/// would leave a window in which anyone could connect.
fn bind_owner_only(path: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    let private = parent.join(format!(".svcd-sock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| Error::io(format!("create {}", private.display()), e))?;
    let staged = private.join("svcd.sock");
    let bound = (|| {
        let listener = UnixListener::bind(&staged)
            .map_err(|e| Error::io(format!("bind {}", staged.display()), e))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(format!("chmod {}", staged.display()), e))?;
        let _ = std::fs::remove_file(path);
        std::fs::rename(&staged, path)
            .map_err(|e| Error::io(format!("move the socket to {}", path.display()), e))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&private);
    bound
}

async fn handle(daemon: Arc<Daemon>, stream: tokio::net::UnixStream) -> Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    let io = |e| Error::io("control socket", e);
    let Some(first) = lines.next_line().await.map_err(io)? else {
        return Ok(());
    };
    let reply = match serde_json::from_str::<Request>(&first) {
        Err(e) => Reply::Error {
            detail: format!("bad request: {e}"),
        },
        Ok(Request::Stats) => match daemon.run(|d| Ok(d.catalog().stats())).await {
            Ok(stats) => Reply::Stats(stats),
            Err(e) => Reply::Error {
                detail: e.to_string(),
            },
        },
        Ok(Request::StoreList) => match daemon.run(crate::store::summaries).await {
            Ok(stores) => Reply::Stores { stores },
            Err(e) => Reply::Error {
                detail: e.to_string(),
            },
        },
        Ok(Request::StoreRemove { token }) => {
            match daemon.run(move |d| crate::store::remove(d, &token)).await {
                Ok(stores) => Reply::Stores { stores },
                Err(e) => Reply::Error {
                    detail: e.to_string(),
                },
            }
        }
        Ok(Request::StoreConvert { paths, user }) => {
            match daemon
                .run(move |d| crate::store::convert(d, &paths, &user))
                .await
            {
                Ok(stores) => Reply::Stores { stores },
                Err(e) => Reply::Error {
                    detail: e.to_string(),
                },
            }
        }
        Ok(Request::TierStatus { scope }) => {
            match daemon.run(move |d| d.stores().tier_status(scope)).await {
                Ok(rows) => Reply::TierStatus { rows },
                Err(e) => Reply::Error {
                    detail: e.to_string(),
                },
            }
        }
        Ok(request @ (Request::TierArchive(_) | Request::TierRestore { .. })) => {
            let (rows_tx, mut rows_rx) = tokio::sync::mpsc::unbounded_channel();
            let run = daemon.run(move |d| {
                // Each row waits until it was sent: one that cannot be (the client is gone,
                // an operator's Ctrl-C) stops the run before the next blob.
                let progress = move |row: &svc_daemon::ArchiveRow, total: usize| {
                    let (sent, delivered) = tokio::sync::oneshot::channel();
                    rows_tx.send((row.clone(), total, sent)).is_ok()
                        && delivered.blocking_recv().unwrap_or(false)
                };
                match request {
                    Request::TierArchive(options) => d.stores().archive(&options, &progress),
                    Request::TierRestore { scope, dry_run } => {
                        d.stores().restore_archived(scope, dry_run, &progress)
                    }
                    _ => unreachable!("matched above"),
                }
            });
            tokio::pin!(run);
            let outcome = loop {
                tokio::select! {
                    outcome = &mut run => break outcome,
                    Some((row, total, sent)) = rows_rx.recv() => {
                        let msg = serde_json::to_string(&Reply::TierProgress { row, total })
                            .expect("replies serialise");
                        let written = write.write_all(format!("{msg}\n").as_bytes()).await;
                        let _ = sent.send(written.is_ok());
                        written.map_err(io)?;
                    }
                }
            };
            match outcome {
                Ok(rows) => Reply::TierDone { rows },
                Err(e) => Reply::Error {
                    detail: e.to_string(),
                },
            }
        }
        Ok(Request::Remove { filters }) => {
            match daemon.run(move |d| d.databrowser().remove(&filters)).await {
                Ok(removed) => Reply::Removed { removed },
                Err(e) => Reply::Error {
                    detail: e.to_string(),
                },
            }
        }
        Ok(Request::Add) => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Option<String>>(1024);
            let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            let loader = daemon.run(move |d| {
                let catalog = Arc::clone(d.catalog());
                let mut loader = Loader::new(|batch| catalog.add(batch));
                while let Some(Some(line)) = rx.blocking_recv() {
                    loader.push_line(&line)?;
                    if loader.lines() % 10_000 == 0 {
                        let _ = progress_tx.send(loader.lines());
                    }
                }
                loader.finish()
            });
            loop {
                tokio::select! {
                    line = lines.next_line() => {
                        let line = line.map_err(io)?;
                        let end = line.is_none();
                        if tx.send(line).await.is_err() || end { break; }
                    }
                    Some(n) = progress_rx.recv() => {
                        let msg = serde_json::to_string(&Reply::Progress { lines: n }).expect("replies serialise");
                        write.write_all(format!("{msg}\n").as_bytes()).await.map_err(io)?;
                    }
                }
            }
            drop(tx);
            match loader.await {
                Ok(summary) => Reply::Loaded(summary),
                Err(e) => Reply::Error {
                    detail: e.to_string(),
                },
            }
        }
    };
    let msg = serde_json::to_string(&reply).expect("replies serialise");
    write
        .write_all(format!("{msg}\n").as_bytes())
        .await
        .map_err(io)?;
    write.shutdown().await.map_err(io)
}

/// A client connection to a running daemon's control socket.
pub(crate) struct Client {
    writer: BufWriter<UnixStream>,
}

impl Client {
    /// Connects, or returns `None` when no daemon listens on `path`.
    pub(crate) fn connect(path: &Path) -> Option<Self> {
        UnixStream::connect(path).ok().map(|stream| Client {
            writer: BufWriter::with_capacity(1 << 16, stream),
        })
    }

    /// Sends a request line.
    ///
    /// # Errors
    /// An I/O error on the socket.
    pub(crate) fn send(&mut self, request: &Request) -> Result<()> {
        let line = serde_json::to_string(request).expect("requests serialise");
        self.send_line(&line)
    }

    /// Sends one raw line (records of an add).
    ///
    /// # Errors
    /// An I/O error on the socket.
    pub(crate) fn send_line(&mut self, line: &str) -> Result<()> {
        let io = |e| Error::io("control socket", e);
        self.writer.write_all(line.as_bytes()).map_err(io)?;
        self.writer.write_all(b"\n").map_err(io)
    }

    /// Ends the request body and reads the replies; `on_progress` sees progress events.
    ///
    /// # Errors
    /// An I/O error, or a reply that is not JSON.
    pub(crate) fn finish(self, mut on_progress: impl FnMut(u64)) -> Result<Reply> {
        self.replies(|reply| match reply {
            Reply::Progress { lines } => {
                on_progress(lines);
                None
            }
            reply => Some(reply),
        })
    }

    /// Ends the request and reads the replies of an archive or restore; `on_row` sees each
    /// instance as it is done.
    ///
    /// # Errors
    /// As [`Client::finish`].
    pub(crate) fn finish_rows(
        self,
        mut on_row: impl FnMut(&svc_daemon::ArchiveRow, usize),
    ) -> Result<Reply> {
        self.replies(|reply| match reply {
            Reply::TierProgress { row, total } => {
                on_row(&row, total);
                None
            }
            reply => Some(reply),
        })
    }

    /// Reads reply lines until `progress` gives one back as the answer.
    fn replies(self, mut progress: impl FnMut(Reply) -> Option<Reply>) -> Result<Reply> {
        let io = |e| Error::io("control socket", e);
        let stream = self.writer.into_inner().map_err(|e| io(e.into_error()))?;
        stream.shutdown(std::net::Shutdown::Write).map_err(io)?;
        let reader = BufReader::new(&stream);
        for line in reader.lines() {
            let line = line.map_err(io)?;
            match serde_json::from_str::<Reply>(&line) {
                Ok(reply) => {
                    if let Some(answer) = progress(reply) {
                        return Ok(answer);
                    }
                }
                Err(e) => {
                    let reply = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
                    return Err(io(reply));
                }
            }
        }
        Err(Error::io(
            "control socket",
            std::io::Error::other("daemon closed the connection without a reply"),
        ))
    }
}
