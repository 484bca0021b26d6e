//! Sources to Zarr v2: the chunk plan ([`plan`]) and the store's metadata ([`metadata`]);
//! writing the chunks follows.

#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the conversion worker, not yet written, uses it")
)]
pub(crate) mod metadata;
pub(crate) mod plan;
