use std::sync::Arc;

use super::*;
use crate::model::Pin;
use crate::testing::{self, Spec, Spy, memory};

fn tiny() -> PartitionOptions {
    PartitionOptions {
        policy: PolicyFlags {
            t_max_bytes: Some(1280),
            t_hot_bytes: Some(32),
            pow2_floor: Some(1 << 40),
            ..PolicyFlags::default()
        },
        ..PartitionOptions::default()
    }
}

/// Partitions scope `s.zarr` of `data` into `manifests`.
async fn run(
    data: &Arc<object_store::memory::InMemory>,
    manifests: &ManifestStore,
    options: &PartitionOptions,
) -> PartitionOutcome {
    partition_store(data.as_ref(), manifests, "s.zarr", options, None)
        .await
        .unwrap()
}

async fn store_with_tas() -> Arc<object_store::memory::InMemory> {
    let data = memory();
    testing::group(data.as_ref(), "s.zarr", "", true).await;
    testing::array(
        data.as_ref(),
        "s.zarr",
        &Spec::v3("tas", &[400, 4, 4], &[10, 4, 4]),
    )
    .await;
    testing::array(
        data.as_ref(),
        "s.zarr",
        &Spec::v3("time", &[400], &[400]).coordinate(),
    )
    .await;
    data
}

fn ids(manifest: &Manifest) -> Vec<&str> {
    manifest.blobs.iter().map(|b| b.id.as_str()).collect()
}

#[tokio::test]
async fn end_to_end_then_second_run_is_a_no_op() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    let first = run(&data, &manifests, &tiny()).await;
    assert!(first.written);
    assert_eq!(
        (first.manifest.epoch, ids(&first.manifest)),
        (1, vec!["b_tas"])
    );
    assert_eq!(first.diff.describe(), "+ b_tas ['tas/c']");
    let trie = crate::Trie::from_manifests(&manifests.load_all().await.unwrap());
    assert_eq!(trie.lookup("s.zarr/tas/c/35/0/0").to_string(), "b_tas_2");
    assert_eq!(trie.lookup("s.zarr/time/c/0").to_string(), "hot");
    let second = run(&data, &manifests, &PartitionOptions::default()).await;
    assert!(!second.written);
    assert_eq!(second.manifest.epoch, 1);
    assert_eq!(second.diff.describe(), "(no change)");
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    let options = PartitionOptions {
        dry_run: true,
        ..tiny()
    };
    let outcome = run(&data, &manifests, &options).await;
    assert!(!outcome.written);
    assert!(manifests.read("s.zarr").await.unwrap().is_none());
}

#[tokio::test]
async fn new_variable_bumps_the_epoch_additively() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    run(&data, &manifests, &tiny()).await;
    testing::array(
        data.as_ref(),
        "s.zarr",
        &Spec::v3("psl", &[400, 4, 4], &[10, 4, 4]),
    )
    .await;
    let outcome = run(&data, &manifests, &PartitionOptions::default()).await;
    assert!(outcome.written);
    assert_eq!(
        (outcome.manifest.epoch, ids(&outcome.manifest)),
        (2, vec!["b_tas", "b_psl"])
    );
    assert_eq!(
        manifests
            .read("s.zarr")
            .await
            .unwrap()
            .unwrap()
            .manifest
            .epoch,
        2
    );
}

#[tokio::test]
async fn a_policy_change_alone_does_nothing() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    run(&data, &manifests, &tiny()).await;
    let mut options = tiny();
    options.policy.t_max_bytes = Some(640);
    let outcome = run(&data, &manifests, &options).await;
    assert!(!outcome.written);
    assert_eq!(outcome.manifest.blobs[0].bucket.unwrap().width, 16);
}

#[tokio::test]
async fn policy_flags_build_a_policy_from_the_defaults() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    run(&data, &manifests, &tiny()).await;
    let options = PartitionOptions {
        mode: Mode::Recompute,
        policy: PolicyFlags {
            t_max_bytes: Some(640),
            ..PolicyFlags::default()
        },
        ..PartitionOptions::default()
    };
    let outcome = run(&data, &manifests, &options).await;
    let defaults = Policy::default();
    assert_eq!(
        outcome.manifest.policy,
        Policy {
            t_max_bytes: 640,
            ..defaults
        }
    );
}

#[tokio::test]
async fn force_without_flags_uses_the_default_policy_and_an_additive_run_inherits() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    let first = run(&data, &manifests, &tiny()).await;
    assert_eq!(first.manifest.policy.t_hot_bytes, 32);
    let inherited = run(&data, &manifests, &PartitionOptions::default()).await;
    assert_eq!(inherited.manifest.policy, first.manifest.policy);
    let forced = PartitionOptions {
        mode: Mode::Recompute,
        ..PartitionOptions::default()
    };
    let outcome = run(&data, &manifests, &forced).await;
    assert_eq!(outcome.manifest.policy, Policy::default());
    // under the default t_hot the 5 KiB array is hot, so the forced cut drops its blob
    assert!(outcome.manifest.blobs.is_empty());
    assert!(outcome.manifest.hot_always.contains(&"tas/**".to_owned()));
}

