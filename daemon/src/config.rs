//! Configuration: the embedded default (`default.toml`) < a TOML file < `SVCD_*` environment
//! variables < command-line flags. Validated once into typed values; an error names the key.
//! Only this module reads the environment.
//!
//! The file is strict: an unknown key is an error. The environment is shared with other
//! programs (a client's `SVC_URL`, a test's `SVCD_BIN`), so only `SVCD_` names that name a
//! key are read; other `SVCD_` names are listed in [`Config::ignored_env`] for a warning and
//! never stop a command.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::{Table, Value};

use crate::error::{Error, Result};

/// The embedded default configuration.
pub(crate) const DEFAULT_TOML: &str = include_str!("default.toml");

/// The prefix of environment variables that override configuration keys.
pub(crate) const ENV_PREFIX: &str = "SVCD_";

/// The configuration file read when `--config` is not given, if it exists.
pub(crate) const SYSTEM_CONFIG: &str = "/etc/svc-nextgen/svcd.toml";

/// The API path prefix.
pub const API_PREFIX: &str = "/api/svc-nextgen";

/// The most restores `tier.max_restores` lets run at once: each holds a thread and a
/// blob's worth of staging space.
pub(crate) const MAX_RESTORES: usize = 256;

/// The longest `tier.cleaning_interval_seconds`: a week.
const MAX_CLEANING_INTERVAL_SECONDS: u64 = 7 * 86_400;

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory of the store and the control socket (default `./var`).
    pub data_dir: PathBuf,
    /// Base URL for emitted links (default `http://<http.listen>`).
    pub public_url: String,
    /// HTTP facade settings.
    pub http: HttpConfig,
    /// Token verification settings.
    pub auth: AuthConfig,
    /// Zarr store settings.
    pub stores: StoresConfig,
    /// The cold tier and blob manifests.
    pub tier: TierConfig,
    /// The FUSE mount.
    pub mount: MountConfig,
    /// `SVCD_` environment variables that name no configuration key (ignored).
    #[serde(skip)]
    pub ignored_env: Vec<String>,
}

/// The `[auth]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `iss` of the tokens this daemon issues (default `svcd`).
    pub issuer: String,
    /// `aud` required on every token (default `svc-nextgen`).
    pub audience: String,
    /// Roles that make a token's holder an admin (default `["admin"]`).
    pub admin_roles: Vec<String>,
    /// OpenID Connect discovery URLs of trusted identity providers (default none).
    pub oidc_discovery_urls: Vec<String>,
    /// Callback ports announced to freva-client.
    pub auth_ports: Vec<u16>,
}

/// The `[stores]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoresConfig {
    /// Conversions run at once (default 2; at least 1).
    pub workers: usize,
    /// Longest validity of a public store or share URL, in seconds (default 7 days).
    pub max_ttl_seconds: u64,
    /// Directories whose files any authenticated user may convert when the user has no
    /// local account to check permissions against (default none).
    pub allowed_roots: Vec<PathBuf>,
    /// Stores nobody has read for this long are removed by the hourly sweep, in seconds
    /// (default 30 days; 0: never).
    pub unread_expiry_seconds: u64,
    /// The compressor of new stores' chunks (default `lz4`).
    pub compressor: crate::convert::Compressor,
    /// MiB a conversion leaves free on the hot tier's file system, with 1% of its inodes
    /// (default `"auto"`: 1% of the file system's size, at most 1024; 0: none): it stops
    /// there and fails its store, so that one store does not take the room restores and the
    /// database need.
    pub hot_reserve_mib: MibOrAuto,
    /// MiB the stores of one user may take in all, those being converted with those ready
    /// (default `"auto"`: a quarter of the hot tier's file system; 0: no bound): a
    /// conversion that would go past it stops and fails its store, so that one user's
    /// stores do not take the room every other user's conversions need.
    pub max_user_mib: MibOrAuto,
    /// Longest a conversion may run, in seconds (default a day; 0: no limit): past it, it
    /// stops and fails its store.
    pub max_conversion_seconds: u64,
    /// MiB of address space a conversion's process may take (default 4096; 0: no bound):
    /// the NetCDF library allocates what a source's bytes claim. A process computing a chunk
    /// or document a reader asks for before the conversion wrote it takes at most as much,
    /// and at most 1024.
    pub max_conversion_memory_mib: u64,
}

impl StoresConfig {
    /// `max_conversion_memory_mib` in bytes (0: no bound).
    pub(crate) fn conversion_memory(&self) -> u64 {
        self.max_conversion_memory_mib.saturating_mul(1 << 20)
    }

