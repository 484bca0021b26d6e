//! The sweep: stores nobody has read for `stores.unread_expiry_seconds` are removed (status 4,
//! their data deleted by their jobs), so the hot tier does not fill with forgotten stores.
//! Reads are counted in memory ([`Reads`]) and written to the records by the sweep, not on
//! every read; a crash loses at most the reads since the last sweep, which only delays a
//! removal. The same
//! thread cleans the cold tier of the stores marked for it ([`Stores::clean_cold_marked`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use uuid::Uuid;

use super::{Status, Stores};
use crate::db::{Batch, cf};
use crate::error::Result;

/// How often the daemon sweeps.
const SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// Sweeps every [`SWEEP_INTERVAL`] and cleans the cold tier of the stores marked for it
/// every `cleaning` (`tier.cleaning_interval_seconds`; see [`crate::tier`]: what a start
/// could not clean, its cold tier silent, and what archives, restores and removals left
/// behind since are cleaned then, not at the next start) until `stop` is requested
/// (checked every second, and before each store, deletion and adoption of a cleaning).
pub(crate) fn sweep_until(stores: &Stores, stop: &crate::jobs::Stop, cleaning: Duration) {
    let mut next_sweep = Instant::now() + SWEEP_INTERVAL;
    let mut next_cleaning = Instant::now() + cleaning;
    loop {
        while Instant::now() < next_sweep.min(next_cleaning) {
            if stop.requested() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        if Instant::now() >= next_cleaning {
            if let Err(e) = stores.clean_cold_marked(stop) {
                tracing::error!(error = %e.chain(), "the cleaning of the cold tier failed");
            }
            next_cleaning = Instant::now() + cleaning;
        }
        if Instant::now() >= next_sweep {
            match stores.sweep(super::job::now()) {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "removed stores nobody read"),
                Err(e) => tracing::error!(error = %e.chain(), "the store sweep failed"),
            }
            next_sweep = Instant::now() + SWEEP_INTERVAL;
        }
    }
}

/// The latest read of each store since the last sweep.
#[derive(Default)]
pub(super) struct Reads(Mutex<HashMap<Uuid, i64>>);

impl Reads {
    /// The latest read of `token` since the last sweep.
    pub(super) fn latest(&self, token: Uuid) -> Option<i64> {
        self.0.lock().get(&token).copied()
    }

    /// Notes a user's read of a store at `now`.
    pub(super) fn note(&self, token: Uuid, now: i64) {
        let mut reads = self.0.lock();
        let last = reads.entry(token).or_insert(now);
        *last = (*last).max(now);
    }
}

impl Stores {
    /// Writes the reads since the last sweep into the records and removes the ready or failed
    /// stores unread for `stores.unread_expiry_seconds` at `now` (never, when it is 0); returns
    /// how many were removed. A removed store whose directory or tier state is still there has
    /// its deletion queued again. Blocking.
    ///
    /// # Errors
    /// A read or write error; stores already handled stay handled.
    pub fn sweep(&self, now: i64) -> Result<usize> {
        let reads = std::mem::take(&mut *self.reads.0.lock());
        let expiry = i64::try_from(self.config.unread_expiry_seconds).unwrap_or(i64::MAX);
        let mut removed = 0;
        for listed in self.list_bare()? {
            // Gone, and its data or tier state still there (its deletion failed, say): deleted
            // again. Looked at before the lock every request takes (the hot tier may be slow
            // to answer).
            let left = listed.status == Status::Gone && self.data_left(listed.token);
            // Read again, with the record to itself: it may have changed since the list.
            let _record = self.records.lock();
            let Some(mut record) = self.record_bare(listed.token)? else {
                continue;
            };
            let mut batch = Batch::default();
            if let Some(&read) = reads.get(&record.token)
                && read > record.last_read
            {
                record.last_read = read;
                batch.put(
                    cf::STORES,
                    record.token.as_bytes().to_vec(),
                    record.encode(),
                );
            }
            if left
                && record.status == Status::Gone
                && self
                    .queue
                    .find(super::CONVERT, &record.token.to_string())
                    .is_none()
            {
                tracing::info!(token = %record.token, "deleting a removed store's data again");
                self.queue_deletion(&record)?;
            }
            let last = record.last_read.max(record.updated);
            // An archived store expires as a ready one does: its cold objects go with it.
            let idle = record.is_complete() || record.status == Status::Failed;
            if expiry > 0 && idle && now.saturating_sub(last) > expiry {
                let days = expiry / 86_400;
                let reason = format!("removed: not read for {days} days");
                self.mark_gone(&mut record, &reason, now, batch)?;
                removed += 1;
            } else if !batch.is_empty() {
                self.db.write(batch)?;
            }
        }
        Ok(removed)
    }
}
