//! Creating, updating, deleting and listing custom flavours (spec 1, endpoints 8-11).
//!
//! Every change is one RocksDB batch and is made under the registry's write lock, so a check
//! ("does the name exist?") and the write it guards cannot interleave with another change:
//! of many concurrent creates of one name exactly one succeeds.
//!
//! Which flavour a name means for a change: the caller's personal flavour of that name (or
//! `caller:name`), unless `is_global` asks for the global one; otherwise the global custom
//! flavour. Built-ins are neither editable nor deletable (422); a regular user touching a
//! global flavour gets 403; a name the caller cannot see (another user's personal flavour)
//! is 404, so its existence is not revealed.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{BUILTIN_NAMES, Flavour, Flavours, GLOBAL_OWNER, StoredFlavour};
use crate::auth::Caller;
use crate::catalog::facet::STANDARD_FACETS;
use crate::db::{Batch, cf};
use crate::error::{Error, Fault, Holder, Missing, Result};

/// Result keys no facet may be renamed onto.
const RESERVED_TARGETS: [&str; 3] = ["file", "uri", "fs_type"];

/// The longest name a mapping gives a facet, in bytes.
pub(crate) const MAX_FACET_NAME_BYTES: usize = 64;

/// The most personal flavours one user may hold (each is resolved for each of their
/// searches, and listed in every overview they ask for).
pub(crate) const MAX_PERSONAL_FLAVOURS: usize = 100;

/// Why a facet can not be searched by `renamed`, if it cannot: a search reads its
/// parameter names in lower case, takes a `_not_` in one as a negation, and reads its
/// declared parameters (`start`, `fields`, `time_select`, ...) as such, never as facets.
fn unsearchable(renamed: &str) -> Option<String> {
    use crate::databrowser::params::{DECLARED, SELECT_KEYS};
    if renamed.len() > MAX_FACET_NAME_BYTES {
        return Some(format!("is longer than {MAX_FACET_NAME_BYTES} bytes"));
    }
    if renamed.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Some("holds a space or a control character".into());
    }
    if renamed != renamed.to_lowercase() {
        return Some("is not in lower case (searches read their parameters so)".into());
    }
    if renamed.contains("_not_") {
        return Some("holds `_not_`, which a search reads as a negation".into());
    }
    if DECLARED.contains(&renamed) || SELECT_KEYS.contains(&renamed) {
        return Some("is a parameter of the search endpoints".into());
    }
    None
}

/// A create or update request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlavourRequest {
    /// The name (create), or the new name (update; absent or null keeps it).
    #[serde(default)]
    pub flavour_name: Option<String>,
    /// Standard name -> flavour name; partial on update.
    #[serde(default)]
    pub mapping: Option<BTreeMap<String, String>>,
    /// Whether the flavour is (or the request targets) a global one.
    #[serde(default)]
    pub is_global: Option<bool>,
}

impl FlavourRequest {
    /// Parses a JSON body.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] saying what is wrong with the body.
    pub fn parse(body: &[u8]) -> Result<Self> {
        serde_json::from_slice(body)
            .map_err(|e| Error::invalid("body", Fault::Syntax, format!("Invalid body: {e}")))
    }

    fn global(&self) -> bool {
        self.is_global.unwrap_or(false)
    }
}

/// Filters of the listing.
#[derive(Debug, Default)]
pub struct ListFilter {
    /// Only flavours of this name.
    pub flavour_name: Option<String>,
    /// Only flavours of this owner (`global` or a user name).
    pub owner: Option<String>,
}

fn check_name(name: &str) -> Result<()> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            "flavour_name",
            Fault::Refused,
            format!("flavour_name: {name:?} must be 1 to 64 letters, digits, '_' or '-'"),
        ))
    }
}

/// The 403 for a regular user acting on a global flavour.
fn admins_only(action: &'static str) -> Error {
    Error::AdminOnly {
        action,
        what: "global flavours",
    }
}

fn is_builtin(name: &str) -> bool {
    BUILTIN_NAMES.iter().any(|b| b.eq_ignore_ascii_case(name))
}

