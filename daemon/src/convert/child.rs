//! The NetCDF and HDF5 libraries read users' files only in child processes: a conversion
//! runs in a process of its own (`svcd convert-child`, [`serve`]), and so does each metadata
//! document or chunk a reader asks for before the conversion wrote it ([`layout`],
//! [`chunk`]). The daemon hands the child its own descriptors of the sources (over a socket,
//! `SCM_RIGHTS`, as to a [`super::probe`]), and the child's address space is bounded
//! (`stores.max_conversion_memory_mib`).
//!
//! Why: what the libraries allocate, and whether they crash, follows from the file's
//! bytes, and a file's owner can change its bytes at any time, also after a probe read them
//! and without changing its size or times (through a shared mapping whose page is already
//! dirty), so no check made before the libraries read a file holds while they read it.
//! HDF5 also allocates again, for each element of a string variable never written, the
//! length its fill value claims, which the probe sees only once. In a child, such a file
//! fails its own conversion or request (an allocation past the bound fails; a crash ends
//! the child) and nothing else: the daemon, its other conversions and readers go on.
//!
//! The probe still reads each file first, with a far smaller bound for its metadata
//! (128 MiB) and an answer kept per file, so that a file whose metadata alone claims
//! gigabytes is refused with a reason that says so, before a conversion starts.
//!
//! The protocol, on a `SOCK_SEQPACKET` socket that is the child's standard input (messages
//! tagged by their first byte):
//! - the daemon sends the request as JSON, in pieces (`r`), the sources' descriptors (`f`,
//!   at most [`FDS_PER_MESSAGE`] each), and `g` to start;
//! - during a conversion it answers the child's asks for room (`o`: taken; `n` and the
//!   reason: refused), sends `s` when the conversion is to stop, and `e` once it read the
//!   outcome of a conversion it keeps the child after.
//!
//! The child says what it has to say as JSON lines ([`Said`]) on its standard output (what
//! the libraries print there goes to standard error), a chunk's bytes after its line.
//!
//! A few children are started ahead of their work ([`ready`]), so that starting one is not
//! on the way of a reader waiting for a chunk, and a child whose task succeeded waits for
//! the next task on the stores of the same owner ([`Child::keep`]): a process reads the
//! files of one owner only, so whatever a hostile file left in it that did not end it meets
//! no other user's files. One whose task failed, or crashed, ends.
//!
//! Children are used once the program calls [`super::read_sources_apart`] (svcd does, as
//! it starts); a library embedding this crate without it (the unit tests) runs conversions
//! in its own process.

