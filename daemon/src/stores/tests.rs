use super::*;
use crate::jobs::Job;

const MAX_TTL: u64 = 7 * 86_400;
const NOW: i64 = 1_800_000_000;

fn caller(user: &str) -> Caller {
    Caller {
        user: user.to_string(),
        admin: false,
    }
}

fn open(dir: &std::path::Path) -> (Arc<Queue>, Stores) {
    open_with_roots(dir, vec!["/data".into()])
}

fn open_with_roots(dir: &std::path::Path, allowed_roots: Vec<PathBuf>) -> (Arc<Queue>, Stores) {
    open_with(dir, allowed_roots, crate::config::MibOrAuto::Mib(0))
}

fn open_with(
    dir: &std::path::Path,
    allowed_roots: Vec<PathBuf>,
    max_user_mib: crate::config::MibOrAuto,
) -> (Arc<Queue>, Stores) {
    let db = Arc::new(Db::open(dir).unwrap());
    let queue = Arc::new(Queue::open(Arc::clone(&db)).unwrap());
    let config = StoresConfig {
        workers: 1,
        max_ttl_seconds: MAX_TTL,
        allowed_roots,
        unread_expiry_seconds: 30 * 86_400,
        compressor: crate::convert::Compressor::Lz4,
        hot_reserve_mib: crate::config::MibOrAuto::Mib(0),
        max_user_mib,
        max_conversion_seconds: 0,
        max_conversion_memory_mib: 0,
    };
    let daemon_config = crate::Config::from_sources(
        None,
        &[],
        &crate::Overrides {
            data_dir: Some(dir.to_path_buf()),
            listen: None,
        },
    )
    .unwrap();
    let mut tier = crate::tier::Tier::open(&daemon_config, Arc::clone(&db)).unwrap();
    // A store's job waits this long for the cold tier and the store's lock (10 s in the
    // daemon), so a test of a store held busy is quick.
    tier.set_cold_wait(std::time::Duration::from_secs(1));
    let tier = Arc::new(tier);
    let root = daemon_config.stores_dir();
    let stores = Stores::open(
        db,
        queue.clone(),
        config,
        root,
        &dir.join("share.key"),
        tier,
    )
    .unwrap();
    (queue, stores)
}

/// Records `status` for `reason` at `now` as a store's job would, under the records lock.
fn record_outcome(
    stores: &Stores,
    token: Uuid,
    status: Status,
    reason: &str,
    now: i64,
) -> Result<()> {
    let _record = stores.records.lock();
    let mut record = stores
        .record(token)?
        .ok_or_else(|| Error::NotFound(Missing::Store(token.to_string())))?;
    stores.write_outcome(&mut record, status, reason, now, Batch::default())
}

fn convert(json: &str) -> ConvertRequest {
    ConvertRequest::from_body(json.as_bytes(), MAX_TTL).unwrap()
}

#[test]
fn tokens_name_owner_and_sources_not_their_order_or_chunking() {
    let ab = ["/a.nc".to_string(), "/b.nc".to_string()];
    let ba = ["/b.nc".to_string(), "/a.nc".to_string()];
    assert_eq!(
        token("jane", &ab, None, None),
        token("jane", &ba, None, None)
    );
    assert_ne!(
        token("jane", &ab, None, None),
        token("john", &ab, None, None)
    );
    assert_ne!(
        token("jane", &ab[..1], None, None),
        token("jane", &ab, None, None)
    );
    assert_eq!(token("jane", &ab, None, None).get_version_num(), 5);
    // A name that looks like a pattern or a JSON fragment is just a name.
    assert_ne!(token("*", &ab, None, None), token("jane", &ab, None, None));
    assert_ne!(
        token("jane\",\"x", &ab, None, None),
        token("jane", &ab, None, None)
    );
}

