//! The NetCDF and HDF5 libraries read users' files only in child processes: a conversion
//! runs in a process of its own, and so does each metadata document or chunk a reader asks
//! for before the conversion wrote it ([`convert`], [`layout`], [`chunk`]). The daemon hands
//! the process its own descriptors of the sources (over a socket, `SCM_RIGHTS`, as to a
//! [`super::probe`]); the process's address space is bounded
//! (`stores.max_conversion_memory_mib`), and it is confined to its sources and its store
//! ([`super::confine`]).
//!
//! Why: what the libraries allocate, and whether they crash, follows from the file's
//! bytes, and a file's owner can change its bytes at any time, also after a probe read them
//! and without changing its size or times (through a shared mapping whose page is already
//! dirty), so no check made before the libraries read a file holds while they read it.
//! HDF5 also allocates again, for each element of a string variable never written, the
//! length its fill value claims, which the probe sees only once. In a process of its own,
//! such a file fails its own conversion or request (an allocation past the bound fails; a
//! crash ends the process) and nothing else: the daemon, its other conversions and readers
//! go on. And were a file to make a library run code of its choosing, that code could
//! reach little but the task's own sources and store ([`super::confine`] says what).
//!
//! The processes: `svcd convert-child` ([`serve`]) never reads a user's file. It receives
//! each task and forks the task's process, which confines itself, does the task and ends;
//! a fork is what makes confining each task to its own files possible (a process can narrow
//! what it may open, never widen it), and it costs far less than starting the program and
//! its libraries (10 ms and more). A few such processes wait for work from the daemon's
//! start, and each serves task after task, for every owner ([`ready`]).
//!
//! The protocol. The daemon sends a `convert-child` process each request on its standard
//! input, a `SOCK_SEQPACKET` socket (messages tagged by their first byte): the request as
//! JSON in pieces (`r`), descriptors (`f`, at most [`FDS_PER_MESSAGE`] each: first the
//! task's socket and the task's pipe, then the sources) and `g` to start. The task's process
//! talks to the daemon on the task's own socket and pipe only:
//! - it says what it has to say as JSON lines ([`Said`]) on the pipe, a chunk's bytes after
//!   its line (what the libraries print goes to standard error, the daemon's log);
//! - during a conversion the daemon answers its asks for room on the socket (`o`: taken;
//!   `n` and the reason: refused), and sends `s` when the conversion is to stop.
//!
//! Once the task's process ended, the `convert-child` process says how
//! ([`Said::Ended`]) on its standard output, and waits for the next request. Nothing a task
//! leaves in its socket or pipe reaches another task.
//!
//! Children are used once the program calls [`super::read_sources_apart`] (svcd does, as
//! it starts); a library embedding this crate without it (the unit tests) runs conversions
//! in its own process.

