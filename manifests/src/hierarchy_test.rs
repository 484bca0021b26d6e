use serde_json::json;

use super::*;
use crate::testing::{self, Spec, memory, put, put_json};

fn defaults() -> Vec<String> {
    DEFAULT_EXCLUDE.iter().map(|&s| s.to_owned()).collect()
}

async fn read(store: &dyn ObjectStore, scope: &str) -> Vec<Array> {
    read_arrays(store, scope, &defaults(), None).await.unwrap()
}

#[tokio::test]
async fn detects_v3_v2_and_nothing() {
    let store = memory();
    testing::group(store.as_ref(), "a.zarr", "", true).await;
    testing::group(store.as_ref(), "b.zarr", "", false).await;
    put(store.as_ref(), "c/readme.txt", b"x".to_vec()).await;
    assert_eq!(
        detect_format(store.as_ref(), "a.zarr").await.unwrap(),
        Some(ZarrFormat::V3)
    );
    assert_eq!(
        detect_format(store.as_ref(), "/b.zarr/").await.unwrap(),
        Some(ZarrFormat::V2)
    );
    assert_eq!(detect_format(store.as_ref(), "c").await.unwrap(), None);
    assert_eq!(detect_format(store.as_ref(), "").await.unwrap(), None);
}

#[tokio::test]
async fn read_arrays_v3() {
    let store = memory();
    testing::group(store.as_ref(), "s.zarr", "", true).await;
    testing::array(
        store.as_ref(),
        "s.zarr",
        &Spec::v3("tas", &[400, 4, 4], &[10, 4, 4]),
    )
    .await;
    testing::array(
        store.as_ref(),
        "s.zarr",
        &Spec::v3("time", &[400], &[100]).coordinate(),
    )
    .await;
    let arrays = read(store.as_ref(), "s.zarr").await;
    assert_eq!(arrays.len(), 2);
    let tas = &arrays[0];
    assert_eq!(
        (tas.path.as_str(), tas.nobjects(), tas.nobjects_seen),
        ("tas", 40, Some(40))
    );
    assert_eq!(tas.stored_bytes, Some(40 * 64));
    assert_eq!(
        (tas.itemsize, tas.key_encoding, tas.is_coordinate),
        (4, KeyEncoding::V3Slash, false)
    );
    assert!(arrays[1].is_coordinate);
}

#[tokio::test]
async fn coordinates_are_detected_in_both_formats_and_by_dimension_names() {
    let store = memory();
    testing::array(
        store.as_ref(),
        "v2",
        &Spec::v2("lat", &[10], &[10], false).coordinate(),
    )
    .await;
    testing::array(
        store.as_ref(),
        "v2",
        &Spec::v2("tas", &[10, 10], &[5, 10], false).coordinate(),
    )
    .await;
    testing::array(
        store.as_ref(),
        "v3",
        &Spec::v3("lat", &[10], &[10]).coordinate(),
    )
    .await;
    let mut named = Spec::v3("lon", &[10], &[10]);
    named.dimension_names = Some(vec!["lon".into()]);
    testing::array(store.as_ref(), "v3", &named).await;
    let mut other = Spec::v3("x", &[10], &[10]);
    other.dimension_names = Some(vec!["y".into()]);
    testing::array(store.as_ref(), "v3", &other).await;
    let v2 = read(store.as_ref(), "v2").await;
    assert_eq!(
        v2.iter().map(|a| a.is_coordinate).collect::<Vec<_>>(),
        [true, false]
    );
    let v3 = read(store.as_ref(), "v3").await;
    assert_eq!(
        v3.iter()
            .map(|a| (a.path.as_str(), a.is_coordinate))
            .collect::<Vec<_>>(),
        [("lat", true), ("lon", true), ("x", false)]
    );
}

#[tokio::test]
async fn datatree_coordinates_are_detected_six_levels_deep() {
    let store = memory();
    let deep = "a/b/c/d/e/f";
    for depth in 0..6 {
        let path: Vec<&str> = deep.split('/').take(depth).collect();
        testing::group(store.as_ref(), "t", &path.join("/"), true).await;
    }
    testing::array(
        store.as_ref(),
        "t",
        &Spec::v3(&format!("{deep}/time"), &[4], &[2]).coordinate(),
    )
    .await;
    let arrays = read(store.as_ref(), "t").await;
    assert_eq!(arrays[0].path, "a/b/c/d/e/f/time");
    assert!(arrays[0].is_coordinate);
}

#[tokio::test]
async fn zattrs_without_array_dimensions_is_harmless() {
    let store = memory();
    testing::array(store.as_ref(), "s", &Spec::v2("lat", &[10], &[10], false)).await;
    put_json(
        store.as_ref(),
        "s/lat/.zattrs",
        &json!({"units": "degrees"}),
    )
    .await;
    let arrays = read(store.as_ref(), "s").await;
    assert!(!arrays[0].is_coordinate);
}

