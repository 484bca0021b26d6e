//! The one way the facades run the daemon's blocking work: [`Daemon::run`] and
//! [`Daemon::run_expensive`] move it to tokio's blocking pool, never onto the async workers
//! (there are as many as cores, so one long search there would stall every request, `/ping`
//! included). Everything that touches RocksDB, scans columns or reads NetCDF is blocking; the
//! HTTP handlers and the control socket call it through here, and code that already runs on
//! its own threads (a FUSE session, a conversion job) calls the daemon directly.
//!
//! Expensive work (searches, counts, catalogues, STAC pages, user-data adds and deletes) also
//! takes one of a bounded number
//! of [`ExpensiveSlot`]s (`http.max_expensive_requests`, shared by every facade). A caller that
//! finds them all taken waits up to [`SLOT_WAIT`] and then gets [`Error::Busy`], so a burst of
//! heavy requests cannot take the machine from everyone else; cheap work takes no slot. A panic
//! in the work becomes [`Error::WorkerFailed`], not a lost connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::Daemon;
use crate::error::{Error, Result};

/// How long expensive work waits for a slot before it is turned away.
pub const SLOT_WAIT: Duration = Duration::from_secs(2);

/// Streamed answers that may be under way at once, per slot of expensive work. A producer
/// gives its slot back while its client reads nothing, but keeps its thread of the blocking
/// pool (512 threads): bounded, so that work holding a slot always finds a thread (with the
/// streams unbounded, 512 stalled ones took every thread, and their producers then waited
/// for slots held by work that had none: the daemon was stuck for good).
const STREAMS_PER_SLOT: usize = 8;

/// The slots of expensive work, and of streamed answers.
pub(crate) struct Slots(Arc<Semaphore>, Arc<Semaphore>);

impl Slots {
    pub(crate) fn new(count: usize) -> Self {
        let count = count.max(1);
        Slots(
            Arc::new(Semaphore::new(count)),
            Arc::new(Semaphore::new(count * STREAMS_PER_SLOT)),
        )
    }
}

/// A permit of `semaphore`, waiting up to [`SLOT_WAIT`].
///
/// # Errors
/// [`Error::Busy`] when none comes free in time.
async fn within_slot_wait(semaphore: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit> {
    match tokio::time::timeout(SLOT_WAIT, Arc::clone(semaphore).acquire_owned()).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => Err(Error::Busy { retry: SLOT_WAIT }),
    }
}

