use super::*;
use crate::model::Pin;
use proptest::strategy::Strategy;

fn blob(id: &str, prefix: &str, bucket: Option<(u64, u64, KeyEncoding)>) -> Blob {
    Blob {
        id: id.into(),
        prefixes: vec![prefix.into()],
        bucket: bucket.map(|(index, width, key_encoding)| Bucket {
            index,
            width,
            key_encoding,
        }),
    }
}

fn manifest(scope: &str, hot: &[&str], blobs: Vec<Blob>) -> Manifest {
    let mut m = Manifest::new(scope);
    m.hot_always.extend(hot.iter().map(|&h| h.to_owned()));
    m.blobs = blobs;
    m
}

fn pin(prefix: &str) -> Pin {
    Pin {
        prefix: prefix.into(),
        reason: "kept".into(),
        by: String::new(),
        at: String::new(),
        until: None,
    }
}

fn check(trie: &Trie, cases: &[(&str, &str)]) {
    for (key, expected) in cases {
        assert_eq!(trie.lookup(key).to_string(), *expected, "key {key:?}");
    }
}

fn manifest_a() -> Manifest {
    manifest(
        "cordex/a.zarr",
        &["time/**"],
        vec![
            blob("b_tas", "tas/c", Some((0, 2048, KeyEncoding::V3Slash))),
            blob("b_pr_c", "pr/c", None),
        ],
    )
}

#[test]
fn worked_example_a() {
    let trie = Trie::from_manifests([&manifest_a()]);
    check(
        &trie,
        &[
            ("cordex/a.zarr/tas/c/5000/0/0", "b_tas_2"),
            ("cordex/a.zarr/tas/c/2047/3/1", "b_tas_0"),
            ("cordex/a.zarr/tas/c/5000000/0/0", "b_tas_2441"),
            ("cordex/a.zarr/pr/c/12345/0/0", "b_pr_c_0"),
            ("cordex/a.zarr/pr/c", "b_pr_c_0"),
            ("cordex/a.zarr/tas/c", "unmanaged"),
            ("cordex/a.zarr/tas/c/notanumber/0/0", "unmanaged"),
            ("cordex/a.zarr/tas/c/-1/0/0", "unmanaged"),
            ("cordex/a.zarr/tas/cc/0", "unmanaged"),
            ("cordex/a.zarr/tas/zarr.json", "hot"),
            ("cordex/a.zarr/time/c/0", "hot"),
            ("cordex/a.zarr/lat/c/0", "unmanaged"),
            ("elsewhere/x/.zattrs", "hot"),
            ("somewhere/else", "unmanaged"),
            ("", "unmanaged"),
            ("///", "unmanaged"),
            ("/cordex//a.zarr/tas/c/5000/0/0/", "b_tas_2"),
            ("Cordex/a.zarr/tas/c/5000/0/0", "unmanaged"),
            ("cordex/a.zarr/tas/c/5/extra/stuff/here", "b_tas_0"),
            ("cordex/a.zarr/tas/c/99999999/0/0", "b_tas_48828"),
        ],
    );
}

#[test]
fn worked_examples_b_and_c() {
    let b = manifest(
        "s",
        &[],
        vec![blob("b_t2m", "t2m", Some((0, 2048, KeyEncoding::V2Slash)))],
    );
    check(&Trie::from_manifests([&b]), &[("s/t2m/5000/0", "b_t2m_2")]);
    let b1 = manifest(
        "s",
        &[],
        vec![blob("b_t2m", "t2m", Some((1, 2048, KeyEncoding::V2Slash)))],
    );
    check(
        &Trie::from_manifests([&b1]),
        &[("s/t2m/5000/7", "b_t2m_0"), ("s/t2m/5000", "unmanaged")],
    );
    let c = manifest(
        "s",
        &[],
        vec![blob("b_tas", "tas", Some((0, 100, KeyEncoding::V2Flat)))],
    );
    check(
        &Trie::from_manifests([&c]),
        &[
            ("s/tas/250.3.1", "b_tas_2"),
            ("s/tas/250", "b_tas_2"),
            ("s/tas/x.0.0", "unmanaged"),
            ("s/tas/.zarray", "hot"),
            ("s/tas/137.0.0/more", "b_tas_1"),
            ("s/tas/250..1", "b_tas_2"),
        ],
    );
    let c1 = manifest(
        "s",
        &[],
        vec![blob("b_tas", "tas", Some((1, 100, KeyEncoding::V2Flat)))],
    );
    check(
        &Trie::from_manifests([&c1]),
        &[
            ("s/tas/250.3.1", "b_tas_0"),
            ("s/tas/250", "unmanaged"),
            ("s/tas/250..1", "unmanaged"),
        ],
    );
}

