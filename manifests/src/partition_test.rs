use super::*;
use crate::model::{KeyEncoding, Pin};

const GIB: u64 = 1 << 30;

fn stored(path: &str, bytes: u64) -> Array {
    Array {
        stored_bytes: Some(bytes),
        nobjects_seen: Some(10),
        ..Array::new(path, vec![100, 10], vec![10, 10], 4)
    }
}

fn tiny() -> Policy {
    Policy {
        t_max_bytes: 1280,
        t_min_bytes: 0,
        t_hot_bytes: 32,
        width_clamp: 8,
        pow2_floor: u64::MAX,
    }
}

fn ids(manifest: &Manifest) -> Vec<(&str, Vec<&str>)> {
    manifest
        .blobs
        .iter()
        .map(|b| {
            (
                b.id.as_str(),
                b.prefixes.iter().map(String::as_str).collect(),
            )
        })
        .collect()
}

fn cut(arrays: &[Array], policy: Policy) -> Manifest {
    partition("s", arrays, Some(policy), None, Mode::Additive).unwrap()
}

/// The documented `tas`: 1,314,000 x 412 x 424 float32, chunks of 128 time steps, 459 GiB.
fn doc_tas(shards: Option<Vec<u64>>) -> Array {
    Array {
        shards,
        stored_bytes: Some(459 * GIB),
        ..Array::new("tas", vec![1_314_000, 412, 424], vec![128, 412, 424], 4)
    }
}

#[test]
fn documented_widths() {
    let policy = Policy::default();
    let plain = doc_tas(None);
    assert_eq!(plain.nobjects(), 10_266);
    assert_eq!(plain.uncompressed_object_bytes(), 89_440_256);
    assert_eq!(bucket_width(&plain, &policy), 2048);
    let sharded = doc_tas(Some(vec![1280, 412, 424]));
    assert_eq!(sharded.nobjects(), 1027);
    assert_eq!(bucket_width(&sharded, &policy), 128);
}

#[test]
fn width_clamp_bounds_the_worst_case() {
    // compresses 1000:1, so `ideal` is huge; `hard` must cap it
    let a = Array {
        stored_bytes: Some(1000),
        ..Array::new("a", vec![1_000_000], vec![1000], 1)
    };
    let policy = Policy {
        t_max_bytes: 100_000,
        pow2_floor: u64::MAX,
        ..Policy::default()
    };
    let width = bucket_width(&a, &policy);
    assert!(width * a.uncompressed_object_bytes() <= policy.width_clamp * policy.t_max_bytes);
    assert_eq!(width, 800);
}

#[test]
fn widths_round_to_powers_of_two_only_above_the_floor() {
    let a = Array::new("a", vec![1_000_000], vec![10], 1);
    let mut policy = Policy {
        t_max_bytes: 1000,
        pow2_floor: 64,
        ..Policy::default()
    };
    assert_eq!(bucket_width(&a, &policy), 64);
    policy.t_max_bytes = 990;
    assert_eq!(bucket_width(&a, &policy), 64);
    policy.t_max_bytes = 630;
    assert_eq!(bucket_width(&a, &policy), 63);
    policy.t_max_bytes = 5000;
    assert_eq!(bucket_width(&a, &policy), 256);
}

#[test]
fn oversized_single_object_gets_width_one() {
    let a = Array::new("a", vec![10, 1000], vec![1, 1000], 8);
    let policy = Policy {
        t_max_bytes: 100,
        ..Policy::default()
    };
    assert_eq!(bucket_width(&a, &policy), 1);
}

#[test]
fn zero_sized_objects_do_not_divide_by_zero() {
    let a = Array::new("a", vec![0], vec![0], 4);
    assert!(bucket_width(&a, &Policy::default()).is_power_of_two());
}

#[test]
fn tiny_policy_example() {
    let tas = Array {
        stored_bytes: Some(40 * 64),
        nobjects_seen: Some(40),
        ..Array::new("tas", vec![400, 4, 4], vec![10, 4, 4], 4)
    };
    let m = cut(&[tas], tiny());
    assert_eq!(m.blobs[0].bucket.unwrap().width, 16);
    let trie = crate::Trie::from_manifests([&m]);
    assert_eq!(trie.lookup("s/tas/c/35/0/0").to_string(), "b_tas_2");
}

#[test]
fn small_store_is_one_blob() {
    let m = cut(&[stored("tas", 100), stored("pr", 100)], tiny());
    assert_eq!(ids(&m), [("b_root", vec![""])]);
    assert_eq!(m.blobs[0].bucket, None);
    assert_eq!(m.epoch, 1);
}

#[test]
fn every_blob_has_the_same_three_keys() {
    let m = cut(&[stored("tas", 5000), stored("pr", 100)], tiny());
    for blob in serde_json::to_value(&m.blobs).unwrap().as_array().unwrap() {
        let keys: Vec<&String> = blob.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "prefixes", "bucket"]);
    }
}

