//! `svcd manifest`: blob manifests from the command line (schema, validate, partition, scan,
//! resolve, show, pin, report), with output laid out like the reference tool's.
//!
//! Exit codes: 0 ok; 1 a validation failure or a domain error (one line on stderr); 2 a usage
//! error, a missing `--data`/`--manifests`, or a store that cannot be reached.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use svc_manifests::object_store::ObjectStore;
use svc_manifests::{
    DEFAULT_EXCLUDE, DEFAULT_MAX_DEPTH, ManifestStore, Missing, Mode, PartitionOptions,
    PolicyFlags, S3Options, Trie, pins, text,
};

/// Options shared by every `svcd manifest` command.
#[derive(Debug, Args)]
pub(crate) struct ManifestArgs {
    /// Where the Zarr data lives: a path, file://, memory:// or s3://bucket[/prefix]. Read
    /// only, and it must exist. Required by every command except schema and validate.
    #[arg(long, global = true, value_name = "URL")]
    data: Option<String>,
    /// Where manifests are written (a separate store you own); a missing local directory is
    /// created. Required by every command except schema and validate.
    #[arg(long, global = true, value_name = "URL")]
    manifests: Option<String>,
    /// Path segment to skip, repeatable (default: .sgwtmp, .versitygw, .snapshot; an empty
    /// value excludes nothing).
    #[arg(long, global = true, value_name = "SEG")]
    exclude: Vec<String>,
    /// S3 endpoint, e.g. https://s3.example.org.
    #[arg(long, global = true, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    endpoint: Option<String>,
    /// S3 region (default us-east-1).
    #[arg(long, global = true, env = "AWS_REGION", value_name = "NAME")]
    region: Option<String>,
    /// Do not sign S3 requests (public buckets).
    #[arg(long, global = true, env = "AWS_SKIP_SIGNATURE")]
    anonymous: bool,
    /// Permit a plain-http S3 endpoint (implied by an http:// endpoint).
    #[arg(long, global = true)]
    allow_http: bool,
    /// Use bucket.host addressing instead of host/bucket.
    #[arg(long, global = true)]
    virtual_hosted: bool,
    #[command(subcommand)]
    command: ManifestCommand,
}