/// A place for a streamed answer, held by its producer until it ends ([`Daemon::produce`]).
#[derive(Debug)]
pub struct StreamSlot(#[expect(dead_code, reason = "held for its drop")] OwnedSemaphorePermit);

/// A slot of expensive work, held until dropped (move it into the producer of a streamed
/// answer to hold it until the answer is produced).
#[derive(Debug)]
pub struct ExpensiveSlot(#[expect(dead_code, reason = "held for its drop")] OwnedSemaphorePermit);

impl Daemon {
    /// Takes a slot of expensive work, waiting up to [`SLOT_WAIT`].
    ///
    /// # Errors
    /// [`Error::Busy`] when every slot stays taken.
    pub async fn expensive_slot(&self) -> Result<ExpensiveSlot> {
        within_slot_wait(&self.slots.0).await.map(ExpensiveSlot)
    }

    /// Takes a place for a streamed answer, waiting up to [`SLOT_WAIT`].
    ///
    /// # Errors
    /// [`Error::Busy`] when every place stays taken.
    pub async fn stream_slot(&self) -> Result<StreamSlot> {
        within_slot_wait(&self.slots.1).await.map(StreamSlot)
    }

    /// What a streamed answer takes before its work: a place ([`Daemon::stream_slot`]), then
    /// a slot of expensive work, each waiting up to [`SLOT_WAIT`].
    ///
    /// # Errors
    /// [`Error::Busy`] when either stays taken.
    pub async fn stream_slots(&self) -> Result<(StreamSlot, ExpensiveSlot)> {
        let place = self.stream_slot().await?;
        Ok((place, self.expensive_slot().await?))
    }

    /// Starts `work` on the blocking pool at once; the returned future is its result (it
    /// borrows nothing, so a caller can go on with other things and await it later).
    ///
    /// # Errors
    /// The work's error, or [`Error::WorkerFailed`] when it panicked.
    pub fn run<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Daemon) -> Result<T> + Send + 'static,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let daemon = Arc::clone(self);
        let task = tokio::task::spawn_blocking(move || work(&daemon));
        async move {
            task.await.map_err(|e| Error::WorkerFailed {
                reason: e.to_string(),
            })?
        }
    }

    /// Runs expensive `work` on the blocking pool in one of the slots.
    ///
    /// # Errors
    /// [`Error::Busy`] when no slot frees in time, else as [`Daemon::run`].
    pub async fn run_expensive<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&Daemon) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let slot = self.expensive_slot().await?;
        let (result, _slot) = self.run_in_slot(slot, work).await?;
        Ok(result)
    }

    /// Starts `work` on the blocking pool holding `slot` until the work returns, and hands the
    /// slot back with its result (to hold it on while the result is streamed). The work holds
    /// the slot, not the caller: a caller that gives up (a client that disconnects) does not
    /// free the slot of work that still runs.
    ///
    /// # Errors
    /// As [`Daemon::run`]; the slot is freed then.
    pub fn run_in_slot<T: Send + 'static>(
        self: &Arc<Self>,
        slot: ExpensiveSlot,
        work: impl FnOnce(&Daemon) -> Result<T> + Send + 'static,
    ) -> impl Future<Output = Result<(T, ExpensiveSlot)>> + Send + 'static {
        self.run(move |daemon| Ok((work(daemon)?, slot)))
    }

    /// Starts `produce` on the blocking pool with `slot`, holding `place` until it ends: the
    /// producer of a streamed answer,
    /// which sends its parts through a channel the facade reads. The producer holds the slot
    /// while it works, and may give it back while it waits for a slow client and take one
    /// again ([`Daemon::slot_again`]). Call it on the runtime (it watches the producer with a
    /// task).
    pub fn produce(
        self: &Arc<Self>,
        place: StreamSlot,
        slot: ExpensiveSlot,
        produce: impl FnOnce(&Daemon, ExpensiveSlot) + Send + 'static,
    ) {
        let daemon = Arc::clone(self);
        let producer = tokio::task::spawn_blocking(move || {
            let _place = place;
            produce(&daemon, slot);
        });
        // Nobody awaits a producer's result; a panic in it ends the stream early, and is
        // logged here so that the truncated answer has a cause on record.
        tokio::spawn(async move {
            if let Err(e) = producer.await {
                tracing::error!(error = %e, "a stream producer failed");
            }
        });
    }

    /// A slot of expensive work for a producer on the blocking pool that gave its slot back
    /// while its client was slow: waits as long as every slot is taken (its answer has begun,
    /// so there is no 503 to give).
    pub fn slot_again(&self) -> ExpensiveSlot {
        let waiting = Arc::clone(&self.slots.0).acquire_owned();
        match tokio::runtime::Handle::current().block_on(waiting) {
            Ok(permit) => ExpensiveSlot(permit),
            Err(_) => unreachable!("the semaphore of the slots is never closed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon(slots: usize) -> (tempfile::TempDir, Arc<Daemon>) {
        let dir = tempfile::tempdir().unwrap();
        let overrides = crate::config::Overrides {
            data_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        let mut config = crate::Config::from_sources(None, &[], &overrides).unwrap();
        config.http.max_expensive_requests = slots;
        (dir, Arc::new(Daemon::open(config).unwrap()))
    }

    #[tokio::test]
    async fn a_panic_in_the_work_is_an_internal_error() {
        let (_dir, daemon) = daemon(1);
        let error = daemon
            .run(|_| -> Result<()> { panic!("boom") })
            .await
            .unwrap_err();
        assert!(matches!(error, Error::WorkerFailed { .. }), "{error:?}");
        assert_eq!(error.kind(), crate::ErrorKind::Internal);
        // The pool survives it.
        assert_eq!(daemon.run(|_| Ok(7)).await.unwrap(), 7);
    }

    /// Streamed answers are bounded apart from the slots: a producer that gave its slot back
    /// while its client reads nothing still holds its place (and its thread).
    #[tokio::test]
    async fn streamed_answers_are_bounded_whatever_their_slots() {
        let (_dir, daemon) = daemon(1);
        let mut places = Vec::new();
        for _ in 0..STREAMS_PER_SLOT {
            places.push(daemon.stream_slot().await.unwrap());
        }
        let error = daemon.stream_slot().await.unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "{error:?}");
        // Searches still find their slot.
        assert!(daemon.expensive_slot().await.is_ok());
        places.pop();
        assert!(daemon.stream_slot().await.is_ok());
    }

    #[tokio::test]
    async fn expensive_work_waits_for_a_slot_then_is_busy() {
        let (_dir, daemon) = daemon(1);
        let held = daemon.expensive_slot().await.unwrap();
        let error = daemon.run_expensive(|_| Ok(())).await.unwrap_err();
        assert!(
            matches!(error, Error::Busy { retry } if retry == SLOT_WAIT),
            "{error:?}"
        );
        assert_eq!(error.kind(), crate::ErrorKind::Unavailable);
        drop(held);
        assert_eq!(daemon.run_expensive(|_| Ok(1)).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn work_keeps_its_slot_when_its_caller_gives_up() {
        let (_dir, daemon) = daemon(1);
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (started, running) = tokio::sync::oneshot::channel::<()>();
        let caller = tokio::spawn({
            let daemon = Arc::clone(&daemon);
            async move {
                daemon
                    .run_expensive(move |_| {
                        let _ = started.send(());
                        released.recv().ok();
                        Ok(())
                    })
                    .await
            }
        });
        running.await.unwrap();
        // The client disconnects: its request future is dropped, the scan goes on.
        caller.abort();
        let _ = caller.await;
        let error = daemon.expensive_slot().await.unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "{error:?}");
        release.send(()).unwrap();
        assert_eq!(daemon.run_expensive(|_| Ok(2)).await.unwrap(), 2);
    }
}
