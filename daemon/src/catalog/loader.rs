//! Loading JSON Lines: each line is parsed on its own, a bad line is rejected whole with its
//! line number, good lines are committed in batches, so a record is never half-indexed.

use serde::{Deserialize, Serialize};

use crate::error::Result;

use super::{Record, WriteCounts};

/// Records committed per batch.
pub const LOAD_BATCH: usize = 10_000;

/// Rejections kept in a summary; more are only counted.
const KEEP_REJECTIONS: usize = 1_000;

/// A rejected input line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    /// 1-based line number.
    pub line: u64,
    /// Why the line was rejected.
    pub reason: String,
}

/// What a load did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// Records whose file was new.
    pub added: u64,
    /// Records that replaced an indexed record of the same file.
    pub replaced: u64,
    /// Number of rejected lines.
    pub rejected: u64,
    /// The first rejected lines, with reasons.
    pub rejections: Vec<Rejection>,
}

/// Feeds lines into a sink that commits batches of records.
pub struct Loader<F> {
    sink: F,
    batch: Vec<Record>,
    line: u64,
    summary: LoadSummary,
}

impl<F: FnMut(&[Record]) -> Result<WriteCounts>> Loader<F> {
    /// A loader committing through `sink`.
    pub fn new(sink: F) -> Self {
        Loader {
            sink,
            batch: Vec::with_capacity(LOAD_BATCH),
            line: 0,
            summary: LoadSummary::default(),
        }
    }

    /// Takes the next input line; commits a batch when it is full.
    ///
    /// # Errors
    /// A store error from the sink (the line itself never errors: it is rejected).
    pub fn push_line(&mut self, line: &str) -> Result<()> {
        self.line += 1;
        if line.trim().is_empty() {
            return Ok(());
        }
        match Record::from_json_line(line) {
            Ok(record) => self.push(record),
            Err(reason) => {
                self.reject(reason);
                Ok(())
            }
        }
    }

    /// Takes a record that was built elsewhere (e.g. by the crawler).
    ///
    /// # Errors
    /// A store error from the sink.
    pub fn push(&mut self, record: Record) -> Result<()> {
        self.batch.push(record);
        if self.batch.len() >= LOAD_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Records a rejection for the current line.
    pub fn reject(&mut self, reason: String) {
        self.summary.rejected += 1;
        if self.summary.rejections.len() < KEEP_REJECTIONS {
            self.summary.rejections.push(Rejection {
                line: self.line,
                reason,
            });
        }
    }

    /// Lines seen so far.
    pub fn lines(&self) -> u64 {
        self.line
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let counts = (self.sink)(&self.batch)?;
        self.batch.clear();
        self.summary.added += counts.added;
        self.summary.replaced += counts.replaced;
        Ok(())
    }

    /// Commits the last batch and returns the summary.
    ///
    /// # Errors
    /// A store error from the sink.
    pub fn finish(mut self) -> Result<LoadSummary> {
        self.flush()?;
        Ok(self.summary)
    }
}