#[test]
fn coordinates_and_small_arrays_are_hot() {
    let time = Array {
        is_coordinate: true,
        ..stored("time", 5000)
    };
    let m = cut(&[time, stored("lat", 10), stored("tas", 5000)], tiny());
    assert_eq!(
        m.hot_always,
        [
            "**/zarr.json",
            "**/.zarray",
            "**/.zgroup",
            "**/.zattrs",
            "**/.zmetadata",
            "time/**",
            "lat/**"
        ]
    );
    assert_eq!(ids(&m), [("b_tas", vec!["tas/c"])]);
    let root = Array {
        is_coordinate: true,
        ..stored("", 5000)
    };
    assert_eq!(cut(&[root], tiny()).hot_always.last().unwrap(), "**");
}

#[test]
fn coalescing_groups_small_arrays() {
    let policy = Policy {
        t_min_bytes: 10 * GIB,
        t_max_bytes: 30 * GIB,
        ..Policy::default()
    };
    let m = cut(
        &[
            stored("big", 40 * GIB),
            stored("pr", 20 * GIB),
            stored("hurs", 4 * GIB),
        ],
        policy,
    );
    assert_eq!(
        ids(&m),
        [
            ("b_big", vec!["big/c"]),
            ("b_pr_c_hurs_c", vec!["pr/c", "hurs/c"])
        ]
    );
}

#[test]
fn tail_below_t_min_folds_into_previous_blob() {
    let policy = Policy {
        t_min_bytes: 10,
        t_max_bytes: 30,
        t_hot_bytes: 0,
        ..Policy::default()
    };
    let m = cut(
        &[
            stored("a", 12),
            stored("b", 12),
            stored("c", 3),
            stored("z", 40),
        ],
        policy,
    );
    assert_eq!(
        ids(&m),
        [
            ("b_z", vec!["z/c"]),
            ("b_a_c", vec!["a/c"]),
            ("b_b_c_c_c", vec!["b/c", "c/c"])
        ]
    );
    let single = cut(&[stored("a", 3), stored("z", 40)], policy);
    assert_eq!(ids(&single), [("b_z", vec!["z/c"]), ("b_a_c", vec!["a/c"])]);
}

#[test]
fn unbucketed_small_arrays_each_get_a_blob_by_default() {
    let mut v2 = stored("pr", 100);
    v2.key_encoding = KeyEncoding::V2Flat;
    let m = cut(
        &[
            stored("tas", 5000),
            v2,
            stored("multiscales/zoom_9/tas", 100),
        ],
        tiny(),
    );
    assert_eq!(
        ids(&m),
        [
            ("b_tas", vec!["tas/c"]),
            ("b_pr", vec!["pr"]),
            (
                "b_multiscales_zoom_9_tas_c",
                vec!["multiscales/zoom_9/tas/c"]
            )
        ]
    );
}

#[test]
fn colliding_idents_get_distinct_blob_ids() {
    let m = cut(&[stored("a-b", 5000), stored("a_b", 5000)], tiny());
    assert_eq!(
        ids(&m),
        [("b_a_b", vec!["a-b/c"]), ("b_a_b_2", vec!["a_b/c"])]
    );
}

#[test]
fn deep_paths_get_distinct_ids() {
    let arrays: Vec<Array> = [8, 9, 10]
        .iter()
        .map(|z| stored(&format!("multiscales/zoom_{z}/tas"), 100))
        .collect();
    let m = cut(
        &arrays,
        Policy {
            t_max_bytes: 150,
            ..tiny()
        },
    );
    let got: Vec<&str> = m.blobs.iter().map(|b| b.id.as_str()).collect();
    assert_eq!(
        got,
        [
            "b_multiscales_zoom_8_tas_c",
            "b_multiscales_zoom_9_tas_c",
            "b_multiscales_zoom_10_tas_c"
        ]
    );
}

#[test]
fn coalesced_ids_name_every_prefix() {
    let policy = Policy {
        t_min_bytes: 1000,
        t_max_bytes: 150,
        ..tiny()
    };
    let m = cut(
        &[stored("zoom_9/pr", 100), stored("zoom_9/hurs", 100)],
        policy,
    );
    assert_eq!(m.blobs[0].id, "b_zoom_9_pr_c_zoom_9_hurs_c");
}

#[test]
fn ids_do_not_depend_on_listing_order() {
    let arrays = vec![stored("tas", 5000), stored("pr", 100), stored("x/y", 100)];
    let mut reversed = arrays.clone();
    reversed.reverse();
    let map = |m: Manifest| -> std::collections::BTreeMap<String, Vec<String>> {
        m.blobs.into_iter().map(|b| (b.id, b.prefixes)).collect()
    };
    assert_eq!(map(cut(&arrays, tiny())), map(cut(&reversed, tiny())));
}

