//! DRS directory templates: which directory segment of a path names which facet.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path};
use std::str::FromStr;

/// DRS directory template used to take facets from a path.
///
/// A template lists the directory segments below the data root, file name excluded. An explicit
/// template is matched right-aligned against the directories of a path, so any root prefix works.
/// A path with fewer directories than the template gets its facets from global attributes only.
///
/// # Auto
/// [`Drs::Auto`] picks per file: the right-most directory named `CMIP6`, `cmip5` or `cordex` (any
/// case) that has room for its template after it anchors that template there, left-aligned
/// (deeper directories are ignored). Without one, the `svc` template is used right-aligned when the
/// path is deep enough and the segment in its version slot looks like a version (`v20210618` or
/// `20210618`), so an arbitrary deep path does not produce nonsense facets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Drs {
    /// `project/product/institute/model/experiment/time_frequency/realm/cmor_table/ensemble/version/variable`
    Svc,
    /// `mip_era/activity/institute/model/experiment/ensemble/cmor_table/variable/grid_label/version`
    Cmip6,
    /// `project/product/institute/model/experiment/time_frequency/realm/cmor_table/ensemble/version/variable`
    Cmip5,
    /// `project/output/domain/institute/driving_model/experiment/ensemble/rcm_name/rcm_version/time_frequency/variable/version`
    Cordex,
    /// Chosen per file, see [Auto](#auto).
    #[default]
    Auto,
}

impl Drs {
    const NAMES: [(&'static str, Drs); 5] = [
        ("svc", Drs::Svc),
        ("cmip6", Drs::Cmip6),
        ("cmip5", Drs::Cmip5),
        ("cordex", Drs::Cordex),
        ("auto", Drs::Auto),
    ];

    /// The template's slots; `Auto` has none of its own.
    fn slots(self) -> &'static [Slot] {
        match self {
            Drs::Svc | Drs::Cmip5 => SVC,
            Drs::Cmip6 => CMIP6,
            Drs::Cordex => CORDEX,
            Drs::Auto => &[],
        }
    }
}

impl FromStr for Drs {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let lower = name.trim().to_ascii_lowercase();
        Drs::NAMES
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|(_, drs)| *drs)
            .ok_or_else(|| {
                format!("unknown DRS '{name}': expected one of svc, cmip6, cmip5, cordex, auto")
            })
    }
}

impl fmt::Display for Drs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = Drs::NAMES
            .iter()
            .find(|(_, drs)| drs == self)
            .map_or("auto", |(n, _)| n);
        f.write_str(name)
    }
}

/// What one directory segment of a template holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The value of a standard facet.
    Facet(&'static str),
    /// The dataset version (kept apart from the facets, as in [`crate::catalog::Record`]).
    Version,
    /// A fixed segment such as CORDEX's `output`.
    Skip,
}

use Slot::{Facet, Skip, Version};

/// `svc` and `cmip5` share one layout.
const SVC: &[Slot] = &[
    Facet("project"),
    Facet("product"),
    Facet("institute"),
    Facet("model"),
    Facet("experiment"),
    Facet("time_frequency"),
    Facet("realm"),
    Facet("cmor_table"),
    Facet("ensemble"),
    Version,
    Facet("variable"),
];

const CMIP6: &[Slot] = &[
    Facet("project"),
    Facet("product"),
    Facet("institute"),
    Facet("model"),
    Facet("experiment"),
    Facet("ensemble"),
    Facet("cmor_table"),
    Facet("variable"),
    Facet("grid_label"),
    Version,
];

const CORDEX: &[Slot] = &[
    Facet("project"),
    Skip,
    Facet("product"),
    Facet("institute"),
    Facet("driving_model"),
    Facet("experiment"),
    Facet("ensemble"),
    Facet("rcm_name"),
    Facet("rcm_version"),
    Facet("time_frequency"),
    Facet("variable"),
    Version,
];

/// Facets and version read from a path.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct PathFacets {
    /// The template that matched, if any.
    pub(crate) template: Option<Drs>,
    /// Standard facet name to its value, as spelled in the path.
    pub(crate) facets: BTreeMap<&'static str, String>,
    /// The version segment.
    pub(crate) version: Option<String>,
}

