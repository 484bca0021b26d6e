//! The standard facet vocabulary every flavour translates from.

/// The facets that classify datasets, coarse to fine: the columns of an intake catalogue and
/// the facets a STAC collection axis may be.
pub(crate) const HIERARCHY: [&str; 14] = [
    "project",
    "product",
    "institute",
    "model",
    "experiment",
    "time_frequency",
    "realm",
    "variable",
    "ensemble",
    "cmor_table",
    "fs_type",
    "grid_label",
    "grid_id",
    "format",
];

/// Standard facet names in their canonical order (DECISIONS.md).
pub(crate) const STANDARD_FACETS: [&str; 24] = [
    "project",
    "product",
    "institute",
    "model",
    "experiment",
    "time_frequency",
    "realm",
    "variable",
    "ensemble",
    "time_aggregation",
    "fs_type",
    "grid_label",
    "cmor_table",
    "driving_model",
    "format",
    "grid_id",
    "level_type",
    "rcm_name",
    "rcm_version",
    "dataset",
    "time",
    "bbox",
    "user",
    "version",
];

/// The facet naming the owner of user data; its values are identities, never patterns.
pub(crate) const OWNER: &str = "user";

/// Facets with a term dictionary and posting lists: every standard facet except the range
/// facets `time` and `bbox`.
pub(crate) fn is_term_facet(name: &str) -> bool {
    is_standard(name) && name != "time" && name != "bbox"
}

/// Whether `name` is a standard facet name.
pub(crate) fn is_standard(name: &str) -> bool {
    STANDARD_FACETS.contains(&name)
}

/// Facets counted by metadata-search when the caller names none, in canonical order:
/// the term facets without `version` (added only for multi-version searches).
pub(crate) fn default_count_facets() -> impl Iterator<Item = &'static str> {
    STANDARD_FACETS
        .into_iter()
        .filter(|f| is_term_facet(f) && *f != "version")
}

/// The indexed form of a facet value: lower-cased, and for `version` without a leading `v`
/// (so `v20191108` and `20191108` are the same version). The `user` facet holds identities:
/// it is indexed exactly as given, so `Jane` and `jane` are different owners.
pub(crate) fn term(facet: &str, value: &str) -> String {
    if facet == OWNER {
        return value.to_string();
    }
    let lower = value.trim().to_lowercase();
    if facet == "version"
        && let Some(rest) = lower.strip_prefix('v')
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_digit())
    {
        return rest.to_string();
    }
    lower
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_lower_case_and_versions_lose_their_v() {
        assert_eq!(term("project", "CMIP6"), "cmip6");
        assert_eq!(term("version", "v20191108"), "20191108");
        assert_eq!(term("version", "vx"), "vx");
        assert_eq!(default_count_facets().count(), 21);
    }
}
