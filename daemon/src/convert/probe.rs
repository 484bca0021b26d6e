//! Every source is read first by a probe: a child process (`svcd probe-sources`, [`serve`])
//! that opens the file with the NetCDF and HDF5 libraries and reads all its metadata, with
//! its memory and processor time bounded, before a conversion's process opens the file
//! ([`check`], [`super::child`]).
//!
//! Why: what the libraries read as they open a file is sized by the file. HDF5 keeps a
//! string (an attribute's, or a variable's fill value, which it decodes when NetCDF opens the
//! file) as a length and a place; the library allocates and fills the length it reads, so a
//! file of 6 KiB can claim 4 GiB per string and cost as much, before the daemon sees anything
//! it could check (the strings of a variable's data are checked by the daemon first, see
//! [`super::stored`]). A damaged file can also make the libraries crash (HDF5 copies a
//! string's whole heap object into the length claimed, which may be shorter). In the probe,
//! an allocation past [`PROBE_BYTES`] fails (`RLIMIT_AS`), which the library reports as an
//! error or crashes on (HDF5 1.10 does not check every allocation); a loop ends at
//! [`PROBE_SECONDS`] of processor time (`RLIMIT_CPU`), and a file waited on longer than
//! [`PROBE_WAIT_SECONDS`] ends the probe. An error of the libraries, a crash or an end
//! refuses the file, with what the probe met, before any conversion starts on it: a reason
//! that says what the file claims, under a bound far smaller than a conversion's.
//!
//! The probe is handed the daemon's own descriptor of each file (over a socket,
//! `SCM_RIGHTS`), so it reads the file the daemon opened and checked, whatever its path names
//! now; it closes every descriptor it inherited (HDF5 opens files without `O_CLOEXEC`) and
//! dumps no core. It is handed the files of one conversion (up to [`FILES_PER_PROBE`]) at
//! once, and reads them in a process forked for them alone ([`read_files`]), each file
//! bounded as above, the process confined to those files ([`super::confine`]): what a
//! hostile file does to the libraries ends with that process, and reaches no file of
//! another conversion or user, nor the daemon's; it could forge the answers for the files
//! after it in its batch, which are kept for that owner only. What it found is kept by the
//! owner and the file's device, inode, size, modification and change times, so a file is
//! probed once per owner until it changes (a store's chunks computed on request open its
//! source each time). A probe that took too long or was killed from outside (`SIGKILL`)
//! fails the conversion without an answer kept.
//!
//! The daemon itself never reads a source with the libraries: a conversion, and each chunk
//! or document a reader has computed, reads them in a bounded process of its own
//! ([`super::child`]). A file changed after it was probed (also without a change of its size
//! or times, through a shared mapping), or a string fill value HDF5 gives each element never
//! written, costs that process, not the daemon.
//!
//! Up to [`IDLE_PROBES`] probes wait for the next sources once they answered: starting one
//! costs more than reading a small file, forking one far less. A probe reads no file
//! itself, so one serves batch after batch, for any owner.
//!
//! Probing is on once the program calls [`super::read_sources_apart`] (svcd does, as it
//! starts); a library embedding this crate without it (the unit tests) reads sources
//! directly.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::{Condvar, Mutex};

use super::Source;
use crate::jobs::Stop;

/// The address space the libraries may take reading one file's metadata, above what the
/// probe's process takes as it starts reading the file. The library keeps what it read while
/// the file is open, and a conversion of many sources keeps up to 8 open
/// (`OpenSources::KEEP`): 1 GiB at most. Files of this field take a few MiB.
pub(crate) const PROBE_BYTES: u64 = 128 << 20;

/// The processor time one file's metadata may take: far more than any file of this field
/// takes (milliseconds).
pub(crate) const PROBE_SECONDS: u64 = 60;

/// The time one file's metadata may take in all, waiting included (a read that never
/// returns, from a device or a stalled network file system, uses no processor time).
pub(crate) const PROBE_WAIT_SECONDS: u64 = 2 * PROBE_SECONDS;