#[test]
fn tokens_of_aggregated_stores_name_the_options_and_the_order_of_sources() {
    let ab = ["/a.nc".to_string(), "/b.nc".to_string()];
    let ba = ["/b.nc".to_string(), "/a.nc".to_string()];
    let concat = convert(r#"{"path": ["/a.nc"], "aggregate": "concat", "dim": "time"}"#)
        .aggregation
        .unwrap();
    let merge = convert(r#"{"path": ["/a.nc"], "aggregate": "merge"}"#)
        .aggregation
        .unwrap();
    // A concatenation's order is its sources' order.
    assert_ne!(
        token("jane", &ab, Some(&concat), None),
        token("jane", &ba, Some(&concat), None)
    );
    assert_ne!(
        token("jane", &ab, Some(&concat), None),
        token("jane", &ab, Some(&merge), None)
    );
    assert_ne!(
        token("jane", &ab, Some(&merge), None),
        token("jane", &ab, None, None)
    );
    // Options without `aggregate` do nothing and name the same store.
    let plain = convert(r#"{"path": ["/a.nc"], "join": "outer", "compat": "override"}"#);
    assert_eq!(plain.aggregation, None);
}

#[test]
fn tokens_of_reduced_stores_name_every_reduction_option() {
    let a = ["/a.nc".to_string()];
    let reduction = |json: &str| convert(json).reduction.unwrap();
    let monthly = reduction(r#"{"path": "/a.nc", "time_freq": "monthly"}"#);
    let variants = [
        reduction(r#"{"path": "/a.nc", "time_freq": "daily"}"#),
        reduction(r#"{"path": "/a.nc", "time_freq": "monthly", "time_method": "max"}"#),
        reduction(r#"{"path": "/a.nc", "time_freq": "monthly", "climatology": true}"#),
        reduction(r#"{"path": "/a.nc", "time_freq": "monthly", "min_coverage": 0.5}"#),
        reduction(r#"{"path": "/a.nc", "time_freq": "monthly", "dtype": "keep"}"#),
    ];
    let plain = token("jane", &a, None, None);
    let reduced = token("jane", &a, None, Some(&monthly));
    assert_ne!(plain, reduced);
    for other in &variants {
        assert_ne!(reduced, token("jane", &a, None, Some(other)), "{other:?}");
    }
    // The defaults spelt out name the same store.
    let spelt = reduction(
        r#"{"path": "/a.nc", "time_freq": "monthly", "time_method": "mean", "dtype": "float32",
            "climatology": false, "min_coverage": 0}"#,
    );
    assert_eq!(reduced, token("jane", &a, None, Some(&spelt)));
    assert_ne!(reduced, token("john", &a, None, Some(&monthly)));
}

#[test]
fn one_store_per_source_each_queued_once() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, stores) = open(dir.path());
    let jane = caller("jane");
    let request = convert(r#"{"path": ["/data/a.nc", "/data/b.nc"], "chunk_size": 4}"#);
    let first = stores.request(&jane, &request, NOW).unwrap();
    assert_eq!(first.len(), 2);
    for record in &first {
        assert_eq!(record.status, Status::Preparing);
        assert_eq!(record.owner, "jane");
        assert!((record.chunking.chunk_size_mib - 4.0).abs() < f64::EPSILON);
        let job: Job = queue.find(CONVERT, &record.token.to_string()).unwrap();
        assert_eq!(job.subject, record.token.to_string());
        assert_eq!(stores.record(record.token).unwrap().as_ref(), Some(record));
    }
    // The same request again names the same stores and queues nothing new.
    let again = stores
        .request(
            &jane,
            &convert(r#"{"path": ["/data/a.nc", "/data/b.nc"]}"#),
            NOW + 5,
        )
        .unwrap();
    assert_eq!(again, first, "reused as they are, chunking included");
    assert_eq!(queue.len(), 2);
}

#[test]
fn failed_stores_and_reloads_are_converted_again() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, stores) = open(dir.path());
    let jane = caller("jane");
    let [record] = stores
        .request(&jane, &convert(r#"{"path": "/data/a.nc"}"#), NOW)
        .unwrap()
        .try_into()
        .unwrap();
    // The job's outcome, as the queue commits it.
    record_outcome(
        &stores,
        record.token,
        Status::Failed,
        "/data/a.nc: no such file",
        NOW + 1,
    )
    .unwrap();
    let failed = stores.record(record.token).unwrap().unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.reason, "/data/a.nc: no such file");
    let retried = stores
        .request(&jane, &convert(r#"{"path": "/data/a.nc"}"#), NOW + 2)
        .unwrap();
    assert_eq!(retried[0].status, Status::Preparing);
    assert_eq!(retried[0].created, NOW, "a store keeps its birth time");
    record_outcome(&stores, record.token, Status::Ready, "", NOW + 3).unwrap();
    let reloaded = stores
        .request(
            &jane,
            &convert(r#"{"path": "/data/a.nc", "reload": true, "access_pattern": "time_series"}"#),
            NOW + 4,
        )
        .unwrap();
    assert_eq!(reloaded[0].status, Status::Preparing);
    assert_eq!(
        reloaded[0].chunking.access_pattern,
        request::AccessPattern::TimeSeries
    );
    assert_eq!(queue.len(), 1, "one job per store");
}

#[test]
fn each_conversion_of_a_store_is_counted_even_within_one_second() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, jane, record) = one_store(dir.path(), 1.0);
    assert_eq!(record.conversion, 1);
    let ready = |stores: &Stores| {
        record_outcome(stores, record.token, Status::Ready, "", NOW).unwrap();
        convert_into(stores, &record, &record.chunking, &stores.dir(record.token));
    };
    ready(&stores);
    assert!(
        stores
            .hot_chunk(record.token, "tas/0.0.0", 1, NOW)
            .unwrap()
            .is_some()
    );
    // A reload converted and finished within the same second, as a fast conversion does:
    // only the counter tells the two apart.
    let reload = convert(&format!(
        r#"{{"path": "{}", "reload": true}}"#,
        record.sources[0]
    ));
    let [again] = stores
        .request(&jane, &reload, NOW)
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(again.conversion, 2);
    ready(&stores);
    let now = stores.record(record.token).unwrap().unwrap();
    assert_eq!((now.updated, now.conversion), (NOW, 2));
    assert!(now.is_complete_conversion(2) && !now.is_complete_conversion(1));
    assert!(
        stores
            .hot_chunk(record.token, "tas/0.0.0", 1, NOW)
            .unwrap()
            .is_none(),
        "the earlier conversion's reader is not handed the new conversion's file"
    );
    assert!(
        stores
            .hot_chunk(record.token, "tas/0.0.0", 2, NOW)
            .unwrap()
            .is_some()
    );
    // A record kept before conversions were counted is its conversion 0.
    let mut stored = serde_json::to_value(&now).unwrap();
    stored.as_object_mut().unwrap().remove("conversion");
    let old: StoreRecord = serde_json::from_value(stored).unwrap();
    assert_eq!(old.conversion, 0);
}

#[test]
fn a_conversion_outcome_is_recorded_only_while_the_store_still_prepares_it() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, jane, record) = one_store(dir.path(), 1.0);
    let reload = convert(&format!(
        r#"{{"path": "{}", "reload": true}}"#,
        record.sources[0]
    ));
    // Reloaded while conversion 1 ran, with other options, or with its source changed
    // since the run started: the run's outcome is not recorded, the reload's is.
    let started = std::time::SystemTime::now();
    let time_series = convert(&format!(
        r#"{{"path": "{}", "reload": true, "access_pattern": "time_series"}}"#,
        record.sources[0]
    ));
    stores.request(&jane, &time_series, NOW).unwrap();
    let outcome = |run: &StoreRecord, started| {
        stores
            .record_conversion_outcome(run, started, (Status::Ready, ""), 0, NOW, Batch::default())
            .unwrap()
            .is_some()
    };
    assert!(!outcome(&record, started));
    let now = stores.record(record.token).unwrap().unwrap();
    assert_eq!((now.status, now.conversion), (Status::Preparing, 2));
    let before_the_source = std::time::UNIX_EPOCH;
    let second = now.clone();
    stores.request(&jane, &time_series, NOW).unwrap();
    assert!(!outcome(&second, before_the_source));
    // The same sources and options, unchanged since the run started: the run's result is
    // the reload's too.
    assert!(outcome(&second, std::time::SystemTime::now()));
    let now = stores.record(record.token).unwrap().unwrap();
    assert_eq!((now.status, now.conversion), (Status::Ready, 3));
    // Reloaded, and a run fails while the reload's job waits: the store is left to it.
    stores.request(&jane, &reload, NOW).unwrap();
    let waiting = stores
        .queue
        .find(CONVERT, &record.token.to_string())
        .unwrap();
    assert!(
        !stores
            .record_conversion_failed(record.token, waiting.seq + 1, "a run failed", NOW)
            .unwrap()
    );
    let now = stores.record(record.token).unwrap().unwrap();
    assert_eq!((now.status, now.conversion), (Status::Preparing, 4));
    // Removed while converting again: a late outcome does not bring it back.
    stores
        .remove(record.token, "removed by an operator", NOW)
        .unwrap();
    assert!(!outcome(&now, std::time::SystemTime::now()));
    assert!(
        !stores
            .record_conversion_failed(record.token, 7, "too late", NOW)
            .unwrap()
    );
    assert_eq!(
        stores.record(record.token).unwrap().unwrap().status,
        Status::Gone
    );
}

#[test]
fn a_source_the_caller_may_not_read_creates_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let (queue, stores) = open(dir.path());
    let err = stores
        .request(
            &caller("jane"),
            &convert(r#"{"path": ["/data/a.nc", "/etc/shadow"]}"#),
            NOW,
        )
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Forbidden);
    assert!(err.to_string().contains("/etc/shadow"), "{err}");
    assert!(queue.is_empty());
    let mut recorded = 0;
    stores
        .db
        .for_each(cf::STORES, |_, _| {
            recorded += 1;
            Ok(true)
        })
        .unwrap();
    assert_eq!(recorded, 0);
}

#[test]
fn an_operator_lists_and_removes_stores() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, stores) = open(dir.path());
    let made = stores
        .request(
            &caller("jane"),
            &convert(r#"{"path": ["/data/a.nc", "/data/b.nc"]}"#),
            NOW,
        )
        .unwrap();
    let mut listed: Vec<Uuid> = stores.list().unwrap().iter().map(|r| r.token).collect();
    let mut expected: Vec<Uuid> = made.iter().map(|r| r.token).collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    std::fs::create_dir_all(stores.dir(made[0].token)).unwrap();
    let gone = stores
        .remove(made[0].token, "removed by an operator", NOW + 1)
        .unwrap();
    assert_eq!(gone.status, Status::Gone);
    // Its data goes with its job, the one its request queued.
    let job = stores.queue.find(CONVERT, &made[0].token.to_string());
    assert_eq!(job.map(|j| j.starts), Some(0));
    let stores = Arc::new(stores);
    assert!(run_store_job(&stores, made[0].token));
    assert!(!stores.dir(made[0].token).exists());
    let err = stores
        .read(
            Some(&caller("jane")),
            made[0].token,
            ".zmetadata",
            NOW + 2,
            std::time::Duration::ZERO,
        )
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::NotFound);
    assert_eq!(
        stores.remove(Uuid::new_v4(), "", NOW).unwrap_err().kind(),
        crate::ErrorKind::NotFound
    );
}

/// Runs the job of store `token` waiting, here (the queue of `stores` has no workers);
/// whether one was waiting.
fn run_store_job(stores: &Arc<Stores>, token: Uuid) -> bool {
    let handler = job::ConvertJob {
        stores: Arc::clone(stores),
    };
    stores
        .queue
        .run_waiting(CONVERT, &token.to_string(), &handler)
}

/// Runs the store jobs of `stores` with a worker whose first job, once done, is held running
/// until the returned sender sends (or is dropped); the receiver hears when it is held.
fn hold_first_job(
    stores: &Arc<Stores>,
) -> (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>) {
    struct Held {
        job: job::ConvertJob,
        held: parking_lot::Mutex<
            Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>,
        >,
    }
    impl crate::jobs::Handler for Held {
        fn run(&self, job: &Job, stop: &crate::jobs::Stop) -> Result<crate::jobs::Outcome> {
            let outcome = self.job.run(job, stop);
            if let Some((held, release)) = self.held.lock().take() {
                held.send(()).unwrap();
                let _ = release.recv();
            }
            outcome
        }
        fn give_up(&self, job: &Job, reason: &str) -> Batch {
            self.job.give_up(job, reason)
        }
    }
    let (held, is_held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel();
    let handler: Arc<dyn crate::jobs::Handler> = Arc::new(Held {
        job: job::ConvertJob {
            stores: Arc::clone(stores),
        },
        held: parking_lot::Mutex::new(Some((held, released))),
    });
    stores.queue.start(1, &handler).unwrap();
    (release, is_held)
}

#[test]
fn a_removal_deletes_nothing_under_a_running_job_of_the_store_and_yields_to_a_reconversion() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, jane, record) = one_store(dir.path(), 2.0);
    let stores = Arc::new(stores);
    let token = record.token;
    let source = dir.path().join("data/a.nc");
    let chunk = stores.dir(token).join("tas/0.0.0");
    let read = |key| stores.read(Some(&jane), token, key, NOW, std::time::Duration::ZERO);
    let run_waiting = || run_store_job(&stores, token);
    assert!(run_waiting());
    let converted = std::fs::read(&chunk).unwrap();
    // Removed, and asked for again before the removal's job ran: that job converts, and
    // the store is whole.
    stores.remove(token, "removed by an operator", NOW).unwrap();
    assert_eq!(
        read(".zmetadata").unwrap_err().kind(),
        crate::ErrorKind::NotFound
    );
    let again = request_one(&stores, &jane, &source);
    assert_eq!((again.status, stores.queue.len()), (Status::Preparing, 1));
    assert!(run_waiting());
    assert_eq!(stores.record(token).unwrap().unwrap().status, Status::Ready);
    assert_eq!(read("tas/0.0.0").unwrap().bytes, converted);
    // Converted again, everything written, and its job still runs: a removal now deletes
    // none of it (a conversion still writing could otherwise end ready with files missing,
    // or the deletion fail on a directory not empty).
    let reload = convert(&format!(
        r#"{{"path": "{}", "reload": true}}"#,
        source.display()
    ));
    stores.request(&jane, &reload, NOW).unwrap();
    let (release, is_held) = hold_first_job(&stores);
    is_held.recv().unwrap();
    assert_eq!(stores.record(token).unwrap().unwrap().status, Status::Ready);
    stores.remove(token, "removed by an operator", NOW).unwrap();
    assert_eq!(
        std::fs::read(&chunk).ok(),
        Some(converted),
        "deleted under the running job"
    );
    // Its own job deletes it, after the running one.
    release.send(()).unwrap();
    stores.queue.wait_idle();
    assert!(!stores.dir(token).exists());
    assert!(
        stores
            .tier
            .listed_entry(token, "tas", "0.0.0")
            .unwrap()
            .is_none()
    );
    stores.queue.stop();
}

#[test]
fn stores_are_listed_a_bounded_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, stores) = open(dir.path());
    let paths: Vec<String> = (0..20).map(|n| format!("/data/{n}.nc")).collect();
    let made = stores
        .request(
            &caller("jane"),
            &convert(&serde_json::json!({ "path": paths }).to_string()),
            NOW,
        )
        .unwrap();
    let mut ready: Vec<Uuid> = made.iter().step_by(3).map(|r| r.token).collect();
    for &token in &ready {
        record_outcome(&stores, token, Status::Ready, "", NOW).unwrap();
    }
    ready.sort();
    let (mut listed, mut from, mut pages) = (Vec::new(), None, 0);
    loop {
        let (page, next) = stores
            .list_page(from, 2, 4, StoreRecord::is_complete)
            .unwrap();
        assert!(page.len() <= 2);
        listed.extend(page.iter().map(|r| r.token));
        pages += 1;
        match next {
            // Every page starts after the last: the records read are each read once.
            Some(next) => {
                assert!(listed.last().is_none_or(|&last| last < next));
                from = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(listed, ready);
    // 20 records, at most 4 read a page: at least 5 pages, some of them empty.
    assert!(pages >= 5, "{pages} pages");
    let (all, next) = stores.list_page(None, 100, 100, |_| true).unwrap();
    assert_eq!((all.len(), next), (20, None));
}

#[test]
fn an_expired_stores_data_is_deleted_by_its_job_and_a_failed_deletion_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, _jane, record) = one_store(dir.path(), 4.0);
    let stores = Arc::new(stores);
    let token = record.token;
    let run_waiting = || run_store_job(&stores, token);
    assert!(run_waiting());
    let data = stores.dir(token);
    assert!(data.join("tas/0.0.0").exists());
    // Unread for a month: gone, and its job queued to delete the data.
    let month = 30 * 86_400;
    assert_eq!(stores.sweep(NOW + month + 1).unwrap(), 1);
    assert_eq!(stores.record(token).unwrap().unwrap().status, Status::Gone);
    // The deletion fails (a file stands where the directory was): the job is given up.
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();
    assert!(run_waiting());
    assert!(stores.queue.is_empty() && data.exists());
    // The cause gone, the next sweep queues the deletion again, and it deletes.
    std::fs::remove_file(&data).unwrap();
    std::fs::create_dir_all(data.join("tas")).unwrap();
    std::fs::write(data.join("tas/0.0.0"), b"left").unwrap();
    assert_eq!(stores.sweep(NOW + month + 2).unwrap(), 0);
    assert!(run_waiting());
    assert!(!data.exists());
    // An operator's removal of a store gone queues its deletion again, and keeps why it went.
    std::fs::create_dir_all(&data).unwrap();
    let again = stores.remove(token, "removed by an operator", NOW).unwrap();
    assert_eq!(again.reason, "removed: not read for 30 days");
    assert!(run_waiting());
    assert!(!data.exists());
}

#[test]
fn a_record_is_read_as_it_is_stored_now_whatever_was_read_before() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, _jane, record) = one_store(dir.path(), 4.0);
    let token = record.token;
    let store = |record: &StoreRecord| {
        let mut batch = Batch::default();
        batch.put(cf::STORES, token.as_bytes().to_vec(), record.encode());
        stores.db.write(batch).unwrap();
    };
    // Read both ways: as stored, and shared (decoded before, and kept while no record is
    // written).
    let read = || {
        let stored = stores.record(token).unwrap();
        let shared = stores.shared_record(token).unwrap();
        assert_eq!(shared.as_deref(), stored.as_ref());
        stored
    };
    assert_eq!(read().as_ref(), Some(&record));
    // Read again with no write between: the record decoded before.
    let first = stores.shared_record(token).unwrap().unwrap();
    let again = stores.shared_record(token).unwrap().unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    // Stored bytes of the same length each time, a digit apart.
    for until in [NOW + 100, NOW + 200, NOW + 100] {
        let shared = StoreRecord {
            public_until: Some(until),
            ..record.clone()
        };
        store(&shared);
        assert_eq!(read(), Some(shared));
    }
    store(&record);
    assert_eq!(read(), Some(record.clone()));
    // A write of another store's record, or of another family, changes nothing read.
    let mut batch = Batch::default();
    batch.put(
        cf::STORES,
        Uuid::new_v4().as_bytes().to_vec(),
        record.encode(),
    );
    batch.put(cf::META, b"unrelated".to_vec(), b"1".to_vec());
    stores.db.write(batch).unwrap();
    assert_eq!(read(), Some(record));
    let mut batch = Batch::default();
    batch.delete(cf::STORES, token.as_bytes().to_vec());
    stores.db.write(batch).unwrap();
    assert_eq!(read(), None);
}

