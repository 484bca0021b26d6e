use super::*;
use crate::store::WriteMode;
use crate::testing::{self, Spec, memory, put};

async fn layout() -> std::sync::Arc<object_store::memory::InMemory> {
    let data = memory();
    testing::group(data.as_ref(), "cordex/a.zarr", "", true).await;
    testing::array(data.as_ref(), "cordex/a.zarr", &Spec::v3("tas", &[4], &[2])).await;
    // a nested group inside a store must not be reported as a store of its own
    testing::group(data.as_ref(), "cordex/a.zarr", "inner", true).await;
    testing::group(data.as_ref(), "cordex/b.zarr", "", false).await;
    put(data.as_ref(), "docs/readme.txt", b"x".to_vec()).await;
    testing::group(data.as_ref(), "deep/1/2/3/4/5/6/7/z.zarr", "", true).await;
    testing::group(data.as_ref(), "cordex/.snapshot/old.zarr", "", true).await;
    data
}

#[tokio::test]
async fn finds_stores_marks_known_ones_and_does_not_descend() {
    let data = layout().await;
    let manifests = ManifestStore::new(memory(), "");
    manifests
        .write(&crate::Manifest::new("cordex/a.zarr"), WriteMode::Create)
        .await
        .unwrap();
    let exclude: Vec<String> = crate::DEFAULT_EXCLUDE
        .iter()
        .map(|&s| s.to_owned())
        .collect();
    let found = scan(data.as_ref(), &manifests, "", DEFAULT_MAX_DEPTH, &exclude)
        .await
        .unwrap();
    let got: Vec<(&str, &str, bool)> = found
        .iter()
        .map(|c| (c.scope.as_str(), c.format.as_str(), c.has_manifest))
        .collect();
    assert_eq!(
        got,
        [
            ("cordex/a.zarr", "v3", true),
            ("cordex/b.zarr", "v2", false)
        ]
    );
    let deeper = scan(data.as_ref(), &manifests, "deep", 8, &exclude)
        .await
        .unwrap();
    assert_eq!(deeper[0].scope, "deep/1/2/3/4/5/6/7/z.zarr");
    let sub = scan(data.as_ref(), &manifests, "/cordex/", 2, &[])
        .await
        .unwrap();
    assert_eq!(sub.len(), 3, "{sub:?}");
    let at_store = scan(data.as_ref(), &manifests, "cordex/b.zarr", 0, &exclude)
        .await
        .unwrap();
    assert_eq!(at_store.len(), 1);
}