#[derive(Debug, Subcommand)]
enum ManifestCommand {
    /// Print the manifest JSON Schema (draft 2020-12).
    Schema,
    /// Check manifest files against the schema and the cross-field rules.
    Validate {
        /// Manifest files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<std::path::PathBuf>,
    },
    /// Partition or repartition one store and write its manifest.
    Partition(PartitionArgs),
    /// Find Zarr stores under a prefix and mark which have a manifest.
    Scan {
        /// Prefix to scan under, relative to --data (default: everything).
        #[arg(default_value = "", value_name = "PREFIX")]
        root: String,
        /// Also partition every store that has no manifest yet.
        #[arg(long)]
        partition: bool,
        /// With --partition: compute, write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Resolve object keys (scope included) to blob ids, hot, pinned or unmanaged.
    Resolve {
        /// Keys; a single `-` reads keys from standard input, one per line.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
    },
    /// One line per manifest: epoch, blob count, scope.
    Show,
    /// Keep prefixes hot on purpose.
    #[command(subcommand)]
    Pin(PinCommand),
    /// Classify every object: archivable, hot, pinned, unmanaged.
    Report {
        /// Prefix to count, relative to --data (default: everything).
        #[arg(default_value = "", value_name = "PREFIX")]
        root: String,
        /// One row per top-level prefix instead of one total.
        #[arg(long)]
        per_bucket: bool,
    },
}

/// `partition` arguments. Policy flags build a new policy over the defaults, as the
/// reference CLI's `--t-max` does; without any, the previous manifest's policy is kept
/// (and `--force` uses the defaults).
#[derive(Debug, Args)]
struct PartitionArgs {
    /// The scope, relative to --data, e.g. nukleus/eur11.zarr.
    scope: String,
    /// Print the decision table and the diff; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Recompute blobs from scratch: the only operation that can move or drop a blob,
    /// orphaning tape copies held against its id. Pins and the epoch sequence are kept; the
    /// policy is the defaults plus any policy flags given.
    #[arg(long)]
    force: bool,
    /// Target upper bound for one blob, e.g. 100GiB.
    #[arg(long, value_name = "SIZE", value_parser = text::parse_size)]
    t_max: Option<u64>,
    /// Floor for coalescing small arrays (0 disables).
    #[arg(long, value_name = "SIZE", value_parser = text::parse_size)]
    t_min: Option<u64>,
    /// Arrays smaller than this stay hot.
    #[arg(long, value_name = "SIZE", value_parser = text::parse_size)]
    t_hot: Option<u64>,
    /// A blob may not exceed N times t-max uncompressed.
    #[arg(long, value_name = "N")]
    width_clamp: Option<u64>,
    /// Widths at or above N are rounded down to a power of two.
    #[arg(long, value_name = "N")]
    pow2_floor: Option<u64>,
}

#[derive(Debug, Subcommand)]
enum PinCommand {
    /// Pin a prefix of a partitioned scope.
    Add {
        /// The manifest scope.
        scope: String,
        /// What to keep hot, relative to SCOPE (default: the whole scope).
        #[arg(default_value = "")]
        prefix: String,
        /// Why this must stay on disk.
        #[arg(long, required = true)]
        reason: String,
        /// Review date, e.g. 2026-12-01 (reported, never enforced).
        #[arg(long, value_name = "DATE")]
        until: Option<String>,
        /// Who sets it (default: the current user).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Remove a pin; the prefix becomes eligible again.
    Remove {
        /// The manifest scope.
        scope: String,
        /// The pinned prefix (default: the whole scope).
        #[arg(default_value = "")]
        prefix: String,
    },
    /// List pins, worst first.
    Show {
        /// Only this scope.
        scope: Option<String>,
        /// Only pins whose review date has passed.
        #[arg(long)]
        expired: bool,
    },
}

/// Prints a line on standard output; a closed pipe (`| head`) ends the command quietly.
macro_rules! say {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(Failure::from)?
    };
}

/// How a command failed, and so which exit code it gets.
enum Failure {
    /// Standard output was closed by the reader: stop, exit 0.
    Pipe,
    /// A domain or validation error: exit 1.
    Domain(String),
    /// Usage or an unreachable store: exit 2.
    Usage(String),
}

impl From<svc_manifests::Error> for Failure {
    fn from(e: svc_manifests::Error) -> Self {
        if e.is_store() {
            Self::Usage(e.to_string())
        } else {
            Self::Domain(e.to_string())
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Self::Pipe
        } else {
            Self::Domain(e.to_string())
        }
    }
}

type Outcome = Result<ExitCode, Failure>;

/// Runs one `svcd manifest` command.
///
/// # Errors
/// None: failures are printed and turned into the exit code.
pub(crate) fn run(args: ManifestArgs) -> anyhow::Result<ExitCode> {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "svc_manifests=info".into()),
        )
        .without_time()
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .finish();
    // Scoped, because the process-wide subscriber filters out the library's warnings (the
    // orphaned-blob warning of --force must reach the operator).
    let outcome = tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok::<_, std::io::Error>(runtime.block_on(dispatch(args)))
    })?;
    Ok(match outcome {
        Ok(code) => code,
        Err(Failure::Pipe) => ExitCode::SUCCESS,
        Err(Failure::Domain(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    })
}

async fn dispatch(args: ManifestArgs) -> Outcome {
    match &args.command {
        ManifestCommand::Schema => {
            let schema = serde_json::to_string_pretty(svc_manifests::schema())
                .expect("a JSON value serialises");
            say!("{schema}");
            return Ok(ExitCode::SUCCESS);
        }
        ManifestCommand::Validate { files } => return validate(files),
        _ => {}
    }
    let (data, manifests) = open_stores(&args)?;
    let exclude = excludes(&args.exclude);
    match args.command {
        ManifestCommand::Schema | ManifestCommand::Validate { .. } => {
            unreachable!("handled above")
        }
        ManifestCommand::Partition(p) => partition(data.as_ref(), &manifests, &p, exclude).await,
        ManifestCommand::Scan {
            root,
            partition,
            dry_run,
        } => {
            scan(
                data.as_ref(),
                &manifests,
                &root,
                partition,
                dry_run,
                exclude,
            )
            .await
        }
        ManifestCommand::Resolve { keys } => resolve(&manifests, &keys).await,
        ManifestCommand::Show => show(&manifests).await,
        ManifestCommand::Pin(command) => pin(&manifests, command).await,
        ManifestCommand::Report { root, per_bucket } => {
            report(data.as_ref(), &manifests, &root, per_bucket).await
        }
    }
}

fn command_name(command: &ManifestCommand) -> &'static str {
    match command {
        ManifestCommand::Schema => "schema",
        ManifestCommand::Validate { .. } => "validate",
        ManifestCommand::Partition(_) => "partition",
        ManifestCommand::Scan { .. } => "scan",
        ManifestCommand::Resolve { .. } => "resolve",
        ManifestCommand::Show => "show",
        ManifestCommand::Pin(_) => "pin",
        ManifestCommand::Report { .. } => "report",
    }
}