#[test]
fn records_stored_with_their_sources_are_rewritten_without_them_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, _jane, record) = one_store(dir.path(), 4.0);
    let (token, key) = (record.token, record.token.as_bytes().to_vec());
    // Stored without its sources, which are stored apart.
    let stored = stores.db.get(cf::STORES, &key).unwrap().unwrap();
    assert_eq!(stored[0], FORMAT);
    assert!(!String::from_utf8_lossy(&stored).contains(&*record.sources[0]));
    // As a daemon before format 2 stored it: with its sources, none apart.
    let mut batch = Batch::default();
    batch.put(
        cf::STORES,
        key.clone(),
        db::encode_json(FORMAT_WITH_SOURCES, &record),
    );
    batch.delete(cf::STORE_SOURCES, key.clone());
    stores.db.write(batch).unwrap();
    assert_eq!(stores.record(token).unwrap().as_ref(), Some(&record));
    drop(stores);
    let roots = vec![dir.path().join("data")];
    let (_queue, stores) = open_with_roots(&dir.path().join("db"), roots);
    assert_eq!(stores.record(token).unwrap(), Some(record));
    assert_eq!(stores.db.get(cf::STORES, &key).unwrap().unwrap()[0], FORMAT);
    assert!(stores.db.get(cf::STORE_SOURCES, &key).unwrap().is_some());
}

