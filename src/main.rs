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
    svc_daemon::probe_sources_first();
    let cli = Cli::parse();
    if matches!(cli.command, Command::ProbeSources) {
        // No configuration, no log set-up: the daemon reads the answers.
        return match svc_daemon::serve_probes() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("svcd {}: {e}", svc_daemon::PROBE_SUBCOMMAND);
                std::process::ExitCode::FAILURE
            }
        };
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,svcd=info,svc_daemon=info,svc_http=info,svc_fs=info".into()
            }),
        )
        .with_writer(std::io::stderr)
        .init();
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
            Command::ProbeSources => unreachable!("served before the configuration is read"),
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("svcd: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