/// Files one probe is handed at once, read by one process forked for them (a conversion's
/// sources are probed in batches of as many, each with one place among
/// [`PROBES_AT_ONCE`]).
const FILES_PER_PROBE: usize = 64;

/// Probes reading at once, all conversions and requests together: each may take
/// [`PROBE_BYTES`].
const PROBES_AT_ONCE: usize = 4;

/// Answers kept (a file's answer is a few dozen bytes, or its reason).
const MOST_KNOWN: usize = 1 << 16;

/// The subcommand of `svcd` that runs [`serve`].
pub const SUBCOMMAND: &str = "probe-sources";

/// Whose answer, on what: the owner of the stores whose sources were probed, and what
/// identifies a file's contents (`Source::now`: its device and inode, and its
/// [`super::Version`]). Answers are kept per owner: one process reads a batch of an owner's
/// files, and a hostile file among them could forge the answers for the files after it,
/// which then must not refuse, or pass, the same file for anyone else.
type Key = (String, (u64, u64, super::Version));

/// Probe answers by owner and file.
fn known() -> &'static Mutex<HashMap<Key, Result<(), String>>> {
    static KNOWN: std::sync::OnceLock<Mutex<HashMap<Key, Result<(), String>>>> =
        std::sync::OnceLock::new();
    KNOWN.get_or_init(Mutex::default)
}

/// Fails, with a refused file's reason (its path first), unless a probe read the metadata
/// of every one of `sources` as they are now; probes those it has not read yet, in order, a
/// few dozen per process, until one is refused. Passes everything when probing is off
/// ([`super::read_sources_apart`]). A `stop` (a conversion's, or a reader's request's) ends
/// the wait for a probe, and for its answers.
///
/// # Errors
/// A sentence naming the file: the probe met an error reading its metadata, or crashed, or
/// ran out of time, or the file changed while it was read; or no probe could be started.
pub(crate) fn check(sources: &[&Source], owner: &str, stop: Option<&Stop>) -> Result<(), String> {
    if !super::apart() {
        return Ok(());
    }
    let refused = |source: &Source, reason: &str| format!("{}: {reason}", source.path.display());
    let keys = sources
        .iter()
        .map(|source| Ok((owner.to_string(), source.now()?)))
        .collect::<Result<Vec<_>, String>>()?;
    let mut unknown = Vec::new();
    {
        let known = known().lock().unwrap_or_else(|e| e.into_inner());
        for (&source, key) in sources.iter().zip(keys) {
            match known.get(&key) {
                Some(Ok(())) => {}
                Some(Err(reason)) => return Err(refused(source, reason)),
                None => unknown.push((source, key)),
            }
        }
    }
    for batch in unknown.chunks(FILES_PER_PROBE) {
        let files: Vec<&Source> = batch.iter().map(|&(source, _)| source).collect();
        let mut answers = probe(&files, stop)?;
        // A refusal of a file after the first of its batch may have been forged by a file
        // before it, in the same process: it is kept once the file alone is refused too.
        if answers.len() > 1 && answers.last().is_some_and(Result::is_err) {
            let last = answers.len() - 1;
            answers[last] = probe(&files[last..=last], stop)?
                .pop()
                .unwrap_or_else(|| Err("the probe gave no answer".into()));
        }
        let mut known = known().lock().unwrap_or_else(|e| e.into_inner());
        if known.len() + answers.len() > MOST_KNOWN {
            known.clear();
        }
        for ((source, probed), answer) in batch.iter().zip(answers) {
            // Kept only when the file is still what was probed.
            if source.now()? != probed.1 {
                return Err(refused(
                    source,
                    "changed while its metadata was read; convert it again once it is written",
                ));
            }
            known.insert(probed.clone(), answer.clone());
            answer.map_err(|reason| refused(source, &reason))?;
        }
    }
    Ok(())
}

