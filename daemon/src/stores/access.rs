//! Who may convert a file: only a user who may read it (DECISIONS). The daemon usually runs
//! as its own system user and can read more than its callers, so it checks for them.
//!
//! - A caller whose name is a local account (the password database, looked up with `nix`) may
//!   convert what that account may read: every directory on the way must grant it search (`x`)
//!   and the file read (`r`) permission, by owner, group (the account's primary and
//!   supplementary groups) or other bits, as the kernel would decide without ACLs.
//! - A caller without a local account (a user of an identity provider) may convert what lies
//!   under one of `stores.allowed_roots`. So does one named as a system account (root, the
//!   daemons: a uid below `UID_MIN` of `/etc/login.defs`; `nobody`) or as the
//!   account the daemon runs as (see [`user_account`]): a name is all a token says, and
//!   those of the system are no one's to claim. The operator's `svcd store convert`, run as
//!   root, converts so too.
//!
//! Paths are resolved first (symbolic links followed), so a link inside an allowed root that
//! points outside it is judged by its target. A path that does not exist is allowed when its
//! existing directories are searchable: its conversion then fails with a reason naming it,
//! which tells the caller no more than `ls` would.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

use crate::error::{Error, Result};

/// The identity permissions are checked for.
enum Reader {
    /// A local account.
    Account {
        uid: Uid,
        /// Primary and supplementary groups.
        groups: Vec<Gid>,
    },
    /// No local account: only the allowed roots.
    Remote,
}

/// Permission bits a check asks for.
#[derive(Clone, Copy)]
enum Want {
    Search,
    Read,
}

/// The first uid of users' accounts: `UID_MIN` of `/etc/login.defs` (1000 where it does not
/// say, as Debian's); the uids below are the system's. Read once. (No upper bound: a
/// directory service's users often have uids far above `UID_MAX`, which is local.)
fn first_user_uid() -> u32 {
    static FIRST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *FIRST.get_or_init(|| {
        let defs = std::fs::read_to_string("/etc/login.defs").unwrap_or_default();
        uid_min(&defs).unwrap_or(1000)
    })
}

/// `UID_MIN` of a `login.defs` text: lines `NAME VALUE` (`#` comments), the last setting
/// counting (`None` when it is not a number: the shadow tools then use their default), its
/// value read as those tools read numbers (C's `strtol` with base 0: `0x` hexadecimal, a
/// leading `0` octal, else decimal).
fn uid_min(defs: &str) -> Option<u32> {
    defs.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "UID_MIN").then(|| words.next().unwrap_or(""))
        })
        .next_back()
        .and_then(|value| {
            let (digits, radix) = if let Some(hex) = value
                .strip_prefix("0x")
                .or_else(|| value.strip_prefix("0X"))
            {
                (hex, 16)
            } else if value.len() > 1 && value.starts_with('0') {
                (&value[1..], 8)
            } else {
                (value, 10)
            };
            u32::from_str_radix(digits, radix).ok()
        })
}

/// The uids of `nobody` (the overflow uid) and of the old `nfsnobody`: system accounts above
/// `UID_MIN`.
const NOBODY_UIDS: [u32; 2] = [65_534, 4_294_967_294];

/// The uids systemd gives the services it runs with `DynamicUser=` (its documented range):
/// system accounts above `UID_MIN`, made and named for a service while it runs.
const DYNAMIC_SERVICE_UIDS: std::ops::RangeInclusive<u32> = 61_184..=65_519;

/// The local account a service user `user` is: the account of that name, unless it is a
/// system account (root, the daemons: a uid below [`first_user_uid`]; `nobody`; a systemd
/// service's dynamic user, [`DYNAMIC_SERVICE_UIDS`]) or the one
/// the daemon runs as, whose names no user of an identity provider may turn into those
/// accounts' rights (`None` then, as for a name with no account). The mount gives files of
/// such users' stores to root, as those of users without an account.
///
/// # Errors
/// The password database cannot be read.
pub fn user_account(user: &str) -> nix::Result<Option<User>> {
    Ok(User::from_name(user)?.filter(|account| is_users_uid(account.uid)))
}

/// Whether `uid` is a user's, not the system's (see [`user_account`]).
fn is_users_uid(uid: Uid) -> bool {
    let raw = uid.as_raw();
    raw >= first_user_uid()
        && !NOBODY_UIDS.contains(&raw)
        && !DYNAMIC_SERVICE_UIDS.contains(&raw)
        && uid != Uid::effective()
}

