//! What a process that reads users' files may do: read the files it is given, and little
//! else.
//!
//! The NetCDF and HDF5 libraries read users' files in processes of their own
//! ([`super::child`], [`super::probe`]), which bounds what a hostile file can take (memory,
//! time) and what its crash ends. [`confine`] also bounds what such a file could do if it
//! made a library run code of its choosing: the process (a fork for this one task, or this
//! batch of one conversion's files) then runs as the daemon's user still, but
//! - opens only its sources (each named by its descriptor, as the libraries reopen them
//!   through `/proc/self/fd`) and, for a conversion, what lies below its store's directory
//!   (Landlock): not the daemon's database, token key or configuration, another user's store
//!   or file, nor `/proc`;
//! - starts no program, no process (threads only), opens no socket, traces, signals,
//!   renices or bounds no process outside its own, makes no System V IPC object and watches
//!   no file (Landlock's scopes; seccomp);
//! - gains no privilege (`PR_SET_NO_NEW_PRIVS`), and keeps no capability but
//!   `CAP_DAC_READ_SEARCH`;
//! - has none of the daemon's environment ([`crate::config::children_environment`]), which
//!   may hold the cold tier's credentials (and the daemon is not dumpable, so its `/proc`
//!   entries are not for its children to read either, on a kernel without Landlock).
//!
//! What it can still do: write what it likes below its store (the owner's allowance is
//! asked for by the task itself), answer the daemon on its own socket and pipe (a forged
//! answer reaches only its own store, or the request of the same reader, whose file it is),
//! and `stat` any path. What it prints reaches the daemon's log only quoted, by its parent
//! (`super::reap`).
//!
//! Landlock is applied as far as the kernel supports it (Linux 5.13 and later; the network
//! and scopes from 6.7 and 6.12): the daemon logs at start how far ([`report`]). Seccomp
//! (Linux 3.5) is required: a task that cannot install its filter fails.

use std::os::fd::AsFd;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// The newest Landlock ABI whose rights this code asks for; the kernel enforces those it
/// knows.
const NEWEST: ABI = ABI::V6;

/// Confines the calling thread, and the threads and processes it starts after, to reading
/// the files `sources` and, when `store` is given, reading and writing below the directory
/// `store` (which must exist), as the module says. With `plugins` (a process that decodes
/// data, and so had [`prepare`] load HDF5's filter plugins), it may also read the plugins'
/// directories; a process that reads metadata only (the probe's) may not, and does not load
/// them here (which took a probe's reader some 5 ms of each batch).
///
/// # Errors
/// When a restriction the kernel supports cannot be applied.
pub(super) fn confine(
    sources: &[&std::fs::File],
    store: Option<&Path>,
    plugins: bool,
) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("cannot confine the process: {e}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(NEWEST))
        .and_then(|ruleset| ruleset.handle_access(AccessNet::from_all(NEWEST)))
        .and_then(|ruleset| ruleset.scope(Scope::from_all(NEWEST)))
        .and_then(Ruleset::create)
        .map_err(|e| failed(&e))?;
    for source in sources {
        ruleset = ruleset
            .add_rule(PathBeneath::new(source.as_fd(), AccessFs::ReadFile))
            .map_err(|e| failed(&e))?;
    }
    if let Some(store) = store {
        let below = PathFd::new(store).map_err(|e| failed(&e))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(below, store_access()))
            .map_err(|e| failed(&e))?;
    }
    // Filters HDF5 loads for a source's compressed variables (loaded already, see
    // `prepare`: HDF5 lists them again).
    let plugin_dirs = if plugins { plugin_dirs() } else { &[] };
    for dir in plugin_dirs {
        if let Ok(plugins) = PathFd::new(dir) {
            ruleset = ruleset
                .add_rule(PathBeneath::new(
                    plugins,
                    AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute,
                ))
                .map_err(|e| failed(&e))?;
        }
    }
    // No new privileges first: the filter below requires it without CAP_SYS_ADMIN.
    ruleset.restrict_self().map_err(|e| failed(&e))?;
    drop_capabilities().map_err(|e| failed(&e))?;
    for filter in filters_compiled().as_ref().map_err(|e| failed(e))? {
        seccompiler::apply_filter(filter).map_err(|e| failed(&e))?;
    }
    let own = signals_to_others(nix::unistd::getpid()).map_err(|e| failed(&e))?;
    seccompiler::apply_filter(&own).map_err(|e| failed(&e))
}

