//! The store job: what a worker of the [queue](crate::jobs) does with a store, by what its
//! record says when the job runs. A store being prepared is converted: its directory under
//! `<data_dir>/stores/<token>` is written from scratch (a job that runs again after a crash
//! or a `reload` starts over, so it is idempotent) and the outcome recorded: ready, or failed
//! with the reason, its partial data removed. A gone store's data is deleted (a removal and
//! the sweep queue this job rather than delete beside a conversion; see
//! [`Stores::mark_gone`]). Anything else is left as it is.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Status, Stores};
use crate::convert;
use crate::convert::write::{Reserve, Written};
use crate::db::Batch;
use crate::error::Result;
use crate::jobs::{Handler, Job, Outcome, Stop};

/// Converts stores.
pub(crate) struct ConvertJob {
    pub(crate) stores: Arc<Stores>,
}

impl ConvertJob {
    fn token(job: &Job) -> Option<Uuid> {
        Uuid::parse_str(&job.subject).ok()
    }
}

/// The current time in Unix seconds.
pub(crate) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Handler for ConvertJob {
    fn run(&self, job: &Job, stop: &Stop) -> Result<Outcome> {
        let Some(token) = Self::token(job) else {
            tracing::warn!(subject = %job.subject, "a conversion job names no store token");
            return Ok(Outcome::Done(Batch::default()));
        };
        let Some(record) = self.stores.record(token)? else {
            return Ok(Outcome::Done(Batch::default()));
        };
        if record.status != Status::Preparing {
            // Removed, or expired: this job is the one that deletes its data.
            if record.status == Status::Gone {
                let deleted = self.stores.delete_data(token);
                // Its files are gone once its directory is, or is empty (as when the copy
                // of its manifest in the mirror could not be removed: the job runs again
                // for that).
                let dir = self.stores.dir(token);
                if std::fs::read_dir(&dir).map_or(true, |mut entries| entries.next().is_none()) {
                    self.stores
                        .record_files_removed(token, |r| r.status == Status::Gone)?;
                }
                deleted?;
            }
            return Ok(Outcome::Done(Batch::default()));
        }
        let dir = self.stores.dir(token);
        // What readers keep of the earlier conversion goes with its files, and so do its
        // listing, manifest and archived blobs.
        if !self.stores.tier.forget_store(token, stop)? {
            return Ok(Outcome::Interrupted);
        }
        self.stores.cache.forget(token);
        remove_dir(&dir);
        self.stores.record_files_removed(token, |_| true)?;
        tracing::info!(%token, sources = ?record.sources, "converting");
        // Sources changed after this are not in this run's result.
        let started = std::time::SystemTime::now();
        let compressor = self.stores.config.compressor;
        // What it writes counts as being written until its store's record counts the files
        // (or, when the conversion stops short, until it is dropped).
        let allowance = self.stores.allowance(&record);
        let reserve = Reserve {
            allowance: allowance
                .clone()
                .map(|allowance| allowance as Arc<dyn convert::write::Take>),
            ..Reserve::of(
                self.stores.config.hot_reserve_mib,
                dir.parent().unwrap_or(&dir),
            )
        };
        // A conversion's work follows from what its sources claim, not from their size (a
        // sparse file of a few KiB can claim terabytes of fill values): bounded in time,
        // so that no conversion holds a worker, and the users waiting behind it, for days.
        let most = self.stores.config.max_conversion_seconds;
        let stop = &match std::time::Instant::now().checked_add(Duration::from_secs(most)) {
            Some(deadline) if most > 0 => stop.until(deadline),
            _ => stop.clone(),
        };
        let converted = self.stores.open_sources(&record).and_then(|sources| {
            convert::child::convert(
                &sources,
                &record.owner,
                record.aggregation.as_ref(),
                record.reduction.as_ref(),
                &dir,
                &record.chunking,
                compressor,
                reserve,
                self.stores.config.conversion_memory(),
                stop,
            )
        });
        let (mut status, mut reason) = match converted {
            // A conversion that gave up because the daemon is stopping runs again next time.
            Ok(Written::Interrupted) | Err(_) if stop.stopping() => {
                return Ok(Outcome::Interrupted);
            }
            Ok(Written::Complete) => (Status::Ready, String::new()),
            // Its time was up.
            Ok(Written::Interrupted) | Err(_) if stop.expired() => {
                self.stores.cache.forget(token);
                remove_dir(&dir);
                let reason = format!(
                    "the conversion took longer than {most} s (stores.max_conversion_seconds) \
                     and was stopped; fewer sources, or fewer, larger chunks \
                     (map_primary_chunksize, chunk_size), convert faster"
                );
                (Status::Failed, reason)
            }
            Ok(Written::Interrupted) => return Ok(Outcome::Interrupted),
            Err(reason) => {
                self.stores.cache.forget(token);
                remove_dir(&dir);
                (Status::Failed, reason)
            }
        };
        let (mut keys, mut bytes) = (Vec::new(), 0);
        if status == Status::Ready {
            keys = self.stores.listing(&record)?;
            bytes =
                convert::write::store_on_disk(keys.iter().map(|(key, size)| (key.as_str(), *size)));
            // Its process takes each file from the allowance before it writes it; one that
            // did not (a hostile file may have made the libraries run code of its choosing)
            // wrote what its owner may not have. Counted from the directory, not the
            // listing, which leaves out what no reader asks for.
            let wrong = allowance
                .as_ref()
                .and_then(|allowance| match convert::write::dir_on_disk(&dir) {
                    Ok(on_disk) if on_disk > allowance.taken() => Some(format!(
                        "the conversion's process wrote {on_disk} bytes but took {} from the \
                         owner's allowance: it did not convert as the daemon does",
                        allowance.taken()
                    )),
                    Ok(_) => None,
                    Err(e) => Some(format!("the converted store cannot be counted: {e}")),
                });
            if let Some(wrong) = wrong {
                self.stores.cache.forget(token);
                remove_dir(&dir);
                (status, reason) = (Status::Failed, wrong);
                (keys, bytes) = (Vec::new(), 0);
            }
        }
        // Quoted: a reason may name a user's file, whose name may hold a line break.
        tracing::info!(%token, status = u8::from(status), ?reason, "conversion finished");
        if status == Status::Ready {
            // The listing and the manifest are written before the record that says ready, so
            // a ready store always has them; not with it, as that write holds the lock every
            // request takes, and a listing of a million keys takes a while. Until then nothing
            // reads them (only a complete store's are read); a store reloaded or removed
            // meanwhile has a job that follows, whose first step forgets them.
            let mut batch = Batch::default();
            crate::tier::Tier::put_listing(&mut batch, token, &keys);
            self.stores.tier.put_manifest(&mut batch, token);
            self.stores.db.write(batch)?;
        }
        // Written here, under the lock of the store's record, not with the job's removal: a
        // crash between the two runs the job again, and it finds the store no longer
        // preparing and does nothing. Only while the store still prepares this conversion (or
        // a reload of the same unchanged sources and options): reloaded or removed otherwise,
        // and the job that follows converts again or deletes what this one wrote.
        let recorded = self.stores.record_conversion_outcome(
            &record,
            started,
            (status, &reason),
            bytes,
            now(),
            Batch::default(),
        )?;
        // Not recorded (reloaded or removed meanwhile): what it wrote stays until the job
        // that follows removes it, and the record counts it until then.
        let change = match recorded {
            Some(change) => change,
            None => self.stores.record_bytes(token, bytes, |_| true)?.1,
        };
        match &allowance {
            Some(allowance) => allowance.settle(change),
            None => self.stores.count(&record.owner, change),
        }
        let recorded = recorded.is_some();
        if !recorded {
            tracing::info!(%token, "the store was reloaded or removed during its conversion");
        }
        Ok(Outcome::Done(Batch::default()))
    }

    fn give_up(&self, job: &Job, reason: &str) -> Batch {
        let Some(token) = Self::token(job) else {
            return Batch::default();
        };
        // Only while no reload asked for during this run has its own job waiting (that one
        // converts), checked under the records lock a request holds while it queues one.
        let failed = self
            .stores
            .record_conversion_failed(token, job.seq, reason, now());
        match failed {
            Ok(true) => {
                self.stores.cache.forget(token);
                remove_dir(&self.stores.dir(token));
            }
            // Reloaded or removed meanwhile: the job that follows converts or deletes.
            Ok(false) => {}
            Err(e) => tracing::warn!(%token, error = %e, "cannot record a conversion given up"),
        }
        Batch::default()
    }
}

/// Removes a store directory that may not exist.
fn remove_dir(dir: &std::path::Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a store directory")
        }
    }
}
