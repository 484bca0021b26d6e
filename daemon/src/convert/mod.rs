//! Sources to Zarr v2. A conversion opens the source, builds the store's metadata in memory
//! ([`metadata`], chunked by the [`plan`]), writes it, then writes every chunk ([`write`]).
//! A reader that asks for a chunk the conversion has not written yet gets it computed from
//! the source by the same functions ([`chunk_on_demand`]), so its bytes are the ones the
//! conversion writes.

pub(crate) mod child;
pub(crate) mod combine;
pub(crate) mod confine;
pub(crate) mod external;
pub(crate) mod metadata;
pub(crate) mod plan;
pub(crate) mod probe;
pub(crate) mod reduce;
pub(crate) mod stored;
pub(crate) mod write;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::jobs::Stop;
use crate::stores::request::Chunking;
use metadata::StoreLayout;
use stored::StoredFile;
use write::Written;

/// The compressor of every array of a store (config `stores.compressor`): Blosc, byte
/// shuffled, level 5, as numcodecs' defaults, with LZ4 inside as the reference, or with
/// Zstandard, which makes smaller stores and is slower to write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compressor {
    /// Blosc with LZ4 (the default).
    #[default]
    Lz4,
    /// Blosc with Zstandard.
    Zstd,
}

impl Compressor {
    /// Its numcodecs configuration, as `.zarray` holds it.
    pub(crate) fn codec(self) -> Value {
        let cname = match self {
            Compressor::Lz4 => "lz4",
            Compressor::Zstd => "zstd",
        };
        json!({"id": "blosc", "cname": cname, "clevel": 5, "shuffle": 1, "blocksize": 0})
    }
}

static APART: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Has every source read by the NetCDF and HDF5 libraries only in child processes running
/// this program (`/proc/self/exe`): first by a [`probe`] (subcommand [`probe::SUBCOMMAND`],
/// which must call [`probe::serve`]), then by a conversion's or a request's own process
/// ([`child::SUBCOMMAND`], which must call [`child::serve`]). Without it (the unit tests),
/// the daemon's process reads them.
pub fn read_sources_apart() {
    APART.store(true, std::sync::atomic::Ordering::Relaxed);
    // Its memory, environment (the cold tier's credentials) and descriptors are then not
    // for a process of the same user to read through /proc (a child reading a hostile file,
    // on a kernel without Landlock); nor is a core dump written.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!("cannot make the daemon's process undumpable: {e}");
    }
}