impl Reader {
    fn of(user: &str) -> Result<Self> {
        let account = user_account(user)
            .map_err(|e| Error::io(format!("look up the account {user:?}"), e.into()))?;
        let Some(account) = account else {
            return Ok(Reader::Remote);
        };
        let name = CString::new(user).expect("account names have no NUL");
        let groups = nix::unistd::getgrouplist(&name, account.gid)
            .map_err(|e| Error::io(format!("look up the groups of {user:?}"), e.into()))?;
        Ok(Reader::Account {
            uid: account.uid,
            groups,
        })
    }

    /// Whether the metadata grants this reader `want`.
    fn granted(&self, meta: &std::fs::Metadata, want: Want) -> bool {
        let Reader::Account { uid, groups } = self else {
            return false;
        };
        let bits = match want {
            Want::Search => 0o1,
            Want::Read => 0o4,
        };
        let class = if meta.uid() == uid.as_raw() {
            6
        } else if groups.iter().any(|g| g.as_raw() == meta.gid()) {
            3
        } else {
            0
        };
        meta.mode() & (bits << class) != 0
    }
}

/// Checks that `user` may read every one of `sources` (absolute, normalised paths).
///
/// # Errors
/// [`Error::SourceForbidden`] naming the first source the user may not read; an I/O error
/// looking up the account.
pub(crate) fn check(user: &str, sources: &[String], allowed_roots: &[PathBuf]) -> Result<()> {
    if user.is_empty() || user.contains('\0') {
        return Err(forbidden(sources.first().map_or("", String::as_str)));
    }
    check_as(&Reader::of(user)?, sources, allowed_roots)
}

/// [`check`] for `reader`.
fn check_as(reader: &Reader, sources: &[String], allowed_roots: &[PathBuf]) -> Result<()> {
    for source in sources {
        let path = Path::new(source);
        // A path that cannot be resolved (it does not exist, or a directory on the way is
        // closed to the daemon) is judged as written.
        let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let allowed = match reader {
            Reader::Remote => allowed_roots.iter().any(|root| {
                let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
                resolved.starts_with(root)
            }),
            account => readable(account, &resolved),
        };
        if !allowed {
            return Err(forbidden(source));
        }
    }
    Ok(())
}

/// Checks that `user` may read the opened `source`: as [`check`] for its path, and that the
/// path still names the file that was opened. A conversion and a chunk computed on demand
/// check again when they open the source, so a path changed since the request (a file
/// replaced by a link to one the user may not read) gives them nothing.
///
/// # Errors
/// As [`check`]; [`Error::SourceForbidden`] when the path names another file now.
pub(crate) fn check_opened(
    user: &str,
    source: &crate::convert::Source,
    allowed_roots: &[PathBuf],
) -> Result<()> {
    let path = source.path().to_string_lossy().into_owned();
    check(user, std::slice::from_ref(&path), allowed_roots)?;
    let named = std::fs::metadata(source.path()).map(|meta| (meta.dev(), meta.ino()));
    match (named, source.identity()) {
        (Ok(named), Ok(opened)) if named == opened => Ok(()),
        _ => Err(forbidden(&path)),
    }
}

/// Whether a local account may read `path`: search on every existing directory above it, and
/// read on the file itself if it exists.
fn readable(reader: &Reader, path: &Path) -> bool {
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    for dir in ancestors {
        match std::fs::metadata(dir) {
            Ok(meta) if reader.granted(&meta, Want::Search) => {}
            Ok(_) => return false,
            Err(_) => return true,
        }
    }
    match std::fs::metadata(path) {
        Ok(meta) => reader.granted(&meta, Want::Read),
        Err(_) => true,
    }
}