use std::io::{BufRead, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::write::{Reserve, Take, Written};
use super::{Compressor, Source, Version, probe};
use crate::jobs::Stop;
use crate::stores::request::{Aggregation, Chunking, Reduction};

/// The subcommand of `svcd` that runs [`serve`].
pub const SUBCOMMAND: &str = "convert-child";

/// Descriptors sent in one message (the kernel takes at most 253).
const FDS_PER_MESSAGE: usize = 250;

/// Bytes of the request sent in one message (a message must fit the socket's buffer).
const REQUEST_PIECE: usize = 32 << 10;

/// How long a child told to stop may take to do so before it is killed: a chunk in
/// flight is encoded and written first.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The longest a reader's request computes in a child (a read that never returns, from a
/// stalled network file system, uses no processor time).
const ON_DEMAND_SECONDS: u64 = 120;

/// What a child is asked for.
#[derive(Serialize, Deserialize)]
struct Request {
    /// The sources' paths as the user gave them (for messages) and their [`Version`] as the
    /// daemon opened them; their descriptors come apart, in order.
    sources: Vec<(PathBuf, Version)>,
    chunking: Chunking,
    compressor: Compressor,
    /// The address space the child may take, in bytes (0: no bound).
    memory: u64,
    task: Task,
}

/// What a child does.
#[derive(Serialize, Deserialize)]
enum Task {
    /// Convert the sources into `dir` ([`convert`]).
    Convert {
        aggregation: Option<Aggregation>,
        reduction: Option<Reduction>,
        dir: PathBuf,
        /// [`Reserve::bytes`].
        reserve: u64,
        /// Whether each file is taken from the owner's allowance (asked of the daemon).
        allowance: bool,
        /// Milliseconds until the conversion's time is up (`None`: no limit).
        millis_left: Option<u64>,
    },
    /// The store's metadata documents ([`layout`]).
    Layout,
    /// A chunk's stored bytes ([`chunk`]).
    Chunk {
        array: String,
        index: Vec<u64>,
        zarray: Value,
        most_bytes: u64,
    },
}

/// What a child says, a JSON line each.
#[derive(Serialize, Deserialize)]
enum Said {
    /// Asks for this many bytes on disk from the owner's allowance.
    Take(u64),
    /// The conversion ended: complete, or interrupted.
    Converted { complete: bool },
    /// The store's metadata documents.
    Layout(Map<String, Value>),
    /// The chunk's bytes follow, this many (`None`: only the conversion gives it).
    Chunk(Option<u64>),
    /// The task failed, for this reason.
    Failed(String),
}

/// Converts `sources` into `dir`, as [`super::convert_file`] (one source, neither combined
/// nor reduced) or [`super::convert_sources`] do, in a child process whose address space
/// is bounded by `memory` bytes (0: no bound); each file it writes is taken from
/// `reserve`'s allowance here, in the daemon. A `stop` is passed on to the child, which is
/// killed when it does not stop within [`STOP_GRACE`].
///
/// # Errors
/// A reason for the store's failed status: the conversion's, or how its process ended (a
/// crash, the bound), or that it could not be started.
#[expect(
    clippy::too_many_arguments,
    reason = "as convert_sources, with the child's bound"
)]
pub(crate) fn convert(
    sources: &[Source],
    owner: &str,
    aggregation: Option<&Aggregation>,
    reduction: Option<&Reduction>,
    dir: &Path,
    chunking: &Chunking,
    compressor: Compressor,
    reserve: Reserve,
    memory: u64,
    stop: &Stop,
) -> Result<Written, String> {
    if !super::apart() {
        return convert_here(
            sources,
            aggregation,
            reduction,
            dir,
            chunking,
            compressor,
            reserve,
            stop,
        );
    }
    // Every source's metadata read first, in a few probes rather than one per source.
    probe::check(&sources.iter().collect::<Vec<_>>(), Some(stop))?;
    let millis_left = stop
        .deadline()
        .map(|deadline| deadline.saturating_duration_since(Instant::now()))
        .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    let task = Task::Convert {
        aggregation: aggregation.cloned(),
        reduction: reduction.cloned(),
        dir: dir.to_path_buf(),
        reserve: reserve.bytes,
        allowance: reserve.allowance.is_some(),
        millis_left,
    };
    let mut child = Child::start(sources, chunking, compressor, memory, task, owner)?;
    loop {
        match child.next(stop, STOP_GRACE)? {
            Said::Take(bytes) => {
                let taken = match &reserve.allowance {
                    Some(allowance) => allowance.take_on_disk(bytes),
                    None => Ok(()),
                };
                child.reply(taken)?;
            }
            Said::Converted { complete: true } => {
                // Done with the socket: the child reads its next request from it.
                if child.send(b'e', &[], &[]).is_ok() {
                    child.keep();
                }
                return Ok(Written::Complete);
            }
            Said::Converted { complete: false } => return Ok(Written::Interrupted),
            Said::Failed(reason) => return Err(reason),
            Said::Layout(_) | Said::Chunk(_) => return Err(child.confused()),
        }
    }
}

/// [`convert`] in this process.
#[expect(clippy::too_many_arguments, reason = "as convert_sources")]
fn convert_here(
    sources: &[Source],
    aggregation: Option<&Aggregation>,
    reduction: Option<&Reduction>,
    dir: &Path,
    chunking: &Chunking,
    compressor: Compressor,
    reserve: Reserve,
    stop: &Stop,
) -> Result<Written, String> {
    match (aggregation, reduction) {
        (None, None) => super::convert_file(&sources[0], dir, chunking, compressor, reserve, stop),
        _ => super::convert_sources(
            sources,
            aggregation,
            reduction,
            dir,
            chunking,
            compressor,
            reserve,
            stop,
        ),
    }
    .map(|(_, written)| written)
}