/// How long starting a process (or what it needs: memory, descriptors) is tried again while
/// the machine has none to spare ([`patiently`]).
const START_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// `attempt`, tried again while it fails for want of what the machine may soon have again
/// (`EAGAIN`: no process left under a limit; `ENOMEM`; `EMFILE`, `ENFILE`: no descriptor;
/// `ENOBUFS`), waiting longer each time (10 ms, doubled up to 1 s), for up to
/// [`START_PATIENCE`], or until `stop` is requested: a store does not fail because the
/// machine was out of processes for a moment.
///
/// # Errors
/// `attempt`'s last error.
fn patiently<T>(
    stop: Option<&Stop>,
    mut attempt: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    use nix::errno::Errno;
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(10);
    loop {
        match attempt() {
            Err(e)
                if [
                    Errno::EAGAIN,
                    Errno::ENOMEM,
                    Errno::EMFILE,
                    Errno::ENFILE,
                    Errno::ENOBUFS,
                ]
                .map(|errno| Some(errno as i32))
                .contains(&e.raw_os_error())
                    && started.elapsed() + pause < START_PATIENCE
                    && !stop.is_some_and(Stop::requested) =>
            {
                tracing::warn!("{e}; trying again in {} ms", pause.as_millis());
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
            outcome => return outcome,
        }
    }
}

/// Runs `task` in a fork of this process, which must run one thread (checked: the fork's
/// copy of it then finds no lock held by another), and returns the fork; `task` first
/// closes what the fork has no business with. The fork ends with this process
/// (`PR_SET_PDEATHSIG`: the daemon kills a `convert-child` or probe process to end its
/// task), and as soon as `task` returns (or panics), with its exit code: no exit handlers
/// of the libraries, no buffers of this process flushed twice. Its standard output and
/// error are a pipe of its own ([`Forked`]). Reap it with [`reap`].
///
/// A fork that fails for want of a process or memory is tried again ([`patiently`]).
///
/// # Errors
/// How many threads run, or why the fork failed.
fn fork_task(task: impl FnOnce() -> i32) -> std::io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count);
    if threads != 1 {
        return Err(std::io::Error::other(format!(
            "{threads} threads: a process that forks runs one"
        )));
    }
    let parent = nix::unistd::getpid();
    // Non-blocking at both ends: the task writes without waiting (what does not fit in the
    // pipe is not kept), and `reap` reads what is there, and no more (a descriptor the task
    // passed on could keep the pipe open).
    let (messages, its_messages) = patiently(None, || {
        use nix::fcntl::OFlag;
        Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?)
    })?;
    // SAFETY: this process runs one thread (checked above).
    #[allow(unsafe_code)]
    let fork = || unsafe { nix::unistd::fork() }.map_err(std::io::Error::from);
    match patiently(None, fork)? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked {
            pid: child,
            messages,
        }),
        nix::unistd::ForkResult::Child => {
            drop(messages);
            let orphaned = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .is_err()
                || nix::unistd::getppid() != parent;
            let apart = nix::unistd::dup2_stdout(&its_messages)
                .and_then(|()| nix::unistd::dup2_stderr(&its_messages));
            drop(its_messages);
            // A panic must not unwind into this process's copy of its parent's loop.
            let run = std::panic::AssertUnwindSafe(task);
            let code = if orphaned || apart.is_err() {
                1
            } else {
                std::panic::catch_unwind(run).unwrap_or(101)
            };
            // SAFETY: ends the fork at once, as said above.
            #[allow(unsafe_code)]
            unsafe {
                libc::_exit(code)
            }
        }
    }
}

/// A process forked by [`fork_task`]: its pid, and the reading end of the pipe that is its
/// standard output and error. The libraries print their messages there, and a process
/// that reads users' files is not trusted with the daemon's log: [`reap`] writes what it
/// printed to the log as its words, quoted.
pub(crate) struct Forked {
    pub(crate) pid: nix::unistd::Pid,
    messages: std::os::fd::OwnedFd,
}

/// The most of a process's messages written to the log ([`log_messages`]): lines, and
/// characters of a line.
const MESSAGES_LOGGED: (usize, usize) = (20, 500);

/// How a process forked by [`fork_task`] ended, once it did: its exit code, or the signal
/// that ended it. What it printed is then logged as the words of `whose` ([`log_messages`]).
///
/// # Errors
/// When it cannot be waited for.
fn reap(forked: Forked, whose: &str) -> std::io::Result<(Option<i32>, Option<i32>)> {
    use nix::sys::wait::{WaitStatus, waitpid};
    let ended = loop {
        match waitpid(forked.pid, None) {
            Ok(WaitStatus::Exited(_, code)) => break (Some(code), None),
            Ok(WaitStatus::Signaled(_, signal, _)) => break (None, Some(signal as i32)),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    let mut printed = Vec::new();
    // What is in the pipe (non-blocking, see `fork_task`).
    let pipe = std::fs::File::from(forked.messages);
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(pipe, 1 << 20), &mut printed);
    for line in log_messages(&printed) {
        tracing::warn!("{whose} printed: {line}");
    }
    Ok(ended)
}

/// The lines of `printed` as the log shows them: each quoted, with its control characters
/// and quotes escaped (no line of the log can be forged), the first [`MESSAGES_LOGGED`]
/// lines of up to as many characters, and how many more were left out.
fn log_messages(printed: &[u8]) -> Vec<String> {
    let (most_lines, most_chars) = MESSAGES_LOGGED;
    let text = String::from_utf8_lossy(printed);
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let mut logged: Vec<String> = lines
        .iter()
        .take(most_lines)
        .map(|line| {
            let shown: String = line.chars().take(most_chars).collect();
            let cut = if shown.len() < line.len() {
                " (cut)"
            } else {
                ""
            };
            format!("{shown:?}{cut}")
        })
        .collect();
    if lines.len() > most_lines {
        logged.push(format!("{} lines more, left out", lines.len() - most_lines));
    }
    logged
}

/// What a panic says (the `netcdf` crate panics on some errors of the library).
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic")
}