#[test]
fn a_removed_stores_state_left_after_its_directory_went_is_deleted_again() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, _jane, record) = one_store(dir.path(), 4.0);
    let stores = Arc::new(stores);
    let token = record.token;
    assert!(run_store_job(&stores, token));
    assert!(
        stores.tier.has_state(token).unwrap(),
        "a ready store has its listing"
    );
    // Its directory deleted by hand, and an archive of it under way (holding its lock) as
    // it is removed: the deletion fails after the directory went, its listing left.
    std::fs::remove_dir_all(stores.dir(token)).unwrap();
    let store_lock = stores.tier.store_lock(token);
    let archiving = store_lock.write();
    stores.remove(token, "removed by an operator", NOW).unwrap();
    assert!(run_store_job(&stores, token));
    assert!(stores.queue.is_empty() && stores.tier.has_state(token).unwrap());
    drop(archiving);
    // The next sweep queues the deletion again, and it deletes what was left.
    assert_eq!(stores.sweep(NOW + 1).unwrap(), 0);
    assert!(
        run_store_job(&stores, token),
        "the sweep queued the deletion again"
    );
    assert!(!stores.tier.has_state(token).unwrap());
    assert!(!stores.data_left(token));
}

#[test]
fn a_chunk_read_under_way_when_its_store_is_converted_again_or_removed_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, jane, record) = one_store(dir.path(), 5.0);
    let stores = Arc::new(stores);
    let token = record.token;
    assert!(run_store_job(&stores, token));
    let chunk = stores.dir(token).join("tas/0.0.0");
    let bytes = std::fs::read(&chunk).unwrap();
    let source = dir.path().join("data/a.nc");
    let reload = convert(&format!(
        r#"{{"path": "{}", "reload": true}}"#,
        source.display()
    ));
    // The chunk file becomes a FIFO: a read opening it waits there until it is written,
    // after the store changed under it (a reload's job, or a removal, as the read runs).
    let fifo = |chunk: &std::path::Path| {
        std::fs::remove_file(chunk).unwrap();
        nix::unistd::mkfifo(chunk, nix::sys::stat::Mode::S_IRWXU).unwrap();
    };
    // Opened for writing once the read has it open (before, the FIFO has no reader: ENXIO),
    // so the read has taken its record by then.
    let writer = |chunk: &std::path::Path| loop {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(chunk);
        match opened {
            Ok(writer) => break writer,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("{e}"),
        }
    };
    use std::io::Write;
    for change in ["converted again", "removed"] {
        fifo(&chunk);
        let reading = {
            let (stores, jane) = (Arc::clone(&stores), jane.clone());
            std::thread::spawn(move || {
                stores.read(
                    Some(&jane),
                    token,
                    "tas/0.0.0",
                    NOW,
                    std::time::Duration::ZERO,
                )
            })
        };
        let mut written = writer(&chunk);
        match change {
            "converted again" => drop(stores.request(&jane, &reload, NOW).unwrap()),
            _ => drop(stores.remove(token, "removed by an operator", NOW).unwrap()),
        }
        written.write_all(&bytes).unwrap();
        drop(written);
        let kind = reading
            .join()
            .unwrap()
            .map(|read| read.etag)
            .unwrap_err()
            .kind();
        let expected = match change {
            "converted again" => crate::ErrorKind::Unavailable,
            _ => crate::ErrorKind::NotFound,
        };
        assert_eq!(kind, expected, "{change}");
        // Converted again: ready once more for the next round.
        if change == "converted again" {
            std::fs::remove_file(&chunk).unwrap();
            assert!(run_store_job(&stores, token));
        }
    }
}