/// The filter that denies a signal to a thread of another process than `own` (`tgkill`,
/// `rt_tgsigqueueinfo`): compiled in each process, which knows its own.
fn signals_to_others(own: nix::unistd::Pid) -> Result<seccompiler::BpfProgram, seccompiler::Error> {
    let other = || -> Result<Vec<SeccompRule>, seccompiler::Error> {
        Ok(vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            u64::from(own.as_raw().cast_unsigned()),
        )?])?])
    };
    SeccompFilter::new(
        [
            (libc::SYS_tgkill, other()?),
            (libc::SYS_rt_tgsigqueueinfo, other()?),
        ]
        .into_iter()
        .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH.try_into()?,
    )?
    .try_into()
    .map_err(seccompiler::Error::Backend)
}

/// Drops every capability but `CAP_DAC_READ_SEARCH`, which a daemon running as root (or
/// given capabilities, as the mount's drop-in does) needs to open again a source it opened
/// by the same means; a daemon of its own user has none to drop.
fn drop_capabilities() -> Result<(), caps::errors::CapsError> {
    use caps::{CapSet, Capability};
    let kept: caps::CapsHashSet = caps::read(None, CapSet::Permitted)?
        .into_iter()
        .filter(|&capability| capability == Capability::CAP_DAC_READ_SEARCH)
        .collect();
    // Ambient capabilities came with Linux 4.3: none to clear before.
    let _ = caps::clear(None, CapSet::Ambient);
    caps::clear(None, CapSet::Inheritable)?;
    caps::set(None, CapSet::Effective, &kept)?;
    caps::set(None, CapSet::Permitted, &kept)
}

/// Has what [`confine`] sets up once per process set up now, in a process that forks one
/// process per task: the seccomp filters compiled, and every filter plugin HDF5 may load
/// (from `HDF5_PLUGIN_PATH`, or its own directory) loaded, with the libraries they use: a
/// confined process could open neither them nor the loader's cache, and HDF5 loads a
/// plugin only as it reads a compressed chunk. HDF5 looks for a plugin by loading each
/// file of its directories by its path, which then finds the one loaded.
pub(super) fn prepare(plugins: bool) {
    let _ = filters_compiled();
    if plugins {
        let _ = plugin_dirs();
    }
}

/// The seccomp filters of [`confine`], compiled once per process.
fn filters_compiled() -> &'static Result<Vec<seccompiler::BpfProgram>, String> {
    static FILTERS: std::sync::OnceLock<Result<Vec<seccompiler::BpfProgram>, String>> =
        std::sync::OnceLock::new();
    FILTERS.get_or_init(|| filters().map_err(|e| e.to_string()))
}