/// Starts the processes that wait for their first conversion or request
/// ([`read_sources_apart`]), so that the first ones do not wait for a process to start: a
/// daemon serving calls it as it starts.
pub fn start_conversion_processes() {
    if apart() {
        tracing::info!("{}", confine::report());
        child::ready::refill();
    }
}

/// Has what a task or a probe sets up on first use set up now: the NetCDF and HDF5
/// libraries (on a file in memory; none is written), the seccomp filters and, with
/// `plugins` (a conversion's, not a probe's, which reads no data), HDF5's filter plugins
/// ([`confine::prepare`]). Each costs milliseconds, which a process that forks one process
/// per task ([`child::serve`]) or per batch of files ([`probe::serve`]) then pays once, not
/// in each. Starts no thread (a process that forks must have one: the Zarr codecs'
/// configuration, which starts the thread pool of its codecs, is left to each task).
pub(crate) fn warm_up(plugins: bool) {
    let created = netcdf::create_with(
        "/svcd-libraries-warm-up.nc",
        netcdf::Options::NETCDF4 | netcdf::Options::DISKLESS,
    );
    let Ok(mut file) = created else {
        return;
    };
    let mut write_and_read = || -> Result<(), netcdf::Error> {
        file.add_dimension("x", 4)?;
        let mut variable = file.add_variable::<f32>("v", &["x"])?;
        variable.put_values(&[1f32, 2., 3., 4.], ..)?;
        variable.get_values::<f32, _>(..).map(drop)
    };
    let written = write_and_read();
    if let Err(e) = written {
        tracing::debug!("warming the NetCDF library up: {e}");
    }
    drop(file);
    confine::prepare(plugins);
}

/// Whether [`read_sources_apart`] was called.
fn apart() -> bool {
    APART.load(std::sync::atomic::Ordering::Relaxed)
}

/// An opened source file. The NetCDF library opens it again by name, so the file is opened
/// first, here, and the library is handed `/proc/self/fd/<n>`: it reads the file that was
/// opened (and checked, see [`crate::stores`]), even if the path names another file since.
#[derive(Debug)]
pub(crate) struct Source {
    /// The path as the user gave it, for messages.
    path: std::path::PathBuf,
    file: std::fs::File,
    /// Its size and times when it was opened (see [`Source::unchanged`]).
    opened: Version,
}

/// The size, modification time and change time (seconds, nanoseconds) of a file. The change
/// time is the one its owner cannot set back: a file written to and then given its old
/// modification time again has a new one.
type Version = (u64, (i64, i64), (i64, i64));

/// The [`Version`] of a file.
fn version(meta: &std::fs::Metadata) -> Version {
    use std::os::unix::fs::MetadataExt;
    (
        meta.size(),
        (meta.mtime(), meta.mtime_nsec()),
        (meta.ctime(), meta.ctime_nsec()),
    )
}