#[test]
fn the_sweep_removes_stores_nobody_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, stores) = open(dir.path());
    let made = stores
        .request(
            &caller("jane"),
            &convert(r#"{"path": ["/data/read.nc", "/data/unread.nc", "/data/busy.nc"]}"#),
            NOW,
        )
        .unwrap();
    let (read, unread, busy) = (made[0].token, made[1].token, made[2].token);
    for token in [read, unread] {
        record_outcome(&stores, token, Status::Ready, "", NOW).unwrap();
    }
    let month = 30 * 86_400;
    // Read on day 20: kept on day 31, removed 30 days after that read.
    stores.reads.note(read, NOW + 20 * 86_400);
    assert_eq!(stores.sweep(NOW + 10).unwrap(), 0);
    assert_eq!(stores.sweep(NOW + month + 1).unwrap(), 1);
    let status = |token| stores.record(token).unwrap().unwrap().status;
    assert_eq!(status(unread), Status::Gone);
    assert_eq!(
        status(read),
        Status::Ready,
        "its read was written by the first sweep"
    );
    assert_eq!(
        status(busy),
        Status::Preparing,
        "a store being converted stays"
    );
    assert_eq!(stores.sweep(NOW + 20 * 86_400 + month + 1).unwrap(), 1);
    assert_eq!(status(read), Status::Gone);
    let reason = stores.record(read).unwrap().unwrap().reason;
    assert_eq!(reason, "removed: not read for 30 days");
}