#[test]
fn worked_example_d_small_store() {
    let d = manifest("s", &["time/**"], vec![blob("b_root", "", None)]);
    check(
        &Trie::from_manifests([&d]),
        &[
            ("s/tas/c/0/0/0", "b_root_0"),
            ("s/readme.txt", "b_root_0"),
            ("s", "b_root_0"),
            ("s/time/c/0", "hot"),
        ],
    );
}

#[test]
fn worked_example_e_pins_override_at_any_depth() {
    let mut e = manifest("s", &[], vec![blob("b_tas", "tas/c", None)]);
    e.pinned.push(pin("tas"));
    check(
        &Trie::from_manifests([&e]),
        &[
            ("s/tas/c/0", "pinned"),
            ("s/tas", "pinned"),
            ("s/tas/zarr.json", "hot"),
            ("s/tasmax/c/0", "unmanaged"),
        ],
    );
    let mut whole = manifest("s", &[], vec![blob("b_root", "", None)]);
    whole.pinned.push(pin(""));
    check(
        &Trie::from_manifests([&whole]),
        &[("s/x/y", "pinned"), ("t/x", "unmanaged")],
    );
}

#[test]
fn deepest_declaration_wins_across_nested_scopes() {
    let parent = manifest("cordex/", &[], vec![blob("b_parent", "nukleus", None)]);
    let child = manifest(
        "cordex/nukleus/eur11.zarr/",
        &[],
        vec![blob(
            "b_child",
            "tas/c",
            Some((0, 100, KeyEncoding::V3Slash)),
        )],
    );
    let trie = Trie::from_manifests([&parent, &child]);
    check(
        &trie,
        &[
            ("cordex/nukleus/eur11.zarr/tas/c/137/0/0", "b_child_1"),
            ("cordex/nukleus/other.zarr/x/c/0", "b_parent_0"),
            // the deepest marker wins, not the deepest scope
            ("cordex/nukleus/eur11.zarr/pr/c/0", "b_parent_0"),
        ],
    );
    let Resolution::Blob { rule, n } = trie.lookup("cordex/nukleus/eur11.zarr/tas/c/137/0/0")
    else {
        panic!("blob expected");
    };
    assert_eq!(
        (&*rule.scope, rule.blob.id.as_str(), n),
        ("cordex/nukleus/eur11.zarr", "b_child", 1)
    );
}

#[test]
fn parent_scope_hot_rules_apply_across_stores() {
    let parent = manifest(
        "cordex",
        &["nukleus/eur11.zarr/time/**"],
        vec![blob("b_parent", "nukleus", None)],
    );
    let trie = Trie::from_manifests([&parent]);
    check(
        &trie,
        &[
            ("cordex/nukleus/eur11.zarr/time/c/0", "hot"),
            ("cordex/nukleus/x", "b_parent_0"),
        ],
    );
}

#[test]
fn hot_always_dialect() {
    let m = manifest(
        "s",
        &["**/a/b", "foo*", "x/*/y", "**/custom.meta", "**"],
        vec![blob("b_deep", "pr/c", None)],
    );
    let trie = Trie::from_manifests([&m]);
    check(
        &trie,
        &[
            ("s/a/b", "hot"), // `**` marks the scope node itself
            ("s/foo/1", "hot"),
            ("s/x/*/y/0", "hot"),
            ("q/r/custom.meta", "hot"),
            ("s/pr/c/0", "b_deep_0"), // a deeper blob beats a hot prefix
            ("t/a/b", "unmanaged"),   // `**/a/b` is inert
        ],
    );
}