impl Source {
    /// Opens `path`, which must be a regular file (a FIFO or device would block or never end).
    ///
    /// # Errors
    /// A sentence naming the file and the cause.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let shown = path.display();
        // Non-blocking, so that opening a FIFO does not wait for a writer.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| format!("{shown}: {e}"))?;
        let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{shown}: not a regular file"));
        }
        Ok(Source {
            path: path.to_path_buf(),
            opened: version(&meta),
            file,
        })
    }

    /// Whether the file is as it was opened: the same [`Version`]. One
    /// written to while it was converted (a model still writing it, a copy over it in
    /// place, a truncation) may have given a mix of old and new bytes, or zeros past a cut
    /// (the NetCDF library fills a short read of a classic file so), which no later read
    /// could tell from data. (A file replaced by a rename is not this file: the conversion
    /// read the one it opened.)
    ///
    /// # Errors
    /// A sentence naming the file when it changed, or cannot be looked at.
    pub(crate) fn unchanged(&self) -> Result<(), String> {
        let shown = self.path.display();
        let meta = self.file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if version(&meta) == self.opened {
            Ok(())
        } else {
            Err(format!(
                "{shown}: changed while it was converted (its size, or the time it or its \
                 attributes last changed, is not what it was when the conversion opened it); \
                 convert it again once it is written"
            ))
        }
    }

    /// The device and inode of the opened file.
    pub(crate) fn identity(&self) -> Result<(u64, u64), String> {
        self.now().map(|(dev, ino, _)| (dev, ino))
    }

    /// The device, inode and [`Version`] of the opened file now: what identifies its
    /// contents.
    fn now(&self) -> Result<(u64, u64, Version), String> {
        use std::os::unix::fs::MetadataExt;
        let meta = self
            .file
            .metadata()
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok((meta.dev(), meta.ino(), version(&meta)))
    }

    /// The path the user gave.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The opened file's path for a library that opens files by name: `/proc/self/fd/<n>`.
    fn opened(&self) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::path::PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// The opened file as NetCDF (and as HDF5, for a NetCDF-4 file), and the layout of its
    /// store with `chunking` and `compressor`: what a conversion and every on-demand
    /// computation start from.
    fn layout(
        &self,
        chunking: &Chunking,
        compressor: Compressor,
    ) -> Result<(netcdf::File, Option<StoredFile>, StoreLayout), String> {
        let shown = self.path.display();
        external::refuse_data_elsewhere(&self.opened()).map_err(|e| format!("{shown}: {e}"))?;
        let file =
            crate::crawl::open_netcdf(&self.opened()).map_err(|e| format!("{shown}: {e}"))?;
        let stored = StoredFile::open(&self.opened()).map_err(|e| format!("{shown}: {e}"))?;
        let layout = metadata::layout(&file, stored.as_ref(), chunking, &compressor.codec())
            .map_err(|e| format!("{shown}: {e}"))?;
        Ok((file, stored, layout))
    }
}

/// Converts the NetCDF file `source` into the store directory `dir`.
///
/// # Errors
/// A reason for the store's failed status, naming the file and the cause.
pub(crate) fn convert_file(
    source: &Source,
    dir: &Path,
    chunking: &Chunking,
    compressor: Compressor,
    reserve: write::Reserve,
    stop: &Stop,
) -> Result<(StoreLayout, Written), String> {
    let (file, stored, layout) = source.layout(chunking, compressor)?;
    write::write_metadata(&layout, dir, &reserve)?;
    let read = write::file_chunks(&file, stored.as_ref(), &layout, stop);
    let written = write::write_chunks(&layout, dir, stop, reserve, Some(&source.file), read)
        .map_err(|e| format!("{}: {e}", source.path.display()))?;
    if written == Written::Complete {
        source.unchanged()?;
    }
    Ok((layout, written))
}