/// The metadata documents of the store converted from `source` with `chunking` and
/// `compressor`, as [`super::layout_on_demand`] gives them, computed in a child process
/// bounded by `memory` bytes, within [`ON_DEMAND_SECONDS`].
///
/// # Errors
/// As [`super::layout_on_demand`], or how the child ended.
pub(crate) fn layout(
    source: &Source,
    owner: &str,
    chunking: &Chunking,
    compressor: Compressor,
    memory: u64,
) -> Result<Map<String, Value>, String> {
    if !super::apart() {
        return super::layout_on_demand(source, chunking, compressor)
            .map(|layout| layout.documents);
    }
    probe::check(&[source], None)?;
    let mut child = Child::start(
        std::slice::from_ref(source),
        chunking,
        compressor,
        memory,
        Task::Layout,
        owner,
    )?;
    match child.next(&on_demand_stop(), Duration::ZERO)? {
        Said::Layout(documents) => {
            child.keep();
            Ok(documents)
        }
        Said::Failed(reason) => Err(reason),
        _ => Err(child.confused()),
    }
}

/// Chunk `index` of array `array` of the store converted from `source`, as
/// [`super::chunk_on_demand`] gives it, computed in a child process bounded by `memory`
/// bytes, within [`ON_DEMAND_SECONDS`].
///
/// # Errors
/// As [`super::chunk_on_demand`], or how the child ended.
#[expect(
    clippy::too_many_arguments,
    reason = "as chunk_on_demand, with the child's bound"
)]
pub(crate) fn chunk(
    source: &Source,
    owner: &str,
    chunking: &Chunking,
    compressor: Compressor,
    array: &str,
    index: &[u64],
    zarray: &Value,
    most_bytes: u64,
    memory: u64,
) -> Result<Option<Vec<u8>>, String> {
    if !super::apart() {
        return super::chunk_on_demand(
            source, chunking, compressor, array, index, zarray, most_bytes,
        );
    }
    probe::check(&[source], None)?;
    let task = Task::Chunk {
        array: array.to_string(),
        index: index.to_vec(),
        zarray: zarray.clone(),
        most_bytes,
    };
    let mut child = Child::start(
        std::slice::from_ref(source),
        chunking,
        compressor,
        memory,
        task,
        owner,
    )?;
    match child.next(&on_demand_stop(), Duration::ZERO)? {
        Said::Chunk(None) => {
            child.keep();
            Ok(None)
        }
        Said::Chunk(Some(len)) => {
            // Read as it comes: a child that claims more than it sends costs nothing.
            let mut bytes = Vec::new();
            let read = (&mut child.said).take(len).read_to_end(&mut bytes);
            if read.is_err() || bytes.len() as u64 != len {
                return Err(child.ended());
            }
            child.keep();
            Ok(Some(bytes))
        }
        Said::Failed(reason) => Err(reason),
        _ => Err(child.confused()),
    }
}

/// A request's bound in time: [`ON_DEMAND_SECONDS`] from now (its child, which has nothing
/// to leave in order, is killed then).
fn on_demand_stop() -> Stop {
    Stop::default().until(Instant::now() + Duration::from_secs(ON_DEMAND_SECONDS))
}

/// A child process, killed (and waited for) when dropped before it ended.
struct Child {
    process: std::process::Child,
    socket: OwnedFd,
    said: std::io::BufReader<std::process::ChildStdout>,
    /// The first source's path, for messages.
    shown: String,
    /// The bound of its address space, for messages.
    memory: u64,
    /// When it was told to stop.
    told_to_stop: Option<Instant>,
    /// Whose stores it does tasks for.
    owner: String,
    /// Tasks it was given.
    tasks: usize,
}

/// Children that did a task (a conversion, or a reader's request) and wait for the next on
/// the stores of the same owner, the most recently used last: starting one, and the
/// libraries' first reads in it, cost more than converting a small file or computing a
/// chunk. Each reads the files of one owner only, so whatever a file left in a process (a
/// hostile file's damage that did not end it) meets only the same owner's files.
static WAITING: Mutex<Vec<Child>> = Mutex::new(Vec::new());

