//! `svc-fs`: the FUSE view of the daemon's Zarr stores, `/<token>.zarr/<key>`, reading
//! through the same daemon functions as the HTTP facade.
//!
//! Not built yet: the stores it serves arrive with the data portal. This crate holds the place
//! in the dependency graph (`src -> http, fs -> daemon -> manifests`).