#[test]
fn the_sweep_the_start_and_the_mounts_listing_do_not_read_sources() {
    let dir = tempfile::tempdir().unwrap();
    let sources: Vec<String> = (0..1000).map(|n| format!("/data/part-{n:04}.nc")).collect();
    let body = serde_json::json!({"path": sources, "aggregate": "concat", "dim": "time"});
    let token = {
        let (_queue, stores) = open(dir.path());
        let made = stores
            .request(&caller("jane"), &convert(&body.to_string()), NOW)
            .unwrap();
        let token = made[0].token;
        record_outcome(&stores, token, Status::Failed, "", NOW).unwrap();
        // Their sources taken away: what reads them fails from here on.
        let mut batch = Batch::default();
        batch.delete(cf::STORE_SOURCES, token.as_bytes().to_vec());
        stores.db.write(batch).unwrap();
        stores.sources.clear();
        assert!(stores.record(token).is_err());
        token
    };
    let (_queue, stores) = open(dir.path());
    stores.reads.note(token, NOW + 5);
    assert_eq!(stores.sweep(NOW + 10).unwrap(), 0);
    let (page, _) = stores.list_page(None, 10, 10, |_| true).unwrap();
    assert_eq!(page.len(), 1);
    assert!(page[0].sources.is_empty());
    // The sweep wrote the read into the record, which is stored without its sources
    // whichever way it was read: put back, they are the request's.
    let mut batch = Batch::default();
    batch.put(
        cf::STORE_SOURCES,
        token.as_bytes().to_vec(),
        encode_sources(&sources),
    );
    stores.db.write(batch).unwrap();
    let record = stores.record(token).unwrap().unwrap();
    assert_eq!(record.last_read, NOW + 5);
    assert_eq!(&*record.sources, sources.as_slice());
}

#[test]
fn only_owner_and_admins_read_a_private_store_and_anyone_a_public_one_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, stores) = open(dir.path());
    let jane = caller("jane");
    let private = stores
        .request(&jane, &convert(r#"{"path": "/data/a.nc"}"#), NOW)
        .unwrap()
        .remove(0);
    let admin = Caller {
        user: "root".into(),
        admin: true,
    };
    assert!(stores.readable(Some(&jane), private.token, NOW).is_ok());
    assert!(stores.readable(Some(&admin), private.token, NOW).is_ok());
    for anonymous in [private.token, Uuid::new_v4()] {
        let err = stores.readable(None, anonymous, NOW).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unauthenticated);
    }
    for stranger in [Some(caller("john")), Some(caller("*")), Some(caller(""))] {
        let err = stores
            .readable(stranger.as_ref(), private.token, NOW)
            .unwrap_err();
        let nobody = Uuid::new_v4();
        let unknown = stores.readable(stranger.as_ref(), nobody, NOW).unwrap_err();
        // A stranger cannot tell another's store from none.
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
        assert_eq!(unknown.kind(), crate::ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            unknown
                .to_string()
                .replace(&nobody.to_string(), &private.token.to_string())
        );
    }
    let public = stores
        .request(
            &jane,
            &convert(r#"{"path": "/data/b.nc", "public": true, "ttl_seconds": 600}"#),
            NOW,
        )
        .unwrap()
        .remove(0);
    assert_eq!(public.public_until, Some(NOW + 600));
    assert!(stores.readable(None, public.token, NOW + 599).is_ok());
    assert!(stores.readable(None, public.token, NOW + 600).is_err());
    assert!(
        stores
            .readable(Some(&jane), public.token, NOW + 600)
            .is_ok()
    );
}

#[test]
fn a_public_store_shared_by_another_user_is_shared_only_while_it_is_public() {
    let dir = tempfile::tempdir().unwrap();
    let (_queue, stores) = open(dir.path());
    let (rita, sam) = (caller("rita"), caller("sam"));
    let public = stores
        .request(
            &rita,
            &convert(r#"{"path": "/data/b.nc", "public": true, "ttl_seconds": 60}"#),
            NOW,
        )
        .unwrap()
        .remove(0);
    let week = 7 * 86_400;
    // Sam, while it is public, asks for a week: the share ends with the public time.
    let shared = stores.share(&sam, public.token, week, NOW + 10).unwrap();
    assert_eq!(shared.expires, NOW + 60);
    assert!(
        stores
            .share_key
            .verify(&shared.sig, public.token, NOW + 59)
            .is_ok()
    );
    let expired = stores.share_key.verify(&shared.sig, public.token, NOW + 60);
    assert_eq!(expired.unwrap_err().kind(), crate::ErrorKind::Forbidden);
    // Its owner and admins share it for as long as they ask.
    let admin = Caller {
        user: "root".into(),
        admin: true,
    };
    for sharer in [&rita, &admin] {
        let shared = stores.share(sharer, public.token, week, NOW + 10).unwrap();
        assert_eq!(shared.expires, NOW + 10 + i64::try_from(week).unwrap());
    }
    // Once it is no longer public, Sam cannot share it at all; once it is gone, nobody can.
    let err = stores
        .share(&sam, public.token, week, NOW + 60)
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::NotFound);
    stores
        .remove(public.token, "removed by its owner", NOW + 70)
        .unwrap();
    let err = stores
        .share(&rita, public.token, week, NOW + 80)
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::NotFound);
}

/// A NetCDF file with `tas(time=2, lat=3, lon=4)` all `value`.
fn constant_file(path: &std::path::Path, value: f32) {
    let mut file = netcdf::create(path).unwrap();
    file.add_dimension("time", 2).unwrap();
    file.add_dimension("lat", 3).unwrap();
    file.add_dimension("lon", 4).unwrap();
    let mut tas = file
        .add_variable::<f32>("tas", &["time", "lat", "lon"])
        .unwrap();
    tas.put_values(&[value; 24], ..).unwrap();
}