/// Starts at most [`PROBES_AT_ONCE`] probes: a place among them, given back as it drops.
struct Place;

static RUNNING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// How often waiting for a probe looks at a conversion's stop.
pub(super) const STOP_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What a wait for a probe that was stopped fails with.
const STOPPING: &str = "the conversion is stopping";

impl Place {
    fn take(stop: Option<&Stop>) -> Result<Self, String> {
        let (count, freed) = &RUNNING;
        let mut running = count.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= PROBES_AT_ONCE {
            if stop.is_some_and(Stop::requested) {
                return Err(STOPPING.into());
            }
            running = freed
                .wait_timeout(running, STOP_CHECK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *running += 1;
        Ok(Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let (count, freed) = &RUNNING;
        *count.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        freed.notify_one();
    }
}

/// A probe process, killed (and waited for) when dropped before it ended.
struct Probe {
    child: std::process::Child,
    socket: Option<std::os::fd::OwnedFd>,
    answers: std::io::BufReader<std::process::ChildStdout>,
}

/// Probes waiting for their next files: starting one takes longer (15 ms) than reading a
/// small file's metadata.
static IDLE: Mutex<Vec<Probe>> = Mutex::new(Vec::new());

/// The most probes left waiting.
const IDLE_PROBES: usize = 2;

impl Drop for Probe {
    fn drop(&mut self) {
        drop(self.socket.take());
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The answers of a probe for `files`, in order, up to the first refused (by its answer, or
/// by its crash as it read the file). The probe is one left waiting, or a new one.
fn probe(files: &[&Source], stop: Option<&Stop>) -> Result<Vec<Result<(), String>>, String> {
    let _place = Place::take(stop)?;
    // One that ended while it waited (killed by someone) would seem to end on the next file.
    let waiting = IDLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .and_then(|mut probe| probe.alive().then_some(probe));
    let mut probe = match waiting {
        Some(probe) => probe,
        None => start(stop)?,
    };
    let fds: Vec<RawFd> = files.iter().map(|file| file.file.as_raw_fd()).collect();
    let handed = probe.hand(&fds);
    let mut answers = Vec::with_capacity(files.len());
    for file in files {
        let answer = if handed.is_ok() {
            probe.answer(stop)?
        } else {
            // A probe that ended before it was handed the files says why as it is waited
            // for.
            probe.ended()?
        };
        let answer = match answer {
            Answer::Read(read) => read,
            // Not the file's answer, which the next conversion asks again.
            Answer::Stalled(reason) => {
                return Err(format!("{}: {reason}", file.path.display()));
            }
        };
        let refused = answer.is_err();
        answers.push(answer);
        if refused {
            break;
        }
    }
    let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
    if idle.len() < IDLE_PROBES && probe.alive() {
        idle.push(probe);
    }
    Ok(answers)
}

/// What a probe says of a file.
enum Answer {
    /// It read the file: its metadata whole, or the reason it could not (also when its
    /// reader crashed on it, or ran out of processor time).
    Read(Result<(), String>),
    /// It took too long, or was killed from outside (the kernel out of memory, say): what
    /// happens to the file then may not happen again.
    Stalled(String),
}

/// A new probe process, started [`super::patiently`] (until `stop`).
fn start(stop: Option<&Stop>) -> Result<Probe, String> {
    let (child, ours, answers) = super::patiently(stop, || spawn(SUBCOMMAND))
        .map_err(|e| format!("cannot start a probe of sources: {e}"))?;
    Ok(Probe {
        child,
        socket: Some(ours),
        answers,
    })
}

/// Starts this program with `subcommand`, its standard input a `SOCK_SEQPACKET` socket whose
/// other end is returned, its standard output a pipe, read through the returned reader, and
/// of the daemon's environment only [`crate::config::children_environment`].
pub(super) fn spawn(
    subcommand: &str,
) -> std::io::Result<(
    std::process::Child,
    std::os::fd::OwnedFd,
    std::io::BufReader<std::process::ChildStdout>,
)> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    let mut child = std::process::Command::new("/proc/self/exe")
        .arg(subcommand)
        .env_clear()
        .envs(crate::config::children_environment())
        .stdin(std::process::Stdio::from(theirs))
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let output = std::io::BufReader::new(child.stdout.take().expect("piped"));
    Ok((child, ours, output))
}

impl Probe {
    /// Whether the process runs.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Hands the probe the files of descriptors `fds` (at most [`FILES_PER_PROBE`]), in one
    /// message: it answers for each in order ([`Probe::answer`]), up to the first it does not
    /// answer `ok` for.
    fn hand(&mut self, fds: &[RawFd]) -> nix::Result<usize> {
        use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
        let socket = self.socket.as_ref().expect("open until dropped");
        sendmsg::<UnixAddr>(
            socket.as_raw_fd(),
            &[std::io::IoSlice::new(&[0])],
            &[ControlMessage::ScmRights(fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
    }

    /// Reads the probe's answer for the next file it was handed.
    fn answer(&mut self, stop: Option<&Stop>) -> Result<Answer, String> {
        let mut line = String::new();
        // A probe that ended before or as it read the file answers nothing.
        if !self.answers_in_time(stop)? {
            // Killed as the caller drops it.
            return Ok(Answer::Stalled(format!(
                "reading its metadata took more than {PROBE_WAIT_SECONDS} s"
            )));
        }
        let read = self.answers.read_line(&mut line).unwrap_or(0);
        if read == 0 {
            return self.ended();
        }
        Ok(Answer::Read(match line.trim_end().split_once(' ') {
            None if line.trim_end() == "ok" => Ok(()),
            // The process that read the file ended without an answer.
            Some(("signal", signal)) => {
                let signal = signal
                    .parse()
                    .map_err(|_| format!("a probe of sources answered {line:?}"))?;
                return Ok(Self::killed(signal));
            }
            Some(("ended", how)) => {
                return Err(format!(
                    "a probe of sources ended ({how}); the daemon's log says why"
                ));
            }
            Some(("refused", reason)) => Err(reason.to_string()),
            Some(("failed", reason)) => Err(format!(
                "the NetCDF library cannot read its metadata within the {} MiB and \
                     {PROBE_SECONDS} s of processor time that a file's metadata may take (a \
                     damaged file, or one that claims more than it holds): {reason}",
                PROBE_BYTES >> 20
            )),
            _ => return Err(format!("a probe of sources answered {line:?}")),
        }))
    }

    /// Whether the probe answers (or ends) within [`PROBE_WAIT_SECONDS`].
    ///
    /// # Errors
    /// When `stop` is requested meanwhile (the probe is then dropped, and killed).
    fn answers_in_time(&self, stop: Option<&Stop>) -> Result<bool, String> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_secs(PROBE_WAIT_SECONDS);
        loop {
            if stop.is_some_and(Stop::requested) {
                return Err(STOPPING.into());
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if readable_within(&self.answers, left.min(STOP_CHECK)) {
                return Ok(true);
            }
            if left.is_zero() {
                return Ok(false);
            }
        }
    }

    /// Why the probe ended as it read a file: killed by a signal of its own doing (a crash,
    /// its processor time), which refuses the file, or by someone else.
    ///
    /// # Errors
    /// When it exited (it could not read the socket, or bound itself), which says nothing
    /// of the file.
    fn ended(&mut self) -> Result<Answer, String> {
        use std::os::unix::process::ExitStatusExt;
        drop(self.socket.take());
        let status = self
            .child
            .wait()
            .map_err(|e| format!("a probe of sources ended: {e}"))?;
        match status.signal() {
            Some(signal) => Ok(Self::killed(signal)),
            None => Err(format!(
                "a probe of sources ended ({status}); the daemon's log says why"
            )),
        }
    }

    /// What a probe's process killed by `signal` as it read a file says of the file: a
    /// signal of its own doing (a crash, its processor time) refuses it, one from someone
    /// else does not.
    fn killed(signal: i32) -> Answer {
        match signal {
            libc::SIGXCPU => Answer::Read(Err(format!(
                "reading its metadata took more than {PROBE_SECONDS} s of processor time"
            ))),
            libc::SIGKILL => Answer::Stalled(
                "the probe reading its metadata was killed (SIGKILL: out of memory?)".into(),
            ),
            signal => Answer::Read(Err(format!(
                "the NetCDF library failed reading its metadata (signal {signal}, {}): the file \
                 is damaged, or claims more than it holds",
                signal_name(signal)
            ))),
        }
    }
}

/// Whether `reader` has something to read within `slice`: bytes it buffered already (a
/// process's lines come together, and a line read may have brought the next), or its
/// descriptor becomes readable (closed or failing counts: reading it tells); a signal that
/// interrupts the wait counts as not.
pub(super) fn readable_within<R: std::os::fd::AsFd>(
    reader: &std::io::BufReader<R>,
    slice: std::time::Duration,
) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    if !reader.buffer().is_empty() {
        return true;
    }
    let timeout = PollTimeout::from(u16::try_from(slice.as_millis()).unwrap_or(u16::MAX));
    !matches!(
        poll(
            &mut [PollFd::new(reader.get_ref().as_fd(), PollFlags::POLLIN)],
            timeout
        ),
        Ok(0) | Err(nix::errno::Errno::EINTR)
    )
}

/// The name of signal `signal` (`SIGSEGV`).
pub(super) fn signal_name(signal: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(signal).map_or("unknown", nix::sys::signal::Signal::as_str)
}

/// The probe's side (`svcd probe-sources`): has each batch of files whose descriptors come
/// on standard input (a socket, one message each) read by a process forked for it
/// ([`read_files`]), and answers a line for each file on standard output, up to the first
/// that is not `ok`: `ok`, `refused <reason>` (as the daemon refuses it), `failed <reason>`
/// (the libraries failed), or, when that process ended without an answer, `signal <number>`
/// or `ended <how>`. Ends when the socket closes. It never reads a file itself.
///
/// # Errors
/// When the socket or standard output fail.
pub fn serve() -> std::io::Result<()> {
    ignore_outside_stops()?;
    // The `netcdf` crate panics on some errors of the library (listing variables): such a
    // panic is the answer, not a report on the daemon's log.
    std::panic::set_hook(Box::new(|_| {}));
    close_inherited();
    // A crash is an answer: no core dump of each hostile file.
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)?;
    // Answers go to the daemon on a descriptor of their own; what the libraries print on
    // standard output goes to standard error (the daemon's log), never among the answers.
    let mut output =
        std::io::BufWriter::new(std::fs::File::from(nix::unistd::dup(std::io::stdout())?));
    nix::unistd::dup2_stdout(std::io::stderr())?;
    let input = std::io::stdin().as_raw_fd();
    // Not for its readers to read through /proc, on a kernel without Landlock.
    nix::sys::prctl::set_dumpable(false)?;
    super::warm_up(false);
    while let Some(files) = receive(input)? {
        let (answers, its_answers) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let count = files.len();
        let (output_fd, answers_fd) = (output.get_ref().as_raw_fd(), answers.as_raw_fd());
        // The files and the writing end go with the closure: closed here as the fork is made.
        let reader = super::fork_task(move || {
            for fd in [output_fd, answers_fd, input] {
                let _ = nix::unistd::close(fd);
            }
            read_files(&files, its_answers)
        })?;
        // Passed on as they come, up to the first that is not `ok` (an answer is a line of a
        // few hundred bytes: one longer is cut).
        let mut answers = std::io::BufReader::new(std::fs::File::from(answers));
        let (mut answered, mut refused) = (0, None);
        while answered < count && refused.is_none() {
            let mut line = String::new();
            let _ = std::io::Read::take(&mut answers, 1 << 16).read_line(&mut line);
            if !line.ends_with('\n') {
                break;
            }
            output.write_all(line.as_bytes())?;
            output.flush()?;
            answered += 1;
            // As the daemon reads it.
            refused = (line.trim_end() != "ok").then_some(line);
        }
        // It has nothing left to do: one that lingers would hold up the next batch, which
        // may be another owner's.
        let _ = nix::sys::signal::kill(reader.pid, nix::sys::signal::Signal::SIGKILL);
        let ended = super::reap(reader, "the probe's reader of a conversion's files")?;
        // One that ended before it answered for every file, and answered `ok` so far: why,
        // as the answer for the file it was reading.
        if answered < count && refused.is_none() {
            match ended {
                (_, Some(signal)) => writeln!(output, "signal {signal}")?,
                (code, None) => writeln!(
                    output,
                    "ended with exit status {}",
                    code.map_or_else(|| "unknown".into(), |code| code.to_string())
                )?,
            }
            output.flush()?;
        }
    }
    Ok(())
}

/// The process that reads a batch of files: confines itself to `files`, and reads the
/// metadata of each in turn, bounded ([`bound`]), writing its answer, a line, to
/// `answers`, up to the first that is not `ok`. Its exit code.
fn read_files(files: &[std::fs::File], answers: std::os::fd::OwnedFd) -> i32 {
    let mut answers = std::fs::File::from(answers);
    let statm = std::fs::File::open("/proc/self/statm");
    // Says nothing of the files: no answer, which fails this conversion only.
    if let Err(e) = super::confine::confine(&files.iter().collect::<Vec<_>>(), None, false) {
        eprintln!("svcd {SUBCOMMAND}: {e}");
        return 2;
    }
    for file in files {
        let read = statm
            .as_ref()
            .map_err(|e| Refused::Library(format!("cannot bound the probe: {e}")))
            .and_then(|statm| bound(statm).map_err(|e| Refused::Library(e.to_string())))
            .and_then(|()| {
                let opened =
                    std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                std::panic::catch_unwind(|| read_metadata(&opened)).unwrap_or_else(|panic| {
                    Err(Refused::Library(super::panic_text(&*panic).to_string()))
                })
            });
        let written = match &read {
            Ok(()) => writeln!(answers, "ok"),
            Err(Refused::Daemon(reason)) => {
                writeln!(answers, "refused {}", reason.replace('\n', " "))
            }
            Err(Refused::Library(reason)) => {
                writeln!(answers, "failed {}", reason.replace('\n', " "))
            }
        };
        if written.is_err() {
            return 1;
        }
        if read.is_err() {
            break;
        }
    }
    0
}

/// Blocks the signals that stop a service or a terminal's jobs (`SIGTERM`, `SIGINT`,
/// `SIGHUP`, `SIGQUIT`), for every thread the process starts after: systemd sends
/// `SIGTERM` to every process of the service as it stops it, and `Ctrl-C` reaches the
/// whole process group, while a child reads sources for the daemon, which stops its
/// children itself: a probe's or a waiting child's socket closes as the daemon ends, a
/// conversion is told to stop, and a conversion's process ends with the daemon
/// (`PR_SET_PDEATHSIG`). A conversion killed by such a signal would fail its store, which
/// the daemon would have queued again.
pub(super) fn ignore_outside_stops() -> std::io::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let stops: SigSet = [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ]
    .into_iter()
    .collect();
    stops.thread_block()?;
    Ok(())
}

/// Closes every descriptor the probe was started with but standard input, output and error:
/// the daemon's files that the libraries opened without `O_CLOEXEC` (HDF5 does), which a
/// probe left waiting would keep open, deleted or not, as long as it lives.
pub(super) fn close_inherited() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let inherited: Vec<RawFd> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd: &RawFd| fd > 2)
        .collect();
    for fd in inherited {
        // The listing's own descriptor is among them, closed already: an error, ignored.
        let _ = nix::unistd::close(fd);
    }
}

/// Why the probe refuses a file.
enum Refused {
    /// The daemon would refuse it as it is (its data lies elsewhere).
    Daemon(String),
    /// The libraries failed reading it: within the bounds, or at all.
    Library(String),
}

/// The descriptors of the next batch of files sent on `socket` (at most
/// [`FILES_PER_PROBE`], in one message); `None` once it is closed.
fn receive(socket: RawFd) -> std::io::Result<Option<Vec<std::fs::File>>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; FILES_PER_PROBE]);
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let message = recvmsg::<()>(
        socket,
        &mut iov,
        Some(space.as_mut_slice()),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    if message.bytes == 0 {
        return Ok(None);
    }
    let mut files = Vec::new();
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            // SAFETY: the kernel made these descriptors for this process, and nothing else
            // owns them.
            #[allow(unsafe_code)]
            files.extend(
                fds.into_iter().map(|fd| {
                    std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
                }),
            );
        }
    }
    if files.is_empty() {
        return Err(std::io::Error::other("a message without a descriptor"));
    }
    Ok(Some(files))
}