fn open_stores(args: &ManifestArgs) -> Result<(Arc<dyn ObjectStore>, ManifestStore), Failure> {
    let (data, manifests) = match (&args.data, &args.manifests) {
        (Some(data), Some(manifests)) => (data, manifests),
        (data, manifests) => {
            let missing: Vec<&str> = [
                ("--data", data.is_none()),
                ("--manifests", manifests.is_none()),
            ]
            .into_iter()
            .filter_map(|(name, absent)| absent.then_some(name))
            .collect();
            let verb = if missing.len() > 1 { "are" } else { "is" };
            return Err(Failure::Usage(format!(
                "{} {verb} required for {}",
                missing.join(" and "),
                command_name(&args.command)
            )));
        }
    };
    let s3 = S3Options {
        endpoint: args.endpoint.clone(),
        region: args.region.clone(),
        anonymous: args.anonymous,
        allow_http: args.allow_http,
        virtual_hosted: args.virtual_hosted,
    };
    let data = svc_manifests::open_store(&expand_home(data), &s3, Missing::Fail)?;
    let manifests = svc_manifests::open_store(&expand_home(manifests), &s3, Missing::Create)?;
    Ok((data, ManifestStore::new(manifests, "")))
}

fn expand_home(url: &str) -> String {
    match (url.strip_prefix('~'), svc_daemon::home_dir()) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            format!("{home}{rest}")
        }
        _ => url.to_owned(),
    }
}

fn excludes(given: &[String]) -> Vec<String> {
    if given.is_empty() {
        DEFAULT_EXCLUDE.iter().map(|&s| s.to_owned()).collect()
    } else {
        given.iter().filter(|s| !s.is_empty()).cloned().collect()
    }
}