#[tokio::test]
async fn key_encodings_round_trip() {
    let store = memory();
    let mut v3_slash = Spec::v3("a", &[4, 4], &[2, 4]);
    v3_slash.encoding = KeyEncoding::V2Slash;
    let mut v3_flat = Spec::v3("b", &[4, 4], &[2, 4]);
    v3_flat.encoding = KeyEncoding::V2Flat;
    for spec in [
        Spec::v3("c", &[4, 4], &[2, 4]),
        v3_slash,
        v3_flat,
        Spec::v2("d", &[4, 4], &[2, 4], true),
        Spec::v2("e", &[4, 4], &[2, 4], false),
    ] {
        testing::array(store.as_ref(), "s", &spec).await;
    }
    let got: Vec<(String, KeyEncoding)> = read(store.as_ref(), "s")
        .await
        .into_iter()
        .map(|a| (a.path, a.key_encoding))
        .collect();
    assert_eq!(
        got,
        [
            ("a".into(), KeyEncoding::V2Slash),
            ("b".into(), KeyEncoding::V2Flat),
            ("c".into(), KeyEncoding::V3Slash),
            ("d".into(), KeyEncoding::V2Slash),
            ("e".into(), KeyEncoding::V2Flat),
        ]
    );
}

#[tokio::test]
async fn sharded_array_reports_the_shard_as_the_object() {
    let store = memory();
    let mut spec = Spec::v3("tas", &[400, 4], &[10, 4]);
    spec.shards = Some(vec![100, 4]);
    testing::array(store.as_ref(), "s", &spec).await;
    let tas = &read(store.as_ref(), "s").await[0];
    assert_eq!(tas.chunks, [10, 4]);
    assert_eq!(tas.shards.as_deref(), Some(&[100, 4][..]));
    assert_eq!((tas.nobjects(), tas.nobjects_seen), (4, Some(4)));
}

#[tokio::test]
async fn array_roots_come_from_metadata_not_key_shape() {
    let store = memory();
    testing::group(store.as_ref(), "s", "", true).await;
    testing::group(store.as_ref(), "s", "c", true).await;
    testing::array(store.as_ref(), "s", &Spec::v3("c/tas", &[4], &[2])).await;
    let arrays = read(store.as_ref(), "s").await;
    assert_eq!(
        arrays.iter().map(|a| a.path.as_str()).collect::<Vec<_>>(),
        ["c/tas"]
    );
    assert_eq!(arrays[0].chunk_prefix(), "c/tas/c");
}

#[tokio::test]
async fn partially_written_array_divides_by_what_was_seen() {
    let store = memory();
    let mut spec = Spec::v3("tas", &[100, 4], &[10, 4]);
    spec.rows = Some(3);
    testing::array(store.as_ref(), "s", &spec).await;
    let tas = &read(store.as_ref(), "s").await[0];
    assert_eq!(
        (tas.nobjects(), tas.nobjects_seen, tas.avg_object_bytes()),
        (10, Some(3), 64)
    );
    assert_eq!(tas.total_bytes(), 192);
}

#[tokio::test]
async fn never_written_array_falls_back_to_uncompressed_size() {
    let store = memory();
    let mut spec = Spec::v3("tas", &[100, 4], &[10, 4]);
    spec.rows = Some(0);
    testing::array(store.as_ref(), "s", &spec).await;
    let tas = &read(store.as_ref(), "s").await[0];
    assert_eq!(
        (tas.stored_bytes, tas.nobjects_seen, tas.total_bytes()),
        (None, None, 10 * 160)
    );
}

#[tokio::test]
async fn stray_objects_are_counted_by_no_array() {
    let store = memory();
    testing::array(store.as_ref(), "s", &Spec::v3("tas", &[4], &[2])).await;
    put(store.as_ref(), "s/readme.txt", vec![0; 10]).await;
    put(store.as_ref(), "s/other/x", vec![0; 10]).await;
    let tas = &read(store.as_ref(), "s").await[0];
    assert_eq!(tas.stored_bytes, Some(128));
}

#[tokio::test]
async fn declared_encoding_loses_to_observed() {
    let store = memory();
    put_json(
        store.as_ref(),
        "s/tas/.zarray",
        &json!({"shape": [4, 4], "chunks": [2, 4], "dtype": "<f8"}),
    )
    .await;
    put(store.as_ref(), "s/tas/0/0", vec![0; 64]).await;
    put(store.as_ref(), "s/tas/1/0", vec![0; 64]).await;
    put_json(
        store.as_ref(),
        "s/one/.zarray",
        &json!({"shape": [4], "chunks": [2], "dtype": "<f8", "dimension_separator": "/"}),
    )
    .await;
    put(store.as_ref(), "s/one/0", vec![0; 64]).await;
    put_json(store.as_ref(), "s/v3/zarr.json", &json!({"zarr_format": 3, "shape": [4], "chunk_grid": {"configuration": {"chunk_shape": [2]}}, "data_type": "int16", "chunk_key_encoding": {"name": "v2"}})).await;
    put(store.as_ref(), "s/v3/c/0", vec![0; 64]).await;
    let arrays = read(store.as_ref(), "s").await;
    let got: Vec<(&str, KeyEncoding, u64)> = arrays
        .iter()
        .map(|a| (a.path.as_str(), a.key_encoding, a.itemsize))
        .collect();
    assert_eq!(
        got,
        [
            ("one", KeyEncoding::V2Slash, 8), // a 1-D `one/0` proves nothing
            ("tas", KeyEncoding::V2Slash, 8),
            ("v3", KeyEncoding::V3Slash, 2),
        ]
    );
}

