//! Flavours: vocabularies that rename the standard facets (cmip6 calls `model` `source_id`).
//!
//! A [`Flavour`] carries its effective mapping, so every search endpoint translates through
//! one type whatever the flavour's origin: built-in, global custom or personal. Custom
//! flavours are stored in the `flavours` column family and held in memory; the registry
//! resolves a name for a caller with the precedence built-in > global > personal, and
//! `owner:name` addresses a personal flavour whose name is also used globally.
//!
//! Global ownership is a flag of its own (`is_global`), not a user name: a user called
//! `global` owns only personal flavours (and such names are refused at authentication anyway,
//! see [`crate::auth::Caller`], because the listing shows `owner: "global"` for global
//! flavours). Stores written before the flag existed mark global flavours by the owner value
//! `global`, which is read as the flag.
//!
//! Decision: overview attributes of a custom flavour list its effective mapping (the standard
//! facets with the custom renames applied), not only the stored partial mapping, so a client
//! sees every facet it can search with.

mod builtin;
mod manage;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

pub(crate) use builtin::{BUILTIN_NAMES, builtin_mapping};
pub use manage::{FlavourRequest, ListFilter};

use crate::catalog::facet::STANDARD_FACETS;
use crate::db::{Batch, Db, cf, meta};
use crate::error::{Error, Result};

/// The owner the listing shows for global flavours.
pub(crate) const GLOBAL_OWNER: &str = "global";

/// Standard facets shown first to clients that hide lesser-used ones: the first ten of the
/// canonical order.
const PRIMARY_FACETS: &[&str] = STANDARD_FACETS.as_slice().split_at(10).0;

/// Facets of regional models, listed only by the cordex flavour.
const REGIONAL_FACETS: [&str; 3] = ["rcm_name", "driving_model", "rcm_version"];

/// A custom flavour as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct StoredFlavour {
    /// Name of the flavour.
    pub flavour_name: String,
    /// `global` or the owner's user name.
    pub owner: String,
    /// Whether everyone sees it (only admins change it).
    #[serde(default)]
    pub is_global: bool,
    /// Partial mapping standard name -> flavour name, as submitted.
    pub mapping: BTreeMap<String, String>,
    /// Creation time, `YYYY-MM-DDThh:mm:ss` UTC.
    pub created_at: String,
}

/// A usable flavour with its effective mapping.
#[derive(Debug, Clone)]
pub struct Flavour {
    /// The name the caller addresses it by (`owner:name` when disambiguated).
    pub name: String,
    /// `global` or the owner's user name.
    pub owner: String,
    /// Whether everyone sees it.
    pub global: bool,
    /// Whether it is one of [`BUILTIN_NAMES`].
    pub builtin: bool,
    /// Standard name -> flavour name, in mapping order.
    mapping: Vec<(String, String)>,
    /// The stored partial mapping of a custom flavour (the full mapping for built-ins).
    pub stored_mapping: Vec<(String, String)>,
    /// Creation time of a custom flavour.
    pub created_at: Option<String>,
}

impl Flavour {
    /// A built-in flavour; `name` must be one of [`BUILTIN_NAMES`].
    pub(crate) fn builtin(name: &str) -> Self {
        Self::global(name, builtin_mapping(name).expect("name is a built-in"))
    }

    /// A global flavour whose stored mapping is its full mapping.
    pub(crate) fn global(name: &str, mapping: Vec<(String, String)>) -> Self {
        Flavour {
            name: name.to_string(),
            owner: GLOBAL_OWNER.to_string(),
            global: true,
            builtin: true,
            stored_mapping: mapping.clone(),
            mapping,
            created_at: None,
        }
    }

    fn custom(stored: &StoredFlavour) -> Self {
        let base = builtin_mapping(&stored.flavour_name).unwrap_or_else(|| {
            STANDARD_FACETS
                .iter()
                .map(|f| (f.to_string(), f.to_string()))
                .collect()
        });
        let mapping = base
            .into_iter()
            .map(|(std, to)| {
                let to = stored.mapping.get(&std).cloned().unwrap_or(to);
                (std, to)
            })
            .collect();
        Flavour {
            name: stored.flavour_name.clone(),
            owner: stored.owner.clone(),
            global: stored.is_global,
            builtin: false,
            mapping,
            stored_mapping: stored
                .mapping
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            created_at: Some(stored.created_at.clone()),
        }
    }

    /// The name without an `owner:` disambiguation prefix.
    pub fn stored_name(&self) -> &str {
        let prefix_len = self.owner.len() + 1;
        if self.name.len() > prefix_len
            && self.name.starts_with(&self.owner)
            && self.name.as_bytes()[self.owner.len()] == b':'
        {
            &self.name[prefix_len..]
        } else {
            &self.name
        }
    }