/// Converts `sources` combined as `aggregation` says ([`combine`]; without it, the one
/// source as it is) and reduced in time as `reduction` says ([`reduce`]) into the store
/// directory `dir`. Chunks are read by the NetCDF library, slab by slab from the sources that
/// make them, with a few source files open at a time.
///
/// # Errors
/// A reason for the store's failed status: a file that cannot be read, or why the sources
/// cannot be combined or reduced.
#[expect(
    clippy::too_many_arguments,
    reason = "the sources, how they combine, how they reduce, and where, how and until when \
              the store is written: each its own part of the record or the configuration"
)]
pub(crate) fn convert_sources(
    sources: &[Source],
    aggregation: Option<&crate::stores::request::Aggregation>,
    reduction: Option<&crate::stores::request::Reduction>,
    dir: &Path,
    chunking: &Chunking,
    compressor: Compressor,
    reserve: write::Reserve,
    stop: &Stop,
) -> Result<(StoreLayout, Written), String> {
    let mut slabs = OpenSources::new(sources, Some(stop));
    let datasets = sources
        .iter()
        .enumerate()
        .map(|(n, source)| slabs.dataset(n, source))
        .collect::<Result<Vec<_>, _>>()?;
    let mut parts = match aggregation {
        Some(aggregation) => combine::combine(&datasets, aggregation, &mut slabs)?,
        None => vec![(String::new(), combine::Part::of(0, &datasets[0]))],
    };
    if let Some(reduction) = reduction {
        parts = parts
            .into_iter()
            .map(|(name, part)| {
                let reduced = reduce::reduce(part, reduction, &mut slabs);
                match reduced {
                    Ok(part) => Ok((name, part)),
                    Err(reason) if name.is_empty() => Err(reason),
                    Err(reason) => Err(format!("{name}: {reason}")),
                }
            })
            .collect::<Result<_, String>>()?;
    }
    let layout =
        metadata::layout_of_groups(&combine::groups(&parts), chunking, &compressor.codec())?;
    let vars: Vec<&combine::CombinedVar> = parts.iter().flat_map(|(_, part)| &part.vars).collect();
    // Strings are carried over from one source as they are (combining refuses them first).
    if let Some(var) = vars.iter().find(|v| {
        v.info.dtype == metadata::Dtype::String
            && !matches!(
                v.origin,
                combine::Origin::Strings(_) | combine::Origin::Source(_)
            )
    }) {
        return Err(format!(
            "variable {:?} holds strings, which cannot be combined or reduced yet",
            var.info.name
        ));
    }
    write::write_metadata(&layout, dir, &reserve)?;
    let read = |n: usize, index: &[u64]| -> Result<write::ChunkRead, String> {
        let array = &layout.arrays[n];
        let (start, count) = write::chunk_extent(array, index);
        match &vars[n].origin {
            combine::Origin::Strings(strings) => {
                // A coordinate: one chunk.
                return Ok(write::ChunkRead::Values(write::ChunkValues::strings(
                    strings.iter().map(String::as_str),
                )));
            }
            combine::Origin::Source(source) if array.dtype == metadata::Dtype::String => {
                return slabs
                    .strings(*source, array, index)
                    .map(write::ChunkRead::Values);
            }
            _ => {}
        }
        if let combine::Origin::Reduced(reduced) = &vars[n].origin
            && let Some(compute) =
                reduce::read_reduced_later(&mut slabs, reduced, &vars[n].info, &start, &count)?
        {
            // Reduced on an encoder thread: the reader goes on reading.
            return Ok(write::ChunkRead::Computed(compute));
        }
        let values = combine::read_block(&mut slabs, vars[n], &start, &count)?;
        Ok(write::ChunkRead::Values(write::ChunkValues::Fixed(
            write::full_chunk(values, &count, array),
        )))
    };
    let written = write::write_chunks(&layout, dir, stop, reserve, None, read)?;
    if written == Written::Complete {
        sources.iter().try_for_each(Source::unchanged)?;
    }
    Ok((layout, written))
}

/// The sources of an aggregated store as NetCDF files, a few open at a time (a store may
/// combine thousands). Slabs of a NetCDF-4 variable stored with `deflate` (and `shuffle`) are
/// decoded from its stored chunks on every core ([`stored`]), the same bytes the library
/// gives; others are read by the library.
struct OpenSources<'s> {
    sources: &'s [Source],
    /// Open files, the most recently used last.
    open: Vec<Opened>,
    /// Set when the conversion is to stop: every read fails then, so that a chunk made of
    /// many slabs (a climatology's) does not hold up a shutdown.
    stop: Option<&'s Stop>,
    /// What the metadata of the sources (their attributes and variables) may still take, all
    /// sources together.
    budget: std::rc::Rc<metadata::MetadataBudget>,
}