/// Bounds what the next file may take: [`PROBE_BYTES`] more address space than the process
/// has now (read from `statm`, its `/proc/self/statm`, opened before it was confined), and
/// [`PROBE_SECONDS`] more processor time than it used.
fn bound(statm: &std::fs::File) -> std::io::Result<()> {
    use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage, setrlimit};
    let failed =
        |e: &dyn std::fmt::Display| std::io::Error::other(format!("cannot bound the probe: {e}"));
    let mut text = [0u8; 256];
    let len = std::os::unix::fs::FileExt::read_at(statm, &mut text, 0).map_err(|e| failed(&e))?;
    let statm = String::from_utf8_lossy(&text[..len]);
    let pages: u64 = statm
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| failed(&"/proc/self/statm unreadable"))?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(4096);
    let (_, hard) = getrlimit(Resource::RLIMIT_AS).map_err(|e| failed(&e))?;
    setrlimit(
        Resource::RLIMIT_AS,
        (pages * page + PROBE_BYTES).min(hard),
        hard,
    )
    .map_err(|e| failed(&e))?;
    let usage = getrusage(UsageWho::RUSAGE_SELF).map_err(|e| failed(&e))?;
    let used =
        u64::try_from(usage.user_time().tv_sec() + usage.system_time().tv_sec() + 1).unwrap_or(0);
    let (_, hard) = getrlimit(Resource::RLIMIT_CPU).map_err(|e| failed(&e))?;
    setrlimit(Resource::RLIMIT_CPU, (used + PROBE_SECONDS).min(hard), hard).map_err(|e| failed(&e))
}

