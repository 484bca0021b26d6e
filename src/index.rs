//! `svcd index ...`: talks to a running daemon through its control socket, or opens the store
//! itself when no daemon runs on the data directory.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::control::{Client, Reply, Request};
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use svc_daemon::{
    Config, Daemon, Db, Drs, LoadSummary, Loader, Record, find_netcdf_files, read_record,
    write_to_store,
};

use crate::cli::{IndexCommand, RemoveArgs};

pub(crate) fn run(config: &Config, command: IndexCommand) -> anyhow::Result<ExitCode> {
    match command {
        IndexCommand::Add { file } => add(config, &file),
        IndexCommand::Crawl { dir, drs } => crawl(config, &dir, &drs),
        IndexCommand::Remove(args) => remove(config, args),
        IndexCommand::Stats => stats(config),
    }
}

/// Where records go: a running daemon, or the store opened here.
enum Target {
    Remote(Client),
    Local(Db),
}

impl Target {
    fn open(config: &Config) -> anyhow::Result<Self> {
        if let Some(client) = Client::connect(&config.control_socket()) {
            return Ok(Target::Remote(client));
        }
        let db = Db::open(&config.store_dir()).with_context(|| {
            format!("cannot open the store in {}", config.store_dir().display())
        })?;
        Ok(Target::Local(db))
    }
}

fn bar(total: u64, what: &str) -> ProgressBar {
    let template = format!("{what} {{bar:30}} {{percent}}% {{msg}} [{{elapsed_precise}}]");
    ProgressBar::new(total)
        .with_style(ProgressStyle::with_template(&template).expect("template is valid"))
}

fn add(config: &Config, file: &Path) -> anyhow::Result<ExitCode> {
    let (reader, size): (Box<dyn Read>, u64) = if file == Path::new("-") {
        (Box::new(std::io::stdin()), 0)
    } else {
        let f = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(f), size)
    };
    let progress = bar(size, "adding");
    let mut reader = BufReader::with_capacity(1 << 20, progress.wrap_read(reader));
    let mut line = String::new();
    let mut next_line = |line: &mut String| -> anyhow::Result<bool> {
        line.clear();
        Ok(reader
            .read_line(line)
            .with_context(|| format!("cannot read {}", file.display()))?
            > 0)
    };
    let summary = match Target::open(config)? {
        Target::Remote(mut client) => {
            client.send(&Request::Add)?;
            while next_line(&mut line)? {
                client.send_line(line.trim_end_matches(['\n', '\r']))?;
            }
            loaded(client.finish(|n| progress.set_message(format!("{n} lines")))?)?
        }
        Target::Local(db) => {
            let mut loader = Loader::new(|batch| write_to_store(&db, batch));
            while next_line(&mut line)? {
                loader.push_line(line.trim_end_matches(['\n', '\r']))?;
            }
            loader.finish()?
        }
    };
    progress.finish_and_clear();
    Ok(report(&summary, &file.display().to_string(), &[]))
}

fn loaded(reply: Reply) -> anyhow::Result<LoadSummary> {
    match reply {
        Reply::Loaded(summary) => Ok(summary),
        Reply::Error { detail } => bail!("the daemon refused: {detail}"),
        other => bail!("unexpected reply from the daemon: {other:?}"),
    }
}

/// Prints the summary; the exit status is 1 when anything was rejected or unreadable.
fn report(summary: &LoadSummary, source: &str, unreadable: &[(PathBuf, String)]) -> ExitCode {
    println!(
        "added {}, replaced {}, rejected {}",
        summary.added, summary.replaced, summary.rejected
    );
    for r in &summary.rejections {
        println!("  {source}:{}: {}", r.line, r.reason);
    }
    if summary.rejected > summary.rejections.len() as u64 {
        println!(
            "  ... and {} more",
            summary.rejected - summary.rejections.len() as u64
        );
    }
    if !unreadable.is_empty() {
        println!("unreadable {}", unreadable.len());
        for (path, reason) in unreadable {
            println!("  {}: {reason}", path.display());
        }
    }
    if summary.rejected > 0 || !unreadable.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn crawl(config: &Config, dir: &Path, drs: &str) -> anyhow::Result<ExitCode> {
    let drs: Drs = drs.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let files = find_netcdf_files(dir).with_context(|| format!("cannot walk {}", dir.display()))?;
    let progress = bar(files.len() as u64, "crawling");
    let mut unreadable = Vec::new();
    let mut records = files.iter().filter_map(|path| {
        progress.inc(1);
        match read_record(path, drs) {
            Ok(record) => Some(record),
            Err(reason) => {
                unreadable.push((path.clone(), reason));
                None
            }
        }
    });
    let summary = match Target::open(config)? {
        Target::Remote(mut client) => {
            client.send(&Request::Add)?;
            records.try_for_each(|r: Record| client.send_line(&r.to_json_line()))?;
            loaded(client.finish(|_| {})?)?
        }
        Target::Local(db) => {
            let mut loader = Loader::new(|batch| write_to_store(&db, batch));
            records.try_for_each(|r| loader.push(r))?;
            loader.finish()?
        }
    };
    progress.finish_and_clear();
    println!("crawled {} files below {}", files.len(), dir.display());
    Ok(report(&summary, &dir.display().to_string(), &unreadable))
}

fn remove(config: &Config, args: RemoveArgs) -> anyhow::Result<ExitCode> {
    let filters: Vec<(String, String)> = match args.file {
        Some(file) => vec![("file".to_string(), file)],
        None => args
            .filters
            .iter()
            .map(|f| {
                f.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .with_context(|| format!("filter {f:?} is not KEY=VALUE"))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let removed = match Client::connect(&config.control_socket()) {
        Some(mut client) => {
            client.send(&Request::Remove { filters })?;
            match client.finish(|_| {})? {
                Reply::Removed { removed } => removed,
                Reply::Error { detail } => bail!("{detail}"),
                other => bail!("unexpected reply from the daemon: {other:?}"),
            }
        }
        None => open_local(config)?.databrowser().remove(&filters)?,
    };
    println!("removed {removed}");
    Ok(ExitCode::SUCCESS)
}

fn open_local(config: &Config) -> anyhow::Result<Daemon> {
    Daemon::open(config.clone())
        .with_context(|| format!("cannot open the store in {}", config.store_dir().display()))
}

fn stats(config: &Config) -> anyhow::Result<ExitCode> {
    let stats = match Client::connect(&config.control_socket()) {
        Some(mut client) => {
            client.send(&Request::Stats)?;
            match client.finish(|_| {})? {
                Reply::Stats(stats) => stats,
                other => bail!("unexpected reply from the daemon: {other:?}"),
            }
        }
        None => open_local(config)?.catalog().stats(),
    };
    println!("records      {}", stats.records);
    println!("latest       {}", stats.latest);
    println!("store bytes  {}", stats.store_bytes);
    if !stats.user_data.is_empty() {
        println!("user data per user:");
        for (user, n) in &stats.user_data {
            println!("  {user:<18} {n}");
        }
    }
    println!("terms per facet:");
    for (facet, n) in &stats.terms {
        println!("  {facet:<18} {n}");
    }
    Ok(ExitCode::SUCCESS)
}