#[tokio::test]
async fn empty_prefix_is_not_a_zarr_store() {
    let store = memory();
    put(store.as_ref(), "s/readme.txt", vec![1]).await;
    let err = read_arrays(store.as_ref(), "s", &defaults(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotAZarrStore { .. }), "{err}");
    let err = read_arrays(store.as_ref(), "nothing", &defaults(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotAZarrStore { .. }), "{err}");
}

#[tokio::test]
async fn unreadable_metadata_and_unknown_dtypes_are_skipped() {
    let store = memory();
    testing::array(store.as_ref(), "s", &Spec::v3("good", &[4], &[2])).await;
    put(store.as_ref(), "s/broken/zarr.json", b"{not json".to_vec()).await;
    put_json(store.as_ref(), "s/list/zarr.json", &json!([1, 2])).await;
    put_json(
        store.as_ref(),
        "s/nokey/.zarray",
        &json!({"shape": [4], "chunks": [2]}),
    )
    .await;
    put_json(
        store.as_ref(),
        "s/struct/.zarray",
        &json!({"shape": [4], "chunks": [2], "dtype": [["a", "<f4"]]}),
    )
    .await;
    put_json(store.as_ref(), "s/ext/zarr.json", &json!({"zarr_format": 3, "node_type": "array", "shape": [4], "chunk_grid": {"configuration": {"chunk_shape": [2]}}, "data_type": {"name": "x"}})).await;
    put_json(
        store.as_ref(),
        "s/grp/zarr.json",
        &json!({"zarr_format": 3, "node_type": "group"}),
    )
    .await;
    let arrays = read(store.as_ref(), "s").await;
    assert_eq!(
        arrays.iter().map(|a| a.path.as_str()).collect::<Vec<_>>(),
        ["good"]
    );
}

#[test]
fn numpy_style_dtypes() {
    for (dtype, size) in [
        ("<f4", 4),
        (">i8", 8),
        ("|u1", 1),
        ("|b1", 1),
        ("<U10", 10),
        ("float64", 8),
        ("complex128", 16),
        ("bool", 1),
    ] {
        assert_eq!(itemsize(Some(&json!(dtype))), Ok(size), "{dtype}");
    }
    for dtype in [json!("<M8[ns]"), json!("f"), json!(4), json!({"name": "x"})] {
        assert!(itemsize(Some(&dtype)).is_err(), "{dtype}");
    }
}

#[tokio::test]
async fn gateway_staging_is_excluded_by_whole_segment() {
    let store = memory();
    testing::array(store.as_ref(), "s", &Spec::v3("tas", &[4], &[2])).await;
    put(store.as_ref(), "s/tas/.sgwtmp/c/9", vec![0; 1000]).await;
    put(
        store.as_ref(),
        "s/.snapshot/x/zarr.json",
        b"{\"shape\": [1], \"chunks\": [1], \"dtype\": \"<f4\"}".to_vec(),
    )
    .await;
    put(store.as_ref(), "s/tas/c/.sgwtmpx", vec![0; 1]).await;
    let arrays = read(store.as_ref(), "s").await;
    assert_eq!(arrays.len(), 1);
    assert_eq!(arrays[0].stored_bytes, Some(129));
    let all = read_arrays(store.as_ref(), "s", &[], None).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].stored_bytes, Some(1129));
    assert!(is_excluded("a/.snapshot/b", &defaults()));
    assert!(!is_excluded("a/.snapshots/b", &defaults()));
}

#[tokio::test]
async fn nested_groups_and_root_arrays() {
    let store = memory();
    testing::array(store.as_ref(), "s", &Spec::v2("", &[4, 4], &[2, 4], false)).await;
    testing::array(
        store.as_ref(),
        "s",
        &Spec::v2("g/h/x", &[4, 4], &[2, 4], true),
    )
    .await;
    let arrays = read(store.as_ref(), "s").await;
    let got: Vec<(&str, Option<u64>)> = arrays
        .iter()
        .map(|a| (a.path.as_str(), a.nobjects_seen))
        .collect();
    assert_eq!(got, [("", Some(2)), ("g/h/x", Some(2))]);
    assert_eq!(arrays[0].chunk_prefix(), "");
}

#[tokio::test]
async fn more_objects_than_the_grid_allows_is_kept() {
    let store = memory();
    testing::array(store.as_ref(), "s", &Spec::v3("tas", &[4], &[2])).await;
    put(store.as_ref(), "s/tas/c/7", vec![0; 64]).await;
    let tas = &read(store.as_ref(), "s").await[0];
    assert_eq!((tas.nobjects(), tas.nobjects_seen), (2, Some(3)));
}
