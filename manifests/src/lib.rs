//! `svc-manifests`: blob manifests (schema v3) that group a Zarr store's keys into blobs for
//! the cold tier: types, validation, resolver, partitioner, pins and reports. A pure library:
//! no RocksDB, no HTTP, no async runtime.
//!
//! Not built yet; the schema and its rules are in `shared/spec/3-blob-manifest.md`.