fn validate(files: &[std::path::PathBuf]) -> Outcome {
    let mut failed = false;
    for file in files {
        let result = std::fs::read(file)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|bytes| svc_manifests::parse(&bytes).map_err(|e| e.to_string()));
        match result {
            Ok(_) => say!("{}: ok", file.display()),
            Err(message) => {
                failed = true;
                say!("{}: {message}", file.display());
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A spinner on stderr when it is a terminal, counting objects listed.
fn spinner(what: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix} {msg}").expect("the template is valid"),
    );
    bar.set_prefix(what.to_owned());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(bar)
}

async fn partition(
    data: &dyn ObjectStore,
    manifests: &ManifestStore,
    args: &PartitionArgs,
    exclude: Vec<String>,
) -> Outcome {
    let options = PartitionOptions {
        policy: PolicyFlags {
            t_max_bytes: args.t_max,
            t_min_bytes: args.t_min,
            t_hot_bytes: args.t_hot,
            width_clamp: args.width_clamp,
            pow2_floor: args.pow2_floor,
        },
        mode: if args.force {
            Mode::Recompute
        } else {
            Mode::Additive
        },
        dry_run: args.dry_run,
        exclude,
    };
    let bar = spinner(&format!("listing {}", args.scope));
    let progress = |n: u64| {
        if let Some(bar) = &bar {
            bar.set_message(format!("{n} objects"));
        }
    };
    let result =
        svc_manifests::partition_store(data, manifests, &args.scope, &options, Some(&progress))
            .await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let outcome = result?;
    say!("{}", text::explain(&outcome.arrays, &outcome.manifest));
    say!();
    say!("{}", outcome.diff.describe());
    let state = if outcome.written {
        "written"
    } else {
        "not written"
    };
    say!("\nepoch {}, {state}", outcome.manifest.epoch);
    Ok(ExitCode::SUCCESS)
}

async fn scan(
    data: &dyn ObjectStore,
    manifests: &ManifestStore,
    root: &str,
    partition: bool,
    dry_run: bool,
    exclude: Vec<String>,
) -> Outcome {
    let candidates =
        svc_manifests::scan(data, manifests, root, DEFAULT_MAX_DEPTH, &exclude).await?;
    let options = PartitionOptions {
        dry_run,
        exclude,
        ..PartitionOptions::default()
    };
    let mut stdout = std::io::stdout();
    for candidate in candidates {
        let mark = if candidate.has_manifest { "ok " } else { "NEW" };
        say!("{mark} {}  {}", candidate.format.as_str(), candidate.scope);
        if !partition || candidate.has_manifest {
            continue;
        }
        // A store with millions of chunks takes minutes to list: say what is being worked on.
        write!(stdout, "    partitioning {} ...", candidate.scope)?;
        stdout.flush()?;
        let outcome =
            svc_manifests::partition_store(data, manifests, &candidate.scope, &options, None)
                .await?;
        let note = if outcome.written {
            ""
        } else {
            " (not written)"
        };
        say!(" {} blobs{note}", outcome.manifest.blobs.len());
    }
    Ok(ExitCode::SUCCESS)
}

async fn resolve(manifests: &ManifestStore, keys: &[String]) -> Outcome {
    let trie = Trie::from_manifests(&manifests.load_all().await?);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if keys.len() == 1 && keys[0] == "-" {
        for line in std::io::stdin().lock().lines() {
            let key = line?;
            writeln!(out, "{key}  ->  {}", trie.lookup(&key))?;
        }
    } else {
        for key in keys {
            writeln!(out, "{key}  ->  {}", trie.lookup(key))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

async fn show(manifests: &ManifestStore) -> Outcome {
    let mut all = manifests.load_all().await?;
    all.sort_by(|a, b| a.scope.cmp(&b.scope));
    for manifest in all {
        say!(
            "epoch {:>4}  {:>3} blobs  {}",
            manifest.epoch,
            manifest.blobs.len(),
            manifest.scope
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn pin(manifests: &ManifestStore, command: PinCommand) -> Outcome {
    let location =
        |scope: &str, prefix: &str| format!("{scope}/{prefix}").trim_end_matches('/').to_owned();
    match command {
        PinCommand::Add {
            scope,
            prefix,
            reason,
            until,
            by,
        } => {
            // A bare date means midnight UTC, so that it compares as text with stored times.
            let until = until.map(|u| {
                if u.contains('T') {
                    u
                } else {
                    format!("{u}T00:00:00+00:00")
                }
            });
            let by = by.unwrap_or_else(svc_daemon::login_name);
            let new = pins::NewPin { reason, by, until };
            pins::add(manifests, &scope, &prefix, new).await?;
            say!("pinned {}", location(&scope, &prefix));
        }
        PinCommand::Remove { scope, prefix } => {
            pins::remove(manifests, &scope, &prefix).await?;
            say!("unpinned {}", location(&scope, &prefix));
            say!("  eligible again; nothing is archived until the tiering policy runs");
        }
        PinCommand::Show { scope, expired } => {
            let now = svc_manifests::now();
            let records = pins::show(manifests, scope.as_deref(), expired, &now).await?;
            say!("{}", text::render_pins(&records, expired, &now));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn report(
    data: &dyn ObjectStore,
    manifests: &ManifestStore,
    root: &str,
    per_bucket: bool,
) -> Outcome {
    let loaded = manifests.load_all().await?;
    let now = svc_manifests::now();
    let roots = if per_bucket {
        svc_manifests::child_prefixes(data, root).await?
    } else {
        vec![root.to_owned()]
    };
    let bar = spinner("counting");
    let progress = |n: u64| {
        if let Some(bar) = &bar {
            bar.set_message(format!("{n} objects"));
        }
    };
    let mut reports = Vec::with_capacity(roots.len());
    for prefix in &roots {
        reports.push(svc_manifests::report(data, &loaded, prefix, &now, Some(&progress)).await?);
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    say!("{}", text::render_reports(&reports));
    Ok(ExitCode::SUCCESS)
}