#[test]
fn last_insert_wins_on_the_same_node() {
    let m = manifest("s", &["pr/c/**"], vec![blob("b_pr_c", "pr/c", None)]);
    check(&Trie::from_manifests([&m]), &[("s/pr/c/0", "b_pr_c_0")]);
    let first = manifest("s", &[], vec![blob("b_one", "x", None)]);
    let second = manifest("s", &[], vec![blob("b_two", "x", None)]);
    check(
        &Trie::from_manifests([&first, &second]),
        &[("s/x/0", "b_two_0")],
    );
}

#[test]
fn chunk_indices_are_strict_ascii_digits() {
    let trie = Trie::from_manifests([&manifest_a()]);
    for raw in [
        " 5",
        "+5",
        "5_000",
        "-0",
        "٣",
        "5 ",
        "0x10",
        "1e3",
        "999999999999999999999999999999999999999",
    ] {
        let key = format!("cordex/a.zarr/tas/c/{raw}/0/0");
        assert_eq!(trie.lookup(&key).kind(), Kind::Unmanaged, "{raw:?}");
    }
    check(
        &trie,
        &[
            ("cordex/a.zarr/tas/c/007/0/0", "b_tas_0"),
            ("cordex/a.zarr/tas/c/4096/0/0", "b_tas_2"),
            // Beyond u64, as Python's unbounded integers resolve them.
            (
                "cordex/a.zarr/tas/c/18446744073709551616/0/0",
                "b_tas_9007199254740992",
            ),
            (
                "cordex/a.zarr/tas/c/99999999999999999999999/0/0",
                "b_tas_48828124999999999999",
            ),
        ],
    );
}

#[test]
fn bucketed_ids_are_arithmetic_under_all_key_encodings() {
    let width = 16;
    for (encoding, key) in [
        (KeyEncoding::V3Slash, "s/tas/c/48/0/0"),
        (KeyEncoding::V2Slash, "s/tas/48/0/0"),
        (KeyEncoding::V2Flat, "s/tas/48.0.0"),
    ] {
        let prefix = if encoding == KeyEncoding::V3Slash {
            "tas/c"
        } else {
            "tas"
        };
        let m = manifest(
            "s",
            &[],
            vec![blob("b_tas", prefix, Some((0, width, encoding)))],
        );
        let trie = Trie::from_manifests([&m]);
        assert_eq!(
            trie.lookup(key).blob_id().as_deref(),
            Some("b_tas_3"),
            "{encoding}"
        );
    }
}

#[test]
fn trie_is_one_node_per_cut_not_per_object() {
    let m = manifest(
        "cordex/a.zarr",
        &["time/**", "lat/**", "lon/**"],
        vec![blob(
            "b_tas",
            "tas/c",
            Some((0, 2048, KeyEncoding::V3Slash)),
        )],
    );
    let trie = Trie::from_manifests([&m]);
    assert!(trie.node_count() < 20, "{}", trie.node_count());
    for i in 0..100_000u64 {
        let key = format!("cordex/a.zarr/tas/c/{i}/0/0");
        assert_eq!(
            trie.lookup(&key).blob_id(),
            Some(format!("b_tas_{}", i / 2048))
        );
    }
}

#[test]
fn epochs_are_tracked_for_reload() {
    let mut m = manifest("/a/b/", &[], Vec::new());
    m.epoch = 7;
    let trie = Trie::from_manifests([&m]);
    assert_eq!(trie.epochs().get("a/b"), Some(&7));
    assert_eq!(trie.epochs().len(), 1);
}

#[test]
fn empty_key_and_no_manifests() {
    let trie = Trie::new();
    check(
        &trie,
        &[
            ("", "unmanaged"),
            ("x/y", "unmanaged"),
            ("x/zarr.json", "hot"),
        ],
    );
    assert_eq!(trie.node_count(), 0);
}

#[test]
fn lookup_in_takes_scope_relative_keys() {
    let trie = Trie::from_manifests([&manifest_a()]);
    assert_eq!(
        trie.lookup_in("cordex/a.zarr/", "tas/c/5000/0/0")
            .to_string(),
        "b_tas_2"
    );
    assert_eq!(
        trie.lookup_in("", "cordex/a.zarr/pr/c").to_string(),
        "b_pr_c_0"
    );
}

