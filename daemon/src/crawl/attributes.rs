//! Global attributes as facet values, for the facets a file's path does not give.

use std::collections::BTreeMap;

/// Global attribute name to its value as text (numbers written out, string lists joined).
pub(crate) type Attributes = BTreeMap<String, String>;

/// Facet values being collected for one record.
pub(crate) type Facets = BTreeMap<&'static str, Vec<String>>;

/// Each facet and the global attributes that give it, most specific first: CMIP6 names, then
/// CMIP5/CORDEX names, then generic ones. `CORDEX_domain` precedes `product` because CORDEX files
/// carry `product = "output"` while their DRS product is the domain.
const SOURCES: &[(&str, &[&str])] = &[
    ("project", &["mip_era", "project_id", "project"]),
    ("product", &["activity_id", "CORDEX_domain", "product"]),
    ("institute", &["institution_id", "institute_id"]),
    ("experiment", &["experiment_id", "experiment"]),
    (
        "ensemble",
        &[
            "variant_label",
            "member_id",
            "driving_model_ensemble_member",
            "ensemble",
        ],
    ),
    ("cmor_table", &["table_id"]),
    ("variable", &["variable_id"]),
    ("grid_label", &["grid_label"]),
    ("time_frequency", &["frequency"]),
    ("realm", &["realm", "modeling_realm"]),
    ("driving_model", &["driving_model_id", "driving_source_id"]),
    ("rcm_version", &["rcm_version_id"]),
];

/// Whether the attributes describe a CORDEX file (then `model_id` names the regional model).
pub(crate) fn is_cordex(attributes: &Attributes) -> bool {
    attributes.contains_key("CORDEX_domain")
        || attributes
            .get("project_id")
            .is_some_and(|p| p.eq_ignore_ascii_case("cordex"))
}

/// Adds every facet that `attributes` give and `facets` lacks. In a CORDEX file `source_id`
/// (CORDEX-CMIP6) or `model_id` (CORDEX-CMIP5) names the regional model, so `cordex` routes
/// them to `rcm_name` instead of `model`.
pub(crate) fn fill_facets(facets: &mut Facets, attributes: &Attributes, cordex: bool) {
    let model = if cordex { "rcm_name" } else { "model" };
    let sources = SOURCES
        .iter()
        .copied()
        .chain([(model, &["source_id", "model_id"][..])]);
    for (facet, names) in sources {
        if facets.contains_key(facet) {
            continue;
        }
        if let Some(values) = names
            .iter()
            .find_map(|name| facet_values(facet, attributes.get(*name)?))
        {
            facets.insert(facet, values);
        }
    }
    if !facets.contains_key("ensemble")
        && let Some(ensemble) = cmip5_ensemble(attributes)
    {
        facets.insert("ensemble", vec![ensemble]);
    }
}

/// Completes a CORDEX file's facets as the reference catalogue does: `model` becomes
/// `<driving_model>-<rcm_name>-<rcm_version>` and `cmor_table` the frequency (CORDEX tables are
/// per frequency), where the file has none.
pub(crate) fn complete_cordex(facets: &mut Facets) {
    if let (false, Some(frequency)) = (
        facets.contains_key("cmor_table"),
        facets.get("time_frequency"),
    ) {
        facets.insert("cmor_table", frequency.clone());
    }
    if facets.contains_key("model") {
        return;
    }
    let first = |facet: &str| facets.get(facet).and_then(|v| v.first()).cloned();
    if let (Some(driving), Some(rcm), Some(version)) = (
        first("driving_model"),
        first("rcm_name"),
        first("rcm_version"),
    ) {
        facets.insert("model", vec![format!("{driving}-{rcm}-{version}")]);
    }
}

/// The facet values in an attribute value. Facet values are single tokens: CMIP5's
/// `experiment = "historical run with all forcings"` or a `project = "World Ocean Database"`
/// would be poor search terms, so such values are skipped. `realm` may list several realms
/// (`"ocean seaIce"`) and becomes a list.
fn facet_values(facet: &str, value: &str) -> Option<Vec<String>> {
    let tokens: Vec<String> = value.split_whitespace().map(str::to_string).collect();
    match tokens.len() {
        0 => None,
        1 => Some(tokens),
        _ if facet == "realm" => Some(tokens),
        _ => None,
    }
}