/// The most children left waiting, all owners together.
const MOST_WAITING: usize = 4;

/// Tasks one child does at most: what the libraries keep of each file adds up in it.
const TASKS_PER_CHILD: usize = 256;

impl Drop for Child {
    fn drop(&mut self) {
        if !matches!(self.process.try_wait(), Ok(Some(_))) {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
        ready::refill();
    }
}

impl Child {
    /// A child for `task` on `sources` of a store of `owner`, sent the request: one that did
    /// an earlier task on the same owner's stores and waits for the next ([`Child::keep`]),
    /// or a new one.
    fn start(
        sources: &[Source],
        chunking: &Chunking,
        compressor: Compressor,
        memory: u64,
        task: Task,
        owner: &str,
    ) -> Result<Child, String> {
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot start a conversion's process: {e}");
        let mut child = match Child::waiting(owner, memory) {
            Some(child) => child,
            None => {
                let (process, socket, said) = ready::take().map_err(|e| failed(&e))?;
                Child {
                    process,
                    socket,
                    said,
                    shown: String::new(),
                    memory,
                    told_to_stop: None,
                    owner: owner.to_string(),
                    tasks: 0,
                }
            }
        };
        // A waiting child has the same bound and was not told to stop (`Child::keep`).
        child.shown = shown(sources);
        child.tasks += 1;
        let request = Request {
            sources: sources
                .iter()
                .map(|source| (source.path.clone(), source.opened))
                .collect(),
            chunking: *chunking,
            compressor,
            memory,
            task,
        };
        let text = serde_json::to_vec(&request).map_err(|e| failed(&e))?;
        let sent = text
            .chunks(REQUEST_PIECE)
            .try_for_each(|piece| child.send(b'r', piece, &[]))
            .and_then(|()| {
                let fds: Vec<RawFd> = sources.iter().map(|s| s.file.as_raw_fd()).collect();
                fds.chunks(FDS_PER_MESSAGE)
                    .try_for_each(|fds| child.send(b'f', &[], fds))
            })
            .and_then(|()| child.send(b'g', &[], &[]));
        match sent {
            Ok(()) => Ok(child),
            // One that ended before it read all says why as it is waited for; one that
            // lives is killed as it drops.
            Err(e) => match child.process.try_wait() {
                Ok(Some(_)) => Err(child.ended()),
                _ => Err(failed(&e)),
            },
        }
    }

    /// Sends a message tagged `tag` with `body` and descriptors `fds`.
    fn send(&self, tag: u8, body: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
        use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
        let rights = [ControlMessage::ScmRights(fds)];
        let control: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
        sendmsg::<UnixAddr>(
            self.socket.as_raw_fd(),
            &[std::io::IoSlice::new(&[tag]), std::io::IoSlice::new(body)],
            control,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )?;
        Ok(())
    }

    /// Answers the child's ask for room.
    fn reply(&self, taken: Result<(), String>) -> Result<(), String> {
        let sent = match taken {
            Ok(()) => self.send(b'o', &[], &[]),
            Err(reason) => self.send(b'n', reason.as_bytes(), &[]),
        };
        sent.map_err(|e| format!("a conversion's process ended: {e}"))
    }

    /// What the child says next; passes `stop` on to it when requested, and kills it when
    /// it does not stop within `grace`.
    ///
    /// # Errors
    /// How the child ended, when it ended without saying more; that it did not stop.
    fn next(&mut self, stop: &Stop, grace: Duration) -> Result<Said, String> {
        loop {
            if stop.requested() {
                match self.told_to_stop {
                    // A reader's request has nothing to leave in order: ended at once, and
                    // told nothing it would find in its next request.
                    None if grace.is_zero() => {
                        return Err(format!(
                            "{}: computing it took longer than its time, and its process \
                             was killed",
                            self.shown
                        ));
                    }
                    None => {
                        // One that cannot hear it is ending anyway: its end tells.
                        let _ = self.send(b's', &[], &[]);
                        self.told_to_stop = Some(Instant::now());
                    }
                    Some(told) if told.elapsed() >= grace => {
                        return Err(format!(
                            "{}: the conversion's process did not stop within {} s, and was \
                             killed",
                            self.shown,
                            grace.as_secs()
                        ));
                    }
                    Some(_) => {}
                }
            }
            if self.said.buffer().is_empty()
                && !probe::readable_within(self.said.get_ref().as_fd(), probe::STOP_CHECK)
            {
                continue;
            }
            let mut line = String::new();
            let read = self.said.read_line(&mut line).unwrap_or(0);
            if read == 0 || !line.ends_with('\n') {
                return Err(self.ended());
            }
            return serde_json::from_str(&line).map_err(|_| self.confused());
        }
    }