/// The directories HDF5 loads filter plugins from, as it reports them, each plugin in them
/// loaded (once per process).
fn plugin_dirs() -> &'static [std::path::PathBuf] {
    static DIRS: std::sync::OnceLock<Vec<std::path::PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        let mut count: std::ffi::c_uint = 0;
        // SAFETY: HDF5 writes the count of its plugin directories into `count`.
        #[allow(unsafe_code)]
        if unsafe { hdf5_metno_sys::h5pl::H5PLsize(&raw mut count) } < 0 {
            return Vec::new();
        }
        let mut dirs = Vec::new();
        for index in 0..count {
            // SAFETY: with no buffer, HDF5 only says the length of directory `index`.
            #[allow(unsafe_code)]
            let len = unsafe { hdf5_metno_sys::h5pl::H5PLget(index, std::ptr::null_mut(), 0) };
            let Ok(len) = usize::try_from(len) else {
                continue;
            };
            let mut name = vec![0u8; len + 1];
            // SAFETY: HDF5 writes at most `name.len()` bytes, its last a NUL.
            #[allow(unsafe_code)]
            let written = unsafe {
                hdf5_metno_sys::h5pl::H5PLget(index, name.as_mut_ptr().cast(), name.len())
            };
            if written < 0 {
                continue;
            }
            name.truncate(len);
            let dir = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&name));
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                // The files HDF5 tries: named `lib...`, not directories.
                if !entry.file_name().as_bytes().starts_with(b"lib")
                    || entry.file_type().is_ok_and(|kind| kind.is_dir())
                {
                    continue;
                }
                // As HDF5 names it: the directory, a slash, the file's name.
                let mut path = name.clone();
                path.push(b'/');
                path.extend_from_slice(entry.file_name().as_bytes());
                let Ok(path) = std::ffi::CString::new(path) else {
                    continue;
                };
                // SAFETY: loads a library the administrator put where HDF5 loads filters
                // from, as HDF5 would; it stays loaded for the life of the process.
                #[allow(unsafe_code)]
                let loaded =
                    unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
                if loaded.is_null() {
                    // SAFETY: the loader's message of the call above (or none), copied at once.
                    #[allow(unsafe_code)]
                    let why = unsafe {
                        let why = libc::dlerror();
                        (!why.is_null()).then(|| std::ffi::CStr::from_ptr(why).to_string_lossy())
                    };
                    tracing::warn!(
                        "cannot load the HDF5 filter plugin {}: {} (sources it decodes will fail)",
                        path.to_string_lossy(),
                        why.unwrap_or_default()
                    );
                }
            }
            dirs.push(dir);
        }
        dirs
    })
}

/// What a conversion may do below its store's directory: create, write, rename and remove
/// its keys and their directories (and read them), not execute them, nor make devices,
/// sockets, pipes or links.
fn store_access() -> BitFlags<AccessFs> {
    AccessFs::ReadFile
        | AccessFs::ReadDir
        | AccessFs::WriteFile
        | AccessFs::Truncate
        | AccessFs::MakeReg
        | AccessFs::MakeDir
        | AccessFs::RemoveFile
        | AccessFs::RemoveDir
}

/// The seccomp filters: system calls a task never makes answer `EPERM`; `clone3`, whose
/// flags a filter cannot read, answers `ENOSYS`, upon which the C library starts threads
/// with `clone`, whose flags it can.
fn filters() -> Result<Vec<seccompiler::BpfProgram>, seccompiler::Error> {
    let arch = std::env::consts::ARCH.try_into()?;
    let always = || Vec::new();
    let mut denied: std::collections::BTreeMap<i64, Vec<SeccompRule>> = [
        // Programs and processes: a thread is all a task starts.
        libc::SYS_execve,
        libc::SYS_execveat,
        // The network, and the daemon's own sockets.
        libc::SYS_socket,
        // Other processes, and the kernel's surface a task has no use for.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_open,
        libc::SYS_pidfd_getfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_personality,
        // Other processes' priority, and what outlives the process (System V IPC) or watches
        // the file system.
        libc::SYS_setpriority,
        libc::SYS_ioprio_set,
        libc::SYS_shmget,
        libc::SYS_msgget,
        libc::SYS_semget,
        libc::SYS_inotify_init1,
        libc::SYS_fanotify_init,
        libc::SYS_syslog,
        // Signals to other processes (a process signals itself, or a thread of its own, with
        // `tgkill`, bounded below); Landlock's scopes bound them too, from Linux 6.12.
        libc::SYS_kill,
        libc::SYS_tkill,
        libc::SYS_rt_sigqueueinfo,
        // What a store's files take is what they hold (a conversion writes files whole), and
        // the daemon removes a store it fails: no blocks kept past a file's end, no directory
        // made unwritable to the daemon run as another user than root.
        libc::SYS_fallocate,
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        libc::SYS_fchmodat2,
    ]
    .into_iter()
    .map(|call| (call, always()))
    .collect();
    // A new process (no CLONE_THREAD).
    denied.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
            0,
        )?])?],
    );
    #[cfg(target_arch = "x86_64")]
    {
        denied.insert(libc::SYS_fork, always());
        denied.insert(libc::SYS_vfork, always());
        denied.insert(libc::SYS_inotify_init, always());
        denied.insert(libc::SYS_chmod, always());
    }
    // Another process's limits or scheduling (0: its own).
    for call in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        denied.insert(
            call,
            vec![SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                0,
            )?])?],
        );
    }
    let denied = SeccompFilter::new(
        denied,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, always())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?;
    Ok(vec![denied.try_into()?, clone3.try_into()?])
}