#[test]
fn non_ascii_paths_get_ascii_ids() {
    let m = cut(&[stored("température", 5000), stored("ü", 5000)], tiny());
    assert_eq!(m.blobs[0].id, "b_temp_rature");
    assert_eq!(m.blobs[1].id, "b_root");
    m.validate().unwrap();
    crate::parse(m.to_json().as_bytes()).unwrap();
}

fn previous(arrays: &[Array]) -> Manifest {
    cut(arrays, tiny())
}

#[test]
fn append_needs_no_repartition() {
    let before = previous(&[stored("tas", 5000)]);
    let mut grown = stored("tas", 10_000);
    grown.shape[0] *= 2;
    let after = partition("s", &[grown], None, Some(&before), Mode::Additive).unwrap();
    assert!(crate::Diff::between(Some(&before), &after).is_empty());
}

#[test]
fn new_variable_is_additive() {
    let before = previous(&[stored("tas", 5000)]);
    let after = partition(
        "s",
        &[stored("tas", 5000), stored("psl", 5000)],
        None,
        Some(&before),
        Mode::Additive,
    )
    .unwrap();
    let diff = crate::Diff::between(Some(&before), &after);
    assert!(diff.is_additive());
    assert_eq!(
        diff.added.iter().map(|b| b.id.as_str()).collect::<Vec<_>>(),
        ["b_psl"]
    );
}

#[test]
fn without_carrying_a_repartition_renumbers() {
    let before = previous(&[stored("tas", 5000)]);
    let bigger = Policy {
        t_max_bytes: 2560,
        ..tiny()
    };
    let naive = partition(
        "s",
        &[stored("tas", 5000)],
        Some(bigger),
        Some(&before),
        Mode::Recompute,
    )
    .unwrap();
    assert!(!crate::Diff::between(Some(&before), &naive).is_additive());
    let carried = partition(
        "s",
        &[stored("tas", 5000)],
        Some(bigger),
        Some(&before),
        Mode::Additive,
    )
    .unwrap();
    assert_eq!(carried.blobs, before.blobs);
}

#[test]
fn an_additive_run_inherits_the_policy_and_a_recompute_takes_the_defaults() {
    let before = previous(&[stored("tas", 5000)]);
    for (mode, policy) in [
        (Mode::Additive, tiny()),
        (Mode::Recompute, Policy::default()),
    ] {
        let after = partition("s", &[stored("tas", 5000)], None, Some(&before), mode).unwrap();
        assert_eq!(after.policy, policy, "{mode:?}");
    }
}

#[test]
fn array_that_grew_past_t_hot_stops_being_hot() {
    let before = previous(&[stored("tas", 5000), stored("pr", 10)]);
    assert!(before.hot_always.contains(&"pr/**".to_owned()));
    let after = partition(
        "s",
        &[stored("tas", 5000), stored("pr", 100)],
        None,
        Some(&before),
        Mode::Additive,
    )
    .unwrap();
    assert!(!after.hot_always.contains(&"pr/**".to_owned()));
    assert_eq!(after.blobs.last().unwrap().prefixes, ["pr/c"]);
}

#[test]
fn pins_are_carried_and_a_newly_seen_pinned_array_gets_no_blob() {
    let mut before = previous(&[stored("tas", 5000)]);
    before.pinned.push(Pin {
        prefix: "pr".into(),
        reason: "paper".into(),
        by: "ana".into(),
        at: String::new(),
        until: None,
    });
    before.epoch = 7;
    for mode in [Mode::Additive, Mode::Recompute] {
        let after = partition(
            "s",
            &[stored("tas", 5000), stored("pr", 5000)],
            Some(tiny()),
            Some(&before),
            mode,
        )
        .unwrap();
        assert_eq!(after.pinned, before.pinned);
        assert!(after.hot_always.contains(&"pr/**".to_owned()));
        assert_eq!(ids(&after), [("b_tas", vec!["tas/c"])]);
        assert_eq!(after.epoch, 7);
    }
}

#[test]
fn provenance_records_every_array() {
    let mut root = stored("", 100);
    root.shards = Some(vec![100, 10]);
    let m = cut(&[root, stored("tas", 5000)], tiny());
    assert_eq!(
        serde_json::Value::Object(m.provenance),
        serde_json::json!({
            ".": {"objects": 1, "objects_seen": 10, "stored_bytes": 100, "uncompressed_object_bytes": 4000, "sharded": true, "key_encoding": "v3_slash"},
            "tas": {"objects": 10, "objects_seen": 10, "stored_bytes": 5000, "uncompressed_object_bytes": 400, "sharded": false, "key_encoding": "v3_slash"}
        })
    );
}