/// One open source.
struct Opened {
    /// Its position in the request.
    n: usize,
    file: netcdf::File,
    /// The same file as HDF5, for a NetCDF-4 file.
    stored: Option<StoredFile>,
    /// How each variable read so far is stored, when its stored chunks can be decoded.
    arrays: std::collections::HashMap<String, Option<stored::StoredArray>>,
    /// What the strings of each string variable read so far claim to take.
    claims: std::collections::HashMap<String, write::Claims>,
}

impl<'s> OpenSources<'s> {
    /// Files kept open at once.
    const KEEP: usize = 8;

    fn new(sources: &'s [Source], stop: Option<&'s Stop>) -> Self {
        OpenSources {
            sources,
            open: Vec::new(),
            stop,
            budget: std::rc::Rc::new(metadata::MetadataBudget::new()),
        }
    }

    fn file(&mut self, n: usize) -> Result<&mut Opened, String> {
        if let Some(at) = self.open.iter().position(|opened| opened.n == n) {
            let entry = self.open.remove(at);
            self.open.push(entry);
        } else {
            let source = &self.sources[n];
            external::refuse_data_elsewhere(&source.opened())
                .map_err(|e| format!("{}: {e}", source.path.display()))?;
            let file = crate::crawl::open_netcdf(&source.opened())
                .map_err(|e| format!("{}: {e}", source.path.display()))?;
            // Without HDF5's view, every slab is read by the library.
            let stored = StoredFile::open(&source.opened()).ok().flatten();
            if self.open.len() == Self::KEEP {
                self.open.remove(0);
            }
            self.open.push(Opened {
                n,
                file,
                stored,
                arrays: std::collections::HashMap::new(),
                claims: std::collections::HashMap::new(),
            });
        }
        Ok(self.open.last_mut().expect("just pushed"))
    }

    /// Chunk `index` of the string array `array`, the variable of its name in source `n`.
    fn strings(
        &mut self,
        n: usize,
        array: &metadata::ArrayLayout,
        index: &[u64],
    ) -> Result<write::ChunkValues, String> {
        let shown = self.sources[n].path.display().to_string();
        let stop = self.stop;
        let opened = self.file(n)?;
        let variable = opened
            .file
            .variable(&array.variable)
            .ok_or_else(|| format!("{shown}: variable {:?} vanished", array.variable))?;
        let claims = opened
            .claims
            .entry(array.variable.clone())
            .or_insert_with(|| {
                write::claims(opened.stored.as_ref(), array, &variable).expect("a string array")
            });
        let strings = write::StringBounds {
            claims: Some(claims),
            cap: metadata::MAX_CHUNK_BYTES,
            stop,
        };
        write::chunk_values(&variable, array, index, &strings).map_err(|e| format!("{shown}: {e}"))
    }

    /// The root group of source `n` as the combination sees it.
    fn dataset(&mut self, n: usize, source: &Source) -> Result<combine::Dataset, String> {
        let shown = source.path.display().to_string();
        let budget = std::rc::Rc::clone(&self.budget);
        let file = &self.file(n)?.file;
        let failed = |e: String| format!("{shown}: {e}");
        let attrs = metadata::attributes(file.attributes(), "the file", &budget).map_err(failed)?;
        let vars = file
            .variables()
            .map(|variable| metadata::VarInfo::of(&variable, "", &budget))
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        Ok(combine::Dataset {
            name: shown,
            attrs,
            vars,
        })
    }
}