/// Checks a stored (partial) mapping and the effective mapping it gives a flavour `name`.
fn check_mapping(name: &str, mapping: &BTreeMap<String, String>) -> Result<()> {
    let mut unknown: Vec<&str> = mapping
        .keys()
        .map(String::as_str)
        .filter(|k| !STANDARD_FACETS.contains(k))
        .collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        return Err(Error::invalid(
            "mapping",
            Fault::Unknown,
            format!(
                "mapping: invalid keys {unknown:?}; valid keys are the standard facets {STANDARD_FACETS:?}"
            ),
        ));
    }
    for (key, value) in mapping {
        if value.trim().is_empty() {
            return Err(Error::invalid(
                "mapping",
                Fault::Refused,
                format!("mapping: the value of {key:?} is empty"),
            ));
        }
        if let Some(why) = unsearchable(value) {
            return Err(Error::invalid(
                "mapping",
                Fault::Refused,
                format!("mapping: {key:?} cannot be called {value:?}: the name {why}"),
            ));
        }
        if key == "fs_type" && value != "fs_type" {
            return Err(Error::invalid(
                "mapping",
                Fault::Refused,
                "mapping: fs_type is a reserved result key and cannot be renamed",
            ));
        }
        if RESERVED_TARGETS.contains(&value.as_str()) && key != value {
            return Err(Error::invalid(
                "mapping",
                Fault::Refused,
                format!(
                    "mapping: {key:?} cannot be renamed onto the reserved result key {value:?}"
                ),
            ));
        }
    }
    let effective = Flavour::custom(&StoredFlavour {
        flavour_name: name.to_string(),
        owner: String::new(),
        is_global: false,
        mapping: mapping.clone(),
        created_at: String::new(),
    });
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (standard, renamed) in effective.mapping() {
        if let Some(other) = seen.insert(renamed, standard) {
            return Err(Error::invalid(
                "mapping",
                Fault::Refused,
                format!(
                    "mapping: the effective mapping is not one-to-one: {other:?} and {standard:?} \
                     would both be called {renamed:?}"
                ),
            ));
        }
    }
    Ok(())
}

impl Flavours {
    /// Creates a flavour; returns the status message.
    ///
    /// # Errors
    /// 422 invalid definition, 403 a non-admin asks for a global flavour, 409 the name is
    /// taken (for a global flavour: also by a built-in).
    pub fn create(&self, caller: &Caller, request: &FlavourRequest) -> Result<String> {
        let name = request.flavour_name.as_deref().ok_or_else(|| {
            Error::invalid("flavour_name", Fault::WrongType, "flavour_name: required")
        })?;
        check_name(name)?;
        let mapping = request
            .mapping
            .as_ref()
            .ok_or_else(|| Error::invalid("mapping", Fault::WrongType, "mapping: required"))?;
        check_mapping(name, mapping)?;
        let global = request.global();
        if global && !caller.admin {
            return Err(admins_only("create"));
        }
        let owner = if global { GLOBAL_OWNER } else { &caller.user };
        let _write = self.write.lock();
        if global && is_builtin(name) {
            return Err(Error::FlavourExists {
                name: name.to_string(),
                holder: Holder::BuiltIn,
            });
        }
        if !global {
            let held = self
                .custom
                .read()
                .iter()
                .filter(|f| !f.is_global && f.owner == owner)
                .count();
            if held >= MAX_PERSONAL_FLAVOURS {
                return Err(Error::invalid(
                    "flavour_name",
                    Fault::Refused,
                    format!(
                        "you hold {held} personal flavours, the most one user may hold; \
                         delete one first"
                    ),
                ));
            }
        }
        if self.find(global, owner, name).is_some() {
            return Err(Error::FlavourExists {
                name: name.to_string(),
                holder: if global {
                    Holder::Global
                } else {
                    Holder::Personal
                },
            });
        }
        let stored = StoredFlavour {
            flavour_name: name.to_string(),
            owner: owner.to_string(),
            is_global: global,
            mapping: mapping.clone(),
            created_at: super::now(),
        };
        let mut batch = Batch::default();
        batch.put(
            cf::FLAVOURS,
            super::stored_key(owner, name),
            super::encode(&stored),
        );
        self.db.write(batch)?;
        self.insert(stored);
        Ok(format!("Flavour '{name}' added successfully"))
    }