/// Reads facets from the directories of `path` with `drs`.
pub(crate) fn facets_from_path(path: &Path, drs: Drs) -> PathFacets {
    let segments = directory_segments(path);
    let matched = match drs {
        Drs::Auto => auto_match(&segments),
        _ => right_aligned(&segments, drs),
    };
    let Some((template, window)) = matched else {
        return PathFacets::default();
    };
    let mut found = PathFacets {
        template: Some(template),
        ..PathFacets::default()
    };
    for (slot, segment) in template.slots().iter().zip(window) {
        match slot {
            Facet(name) => {
                found.facets.insert(name, (*segment).to_string());
            }
            Version => found.version = Some((*segment).to_string()),
            Skip => {}
        }
    }
    found
}

/// Whether a segment reads as a dataset version: `v20191108`, `V2`, `20191108`.
pub(crate) fn looks_like_version(segment: &str) -> bool {
    let digits = segment.strip_prefix(['v', 'V']).unwrap_or(segment);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn directory_segments(path: &Path) -> Vec<&str> {
    let Some(parent) = path.parent() else {
        return Vec::new();
    };
    parent
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect()
}

fn right_aligned<'a>(segments: &'a [&'a str], drs: Drs) -> Option<(Drs, &'a [&'a str])> {
    let len = drs.slots().len();
    (len > 0 && segments.len() >= len).then(|| (drs, &segments[segments.len() - len..]))
}

fn auto_match<'a>(segments: &'a [&'a str]) -> Option<(Drs, &'a [&'a str])> {
    let anchored = segments.iter().enumerate().rev().find_map(|(i, segment)| {
        let drs = match segment.to_ascii_lowercase().as_str() {
            "cmip6" => Drs::Cmip6,
            "cmip5" => Drs::Cmip5,
            "cordex" => Drs::Cordex,
            _ => return None,
        };
        let len = drs.slots().len();
        (segments.len() - i >= len).then(|| (drs, &segments[i..i + len]))
    });
    anchored.or_else(|| {
        let (drs, window) = right_aligned(segments, Drs::Svc)?;
        let version_slot = SVC.iter().position(|s| *s == Version)?;
        looks_like_version(window[version_slot]).then_some((drs, window))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMIP6_PATH: &str = "/d/model/global/cmip6/CMIP6/CMIP/CSIRO-ARCCSS/ACCESS-CM2/amip/r1i1p1f1/Amon/ua/gn/v20191108/ua.nc";
    const CMIP5_PATH: &str = "/d/model/global/cmip5/cmip5/output1/MPI-M/MPI-ESM-LR/historical/mon/atmos/Amon/r1i1p1/v20120315/tas/tas.nc";
    const CORDEX_PATH: &str = "/d/model/regional/cordex/output/EUR-11/GERICS/NCC-NorESM1-M/rcp85/r1i1p1/GERICS-REMO2015/v1/3hr/pr/v20181212/pr.nc";
    const SVC_PATH: &str =
        "/d/observations/grid/CPC/CPC/cmorph/30min/atmos/30min/r1i1p1/v20210618/pr/pr.nc";

    fn facets(path: &str, drs: Drs) -> PathFacets {
        facets_from_path(Path::new(path), drs)
    }

    fn get<'a>(found: &'a PathFacets, facet: &str) -> Option<&'a str> {
        found.facets.get(facet).map(String::as_str)
    }

    #[test]
    fn names_parse_in_any_case_and_display_back() {
        for name in ["svc", "cmip6", "cmip5", "cordex", "auto"] {
            let drs: Drs = name.to_uppercase().parse().unwrap();
            assert_eq!(drs.to_string(), name);
        }
        assert!("cmip7".parse::<Drs>().unwrap_err().contains("cmip7"));
    }

    #[test]
    fn cmip6_template_is_right_aligned() {
        let found = facets(CMIP6_PATH, Drs::Cmip6);
        assert_eq!(get(&found, "project"), Some("CMIP6"));
        assert_eq!(get(&found, "product"), Some("CMIP"));
        assert_eq!(get(&found, "institute"), Some("CSIRO-ARCCSS"));
        assert_eq!(get(&found, "model"), Some("ACCESS-CM2"));
        assert_eq!(get(&found, "experiment"), Some("amip"));
        assert_eq!(get(&found, "ensemble"), Some("r1i1p1f1"));
        assert_eq!(get(&found, "cmor_table"), Some("Amon"));
        assert_eq!(get(&found, "variable"), Some("ua"));
        assert_eq!(get(&found, "grid_label"), Some("gn"));
        assert_eq!(found.version.as_deref(), Some("v20191108"));
    }

    #[test]
    fn cmip5_and_svc_templates_share_a_layout() {
        let found = facets(CMIP5_PATH, Drs::Cmip5);
        assert_eq!(get(&found, "project"), Some("cmip5"));
        assert_eq!(get(&found, "product"), Some("output1"));
        assert_eq!(get(&found, "time_frequency"), Some("mon"));
        assert_eq!(get(&found, "realm"), Some("atmos"));
        assert_eq!(get(&found, "variable"), Some("tas"));
        assert_eq!(found.version.as_deref(), Some("v20120315"));
        let found = facets(SVC_PATH, Drs::Svc);
        assert_eq!(get(&found, "project"), Some("observations"));
        assert_eq!(get(&found, "experiment"), Some("cmorph"));
        assert_eq!(get(&found, "cmor_table"), Some("30min"));
        assert_eq!(get(&found, "ensemble"), Some("r1i1p1"));
    }

    #[test]
    fn cordex_template_skips_output() {
        let found = facets(CORDEX_PATH, Drs::Cordex);
        assert_eq!(get(&found, "project"), Some("cordex"));
        assert_eq!(get(&found, "product"), Some("EUR-11"));
        assert_eq!(get(&found, "driving_model"), Some("NCC-NorESM1-M"));
        assert_eq!(get(&found, "rcm_name"), Some("GERICS-REMO2015"));
        assert_eq!(get(&found, "rcm_version"), Some("v1"));
        assert_eq!(get(&found, "time_frequency"), Some("3hr"));
        assert_eq!(found.version.as_deref(), Some("v20181212"));
        assert!(!found.facets.values().any(|v| v == "output"));
    }

    #[test]
    fn short_paths_give_nothing() {
        assert_eq!(facets("/a/b/c.nc", Drs::Cmip6), PathFacets::default());
        assert_eq!(facets("c.nc", Drs::Svc), PathFacets::default());
    }

    #[test]
    fn auto_anchors_at_the_project_segment() {
        // `cmip6` and `CMIP6` both name the project; only the second has room for the template.
        assert_eq!(
            facets(CMIP6_PATH, Drs::Auto),
            facets(CMIP6_PATH, Drs::Cmip6)
        );
        assert_eq!(
            facets(CMIP5_PATH, Drs::Auto),
            facets(CMIP5_PATH, Drs::Cmip5)
        );
        assert_eq!(
            facets(CORDEX_PATH, Drs::Auto),
            facets(CORDEX_PATH, Drs::Cordex)
        );
        assert_eq!(facets(SVC_PATH, Drs::Auto), facets(SVC_PATH, Drs::Svc));
        let deeper = CMIP6_PATH.replace("/ua.nc", "/extra/ua.nc");
        assert_eq!(get(&facets(&deeper, Drs::Auto), "variable"), Some("ua"));
    }

    #[test]
    fn auto_needs_a_version_for_svc() {
        let path = "/home/someone/a/b/c/d/e/f/g/h/i/j/k/file.nc";
        assert_eq!(facets(path, Drs::Auto), PathFacets::default());
        assert_eq!(get(&facets(path, Drs::Svc), "project"), Some("a"));
        assert!(
            looks_like_version("v20191108") && looks_like_version("2") && !looks_like_version("v")
        );
    }

    const PATHS: &[&str] = &[
        CMIP6_PATH,
        CMIP5_PATH,
        CORDEX_PATH,
        SVC_PATH,
        "/a/b.nc",
        "x.nc",
    ];

    proptest::proptest! {
        #[test]
        fn hostile_paths_give_facets_from_their_own_segments(
            path in crate::hostile::text(PATHS, &["/", "//", "/../", "/./", "CMIP6", "cordex", "v1"]),
            drs in proptest::sample::select(&[Drs::Svc, Drs::Cmip6, Drs::Cmip5, Drs::Cordex, Drs::Auto][..]),
        ) {
            let found = facets_from_path(Path::new(&path), drs);
            let segments: Vec<&str> = path.split('/').collect();
            for value in found.facets.values().chain(found.version.iter()) {
                proptest::prop_assert!(segments.contains(&value.as_str()), "{value:?} in {path:?}");
            }
            if drs != Drs::Auto {
                proptest::prop_assert!(found.template.is_none() || found.template == Some(drs));
            }
        }
    }
}
