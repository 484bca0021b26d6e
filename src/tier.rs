//! `svcd tier archive|restore|status|repair`: the cold tier, for operators. Against a running
//! daemon the work runs in it (through the control socket, so readers of the stores see one
//! tier state); otherwise the store is opened here, as `svcd store` does.

use std::process::ExitCode;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use svc_daemon::{ArchiveOptions, ArchiveRow, Config, Daemon, InstanceRow};

use crate::cli::TierCommand;
use crate::control::{Client, Reply, Request};

pub(crate) fn run(config: &Config, command: &TierCommand) -> anyhow::Result<ExitCode> {
    match command {
        TierCommand::Archive {
            older_than,
            scope,
            dry_run,
        } => {
            let options = ArchiveOptions {
                older_than: *older_than,
                scope: *scope,
                dry_run: *dry_run,
            };
            let rows = moved(
                config,
                &Request::TierArchive(options.clone()),
                |daemon, p| daemon.stores().archive(&options, p),
            )?;
            report(&rows)
        }
        TierCommand::Restore { scope, dry_run } => {
            let request = Request::TierRestore {
                scope: *scope,
                dry_run: *dry_run,
            };
            let rows = moved(config, &request, |daemon, p| {
                daemon.stores().restore_archived(*scope, *dry_run, p)
            })?;
            report(&rows)
        }
        TierCommand::Status { scope, json } => {
            let rows = match Client::connect(&config.control_socket()) {
                Some(mut client) => {
                    client.send(&Request::TierStatus { scope: *scope })?;
                    match client.finish(|_| {})? {
                        Reply::TierStatus { rows } => rows,
                        Reply::Error { detail } => bail!("{detail}"),
                        other => bail!("unexpected reply from the daemon: {other:?}"),
                    }
                }
                None => Daemon::open(config.clone())?.stores().tier_status(*scope)?,
            };
            if *json {
                for row in &rows {
                    println!("{}", serde_json::to_string(row)?);
                }
            } else {
                print!("{}", status_table(&rows));
            }
            Ok(ExitCode::SUCCESS)
        }
        TierCommand::Repair => {
            if Client::connect(&config.control_socket()).is_some() {
                bail!(
                    "a daemon serves {}: stop it first (the repair changes tier state that it reads)",
                    config.data_dir.display()
                );
            }
            let cleaned = Daemon::open(config.clone())?
                .stores()
                .clean_cold_of_every_store()?;
            if cleaned {
                println!("cleaned the cold tier of every store; the log says what was done");
                Ok(ExitCode::SUCCESS)
            } else {
                println!(
                    "the cold tier of some stores could not be cleaned (the log says why); a serving daemon tries them again every tier.cleaning_interval_seconds, or run this again"
                );
                Ok(ExitCode::from(1))
            }
        }
    }
}

/// Runs an archive or restore in the running daemon, or here on the store opened offline,
/// with a progress bar over the blob instances.
fn moved(
    config: &Config,
    request: &Request,
    offline: impl FnOnce(&Daemon, svc_daemon::TierProgress<'_>) -> svc_daemon::Result<Vec<ArchiveRow>>,
) -> anyhow::Result<Vec<ArchiveRow>> {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{msg:8} {bar:30} {pos}/{len} blobs [{elapsed_precise}]")
            .expect("template is valid"),
    );
    let verb = match request {
        Request::TierArchive(_) => "archive",
        _ => "restore",
    };
    bar.set_message(verb);
    let step = |row: &ArchiveRow, total: usize| {
        bar.set_length(total as u64);
        bar.inc(1);
        if row.outcome.starts_with("failed") {
            bar.println(format!("{} {}: {}", row.scope, row.instance, row.outcome));
        }
        true
    };
    let rows = match Client::connect(&config.control_socket()) {
        Some(mut client) => {
            client.send(request)?;
            match client.finish_rows(|row, total| {
                step(row, total);
            })? {
                Reply::TierDone { rows } => rows,
                Reply::Error { detail } => bail!("{detail}"),
                other => bail!("unexpected reply from the daemon: {other:?}"),
            }
        }
        None => {
            let daemon = Daemon::open(config.clone())?;
            offline(&daemon, &step)?
        }
    };
    bar.finish_and_clear();
    Ok(rows)
}

/// Prints one line per instance and a total; exit 1 when any failed.
fn report(rows: &[ArchiveRow]) -> anyhow::Result<ExitCode> {
    for row in rows {
        println!(
            "{}  {:<24} {:>7} keys {:>10}  {}",
            row.scope,
            row.instance,
            row.objects,
            svc_manifests::text::human(row.bytes as f64),
            row.outcome
        );
    }
    let failed = rows
        .iter()
        .filter(|r| r.outcome.starts_with("failed"))
        .count();
    let bytes: u64 = rows.iter().map(|r| r.bytes).sum();
    println!(
        "{} blobs, {}; {failed} failed",
        rows.len(),
        svc_manifests::text::human(bytes as f64)
    );
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The status table: a header and one line per instance.
fn status_table(rows: &[InstanceRow]) -> String {
    let mut out = format!(
        "{:<36}  {:<24} {:<9} {:>7} {:>10} {:>8}  {}\n",
        "STORE", "BLOB", "STATE", "KEYS", "BYTES", "RESTORES", "LAST READ"
    );
    for row in rows {
        let last_read = match row.state.last_read {
            0 => "-".to_string(),
            t => chrono::DateTime::from_timestamp(t, 0).map_or_else(
                || t.to_string(),
                |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            ),
        };
        out.push_str(&format!(
            "{:<36}  {:<24} {:<9} {:>7} {:>10} {:>8}  {}\n",
            row.scope,
            row.instance,
            row.state.state.as_str(),
            row.state.objects,
            svc_manifests::text::human(row.state.bytes as f64),
            row.state.restores,
            last_read
        ));
    }
    out
}
