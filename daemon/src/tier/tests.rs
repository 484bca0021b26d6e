//! The tier on a real RocksDB and real files: a small Zarr v2 store written by hand, cut into
//! blobs of two chunks each, archived to a local cold tier and restored; the startup repair of
//! each state a crash can leave; restores that fail, and hostile cold objects.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use svc_manifests::object_store::{ObjectStoreExt, PutPayload, path::Path as ObjectPath};
use uuid::Uuid;

use super::*;
use crate::jobs::Stop;

const TOKEN: Uuid = Uuid::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef);
/// Chunks of `tas`: 8 time steps of 600 bytes, two per blob instance with the policy below.
const CHUNK: usize = 600;

struct Fixture {
    _dir: tempfile::TempDir,
    data: std::path::PathBuf,
    tier: Arc<Tier>,
}

fn chunk(step: usize) -> Vec<u8> {
    (0..CHUNK).map(|i| (i * 7 + step * 31) as u8).collect()
}

fn open(data: &std::path::Path) -> Arc<Tier> {
    let env = [
        ("SVCD_TIER_T_HOT_BYTES".to_string(), "1024".to_string()),
        ("SVCD_TIER_T_MAX_BYTES".to_string(), "1200".to_string()),
    ];
    let overrides = crate::Overrides {
        data_dir: Some(data.to_path_buf()),
        listen: None,
    };
    let config = Config::from_sources(None, &env, &overrides).unwrap();
    let db = Arc::new(Db::open(&config.store_dir()).unwrap());
    let mut tier = Tier::open(&config, db).unwrap();
    // A clean store is unmarked at once (one test checks the grace).
    tier.cleaning_grace = 0;
    Arc::new(tier)
}

/// A complete store of `tas(time=8, x=150)` float32 chunked by time step, listed and cut.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let store = data.join("stores").join(TOKEN.to_string());
    std::fs::create_dir_all(store.join("tas")).unwrap();
    std::fs::create_dir_all(store.join("time")).unwrap();
    std::fs::write(store.join(".zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    std::fs::write(store.join(".zattrs"), "{}").unwrap();
    let zarray = |shape: &str, chunks: &str| {
        format!(
            r#"{{"zarr_format": 2, "shape": {shape}, "chunks": {chunks}, "dtype": "<f4",
               "compressor": null, "fill_value": null, "filters": null, "order": "C"}}"#
        )
    };
    std::fs::write(store.join("tas/.zarray"), zarray("[8, 150]", "[1, 150]")).unwrap();
    std::fs::write(
        store.join("tas/.zattrs"),
        r#"{"_ARRAY_DIMENSIONS": ["time", "x"]}"#,
    )
    .unwrap();
    std::fs::write(store.join("time/.zarray"), zarray("[8]", "[8]")).unwrap();
    std::fs::write(
        store.join("time/.zattrs"),
        r#"{"_ARRAY_DIMENSIONS": ["time"]}"#,
    )
    .unwrap();
    std::fs::write(store.join("time/0"), [0u8; 32]).unwrap();
    for step in 0..8 {
        std::fs::write(store.join(format!("tas/{step}.0")), chunk(step)).unwrap();
    }
    let tier = open(&data);
    let mut batch = Batch::default();
    Tier::put_listing(&mut batch, TOKEN, &list_files(&store).unwrap());
    tier.put_manifest(&mut batch, TOKEN);
    tier.db.write(batch).unwrap();
    Fixture {
        _dir: dir,
        data,
        tier,
    }
}

fn candidate() -> Candidate {
    Candidate {
        token: TOKEN,
        conversion: 1,
        last_used: 0,
    }
}

fn archive_all(tier: &Tier) -> Vec<String> {
    let planned = tier
        .archivable(candidate(), &ArchiveOptions::default())
        .unwrap();
    let mut archived = Vec::new();
    for (instance, keys) in planned {
        assert!(
            tier.archive_instance(candidate(), &instance, &keys, &|_, _| true)
                .unwrap()
        );
        archived.push(instance);
    }
    archived
}

/// The fixture with every blob instance archived.
fn archived() -> Fixture {
    let fixture = fixture();
    archive_all(&fixture.tier);
    fixture
}

fn hot(fixture: &Fixture, key: &str) -> Option<Vec<u8>> {
    std::fs::read(
        fixture
            .data
            .join("stores")
            .join(TOKEN.to_string())
            .join(key),
    )
    .ok()
}

/// A read of chunk `step` of `tas` restores its blob, and the hot copy has its bytes.
fn assert_restores(fixture: &Fixture, step: usize) {
    let key = format!("tas/{step}.0");
    assert!(
        fixture
            .tier
            .restore_for_read(
                TOKEN,
                &key,
                Duration::from_secs(30),
                &Asked::now("jane"),
                &Stop::default()
            )
            .unwrap()
    );
    assert_eq!(hot(fixture, &key), Some(chunk(step)));
}

/// The tier clock in the database is the clock file's.
fn assert_clocks_agree(tier: &Tier) {
    let recorded = tier.db.get(cf::META, db::meta::TIER_CLOCK).unwrap();
    assert_eq!(decode_clock(&recorded.unwrap()), tier.last_archive());
}