#[tokio::test]
async fn force_recomputes_keeps_pins_and_moves_the_epoch_forward() {
    let data = store_with_tas().await;
    let manifests = ManifestStore::new(memory(), "");
    run(&data, &manifests, &tiny()).await;
    let mut stored = manifests.read("s.zarr").await.unwrap().unwrap();
    stored.manifest.epoch = 7;
    stored.manifest.pinned.push(Pin {
        prefix: "other".into(),
        reason: "kept".into(),
        by: String::new(),
        at: String::new(),
        until: None,
    });
    manifests
        .write(&stored.manifest, crate::WriteMode::IfMatch(stored.etag))
        .await
        .unwrap();
    let mut options = tiny();
    options.mode = Mode::Recompute;
    options.policy.t_max_bytes = Some(640);
    let outcome = run(&data, &manifests, &options).await;
    assert!(outcome.written);
    assert_eq!(outcome.diff.modified.len(), 1);
    assert!(outcome.diff.describe().starts_with("~ b_tas: "));
    let now = manifests.read("s.zarr").await.unwrap().unwrap().manifest;
    assert_eq!((now.epoch, now.pinned.len()), (8, 1));
    assert_eq!(now.blobs[0].bucket.unwrap().width, 8);
}

#[tokio::test]
async fn a_change_of_hot_always_alone_is_written() {
    let data = memory();
    testing::array(data.as_ref(), "s", &Spec::v3("tas", &[40, 4], &[10, 4])).await;
    let manifests = ManifestStore::new(memory(), "");
    let options = PartitionOptions {
        policy: PolicyFlags {
            t_hot_bytes: Some(1),
            ..PolicyFlags::default()
        },
        ..PartitionOptions::default()
    };
    let first = partition_store(data.as_ref(), &manifests, "s", &options, None)
        .await
        .unwrap();
    assert_eq!(ids(&first.manifest), ["b_root"]);
    testing::array(
        data.as_ref(),
        "s",
        &Spec::v3("lat", &[4], &[4]).coordinate(),
    )
    .await;
    let second = partition_store(
        data.as_ref(),
        &manifests,
        "s",
        &PartitionOptions::default(),
        None,
    )
    .await
    .unwrap();
    assert!(second.written && second.diff.is_empty());
    assert_eq!(second.manifest.epoch, 2);
    let trie = crate::Trie::from_manifests(&manifests.load_all().await.unwrap());
    assert_eq!(trie.lookup("s/lat/c/0").to_string(), "hot");
    assert_eq!(trie.lookup("s/tas/c/0/0").to_string(), "b_root_0");
}

#[tokio::test]
async fn partitioning_only_reads_metadata() {
    let inner = store_with_tas().await;
    testing::array(
        inner.as_ref(),
        "s.zarr",
        &Spec::v2("v2/pr", &[40, 4], &[10, 4], false).coordinate(),
    )
    .await;
    let spy = Spy::new(inner);
    let manifests = ManifestStore::new(memory(), "");
    partition_store(&spy, &manifests, "s.zarr", &tiny(), None)
        .await
        .unwrap();
    partition_store(&spy, &manifests, "s.zarr", &tiny(), None)
        .await
        .unwrap();
    let gets = spy.gets.lock().unwrap().clone();
    assert!(!gets.is_empty());
    for key in &gets {
        let name = key.rsplit('/').next().unwrap();
        assert!(
            crate::METADATA_BASENAMES.contains(&name),
            "read a non-metadata object: {key}"
        );
    }
}

#[tokio::test]
async fn not_a_zarr_store_is_an_error() {
    let manifests = ManifestStore::new(memory(), "");
    let err = partition_store(memory().as_ref(), &manifests, "nothing", &tiny(), None)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "nothing: no zarr metadata found");
}

#[tokio::test]
async fn every_chunk_of_a_payload_array_lands_in_exactly_one_blob() {
    let data = store_with_tas().await;
    testing::array(
        data.as_ref(),
        "s.zarr",
        &Spec::v2("v2/pr", &[400, 4], &[10, 4], false),
    )
    .await;
    testing::array(
        data.as_ref(),
        "s.zarr",
        &Spec::v2("v2/ps", &[400, 4], &[10, 4], true),
    )
    .await;
    let manifests = ManifestStore::new(memory(), "");
    run(&data, &manifests, &tiny()).await;
    let trie = crate::Trie::from_manifests(&manifests.load_all().await.unwrap());
    let listing: Vec<object_store::ObjectMeta> =
        futures::TryStreamExt::try_collect(data.list(None))
            .await
            .unwrap();
    let mut per_blob = std::collections::BTreeMap::<String, u64>::new();
    for meta in &listing {
        let key = meta.location.as_ref();
        let resolution = trie.lookup(key);
        let name = key.rsplit('/').next().unwrap();
        if crate::METADATA_BASENAMES.contains(&name) || key.contains("/time/") {
            assert_eq!(resolution, crate::Resolution::Hot, "{key}");
        } else {
            *per_blob.entry(resolution.to_string()).or_default() += 1;
        }
    }
    assert!(!per_blob.contains_key("unmanaged"), "{per_blob:?}");
    // 40 chunks per array at width 16 or 20: three or two instances each
    assert_eq!(per_blob.values().sum::<u64>(), 120);
    assert_eq!(per_blob.get("b_tas_2"), Some(&8));
}

#[test]
fn the_async_entry_points_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let data = memory();
    let manifests = ManifestStore::new(memory(), "");
    let options = PartitionOptions::default();
    let progress = |_: u64| {};
    let future = partition_store(data.as_ref(), &manifests, "s", &options, Some(&progress));
    assert_send(&future);
    assert_send(&manifests.load_all());
    assert_send(&crate::report(data.as_ref(), &[], "", "", None));
    assert_send(&crate::scan(data.as_ref(), &manifests, "", 1, &[]));
    let resolver = crate::Resolver::default();
    assert_send(&resolver.reload(&manifests));
}
