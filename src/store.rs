//! `svcd store list|show|rm`: the Zarr stores, for operators. Against a running daemon the
//! requests go through the control socket (its store is locked while it runs); otherwise the
//! store is opened here.

use std::process::ExitCode;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use svc_daemon::{Config, Daemon, Result};
use uuid::Uuid;

use crate::cli::StoreCommand;
use crate::control::{Client, Reply, Request};

/// Every store as `StoreRecord::summary` gives it.
///
/// # Errors
/// A read error.
pub(crate) fn summaries(daemon: &Daemon) -> Result<Vec<Value>> {
    Ok(daemon
        .stores()
        .list()?
        .iter()
        .map(svc_daemon::StoreRecord::summary)
        .collect())
}

/// Removes a store; the summary of what it became.
///
/// # Errors
/// An unknown store, or a read or write error.
pub(crate) fn remove(daemon: &Daemon, token: &str) -> Result<Vec<Value>> {
    let token = Uuid::parse_str(token).map_err(|e| {
        svc_daemon::Error::invalid(
            "token",
            svc_daemon::Fault::Syntax,
            format!("{token:?}: {e}"),
        )
    })?;
    let removed = daemon.remove_store(token, "removed by an operator", now())?;
    Ok(vec![removed.summary()])
}

/// Creates or reuses the stores of `paths` for `user`; their summaries.
///
/// # Errors
/// An option or path refused, a file the user may not read, or a store error.
pub(crate) fn convert(daemon: &Daemon, paths: &[String], user: &str) -> Result<Vec<Value>> {
    let pairs: Vec<(String, String)> = paths
        .iter()
        .map(|p| ("path".to_string(), p.clone()))
        .collect();
    let request =
        svc_daemon::ConvertRequest::from_pairs(&pairs, daemon.config().stores.max_ttl_seconds)?;
    let caller = svc_daemon::Caller {
        user: user.to_string(),
        admin: false,
    };
    Ok(daemon
        .stores()
        .request(&caller, &request, now())?
        .iter()
        .map(svc_daemon::StoreRecord::summary)
        .collect())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Converts `paths` for the login user: through the running daemon (waiting on its
/// progress), or here with the daemon's workers; prints one URL per store.
fn convert_and_wait(config: &Config, paths: &[String]) -> anyhow::Result<()> {
    let user = svc_daemon::login_name();
    let progress = ProgressBar::new(paths.len() as u64).with_style(
        ProgressStyle::with_template("converting {bar:30} {pos}/{len} [{elapsed_precise}]")
            .expect("template is valid"),
    );
    let (tokens, base, statuses) =
        if let Some(mut client) = Client::connect(&config.control_socket()) {
            client.send(&Request::StoreConvert {
                paths: paths.to_vec(),
                user: user.clone(),
            })?;
            let stores = match client.finish(|_| {})? {
                Reply::Stores { stores } => stores,
                Reply::Error { detail } => bail!("{detail}"),
                other => bail!("unexpected reply from the daemon: {other:?}"),
            };
            let tokens: Vec<String> = stores
                .iter()
                .map(|s| s["token"].as_str().unwrap_or_default().to_string())
                .collect();
            let base = std::fs::read_to_string(config.address_file())
                .ok()
                .and_then(|a| a.trim().parse().ok())
                .map_or_else(
                    || config.public_base(config.http.listen),
                    |a| config.public_base(a),
                );
            let statuses = loop {
                let listed = ask(config, &Request::StoreList, summaries)?;
                let mine: Vec<&Value> = listed
                    .iter()
                    .filter(|s| tokens.iter().any(|t| s["token"] == t.as_str()))
                    .collect();
                let done = mine.iter().filter(|s| s["status"] != 2).count();
                progress.set_position(done as u64);
                if done == tokens.len() {
                    break mine.into_iter().cloned().collect::<Vec<_>>();
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            };
            (tokens, base, statuses)
        } else {
            let daemon = Daemon::open(config.clone())?;
            let stores = convert(&daemon, paths, &user)?;
            daemon.start_jobs()?;
            daemon.wait_for_jobs();
            daemon.stop_jobs();
            let tokens: Vec<String> = stores
                .iter()
                .map(|s| s["token"].as_str().unwrap_or_default().to_string())
                .collect();
            let statuses: Vec<Value> = summaries(&daemon)?
                .into_iter()
                .filter(|s| tokens.iter().any(|t| s["token"] == t.as_str()))
                .collect();
            progress.set_position(paths.len() as u64);
            (tokens, config.public_base(config.http.listen), statuses)
        };
    progress.finish_and_clear();
    let mut failed = 0;
    for token in &tokens {
        let status = statuses.iter().find(|s| s["token"] == token.as_str());
        match status.map(|s| {
            (
                s["status"].as_u64(),
                s["reason"].as_str().unwrap_or_default(),
            )
        }) {
            Some((Some(0), _)) => println!(
                "{base}{}/data-portal/zarr/{token}.zarr",
                svc_daemon::API_PREFIX
            ),
            Some((_, reason)) => {
                failed += 1;
                eprintln!("{token}: {reason}");
            }
            None => {
                failed += 1;
                eprintln!("{token}: removed");
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} conversions failed", tokens.len());
    }
    Ok(())
}

/// Sends `request` to the running daemon, or does `offline` on the store opened here.
fn ask(
    config: &Config,
    request: &Request,
    offline: impl FnOnce(&Daemon) -> Result<Vec<Value>>,
) -> anyhow::Result<Vec<Value>> {
    match Client::connect(&config.control_socket()) {
        Some(mut client) => {
            client.send(request)?;
            match client.finish(|_| {})? {
                Reply::Stores { stores } => Ok(stores),
                Reply::Error { detail } => bail!("{detail}"),
                other => bail!("unexpected reply from the daemon: {other:?}"),
            }
        }
        None => {
            let daemon = Daemon::open(config.clone())?;
            Ok(offline(&daemon)?)
        }
    }
}

pub(crate) fn run(config: &Config, command: &StoreCommand) -> anyhow::Result<ExitCode> {
    match command {
        StoreCommand::List => {
            for store in ask(config, &Request::StoreList, summaries)? {
                let first = store["sources"][0].as_str().unwrap_or_default();
                println!(
                    "{}  {}  {}  {first}",
                    store["token"].as_str().unwrap_or_default(),
                    status_name(&store["status"]),
                    store["owner"].as_str().unwrap_or_default(),
                );
            }
        }
        StoreCommand::Show { token } => {
            let stores = ask(config, &Request::StoreList, summaries)?;
            let wanted = token.to_string();
            let Some(store) = stores.iter().find(|s| s["token"] == wanted.as_str()) else {
                bail!("no Zarr store {token}");
            };
            println!("{}", serde_json::to_string_pretty(store)?);
        }
        StoreCommand::Convert { paths } => convert_and_wait(config, paths)?,
        StoreCommand::Rm { token } => {
            let token = token.to_string();
            let request = Request::StoreRemove {
                token: token.clone(),
            };
            let removed = ask(config, &request, |d| remove(d, &token))?;
            for store in removed {
                println!("removed {}", store["token"].as_str().unwrap_or_default());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A status code with its meaning (DECISIONS).
fn status_name(code: &Value) -> &'static str {
    match code.as_u64() {
        Some(0) => "ready",
        Some(1) => "failed",
        Some(2) => "preparing",
        Some(3) => "archived",
        Some(4) => "gone",
        _ => "unknown",
    }
}