/// CMIP5 files give their ensemble member as three integers.
fn cmip5_ensemble(attributes: &Attributes) -> Option<String> {
    let number = |name: &str| attributes.get(name)?.trim().parse::<u32>().ok();
    let (r, i, p) = (
        number("realization")?,
        number("initialization_method")?,
        number("physics_version")?,
    );
    Some(format!("r{r}i{i}p{p}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(pairs: &[(&str, &str)]) -> Attributes {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn filled(pairs: &[(&str, &str)]) -> Facets {
        let attributes = attributes(pairs);
        let mut facets = Facets::new();
        fill_facets(&mut facets, &attributes, is_cordex(&attributes));
        if is_cordex(&attributes) {
            complete_cordex(&mut facets);
        }
        facets
    }

    fn one(value: &str) -> Option<Vec<String>> {
        Some(vec![value.to_string()])
    }

    #[test]
    fn cmip6_attributes_give_the_standard_facets() {
        let facets = filled(&[
            ("mip_era", "CMIP6"),
            ("activity_id", "CMIP"),
            ("product", "model-output"),
            ("institution_id", "MPI-M"),
            ("source_id", "MPI-ESM1-2-LR"),
            ("experiment", "AMIP"),
            ("experiment_id", "amip"),
            ("variant_label", "r2i1p1f1"),
            ("table_id", "Amon"),
            ("variable_id", "ua"),
            ("grid_label", "gn"),
            ("frequency", "mon"),
            ("realm", "ocean seaIce"),
        ]);
        assert_eq!(facets.get("project").cloned(), one("CMIP6"));
        assert_eq!(facets.get("product").cloned(), one("CMIP"));
        assert_eq!(facets.get("model").cloned(), one("MPI-ESM1-2-LR"));
        assert_eq!(facets.get("experiment").cloned(), one("amip"));
        assert_eq!(facets.get("ensemble").cloned(), one("r2i1p1f1"));
        assert_eq!(facets.get("time_frequency").cloned(), one("mon"));
        assert_eq!(facets["realm"], ["ocean", "seaIce"]);
    }

    #[test]
    fn cordex_attributes_name_the_regional_model() {
        let facets = filled(&[
            ("project_id", "CORDEX"),
            ("product", "output"),
            ("CORDEX_domain", "EUR-11"),
            ("driving_model_id", "NCC-NorESM1-M"),
            ("model_id", "GERICS-REMO2015"),
            ("rcm_version_id", "v1"),
            ("frequency", "3hr"),
        ]);
        assert_eq!(facets.get("product").cloned(), one("EUR-11"));
        assert_eq!(facets.get("cmor_table").cloned(), one("3hr"));
        assert_eq!(facets.get("rcm_name").cloned(), one("GERICS-REMO2015"));
        assert_eq!(
            facets.get("model").cloned(),
            one("NCC-NorESM1-M-GERICS-REMO2015-v1")
        );
    }

    #[test]
    fn cordex_cmip6_attributes_name_both_models() {
        let facets = filled(&[
            ("CORDEX_domain", "EUR-11"),
            ("source_id", "CLMcom-BTU-ICON-2-6-5-rc"),
            ("driving_source_id", "EC-Earth-Consortium-EC-Earth3-Veg"),
            ("rcm_version_id", "v1"),
        ]);
        let model = "EC-Earth-Consortium-EC-Earth3-Veg-CLMcom-BTU-ICON-2-6-5-rc-v1";
        assert_eq!(facets.get("model").cloned(), one(model));
    }

    #[test]
    fn cmip5_ensemble_and_descriptions() {
        let facets = filled(&[
            ("model_id", "MPI-ESM-LR"),
            ("experiment", "historical run"),
            ("realization", "1"),
            ("initialization_method", "1"),
            ("physics_version", "2"),
        ]);
        assert_eq!(facets.get("model").cloned(), one("MPI-ESM-LR"));
        assert_eq!(facets.get("ensemble").cloned(), one("r1i1p2"));
        assert!(!facets.contains_key("experiment"));
    }

    #[test]
    fn path_facets_win() {
        let mut facets = Facets::new();
        facets.insert("project", vec!["observations".into()]);
        fill_facets(
            &mut facets,
            &attributes(&[("project_id", "obs4MIPs")]),
            false,
        );
        assert_eq!(facets.get("project").cloned(), one("observations"));
    }

    const NAMES: &[&str] = &[
        "project_id",
        "source_id",
        "experiment_id",
        "variable_id",
        "realm",
        "frequency",
        "driving_model_id",
        "model_id",
        "rcm_version_id",
        "realization",
        "physics_version",
        "initialization_method",
        "CORDEX_domain",
        "project",
    ];
    const VALUES: &[&str] = &[
        "CMIP6",
        "ocean seaIce",
        "historical run",
        "1",
        "EUR-11",
        "v1",
    ];

    proptest::proptest! {
        #[test]
        fn hostile_attributes_give_single_token_values(
            pairs in proptest::collection::btree_map(
                proptest::prop_oneof![
                    proptest::strategy::Strategy::prop_map(proptest::sample::select(NAMES), str::to_string),
                    crate::hostile::text(NAMES, &["_", "id"]),
                ],
                crate::hostile::text(VALUES, &[" ", "-", "_", "\t"]),
                0..10,
            ),
        ) {
            let cordex = is_cordex(&pairs);
            let mut facets = Facets::new();
            fill_facets(&mut facets, &pairs, cordex);
            if cordex {
                complete_cordex(&mut facets);
            }
            for values in facets.values() {
                for value in values {
                    proptest::prop_assert!(
                        !value.is_empty() && !value.contains(char::is_whitespace),
                        "{value:?}"
                    );
                }
            }
        }
    }
}