    /// Why the child ended without an answer: a crash (a source the libraries cannot
    /// read), its bound, or someone killed it.
    fn ended(&mut self) -> String {
        use std::os::unix::process::ExitStatusExt;
        let status = match self.process.wait() {
            Ok(status) => status,
            Err(e) => return format!("{}: a conversion's process ended: {e}", self.shown),
        };
        let bound = if self.memory == 0 {
            String::new()
        } else {
            format!(
                "; it may take {} MiB (stores.max_conversion_memory_mib)",
                self.memory >> 20
            )
        };
        match status.signal() {
            Some(libc::SIGKILL) => format!(
                "{}: the conversion's process was killed (SIGKILL: out of memory, or from \
                 outside)",
                self.shown
            ),
            // Signals a process gets from the library's faults, or its own limits; any other
            // came from outside.
            Some(signal)
                if ![
                    libc::SIGSEGV,
                    libc::SIGABRT,
                    libc::SIGBUS,
                    libc::SIGILL,
                    libc::SIGFPE,
                    libc::SIGTRAP,
                    libc::SIGSYS,
                    libc::SIGXCPU,
                    libc::SIGXFSZ,
                ]
                .contains(&signal) =>
            {
                format!(
                    "{}: the conversion's process was ended from outside (signal {signal}, {})",
                    self.shown,
                    probe::signal_name(signal)
                )
            }
            Some(signal) => format!(
                "{}: the conversion's process ended reading the sources (signal {signal}, {}): \
                 a source is damaged, or claims more than it holds{bound}",
                self.shown,
                probe::signal_name(signal)
            ),
            None => format!(
                "{}: the conversion's process ended ({status}) without an answer{bound}; the \
                 daemon's log says why",
                self.shown
            ),
        }
    }

    /// What a child that said something out of place is taken to mean.
    fn confused(&self) -> String {
        format!(
            "{}: a conversion's process answered out of place",
            self.shown
        )
    }

    /// A child left waiting by [`Child::keep`] for the stores of `owner`, still alive, that
    /// did tasks bounded by `memory` (a conversion's, or a reader's request's: a child that
    /// converted may hold more than a request may take).
    fn waiting(owner: &str, memory: u64) -> Option<Child> {
        let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        let at = waiting
            .iter()
            .rposition(|child| child.owner == owner && child.memory == memory)?;
        let mut child = waiting.remove(at);
        drop(waiting);
        matches!(child.process.try_wait(), Ok(None)).then_some(child)
    }