/// The files on the cold tier below the store, by name: a blob's object as its instance
/// (`b_tas_0` for `b_tas_0.<archive>.zip`).
fn cold_files(fixture: &Fixture) -> Vec<String> {
    let dir = fixture.data.join("cold").join(TOKEN.to_string());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    match blob_object(&format!("{TOKEN}/{name}")) {
                        Some((_, instance)) => instance,
                        None => name,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The cold object of `instance`, as its state names it.
fn cold_object(fixture: &Fixture, instance: &str) -> std::path::PathBuf {
    let state = state(&fixture.tier, instance);
    assert!(!state.cold_key.is_empty(), "{instance} has no cold object");
    fixture.data.join("cold").join(state.cold_key)
}

fn state(tier: &Tier, instance: &str) -> BlobState {
    tier.state(TOKEN, instance).unwrap().unwrap()
}

#[test]
fn a_store_is_cut_into_instances_of_its_chunks_and_coordinates_stay_hot() {
    let fixture = fixture();
    let rows = fixture.tier.status(&[TOKEN]).unwrap();
    let instances: Vec<&str> = rows.iter().map(|r| r.instance.as_str()).collect();
    assert_eq!(instances, ["b_tas_0", "b_tas_1", "b_tas_2", "b_tas_3"]);
    assert!(
        rows.iter()
            .all(|r| r.state.objects == 2 && r.state.state == State::Hot)
    );
    let cut = fixture.tier.cut(TOKEN).unwrap().unwrap();
    assert_eq!(
        cut.resolve(TOKEN, "time/0").kind(),
        svc_manifests::Kind::Hot
    );
    assert_eq!(
        cut.resolve(TOKEN, "tas/.zarray").kind(),
        svc_manifests::Kind::Hot
    );
    assert_eq!(cut.resolve(TOKEN, "tas/5.0").blob_id().unwrap(), "b_tas_2");
}

#[test]
fn archive_then_restore_gives_back_every_byte() {
    let fixture = fixture();
    let tier = &fixture.tier;
    assert_eq!(archive_all(tier).len(), 4);
    assert!(tier.is_archived(TOKEN));
    assert_eq!(hot(&fixture, "tas/3.0"), None);
    assert!(hot(&fixture, "time/0").is_some() && hot(&fixture, "tas/.zarray").is_some());
    assert_eq!(
        cold_files(&fixture),
        ["b_tas_0", "b_tas_1", "b_tas_2", "b_tas_3"]
    );
    let archived = state(tier, "b_tas_1");
    assert_eq!(
        (archived.state, archived.objects, archived.bytes),
        (State::Archived, 2, 1200)
    );
    assert_eq!(archived.checksum.len(), 64);
    // A key of an archived instance restores it (not the others) and reads back.
    assert!(
        tier.restore_for_read(
            TOKEN,
            "tas/3.0",
            Duration::from_secs(30),
            &Asked::now("jane"),
            &Stop::default()
        )
        .unwrap()
    );
    assert_eq!(hot(&fixture, "tas/2.0"), Some(chunk(2)));
    assert_eq!(hot(&fixture, "tas/3.0"), Some(chunk(3)));
    assert_eq!(hot(&fixture, "tas/4.0"), None);
    let restored = state(tier, "b_tas_1");
    assert_eq!((restored.state, restored.restores), (State::Hot, 1));
    assert!(restored.last_read > 0 && restored.cold_key.is_empty());
    // The readers go on before the cold object is deleted, under the instance's lock: once
    // the lock is free (this restore of a hot instance does nothing), it is gone.
    assert!(!tier.restore_instance(TOKEN, "b_tas_1", None).unwrap());
    assert!(!cold_files(&fixture).contains(&"b_tas_1".to_string()));
    // A key in no blob, or of a hot instance, restores nothing.
    assert!(
        !tier
            .restore_for_read(
                TOKEN,
                "time/0",
                Duration::from_secs(1),
                &Asked::now("jane"),
                &Stop::default()
            )
            .unwrap()
    );
    assert!(
        !tier
            .restore_for_read(
                TOKEN,
                "tas/2.0",
                Duration::from_secs(1),
                &Asked::now("jane"),
                &Stop::default()
            )
            .unwrap()
    );
}

#[test]
fn a_failed_restore_reaches_every_waiter_and_the_next_read_tries_again() {
    let fixture = fixture();
    let tier = &fixture.tier;
    archive_all(tier);
    let zip = cold_object(&fixture, "b_tas_0");
    let good = std::fs::read(&zip).unwrap();
    let mut damaged = good.clone();
    damaged[100] ^= 0xff;
    std::fs::write(&zip, &damaged).unwrap();
    let outcomes: Vec<Result<bool>> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..8)
            .map(|i| {
                let tier = Arc::clone(tier);
                scope.spawn(move || {
                    tier.restore_for_read(
                        TOKEN,
                        &format!("tas/{}.0", i % 2),
                        Duration::from_secs(30),
                        &Asked::now("jane"),
                        &Stop::default(),
                    )
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for outcome in outcomes {
        let error = outcome.unwrap_err();
        assert!(matches!(error, Error::Restoring { .. }), "{error}");
        assert!(
            error.to_string().contains("could not be restored"),
            "{error}"
        );
    }
    let failed = state(tier, "b_tas_0");
    assert_eq!((failed.state, failed.restores), (State::Archived, 0));
    assert_eq!(hot(&fixture, "tas/0.0"), None);
    // The damage mended, the next reader restores it.
    std::fs::write(&zip, &good).unwrap();
    assert!(
        tier.restore_for_read(
            TOKEN,
            "tas/1.0",
            Duration::from_secs(30),
            &Asked::now("jane"),
            &Stop::default()
        )
        .unwrap()
    );
    assert_eq!(hot(&fixture, "tas/0.0"), Some(chunk(0)));
    assert_eq!(state(tier, "b_tas_0").restores, 1);
}

#[test]
fn a_hostile_cold_object_with_a_matching_checksum_restores_nothing() {
    let fixture = fixture();
    let tier = &fixture.tier;
    archive_all(tier);
    // An object whose entries climb out of the store, replacing the archived one, with its
    // checksum recorded as if it were genuine.
    let mut bytes = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut bytes);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for name in ["../../../escaped", "tas/0.0"] {
            zip.start_file(name, options).unwrap();
            std::io::Write::write_all(&mut zip, &[0u8; CHUNK]).unwrap();
        }
        zip.finish().unwrap();
    }
    let bytes = bytes.into_inner();
    let location = ObjectPath::from(state(tier, "b_tas_0").cold_key);
    tier.block_on(tier.cold.put(&location, PutPayload::from(bytes.clone())))
        .unwrap();
    let mut forged = state(tier, "b_tas_0");
    forged.checksum = super::archive::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    forged.cold_bytes = bytes.len() as u64;
    tier.put_state(TOKEN, "b_tas_0", &forged).unwrap();
    let error = tier
        .restore_for_read(
            TOKEN,
            "tas/0.0",
            Duration::from_secs(30),
            &Asked::now("jane"),
            &Stop::default(),
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("not a key of the store"),
        "{error}"
    );
    assert!(!fixture.data.join("escaped").exists());
    assert!(!fixture.data.join("stores").join("escaped").exists());
    assert_eq!(hot(&fixture, "tas/0.0"), None);
    assert_eq!(state(tier, "b_tas_0").state, State::Archived);
}

/// `fixture` with its tier changed by `change` (a cold tier that fails, a grace).
fn with_tier(fixture: Fixture, change: impl FnOnce(&mut Tier)) -> Fixture {
    let Fixture { _dir, data, tier } = fixture;
    let Ok(mut tier) = Arc::try_unwrap(tier) else {
        panic!("the fixture's tier has one handle");
    };
    change(&mut tier);
    Fixture {
        _dir,
        data,
        tier: Arc::new(tier),
    }
}

/// What a start runs: the repair, with the fixture's store the one known and ready.
fn start(tier: &Tier) {
    let known: HashSet<Uuid> = [TOKEN].into_iter().collect();
    tier.repair(&known, &[TOKEN], |_| unreachable!("the store is listed"))
        .unwrap();
}

/// The tier opened again on the same data: what a start after a crash runs.
fn reopen(fixture: Fixture) -> Fixture {
    let Fixture { _dir, data, tier } = fixture;
    // The database is closed with the old tier, as a process that died closes it.
    drop(tier);
    let tier = open(&data);
    start(&tier);
    Fixture { _dir, data, tier }
}

#[test]
fn repair_rolls_an_interrupted_archive_back_to_hot_and_deletes_its_cold_object() {
    let fixture = archived();
    // As if killed after packing and uploading b_tas_2 but before recording it archived:
    // its hot copies are back (never deleted), its state says archiving.
    let tier = &fixture.tier;
    let mut interrupted = state(tier, "b_tas_2");
    interrupted.state = State::Archiving;
    tier.put_state(TOKEN, "b_tas_2", &interrupted).unwrap();
    let store = fixture.data.join("stores").join(TOKEN.to_string());
    std::fs::write(store.join("tas/4.0"), chunk(4)).unwrap();
    std::fs::write(store.join("tas/5.0"), chunk(5)).unwrap();
    let fixture = reopen(fixture);
    let tier = &fixture.tier;
    assert_eq!(state(tier, "b_tas_2").state, State::Hot);
    assert!(!cold_files(&fixture).contains(&"b_tas_2".to_string()));
    assert_eq!(hot(&fixture, "tas/4.0"), Some(chunk(4)));
    // The others are archived still, with nothing hot beside them.
    assert_eq!(state(tier, "b_tas_3").state, State::Archived);
    assert!(tier.is_archived(TOKEN));
}

#[test]
fn repair_rolls_an_interrupted_restore_back_to_archived_without_partial_files() {
    let fixture = archived();
    let tier = &fixture.tier;
    let mut interrupted = state(tier, "b_tas_0");
    interrupted.state = State::Restoring;
    tier.put_state(TOKEN, "b_tas_0", &interrupted).unwrap();
    let store = fixture.data.join("stores").join(TOKEN.to_string());
    std::fs::write(store.join("tas/0.0"), chunk(0)).unwrap();
    std::fs::write(store.join("tas/.1.0.partial"), &chunk(1)[..100]).unwrap();
    let fixture = reopen(fixture);
    assert_eq!(state(&fixture.tier, "b_tas_0").state, State::Archived);
    assert_eq!(hot(&fixture, "tas/0.0"), None);
    assert_eq!(hot(&fixture, "tas/.1.0.partial"), None);
    assert!(cold_files(&fixture).contains(&"b_tas_0".to_string()));
    assert!(
        fixture
            .tier
            .restore_for_read(
                TOKEN,
                "tas/1.0",
                Duration::from_secs(30),
                &Asked::now("jane"),
                &Stop::default()
            )
            .unwrap()
    );
    assert_eq!(hot(&fixture, "tas/1.0"), Some(chunk(1)));
}

#[test]
fn repair_keeps_whole_hot_copies_when_the_cold_copy_is_gone() {
    let fixture = archived();
    let store = fixture.data.join("stores").join(TOKEN.to_string());
    std::fs::write(store.join("tas/6.0"), chunk(6)).unwrap();
    std::fs::write(store.join("tas/7.0"), chunk(7)).unwrap();
    std::fs::remove_file(cold_object(&fixture, "b_tas_3")).unwrap();
    let fixture = reopen(fixture);
    assert_eq!(state(&fixture.tier, "b_tas_3").state, State::Hot);
    assert_eq!(hot(&fixture, "tas/7.0"), Some(chunk(7)));
}

#[test]
fn repair_cleans_only_this_databases_leftovers_and_adopts_an_unrecorded_only_copy() {
    let fixture = archived();
    let tier = &fixture.tier;
    // A leftover: a cold object of an instance that is hot and whole.
    tier.restore_instance(TOKEN, "b_tas_1", None).unwrap();
    let leftover = ObjectPath::from(format!("{TOKEN}/b_tas_1.zip"));
    tier.block_on(tier.cold.put(&leftover, PutPayload::from(vec![1u8; 10])))
        .unwrap();
    // An earlier archive's object of an instance archived since: a leftover too, never
    // taken for the instance's copy.
    let earlier = ObjectPath::from(format!("{TOKEN}/b_tas_3.1.zip"));
    tier.block_on(tier.cold.put(&earlier, PutPayload::from(vec![3u8; 10])))
        .unwrap();
    let archived = state(tier, "b_tas_3").cold_key;
    // The only copy of b_tas_2, whose record was lost (a database restored from a backup).
    let mut batch = Batch::default();
    batch.delete(cf::TIERS, scoped_key(TOKEN, "b_tas_2"));
    tier.db.write(batch).unwrap();
    // Objects of a store this database does not know, and one not named like a blob.
    let stranger = ObjectPath::from(format!("{}/b_tas_0.zip", Uuid::from_u128(7)));
    let other = ObjectPath::from(format!("{TOKEN}/notes.txt"));
    for location in [&stranger, &other] {
        tier.block_on(tier.cold.put(location, PutPayload::from(vec![2u8; 10])))
            .unwrap();
    }
    let fixture = reopen(fixture);
    let tier = &fixture.tier;
    let exists = |location: &ObjectPath| tier.block_on(tier.cold.head(location)).is_ok();
    assert!(!exists(&leftover) && !exists(&earlier));
    assert!(exists(&stranger) && exists(&other));
    assert_eq!(state(tier, "b_tas_3").cold_key, archived);
    let adopted = state(tier, "b_tas_2");
    assert_eq!(adopted.state, State::Archived);
    assert_restores(&fixture, 5);
}

#[test]
fn forgetting_a_store_drops_its_listing_manifest_state_and_cold_objects() {
    let fixture = fixture();
    let tier = &fixture.tier;
    archive_all(tier);
    assert!(tier.forget_store(TOKEN, &Stop::default()).unwrap());
    assert!(tier.keys(TOKEN).unwrap().is_empty());
    assert!(tier.manifest(TOKEN).unwrap().is_none());
    assert!(tier.state(TOKEN, "b_tas_0").unwrap().is_none());
    assert!(!tier.is_archived(TOKEN));
    assert!(cold_files(&fixture).is_empty());
}

#[test]
fn blob_objects_are_named_by_token_and_instance_only() {
    let token = TOKEN.to_string();
    for name in [
        format!("{token}/b_tas_3.zip"),
        format!("{token}/b_tas_3.18b2c4a9f00d1e00.zip"),
    ] {
        assert_eq!(blob_object(&name), Some((TOKEN, "b_tas_3".to_string())));
    }
    for name in [
        format!("{token}/b_tas_3..zip"),
        format!("{token}/b_tas_3.1F.zip"),
        format!("{token}/b_tas_3.1.2.zip"),
        format!("{token}/manifest.json"),
        format!("{token}/B_TAS.zip"),
        format!("{token}/.zip"),
        format!("{token}/a/b.zip"),
        "not-a-token/b_tas_0.zip".to_string(),
        "b_tas_0.zip".to_string(),
    ] {
        assert_eq!(blob_object(&name), None, "{name}");
    }
}

#[test]
fn a_blob_longer_than_one_request_carries_is_archived_and_restored_in_pieces() {
    // Every request for an object's bytes fails after 500 bytes, as an S3 request that
    // outlasts its client's timeout does; a blob's object is some 1,400 bytes. Read through
    // the object store, as from S3 (not copied from the local directory).
    let cut = |piece: u64| {
        with_tier(fixture(), |tier| {
            tier.cold_dir = None;
            tier.set_cold_piece(piece);
            tier.cold = Arc::new(FailingUploads {
                cut_after: Some(500),
                uploads_complete: true,
                ..FailingUploads::over(&tier.cold)
            });
        })
    };
    // Read back in one request, a blob is never archived.
    let whole = cut(u64::MAX);
    let planned = whole
        .tier
        .archivable(candidate(), &ArchiveOptions::default())
        .unwrap();
    let (instance, keys) = &planned[0];
    let error = whole
        .tier
        .archive_instance(candidate(), instance, keys, &|_, _| true)
        .unwrap_err();
    assert!(error.to_string().contains("the tier refuses"), "{error}");
    assert_eq!(state(&whole.tier, instance).state, State::Hot);
    // In pieces of 400 bytes, every blob is archived, and every key restored as it was.
    let pieces = cut(400);
    let archived = archive_all(&pieces.tier);
    assert_eq!(archived.len(), 4);
    for instance in &archived {
        assert_eq!(state(&pieces.tier, instance).state, State::Archived);
    }
    // A read of one chunk of each blob restores the blob.
    for step in (0..8).step_by(2) {
        assert_restores(&pieces, step);
    }
    for step in 0..8 {
        assert_eq!(hot(&pieces, &format!("tas/{step}.0")), Some(chunk(step)));
    }
}

#[test]
fn an_archive_that_fails_while_packing_leaves_the_blob_hot_and_nothing_on_the_cold_tier() {
    let fixture = fixture();
    let tier = &fixture.tier;
    let planned = tier
        .archivable(candidate(), &ArchiveOptions::default())
        .unwrap();
    let (instance, keys) = &planned[1];
    // The second key of the blob has fewer bytes than its listing says.
    let store = fixture.data.join("stores").join(TOKEN.to_string());
    std::fs::write(store.join(&keys[1].0), b"short").unwrap();
    let error = tier
        .archive_instance(candidate(), instance, keys, &|_, _| true)
        .unwrap_err();
    assert!(error.to_string().contains("the listing says"), "{error}");
    assert_eq!(state(tier, instance).state, State::Hot);
    assert!(state(tier, instance).cold_key.is_empty());
    // No object, and no unfinished upload (the local store writes one as `<object>#<n>`).
    assert_eq!(cold_files(&fixture), Vec::<String>::new());
    assert_eq!(hot(&fixture, &keys[0].0), Some(chunk(2)));
}

#[test]
fn a_central_directory_is_sized_before_it_is_parsed() {
    use super::restore::directory_fits;
    let zipped = |entries: usize, comment: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob.zip");
        let file = std::fs::File::create(&path).unwrap();
        let mut zip = zip::ZipWriter::new_stream(file);
        zip.set_comment(comment).unwrap();
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for n in 0..entries {
            zip.start_file(format!("tas/{n}.0"), options).unwrap();
            std::io::Write::write_all(&mut zip, b"x").unwrap();
        }
        zip.finish().unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let size = file.metadata().unwrap().len();
        (dir, file, size)
    };
    let (_dir, file, size) = zipped(3, "");
    assert_eq!(directory_fits(&file, size, 3), Ok(()));
    let fewer = directory_fits(&file, size, 2).unwrap_err();
    assert!(fewer.contains("names 3 entries"), "{fewer}");
    // As many entries as a ZIP's end record counts (no ZIP64), and more: the ZIP64 end
    // record says how many.
    let (_dir, file, size) = zipped(65_535, "");
    assert_eq!(directory_fits(&file, size, 65_535), Ok(()));
    let (_dir, file, size) = zipped(70_000, "");
    assert_eq!(directory_fits(&file, size, 70_000), Ok(()));
    assert!(directory_fits(&file, size, 3).is_err());
    // Not ended as an archive of ours is: a comment, or a cut.
    let (_dir, file, size) = zipped(3, "hello");
    assert!(directory_fits(&file, size, 3).is_err());
    let (_dir, file, size) = zipped(3, "");
    assert!(directory_fits(&file, size - 1, 3).is_err());
    // Forged: a field of an end record changed (`at` bytes before the end), so that the
    // directory would not end where the record begins, or span disks.
    let forged = |entries: usize, at: u64, value: &[u8]| {
        let (dir, _, size) = zipped(entries, "");
        let path = dir.path().join("blob.zip");
        let mut bytes = std::fs::read(&path).unwrap();
        let start = usize::try_from(size - at).unwrap();
        bytes[start..start + value.len()].copy_from_slice(value);
        std::fs::write(&path, bytes).unwrap();
        directory_fits(&std::fs::File::open(&path).unwrap(), size, entries as u64)
    };
    // The end record's directory offset (at 16 of its 22 bytes), its disk number (4) and
    // its entries on this disk (8).
    for (at, value) in [(6, &[0u8, 0, 0, 0][..]), (18, &[1, 0]), (14, &[2, 0])] {
        assert!(forged(3, at, value).is_err(), "at {at}");
    }
    // ZIP64: the locator (20 bytes, ending 22 before the end) names two disks (at 16);
    // the record (56 bytes, ending 42 before the end) is longer (at 4), on another disk (at
    // 16), or its directory starts elsewhere (at 48).
    for (at, value) in [
        (26, &[2u8, 0, 0, 0][..]),
        (94, &[45]),
        (82, &[1]),
        (50, &[0; 8]),
    ] {
        assert!(forged(70_000, at, value).is_err(), "at {at}");
    }
    // Bytes like a ZIP64 locator before an end record with no saturated field are the last
    // directory entry's, not a locator.
    assert_eq!(forged(3, 42, &[0x50, 0x4b, 0x06, 0x07]), Ok(()));
}

#[test]
fn repair_adopts_the_newest_object_of_a_blob_whose_recorded_object_is_missing() {
    // A database restored from a backup older than the blob's latest archive: the record
    // names an object gone since, and the latest one holds the keys.
    let fixture = archived();
    let tier = &fixture.tier;
    let recorded = cold_object(&fixture, "b_tas_0");
    let bytes = std::fs::read(&recorded).unwrap();
    let latest = ObjectPath::from(format!("{TOKEN}/b_tas_0.ffffffffffffffff.zip"));
    tier.block_on(tier.cold.put(&latest, PutPayload::from(bytes)))
        .unwrap();
    std::fs::remove_file(&recorded).unwrap();
    // An archive older than both.
    let oldest = ObjectPath::from(format!("{TOKEN}/b_tas_0.1.zip"));
    tier.block_on(tier.cold.put(&oldest, PutPayload::from(vec![0u8; 10])))
        .unwrap();
    let fixture = reopen(fixture);
    let tier = &fixture.tier;
    assert!(tier.block_on(tier.cold.head(&latest)).is_ok());
    assert!(tier.block_on(tier.cold.head(&oldest)).is_err());
    // It is recorded as the blob's copy, and restores.
    let adopted = state(tier, "b_tas_0");
    assert_eq!(
        (adopted.state, adopted.cold_key),
        (State::Archived, latest.to_string())
    );
    assert_restores(&fixture, 0);
}

#[test]
fn a_large_blob_is_uploaded_in_at_most_9000_parts() {
    use super::archive::part_size;
    let blob = |keys: u64, size: u64| -> Vec<(String, u64)> {
        (0..keys).map(|n| (format!("tas/{n}.0.0"), size)).collect()
    };
    assert_eq!(part_size(&blob(128, 1 << 20)), 8 << 20);
    for (keys, size) in [
        (100 * 1024, 1 << 20),
        (1_000_000, 64 << 10),
        (10, 400 << 30),
    ] {
        let keys = blob(keys, size);
        let part = part_size(&keys) as u64;
        let zip: u64 = keys.iter().map(|(k, s)| s + 256 + 2 * k.len() as u64).sum();
        assert!(
            zip.div_ceil(part) <= 9_000 && part.is_multiple_of(1 << 20),
            "{part}"
        );
    }
}

#[test]
fn a_start_lists_only_stores_marked_since_the_last_and_a_full_clean_reaches_every_store() {
    let fixture = archived();
    let tier = &fixture.tier;
    tier.restore_instance(TOKEN, "b_tas_1", None).unwrap();
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    // A store removed before marks were kept, whose objects were never deleted.
    let removed = Uuid::from_u128(9);
    let orphan = ObjectPath::from(format!("{removed}/b_tas_0.1.zip"));
    tier.block_on(tier.cold.put(&orphan, PutPayload::from(vec![9u8; 10])))
        .unwrap();
    let mut batch = Batch::default();
    batch.delete(cf::META, db::meta::COLD_CLEANUP_MARKED);
    tier.db.write(batch).unwrap();
    let Fixture { _dir, data, tier } = fixture;
    drop(tier);
    let tier = open(&data);
    let known: HashSet<Uuid> = [TOKEN, removed].into_iter().collect();
    tier.repair(&known, &[TOKEN], |_| unreachable!("the store is listed"))
        .unwrap();
    let exists =
        |tier: &Tier, location: &ObjectPath| tier.block_on(tier.cold.head(location)).is_ok();
    // The first start marked every store the database knew, and cleaned them.
    assert!(!exists(&tier, &orphan));
    assert!(tier.marked_for_cleaning().unwrap().is_empty());

    // Since then: a leftover nobody marked, and a record lost (a database restored from a
    // backup older than the archive).
    let leftover = ObjectPath::from(format!("{TOKEN}/b_tas_1.5.zip"));
    tier.block_on(tier.cold.put(&leftover, PutPayload::from(vec![1u8; 10])))
        .unwrap();
    let mut batch = Batch::default();
    batch.delete(cf::TIERS, scoped_key(TOKEN, "b_tas_2"));
    tier.db.write(batch).unwrap();
    drop(tier);
    let tier = open(&data);
    tier.repair(&known, &[TOKEN], |_| unreachable!("the store is listed"))
        .unwrap();
    // A start does not list an unmarked store.
    assert!(exists(&tier, &leftover));
    assert!(tier.state(TOKEN, "b_tas_2").unwrap().is_none());
    // The full clean does, and adopts the only copy.
    tier.clean_every_store(&known, &[TOKEN]).unwrap();
    assert!(!exists(&tier, &leftover));
    assert_eq!(
        tier.state(TOKEN, "b_tas_2").unwrap().map(|s| s.state),
        Some(State::Archived)
    );
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
    assert!(
        tier.restore_for_read(
            TOKEN,
            "tas/5.0",
            Duration::from_secs(30),
            &Asked::now("jane"),
            &Stop::default()
        )
        .unwrap()
    );
    let store = data.join("stores").join(TOKEN.to_string());
    assert_eq!(std::fs::read(store.join("tas/5.0")).unwrap(), chunk(5));
    // Forgetting the store deletes its objects, and leaves it marked for the cleaning.
    assert!(tier.forget_store(TOKEN, &Stop::default()).unwrap());
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    assert!(tier.clean_marked(&|_| Ok(false), &|| false).unwrap());
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
}

#[test]
fn a_reader_gets_the_failure_of_the_restore_it_started_and_a_later_reader_starts_anew() {
    let fixture = archived();
    let tier = &fixture.tier;
    let object = cold_object(&fixture, "b_tas_1");
    let hidden = object.with_extension("hidden");
    std::fs::rename(&object, &hidden).unwrap();
    let asked = Asked::now("jane");
    // Tried without waiting: the restore starts, and the reader goes on.
    let error = tier
        .restore_for_read(TOKEN, "tas/3.0", Duration::ZERO, &asked, &Stop::default())
        .unwrap_err();
    assert!(matches!(error, Error::Restoring { .. }), "{error}");
    let id = (TOKEN, "b_tas_1".to_string());
    let deadline = Instant::now() + Duration::from_secs(30);
    while tier.flights.lock().contains_key(&id) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::rename(&hidden, &object).unwrap();
    // The same reader, now waiting: the restore it started failed, and is not run again.
    let error = tier
        .restore_for_read(
            TOKEN,
            "tas/3.0",
            Duration::from_secs(30),
            &asked,
            &Stop::default(),
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("could not be restored"),
        "{error}"
    );
    assert_eq!(hot(&fixture, "tas/3.0"), None);
    // A reader that asks after the failure starts anew.
    assert_restores(&fixture, 3);
}

/// A cold tier whose multipart uploads fail, at their first part or at completion, and
/// which counts the uploads aborted: what an S3 bucket bills for when they are not.
#[derive(Debug)]
struct FailingUploads {
    inner: Arc<dyn ObjectStore>,
    /// Whether the part fails (else the completion).
    part_fails: bool,
    /// Whether every deletion fails too.
    deletes_fail: bool,
    /// Whether every listing fails too.
    lists_fail: bool,
    /// Prefixes whose listing never answers.
    silent_prefixes: HashSet<ObjectPath>,
    /// An object that cannot be read.
    unreadable: Option<ObjectPath>,
    /// How often it was asked for (its bytes, not its metadata).
    unreadable_asked: Arc<std::sync::atomic::AtomicUsize>,
    /// How often any object's bytes were asked for.
    gets: Arc<std::sync::atomic::AtomicUsize>,
    aborted: Arc<std::sync::atomic::AtomicUsize>,
    /// Where the first read of an object's bytes waits, when set.
    parked: Option<Arc<Park>>,
    /// When set, every read of an object's bytes fails after this many bytes, as an S3
    /// request fails that outlasts its client's timeout.
    cut_after: Option<usize>,
    /// Whether uploads complete (by default, completing one fails).
    uploads_complete: bool,
}

/// Holds the first read of an object's bytes (a restore's download) until released.
#[derive(Debug)]
struct Park {
    /// Whether the next read is held.
    armed: std::sync::atomic::AtomicBool,
    /// Told when the read is held.
    held: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    /// Lets the held read go on.
    release: tokio::sync::Notify,
}

impl FailingUploads {
    /// `inner`, failing nothing.
    fn over(inner: &Arc<dyn ObjectStore>) -> Self {
        FailingUploads {
            inner: Arc::clone(inner),
            part_fails: false,
            deletes_fail: false,
            lists_fail: false,
            silent_prefixes: HashSet::new(),
            unreadable: None,
            unreadable_asked: Arc::default(),
            gets: Arc::default(),
            aborted: Arc::default(),
            parked: None,
            cut_after: None,
            uploads_complete: false,
        }
    }
}

impl std::fmt::Display for FailingUploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FailingUploads({})", self.inner)
    }
}