/// Reads what the daemon reads of the file at `opened` before its data: whether its data
/// lies elsewhere, the file as NetCDF (and as HDF5), and every attribute, variable and group.
/// An error of the libraries refuses the file (reading it in the daemon would have taken
/// more than the bound, or failed there too); a type this crate does not read is skipped.
fn read_metadata(opened: &std::path::Path) -> Result<(), Refused> {
    super::external::refuse_data_elsewhere(opened).map_err(|refusal| match refusal {
        super::external::Refusal::Elsewhere(reason) => Refused::Daemon(reason),
        super::external::Refusal::Unreadable(reason) => Refused::Library(reason),
    })?;
    let file = crate::crawl::open_netcdf(opened).map_err(|e| {
        if e.starts_with(crate::crawl::netcdf_read::NOT_NETCDF) {
            Refused::Daemon(e)
        } else {
            Refused::Library(e)
        }
    })?;
    // Whether HDF5 opens it is for the conversion to judge; what opening it costs is read
    // here.
    let _stored = super::stored::StoredFile::open(opened);
    read_attributes(file.attributes(), "the file")?;
    read_variables(file.variables(), "")?;
    if let Some(root) = file.root() {
        for group in root.groups() {
            read_group(&group, "")?;
        }
    }
    Ok(())
}

