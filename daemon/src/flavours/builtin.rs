//! The built-in flavours and the seeded global `nextgems` flavour.

use crate::catalog::facet::STANDARD_FACETS;

/// Built-in flavour names, in listing order.
pub(crate) const BUILTIN_NAMES: [&str; 5] = ["svc", "cmip6", "cmip5", "cordex", "user"];

/// Mapping order of the DRS flavours (cmip6, cmip5, cordex).
const DRS_ORDER: [&str; 22] = [
    "experiment",
    "ensemble",
    "fs_type",
    "grid_label",
    "institute",
    "model",
    "project",
    "product",
    "realm",
    "variable",
    "time",
    "bbox",
    "time_aggregation",
    "time_frequency",
    "cmor_table",
    "dataset",
    "driving_model",
    "format",
    "grid_id",
    "level_type",
    "rcm_name",
    "rcm_version",
];

const CMIP6: [(&str, &str); 9] = [
    ("project", "mip_era"),
    ("product", "activity_id"),
    ("institute", "institution_id"),
    ("model", "source_id"),
    ("experiment", "experiment_id"),
    ("time_frequency", "frequency"),
    ("variable", "variable_id"),
    ("ensemble", "member_id"),
    ("cmor_table", "table_id"),
];

const CMIP5: [(&str, &str); 3] = [
    ("institute", "institution_id"),
    ("model", "model_id"),
    ("ensemble", "member_id"),
];

const CORDEX: [(&str, &str); 2] = [("product", "domain"), ("institute", "institution")];

/// The partial mapping of the `nextgems` flavour seeded as a global custom flavour.
pub(super) const NEXTGEMS: [(&str, &str); 7] = [
    ("experiment", "simulation_id"),
    ("ensemble", "member_id"),
    ("institute", "institution_id"),
    ("model", "source_id"),
    ("product", "experiment_id"),
    ("variable", "variable_id"),
    ("time_aggregation", "time_reduction"),
];

/// The full mapping (standard name -> flavour name, in mapping order) of a built-in flavour.
pub(crate) fn builtin_mapping(name: &str) -> Option<Vec<(String, String)>> {
    let renamed = |order: &[&str], renames: &[(&str, &str)]| {
        order
            .iter()
            .map(|std| {
                let to = renames
                    .iter()
                    .find(|(from, _)| from == std)
                    .map_or(*std, |(_, to)| *to);
                (std.to_string(), to.to_string())
            })
            .collect()
    };
    match name {
        "svc" | "user" => Some(renamed(&STANDARD_FACETS, &[])),
        "cmip6" => Some(renamed(&DRS_ORDER, &CMIP6)),
        "cmip5" => Some(renamed(&DRS_ORDER, &CMIP5)),
        "cordex" => Some(renamed(&DRS_ORDER, &CORDEX)),
        _ => None,
    }
}
