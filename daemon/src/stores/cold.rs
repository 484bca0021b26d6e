//! The stores' side of the cold tier: which stores may be archived, and the operator's
//! `svcd tier archive|restore|status` over them (the work itself is [`crate::tier`]'s).

use uuid::Uuid;

use super::Stores;
use crate::error::Result;
use crate::tier::{ArchiveOptions, ArchiveRow, Candidate, InstanceRow, Listed, ListedPage};

/// What an archive or restore run reports as it goes: the instance done and how many there
/// are; it answers whether the run goes on (`false`: whoever asked for it is gone, and it
/// stops before the next instance).
pub type Progress<'a> = &'a (dyn Fn(&ArchiveRow, usize) -> bool + Sync);

impl Stores {
    /// The ready stores (the only ones whose blobs may be archived), as candidates.
    fn candidates(&self, scope: Option<Uuid>) -> Result<Vec<Candidate>> {
        Ok(self
            .list_bare()?
            .into_iter()
            .filter(|record| record.is_complete() && scope.is_none_or(|s| s == record.token))
            .map(|record| Candidate {
                token: record.token,
                conversion: record.conversion,
                // Reads since the last sweep count too.
                last_used: record
                    .last_read
                    .max(record.updated)
                    .max(self.reads.latest(record.token).unwrap_or(0)),
            })
            .collect())
    }

    /// Archives the hot blob instances `options` selects (see [`crate::tier`]), one after
    /// another, store by store (so only one store's plan is held at a time), reporting each
    /// to `progress` with the instances planned so far. Blocking.
    ///
    /// # Errors
    /// A read error listing the stores. An instance that fails is reported in its row and
    /// the others go on.
    pub fn archive(
        &self,
        options: &ArchiveOptions,
        progress: Progress<'_>,
    ) -> Result<Vec<ArchiveRow>> {
        let still_ready = |token: Uuid, conversion: u64| {
            matches!(self.record(token), Ok(Some(record))
                if record.is_complete_conversion(conversion))
        };
        let mut rows = Vec::new();
        let mut total = 0;
        for candidate in self.candidates(options.scope)? {
            let planned = self.tier.archivable(candidate, options)?;
            total += planned.len();
            for (instance, keys) in planned {
                let mut row = ArchiveRow {
                    scope: candidate.token.to_string(),
                    instance: instance.clone(),
                    objects: keys.len() as u64,
                    bytes: keys.iter().map(|(_, size)| size).sum(),
                    outcome: "would archive".into(),
                };
                if !options.dry_run {
                    let archived =
                        self.tier
                            .archive_instance(candidate, &instance, &keys, &still_ready);
                    row.outcome = match archived {
                        Ok(true) => {
                            // Mapped chunks would keep the deleted hot copies' pages alive.
                            self.cache.forget(candidate.token);
                            "archived".into()
                        }
                        Ok(false) => "skipped: the store changed or the blob is not hot".into(),
                        Err(e) => format!("failed: {e}"),
                    };
                }
                let going_on = progress(&row, total);
                rows.push(row);
                if !going_on {
                    tracing::warn!(
                        blobs = rows.len(),
                        "an archive run stopped: whoever asked for it is gone"
                    );
                    return Ok(rows);
                }
            }
        }
        Ok(rows)
    }

    /// Restores every archived blob instance (of the store `scope`, or of all), reporting
    /// each to `progress`. Blocking.
    ///
    /// # Errors
    /// A read error. An instance that fails is reported in its row and the others go on.
    pub fn restore_archived(
        &self,
        scope: Option<Uuid>,
        dry_run: bool,
        progress: Progress<'_>,
    ) -> Result<Vec<ArchiveRow>> {
        let tokens: Vec<Uuid> = self
            .candidates(scope)?
            .iter()
            .map(|candidate| candidate.token)
            .collect();
        let archived: Vec<InstanceRow> = self.tier.archived_instances(&tokens)?;
        let total = archived.len();
        let mut rows = Vec::with_capacity(total);
        for instance in archived {
            let token = Uuid::parse_str(&instance.scope).expect("scopes are tokens");
            let mut row = ArchiveRow {
                scope: instance.scope.clone(),
                instance: instance.instance.clone(),
                objects: instance.state.objects,
                bytes: instance.state.bytes,
                outcome: "would restore".into(),
            };
            if !dry_run {
                row.outcome = match self.tier.restore_instance(token, &instance.instance, None) {
                    Ok(_) => "restored".into(),
                    Err(e) => format!("failed: {e}"),
                };
            }
            let going_on = progress(&row, total);
            rows.push(row);
            if !going_on {
                tracing::warn!(
                    blobs = rows.len(),
                    "a restore run stopped: whoever asked for it is gone"
                );
                break;
            }
        }
        Ok(rows)
    }

    /// The blob instances of the complete stores (of `scope`, or all) with their tier state.
    ///
    /// # Errors
    /// A read error or a corrupt record.
    pub fn tier_status(&self, scope: Option<Uuid>) -> Result<Vec<InstanceRow>> {
        let tokens: Vec<Uuid> = self
            .candidates(scope)?
            .iter()
            .map(|candidate| candidate.token)
            .collect();
        self.tier.status(&tokens)
    }

    /// Cleans the cold tier of every store the database records, as the startup repair
    /// cleans those marked for it (see [`crate::tier`]): after the database was restored
    /// from a backup. Offline only (no daemon may serve the database meanwhile). Whether
    /// every store was cleaned (else the log says why; what is left stays marked, for the
    /// next start and a serving daemon's cleanings). Blocking.
    ///
    /// # Errors
    /// A read or write error of the database.
    pub fn clean_cold_of_every_store(&self) -> Result<bool> {
        let (known, ready) = self.known_and_ready()?;
        self.tier.clean_every_store(&known, &ready)
    }

    /// Cleans the cold tier of the stores marked for it while the daemon serves, as the
    /// startup repair does (see [`crate::tier::Tier::clean_marked`]), until `stop` is
    /// requested (checked before each store, deletion and adoption). Whether every marked
    /// store was settled (else the log says why; the rest is tried at the next cleaning).
    /// Blocking.
    ///
    /// # Errors
    /// A read or write error of the database.
    pub fn clean_cold_marked(&self, stop: &crate::jobs::Stop) -> Result<bool> {
        self.tier.clean_marked(
            &|token| {
                Ok(self
                    .record(token)?
                    .is_some_and(|record| record.is_complete()))
            },
            &|| stop.requested(),
        )
    }

    /// The entry `name` of directory `dir` of the key listing of a complete store, as the
    /// mount shows it (see [`crate::tier::Tier::listed_entry`]; `None` for any store not
    /// complete).
    ///
    /// # Errors
    /// A read error.
    pub fn listed_entry(&self, token: Uuid, dir: &str, name: &str) -> Result<Option<Listed>> {
        match self.shared_record(token)? {
            Some(record) if record.is_complete() => self.tier.listed_entry(token, dir, name),
            _ => Ok(None),
        }
    }

    /// A page of the entries of directory `dir` of the key listing of a complete store, from
    /// position `from`, and the position after it (see
    /// [`crate::tier::Tier::listed_entries`]; nothing for any store not complete).
    ///
    /// # Errors
    /// A read error.
    pub fn listed_entries(
        &self,
        token: Uuid,
        dir: &str,
        from: &str,
        most: usize,
    ) -> Result<ListedPage> {
        match self.shared_record(token)? {
            Some(record) if record.is_complete() => {
                self.tier.listed_entries(token, dir, from, most)
            }
            _ => Ok(ListedPage::default()),
        }
    }
}