    /// Updates a flavour's mapping (partially) and name; returns the status message.
    ///
    /// # Errors
    /// 422 invalid definition or a built-in, 403 a non-admin touches a global flavour, 404 no
    /// such flavour for the caller, 409 the new name is taken.
    pub fn update(&self, caller: &Caller, name: &str, request: &FlavourRequest) -> Result<String> {
        if let Some(new_name) = &request.flavour_name {
            check_name(new_name)?;
        }
        let addition = request.mapping.clone().unwrap_or_default();
        let _write = self.write.lock();
        let old = self.target(caller, name, request.global(), "update")?;
        let new_name = request
            .flavour_name
            .clone()
            .unwrap_or_else(|| old.flavour_name.clone());
        if new_name != old.flavour_name
            && (self.find(old.is_global, &old.owner, &new_name).is_some()
                || (old.is_global && is_builtin(&new_name)))
        {
            return Err(Error::FlavourExists {
                name: new_name,
                holder: Holder::Other,
            });
        }
        let mut mapping = old.mapping.clone();
        mapping.extend(addition);
        check_mapping(&new_name, &mapping)?;
        if new_name == old.flavour_name && mapping == old.mapping {
            return Ok(format!("Flavour '{name}' already up to date"));
        }
        let stored = StoredFlavour {
            flavour_name: new_name.clone(),
            owner: old.owner.clone(),
            is_global: old.is_global,
            mapping,
            created_at: old.created_at.clone(),
        };
        let mut batch = Batch::default();
        batch.delete(
            cf::FLAVOURS,
            super::stored_key(&old.owner, &old.flavour_name),
        );
        batch.put(
            cf::FLAVOURS,
            super::stored_key(&stored.owner, &new_name),
            super::encode(&stored),
        );
        self.db.write(batch)?;
        self.remove_stored(&old);
        self.insert(stored);
        Ok("Flavour updated successfully".to_string())
    }

    /// Deletes a flavour; returns the status message.
    ///
    /// # Errors
    /// 422 a built-in, 403 a non-admin touches a global flavour, 404 no such flavour for the
    /// caller.
    pub fn delete(&self, caller: &Caller, name: &str, global: bool) -> Result<String> {
        let _write = self.write.lock();
        let old = self.target(caller, name, global, "delete")?;
        let mut batch = Batch::default();
        batch.delete(
            cf::FLAVOURS,
            super::stored_key(&old.owner, &old.flavour_name),
        );
        self.db.write(batch)?;
        self.remove_stored(&old);
        let scope = if old.is_global { "Global" } else { "Personal" };
        Ok(format!(
            "{scope} flavour '{}' deleted successfully",
            old.flavour_name
        ))
    }

    /// The flavours visible to the caller that pass the filters, as the listing shows them.
    pub fn list(&self, caller: Option<&Caller>, filter: &ListFilter) -> Value {
        let flavours: Vec<Value> = self
            .visible(caller.map(|c| c.user.as_str()))
            .into_iter()
            .filter(|f| {
                filter
                    .flavour_name
                    .as_ref()
                    .is_none_or(|n| *n == f.name || *n == f.stored_name())
            })
            .filter(|f| filter.owner.as_ref().is_none_or(|o| *o == f.owner))
            .map(|f| {
                let mapping: serde_json::Map<String, Value> = f
                    .stored_mapping
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                json!({
                    "flavour_name": f.name,
                    "mapping": mapping,
                    "owner": f.owner,
                    "created_at": f.created_at.as_deref().unwrap_or(&self.created_at),
                })
            })
            .collect();
        json!({ "total": flavours.len(), "flavours": flavours })
    }

    /// The stored flavour a change of `name` by `caller` targets.
    fn target(
        &self,
        caller: &Caller,
        name: &str,
        global: bool,
        action: &'static str,
    ) -> Result<StoredFlavour> {
        if global && !caller.admin {
            return Err(admins_only(action));
        }
        let (owner_prefix, bare) = match name.split_once(':') {
            Some((owner, bare)) => (Some(owner), bare),
            None => (None, name),
        };
        let not_found = || Error::NotFound(Missing::Flavour(name.to_string()));
        if let Some(owner) = owner_prefix {
            if owner != caller.user || global {
                return Err(not_found());
            }
            return self.find(false, owner, bare).ok_or_else(not_found);
        }
        if !global && let Some(personal) = self.find(false, &caller.user, bare) {
            return Ok(personal);
        }
        if is_builtin(bare) {
            return Err(Error::invalid(
                "flavour_name",
                Fault::Refused,
                format!("Cannot {action} built-in flavour '{bare}'."),
            ));
        }
        let found = self.find(true, GLOBAL_OWNER, bare).ok_or_else(not_found)?;
        if !caller.admin {
            return Err(admins_only(action));
        }
        Ok(found)
    }