    /// The address space of a process computing a chunk or document a reader asks for
    /// before the conversion wrote it, in bytes: [`StoresConfig::conversion_memory`], and at
    /// most 1 GiB (such a chunk is at most 64 MiB), so that the requests computed at once
    /// (4) take a bounded share of the machine with the conversions.
    pub(crate) fn on_demand_memory(&self) -> u64 {
        const MOST: u64 = 1 << 30;
        match self.conversion_memory() {
            0 => MOST,
            bound => bound.min(MOST),
        }
    }
}

/// `stores.hot_reserve_mib` and `stores.max_user_mib`: `"auto"` (each says what it is), or
/// a number of MiB (a number or its digits, as an environment variable gives it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MibOrAuto {
    /// Worked out from the hot tier's file system.
    Auto,
    /// This many MiB.
    Mib(u64),
}

impl MibOrAuto {
    /// The bytes it sets: its MiB, or, `auto`, what `auto` makes of the size in bytes of
    /// the file system of `path` (`None`: it cannot be read).
    pub fn bytes(self, path: &std::path::Path, auto: impl FnOnce(Option<u64>) -> u64) -> u64 {
        match self {
            MibOrAuto::Mib(mib) => mib.saturating_mul(1 << 20),
            MibOrAuto::Auto => auto(
                nix::sys::statvfs::statvfs(path)
                    .ok()
                    .map(|stat| stat.blocks().saturating_mul(stat.fragment_size())),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for MibOrAuto {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(u64),
            Text(String),
        }
        match Given::deserialize(deserializer)? {
            Given::Number(mib) => Ok(MibOrAuto::Mib(mib)),
            Given::Text(text) if text == "auto" => Ok(MibOrAuto::Auto),
            Given::Text(text) => text.parse().map(MibOrAuto::Mib).map_err(|_| {
                serde::de::Error::custom(format!("\"auto\" or a number of MiB, not {text:?}"))
            }),
        }
    }
}

/// The `[tier]` section: where archived blobs go and how stores are cut into blobs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// The cold tier: a directory, file://, or s3://bucket[/prefix] (default empty:
    /// `<data_dir>/cold`).
    pub cold: String,
    /// Where each store's manifest is also written as JSON, at `<token>/manifest.json`
    /// (the reference tools' layout): a directory, file:// or s3:// URL (default empty: not).
    pub manifests: String,
    /// A store at or under this many bytes is one blob; larger arrays are bucketed
    /// (default 100 GiB, the manifests' default).
    pub t_max_bytes: u64,
    /// Arrays under this many bytes stay hot (default 16 MiB, the manifests' default).
    pub t_hot_bytes: u64,
    /// How often a serving daemon cleans the cold tier of the stores marked for it, in
    /// seconds (default 600, at most a week).
    pub cleaning_interval_seconds: u64,
    /// Restores from the cold tier that readers' reads run at once (default 8, at most
    /// [`MAX_RESTORES`]); one reader's (see [`crate::Asked::by`]) take at most half of them
    /// (rounded up), and readers with restores waiting take turns (see [`crate::FairPool`]).
    /// `svcd tier restore` runs its restores itself, one after another, outside this count.
    pub max_restores: usize,
}

/// The `[mount]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// Mount the stores here when serving (default empty: not; `--mount` overrides).
    pub dir: String,
    /// A read through the mount that the daemon cannot answer within this many seconds
    /// (a restore from the cold tier that takes longer) fails with EIO (default 120).
    pub read_timeout_seconds: u64,
    /// Let the kernel read hot chunks directly from the hot tier (FUSE passthrough, Linux
    /// 6.9+, needs CAP_SYS_ADMIN); reads fall back to the daemon where it cannot (default
    /// true).
    pub passthrough: bool,
}

/// The `[http]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address (default `127.0.0.1:7777`; port 0 picks a free port).
    pub listen: SocketAddr,
    /// Extra API prefixes (default none).
    pub compat_prefixes: Vec<String>,
    /// Expensive requests served at once (default 0: twice the cores).
    pub max_expensive_requests: usize,
}