/// A file of `steps` time steps of one value each: its store has a chunk file per step.
fn steps_file(path: &std::path::Path, steps: usize) {
    let mut file = netcdf::create(path).unwrap();
    file.add_dimension("time", steps).unwrap();
    let mut tas = file.add_variable::<f32>("tas", &["time"]).unwrap();
    tas.put_values(&vec![1.0; steps], ..).unwrap();
}

#[test]
fn one_users_stores_take_at_most_their_bound_and_the_other_users_convert_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let (queue, stores) = open_with(
        &dir.path().join("db"),
        vec![data.clone()],
        crate::config::MibOrAuto::Mib(1),
    );
    let stores = Arc::new(stores);
    // Each store: 100 chunk files and its metadata documents, 4 KiB each on disk, about
    // 420 KiB of the 1 MiB one user's stores may take.
    let paths: Vec<_> = (0..3)
        .map(|n| {
            let path = data.join(format!("{n}.nc"));
            steps_file(&path, 100);
            path
        })
        .collect();
    let converted = |who: &Caller, body: String| {
        let [record] = stores
            .request(who, &convert(&body), NOW)
            .unwrap()
            .try_into()
            .unwrap();
        assert!(run_store_job(&stores, record.token));
        stores.record(record.token).unwrap().unwrap()
    };
    let one = |path: &std::path::Path| format!(r#"{{"path": "{}"}}"#, path.display());
    let (jane, john) = (caller("jane"), caller("jane2"));
    let first = converted(&jane, one(&paths[0]));
    assert_eq!(first.status, Status::Ready, "{}", first.reason);
    assert!(
        (100 * 4096..110 * 4096).contains(&first.bytes),
        "{}",
        first.bytes
    );
    let second = converted(&jane, one(&paths[1]));
    assert_eq!(second.status, Status::Ready, "{}", second.reason);
    // The third would take her stores past the bound: it fails, and its data goes.
    let third = converted(&jane, one(&paths[2]));
    assert_eq!(third.status, Status::Failed);
    let refused = "2.nc: the stores of \"jane\" would take more than the 1.0 MiB one user's \
                   stores may take (stores.max_user_mib; they take ";
    assert!(third.reason.contains(refused), "{}", third.reason);
    assert_eq!(third.bytes, 0);
    assert!(!stores.dir(third.token).exists());
    // Another user's conversion of the same file is not held to hers.
    let johns = converted(&john, one(&paths[2]));
    assert_eq!(johns.status, Status::Ready, "{}", johns.reason);
    let reload =
        |path: &std::path::Path| format!(r#"{{"path": "{}", "reload": true}}"#, path.display());
    // A store reloaded counts its files until its conversion records new ones, and a
    // store removed until its data is deleted: both are still on disk.
    let [reloaded] = stores
        .request(&jane, &convert(&reload(&paths[1])), NOW)
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        (reloaded.status, reloaded.bytes),
        (Status::Preparing, second.bytes)
    );
    stores
        .remove(first.token, "removed by its owner", NOW)
        .unwrap();
    let again = converted(&jane, reload(&paths[2]));
    assert_eq!(again.status, Status::Failed, "{}", again.reason);
    assert!(again.reason.contains(refused), "{}", again.reason);
    assert!(run_store_job(&stores, second.token));
    assert_eq!(
        stores.record(second.token).unwrap().unwrap().status,
        Status::Ready
    );
    // The removed store's data deleted, there is room.
    assert!(run_store_job(&stores, first.token));
    assert_eq!(stores.record(first.token).unwrap().unwrap().bytes, 0);
    let again = converted(&jane, reload(&paths[2]));
    assert_eq!(again.token, third.token);
    assert_eq!(again.status, Status::Ready, "{}", again.reason);
    // Once the conversions are done, what her stores take is what their records count.
    let recorded: u64 = [first.token, second.token, third.token]
        .iter()
        .map(|token| stores.record(*token).unwrap().unwrap().bytes)
        .sum();
    assert!(recorded > 0);
    assert_eq!(stores.ledger.stored("jane"), recorded);
    assert_eq!(stores.ledger.stored("jane2"), johns.bytes);
    // A daemon started again counts them from the records.
    drop((stores, queue));
    let (_queue, stores) = open_with(
        &dir.path().join("db"),
        vec![data],
        crate::config::MibOrAuto::Mib(1),
    );
    assert_eq!(stores.ledger.stored("jane"), recorded);
    assert_eq!(stores.ledger.stored("jane2"), johns.bytes);
}