/// Reads group `group` (below `parent`, `""`: the root) and everything in it.
fn read_group(group: &netcdf::Group, parent: &str) -> Result<(), Refused> {
    let path = format!("{parent}/{}", group.name());
    read_attributes(group.attributes(), &format!("group {path:?}"))?;
    read_variables(group.variables(), &path)?;
    for child in group.groups() {
        read_group(&child, &path)?;
    }
    Ok(())
}

/// Reads the type and attributes of each of `variables` (of group `path`).
fn read_variables<'f>(
    variables: impl Iterator<Item = netcdf::Variable<'f>>,
    path: &str,
) -> Result<(), Refused> {
    for variable in variables {
        let name = format!("{path}/{}", variable.name());
        // Listing the variables had NetCDF read how each is stored (its fill value among
        // it) and its dimensions; its type is read as the daemon reads it.
        let _ = variable.vartype();
        read_attributes(variable.attributes(), &format!("variable {name:?}"))?;
    }
    Ok(())
}

/// Reads the value of each of `attributes` (of `owner`).
fn read_attributes<'f>(
    attributes: impl Iterator<Item = netcdf::Attribute<'f>>,
    owner: &str,
) -> Result<(), Refused> {
    for attribute in attributes {
        if let Err(netcdf::Error::Netcdf(code)) = attribute.value() {
            return Err(Refused::Library(format!(
                "{owner}: attribute {:?}: {}",
                attribute.name(),
                netcdf::Error::Netcdf(code)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{PROBES_AT_ONCE, Place, Refused, STOPPING, read_metadata};

    /// What the probe reads in the daemon's process (the unit tests run no probe process):
    /// a file with strings in attributes, a string variable and a group reads whole; a file
    /// that is not NetCDF is refused as the daemon refuses it, not as a failure of the
    /// library. (Files whose data lies elsewhere: the portal's Python tests, through the
    /// probe.)
    #[test]
    fn the_probe_reads_every_attribute_variable_and_group_and_refuses_what_is_not_netcdf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strings.nc");
        let mut file = netcdf::create(&path).unwrap();
        file.add_attribute("title", vec!["a".to_string(), "bc".to_string()])
            .unwrap();
        file.add_dimension("x", 3).unwrap();
        let mut names = file.add_string_variable("names", &["x"]).unwrap();
        names.put_string("first", [0]).unwrap();
        let mut group = file.add_group("inner").unwrap();
        group.add_attribute("comment", "inside").unwrap();
        drop(file);
        assert!(read_metadata(&path).is_ok());

        let text = dir.path().join("text.nc");
        std::fs::write(&text, "not NetCDF").unwrap();
        match read_metadata(&text) {
            Err(Refused::Daemon(reason)) => assert!(reason.starts_with("not a NetCDF file")),
            _ => panic!("a text file is not NetCDF"),
        }
    }

    /// At most [`PROBES_AT_ONCE`] probes read: the next waits for a place, until one is given
    /// back, or until its conversion's stop is requested, which it then fails with.
    #[test]
    fn a_wait_for_a_probe_ends_when_a_place_is_freed_or_the_conversion_stops() {
        let mut places: Vec<Place> = (0..PROBES_AT_ONCE)
            .map(|_| Place::take(None).unwrap())
            .collect();
        let stop = crate::jobs::Stop::default();
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| Place::take(Some(&stop)).map(drop));
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(!waiting.is_finished(), "all places are taken");
            stop.request();
            assert_eq!(waiting.join().unwrap(), Err(STOPPING.to_string()));
            let waiting = scope.spawn(|| Place::take(None).map(drop));
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(!waiting.is_finished(), "all places are taken");
            places.pop();
            assert_eq!(waiting.join().unwrap(), Ok(()));
        });
    }
}