    /// Leaves a child whose answer was read whole waiting for the next task on the same
    /// owner's stores, unless it did [`TASKS_PER_CHILD`] already; the one waiting longest
    /// ends when more than [`MOST_WAITING`] would wait.
    fn keep(self) {
        // One told to stop may find that in its socket still.
        if self.tasks >= TASKS_PER_CHILD || self.told_to_stop.is_some() {
            return;
        }
        let ended = {
            let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
            waiting.push(self);
            (waiting.len() > MOST_WAITING).then(|| waiting.remove(0))
        };
        // Killed and waited for outside the lock.
        drop(ended);
        ready::refill();
    }
}

/// The child's side (`svcd convert-child`): reads the request on standard input (a socket),
/// does it, and says the outcome on standard output.
///
/// # Errors
/// When the socket or standard output fail, or the request cannot be read.
pub fn serve() -> std::io::Result<()> {
    // Ends with the daemon's thread that started it (one that lives as long as the daemon,
    // see `ready`): a conversion left running by a daemon that was killed would write into
    // the store its next run writes again. (One whose daemon ended before this finds the
    // request's socket closed.)
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    probe::ignore_outside_stops()?;
    // The first the kernel ends when memory runs out, before the daemon.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    probe::close_inherited();
    // A crash is an outcome: no core dump of each hostile file.
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)?;
    let said = Arc::new(Mutex::new(std::io::BufWriter::new(std::fs::File::from(
        nix::unistd::dup(std::io::stdout())?,
    ))));
    nix::unistd::dup2_stdout(std::io::stderr())?;
    let socket = std::io::stdin().as_raw_fd();
    // Tasks follow one another until one fails or the daemon closes the socket (it keeps
    // the child waiting for the next task on the same owner's stores, see `Child::keep`).
    loop {
        // A child started ahead, or left waiting, whose daemon is done with it ends quietly.
        let Some((request, fds)) = receive_request(socket)? else {
            return Ok(());
        };
        let request: Request = serde_json::from_slice(&request)
            .map_err(|e| std::io::Error::other(format!("an unreadable request: {e}")))?;
        if fds.len() != request.sources.len() {
            return Err(std::io::Error::other("a request with too few descriptors"));
        }
        let sources: Vec<Source> = request
            .sources
            .into_iter()
            .zip(fds)
            .map(|((path, opened), fd)| Source {
                path,
                file: std::fs::File::from(fd),
                opened,
            })
            .collect();
        let memory = request.memory;
        if memory > 0 {
            // The hard limit too: what the process runs cannot raise it again.
            let resource = nix::sys::resource::Resource::RLIMIT_AS;
            let (_, hard) = nix::sys::resource::getrlimit(resource)?;
            let bound = memory.min(hard);
            nix::sys::resource::setrlimit(resource, bound, bound)?;
        }
        // The peak of resident memory (VmHWM) is this task's.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let (outcome, listening) = run(
            &sources,
            request.chunking,
            request.compressor,
            request.task,
            socket,
            &said,
        );
        {
            let mut said = said.lock().unwrap_or_else(|e| e.into_inner());
            match outcome {
                Ok((outcome, bytes)) => {
                    say(&mut *said, &outcome)?;
                    said.write_all(&bytes)?;
                    said.flush()?;
                }
                Err(reason) => {
                    return say(&mut *said, &Said::Failed(reason + &near_bound(memory)));
                }
            }
        }
        // The daemon's `e`, or its closing the socket, ends the listening.
        if let Some(listening) = listening {
            let _ = listening.join();
        }
    }
}

/// What a task gives: what to say and the bytes that follow, or why it failed.
type Outcome = Result<(Said, Vec<u8>), String>;

/// Does `task` on `sources`: its outcome, and for a conversion the thread that listens to
/// the daemon meanwhile ([`listen`]).
fn run(
    sources: &[Source],
    chunking: Chunking,
    compressor: Compressor,
    task: Task,
    socket: RawFd,
    said: &Arc<Mutex<std::io::BufWriter<std::fs::File>>>,
) -> (Outcome, Option<std::thread::JoinHandle<()>>) {
    let outcome = match task {
        Task::Convert {
            aggregation,
            reduction,
            dir,
            reserve,
            allowance,
            millis_left,
        } => {
            let stop = match millis_left {
                Some(millis) => {
                    Stop::default().until(Instant::now() + Duration::from_millis(millis))
                }
                None => Stop::default(),
            };
            let (granted, answers) = std::sync::mpsc::channel();
            let listening = listen(socket, stop.clone(), granted);
            let asked: Arc<dyn Take> = Arc::new(Asked {
                said: Arc::clone(said),
                answers: Mutex::new(answers),
            });
            let reserve = Reserve {
                bytes: reserve,
                allowance: allowance.then_some(asked),
            };
            let converted = unwound(sources, || {
                convert_here(
                    sources,
                    aggregation.as_ref(),
                    reduction.as_ref(),
                    &dir,
                    &chunking,
                    compressor,
                    reserve,
                    &stop,
                )
            })
            .map(|written| {
                let complete = written == Written::Complete;
                (Said::Converted { complete }, Vec::new())
            });
            return (converted, Some(listening));
        }
        Task::Layout => unwound(sources, || {
            super::layout_on_demand(&sources[0], &chunking, compressor)
        })
        .map(|layout| (Said::Layout(layout.documents), Vec::new())),
        Task::Chunk {
            array,
            index,
            zarray,
            most_bytes,
        } => unwound(sources, || {
            super::chunk_on_demand(
                &sources[0],
                &chunking,
                compressor,
                &array,
                &index,
                &zarray,
                most_bytes,
            )
        })
        .map(|bytes| match bytes {
            Some(bytes) => (Said::Chunk(Some(bytes.len() as u64)), bytes),
            None => (Said::Chunk(None), Vec::new()),
        }),
    };
    (outcome, None)
}