/// The store `caller` gets for the one file `path`.
fn request_one(stores: &Stores, caller: &Caller, path: &std::path::Path) -> StoreRecord {
    let body = format!(r#"{{"path": "{}"}}"#, path.display());
    let [record] = stores
        .request(caller, &convert(&body), NOW)
        .unwrap()
        .try_into()
        .unwrap();
    record
}

/// Jane's store of a constant file `data/a.nc` under `dir`, `data` an allowed root.
fn one_store(dir: &std::path::Path, value: f32) -> (Stores, Caller, StoreRecord) {
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let path = data.join("a.nc");
    constant_file(&path, value);
    let (_queue, stores) = open_with_roots(&dir.join("db"), vec![data]);
    let jane = caller("jane.doe@idp");
    let record = request_one(&stores, &jane, &path);
    (stores, jane, record)
}

/// Converts the store's source into `dir` as its conversion job does (with `chunking`).
fn convert_into(stores: &Stores, record: &StoreRecord, chunking: &Chunking, dir: &std::path::Path) {
    let source = stores.open_source(record).unwrap();
    let stop = crate::jobs::Stop::default();
    let compressor = crate::convert::Compressor::Lz4;
    crate::convert::convert_file(
        &source,
        dir,
        chunking,
        compressor,
        crate::convert::write::Reserve::NONE,
        &stop,
    )
    .unwrap();
}

#[test]
fn a_source_replaced_by_a_link_after_the_request_gives_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (allowed, secret) = (dir.path().join("allowed"), dir.path().join("secret"));
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir(&secret).unwrap();
    let (public, private) = (allowed.join("a.nc"), secret.join("b.nc"));
    constant_file(&public, 1.0);
    constant_file(&private, 42.0);
    let (_queue, stores) = open_with_roots(&dir.path().join("db"), vec![allowed.clone()]);
    let jane = caller("jane.doe@idp");
    let record = request_one(&stores, &jane, &public);
    // The conversion has written the metadata and chunk 0 only.
    let store = stores.dir(record.token);
    convert_into(&stores, &record, &record.chunking, &store);
    let written = std::fs::read(store.join("tas/1.0.0")).unwrap();
    std::fs::remove_file(store.join("tas/1.0.0")).unwrap();
    let read = |wait| stores.read(Some(&jane), record.token, "tas/1.0.0", NOW, wait);
    let computed = read(std::time::Duration::ZERO).unwrap();
    assert_eq!(
        computed.bytes, written,
        "computed on demand: the bytes the conversion writes"
    );
    // The same path now leads to a file jane may not read.
    std::fs::remove_file(&public).unwrap();
    std::os::unix::fs::symlink(&private, &public).unwrap();
    let err = read(std::time::Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Unavailable, "{err}");
    let reason = stores.open_source(&record).unwrap_err();
    assert!(reason.contains("a.nc"), "{reason}");
    // A file swapped between opening and checking is refused too.
    std::fs::remove_file(&public).unwrap();
    constant_file(&public, 1.0);
    let opened = crate::convert::Source::open(&public).unwrap();
    std::fs::rename(allowed.join("a.nc"), allowed.join("old.nc")).unwrap();
    constant_file(&public, 2.0);
    assert!(access::check_opened("jane.doe@idp", &opened, &[allowed]).is_err());
}

#[test]
fn metadata_of_a_reconverted_store_is_never_the_earlier_one() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, jane, record) = one_store(dir.path(), 1.0);
    let store = stores.dir(record.token);
    let zarray = || {
        let bytes = stores
            .read(
                Some(&jane),
                record.token,
                "tas/.zarray",
                NOW,
                std::time::Duration::ZERO,
            )
            .unwrap()
            .bytes;
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["chunks"].clone()
    };
    // Two conversions within the same second, as a reader racing a `reload` sees them.
    for (primary, chunks) in [(1, [1, 3, 4]), (2, [2, 3, 4])] {
        let mut chunking = record.chunking;
        chunking.map_primary_chunksize = primary;
        std::fs::remove_dir_all(&store).ok();
        convert_into(&stores, &record, &chunking, &store);
        assert_eq!(zarray(), serde_json::json!(chunks));
    }
}

#[test]
fn a_store_waiting_for_a_worker_is_read_from_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let (stores, jane, record) = one_store(dir.path(), 3.0);
    let read = |key| {
        stores
            .read(
                Some(&jane),
                record.token,
                key,
                NOW,
                std::time::Duration::ZERO,
            )
            .unwrap()
            .bytes
    };
    // No worker has run: metadata and chunks come from the source.
    let metadata = read(".zmetadata");
    let zarray = read("tas/.zarray");
    let chunk = read("tas/1.0.0");
    assert!(!stores.dir(record.token).exists());
    // They are what the conversion then writes.
    let store = dir.path().join("converted");
    convert_into(&stores, &record, &record.chunking, &store);
    assert_eq!(metadata, std::fs::read(store.join(".zmetadata")).unwrap());
    assert_eq!(zarray, std::fs::read(store.join("tas/.zarray")).unwrap());
    assert_eq!(chunk, std::fs::read(store.join("tas/1.0.0")).unwrap());
}

/// A NetCDF file with `tas(time=2, lat=128, lon=256)` of noise from `seed`: chunks of about
/// 128 KiB that Blosc cannot shrink much, large enough to be served mapped.
fn noisy_file(path: &std::path::Path, seed: u32) {
    let mut file = netcdf::create(path).unwrap();
    file.add_dimension("time", 2).unwrap();
    file.add_dimension("lat", 128).unwrap();
    file.add_dimension("lon", 256).unwrap();
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    let values: Vec<f32> = (0..2 * 128 * 256)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as f32
        })
        .collect();
    file.add_variable::<f32>("tas", &["time", "lat", "lon"])
        .unwrap()
        .put_values(&values, ..)
        .unwrap();
}

#[test]
fn a_mapped_chunk_of_a_reconverted_store_is_never_the_earlier_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let source = data.join("a.nc");
    noisy_file(&source, 1);
    let (_queue, stores) = open_with_roots(&dir.path().join("db"), vec![data]);
    let jane = caller("jane.doe@idp");
    let record = request_one(&stores, &jane, &source);
    let store = stores.dir(record.token);
    let read = || {
        stores
            .read(
                Some(&jane),
                record.token,
                "tas/0.0.0",
                NOW,
                std::time::Duration::ZERO,
            )
            .unwrap()
    };
    for seed in [1, 2] {
        noisy_file(&source, seed);
        std::fs::remove_dir_all(&store).ok();
        convert_into(&stores, &record, &record.chunking, &store);
        record_outcome(&stores, record.token, Status::Ready, "", NOW).unwrap();
        let written = std::fs::read(store.join("tas/0.0.0")).unwrap();
        assert!(written.len() as u64 >= super::read::MAP_FROM_BYTES);
        // Read twice: the second is the mapping the first kept (the same memory).
        let first = read();
        let second = read();
        for chunk in [&first, &second] {
            assert_eq!(chunk.bytes, written, "seed {seed}");
            assert!(chunk.etag.is_some());
        }
        assert_eq!(first.bytes.as_ptr(), second.bytes.as_ptr(), "seed {seed}");
    }
}
