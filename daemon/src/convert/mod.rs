//! Sources to Zarr v2: the chunk plan ([`plan`]); reading NetCDF and writing the store follow.

#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the conversion worker, not yet written, plans with it"
    )
)]
pub(crate) mod plan;