/// What to add to a failure's reason when the process's resident memory came near its
/// bound of `memory` bytes of address space during the task (more than three quarters of
/// it; the peak is reset as each task begins): the library reports an allocation past the
/// bound as any other error ("HDF error"), and what it allocates for a file's claims, it
/// fills.
fn near_bound(memory: u64) -> String {
    let peak = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib << 10);
    if memory == 0 || peak <= memory / 4 * 3 {
        return String::new();
    }
    format!(
        " (its process took {} MiB of the {} MiB it may take, \
         stores.max_conversion_memory_mib)",
        peak >> 20,
        memory >> 20
    )
}

/// `sources` in messages: the one's path, or how many, and the first.
fn shown(sources: &[Source]) -> String {
    match sources {
        [source] => source.path.display().to_string(),
        [first, ..] => format!(
            "one of the {} sources (the first {})",
            sources.len(),
            first.path.display()
        ),
        [] => "no source".into(),
    }
}

/// Writes `what` as a JSON line.
fn say(out: &mut impl Write, what: &Said) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, what)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// `run`'s result, with a panic (the `netcdf` crate panics on some errors of the library,
/// as an allocation past the bound) as a reason naming `sources`.
fn unwound<T>(sources: &[Source], run: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(format!(
            "{}: the NetCDF library failed reading it ({what}): a damaged file, or one that \
             claims more than it holds, or more than a conversion may take \
             (stores.max_conversion_memory_mib)",
            shown(sources)
        ))
    })
}

/// The owner's allowance as the child sees it: each file asked of the daemon.
struct Asked {
    said: Arc<Mutex<std::io::BufWriter<std::fs::File>>>,
    answers: Mutex<std::sync::mpsc::Receiver<Result<(), String>>>,
}

impl Take for Asked {
    fn take_on_disk(&self, bytes: u64) -> Result<(), String> {
        // One ask at a time, each with its answer.
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
            say(&mut *said, &Said::Take(bytes)).map_err(|e| format!("the daemon is gone: {e}"))?;
        }
        answers
            .recv()
            .unwrap_or_else(|_| Err("the daemon stopped the conversion".into()))
    }
}

/// Reads the rest of what the daemon sends during a conversion, on a thread of its own:
/// answers to asks for room go to `granted`; a stop, or the socket closing (the daemon
/// ended), requests `stop`; `e` (the daemon read the outcome and keeps the child waiting)
/// ends the thread, so that the next request is read by the child's main thread.
fn listen(
    socket: RawFd,
    stop: Stop,
    granted: std::sync::mpsc::Sender<Result<(), String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut message = vec![0u8; REQUEST_PIECE + 1];
        loop {
            match nix::sys::socket::recv(socket, &mut message, nix::sys::socket::MsgFlags::empty())
            {
                Ok(0) | Err(_) => break,
                Ok(len) => match message[0] {
                    b'o' => {
                        let _ = granted.send(Ok(()));
                    }
                    b'n' => {
                        let reason = String::from_utf8_lossy(&message[1..len]).into_owned();
                        let _ = granted.send(Err(reason));
                    }
                    b'e' => return,
                    _ => stop.request(),
                },
            }
        }
        stop.request();
    })
}

