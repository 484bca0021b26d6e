//! The one way handlers run the daemon's work: on tokio's blocking pool, never on the async
//! workers (there are as many as cores, so one long search there would stall every request,
//! `/ping` included).
//!
//! Expensive work (searches, counts, catalogues, STAC pages) also takes one of a bounded
//! number of slots (`http.max_expensive_requests`). A request that finds them all taken
//! waits up to [`SLOT_WAIT`] and then gets 503 with `Retry-After`, so a burst of heavy
//! requests cannot take the machine from everyone else; cheap requests take no slot. A
//! panic in the work becomes a 500 with the error logged, not a dropped connection.

use std::sync::Arc;
use std::time::Duration;

use svc_daemon::{Daemon, Error};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::AppState;
use crate::error::ApiError;

/// How long an expensive request waits for a slot before it is turned away.
pub(crate) const SLOT_WAIT: Duration = Duration::from_secs(2);

/// The slots of expensive work.
#[derive(Clone)]
pub(crate) struct Slots(Arc<Semaphore>);

impl Slots {
    pub(crate) fn new(count: usize) -> Self {
        Slots(Arc::new(Semaphore::new(count.max(1))))
    }

    /// A slot, held until the returned permit is dropped (move it into a stream producer to
    /// hold it while a body is streamed).
    pub(crate) async fn take(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        match tokio::time::timeout(SLOT_WAIT, Arc::clone(&self.0).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Error::Unavailable(
                "The server is busy with other searches; try again in a moment.".into(),
            )
            .into()),
        }
    }
}

/// Runs `work` on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&Daemon) -> svc_daemon::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let daemon = Arc::clone(&state.daemon);
    match tokio::task::spawn_blocking(move || work(&daemon)).await {
        Ok(result) => Ok(result?),
        Err(e) => Err(Error::io("request worker", std::io::Error::other(e.to_string())).into()),
    }
}

/// Runs expensive `work` on the blocking pool in one of the slots.
pub(crate) async fn expensive<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&Daemon) -> svc_daemon::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let _slot = state.slots.take().await?;
    blocking(state, work).await
}