fn refused() -> ObjectError {
    ObjectError::Generic {
        store: "test",
        source: "the tier refuses".into(),
    }
}

#[derive(Debug)]
struct FailingUpload {
    inner: Box<dyn svc_manifests::object_store::MultipartUpload>,
    part_fails: bool,
    completes: bool,
    aborted: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl svc_manifests::object_store::MultipartUpload for FailingUpload {
    fn put_part(
        &mut self,
        data: svc_manifests::object_store::PutPayload,
    ) -> svc_manifests::object_store::UploadPart {
        if self.part_fails {
            Box::pin(async { Err(refused()) })
        } else {
            self.inner.put_part(data)
        }
    }

    async fn complete(
        &mut self,
    ) -> svc_manifests::object_store::Result<svc_manifests::object_store::PutResult> {
        if self.completes {
            self.inner.complete().await
        } else {
            Err(refused())
        }
    }

    async fn abort(&mut self) -> svc_manifests::object_store::Result<()> {
        self.aborted
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.abort().await
    }
}

#[async_trait::async_trait]
impl ObjectStore for FailingUploads {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: svc_manifests::object_store::PutOptions,
    ) -> svc_manifests::object_store::Result<svc_manifests::object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: svc_manifests::object_store::PutMultipartOptions,
    ) -> svc_manifests::object_store::Result<Box<dyn svc_manifests::object_store::MultipartUpload>>
    {
        Ok(Box::new(FailingUpload {
            inner: self.inner.put_multipart_opts(location, opts).await?,
            part_fails: self.part_fails,
            completes: self.uploads_complete,
            aborted: Arc::clone(&self.aborted),
        }))
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: svc_manifests::object_store::GetOptions,
    ) -> svc_manifests::object_store::Result<svc_manifests::object_store::GetResult> {
        if !options.head {
            self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(park) = &self.parked
                && park.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                let _ = park.held.lock().unwrap().send(());
                park.release.notified().await;
            }
        }
        if self.unreadable.as_ref() == Some(location) {
            if !options.head {
                self.unreadable_asked
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            return Err(refused());
        }
        let head = options.head;
        let got = self.inner.get_opts(location, options).await?;
        let Some(cut) = self.cut_after.filter(|_| !head) else {
            return Ok(got);
        };
        use futures::StreamExt;
        let (meta, range, attributes) =
            (got.meta.clone(), got.range.clone(), got.attributes.clone());
        let mut left = cut;
        let cut_short = got.into_stream().flat_map(move |bytes| {
            let pieces: Vec<svc_manifests::object_store::Result<bytes::Bytes>> = match bytes {
                Ok(bytes) if bytes.len() <= left => {
                    left -= bytes.len();
                    vec![Ok(bytes)]
                }
                Ok(bytes) => {
                    let sent = bytes.slice(..left);
                    left = 0;
                    vec![Ok(sent), Err(refused())]
                }
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(pieces)
        });
        Ok(svc_manifests::object_store::GetResult {
            payload: svc_manifests::object_store::GetResultPayload::Stream(cut_short.boxed()),
            meta,
            range,
            attributes,
        })
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            svc_manifests::object_store::Result<ObjectPath>,
        >,
    ) -> futures::stream::BoxStream<'static, svc_manifests::object_store::Result<ObjectPath>> {
        if self.deletes_fail {
            use futures::StreamExt;
            locations.map(|_| Err(refused())).boxed()
        } else {
            self.inner.delete_stream(locations)
        }
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> futures::stream::BoxStream<
        'static,
        svc_manifests::object_store::Result<svc_manifests::object_store::ObjectMeta>,
    > {
        use futures::StreamExt;
        if self.lists_fail {
            futures::stream::once(async { Err(refused()) }).boxed()
        } else if prefix.is_some_and(|prefix| self.silent_prefixes.contains(prefix)) {
            futures::stream::pending().boxed()
        } else {
            self.inner.list(prefix)
        }
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> svc_manifests::object_store::Result<svc_manifests::object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: svc_manifests::object_store::CopyOptions,
    ) -> svc_manifests::object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[test]
fn an_upload_that_fails_in_a_part_or_at_completion_is_aborted() {
    for part_fails in [true, false] {
        let aborted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let fixture = with_tier(fixture(), |tier| {
            tier.cold = Arc::new(FailingUploads {
                part_fails,
                aborted: Arc::clone(&aborted),
                ..FailingUploads::over(&tier.cold)
            });
        });
        let tier = &fixture.tier;
        let planned = tier
            .archivable(candidate(), &ArchiveOptions::default())
            .unwrap();
        let (instance, keys) = &planned[0];
        let error = tier
            .archive_instance(candidate(), instance, keys, &|_, _| true)
            .unwrap_err();
        assert!(error.to_string().contains("the tier refuses"), "{error}");
        assert_eq!(
            aborted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "part fails: {part_fails}"
        );
        let after = tier.state(TOKEN, instance).unwrap().unwrap();
        assert_eq!(after.state, State::Hot);
        assert_eq!(cold_files(&fixture), Vec::<String>::new());
        assert_eq!(hot(&fixture, &keys[0].0), Some(chunk(0)));
    }
}

#[test]
fn a_database_older_than_the_last_archive_is_told_and_every_store_is_cleaned() {
    let fixture = archived();
    let tier = &fixture.tier;
    assert!(fixture.data.join("tier-clock").exists());
    // The database as a backup made before the archive of b_tas_2 left it: no record of
    // it, no mark, an older clock.
    let mut batch = Batch::default();
    batch.delete(cf::TIERS, scoped_key(TOKEN, "b_tas_2"));
    batch.delete(cf::META, cleaning_mark(TOKEN));
    batch.put(cf::META, db::meta::TIER_CLOCK, 1u128.to_be_bytes().to_vec());
    batch.put(cf::META, db::meta::COLD_CLEANUP_MARKED, Vec::new());
    tier.db.write(batch).unwrap();
    let fixture = reopen(fixture);
    let tier = &fixture.tier;
    assert_eq!(state(tier, "b_tas_2").state, State::Archived);
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
    assert_restores(&fixture, 5);
    // Told once: the clocks agree again.
    assert_clocks_agree(tier);
}

#[test]
fn a_store_stays_marked_until_its_leftovers_are_deleted() {
    let Fixture { _dir, tier, .. } = fixture();
    archive_all(&tier);
    tier.restore_instance(TOKEN, "b_tas_1", None).unwrap();
    let leftover = ObjectPath::from(format!("{TOKEN}/b_tas_1.5.zip"));
    tier.block_on(tier.cold.put(&leftover, PutPayload::from(vec![1u8; 10])))
        .unwrap();
    let Ok(mut tier) = Arc::try_unwrap(tier) else {
        panic!("the fixture's tier has one handle");
    };
    let cold = Arc::clone(&tier.cold);
    tier.cold = Arc::new(FailingUploads {
        deletes_fail: true,
        ..FailingUploads::over(&cold)
    });
    start(&tier);
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    assert!(tier.block_on(tier.cold.head(&leftover)).is_ok());
    // The next start, with a cold tier that deletes.
    tier.cold = cold;
    start(&tier);
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
    assert!(tier.block_on(tier.cold.head(&leftover)).is_err());
}

#[test]
fn a_backup_taken_while_a_blob_was_archived_keeps_its_only_copy() {
    // The database put back recorded b_tas_2 `archiving` (the backup was taken while its
    // archive ran); the archive then finished and deleted the hot copies.
    let fixture = archived();
    let tier = &fixture.tier;
    let object = cold_object(&fixture, "b_tas_2");
    let mut stale = state(tier, "b_tas_2");
    stale.state = State::Archiving;
    let mut batch = Batch::default();
    batch.put(
        cf::TIERS,
        scoped_key(TOKEN, "b_tas_2"),
        db::encode_json(FORMAT, &stale),
    );
    batch.put(cf::META, db::meta::TIER_CLOCK, 1u128.to_be_bytes().to_vec());
    tier.db.write(batch).unwrap();
    let fixture = reopen(fixture);
    let tier = &fixture.tier;
    assert!(object.exists(), "the only copy was deleted");
    assert_eq!(state(tier, "b_tas_2").state, State::Archived);
    assert_restores(&fixture, 5);
}

#[test]
fn an_older_object_is_not_adopted_while_the_newest_cannot_be_read() {
    let Fixture { _dir, data, tier } = fixture();
    archive_all(&tier);
    let recorded = data.join("cold").join(state(&tier, "b_tas_0").cold_key);
    let bytes = std::fs::read(&recorded).unwrap();
    let older = ObjectPath::from(format!("{TOKEN}/b_tas_0.1.zip"));
    let newest = ObjectPath::from(format!("{TOKEN}/b_tas_0.ffffffffffffffff.zip"));
    tier.block_on(tier.cold.put(&older, PutPayload::from(vec![7u8; 10])))
        .unwrap();
    tier.block_on(tier.cold.put(&newest, PutPayload::from(bytes)))
        .unwrap();
    std::fs::remove_file(&recorded).unwrap();
    let Ok(mut tier) = Arc::try_unwrap(tier) else {
        panic!("the fixture's tier has one handle");
    };
    let cold = Arc::clone(&tier.cold);
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tier.cold = Arc::new(FailingUploads {
        unreadable: Some(newest.clone()),
        unreadable_asked: Arc::clone(&asked),
        ..FailingUploads::over(&cold)
    });
    start(&tier);
    // Neither adopted nor deleted; the store stays marked.
    assert_ne!(state(&tier, "b_tas_0").cold_key, older.to_string());
    for object in [&older, &newest] {
        assert!(tier.block_on(cold.head(object)).is_ok(), "{object}");
    }
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    // The cleanings while serving do not read it again for a while (each read may be a
    // whole blob's download).
    assert!(!tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    // Once that while has passed, it is read again.
    if let Some(long_ago) = Instant::now().checked_sub(ADOPTION_RETRY) {
        for failed in tier.adoption_failures.lock().values_mut() {
            *failed = long_ago;
        }
        assert!(!tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
    // The next start reads the newest: it is adopted, and the older one deleted.
    drop((tier, cold));
    let tier = open(&data);
    start(&tier);
    assert_eq!(state(&tier, "b_tas_0").cold_key, newest.to_string());
    assert!(tier.block_on(tier.cold.head(&older)).is_err());
    // Counted once: with every blob restored, the store is no longer archived.
    for instance in ["b_tas_0", "b_tas_1", "b_tas_2", "b_tas_3"] {
        tier.restore_instance(TOKEN, instance, None).unwrap();
    }
    assert!(!tier.is_archived(TOKEN));
}

#[test]
fn tier_clocks_only_grow_and_a_damaged_clock_file_has_every_store_checked() {
    let fixture = fixture();
    let tier = &fixture.tier;
    // A clock from a host clock that stood far ahead.
    let ahead = u128::from(u64::MAX) << 8;
    let mut batch = Batch::default();
    batch.put(cf::META, db::meta::TIER_CLOCK, ahead.to_be_bytes().to_vec());
    tier.db.write(batch).unwrap();
    archive_all(tier);
    assert!(tier.last_archive() > ahead);
    // A damaged file, and a record lost meanwhile: it is found.
    std::fs::write(fixture.data.join("tier-clock"), b"x").unwrap();
    let mut batch = Batch::default();
    batch.delete(cf::TIERS, scoped_key(TOKEN, "b_tas_2"));
    batch.delete(cf::META, cleaning_mark(TOKEN));
    batch.put(cf::META, db::meta::COLD_CLEANUP_MARKED, Vec::new());
    tier.db.write(batch).unwrap();
    let fixture = reopen(fixture);
    let tier = &fixture.tier;
    assert_eq!(state(tier, "b_tas_2").state, State::Archived);
    // The file is written anew, and the clocks agree.
    assert_clocks_agree(tier);
    assert!(tier.last_archive() > ahead && tier.last_archive() < u128::MAX);
}

#[test]
fn a_store_the_start_could_not_clean_is_cleaned_while_the_daemon_serves() {
    let fixture = archived();
    // The database as a backup made before the archive of b_tas_2 left it.
    let mut batch = Batch::default();
    batch.delete(cf::TIERS, scoped_key(TOKEN, "b_tas_2"));
    batch.delete(cf::META, cleaning_mark(TOKEN));
    batch.put(cf::META, db::meta::TIER_CLOCK, 1u128.to_be_bytes().to_vec());
    fixture.tier.db.write(batch).unwrap();
    let Fixture { _dir, data, tier } = fixture;
    drop(tier);
    let Ok(mut tier) = Arc::try_unwrap(open(&data)) else {
        panic!("a tier just opened has one handle");
    };
    // The start finds the database older than the last archive, and its cold tier does
    // not list: the store stays marked, b_tas_2 unrecorded.
    let cold = Arc::clone(&tier.cold);
    tier.cold = Arc::new(FailingUploads {
        lists_fail: true,
        ..FailingUploads::over(&cold)
    });
    start(&tier);
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    assert!(tier.state(TOKEN, "b_tas_2").unwrap().is_none());
    let listing_fails = tier.clean_marked(&|_| Ok(true), &|| false).unwrap();
    assert!(
        !listing_fails,
        "a cleaning whose listing fails settles nothing"
    );
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    // The cold tier answers again: the daemon's next cleaning adopts the only copy.
    tier.cold = cold;
    let fixture = Fixture {
        _dir,
        data,
        tier: Arc::new(tier),
    };
    assert!(fixture.tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert_eq!(state(&fixture.tier, "b_tas_2").state, State::Archived);
    assert!(fixture.tier.marked_for_cleaning().unwrap().is_empty());
    assert_restores(&fixture, 5);
}

#[test]
fn the_cleaning_while_serving_leaves_a_store_being_archived_for_later_and_keeps_its_object() {
    let fixture = fixture();
    let tier = Arc::clone(&fixture.tier);
    let object = ObjectPath::from(format!("{TOKEN}/b_tas_1.5.zip"));
    let (uploaded, upload_seen) = std::sync::mpsc::channel();
    let (go_on, going_on) = std::sync::mpsc::channel::<()>();
    // An archive of b_tas_1 holds the store's lock (shared, as archives and restores do),
    // its object on the cold tier and not yet named by its record: what a cleaning that
    // read the records before the archive wrote them, and listed after, would see.
    let archive = std::thread::spawn({
        let tier = Arc::clone(&tier);
        let object = object.clone();
        move || {
            let store_lock = tier.store_lock(TOKEN);
            let _shared = store_lock.read();
            tier.block_on(tier.cold.put(&object, PutPayload::from(vec![1u8; 10])))
                .unwrap();
            uploaded.send(()).unwrap();
            going_on.recv().unwrap();
            let mut state = BlobState::hot(2 * CHUNK as u64, 2);
            state.state = State::Archived;
            state.cold_key = object.to_string();
            tier.put_state(TOKEN, "b_tas_1", &state).unwrap();
        }
    });
    upload_seen.recv().unwrap();
    let mut batch = Batch::default();
    mark_for_cleaning(&mut batch, TOKEN);
    tier.db.write(batch).unwrap();
    // The cleaning does not wait for the store (which would hold up its restores): it
    // leaves it marked for the next.
    let (cleaned, cleaning) = std::sync::mpsc::channel();
    std::thread::spawn({
        let tier = Arc::clone(&tier);
        move || cleaned.send(tier.clean_marked(&|_| Ok(true), &|| false).unwrap())
    });
    let settled = cleaning.recv_timeout(Duration::from_secs(10));
    if settled == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
        go_on.send(()).unwrap();
        panic!("the cleaning waited for the archive under way");
    }
    assert_eq!(settled, Ok(false), "the cleaning failed");
    assert!(
        tier.block_on(tier.cold.head(&object)).is_ok(),
        "the object of the archive under way was deleted"
    );
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    go_on.send(()).unwrap();
    archive.join().unwrap();
    assert!(tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert!(tier.block_on(tier.cold.head(&object)).is_ok());
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
}

#[test]
fn a_store_stays_marked_for_the_grace_and_an_object_that_appears_late_is_deleted() {
    let fixture = with_tier(archived(), |tier| {
        tier.cleaning_grace = CLEANING_GRACE_SECONDS
    });
    let tier = &fixture.tier;
    tier.restore_instance(TOKEN, "b_tas_1", None).unwrap();
    assert!(tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert_eq!(
        tier.marked_for_cleaning().unwrap(),
        [TOKEN],
        "a store marked a moment ago stays marked"
    );
    // An archive's upload the object store completed after the archive had given up.
    let late = ObjectPath::from(format!("{TOKEN}/b_tas_1.5.zip"));
    tier.block_on(tier.cold.put(&late, PutPayload::from(vec![1u8; 10])))
        .unwrap();
    assert!(tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert!(tier.block_on(tier.cold.head(&late)).is_err());
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    // A full clean keeps the mark's time: the store stays marked.
    let known: HashSet<Uuid> = [TOKEN].into_iter().collect();
    assert!(tier.clean_every_store(&known, &[TOKEN]).unwrap());
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    // Once the grace has passed, a clean listing unmarks the store.
    let mut batch = Batch::default();
    let marked = now() - CLEANING_GRACE_SECONDS - 1;
    batch.put(
        cf::META,
        cleaning_mark(TOKEN),
        marked.to_be_bytes().to_vec(),
    );
    tier.db.write(batch).unwrap();
    assert!(tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
    // A full clean marks a store not marked as long ago: it follows no upload, and a clean
    // listing unmarks it.
    assert!(tier.clean_every_store(&known, &[TOKEN]).unwrap());
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
    // The archived blobs' objects were kept all along.
    assert_restores(&fixture, 5);
}

#[test]
fn a_mark_put_before_marks_held_their_time_keeps_its_store_marked_for_the_grace() {
    let Fixture { _dir, data, tier } = archived();
    let mut batch = Batch::default();
    batch.put(cf::META, cleaning_mark(TOKEN), Vec::new());
    tier.db.write(batch).unwrap();
    drop(tier);
    let Ok(mut tier) = Arc::try_unwrap(open(&data)) else {
        panic!("a tier just opened has one handle");
    };
    tier.cleaning_grace = CLEANING_GRACE_SECONDS;
    start(&tier);
    assert_eq!(tier.marked_for_cleaning().unwrap(), [TOKEN]);
    assert!(tier.marked_at(TOKEN).unwrap().unwrap() > now() - 60);
}

/// The fixture archived, then its database as a backup older than the archive of b_tas_2
/// (no record of it), and the object the cleaning would adopt for it.
fn lost_record_and_its_adoption(tier: &Tier) -> Adoption {
    let mut batch = Batch::default();
    batch.delete(cf::TIERS, scoped_key(TOKEN, "b_tas_2"));
    tier.db.write(batch).unwrap();
    tier.count_archived(TOKEN, -1);
    let mut tally = Tally::default();
    let (cleaned, mut adoptions) = tier
        .clean_store(TOKEN, true, &mut tally, &|| false)
        .unwrap();
    assert!(matches!(cleaned, Cleaned::Unsettled));
    assert_eq!(adoptions.len(), 1);
    let adoption = adoptions.remove(0);
    assert_eq!(adoption.instance, "b_tas_2");
    adoption
}

#[test]
fn an_object_read_to_be_adopted_is_not_recorded_when_its_blob_changed_meanwhile() {
    let fixture = archived();
    let tier = &fixture.tier;
    let adoption = lost_record_and_its_adoption(tier);
    let archived = |tier: &Tier| tier.archived.lock().get(&TOKEN).copied();
    let archived_before = archived(tier);
    // An archive of the blob recorded another object meanwhile.
    let mut other = BlobState::hot(2 * CHUNK as u64, 2);
    other.state = State::Archived;
    other.cold_key = format!("{TOKEN}/b_tas_2.ffff.zip");
    tier.put_state(TOKEN, "b_tas_2", &other).unwrap();
    let mut tally = Tally::default();
    let adopted = tier.adopt(TOKEN, &adoption, &|_| Ok(true), &mut tally);
    assert!(matches!(adopted.unwrap(), Adopted::No));
    assert_eq!(state(tier, "b_tas_2").cold_key, other.cold_key);
    assert_eq!(archived(tier), archived_before);
    // The store was converted again meanwhile.
    assert!(tier.forget_store(TOKEN, &Stop::default()).unwrap());
    let adopted = tier.adopt(TOKEN, &adoption, &|_| Ok(true), &mut tally);
    assert!(matches!(adopted.unwrap(), Adopted::No));
    assert!(tier.state(TOKEN, "b_tas_2").unwrap().is_none());
    assert_eq!(tally.changed, 2);
    assert_eq!(archived(tier), None);
}

#[test]
fn an_object_read_while_its_store_was_busy_is_recorded_later_without_reading_it_again() {
    let gets = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fixture = with_tier(archived(), |tier| {
        tier.cold = Arc::new(FailingUploads {
            gets: Arc::clone(&gets),
            ..FailingUploads::over(&tier.cold)
        });
    });
    let tier = &fixture.tier;
    let adoption = lost_record_and_its_adoption(tier);
    let (busy, held) = std::sync::mpsc::channel();
    let (done, release) = std::sync::mpsc::channel::<()>();
    let restore = std::thread::spawn({
        let tier = Arc::clone(tier);
        move || {
            let store_lock = tier.store_lock(TOKEN);
            let _shared = store_lock.read();
            busy.send(()).unwrap();
            release.recv().unwrap();
        }
    });
    held.recv().unwrap();
    let mut tally = Tally::default();
    let adopted = tier.adopt(TOKEN, &adoption, &|_| Ok(true), &mut tally);
    done.send(()).unwrap();
    restore.join().unwrap();
    assert!(matches!(adopted.unwrap(), Adopted::Busy));
    assert_eq!(gets.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(tier.state(TOKEN, "b_tas_2").unwrap().is_none());
    let adopted = tier.adopt(TOKEN, &adoption, &|_| Ok(true), &mut tally);
    assert!(matches!(adopted.unwrap(), Adopted::Yes));
    assert_eq!(
        gets.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "read again"
    );
    assert_eq!(state(tier, "b_tas_2").state, State::Archived);
    assert_restores(&fixture, 5);
}

#[test]
fn a_mark_from_a_clock_that_stood_ahead_is_brought_back() {
    let fixture = fixture();
    let tier = &fixture.tier;
    let mut batch = Batch::default();
    batch.put(
        cf::META,
        cleaning_mark(TOKEN),
        (now() + 86_400).to_be_bytes().to_vec(),
    );
    tier.db.write(batch).unwrap();
    assert!(tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert!(tier.marked_at(TOKEN).unwrap().unwrap() <= now());
    assert!(tier.clean_marked(&|_| Ok(true), &|| false).unwrap());
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
}

#[test]
fn a_cleaning_goes_past_one_silent_store_stops_at_two_and_takes_them_last_next_time() {
    let [first, second, third] = [1u128, 2, 3].map(Uuid::from_u128);
    // The fixture's tier over a cold tier whose listings of `silent` never answer, with the
    // three stores marked.
    let silent_at = |fixture: Fixture, silent: &[Uuid]| {
        let fixture = with_tier(fixture, |tier| {
            tier.cold_wait = Duration::from_millis(500);
            tier.cold = Arc::new(FailingUploads {
                silent_prefixes: silent
                    .iter()
                    .map(|token| ObjectPath::from(token.to_string()))
                    .collect(),
                ..FailingUploads::over(&tier.cold)
            });
        });
        let mut batch = Batch::default();
        for token in [first, second, third] {
            mark_for_cleaning(&mut batch, token);
        }
        fixture.tier.db.write(batch).unwrap();
        fixture
    };
    let clean = |tier: &Tier| {
        let settled = tier.clean_marked(&|_| Ok(false), &|| false).unwrap();
        (settled, tier.marked_for_cleaning().unwrap())
    };
    // One store that does not answer: the others are cleaned.
    let fixture = silent_at(fixture(), &[first]);
    assert_eq!(clean(&fixture.tier), (false, vec![first]));
    // Two in a row: the cleaning stops there, and the next takes them last.
    let fixture = silent_at(fixture, &[first, second]);
    fixture.tier.silent_stores.lock().clear();
    assert_eq!(clean(&fixture.tier), (false, vec![first, second, third]));
    assert_eq!(clean(&fixture.tier), (false, vec![first, second]));
}

/// An archived store whose cold tier, read through the object store (as from S3, not
/// copied from the local directory), holds the first read of an object's bytes (a restore's
/// download) until its park is released; the receiver hears when it holds one.
fn parked() -> (Fixture, Arc<Park>, std::sync::mpsc::Receiver<()>) {
    let (held, holding) = std::sync::mpsc::channel();
    let park = Arc::new(Park {
        armed: true.into(),
        held: std::sync::Mutex::new(held),
        release: tokio::sync::Notify::new(),
    });
    let fixture = with_tier(archived(), |tier| {
        tier.cold_dir = None;
        tier.cold = Arc::new(FailingUploads {
            parked: Some(Arc::clone(&park)),
            ..FailingUploads::over(&tier.cold)
        });
    });
    (fixture, park, holding)
}

/// A restore of instance `b_tas_1` on a thread of its own, once it is held in its download
/// (`holding` hears it: see [`parked`]); joined, it gives the restore's outcome.
fn restore_held(
    tier: &Arc<Tier>,
    holding: &std::sync::mpsc::Receiver<()>,
) -> std::thread::JoinHandle<Result<bool>> {
    let restore = std::thread::spawn({
        let tier = Arc::clone(tier);
        move || tier.restore_instance(TOKEN, "b_tas_1", None)
    });
    holding
        .recv_timeout(Duration::from_secs(10))
        .expect("the restore reads its object");
    restore
}

#[test]
fn a_store_busy_at_one_cleaning_is_cleaned_at_the_next_once_its_lock_frees() {
    // A real restore, held in the middle of its download from the cold tier: it holds the
    // store's lock as any restore does.
    let (fixture, park, holding) = parked();
    let tier = Arc::clone(&fixture.tier);
    let mut batch = Batch::default();
    mark_for_cleaning(&mut batch, TOKEN);
    tier.db.write(batch).unwrap();
    let restore = restore_held(&tier, &holding);
    // Not waiting in the lock (the first cleaning would not answer in time then).
    let (cleaned, cleaning) = std::sync::mpsc::channel();
    std::thread::spawn({
        let tier = Arc::clone(&tier);
        move || cleaned.send(tier.clean_marked(&|_| Ok(true), &|| false).unwrap())
    });
    assert_eq!(
        cleaning.recv_timeout(Duration::from_secs(10)),
        Ok(false),
        "the first cleaning waited for the store, or failed"
    );
    // The restore goes on while the next cleaning tries the store's lock.
    let delay = Duration::from_millis(100);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(delay);
        park.release.notify_one();
    });
    let started = Instant::now();
    assert!(
        tier.clean_marked(&|_| Ok(true), &|| false).unwrap(),
        "the second cleaning did not clean the store once the restore let its lock go"
    );
    assert!(
        started.elapsed() >= delay,
        "the second cleaning did not wait"
    );
    releaser.join().unwrap();
    assert!(restore.join().unwrap().unwrap(), "the restore went on");
    assert_eq!(state(&tier, "b_tas_1").state, State::Hot);
    assert_eq!(hot(&fixture, "tas/2.0"), Some(chunk(2)));
    assert_eq!(hot(&fixture, "tas/3.0"), Some(chunk(3)));
    assert!(!cold_files(&fixture).contains(&"b_tas_1".to_string()));
    assert!(tier.marked_for_cleaning().unwrap().is_empty());
}

#[test]
fn a_reader_waiting_for_a_restore_is_answered_when_the_daemon_stops_and_the_restore_goes_on() {
    // A restore held in the middle of its download, as a slow cold tier holds it.
    let (fixture, park, holding) = parked();
    let tier = Arc::clone(&fixture.tier);
    let stopping = Stop::default();
    let reader = std::thread::spawn({
        let (tier, stopping) = (Arc::clone(&tier), stopping.clone());
        move || {
            let asked = Asked::now("jane");
            let read =
                tier.restore_for_read(TOKEN, "tas/2.0", Duration::from_secs(20), &asked, &stopping);
            (read, Instant::now())
        }
    });
    holding
        .recv_timeout(Duration::from_secs(10))
        .expect("the restore reads its object");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!reader.is_finished(), "the reader did not wait");
    let asked_to_stop = Instant::now();
    stopping.request();
    let (read, answered) = reader.join().unwrap();
    assert!(matches!(read, Err(Error::Stopping { .. })), "{read:?}");
    assert!(
        answered.duration_since(asked_to_stop) < Duration::from_secs(2),
        "answered {:?} after the stop",
        answered.duration_since(asked_to_stop)
    );
    // The restore itself goes on, and a reader after it finds the keys hot.
    park.release.notify_one();
    let deadline = Instant::now() + Duration::from_secs(30);
    while state(&tier, "b_tas_1").state != State::Hot {
        assert!(Instant::now() < deadline, "the restore did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(hot(&fixture, "tas/2.0"), Some(chunk(2)));
    assert_eq!(hot(&fixture, "tas/3.0"), Some(chunk(3)));
}

#[test]
fn a_store_converted_again_during_a_restore_waits_for_it_until_the_daemon_stops() {
    let (fixture, park, holding) = parked();
    let tier = Arc::clone(&fixture.tier);
    let restore = restore_held(&tier, &holding);
    let stopping = Stop::default();
    let forgetting = std::thread::spawn({
        let (tier, stopping) = (Arc::clone(&tier), stopping.clone());
        move || (tier.forget_store(TOKEN, &stopping), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!forgetting.is_finished(), "it did not wait for the restore");
    let asked_to_stop = Instant::now();
    stopping.request();
    let (forgot, answered) = forgetting.join().unwrap();
    assert!(!forgot.unwrap(), "it forgot the store under a restore");
    assert!(answered.duration_since(asked_to_stop) < Duration::from_secs(2));
    // Nothing was forgotten: the restore goes on and ends as before.
    park.release.notify_one();
    assert!(restore.join().unwrap().unwrap(), "the restore went on");
    assert_eq!(state(&tier, "b_tas_1").state, State::Hot);
    assert_eq!(hot(&fixture, "tas/2.0"), Some(chunk(2)));
}

#[test]
fn a_listing_is_read_a_directory_at_a_time_in_pages() {
    let dir = tempfile::tempdir().unwrap();
    let tier = open(dir.path());
    let other = Uuid::from_u128(TOKEN.as_u128() + 1);
    let keys = [
        ".zattrs",
        ".zgroup",
        "a",
        "a/b",
        "g/sub/.zarray",
        "tas.x",
        "tas/.zarray",
        "tas/0.0",
        "tas/0.1",
        "tas/1.0",
        "x//y",
        "./z",
        "../w",
        "g/",
    ];
    let mut batch = Batch::default();
    let sized: Vec<(String, u64)> = (0u64..)
        .zip(keys)
        .map(|(n, k)| (k.to_string(), n))
        .collect();
    Tier::put_listing(&mut batch, TOKEN, &sized);
    // Another store's keys sort right after: never this store's.
    Tier::put_listing(&mut batch, other, &[("tas/9.9".to_string(), 1)]);
    tier.db.write(batch).unwrap();
    let all = |dir: &str, most: usize| {
        let mut entries = Vec::new();
        let mut from = String::new();
        loop {
            let page = tier.listed_entries(TOKEN, dir, &from, most).unwrap();
            assert!(page.entries.len() <= most);
            entries.extend(page.entries);
            match page.next {
                Some(next) => from = next,
                None => return entries,
            }
        }
    };
    use Listed::{Directory, File};
    // `a` is a key and a directory: the key; names empty, `.` or `..` are not shown.
    let top = vec![
        (".zattrs".to_string(), File(0)),
        (".zgroup".to_string(), File(1)),
        ("a".to_string(), File(2)),
        ("g".to_string(), Directory),
        ("tas.x".to_string(), File(5)),
        ("tas".to_string(), Directory),
        ("x".to_string(), Directory),
    ];
    for most in [1, 2, 3, 100] {
        assert_eq!(all("", most), top, "pages of {most}");
    }
    assert_eq!(
        all("tas/", 2),
        [(".zarray", 6), ("0.0", 7), ("0.1", 8), ("1.0", 9)]
            .map(|(name, size)| (name.to_string(), File(size)))
    );
    assert_eq!(all("g/", 5), [("sub".to_string(), Directory)]);
    assert_eq!(all("x/", 5), []);
    assert_eq!(all("nothing/", 5), []);
    let entry = |dir: &str, name: &str| tier.listed_entry(TOKEN, dir, name).unwrap();
    assert_eq!(entry("", "a"), Some(File(2)));
    assert_eq!(entry("", "tas"), Some(Directory));
    assert_eq!(entry("tas/", "0.1"), Some(File(8)));
    assert_eq!(entry("tas/", "9.9"), None);
    assert_eq!(entry("g/", "sub"), Some(Directory));
    for name in ["", ".", "..", "tas/0.0", "ta"] {
        assert_eq!(entry("", name), None, "{name:?}");
    }
    assert_eq!(entry("x/", ""), None);
}

#[test]
fn a_start_drops_the_listings_and_manifests_of_stores_not_ready_and_keeps_the_ready_ones() {
    let fixture = fixture();
    let tier = &fixture.tier;
    // A store whose conversion wrote its listing and manifest, and crashed before its record
    // said ready; another known only by its manifest; and thousands converted since that
    // never had either (each conversion forgets what a store had first).
    let (unready, manifest_only) = (Uuid::from_u128(7), Uuid::from_u128(8));
    let mut batch = Batch::default();
    Tier::put_listing(&mut batch, unready, &[("tas/0.0".into(), 600)]);
    batch.put(cf::MANIFESTS, unready.as_bytes().to_vec(), b"m".to_vec());
    batch.put(
        cf::MANIFESTS,
        manifest_only.as_bytes().to_vec(),
        b"m".to_vec(),
    );
    tier.db.write(batch).unwrap();
    let mut known: HashSet<Uuid> = [TOKEN, unready, manifest_only].into_iter().collect();
    for n in 100..2100 {
        let token = Uuid::from_u128(n);
        assert!(tier.forget_store(token, &Stop::default()).unwrap());
        known.insert(token);
    }
    tier.repair(&known, &[TOKEN], |_| unreachable!("the store is listed"))
        .unwrap();
    for gone in [unready, manifest_only] {
        assert!(!tier.has_state(gone).unwrap(), "{gone}");
    }
    assert!(tier.has_listing(TOKEN).unwrap());
    assert!(
        tier.db
            .get(cf::MANIFESTS, TOKEN.as_bytes())
            .unwrap()
            .is_some()
    );
}