/// The request's JSON and the sources' descriptors, up to the `g` that ends them; `None`
/// when the socket closes before the request begins.
fn receive_request(socket: RawFd) -> std::io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut request = Vec::new();
    let mut fds = Vec::new();
    let mut message = vec![0u8; REQUEST_PIECE + 1];
    loop {
        let mut space = nix::cmsg_space!([RawFd; FDS_PER_MESSAGE]);
        let len = {
            let mut iov = [std::io::IoSliceMut::new(&mut message)];
            let received = recvmsg::<()>(
                socket,
                &mut iov,
                Some(space.as_mut_slice()),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )?;
            for cmsg in received.cmsgs()? {
                if let ControlMessageOwned::ScmRights(received) = cmsg {
                    // SAFETY: the kernel made these descriptors for this process, and
                    // nothing else owns them.
                    #[allow(unsafe_code)]
                    fds.extend(
                        received
                            .into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            received.bytes
        };
        match message.first() {
            _ if len == 0 && request.is_empty() && fds.is_empty() => return Ok(None),
            _ if len == 0 => return Err(std::io::Error::other("the request ended early")),
            Some(b'r') => request.extend_from_slice(&message[1..len]),
            Some(b'f') => {}
            Some(b'g') => return Ok(Some((request, fds))),
            _ => return Err(std::io::Error::other("a message out of place")),
        }
    }
}

/// Children started ahead of their work, waiting for their first request: starting one
/// (the program and its libraries loaded, 10 ms and more) is then not on the way of a
/// reader waiting for a chunk computed on request. Every child is started by one thread,
/// which lives as long as the daemon: a child ends when the thread that started it ends
/// (`PR_SET_PDEATHSIG`), and one started by a thread of a pool that ends idle threads would
/// end in the middle of a later task.
pub(super) mod ready {
    use std::sync::Mutex;
    use std::sync::mpsc::{Sender, channel};

    use super::{SUBCOMMAND, probe};

    /// A started child: its process, the daemon's end of its socket, and its output.
    pub(super) type Started = (
        std::process::Child,
        std::os::fd::OwnedFd,
        std::io::BufReader<std::process::ChildStdout>,
    );

    /// Children kept waiting for their first request.
    const WAITING: usize = 2;

    static READY: Mutex<Vec<Started>> = Mutex::new(Vec::new());

    /// What the starting thread is asked for: a child now, on this channel, or to fill
    /// [`READY`] (`None`).
    type Wanted = Option<Sender<std::io::Result<Started>>>;

    /// A started child: a waiting one, or one the starting thread starts now. Another is
    /// started to take its place once its task is done ([`refill`]): started now, it would
    /// take the processor from the task (10 ms and more, on a machine of two cores).
    ///
    /// # Errors
    /// When no process can be started.
    pub(super) fn take() -> std::io::Result<Started> {
        {
            let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(mut started) = ready.pop() {
                if matches!(started.0.try_wait(), Ok(None)) {
                    return Ok(started);
                }
            }
        }
        let (sent, started) = channel();
        if starter().send(Some(sent)).is_err() {
            return Err(std::io::Error::other(
                "the thread that starts them has ended",
            ));
        }
        started
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the thread that starts them ended")))
    }

    /// Has the starting thread fill [`READY`], in the background.
    pub(crate) fn refill() {
        let _ = starter().send(None);
    }

    /// The channel to the thread that starts children, started with the first use.
    fn starter() -> &'static Sender<Wanted> {
        static STARTER: std::sync::OnceLock<Sender<Wanted>> = std::sync::OnceLock::new();
        STARTER.get_or_init(|| {
            let (wanted, wants) = channel::<Wanted>();
            let started = std::thread::Builder::new()
                .name("svcd-children".into())
                .spawn(move || {
                    for wanted in wants {
                        if let Some(sent) = wanted {
                            let _ = sent.send(probe::spawn(SUBCOMMAND));
                            continue;
                        }
                        while READY.lock().unwrap_or_else(|e| e.into_inner()).len() < WAITING {
                            match probe::spawn(SUBCOMMAND) {
                                Ok(started) => READY
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(started),
                                Err(e) => {
                                    tracing::warn!("cannot start a conversion's process: {e}");
                                    break;
                                }
                            }
                        }
                    }
                });
            if let Err(e) = started {
                tracing::warn!("cannot start the thread that starts conversions' processes: {e}");
            }
            wanted
        })
    }
}