/// How far this kernel confines the processes that read users' files, for the daemon's log
/// as it starts: Landlock's ABI, or that it has none (then only seccomp, the environment
/// and the bounds of memory and time apply).
#[must_use]
pub(crate) fn report() -> String {
    // SAFETY: asks the kernel for Landlock's ABI version; no pointer is read or written.
    #[allow(unsafe_code)]
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    match abi {
        abi if abi >= 6 => format!(
            "the processes that read users' files are confined (Landlock ABI {abi}: files, \
             network and scopes; seccomp)"
        ),
        abi if abi >= 1 => format!(
            "the processes that read users' files are confined in part (Landlock ABI {abi}, \
             6 or later confines the network and signals; seccomp)"
        ),
        _ => "the processes that read users' files are not confined to their files: this \
              kernel has no Landlock (Linux 5.13 or later, with landlock in its lsm= list); \
              seccomp applies"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;

    use super::confine;

    /// Set, to the test's directory, in the process that [`a_confined_process_reads_its_sources_and_writes_its_store_only`]
    /// starts to be confined.
    const CONFINED: &str = "SVCD_CONFINE_TEST_DIR";

    #[test]
    fn a_confined_process_reads_its_sources_and_writes_its_store_only() {
        #[expect(clippy::disallowed_methods, reason = "set by the test itself")]
        if let Some(dir) = std::env::var_os(CONFINED) {
            confined(std::path::Path::new(&dir));
            return;
        }
        // Confinement is for the process's life: done in a process of its own, this test
        // binary started again for this test alone.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("source.nc"), b"the source's bytes").unwrap();
        std::fs::write(dir.path().join("beside.nc"), b"another user's file").unwrap();
        std::fs::create_dir(dir.path().join("store")).unwrap();
        std::fs::create_dir(dir.path().join("other-store")).unwrap();
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "convert::confine::tests::a_confined_process_reads_its_sources_and_writes_its_store_only",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CONFINED, dir.path())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{said}");
        assert!(said.contains("confined as it should be"), "{said}");
        // What it wrote is below its store, and nothing else changed.
        assert_eq!(
            std::fs::read(dir.path().join("store/tas/0.0")).unwrap(),
            b"a chunk"
        );
        assert!(
            std::fs::read_dir(dir.path().join("other-store"))
                .unwrap()
                .next()
                .is_none()
        );
    }

    /// The confined side: every check a hostile file's code would try.
    fn confined(dir: &std::path::Path) {
        let denied = |what: &str, result: std::io::Result<()>| {
            let e = result.expect_err(what);
            assert!(
                matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)),
                "{what}: {e}"
            );
        };
        let source = std::fs::File::open(dir.join("source.nc")).unwrap();
        let parent = nix::unistd::getppid();
        confine(&[&source], Some(&dir.join("store")), true).unwrap();

        // Its source, reopened by its descriptor as the libraries do.
        let mut text = String::new();
        std::fs::File::open(format!("/proc/self/fd/{}", source.as_raw_fd()))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "the source's bytes");
        // Its store: a key written through a temporary file and a rename, and removed.
        std::fs::create_dir_all(dir.join("store/tas")).unwrap();
        std::fs::write(dir.join("store/tas/.0.0.partial"), b"a chunk").unwrap();
        std::fs::rename(
            dir.join("store/tas/.0.0.partial"),
            dir.join("store/tas/0.0"),
        )
        .unwrap();
        std::fs::write(dir.join("store/tas/scratch"), b"").unwrap();
        std::fs::remove_file(dir.join("store/tas/scratch")).unwrap();

        // Any other file, also beside its source, or below another store.
        denied(
            "a file beside the source",
            std::fs::read(dir.join("beside.nc")).map(drop),
        );
        denied("the listing beside", std::fs::read_dir(dir).map(drop));
        denied("/etc/passwd", std::fs::read("/etc/passwd").map(drop));
        denied(
            "its own /proc",
            std::fs::read("/proc/self/environ").map(drop),
        );
        denied(
            "another store",
            std::fs::write(dir.join("other-store/0.0"), b"forged"),
        );
        denied(
            "a link out of its store",
            std::os::unix::fs::symlink("/etc/passwd", dir.join("store/link")),
        );
        // No network, no program, no process; threads still.
        denied(
            "a TCP connection",
            std::net::TcpStream::connect("127.0.0.1:9").map(drop),
        );
        denied(
            "a local socket",
            std::os::unix::net::UnixDatagram::unbound().map(drop),
        );
        denied(
            "a program",
            std::process::Command::new("/bin/true").status().map(drop),
        );
        // SAFETY: the test's process may fork; a child, had it been made, ends at once.
        #[allow(unsafe_code)]
        let forked = unsafe { libc::fork() };
        if forked == 0 {
            // SAFETY: ends the child a fork made, were it made.
            #[allow(unsafe_code)]
            unsafe {
                libc::_exit(0)
            };
        }
        assert_eq!(forked, -1, "a process was forked");
        assert_eq!(std::thread::spawn(|| 6 * 7).join().unwrap(), 42);
        // Nor the process that started it, signalled or bounded.
        denied(
            "a signal to the parent",
            nix::sys::signal::kill(parent, None).map_err(std::io::Error::from),
        );
        denied(
            "a signal to every process",
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(-1), None)
                .map_err(std::io::Error::from),
        );
        // SAFETY: asks for a signal 0 (none is sent) to the parent's main thread.
        #[allow(unsafe_code)]
        let to_parent =
            unsafe { libc::syscall(libc::SYS_tgkill, parent.as_raw(), parent.as_raw(), 0) };
        assert_eq!(to_parent, -1, "a signal to the parent's thread");
        // Its own threads it may signal (as `abort` does).
        // SAFETY: signal 0 (none is sent) to this process's own thread.
        #[allow(unsafe_code)]
        let to_self = unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                std::process::id(),
                nix::unistd::gettid().as_raw(),
                0,
            )
        };
        assert_eq!(to_self, 0, "a signal to its own thread");
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: writes the parent's limit into a local, were it allowed.
        #[allow(unsafe_code)]
        let read = unsafe {
            libc::prlimit(
                parent.as_raw(),
                libc::RLIMIT_CORE,
                std::ptr::null(),
                &raw mut limit,
            )
        };
        assert_eq!(read, -1, "the parent's limits were read");
        // SAFETY: asks for the parent's priority to change; no memory is passed.
        #[allow(unsafe_code)]
        let reniced =
            unsafe { libc::setpriority(libc::PRIO_PROCESS, parent.as_raw().cast_unsigned(), 19) };
        assert_eq!(reniced, -1, "the parent was reniced");
        // SAFETY: asks for a System V shared memory segment, and a watch; no memory passed.
        #[allow(unsafe_code)]
        let (shared, watch) = unsafe {
            (
                libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600),
                libc::inotify_init1(0),
            )
        };
        assert_eq!((shared, watch), (-1, -1), "System V IPC, or a watch");
        // Blocks past a file's end, and a directory of its store made unwritable.
        let chunk = std::fs::File::open(dir.join("store/tas/0.0")).unwrap();
        // SAFETY: asks for blocks for a file of its store; no memory is passed.
        #[allow(unsafe_code)]
        let allocated =
            unsafe { libc::fallocate(chunk.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 30) };
        assert_eq!(allocated, -1, "blocks were allocated past the file's end");
        use std::os::unix::fs::PermissionsExt;
        denied(
            "a chmod",
            std::fs::set_permissions(
                dir.join("store/tas"),
                std::fs::Permissions::from_mode(0o500),
            ),
        );
        // No capability but the one that opens its sources again (a test run as root has
        // them all before).
        let kept = caps::read(None, caps::CapSet::Effective).unwrap();
        assert!(
            kept.iter()
                .all(|&capability| capability == caps::Capability::CAP_DAC_READ_SEARCH),
            "{kept:?}"
        );
        println!("confined as it should be");
    }
}
