//! `svcd serve`: open the store, listen, notify systemd, and shut down in reverse order.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use svc_daemon::{Config, Daemon};

use crate::control;
use tokio::net::TcpListener;

pub(crate) fn run(config: Config, mount: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(config, mount))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(config: Config, mount: Option<PathBuf>) -> anyhow::Result<()> {
    // `--mount` overrides the configuration's `mount.dir`.
    let mount =
        mount.or_else(|| (!config.mount.dir.is_empty()).then(|| config.mount.dir.clone().into()));
    let listener = TcpListener::bind(config.http.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.http.listen))?;
    let bound = listener.local_addr()?;
    let opening = config.clone();
    let daemon = tokio::task::spawn_blocking(move || Daemon::open(opening))
        .await?
        .with_context(|| format!("cannot open the store in {}", config.store_dir().display()))?;
    let daemon = Arc::new(daemon);
    daemon.auth().start().await;
    let stats = daemon.run(|d| Ok(d.catalog().stats())).await?;
    daemon.start_jobs()?;
    // The mount lives until the session is dropped below, which unmounts it.
    let mounted = match &mount {
        Some(dir) => Some(
            svc_fs::mount(Arc::clone(&daemon), dir)
                .with_context(|| format!("cannot mount the stores at {}", dir.display()))?,
        ),
        None => None,
    };
    if let Some(dir) = &mount {
        tracing::info!(dir = %dir.display(), "stores mounted");
    }
    let socket = config.control_socket();
    let control = tokio::spawn({
        let daemon = Arc::clone(&daemon);
        let socket = socket.clone();
        async move { control::serve(daemon, &socket).await }
    });
    let base = config.public_base(bound);
    let app = svc_http::router(&daemon, &base);
    std::fs::write(config.address_file(), format!("{bound}\n"))
        .context("cannot write the address file")?;
    tracing::info!(address = %bound, records = stats.records, "listening on {base}/api/svc-nextgen");
    svc_daemon::start_conversion_processes();
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    let stopping = Arc::clone(&daemon);
    let (signalled, signal) = tokio::sync::oneshot::channel();
    let shutdown = async move {
        shutdown_signal().await;
        // Before the server drains its requests: readers waiting are answered now.
        stopping.begin_stop();
        let _ = signalled.send(());
    };
    let serving = svc_http::serve(listener, app, shutdown);
    tokio::pin!(serving);
    let drained = async {
        if signal.await.is_ok() {
            tokio::time::sleep(DRAIN).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = &mut serving => served?,
        () = drained => tracing::warn!(
            "requests still open {} s after the stop began are cut short",
            DRAIN.as_secs()
        ),
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    control.abort();
    if let Some(session) = mounted
        && let Err(e) = session.umount_and_join()
    {
        // Busy (a shell inside it): detached, so the next start mounts there again.
        tracing::warn!(error = %e, "the stores' mount was busy; detaching it");
        if let Some(dir) = &mount
            && let Err(e) = svc_fs::detach(dir)
        {
            tracing::warn!(error = %e, "the stores' mount could not be detached");
        }
    }
    daemon
        .run(|d| {
            d.stop_jobs();
            Ok(())
        })
        .await?;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(config.address_file());
    tracing::info!("stopped");
    Ok(())
}

/// How long the server's open requests may take to finish once a stop began: a client that
/// sends or reads nothing, or reads slowly, would otherwise hold the stop past systemd's
/// `TimeoutStopSec`; a download still under way then is cut short (the client asks again).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = interrupt => {},
        _ = terminate.recv() => {},
    }
    tracing::info!("shutting down");
}