    /// Whether searches through this flavour see user data (and only user data).
    pub fn is_user_data(&self) -> bool {
        self.name == "user"
    }

    /// The flavour's name for a standard facet, if the flavour has that facet.
    pub fn to_flavour(&self, standard: &str) -> Option<&str> {
        self.mapping
            .iter()
            .find(|(s, _)| s == standard)
            .map(|(_, f)| f.as_str())
    }

    /// The standard facet a flavour facet name stands for.
    pub fn to_standard(&self, name: &str) -> Option<&str> {
        self.mapping
            .iter()
            .find(|(_, f)| f == name)
            .map(|(s, _)| s.as_str())
    }

    /// Whether the flavour has the standard facet.
    pub fn has(&self, standard: &str) -> bool {
        self.to_flavour(standard).is_some()
    }

    /// The effective mapping, standard name -> flavour name.
    pub fn mapping(&self) -> &[(String, String)] {
        &self.mapping
    }

    /// Facet names the overview lists for this flavour.
    pub fn attributes(&self) -> Vec<String> {
        let regional = self.name == "cordex";
        self.mapping
            .iter()
            .filter(|(std, _)| regional || !REGIONAL_FACETS.contains(&std.as_str()))
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// The primary facets, in flavour names when `translate`.
    pub fn primary_facets(&self, translate: bool) -> Vec<String> {
        let mut out: Vec<String> = PRIMARY_FACETS
            .iter()
            .map(|std| {
                if translate {
                    self.to_flavour(std).unwrap_or(std)
                } else {
                    std
                }
                .to_string()
            })
            .collect();
        if self.name == "cordex" {
            out.extend(REGIONAL_FACETS.iter().map(|f| f.to_string()));
        }
        out
    }
}

/// All flavours: built-ins plus the custom ones in the store.
pub struct Flavours {
    db: Arc<Db>,
    custom: RwLock<Vec<StoredFlavour>>,
    /// Held across the check and the write of every change.
    write: Mutex<()>,
    /// When the store was first opened: the creation time listed for built-ins.
    created_at: String,
}

/// Listing order of custom flavours: global ones first, then by owner and name.
fn sort(custom: &mut [StoredFlavour]) {
    custom.sort_by(|a, b| {
        (!a.is_global, &a.owner, &a.flavour_name).cmp(&(!b.is_global, &b.owner, &b.flavour_name))
    });
}

fn stored_key(owner: &str, name: &str) -> Vec<u8> {
    let mut key = owner.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(name.as_bytes());
    key
}

impl Flavours {
    /// Loads the custom flavours, seeding `nextgems` on the first start of a store.
    ///
    /// # Errors
    /// A store error or a corrupt flavour.
    pub fn open(db: Arc<Db>) -> Result<Self> {
        let seeded = db.get(cf::META, meta::FLAVOURS_SEEDED)?;
        let created_at = match &seeded {
            Some(value) if value.len() > 1 => String::from_utf8_lossy(value).into_owned(),
            _ => now(),
        };
        if seeded.is_none() {
            let nextgems = StoredFlavour {
                flavour_name: "nextgems".into(),
                owner: GLOBAL_OWNER.into(),
                is_global: true,
                mapping: builtin::NEXTGEMS
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                created_at: now(),
            };
            let mut batch = Batch::default();
            batch.put(
                cf::FLAVOURS,
                stored_key(GLOBAL_OWNER, "nextgems"),
                encode(&nextgems),
            );
            batch.put(
                cf::META,
                meta::FLAVOURS_SEEDED,
                created_at.as_bytes().to_vec(),
            );
            db.write(batch)?;
        }
        let mut custom = Vec::new();
        db.for_each(cf::FLAVOURS, |_, value| {
            let mut stored: StoredFlavour =
                serde_json::from_slice(value).map_err(|e| Error::Corrupt {
                    family: cf::FLAVOURS,
                    reason: e.to_string(),
                })?;
            stored.is_global |= stored.owner == GLOBAL_OWNER;
            custom.push(stored);
            Ok(true)
        })?;
        sort(&mut custom);
        Ok(Flavours {
            db,
            custom: RwLock::new(custom),
            write: Mutex::new(()),
            created_at,
        })
    }

    /// Every flavour visible to `caller` (anonymous: `None`), in listing order: built-ins,
    /// global custom flavours, then the caller's own. A name that occurs more than once is
    /// given as `owner:name` on its non-global occurrences.
    pub fn visible(&self, caller: Option<&str>) -> Vec<Flavour> {
        let mut list: Vec<Flavour> = BUILTIN_NAMES.iter().map(|n| Flavour::builtin(n)).collect();
        let custom = self.custom.read();
        list.extend(custom.iter().filter(|f| f.is_global).map(Flavour::custom));
        list.extend(
            custom
                .iter()
                .filter(|f| !f.is_global && Some(f.owner.as_str()) == caller)
                .map(Flavour::custom),
        );
        drop(custom);
        let mut seen = std::collections::HashMap::<String, usize>::new();
        for f in &list {
            *seen.entry(f.name.clone()).or_default() += 1;
        }
        for f in &mut list {
            if seen[&f.name] > 1 && !f.global {
                f.name = format!("{}:{}", f.owner, f.name);
            }
        }
        list
    }

