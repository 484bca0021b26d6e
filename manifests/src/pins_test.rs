use super::*;
use crate::model::Blob;
use crate::testing::memory;

async fn partitioned(scopes: &[&str]) -> ManifestStore {
    let store = ManifestStore::new(memory(), "");
    for scope in scopes {
        let mut m = Manifest::new(*scope);
        m.blobs.push(Blob {
            id: "b_pr".into(),
            prefixes: vec!["pr".into()],
            bucket: None,
        });
        store.write(&m, WriteMode::Create).await.unwrap();
    }
    store
}

fn new(reason: &str, until: Option<&str>) -> NewPin {
    NewPin {
        reason: reason.into(),
        by: "ana".into(),
        until: until.map(str::to_owned),
    }
}

#[test]
fn covers_matches_whole_segments_and_empty_covers_all() {
    let pin = Pin {
        prefix: "zoom_9".into(),
        reason: "r".into(),
        by: String::new(),
        at: String::new(),
        until: None,
    };
    assert!(pin.covers("zoom_9") && pin.covers("zoom_9/x"));
    assert!(!pin.covers("zoom_90/x"));
    let all = Pin {
        prefix: String::new(),
        ..pin
    };
    assert!(all.covers("anything") && all.covers(""));
}

#[test]
fn expiry_is_reported_not_enforced() {
    let pin = Pin {
        prefix: "x".into(),
        reason: "r".into(),
        by: String::new(),
        at: String::new(),
        until: Some("2026-12-01T00:00:00+00:00".into()),
    };
    assert!(!pin.is_expired("2026-11-30T23:59:59+00:00"));
    assert!(pin.is_expired("2026-12-01T00:00:01+00:00"));
    assert!(!Pin { until: None, ..pin }.is_expired("9999"));
}

#[tokio::test]
async fn add_bumps_the_epoch_and_show_lists_it() {
    let store = partitioned(&["s"]).await;
    let updated = add(&store, "s", "/tas/", new("paper", None)).await.unwrap();
    assert_eq!(updated.epoch, 2);
    let stored = store.read("s").await.unwrap().unwrap().manifest;
    assert_eq!(stored.pinned[0].prefix, "tas");
    assert_eq!(stored.pinned[0].by, "ana");
    assert!(stored.pinned[0].at.ends_with("+00:00"));
    let records = show(&store, None, false, &now()).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].location(), "s/tas");
}

#[tokio::test]
async fn add_refuses_an_unpartitioned_scope_a_duplicate_and_a_blank_reason() {
    let store = partitioned(&["s"]).await;
    let err = add(&store, "typo", "", new("x", None)).await.unwrap_err();
    assert!(matches!(err, Error::NotPartitioned { .. }), "{err}");
    add(&store, "s", "", new("x", None)).await.unwrap();
    let err = add(&store, "s", "/", new("y", None)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "s: (whole scope) is already pinned; remove it first to change the reason"
    );
    let err = add(&store, "s", "pr", new(" ", None)).await.unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err}");
}

#[tokio::test]
async fn remove_and_refuse_what_is_not_pinned() {
    let store = partitioned(&["s"]).await;
    add(&store, "s", "tas", new("x", None)).await.unwrap();
    let updated = remove(&store, "s", "tas/").await.unwrap();
    assert_eq!((updated.epoch, updated.pinned.len()), (3, 0));
    let err = remove(&store, "s", "tas").await.unwrap_err();
    assert_eq!(err.to_string(), "s: tas is not pinned");
    assert!(matches!(
        remove(&store, "nope", "").await.unwrap_err(),
        Error::NotPartitioned { .. }
    ));
}

#[tokio::test]
async fn show_puts_the_worst_first_and_filters() {
    let store = partitioned(&["a", "b"]).await;
    add(
        &store,
        "a",
        "dated",
        new("r", Some("2027-01-01T00:00:00+00:00")),
    )
    .await
    .unwrap();
    add(&store, "b", "open", new("r", None)).await.unwrap();
    add(&store, "a", "open", new("r", None)).await.unwrap();
    add(
        &store,
        "b",
        "late",
        new("r", Some("2026-02-01T00:00:00+00:00")),
    )
    .await
    .unwrap();
    add(
        &store,
        "a",
        "early",
        new("r", Some("2026-01-01T00:00:00+00:00")),
    )
    .await
    .unwrap();
    let at = "2026-06-01T00:00:00+00:00";
    let order: Vec<String> = show(&store, None, false, at)
        .await
        .unwrap()
        .iter()
        .map(PinRecord::location)
        .collect();
    assert_eq!(order, ["a/early", "b/late", "a/open", "b/open", "a/dated"]);
    let expired: Vec<String> = show(&store, None, true, at)
        .await
        .unwrap()
        .iter()
        .map(PinRecord::location)
        .collect();
    assert_eq!(expired, ["a/early", "b/late"]);
    let one: Vec<String> = show(&store, Some("b"), false, at)
        .await
        .unwrap()
        .iter()
        .map(PinRecord::location)
        .collect();
    assert_eq!(one, ["b/late", "b/open"]);
    assert!(
        show(&store, Some("missing"), false, at)
            .await
            .unwrap()
            .is_empty()
    );
    let text = crate::text::render_pins(
        &show(&store, Some("b"), false, at).await.unwrap(),
        false,
        at,
    );
    assert_eq!(
        text,
        "b/late  ana        EXPIRED 2026-02-01   r\nb/open  ana        no expiry            r\n\n2 pin(s) expired or open-ended -- these are how a hot pool fills"
    );
    assert_eq!(crate::text::render_pins(&[], true, at), "no expired pins");
}

#[tokio::test]
async fn pinning_an_existing_blob_reports_it_rather_than_removing_it() {
    let store = partitioned(&["s"]).await;
    let updated = add(&store, "s", "pr", new("x", None)).await.unwrap();
    assert_eq!(updated.blobs.len(), 1);
    assert_eq!(updated.pinned_blob_ids(), ["b_pr"]);
    let trie = crate::Trie::from_manifests([&updated]);
    assert_eq!(trie.lookup("s/pr/0.0").to_string(), "pinned");
    let below = add(&store, "s", "pr/0.0", new("x", None)).await;
    assert!(below.is_ok());
}
