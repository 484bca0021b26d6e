//! `svcd store list|show|rm`: the Zarr stores, for operators. Against a running daemon the
//! requests go through the control socket (its store is locked while it runs); otherwise the
//! store is opened here.

use std::process::ExitCode;

use anyhow::bail;
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let removed = daemon
        .stores()
        .remove(token, "removed by an operator", now)?;
    Ok(vec![removed.summary()])
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