impl combine::Slabs for OpenSources<'_> {
    fn budget(&self) -> &metadata::MetadataBudget {
        &self.budget
    }

    fn read(
        &mut self,
        source: usize,
        name: &str,
        start: &[u64],
        count: &[u64],
    ) -> Result<Vec<u8>, String> {
        if self.stop.is_some_and(Stop::requested) {
            return Err("the conversion is stopping".into());
        }
        let shown = self.sources[source].path.display().to_string();
        let failed = |e: &dyn std::fmt::Display| format!("{shown}: variable {name:?}: {e}");
        let raw = &self.sources[source].file;
        let opened = self.file(source)?;
        let variable = opened
            .file
            .variable(name)
            .ok_or_else(|| failed(&"vanished from the file"))?;
        // The library reads a string variable as C strings it allocates, of any length each,
        // which raw bytes would leak: strings are read only through `chunk_values`, bounded.
        if variable.vartype() == netcdf::types::NcVariableType::String {
            return Err(failed(&"holds strings, which are not read as numbers"));
        }
        if start.is_empty() {
            return variable.get_raw_values(..).map_err(|e| failed(&e));
        }
        if let Some(stored) = &opened.stored {
            let array = opened.arrays.entry(name.to_string()).or_insert_with(|| {
                // Read for its shape and type; it was counted with the dataset.
                let info =
                    metadata::VarInfo::of(&variable, "", &metadata::MetadataBudget::new()).ok()?;
                let shape: Vec<u64> = info.dims.iter().map(|d| d.len).collect();
                stored.array(&metadata::ArrayLayout {
                    path: name.to_string(),
                    groups: Vec::new(),
                    variable: name.to_string(),
                    dtype: info.dtype,
                    chunks: shape.clone(),
                    shape,
                    copied: None,
                })
            });
            if let Some(pieces) = array.as_ref().and_then(|a| a.slab(start, count)) {
                return pieces
                    .values_on(raw, write::encoders())
                    .map_err(|e| failed(&e));
            }
        }
        variable
            .get_raw_values(write::extents(start, count))
            .map_err(|e| failed(&e))
    }
}

/// The layout of the store converted from `source` with `chunking` and `compressor`: the
/// metadata a conversion writes first, for a reader that comes before it.
///
/// # Errors
/// A sentence naming the file and the cause.
pub(crate) fn layout_on_demand(
    source: &Source,
    chunking: &Chunking,
    compressor: Compressor,
) -> Result<StoreLayout, String> {
    source
        .layout(chunking, compressor)
        .map(|(_, _, layout)| layout)
}

/// The stored bytes of chunk `index` of the array `array` of the store converted from
/// `source` with `chunking` and `compressor`, computed from the source, when the array's
/// metadata is still `zarray` (the `.zarray` the store serves). `None` when the source no
/// longer gives that metadata (it changed since the conversion began, or the store was
/// written with another compressor): only the conversion can give such a chunk then. A
/// chunk of strings is refused once its strings take more than `most_bytes`, the bound of
/// the chunks a request computes (a chunk of numbers is sized by its metadata).
///
/// # Errors
/// A sentence naming the file, and the variable and chunk, that could not be read.
pub(crate) fn chunk_on_demand(
    source: &Source,
    chunking: &Chunking,
    compressor: Compressor,
    array: &str,
    index: &[u64],
    zarray: &Value,
    most_bytes: u64,
) -> Result<Option<Vec<u8>>, String> {
    let (file, stored, layout) = source.layout(chunking, compressor)?;
    let (Some(written), Some(planned)) = (
        layout.documents.get(&format!("{array}/.zarray")),
        layout.arrays.iter().find(|a| a.path == array),
    ) else {
        return Ok(None);
    };
    if written != zarray {
        return Ok(None);
    }
    let Some(variable) = file.variable(array) else {
        return Ok(None);
    };
    // A 0-d array's one chunk is `0` to readers and `[]` to the writer.
    let index = if planned.shape.is_empty() {
        &[][..]
    } else {
        index
    };
    let failed = |e: String| format!("{}: {e}", source.path.display());
    let stored_array = stored.as_ref().and_then(|stored| stored.array(planned));
    let claims = write::claims(stored.as_ref(), planned, &variable);
    let strings = write::StringBounds {
        claims: claims.as_ref(),
        cap: most_bytes,
        stop: None,
    };
    let read = write::read_chunk(&variable, stored_array.as_ref(), planned, index, &strings)
        .map_err(failed)?;
    let encoder = match planned.copied {
        Some(_) => None,
        None => Some(write::Encoder::new(&layout, planned)?),
    };
    write::chunk_bytes(planned, encoder.as_ref(), read, Some(&source.file), index)
        .map(Some)
        .map_err(failed)
}

#[cfg(test)]
mod tests;