#[test]
fn long_keys_take_the_same_rules() {
    let mut m = manifest_a();
    m.pinned.push(pin("pr/c/9"));
    let trie = Trie::from_manifests([&m]);
    let tail = "/x".repeat(40);
    check(
        &trie,
        &[
            (&format!("cordex/a.zarr/tas/c/5000{tail}"), "b_tas_2"),
            (&format!("cordex/a.zarr/tas/c/x{tail}"), "unmanaged"),
            (&format!("cordex/a.zarr/pr/c/9{tail}"), "pinned"),
            (&format!("cordex/a.zarr/time{tail}/zarr.json"), "hot"),
            (&format!("{tail}/"), "unmanaged"),
            (&"/".repeat(100), "unmanaged"),
        ],
    );
    let segments: String = (0..32).map(|i| format!("s{i}/")).collect();
    assert_eq!(trie.lookup(&segments).to_string(), "unmanaged");
}

#[test]
fn many_children_switch_to_a_hash_map() {
    let manifests: Vec<Manifest> = (0..40)
        .map(|i| manifest(&format!("root/s{i}"), &[], vec![blob("b_root", "", None)]))
        .collect();
    let trie = Trie::from_manifests(&manifests);
    for i in 0..40 {
        assert_eq!(trie.lookup(&format!("root/s{i}/k")).to_string(), "b_root_0");
        let Resolution::Blob { rule, .. } = trie.lookup(&format!("root/s{i}/k")) else {
            panic!()
        };
        assert_eq!(&*rule.scope, format!("root/s{i}"));
    }
    assert_eq!(trie.lookup("root/s40/k").to_string(), "unmanaged");
}

#[test]
fn root_scope_blob_claims_every_key() {
    let m = manifest("", &[], vec![blob("b_root", "", None)]);
    check(
        &Trie::from_manifests([&m]),
        &[("anything/at/all", "b_root_0")],
    );
}

/// A parent scope with hot rules and a store with bucketed blobs and a pin.
fn oracle_manifests() -> [Manifest; 2] {
    let parent = manifest(
        "p",
        &["q/time/**", "**/x.meta"],
        vec![blob("b_p", "q", None)],
    );
    let mut child = manifest(
        "p/q/s.zarr",
        &["lat/**"],
        vec![
            blob("b_tas", "tas/c", Some((0, 7, KeyEncoding::V3Slash))),
            blob("b_pr", "pr", Some((1, 3, KeyEncoding::V2Flat))),
        ],
    );
    child.pinned.push(pin("tas/c/1"));
    [parent, child]
}

/// The obvious oracle: every manifest, every marker, deepest wins; compared on random keys.
#[test]
fn trie_agrees_with_a_naive_lookup() {
    let manifests = oracle_manifests();
    let trie = Trie::from_manifests(&manifests);
    let segments = [
        "p", "q", "s.zarr", "tas", "c", "pr", "lat", "time", "1", "12", "3.4", "x", "x.meta",
        ".zarray",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut key = Vec::new();
        // every eleventh key is longer than the stack-cut fast path
        let len = if state.is_multiple_of(11) {
            30 + (state % 9) as usize
        } else {
            1 + (state % 7) as usize
        };
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            key.push(segments[(state % segments.len() as u64) as usize]);
        }
        let key = key.join("/");
        assert_eq!(
            trie.lookup(&key).to_string(),
            naive(&manifests, &key),
            "{key}"
        );
    }
}