impl HttpConfig {
    /// The number of expensive requests served at once.
    pub fn expensive_slots(&self) -> usize {
        match self.max_expensive_requests {
            0 => 2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// The user's home directory (`HOME`), for a leading `~` in paths given on the command line.
pub fn home_dir() -> Option<String> {
    #[expect(
        clippy::disallowed_methods,
        reason = "this module reads the environment"
    )]
    std::env::var("HOME").ok().filter(|home| !home.is_empty())
}

/// The variables of the daemon's environment that the processes reading users' files
/// (probes, conversions) start with: their log's (`RUST_LOG`, `RUST_BACKTRACE`), and where
/// HDF5 finds the filters it loads (`HDF5_PLUGIN_PATH`). Any other (the cold tier's
/// credentials, the configuration's overrides) stays in the daemon: such a process could be
/// made to say it.
pub(crate) fn children_environment() -> Vec<(&'static str, std::ffi::OsString)> {
    #[expect(
        clippy::disallowed_methods,
        reason = "this module reads the environment"
    )]
    ["RUST_LOG", "RUST_BACKTRACE", "HDF5_PLUGIN_PATH"]
        .into_iter()
        .filter_map(|name| Some((name, std::env::var_os(name)?)))
        .collect()
}

/// The login name, as Python's `getpass.getuser` finds it (pins record who set them): the
/// first non-empty of `LOGNAME`, `USER`, `LNAME`, `USERNAME`, else the password database
/// entry of the real uid, else `unknown`.
pub fn login_name() -> String {
    #[expect(
        clippy::disallowed_methods,
        reason = "this module reads the environment"
    )]
    let from_env = ["LOGNAME", "USER", "LNAME", "USERNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
    from_env
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|user| user.name)
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Overrides given on the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<SocketAddr>,
}

impl Config {
    /// Builds the configuration from all sources.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file or key that is wrong.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self> {
        #[expect(
            clippy::disallowed_methods,
            reason = "this module reads the environment"
        )]
        let env: Vec<(String, String)> = std::env::vars().collect();
        let file = file.map(Path::to_path_buf).or_else(|| {
            let system = PathBuf::from(SYSTEM_CONFIG);
            system.exists().then_some(system)
        });
        Self::from_sources(file.as_deref(), &env, overrides)
    }

    /// Builds the configuration from explicit sources (testable without the environment).
    ///
    /// # Errors
    /// [`Error::Config`] naming the file or key that is wrong.
    pub fn from_sources(
        file: Option<&Path>,
        env: &[(String, String)],
        overrides: &Overrides,
    ) -> Result<Self> {
        let mut table: Table = DEFAULT_TOML
            .parse()
            .expect("the embedded default is valid TOML");
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
            let overlay: Table = text
                .parse()
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            merge(&mut table, overlay);
        }
        let mut ignored_env = Vec::new();
        for (name, value) in env.iter().filter(|(k, _)| k.starts_with(ENV_PREFIX)) {
            if !apply_env(&mut table, name, value) {
                ignored_env.push(name.clone());
            }
        }
        let mut config: Config = Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                Error::Config(format!("{} (after the environment overrides)", e.message()))
            })?;
        config.ignored_env = ignored_env;
        if let Some(dir) = &overrides.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(listen) = overrides.listen {
            config.http.listen = listen;
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        for prefix in &self.http.compat_prefixes {
            if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.len() < 2 {
                return Err(Error::Config(format!(
                    "http.compat_prefixes: {prefix:?} must start with '/' and not end with '/'"
                )));
            }
        }
        for url in &self.auth.oidc_discovery_urls {
            if !url.starts_with("http://") && !url.starts_with("https://") {
                return Err(Error::Config(format!(
                    "auth.oidc_discovery_urls: {url:?} is not an http(s) URL"
                )));
            }
        }
        if self.auth.audience.is_empty() || self.auth.issuer.is_empty() {
            return Err(Error::Config(
                "auth.issuer and auth.audience must not be empty".into(),
            ));
        }
        if self.stores.workers == 0 {
            return Err(Error::Config("stores.workers must be at least 1".into()));
        }
        if self.stores.max_ttl_seconds < crate::stores::request::MIN_TTL_SECONDS {
            return Err(Error::Config(format!(
                "stores.max_ttl_seconds must be at least {}",
                crate::stores::request::MIN_TTL_SECONDS
            )));
        }
        if !self.tier.manifests.is_empty()
            && self.tier.manifests.trim_end_matches('/') == self.cold_url().trim_end_matches('/')
        {
            return Err(Error::Config(
                "tier.manifests must not be the cold tier (tier.cold): the cold tier holds \
                 blobs only"
                    .into(),
            ));
        }
        if self.tier.t_max_bytes == 0 {
            return Err(Error::Config("tier.t_max_bytes must be at least 1".into()));
        }
        if !(1..=MAX_CLEANING_INTERVAL_SECONDS).contains(&self.tier.cleaning_interval_seconds) {
            return Err(Error::Config(format!(
                "tier.cleaning_interval_seconds must be 1 to {MAX_CLEANING_INTERVAL_SECONDS} (a week)"
            )));
        }
        if !(1..=MAX_RESTORES).contains(&self.tier.max_restores) {
            return Err(Error::Config(format!(
                "tier.max_restores must be 1 to {MAX_RESTORES}"
            )));
        }
        if self.mount.read_timeout_seconds == 0 {
            return Err(Error::Config(
                "mount.read_timeout_seconds must be at least 1".into(),
            ));
        }
        if let Some(root) = self.stores.allowed_roots.iter().find(|r| !r.is_absolute()) {
            return Err(Error::Config(format!(
                "stores.allowed_roots: {} is not an absolute path",
                root.display()
            )));
        }
        if !self.public_url.is_empty() && !self.public_url.starts_with("http") {
            return Err(Error::Config(format!(
                "public_url: {:?} is not an http(s) URL",
                self.public_url
            )));
        }
        Ok(())
    }

    /// The directory of the RocksDB store.
    pub fn store_dir(&self) -> PathBuf {
        self.data_dir.join("db")
    }

    /// The hot tier of the Zarr stores: one directory per store.
    pub fn stores_dir(&self) -> PathBuf {
        self.data_dir.join("stores")
    }

    /// The cold tier's URL: `tier.cold`, else `<data_dir>/cold`.
    pub fn cold_url(&self) -> String {
        if self.tier.cold.is_empty() {
            self.data_dir.join("cold").display().to_string()
        } else {
            self.tier.cold.clone()
        }
    }

    /// Where the tier fetches cold objects from S3 to restore them (on the hot tier's file
    /// system).
    pub fn staging_dir(&self) -> PathBuf {
        self.data_dir.join("staging")
    }

    /// The key that signs share URLs.
    pub fn share_key_file(&self) -> PathBuf {
        self.data_dir.join("portal").join("share.key")
    }

    /// The control socket of a running daemon.
    pub fn control_socket(&self) -> PathBuf {
        self.data_dir.join("svcd.sock")
    }

    /// The daemon's token signing key.
    pub fn signing_key_file(&self) -> PathBuf {
        self.data_dir.join("auth").join("signing-key.pem")
    }

    /// The file a running daemon writes its bound HTTP address to.
    pub fn address_file(&self) -> PathBuf {
        self.data_dir.join("svcd.addr")
    }

    /// The base URL for emitted links, given the bound address.
    pub fn public_base(&self, bound: SocketAddr) -> String {
        if self.public_url.is_empty() {
            format!("http://{bound}")
        } else {
            self.public_url.trim_end_matches('/').to_string()
        }
    }
}

