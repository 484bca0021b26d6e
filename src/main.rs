//! `svcd`: parses arguments, loads the configuration, and runs one subcommand.

mod cli;
mod control;
mod demo;
mod index;
mod manifest;
mod serve;
mod store;
mod tier;
mod token;

use clap::Parser;
use svc_daemon::{Config, Overrides};

use cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    // SAFETY: the first thing the process does, before any thread or HDF5 call.
    #[allow(unsafe_code)]
    unsafe {
        svc_daemon::read_without_file_locks();
    }
    let cli = Cli::parse();
    // On standard error: the daemon's log, and its children's, whose standard error it is.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,svcd=info,svc_daemon=info,svc_http=info,svc_fs=info".into()
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    // The processes that read sources for the daemon: no configuration (the daemon reads
    // what they say).
    let child = match cli.command {
        Command::ProbeSources => Some((
            svc_daemon::PROBE_SUBCOMMAND,
            svc_daemon::serve_probes as fn() -> std::io::Result<()>,
        )),
        Command::ConvertChild => Some((
            svc_daemon::CHILD_SUBCOMMAND,
            svc_daemon::serve_child as fn() -> std::io::Result<()>,
        )),
        _ => None,
    };
    if let Some((name, serve)) = child {
        return match serve() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("svcd {name}: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    svc_daemon::read_sources_apart();
    let listen = match &cli.command {
        Command::Serve { listen, .. } => *listen,
        _ => None,
    };
    let overrides = Overrides {
        data_dir: cli.data_dir.clone(),
        listen,
    };
    let result = Config::load(cli.config.as_deref(), &overrides)
        .map_err(anyhow::Error::from)
        .inspect(|config| {
            for name in &config.ignored_env {
                tracing::warn!("environment variable {name} names no configuration key; ignored");
            }
        })
        .and_then(|config| match cli.command {
            Command::Serve { mount, .. } => serve::run(config, mount.clone()),
            Command::Index(command) => index::run(&config, command),
            Command::Token(command) => token::run(&config, command),
            Command::Store(command) => store::run(&config, &command),
            Command::Tier(command) => tier::run(&config, &command),
            Command::DemoData { dir } => demo::run(&dir),
            Command::Manifest(args) => manifest::run(args),
            Command::ProbeSources | Command::ConvertChild => {
                unreachable!("served before the configuration is read")
            }
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("svcd: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