    /// The global flavour `name` (`global`), or `owner`'s personal one.
    fn find(&self, global: bool, owner: &str, name: &str) -> Option<StoredFlavour> {
        self.custom
            .read()
            .iter()
            .find(|f| {
                f.flavour_name == name && f.is_global == global && (global || f.owner == owner)
            })
            .cloned()
    }

    fn insert(&self, stored: StoredFlavour) {
        let mut custom = self.custom.write();
        custom.push(stored);
        super::sort(&mut custom);
    }

    fn remove_stored(&self, old: &StoredFlavour) {
        self.custom.write().retain(|f| {
            !(f.is_global == old.is_global
                && f.owner == old.owner
                && f.flavour_name == old.flavour_name)
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::db::Db;

    fn user(name: &str) -> Caller {
        Caller {
            user: name.into(),
            admin: false,
        }
    }

    fn admin() -> Caller {
        Caller {
            user: "root".into(),
            admin: true,
        }
    }

    fn request(body: &Value) -> FlavourRequest {
        FlavourRequest::parse(body.to_string().as_bytes()).unwrap()
    }

    fn registry(dir: &std::path::Path) -> Flavours {
        Flavours::open(Arc::new(Db::open(dir).unwrap())).unwrap()
    }

    #[test]
    fn mapping_rules_are_enforced() {
        for mapping in [
            json!({"project": "uri"}),
            json!({"fs_type": "storage_type"}),
            json!({"project": "variable"}),
            json!({"nonsense": "x"}),
            json!({"model": ""}),
        ] {
            let err = check_mapping("f", &serde_json::from_value(mapping.clone()).unwrap());
            assert!(err.is_err(), "{mapping} was accepted");
        }
        let swap = json!({"project": "model", "model": "project"});
        check_mapping("f", &serde_json::from_value(swap).unwrap()).unwrap();
        assert!(FlavourRequest::parse(br#"{"flavour_name":"a","extra":1}"#).is_err());
        for bad in ["", "a:b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lifecycle_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let flavours = registry(dir.path());
        let jane = user("jane");
        let body = json!({"flavour_name": "mine", "mapping": {"model": "source"}});
        flavours.create(&jane, &request(&body)).unwrap();
        let err = flavours.create(&jane, &request(&body)).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Conflict);
        flavours
            .update(
                &jane,
                "mine",
                &request(&json!({"flavour_name": "ours", "mapping": {"project": "proj"}})),
            )
            .unwrap();
        drop(flavours);
        let flavours = registry(dir.path());
        let ours = flavours.resolve("ours", Some("jane")).unwrap();
        assert_eq!(ours.to_flavour("model"), Some("source"));
        assert_eq!(ours.to_flavour("project"), Some("proj"));
        assert!(flavours.resolve("ours", Some("john")).is_err());
        assert!(flavours.resolve("mine", Some("jane")).is_err());
        let err = flavours.delete(&user("john"), "ours", false).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
        flavours.delete(&jane, "ours", false).unwrap();
        assert!(flavours.resolve("ours", Some("jane")).is_err());
    }

    #[test]
    fn global_flavours_need_an_admin_and_builtins_are_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let flavours = registry(dir.path());
        let body = json!({"flavour_name": "g", "mapping": {}, "is_global": true});
        let err = flavours.create(&user("jane"), &request(&body)).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Forbidden);
        flavours.create(&admin(), &request(&body)).unwrap();
        let err = flavours
            .update(&user("jane"), "g", &request(&json!({"mapping": {}})))
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Forbidden);
        let err = flavours.delete(&user("jane"), "g", false).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Forbidden);
        for name in ["cmip6", "svc", "user"] {
            let err = flavours.delete(&admin(), name, true).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Invalid, "{name}");
        }
        let global_cmip6 = json!({"flavour_name": "cmip6", "mapping": {}, "is_global": true});
        let err = flavours
            .create(&admin(), &request(&global_cmip6))
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Conflict);
        // A personal flavour may share a built-in's name; it is addressed as owner:name.
        let personal = json!({"flavour_name": "cmip6", "mapping": {"model": "m"}});
        flavours.create(&user("jane"), &request(&personal)).unwrap();
        let names: Vec<String> = flavours
            .visible(Some("jane"))
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert!(names.contains(&"jane:cmip6".to_string()), "{names:?}");
        assert_eq!(
            flavours.resolve("cmip6", Some("jane")).unwrap().owner,
            "global"
        );
        flavours.delete(&user("jane"), "jane:cmip6", false).unwrap();
        flavours.delete(&admin(), "g", true).unwrap();
    }

    #[test]
    fn concurrent_creates_of_one_name_give_one_success() {
        let dir = tempfile::tempdir().unwrap();
        let flavours = Arc::new(registry(dir.path()));
        let results: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..50)
                .map(|_| {
                    let flavours = Arc::clone(&flavours);
                    s.spawn(move || {
                        let body = json!({"flavour_name": "race", "mapping": {}});
                        flavours.create(&user("jane"), &request(&body)).is_ok()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|ok| **ok).count(), 1);
    }

    const NAMES: &[&str] = &[
        "mine",
        "nextgems",
        "john:mine",
        "cmip6",
        "global:nextgems",
        "*",
        "-mine",
        "MINE",
    ];
    const FACETS: &[&str] = &["model", "project", "variable", "fs_type", "file", "user"];

    /// A create, update or delete with hostile names, mappings and flags.
    fn hostile_action() -> impl proptest::strategy::Strategy<Value = (u8, String, Value)> {
        use proptest::prelude::*;
        let name = || {
            prop_oneof![
                proptest::sample::select(NAMES).prop_map(str::to_string),
                crate::hostile::text(NAMES, &[":", "-", "_"]),
            ]
        };
        (
            0..3u8,
            name(),
            (
                proptest::option::of(name()),
                proptest::collection::btree_map(
                    prop_oneof![
                        proptest::sample::select(FACETS).prop_map(str::to_string),
                        crate::hostile::text(FACETS, &["_"]),
                    ],
                    crate::hostile::text(FACETS, &["_", " "]),
                    0..4,
                ),
                proptest::option::of(any::<bool>()),
            )
                .prop_map(|(name, mapping, global)| {
                    json!({"flavour_name": name, "mapping": mapping, "is_global": global})
                }),
        )
    }

    /// Whatever jane sends, john's flavour and the global ones stay as they were.
    #[test]
    fn hostile_requests_change_only_the_callers_flavours() {
        use proptest::strategy::{Strategy, ValueTree};
        let dir = tempfile::tempdir().unwrap();
        let flavours = registry(dir.path());
        // `nextgems` is seeded; the admin adds a second global flavour.
        let global = json!({"flavour_name": "regional", "mapping": {"model": "source_id"}, "is_global": true});
        flavours.create(&admin(), &request(&global)).unwrap();
        let personal = json!({"flavour_name": "mine", "mapping": {"model": "m"}});
        flavours.create(&user("john"), &request(&personal)).unwrap();
        let johns_view = || flavours.list(Some(&user("john")), &ListFilter::default());
        let before = johns_view();
        let jane = user("jane");
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..512 {
            let (action, name, body) = hostile_action().new_tree(&mut runner).unwrap().current();
            let global = body["is_global"].as_bool().unwrap_or(false);
            let outcome =
                FlavourRequest::parse(body.to_string().as_bytes()).and_then(
                    |request| match action {
                        0 => flavours.create(&jane, &request),
                        1 => flavours.update(&jane, &name, &request),
                        _ => flavours.delete(&jane, &name, global),
                    },
                );
            if let Err(e) = outcome {
                assert!(
                    matches!(
                        e.kind(),
                        crate::ErrorKind::Invalid
                            | crate::ErrorKind::Forbidden
                            | crate::ErrorKind::NotFound
                            | crate::ErrorKind::Conflict
                    ),
                    "{e}"
                );
            }
            assert_eq!(
                johns_view(),
                before,
                "after jane's {action} {name:?} {body}"
            );
        }
    }
}