    /// Resolves a flavour name for a caller.
    ///
    /// # Errors
    /// [`Error::UnknownFlavour`] listing the flavours the caller can use.
    pub fn resolve(&self, name: &str, caller: Option<&str>) -> Result<Flavour> {
        let visible = self.visible(caller);
        if let Some(f) = visible.iter().find(|f| f.name == name) {
            return Ok(f.clone());
        }
        if let Some((owner, bare)) = name.split_once(':')
            && Some(owner) == caller
            && let Some(f) = visible
                .iter()
                .find(|f| !f.global && f.owner == owner && f.stored_name() == bare)
        {
            let mut f = f.clone();
            f.name = bare.to_string();
            return Ok(f);
        }
        Err(Error::UnknownFlavour {
            name: name.to_string(),
            available: visible.into_iter().map(|f| f.name).collect(),
        })
    }

    /// The store the flavours live in.
    pub fn db(&self) -> &Db {
        &self.db
    }
}

fn encode(stored: &StoredFlavour) -> Vec<u8> {
    serde_json::to_vec(stored).expect("a flavour always serialises")
}

/// The current UTC time as `YYYY-MM-DDThh:mm:ss`.
pub(crate) fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> (tempfile::TempDir, Flavours) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path()).unwrap());
        (dir, Flavours::open(db).unwrap())
    }

    #[test]
    fn builtins_come_first_and_nextgems_is_seeded() {
        let (_dir, flavours) = registry();
        let names: Vec<String> = flavours.visible(None).into_iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            ["svc", "cmip6", "cmip5", "cordex", "user", "nextgems"]
        );
    }

    #[test]
    fn cmip6_translates_both_ways() {
        let (_dir, flavours) = registry();
        let cmip6 = flavours.resolve("cmip6", None).unwrap();
        assert_eq!(cmip6.to_flavour("model"), Some("source_id"));
        assert_eq!(cmip6.to_standard("source_id"), Some("model"));
        assert_eq!(cmip6.to_standard("model"), None);
        assert!(!cmip6.has("user"));
        let nextgems = flavours.resolve("nextgems", None).unwrap();
        assert_eq!(nextgems.to_flavour("experiment"), Some("simulation_id"));
        assert_eq!(nextgems.to_flavour("project"), Some("project"));
    }

    /// The reference's `/overview` attribute lists and primary facets, in their order.
    #[test]
    fn overview_attributes_match_the_reference_lists() {
        let (_dir, flavours) = registry();
        let attributes = |name: &str| flavours.resolve(name, None).unwrap().attributes();
        let svc = "project product institute model experiment time_frequency realm variable \
                   ensemble time_aggregation fs_type grid_label cmor_table format grid_id \
                   level_type dataset time bbox user version";
        let cmip6 = "experiment_id member_id fs_type grid_label institution_id source_id mip_era \
                     activity_id realm variable_id time bbox time_aggregation frequency table_id \
                     dataset format grid_id level_type";
        let cmip5 = "experiment member_id fs_type grid_label institution_id model_id project \
                     product realm variable time bbox time_aggregation time_frequency cmor_table \
                     dataset format grid_id level_type";
        let cordex = "experiment ensemble fs_type grid_label institution model project domain \
                      realm variable time bbox time_aggregation time_frequency cmor_table dataset \
                      driving_model format grid_id level_type rcm_name rcm_version";
        for (name, expected) in [
            ("svc", svc),
            ("user", svc),
            ("cmip6", cmip6),
            ("cmip5", cmip5),
            ("cordex", cordex),
        ] {
            let expected: Vec<&str> = expected.split_whitespace().collect();
            assert_eq!(attributes(name), expected, "{name}");
        }
        let cordex = flavours.resolve("cordex", None).unwrap();
        assert_eq!(
            cordex.primary_facets(true),
            "project domain institution model experiment time_frequency realm variable \
             ensemble time_aggregation rcm_name driving_model rcm_version"
                .split_whitespace()
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn unknown_flavours_list_the_available_ones() {
        let (_dir, flavours) = registry();
        let err = flavours.resolve("cmipx", None).unwrap_err().to_string();
        assert!(
            err.starts_with("Invalid flavour 'cmipx'. Available flavours: svc, cmip6"),
            "{err}"
        );
    }
}
