use super::*;
use crate::model::Blob;
use crate::testing::{memory, put};

fn manifest(scope: &str) -> Manifest {
    let mut m = Manifest::new(scope);
    m.blobs.push(Blob {
        id: "b_root".into(),
        prefixes: vec![String::new()],
        bucket: None,
    });
    m
}

#[test]
fn key_mirrors_the_data_path() {
    let store = ManifestStore::new(memory(), "");
    assert_eq!(
        store.key("cordex/a.zarr").as_ref(),
        "cordex/a.zarr/manifest.json"
    );
    assert_eq!(store.key("").as_ref(), "manifest.json");
    let prefixed = ManifestStore::new(memory(), "/blobmap/");
    assert_eq!(prefixed.key("/x/").as_ref(), "blobmap/x/manifest.json");
}

#[tokio::test]
async fn roundtrip_and_missing() {
    let store = ManifestStore::new(memory(), "m");
    assert!(store.read("a.zarr").await.unwrap().is_none());
    let Written::Yes(etag) = store
        .write(&manifest("a.zarr"), WriteMode::Create)
        .await
        .unwrap()
    else {
        panic!("first write creates");
    };
    let stored = store.read("a.zarr").await.unwrap().unwrap();
    let mut expected = manifest("a.zarr");
    expected
        .generated_at
        .clone_from(&stored.manifest.generated_at);
    assert_eq!(stored.manifest, expected);
    assert_eq!(stored.etag, etag);
}

#[tokio::test]
async fn scopes_and_load_all() {
    let store = ManifestStore::new(memory(), "");
    assert!(store.load_all().await.unwrap().is_empty());
    for scope in ["a.zarr", "cordex/b.zarr"] {
        store
            .write(&manifest(scope), WriteMode::Create)
            .await
            .unwrap();
    }
    let mut scopes = store.scopes().await.unwrap();
    scopes.sort();
    assert_eq!(scopes, ["a.zarr", "cordex/b.zarr"]);
    assert_eq!(store.load_all().await.unwrap().len(), 2);
}

/// An object store lists `a/b/manifest.json` before `a/manifest.json`; the child must still
/// be inserted last, so its `b_root` wins on the node the parent's blob `b` also marks.
#[tokio::test]
async fn load_all_puts_parents_first_so_the_deeper_scope_wins_a_shared_node() {
    let store = ManifestStore::new(memory(), "");
    let mut parent = Manifest::new("a");
    parent.blobs.push(Blob {
        id: "b_parent".into(),
        prefixes: vec!["b".into()],
        bucket: None,
    });
    for m in [manifest("a/b"), parent, manifest("")] {
        store.write(&m, WriteMode::Create).await.unwrap();
    }
    let listed = store.scopes().await.unwrap();
    assert!(
        listed.iter().position(|s| s == "a/b") < listed.iter().position(|s| s == "a"),
        "{listed:?}"
    );
    let loaded = store.load_all().await.unwrap();
    let order: Vec<&str> = loaded.iter().map(|m| m.scope.as_str()).collect();
    assert_eq!(order, ["", "a", "a/b"]);
    let trie = crate::Trie::from_manifests(&loaded);
    assert_eq!(trie.lookup("a/b/x").to_string(), "b_root_0");
    let crate::Resolution::Blob { rule, .. } = trie.lookup("a/b/x") else {
        panic!("a blob")
    };
    assert_eq!(&*rule.scope, "a/b");
    assert_eq!(trie.lookup("a/c").to_string(), "b_root_0");
}

#[tokio::test]
async fn misplaced_manifest_is_ignored() {
    let inner = memory();
    let store = ManifestStore::new(inner.clone(), "");
    let text = manifest("elsewhere").to_json();
    put(inner.as_ref(), "here/manifest.json", text.into_bytes()).await;
    store
        .write(&manifest("ok"), WriteMode::Create)
        .await
        .unwrap();
    let loaded = store.load_all().await.unwrap();
    assert_eq!(
        loaded.iter().map(|m| m.scope.as_str()).collect::<Vec<_>>(),
        ["ok"]
    );
}

#[tokio::test]
async fn an_invalid_manifest_is_an_error_naming_its_key() {
    let inner = memory();
    let store = ManifestStore::new(inner.clone(), "");
    put(
        inner.as_ref(),
        "bad/manifest.json",
        b"{\"schema_version\": 2}".to_vec(),
    )
    .await;
    let err = store.read("bad").await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("bad/manifest.json: schema_version 2"),
        "{err}"
    );
    assert!(store.load_all().await.is_err());
    let mut invalid = manifest("x");
    invalid.blobs[0].id = "B".into();
    assert!(store.write(&invalid, WriteMode::Create).await.is_err());
}

/// Creates `s`, checks that a second create conflicts, then updates it with the etag just
/// read (which must be written). Returns that etag and the written manifest.
async fn create_then_update(store: &ManifestStore) -> (Option<String>, Manifest) {
    store
        .write(&manifest("s"), WriteMode::Create)
        .await
        .unwrap();
    assert_eq!(
        store
            .write(&manifest("s"), WriteMode::Create)
            .await
            .unwrap(),
        Written::Conflict
    );
    let stored = store.read("s").await.unwrap().unwrap();
    let newer = stored.manifest.bumped();
    let Written::Yes(_) = store
        .write(&newer, WriteMode::IfMatch(stored.etag.clone()))
        .await
        .unwrap()
    else {
        panic!("the current etag must win");
    };
    assert_eq!(store.read("s").await.unwrap().unwrap().manifest.epoch, 2);
    (stored.etag, newer)
}

#[tokio::test]
async fn create_conflicts_and_stale_etags_conflict() {
    let store = ManifestStore::new(memory(), "");
    let (stale, newer) = create_then_update(&store).await;
    assert_eq!(
        store
            .write(&newer.bumped(), WriteMode::IfMatch(stale))
            .await
            .unwrap(),
        Written::Conflict
    );
    assert_eq!(store.read("s").await.unwrap().unwrap().manifest.epoch, 2);
}

#[tokio::test]
async fn local_store_falls_back_to_overwrite_for_updates() {
    let dir = tempfile::tempdir().unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let store = ManifestStore::new(std::sync::Arc::new(local), "");
    create_then_update(&store).await;
    assert!(dir.path().join("s/manifest.json").is_file());
}

#[tokio::test]
async fn resolver_reload_swaps_only_when_an_epoch_changed() {
    let store = ManifestStore::new(memory(), "");
    store
        .write(&manifest("a"), WriteMode::Create)
        .await
        .unwrap();
    let resolver = crate::Resolver::default();
    assert!(resolver.reload(&store).await.unwrap());
    let before = resolver.current();
    assert_eq!(before.lookup("a/x").to_string(), "b_root_0");
    assert!(!resolver.reload(&store).await.unwrap());
    let stored = store.read("a").await.unwrap().unwrap();
    let mut next = stored.manifest.bumped();
    next.blobs[0].id = "b_new".into();
    store
        .write(&next, WriteMode::IfMatch(stored.etag))
        .await
        .unwrap();
    assert!(resolver.reload(&store).await.unwrap());
    // a lookup holding the old trie finishes on it
    assert_eq!(before.lookup("a/x").to_string(), "b_root_0");
    assert_eq!(resolver.current().lookup("a/x").to_string(), "b_new_0");
    assert_eq!(resolver.current().epochs().get("a"), Some(&2));
}