fn merge(base: &mut Table, overlay: Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

/// `SVCD_DATA_DIR` sets `data_dir`, `SVCD_HTTP_LISTEN` sets `http.listen`: the first `_` after
/// the section name separates section and key. Lists are comma-separated. Returns whether
/// `name` named a key.
fn apply_env(table: &mut Table, name: &str, value: &str) -> bool {
    let Some(key) = name.strip_prefix(ENV_PREFIX) else {
        return false;
    };
    let key = key.to_ascii_lowercase();
    if table.get(&key).is_some_and(|v| !v.is_table()) {
        let old = table[&key].clone();
        table.insert(key, env_value(&old, value));
        return true;
    }
    for (section, rest) in key
        .match_indices('_')
        .map(|(i, _)| (&key[..i], &key[i + 1..]))
    {
        if let Some(Value::Table(sub)) = table.get_mut(section)
            && let Some(old) = sub.get(rest).cloned()
        {
            sub.insert(rest.to_string(), env_value(&old, value));
            return true;
        }
    }
    false
}

fn env_value(old: &Value, value: &str) -> Value {
    match old {
        Value::Array(items) => Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| match items.first() {
                    Some(first) => env_value(first, s),
                    None => Value::String(s.into()),
                })
                .collect(),
        ),
        Value::Integer(_) => value
            .parse()
            .map_or_else(|_| Value::String(value.into()), Value::Integer),
        Value::Boolean(_) => value
            .parse()
            .map_or_else(|_| Value::String(value.into()), Value::Boolean),
        _ => Value::String(value.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_runs_from_var() {
        let c = Config::from_sources(None, &[], &Overrides::default()).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("./var"));
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:7777");
    }

    #[test]
    fn the_hot_reserve_and_the_user_bound_are_auto_unless_a_file_or_the_environment_gives_mib() {
        let reserve = |file: Option<&str>, env: &[(&str, &str)]| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("svcd.toml");
            if let Some(text) = file {
                std::fs::write(&path, text).unwrap();
            }
            let env: Vec<(String, String)> = env
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect();
            Config::from_sources(file.map(|_| path.as_path()), &env, &Overrides::default())
                .map(|c| c.stores.hot_reserve_mib)
        };
        assert_eq!(reserve(None, &[]).unwrap(), MibOrAuto::Auto);
        let set = "[stores]\nhot_reserve_mib = 512\n";
        assert_eq!(reserve(Some(set), &[]).unwrap(), MibOrAuto::Mib(512));
        let env = [("SVCD_STORES_HOT_RESERVE_MIB", "0")];
        assert_eq!(reserve(None, &env).unwrap(), MibOrAuto::Mib(0));
        let env = [("SVCD_STORES_HOT_RESERVE_MIB", "auto")];
        assert_eq!(reserve(Some(set), &env).unwrap(), MibOrAuto::Auto);
        let err = reserve(None, &[("SVCD_STORES_HOT_RESERVE_MIB", "lots")]).unwrap_err();
        assert!(err.to_string().contains("not \"lots\""), "{err}");
        let config = Config::from_sources(
            None,
            &[("SVCD_STORES_MAX_USER_MIB".into(), "64".into())],
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(config.stores.max_user_mib, MibOrAuto::Mib(64));
        let default = Config::from_sources(None, &[], &Overrides::default()).unwrap();
        assert_eq!(default.stores.max_user_mib, MibOrAuto::Auto);
    }

    #[test]
    fn precedence_is_default_file_env_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("svcd.toml");
        std::fs::write(
            &file,
            "data_dir = \"/srv/a\"\n[http]\nlisten = \"0.0.0.0:1\"\n",
        )
        .unwrap();
        let env = vec![("SVCD_HTTP_LISTEN".to_string(), "127.0.0.1:2".to_string())];
        let c = Config::from_sources(Some(&file), &env, &Overrides::default()).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/srv/a"));
        assert_eq!(c.http.listen.port(), 2);
        let flags = Overrides {
            data_dir: Some("/x".into()),
            listen: Some("127.0.0.1:3".parse().unwrap()),
        };
        let c = Config::from_sources(Some(&file), &env, &flags).unwrap();
        assert_eq!((c.data_dir, c.http.listen.port()), (PathBuf::from("/x"), 3));
        let env = vec![(
            "SVCD_HTTP_COMPAT_PREFIXES".to_string(),
            "/api/freva-nextgen".to_string(),
        )];
        let c = Config::from_sources(None, &env, &Overrides::default()).unwrap();
        assert_eq!(c.http.compat_prefixes, ["/api/freva-nextgen"]);
    }

    #[test]
    fn the_example_system_config_is_valid() {
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../systemd/svcd.toml");
        let c = Config::from_sources(Some(Path::new(example)), &[], &Overrides::default()).unwrap();
        assert_eq!(c.http.compat_prefixes, ["/api/freva-nextgen"]);
        assert_eq!(
            c.public_base("127.0.0.1:1".parse().unwrap()),
            "https://data.example.org"
        );
    }

    #[test]
    fn errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("svcd.toml");
        std::fs::write(&file, "colour = 1\n").unwrap();
        let err = Config::from_sources(Some(&file), &[], &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("colour"), "{err}");
        let env = vec![
            ("SVCD_NOPE".to_string(), "1".to_string()),
            ("SVC_URL".to_string(), "http://elsewhere".to_string()),
        ];
        let c = Config::from_sources(None, &env, &Overrides::default()).unwrap();
        assert_eq!(c.ignored_env, ["SVCD_NOPE"]);
        let env = vec![("SVCD_HTTP_LISTEN".to_string(), "nonsense".to_string())];
        assert!(Config::from_sources(None, &env, &Overrides::default()).is_err());
    }

    #[test]
    fn the_cleaning_interval_is_a_second_to_a_week() {
        let with = |seconds: &str| {
            let env = vec![(
                "SVCD_TIER_CLEANING_INTERVAL_SECONDS".to_string(),
                seconds.to_string(),
            )];
            Config::from_sources(None, &env, &Overrides::default())
        };
        assert_eq!(with("60").unwrap().tier.cleaning_interval_seconds, 60);
        for wrong in ["0", "604801", "9223372036854775807"] {
            let err = with(wrong).unwrap_err().to_string();
            assert!(
                err.contains("tier.cleaning_interval_seconds"),
                "{wrong}: {err}"
            );
        }
    }
}