use std::io::{BufRead, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

/// How often the daemon looks at the room left on the file system a conversion's process
/// writes to ([`super::write::Reserve`]), and kills the process when too little is: what
/// such a process writes between two looks is what passes the reserve at most.
const ROOM_CHECK: Duration = Duration::from_millis(100);

/// How long a `convert-child` process may take to say how a task's process ended, after
/// the task's pipe closed or its outcome was read; past that it is killed, and the task's
/// process with it.
const ENDED_WAIT: Duration = Duration::from_secs(5);

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
    /// The task's process ended (said by the `convert-child` process that forked it): its
    /// exit code, or the signal that ended it.
    Ended {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Converts `sources` into `dir`, as [`super::convert_file`] (one source, neither combined
/// nor reduced) or [`super::convert_sources`] do, in a child process whose address space
/// is bounded by `memory` bytes (0: no bound); each file it writes is taken from
/// `reserve`'s allowance here, in the daemon, which also kills the child as soon as the file
/// system has less room than `reserve` keeps ([`ROOM_CHECK`]). A `stop` is passed on to the
/// child, which is killed when it does not stop within [`STOP_GRACE`]. The sources are
/// probed first, with the answers kept for `owner`, whose store it is ([`probe::check`]).
///
/// # Errors
/// A reason for the store's failed status: the conversion's, or how its process ended (a
/// crash, the bound), or that it could not be started, or that too little room was left.
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
    probe::check(&sources.iter().collect::<Vec<_>>(), owner, Some(stop))?;
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
    let mut child = Child::start(sources, chunking, compressor, memory, task, stop)?;
    // The process looks at the room left itself, but the daemon does not count on what a
    // process that reads a hostile file does. (The store's directory is made by the process:
    // the directory of the stores is on the same file system.)
    let room = || reserve.check(dir.parent().unwrap_or(dir));
    loop {
        match child.next(stop, STOP_GRACE, Some(&room))? {
            Said::Take(bytes) => {
                let taken = match &reserve.allowance {
                    Some(allowance) => allowance.take_on_disk(bytes),
                    None => Ok(()),
                };
                child.reply(taken)?;
            }
            Said::Converted { complete } => {
                // Ended before the store is counted and listed: nothing it writes after goes
                // unchecked.
                child.finish();
                return Ok(if complete {
                    Written::Complete
                } else {
                    Written::Interrupted
                });
            }
            Said::Failed(reason) => {
                // Ended before its store's directory is removed.
                child.finish();
                return Err(reason);
            }
            _ => return Err(child.confused()),
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
/// bounded by `memory` bytes, within [`ON_DEMAND_SECONDS`] and until the daemon is `stopping`,
/// once the source was probed for `owner`.
///
/// # Errors
/// As [`super::layout_on_demand`], or how the child ended.
pub(crate) fn layout(
    source: &Source,
    owner: &str,
    chunking: &Chunking,
    compressor: Compressor,
    memory: u64,
    stopping: &Stop,
) -> Result<Map<String, Value>, String> {
    if !super::apart() {
        return super::layout_on_demand(source, chunking, compressor)
            .map(|layout| layout.documents);
    }
    let stop = on_demand_stop(stopping);
    probe::check(&[source], owner, Some(&stop))?;
    let mut child = Child::start(
        std::slice::from_ref(source),
        chunking,
        compressor,
        memory,
        Task::Layout,
        &stop,
    )?;
    let documents = match child.next(&stop, Duration::ZERO, None)? {
        Said::Layout(documents) => Ok(documents),
        Said::Failed(reason) => Err(reason),
        _ => return Err(child.confused()),
    };
    child.done();
    documents
}

/// Chunk `index` of array `array` of the store converted from `source`, as
/// [`super::chunk_on_demand`] gives it, computed in a child process bounded by `memory`
/// bytes, within [`ON_DEMAND_SECONDS`] and until the daemon is `stopping`, once the source
/// was probed for `owner`.
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
    stopping: &Stop,
) -> Result<Option<Vec<u8>>, String> {
    if !super::apart() {
        return super::chunk_on_demand(
            source, chunking, compressor, array, index, zarray, most_bytes,
        );
    }
    let stop = on_demand_stop(stopping);
    probe::check(&[source], owner, Some(&stop))?;
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
        &stop,
    )?;
    let chunk = match child.next(&stop, Duration::ZERO, None)? {
        Said::Chunk(None) => Ok(None),
        // No chunk is larger than the process that made it: one that says so would send
        // what it never held, and the daemon would hold it.
        Said::Chunk(Some(len)) if memory > 0 && len > memory => return Err(child.confused()),
        Said::Chunk(Some(len)) => child.bytes(len, &stop).map(Some),
        Said::Failed(reason) => Err(reason),
        _ => return Err(child.confused()),
    };
    child.done();
    chunk
}

/// A request's bound: [`ON_DEMAND_SECONDS`] from now, or the daemon's `stopping` (its
/// child, which has nothing to leave in order, is killed then).
fn on_demand_stop(stopping: &Stop) -> Stop {
    stopping.until(Instant::now() + Duration::from_secs(ON_DEMAND_SECONDS))
}

/// A `convert-child` process ([`serve`]), which forks a process for each task it is sent;
/// killed (and waited for) when dropped, and the task's process with it.
pub(super) struct Forker {
    process: std::process::Child,
    /// Its standard input: requests are sent there.
    socket: OwnedFd,
    /// Its standard output: how each task's process ended ([`Said::Ended`]).
    said: std::io::BufReader<std::process::ChildStdout>,
}

impl Drop for Forker {
    fn drop(&mut self) {
        if !matches!(self.process.try_wait(), Ok(Some(_))) {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
        ready::refill();
    }
}

/// A task's process: what the daemon keeps of it while it runs. Dropped before
/// [`Child::done`], it is killed, with the `convert-child` process that forked it.
struct Child {
    /// The process that forked it; given back to [`ready`] once this one ended.
    forker: Option<Forker>,
    /// The daemon's end of the task's socket.
    socket: OwnedFd,
    /// The task's pipe, on which it says what it has to say.
    said: std::io::BufReader<std::fs::File>,
    /// The first source's path, for messages.
    shown: String,
    /// The bound of its address space, for messages.
    memory: u64,
    /// When it was told to stop.
    told_to_stop: Option<Instant>,
    /// When the room left on the file system it writes to was last looked at.
    room_checked: Option<Instant>,
}

/// How a task's process ended: its exit code, or the signal that ended it.
type Ending = (Option<i32>, Option<i32>);

impl Child {
    /// A process for `task` on `sources`, forked by a waiting `convert-child` process, sent
    /// the request; what it needs is made [`super::patiently`] (until `stop`).
    fn start(
        sources: &[Source],
        chunking: &Chunking,
        compressor: Compressor,
        memory: u64,
        task: Task,
        stop: &Stop,
    ) -> Result<Child, String> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot start a conversion's process: {e}");
        // The descriptors first: a waiting process taken, then dropped for want of them,
        // would be killed.
        let make = || {
            let socket = socketpair(
                AddressFamily::Unix,
                SockType::SeqPacket,
                None,
                SockFlag::SOCK_CLOEXEC,
            )?;
            let pipe = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
            Ok((socket, pipe, ready::take()?))
        };
        // A conversion waits for what the machine lacks for a moment; a reader's request,
        // which only spares the reader a wait for the conversion, does not.
        let made = if matches!(task, Task::Convert { .. }) {
            super::patiently(Some(stop), make)
        } else {
            make()
        };
        let ((socket, its_socket), (said, its_said), forker) = made.map_err(|e| failed(&e))?;
        let mut child = Child {
            forker: Some(forker),
            socket,
            said: std::io::BufReader::new(std::fs::File::from(said)),
            shown: shown(sources),
            memory,
            told_to_stop: None,
            room_checked: None,
        };
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
        let to = &child.forker.as_ref().expect("just set").socket;
        let sent = text
            .chunks(REQUEST_PIECE)
            .try_for_each(|piece| send(to, b'r', piece, &[]))
            .and_then(|()| {
                let fds: Vec<RawFd> = [its_socket.as_raw_fd(), its_said.as_raw_fd()]
                    .into_iter()
                    .chain(sources.iter().map(|s| s.file.as_raw_fd()))
                    .collect();
                fds.chunks(FDS_PER_MESSAGE)
                    .try_for_each(|fds| send(to, b'f', &[], fds))
            })
            .and_then(|()| send(to, b'g', &[], &[]));
        // The task's process has its own ends now: the pipe closes when it ends.
        drop((its_socket, its_said));
        match sent {
            Ok(()) => Ok(child),
            // One that ended before it read all says why as it is waited for; one that
            // lives is killed as it drops.
            Err(e) => match child.forker.as_mut().map(|f| f.process.try_wait()) {
                Some(Ok(Some(_))) => Err(child.ended()),
                _ => Err(failed(&e)),
            },
        }
    }

    /// Answers the process's ask for room.
    fn reply(&self, taken: Result<(), String>) -> Result<(), String> {
        let sent = match taken {
            Ok(()) => send(&self.socket, b'o', &[], &[]),
            Err(reason) => send(&self.socket, b'n', reason.as_bytes(), &[]),
        };
        sent.map_err(|e| format!("a conversion's process ended: {e}"))
    }

    /// What the process says next; passes `stop` on to it when requested, and kills it
    /// when it does not stop within `grace`, or as soon as `room` fails (looked at every
    /// [`ROOM_CHECK`] while it writes a store).
    ///
    /// # Errors
    /// How the process ended, when it ended without saying more; that it did not stop; why
    /// `room` failed.
    fn next(
        &mut self,
        stop: &Stop,
        grace: Duration,
        room: Option<&dyn Fn() -> Result<(), String>>,
    ) -> Result<Said, String> {
        loop {
            if let Some(room) = room
                && self
                    .room_checked
                    .is_none_or(|at| at.elapsed() >= ROOM_CHECK)
            {
                self.room_checked = Some(Instant::now());
                room().map_err(|reason| format!("{reason}; its process was killed"))?;
            }
            if stop.requested() {
                match self.told_to_stop {
                    // A reader's request has nothing to leave in order: ended at once.
                    None if grace.is_zero() => {
                        let why = if stop.stopping() {
                            "the daemon is stopping"
                        } else {
                            "computing it took longer than its time"
                        };
                        return Err(format!("{}: {why}, and its process was killed", self.shown));
                    }
                    None => {
                        // One that cannot hear it is ending anyway: its end tells.
                        let _ = send(&self.socket, b's', &[], &[]);
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
            let slice = if room.is_some() {
                ROOM_CHECK
            } else {
                probe::STOP_CHECK
            };
            if !probe::readable_within(&self.said, slice) {
                continue;
            }
            let mut line = String::new();
            let read = self.said.read_line(&mut line).unwrap_or(0);
            if read == 0 || !line.ends_with('\n') {
                return Err(self.ended());
            }
            return match serde_json::from_str(&line) {
                // Only the process that forked it says how it ended.
                Ok(Said::Ended { .. }) | Err(_) => Err(self.confused()),
                Ok(said) => Ok(said),
            };
        }
    }

    /// Done with a process whose outcome was read: the `convert-child` process that forked
    /// it goes back to waiting for work once it said that this one ended, which is waited
    /// for on a thread of its own ([`Child::finish`]), so that the outcome (a reader's chunk)
    /// is not held up by the process's exit.
    fn done(self) {
        let waited = std::thread::Builder::new()
            .name("svcd-task-ended".into())
            .spawn(move || self.finish());
        if let Err(e) = waited {
            tracing::warn!("cannot wait for a conversion's process to end: {e}");
        }
    }

    /// The `len` bytes the process said follow, read as they come (one that claims more than
    /// it sends costs nothing) until `stop` is requested.
    ///
    /// # Errors
    /// How the process ended, when it sent fewer; that it took longer than its time.
    fn bytes(&mut self, len: u64, stop: &Stop) -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        let mut piece = vec![0; usize::try_from(len).unwrap_or(usize::MAX).min(1 << 20)];
        while (bytes.len() as u64) < len {
            if stop.requested() {
                return Err(format!(
                    "{}: the chunk's bytes did not come in time, and its process was killed",
                    self.shown
                ));
            }
            if !probe::readable_within(&self.said, probe::STOP_CHECK) {
                continue;
            }
            // What is there now, up to what is left: a read waits for no more.
            let left = len - bytes.len() as u64;
            match (&mut self.said).take(left).read(&mut piece) {
                Ok(0) | Err(_) => return Err(self.ended()),
                Ok(read) => bytes.extend_from_slice(&piece[..read]),
            }
        }
        Ok(bytes)
    }

    /// Done with a process whose outcome was read, once it ended (or was killed, after
    /// [`ENDED_WAIT`]).
    fn finish(mut self) {
        let _ = self.ending();
    }

    /// How the process ended, as the `convert-child` process that forked it says within
    /// [`ENDED_WAIT`] (which then goes back to waiting for work), or as that process itself
    /// ended (when it did, or did not say in time: it is killed then).
    fn ending(&mut self) -> Result<Ending, String> {
        let Some(mut forker) = self.forker.take() else {
            return Err("a conversion's process ended".into());
        };
        let said_in_time = probe::readable_within(&forker.said, ENDED_WAIT);
        let mut line = String::new();
        if said_in_time
            && forker.said.read_line(&mut line).is_ok()
            && let Ok(Said::Ended { code, signal }) = serde_json::from_str(&line)
        {
            ready::give_back(forker);
            return Ok((code, signal));
        }
        use std::os::unix::process::ExitStatusExt;
        if !matches!(forker.process.try_wait(), Ok(Some(_))) {
            let _ = forker.process.kill();
        }
        let status = forker.process.wait().map_err(|e| e.to_string())?;
        Ok((status.code(), status.signal()))
    }

    /// Why the process ended without an answer: a crash (a source the libraries cannot
    /// read), its bound, or someone killed it.
    fn ended(&mut self) -> String {
        let (code, signal) = match self.ending() {
            Ok(ending) => ending,
            Err(e) => return format!("{}: {e}", self.shown),
        };
        let bound = if self.memory == 0 {
            String::new()
        } else {
            format!(
                "; it may take {} MiB (stores.max_conversion_memory_mib)",
                self.memory >> 20
            )
        };
        match signal {
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
                "{}: the conversion's process ended (exit status {}) without an answer{bound}; \
                 the daemon's log says why",
                self.shown,
                code.map_or_else(|| "unknown".into(), |code| code.to_string())
            ),
        }
    }

    /// What a process that said something out of place is taken to mean.
    fn confused(&self) -> String {
        format!(
            "{}: a conversion's process answered out of place",
            self.shown
        )
    }
}

/// Sends on `socket` a message tagged `tag` with `body` and descriptors `fds`.
fn send(socket: &OwnedFd, tag: u8, body: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
    let rights = [ControlMessage::ScmRights(fds)];
    let control: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<UnixAddr>(
        socket.as_raw_fd(),
        &[std::io::IoSlice::new(&[tag]), std::io::IoSlice::new(body)],
        control,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

/// The `convert-child` process: reads each request on standard input (a socket), forks the
/// task's process, and says on standard output how it ended ([`Said::Ended`]). It never
/// reads a source: what a task leaves in its process ends with it.
///
/// # Errors
/// When the socket or standard output fail, or a request cannot be read.
pub fn serve() -> std::io::Result<()> {
    // Ends with the daemon's thread that started it (one that lives as long as the daemon,
    // see `ready`), and its task's process with it: a conversion left running by a daemon
    // that was killed would write into the store its next run writes again. (One whose
    // daemon ended before this finds the request's socket closed.)
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    probe::ignore_outside_stops()?;
    // The first the kernel ends when memory runs out, before the daemon (and so are the
    // tasks' processes, which inherit it).
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    probe::close_inherited();
    // A crash is an outcome: no core dump of each hostile file.
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)?;
    let mut said =
        std::io::BufWriter::new(std::fs::File::from(nix::unistd::dup(std::io::stdout())?));
    nix::unistd::dup2_stdout(std::io::stderr())?;
    let requests = std::io::stdin().as_raw_fd();
    // Not for its tasks to read or write through /proc, on a kernel without Landlock.
    nix::sys::prctl::set_dumpable(false)?;
    super::warm_up(true);
    // A process started ahead, or left waiting, whose daemon is done with it ends quietly.
    while let Some((request, fds)) = receive_request(requests)? {
        let request: Request = serde_json::from_slice(&request)
            .map_err(|e| std::io::Error::other(format!("an unreadable request: {e}")))?;
        if fds.len() != request.sources.len() + 2 {
            return Err(std::io::Error::other("a request with too few descriptors"));
        }
        let mut fds = fds.into_iter();
        let (Some(socket), Some(pipe)) = (fds.next(), fds.next()) else {
            unreachable!("counted above");
        };
        let said_fd = said.get_ref().as_raw_fd();
        let whose = match &request.task {
            Task::Convert { dir, .. } => format!("the conversion into {}", dir.display()),
            Task::Layout => "a store's metadata computed on request".to_string(),
            Task::Chunk { array, index, .. } => {
                format!("the chunk {array} {index:?} computed on request")
            }
        };
        // The listening thread of a conversion runs in the task's process. Its descriptors
        // go with the closure: closed here as the fork is made.
        let task = super::fork_task(move || {
            // The task's process has no business with the requests, nor with how tasks end.
            let _ = nix::unistd::close(said_fd);
            let _ = nix::unistd::close(requests);
            task(request, fds.collect(), &socket, pipe)
        })?;
        let (code, signal) = super::reap(task, &whose)?;
        say(&mut said, &Said::Ended { code, signal })?;
    }
    Ok(())
}

/// The task's process: bounds and confines itself, does the task, and says its outcome on
/// `pipe`. Its exit code.
fn task(request: Request, fds: Vec<OwnedFd>, socket: &OwnedFd, pipe: OwnedFd) -> i32 {
    let said = Arc::new(Mutex::new(std::io::BufWriter::new(std::fs::File::from(
        pipe,
    ))));
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
    // Read as the task fails: the process may open no file then.
    let status = std::fs::File::open("/proc/self/status").ok();
    let outcome = bound_and_confine(&sources, memory, &request.task).and_then(|()| {
        run(
            &sources,
            request.chunking,
            request.compressor,
            request.task,
            socket.as_raw_fd(),
            &said,
        )
    });
    let mut said = said.lock().unwrap_or_else(|e| e.into_inner());
    let told = match outcome {
        Ok((outcome, bytes)) => say(&mut *said, &outcome)
            .and_then(|()| said.write_all(&bytes))
            .and_then(|()| said.flush()),
        Err(reason) => say(
            &mut *said,
            &Said::Failed(reason + &near_bound(memory, status)),
        ),
    };
    i32::from(told.is_err())
}

/// Bounds this process's address space by `memory` bytes (0: no bound) and confines it to
/// `sources` and, for a conversion, its store's directory (created here).
fn bound_and_confine(sources: &[Source], memory: u64, task: &Task) -> Result<(), String> {
    if memory > 0 {
        // The hard limit too: what the process runs cannot raise it again.
        let resource = nix::sys::resource::Resource::RLIMIT_AS;
        nix::sys::resource::getrlimit(resource)
            .and_then(|(_, hard)| {
                let bound = memory.min(hard);
                nix::sys::resource::setrlimit(resource, bound, bound)
            })
            .map_err(|e| format!("cannot bound a conversion's process: {e}"))?;
    }
    let store = match task {
        Task::Convert { dir, .. } => {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            Some(dir.as_path())
        }
        Task::Layout | Task::Chunk { .. } => None,
    };
    let files: Vec<&std::fs::File> = sources.iter().map(|source| &source.file).collect();
    super::confine::confine(&files, store, true)
}

/// Does `task` on `sources`: what to say, and the bytes that follow, or why it failed. A
/// conversion listens to the daemon meanwhile, on a thread of its own ([`listen`]).
fn run(
    sources: &[Source],
    chunking: Chunking,
    compressor: Compressor,
    task: Task,
    socket: RawFd,
    said: &Arc<Mutex<std::io::BufWriter<std::fs::File>>>,
) -> Result<(Said, Vec<u8>), String> {
    match task {
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
            listen(socket, stop.clone(), granted);
            let asked: Arc<dyn Take> = Arc::new(Asked {
                said: Arc::clone(said),
                answers: Mutex::new(answers),
            });
            let reserve = Reserve {
                bytes: reserve,
                allowance: allowance.then_some(asked),
            };
            unwound(sources, || {
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
            })
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
    }
}

/// What to add to a failure's reason when the process's resident memory came near its
/// bound of `memory` bytes of address space (more than three quarters of it; `status` is
/// its `/proc/self/status`, opened before it was confined): the library reports an
/// allocation past the bound as any other error ("HDF error"), and what it allocates for a
/// file's claims, it fills.
fn near_bound(memory: u64, status: Option<std::fs::File>) -> String {
    let peak = status
        .and_then(|mut status| {
            let mut text = String::new();
            status.read_to_string(&mut text).ok()?;
            Some(text)
        })
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
        let what = super::panic_text(&*panic);
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
/// ended), requests `stop`. It ends with the process.
fn listen(socket: RawFd, stop: Stop, granted: std::sync::mpsc::Sender<Result<(), String>>) {
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
                    _ => stop.request(),
                },
            }
        }
        stop.request();
    });
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

/// The `convert-child` processes waiting for work: [`STARTED_AHEAD`] from the daemon's start
/// (starting one, the program and its libraries loaded, takes 10 ms and more, which is then
/// not on the way of a reader waiting for a chunk computed on request), and those given
/// back after a task, up to [`MOST_WAITING`]. Any serves any owner: it reads no source.
///
/// Every one is started by one thread, which lives as long as the daemon: a child ends when
/// the thread that started it ends (`PR_SET_PDEATHSIG`), and one started by a thread of a
/// pool that ends idle threads would end in the middle of a later task.
pub(super) mod ready {
    use std::sync::Mutex;
    use std::sync::mpsc::{Sender, channel};

    use super::{Forker, SUBCOMMAND, probe};

    /// Processes started ahead of their first request.
    const STARTED_AHEAD: usize = 2;

    /// The most processes left waiting: each is some 20 MiB, and more than the workers
    /// and readers at once use is of no use.
    const MOST_WAITING: usize = 4;

    static WAITING: Mutex<Vec<Forker>> = Mutex::new(Vec::new());

    /// What the starting thread is asked for: a process now, on this channel, or to start
    /// [`STARTED_AHEAD`] (`None`).
    type Wanted = Option<Sender<std::io::Result<Forker>>>;

    /// A waiting process, or one the starting thread starts now. Another is started to take
    /// its place once its task is done ([`refill`], from [`Forker`]'s drop): started now,
    /// it would take the processor from the task (10 ms and more, on a machine of two
    /// cores).
    ///
    /// # Errors
    /// When no process can be started.
    pub(super) fn take() -> std::io::Result<Forker> {
        loop {
            let waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(mut forker) = waiting else { break };
            if matches!(forker.process.try_wait(), Ok(None)) {
                return Ok(forker);
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

    /// Leaves `forker`, which said that its task's process ended, waiting for the next task;
    /// it ends when [`MOST_WAITING`] wait already.
    pub(super) fn give_back(forker: Forker) {
        let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.len() < MOST_WAITING {
            waiting.push(forker);
            return;
        }
        drop(waiting);
        // Killed and waited for outside the lock.
        drop(forker);
    }

    /// Has the starting thread start processes until [`STARTED_AHEAD`] wait, in the
    /// background.
    pub(crate) fn refill() {
        let _ = starter().send(None);
    }

    /// Starts a `convert-child` process.
    fn start() -> std::io::Result<Forker> {
        let (process, socket, said) = probe::spawn(SUBCOMMAND)?;
        Ok(Forker {
            process,
            socket,
            said,
        })
    }

    /// The channel to the thread that starts processes, started with the first use.
    fn starter() -> &'static Sender<Wanted> {
        static STARTER: std::sync::OnceLock<Sender<Wanted>> = std::sync::OnceLock::new();
        STARTER.get_or_init(|| {
            let (wanted, wants) = channel::<Wanted>();
            let started = std::thread::Builder::new()
                .name("svcd-children".into())
                .spawn(move || {
                    for wanted in wants {
                        if let Some(sent) = wanted {
                            let _ = sent.send(start());
                            continue;
                        }
                        while WAITING.lock().unwrap_or_else(|e| e.into_inner()).len()
                            < STARTED_AHEAD
                        {
                            match start() {
                                Ok(forker) => WAITING
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(forker),
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