fn naive(manifests: &[Manifest], key: &str) -> String {
    let parts: Vec<&str> = key.split('/').filter(|s| !s.is_empty()).collect();
    let Some(last) = parts.last() else {
        return "unmanaged".into();
    };
    let basenames: Vec<String> = manifests
        .iter()
        .flat_map(|m| m.hot_always.iter())
        .filter_map(|p| p.strip_prefix("**/").map(str::to_owned))
        .chain(METADATA_BASENAMES.iter().map(|s| (*s).to_owned()))
        .collect();
    if basenames.iter().any(|b| b == last) {
        return "hot".into();
    }
    let split = |s: &str| {
        s.split('/')
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let is_prefix =
        |p: &[String]| p.len() <= parts.len() && p.iter().zip(&parts).all(|(a, b)| a == b);
    for m in manifests {
        for pin in &m.pinned {
            let mut path = split(&m.scope);
            path.extend(split(&pin.prefix));
            if is_prefix(&path) {
                return "pinned".into();
            }
        }
    }
    let mut best: Option<(usize, String)> = None;
    for m in manifests {
        let mut consider = |path: Vec<String>, value: String| {
            if is_prefix(&path) && best.as_ref().is_none_or(|(d, _)| path.len() >= *d) {
                best = Some((path.len(), value));
            }
        };
        for pattern in m.hot_always.iter().filter(|p| !p.starts_with("**/")) {
            let mut path = split(&m.scope);
            path.extend(split(pattern.trim_end_matches(['*', '/'])));
            consider(path, "hot".into());
        }
        for b in &m.blobs {
            for prefix in &b.prefixes {
                let mut path = split(&m.scope);
                path.extend(split(prefix));
                let depth = path.len();
                let value = match b.bucket {
                    None => format!("{}_0", b.id),
                    Some(bucket) => {
                        let raw = match bucket.key_encoding {
                            KeyEncoding::V2Flat => parts
                                .get(depth)
                                .and_then(|s| s.split('.').nth(bucket.index as usize)),
                            _ => parts.get(depth + bucket.index as usize).copied(),
                        };
                        // Chunk indices of up to 38 digits are numbers (u128); longer ones are not.
                        match raw.and_then(|r| {
                            r.parse::<u128>()
                                .ok()
                                .filter(|_| r.len() <= 38 && !r.starts_with('+'))
                        }) {
                            Some(n) => format!("{}_{}", b.id, n / u128::from(bucket.width.max(1))),
                            None => "unmanaged".into(),
                        }
                    }
                };
                consider(path, value);
            }
        }
    }
    best.map_or("unmanaged".into(), |(_, v)| v)
}

/// Names around the 8- and 16-byte word boundaries, long names that share their first 16
/// bytes and their length, non-ASCII names, and nodes on both sides of the few/wide
/// threshold, against the naive lookup.
#[test]
fn segment_names_of_every_shape_agree_with_a_naive_lookup() {
    let mut names: Vec<String> = (1..=40).map(|n| "n".repeat(n)).collect();
    names.extend((0..6).map(|i| format!("{}{i}", "shared_prefix_of_20")));
    names.extend(["é", "ünïcödé_name_über_sixteen", "a.b", "c"].map(str::to_owned));
    let mut manifests = Vec::new();
    // `wide` has every name as a child (a hashed node); each `few{i}` has three
    for (i, name) in names.iter().enumerate() {
        manifests.push(manifest(
            &format!("wide/{name}"),
            &[],
            vec![blob(&format!("b_w{i}"), "", None)],
        ));
        manifests.push(manifest(
            &format!("few{}/{name}", i % 3),
            &[],
            vec![blob(
                &format!("b_f{i}"),
                "v",
                Some((0, 3, KeyEncoding::V3Slash)),
            )],
        ));
    }
    let trie = Trie::from_manifests(&manifests);
    // probes: the names, names one byte longer or shorter, names with the last byte changed
    let mut pool: Vec<String> = names.clone();
    for name in &names {
        pool.push(format!("{name}x"));
        let mut shorter = name.clone();
        shorter.pop();
        pool.push(shorter.clone());
        pool.push(format!("{shorter}z"));
    }
    pool.extend(
        ["wide", "few0", "few1", "few2", "v", "7", "12", "", "/"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..10_000 {
        let shape = next() % 4;
        let top = ["wide", "few0", "few1", "few2"][(next() % 4) as usize];
        let mut parts = vec![top.to_owned()];
        parts.push(pool[(next() % pool.len() as u64) as usize].clone());
        if shape > 0 {
            parts.push(if shape == 1 {
                "v".into()
            } else {
                pool[(next() % pool.len() as u64) as usize].clone()
            });
            parts.push(pool[(next() % pool.len() as u64) as usize].clone());
        }
        let key = parts.join("/");
        assert_eq!(
            trie.lookup(&key).to_string(),
            naive(&manifests, &key),
            "{key}"
        );
    }
    // every stored name resolves, whichever node kind holds it
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            trie.lookup(&format!("wide/{name}/k")).to_string(),
            format!("b_w{i}_0")
        );
        assert_eq!(
            trie.lookup(&format!("few{}/{name}/v/7/0", i % 3))
                .to_string(),
            format!("b_f{i}_2")
        );
    }
}

#[test]
fn keys_shorter_than_a_word() {
    let m = manifest(
        "",
        &["t/**"],
        vec![blob("b_a", "a", Some((0, 2, KeyEncoding::V2Flat)))],
    );
    check(
        &Trie::from_manifests([&m]),
        &[
            ("a/5.0", "b_a_2"),
            ("a/x", "unmanaged"),
            ("t", "hot"),
            ("a", "unmanaged"),
            ("/a//9/", "b_a_4"),
            ("b", "unmanaged"),
        ],
    );
}

/// Siblings whose tags collide are told apart by name, on both node kinds.
#[test]
fn a_tag_shared_by_siblings_falls_back_to_the_names() {
    let few: Vec<Manifest> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            manifest(
                &format!("few/{n}"),
                &[],
                vec![blob(&format!("b_{n}"), "", None)],
            )
        })
        .collect();
    let wide: Vec<Manifest> = (0..40)
        .map(|i| {
            manifest(
                &format!("wide/s{i}"),
                &[],
                vec![blob(&format!("b_s{i}"), "", None)],
            )
        })
        .collect();
    let mut trie = Trie::from_manifests(few.iter().chain(&wide));
    let edge = |trie: &Trie, parent: Node, name: &str| {
        let first = parent.first as usize;
        (first..first + parent.count as usize)
            .find(|&e| {
                let (start, len) = trie.name_spans[e];
                &trie.names[start as usize..(start + len) as usize] == name
            })
            .unwrap()
    };
    let root = trie.root;
    let few_node = trie.edges[edge(&trie, root, "few")].node;
    let wide_node = trie.edges[edge(&trie, root, "wide")].node;
    assert!(few_node.count <= FEW_CHILDREN && wide_node.count > FEW_CHILDREN);

    // "a" now carries "b"'s tag and comes first: looking up "b" hits "a" first
    let (a, b) = (edge(&trie, few_node, "a"), edge(&trie, few_node, "b"));
    assert!(a < b);
    trie.tags[a] = trie.tags[b];
    // the wide map sends "s7"'s tag to "s3"
    let (s3, s7) = (edge(&trie, wide_node, "s3"), edge(&trie, wide_node, "s7"));
    let tag = trie.tags[s7];
    trie.wide
        .insert((wide_node.first, tag), u32::try_from(s3).unwrap());

    check(
        &trie,
        &[
            ("few/b/x", "b_b_0"),
            ("few/c/x", "b_c_0"),
            ("wide/s7/x", "b_s7_0"),
            ("wide/s3/x", "b_s3_0"),
            ("wide/s40/x", "unmanaged"),
        ],
    );
}

proptest::proptest! {
    /// Keys as a client may send them: empty segments, leading and trailing slashes,
    /// multibyte names, names cut inside a word, digits that overflow.
    #[test]
    fn hostile_keys_agree_with_a_naive_lookup(
        parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::sample::select(&[
                    "p", "q", "s.zarr", "tas", "c", "pr", "lat", "time", "1", "x.meta", ".zarray",
                    "", ".", "..", "é", "日本", "99999999999999999999999", "1.2.3", "-1", "0001",
                ][..]).prop_map(str::to_string),
                "\\PC{0,20}",
            ],
            0..12,
        ),
    ) {
        let manifests = oracle_manifests();
        let trie = Trie::from_manifests(&manifests);
        let key = parts.join("/");
        proptest::prop_assert_eq!(trie.lookup(&key).to_string(), naive(&manifests, &key), "{:?}", key);
    }
}
