use super::*;
use crate::model::{Blob, Pin};
use crate::testing::{self, Spec, memory, put};

async fn data() -> std::sync::Arc<object_store::memory::InMemory> {
    let data = memory();
    testing::array(data.as_ref(), "s", &Spec::v3("tas", &[40, 4], &[10, 4])).await;
    testing::array(data.as_ref(), "s", &Spec::v3("pr", &[20, 4], &[10, 4])).await;
    testing::array(
        data.as_ref(),
        "s",
        &Spec::v3("time", &[40], &[40]).coordinate(),
    )
    .await;
    testing::array(data.as_ref(), "u", &Spec::v3("x", &[10], &[10])).await;
    data
}

fn manifest() -> Manifest {
    let mut m = Manifest::new("s");
    m.hot_always.push("time/**".into());
    m.blobs.push(Blob {
        id: "b_tas".into(),
        prefixes: vec!["tas/c".into()],
        bucket: Some(crate::Bucket {
            index: 0,
            width: 2,
            key_encoding: crate::KeyEncoding::V3Slash,
        }),
    });
    m.blobs.push(Blob {
        id: "b_pr_c".into(),
        prefixes: vec!["pr/c".into()],
        bucket: None,
    });
    m.pinned.push(Pin {
        prefix: "pr".into(),
        reason: "r".into(),
        by: String::new(),
        at: String::new(),
        until: Some("2020-01-01T00:00:00+00:00".into()),
    });
    m
}

#[tokio::test]
async fn everything_is_accounted_for() {
    let data = data().await;
    let listed: u64 = futures::TryStreamExt::try_collect::<Vec<_>>(data.list(None))
        .await
        .unwrap()
        .iter()
        .map(|m| m.size)
        .sum();
    let r = report(data.as_ref(), &[manifest()], "", &crate::now(), None)
        .await
        .unwrap();
    assert_eq!(r.total_bytes(), listed);
    assert_eq!(r.archivable_bytes, 4 * 64);
    assert_eq!(r.pinned_bytes, 2 * 64);
    assert!(r.hot_bytes > 64, "metadata and the coordinate are hot");
    assert_eq!(r.unmanaged_bytes, 64);
    assert_eq!(r.blobs.len(), 2);
    assert_eq!((r.pins, r.expired_pins), (1, 1));
    assert_eq!(r.scope, ".");
    assert!(r.held_fraction() > 0.0 && r.held_fraction() < 1.0);
}

#[tokio::test]
async fn an_unpartitioned_store_shows_as_unmanaged() {
    let data = data().await;
    put(data.as_ref(), "u/big", vec![0; 10_000]).await;
    let r = report(data.as_ref(), &[manifest()], "u", &crate::now(), None)
        .await
        .unwrap();
    assert_eq!(r.scope, "u");
    let text = crate::text::render_reports(&[r]);
    assert!(text.contains("u: 97% unmanaged."), "{text}");
    assert!(text.contains("Run scan."));
    assert!(text.contains("1 pin(s) past their review date"));
}

#[tokio::test]
async fn a_fully_partitioned_prefix_reports_no_warning() {
    let data = data().await;
    let mut m = manifest();
    m.pinned.clear();
    let r = report(data.as_ref(), &[m], "s/tas", &crate::now(), None)
        .await
        .unwrap();
    assert_eq!(r.unmanaged_bytes, 0);
    let text = crate::text::render_reports(&[r]);
    assert_eq!(text.lines().count(), 3, "{text}");
}

#[tokio::test]
async fn per_bucket_prefixes_and_empty_scopes() {
    let data = data().await;
    assert_eq!(child_prefixes(data.as_ref(), "").await.unwrap(), ["s", "u"]);
    let r = report(data.as_ref(), &[], "nothing", &crate::now(), None)
        .await
        .unwrap();
    assert_eq!((r.total_bytes(), r.held_fraction()), (0, 0.0));
}