fn forbidden(path: &str) -> Error {
    Error::SourceForbidden {
        path: path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A tree the tests' accounts see differently: `open/` for all, `closed/` for root only.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for (sub, mode) in [("open", 0o755), ("closed", 0o700)] {
            let sub_dir = dir.path().join(sub);
            std::fs::create_dir(&sub_dir).unwrap();
            let file = sub_dir.join("a.nc");
            std::fs::write(&file, b"CDF").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            std::fs::set_permissions(&sub_dir, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let private = dir.path().join("open").join("private.nc");
        std::fs::write(&private, b"CDF").unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("closed").join("a.nc"),
            dir.path().join("open").join("link.nc"),
        )
        .unwrap();
        dir
    }

    fn path(dir: &tempfile::TempDir, rel: &str) -> String {
        dir.path().join(rel).to_string_lossy().into_owned()
    }

    #[test]
    fn a_local_account_converts_what_it_may_read() {
        // An account that owns nothing in the tree (root owns it all), in none of its groups.
        let dir = tree();
        let account = Reader::Account {
            uid: Uid::from_raw(4242),
            groups: vec![Gid::from_raw(4242)],
        };
        let ok = |rel: &str| check_as(&account, &[path(&dir, rel)], &[]).is_ok();
        assert!(ok("open/a.nc"));
        assert!(!ok("closed/a.nc"), "a closed directory on the way");
        assert!(!ok("open/private.nc"), "a file only its owner reads");
        assert!(!ok("open/link.nc"), "a link is judged by its target");
        assert!(ok("open/missing.nc"), "fails later, naming the file");
        assert!(!ok("closed/missing.nc"), "nobody may look into closed/");
        let err = check_as(
            &account,
            &[path(&dir, "open/a.nc"), path(&dir, "open/private.nc")],
            &[],
        )
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Forbidden);
        assert!(err.to_string().contains("private.nc"), "{err}");
    }

    #[test]
    fn names_of_system_accounts_are_users_without_an_account() {
        // Root, daemons and `nobody` exist on every Debian system; a token naming them gets
        // what any user without an account gets, not their reads.
        let dir = tree();
        for system in ["root", "daemon", "bin", "nobody"] {
            assert!(user_account(system).unwrap().is_none(), "{system}");
            assert!(check(system, &[path(&dir, "closed/a.nc")], &[]).is_err());
            let roots = [dir.path().join("closed")];
            assert!(check(system, &[path(&dir, "closed/a.nc")], &roots).is_ok());
        }
    }

    #[test]
    fn a_user_without_an_account_converts_under_the_allowed_roots() {
        let dir = tree();
        let roots = [dir.path().join("open")];
        let ok = |user: &str, rel: &str| check(user, &[path(&dir, rel)], &roots).is_ok();
        for user in ["jane.doe@idp", "*", "-jane", "global"] {
            assert!(ok(user, "open/a.nc"), "{user}");
            assert!(!ok(user, "closed/a.nc"), "{user}");
            assert!(
                !ok(user, "open/link.nc"),
                "{user}: the link leaves the root"
            );
            assert!(!ok(user, "open/../closed/a.nc"), "{user}");
        }
        assert!(check("", &[path(&dir, "open/a.nc")], &roots).is_err());
        assert!(check("jane.doe@idp", &[path(&dir, "open/a.nc")], &[]).is_err());
    }

    #[test]
    fn uids_of_the_system_are_no_users_accounts() {
        let users = |uid: u32| is_users_uid(Uid::from_raw(uid));
        let first = first_user_uid();
        assert!(!users(0) && !users(first - 1) && users(first));
        // systemd's dynamic service users, nobody and nfsnobody; a directory service's.
        assert!(!users(61_184) && !users(65_519) && users(61_183) && users(65_520));
        assert!(!users(65_534) && !users(4_294_967_294));
        assert!(users(1_000_000));
        assert!(!is_users_uid(Uid::effective()));
    }

    #[test]
    fn uid_min_is_read_as_the_shadow_tools_read_it() {
        let defs = |text: &str| uid_min(text);
        assert_eq!(defs("UID_MIN 1000\n"), Some(1000));
        assert_eq!(defs("UID_MIN\t0x3e8\n"), Some(1000));
        assert_eq!(defs("UID_MIN 01750\n"), Some(1000));
        assert_eq!(defs("UID_MIN 0\n"), Some(0));
        assert_eq!(defs("# UID_MIN 5\nUID_MAX 60000\n"), None);
        assert_eq!(defs("UID_MIN 500\nUID_MIN 2000\n"), Some(2000));
        assert_eq!(defs("UID_MIN lots\n"), None);
        assert_eq!(defs("UID_MIN 500\nUID_MIN lots\n"), None);
    }
}
