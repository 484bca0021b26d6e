use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use super::*;

/// Records what it was asked to do; its outcome is a `meta` row `outcome:<subject>`.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<String>>,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

fn outcome_key(subject: &str) -> Vec<u8> {
    format!("outcome:{subject}").into_bytes()
}

impl Handler for Recorder {
    fn run(&self, job: &Job, stop: &Stop) -> Result<Outcome> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        self.seen.lock().push(job.subject.clone());
        let result = match job.subject.as_str() {
            "fails" => Err(Error::io("read source", std::io::Error::other("disk gone"))),
            "panics" => panic!("the handler broke"),
            // Runs until the daemon stops, the first time only.
            "waits" if job.starts == 1 => {
                while !stop.requested() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(Outcome::Interrupted)
            }
            subject => {
                // The first two jobs of the pool test wait for each other, so a second worker
                // must take one while the first runs.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while ["s0", "s1"].contains(&subject)
                    && self.most_at_once.load(Ordering::SeqCst) < 2
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut batch = Batch::default();
                batch.put(cf::META, outcome_key(subject), b"done".to_vec());
                Ok(Outcome::Done(batch))
            }
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn give_up(&self, job: &Job, reason: &str) -> Batch {
        let mut batch = Batch::default();
        batch.put(
            cf::META,
            outcome_key(&job.subject),
            reason.as_bytes().to_vec(),
        );
        batch
    }
}

fn open(dir: &std::path::Path) -> (Arc<Db>, Arc<Queue>) {
    let db = Arc::new(Db::open(dir).unwrap());
    let queue = Arc::new(Queue::open(Arc::clone(&db)).unwrap());
    (db, queue)
}

/// Queues `subjects` and runs them on `workers` threads until the queue is empty.
fn run_all(queue: &Arc<Queue>, subjects: &[&str], workers: usize) -> Arc<Recorder> {
    for subject in subjects {
        queue
            .enqueue(Batch::default(), "convert", subject, "")
            .unwrap();
    }
    let recorder = Arc::new(Recorder::default());
    queue
        .start(workers, &(Arc::clone(&recorder) as Arc<dyn Handler>))
        .unwrap();
    queue.wait_idle();
    queue.stop();
    recorder
}

fn outcome(db: &Db, subject: &str) -> Option<String> {
    db.get(cf::META, &outcome_key(subject))
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

fn stored_jobs(db: &Db) -> Vec<Job> {
    let mut jobs = Vec::new();
    db.for_each(cf::JOBS, |k, v| {
        jobs.push(Job::decode(k, v)?);
        Ok(true)
    })
    .unwrap();
    jobs
}

#[test]
fn jobs_run_in_order_and_their_outcomes_commit_with_their_removal() {
    let dir = tempfile::tempdir().unwrap();
    let (db, queue) = open(dir.path());
    for subject in ["a", "b", "c"] {
        let mut request = Batch::default();
        request.put(cf::META, format!("request:{subject}"), b"1".to_vec());
        queue.enqueue(request, "convert", subject, "").unwrap();
    }
    assert_eq!(db.get(cf::META, b"request:b").unwrap(), Some(b"1".to_vec()));
    assert_eq!(stored_jobs(&db).len(), 3);
    let recorder = run_all(&queue, &[], 1);
    assert_eq!(*recorder.seen.lock(), ["a", "b", "c"]);
    for subject in ["a", "b", "c"] {
        assert_eq!(outcome(&db, subject).as_deref(), Some("done"));
    }
    assert!(stored_jobs(&db).is_empty(), "finished jobs leave the queue");
    assert!(queue.is_empty());
}

#[test]
fn a_subject_has_one_job_waiting_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (db, queue) = open(dir.path());
    let first = queue.enqueue(Batch::default(), "convert", "a", "").unwrap();
    let mut again = Batch::default();
    again.put(cf::META, "request:again", b"1".to_vec());
    let second = queue.enqueue(again, "convert", "a", "").unwrap();
    assert_eq!(first, second);
    assert_eq!(
        db.get(cf::META, b"request:again").unwrap(),
        Some(b"1".to_vec())
    );
    let other_kind = queue.enqueue(Batch::default(), "archive", "a", "").unwrap();
    assert_ne!(other_kind.seq, first.seq);
    assert_eq!(stored_jobs(&db).len(), 2);
    assert_eq!(queue.find("convert", "a"), Some(first));
    assert_eq!(queue.find("convert", "b"), None);
}

#[test]
fn a_restart_resumes_queued_and_interrupted_jobs_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, queue) = open(dir.path());
        for subject in ["waits", "x", "y"] {
            queue
                .enqueue(Batch::default(), "convert", subject, "")
                .unwrap();
        }
        let recorder = Arc::new(Recorder::default());
        queue
            .start(1, &(Arc::clone(&recorder) as Arc<dyn Handler>))
            .unwrap();
        while recorder.seen.lock().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        queue.stop();
        assert_eq!(*recorder.seen.lock(), ["waits"], "no job starts after stop");
    }
    let (db, queue) = open(dir.path());
    let stored = stored_jobs(&db);
    let subjects: Vec<&str> = stored.iter().map(|j| j.subject.as_str()).collect();
    assert_eq!(subjects, ["waits", "x", "y"]);
    assert_eq!(stored[0].starts, 1, "the interrupted start is counted");
    assert_eq!(queue.len(), 3);
    let recorder = run_all(&queue, &[], 1);
    assert_eq!(*recorder.seen.lock(), ["waits", "x", "y"]);
    for subject in ["waits", "x", "y"] {
        assert_eq!(outcome(&db, subject).as_deref(), Some("done"), "{subject}");
    }
    assert!(stored_jobs(&db).is_empty());
}

#[test]
fn errors_and_panics_give_up_with_a_reason_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (db, queue) = open(dir.path());
    run_all(&queue, &["fails", "panics", "fine"], 1);
    assert_eq!(
        outcome(&db, "fails").as_deref(),
        Some("read source: disk gone")
    );
    assert_eq!(
        outcome(&db, "panics").as_deref(),
        Some("internal error: the handler broke")
    );
    assert_eq!(outcome(&db, "fine").as_deref(), Some("done"));
    assert!(stored_jobs(&db).is_empty());
}

#[test]
fn at_most_the_configured_number_of_jobs_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (db, queue) = open(dir.path());
    let subjects = ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"];
    let recorder = run_all(&queue, &subjects, 2);
    assert_eq!(recorder.most_at_once.load(Ordering::SeqCst), 2);
    for subject in subjects {
        assert_eq!(outcome(&db, subject).as_deref(), Some("done"), "{subject}");
    }
}

/// Holds each job of subject `held` until the test lets it go, and records every start and
/// end in order.
struct Gate {
    events: Mutex<Vec<String>>,
    started: std::sync::mpsc::Sender<u64>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Gate {
    /// A gate, the starts it reports, and the way to let a held job go.
    fn new() -> (
        Arc<Gate>,
        std::sync::mpsc::Receiver<u64>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (started, starts) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel();
        let gate = Arc::new(Gate {
            events: Mutex::default(),
            started,
            release: Mutex::new(released),
        });
        (gate, starts, release)
    }
}

impl Handler for Gate {
    fn run(&self, job: &Job, stop: &Stop) -> Result<Outcome> {
        self.events.lock().push(format!("start {}", job.seq));
        self.started.send(job.seq).unwrap();
        if job.subject == "held" {
            self.release.lock().recv().unwrap();
        }
        self.events.lock().push(format!("end {}", job.seq));
        // Let go while the daemon stops: interrupted, as a conversion is.
        if stop.requested() {
            return Ok(Outcome::Interrupted);
        }
        Ok(Outcome::Done(Batch::default()))
    }

    fn give_up(&self, _job: &Job, _reason: &str) -> Batch {
        Batch::default()
    }
}

#[test]
fn a_job_asked_for_while_its_subject_runs_waits_for_it_then_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, queue) = open(dir.path());
    let (gate, starts, release) = Gate::new();
    let first = queue
        .enqueue(Batch::default(), "convert", "held", "")
        .unwrap();
    queue
        .start(2, &(Arc::clone(&gate) as Arc<dyn Handler>))
        .unwrap();
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok(first.seq));
    // Asked for again while it runs (a reload): a job of its own, which waits for the
    // first while another worker is free, and is not asked for twice.
    let second = queue
        .enqueue(Batch::default(), "convert", "held", "")
        .unwrap();
    assert_ne!(second.seq, first.seq);
    assert_eq!(
        queue
            .enqueue(Batch::default(), "convert", "held", "")
            .unwrap(),
        second
    );
    let other = queue
        .enqueue(Batch::default(), "convert", "other", "")
        .unwrap();
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok(other.seq));
    assert!(starts.recv_timeout(Duration::from_millis(300)).is_err());
    release.send(()).unwrap();
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok(second.seq));
    release.send(()).unwrap();
    queue.wait_idle();
    queue.stop();
    let events = gate.events.lock().clone();
    let at = |event: String| events.iter().position(|e| *e == event).unwrap();
    assert!(at(format!("end {}", first.seq)) < at(format!("start {}", second.seq)));
    assert!(queue.is_empty());
}

#[test]
fn two_stored_jobs_of_one_subject_run_one_after_the_other_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, queue) = open(dir.path());
        let (gate, starts, release) = Gate::new();
        let first = queue
            .enqueue(Batch::default(), "convert", "held", "")
            .unwrap();
        queue
            .start(1, &(Arc::clone(&gate) as Arc<dyn Handler>))
            .unwrap();
        assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok(first.seq));
        // Asked for again while it runs, then the daemon stops: both rows stay.
        queue
            .enqueue(Batch::default(), "convert", "held", "")
            .unwrap();
        let stopping = {
            let queue = Arc::clone(&queue);
            std::thread::spawn(move || queue.stop())
        };
        while !queue.stop.requested() {
            std::thread::sleep(Duration::from_millis(1));
        }
        release.send(()).unwrap();
        stopping.join().unwrap();
    }
    let (db, queue) = open(dir.path());
    let stored = stored_jobs(&db);
    assert_eq!(stored.len(), 2);
    let (gate, starts, release) = Gate::new();
    queue
        .start(2, &(Arc::clone(&gate) as Arc<dyn Handler>))
        .unwrap();
    // In their order, the second only once the first has ended, though a worker is free.
    assert_eq!(
        starts.recv_timeout(Duration::from_secs(10)),
        Ok(stored[0].seq)
    );
    assert!(starts.recv_timeout(Duration::from_millis(300)).is_err());
    release.send(()).unwrap();
    assert_eq!(
        starts.recv_timeout(Duration::from_secs(10)),
        Ok(stored[1].seq)
    );
    release.send(()).unwrap();
    queue.wait_idle();
    queue.stop();
    assert!(stored_jobs(&db).is_empty());
}

#[test]
fn jobs_queued_to_run_first_run_before_the_others_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, queue) = open(dir.path());
        for subject in ["a", "b", "c"] {
            queue
                .enqueue(Batch::default(), "convert", subject, "")
                .unwrap();
        }
        queue
            .enqueue_first(Batch::default(), "convert", "x", "")
            .unwrap();
        // A job waiting is moved up among those first, in the order it was queued.
        let moved = queue
            .enqueue_first(Batch::default(), "convert", "c", "")
            .unwrap();
        assert!(moved.first);
        assert_eq!(queue.len(), 4);
    }
    // Stopped before any ran: the order holds at the next start.
    let (db, queue) = open(dir.path());
    queue
        .enqueue_first(Batch::default(), "convert", "y", "")
        .unwrap();
    queue.enqueue(Batch::default(), "convert", "d", "").unwrap();
    // One to run first, asked for again as other work is: new, and last.
    queue
        .enqueue_first(Batch::default(), "convert", "z", "")
        .unwrap();
    let again = queue.enqueue(Batch::default(), "convert", "z", "").unwrap();
    assert!(!again.first);
    let recorder = run_all(&queue, &[], 1);
    assert_eq!(*recorder.seen.lock(), ["c", "x", "y", "a", "b", "d", "z"]);
    assert!(stored_jobs(&db).is_empty());
}

#[test]
fn jobs_queued_to_run_first_leave_a_worker_to_the_others() {
    /// Holds the jobs of subjects starting with `f` until `release` is set.
    #[derive(Default)]
    struct Holding {
        release: std::sync::atomic::AtomicBool,
        done: Mutex<Vec<String>>,
    }
    impl Handler for Holding {
        fn run(&self, job: &Job, _stop: &Stop) -> Result<Outcome> {
            while job.subject.starts_with('f') && !self.release.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.done.lock().push(job.subject.clone());
            Ok(Outcome::Done(Batch::default()))
        }
        fn give_up(&self, _job: &Job, _reason: &str) -> Batch {
            Batch::default()
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (_db, queue) = open(dir.path());
    for subject in ["f1", "f2", "f3"] {
        queue
            .enqueue_first(Batch::default(), "convert", subject, "")
            .unwrap();
    }
    queue.enqueue(Batch::default(), "convert", "n", "").unwrap();
    let holding = Arc::new(Holding::default());
    queue
        .start(3, &(Arc::clone(&holding) as Arc<dyn Handler>))
        .unwrap();
    // Two of three workers hold first jobs; the third runs the other job.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while holding.done.lock().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(*holding.done.lock(), ["n"]);
    holding.release.store(true, Ordering::SeqCst);
    queue.wait_idle();
    queue.stop();
    assert_eq!(holding.done.lock().len(), 4);
}

#[test]
fn parties_take_turns_whatever_one_of_them_queued_before_the_others() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, queue) = open(dir.path());
        // Mallory asks for many, then grace for one, then ivan for two, then mallory again.
        for n in 0..4 {
            let subject = format!("m{n}");
            queue
                .enqueue(Batch::default(), "convert", &subject, "mallory")
                .unwrap();
        }
        queue
            .enqueue(Batch::default(), "convert", "g0", "grace")
            .unwrap();
        for subject in ["i0", "i1"] {
            queue
                .enqueue(Batch::default(), "convert", subject, "ivan")
                .unwrap();
        }
        queue
            .enqueue(Batch::default(), "convert", "m4", "mallory")
            .unwrap();
        // A deletion still runs before them all.
        queue
            .enqueue_first(Batch::default(), "convert", "x", "ivan")
            .unwrap();
    }
    // The parties are kept with the jobs, so the turns hold after a restart too.
    let (db, queue) = open(dir.path());
    let recorder = run_all(&queue, &[], 1);
    assert_eq!(
        *recorder.seen.lock(),
        ["x", "m0", "g0", "i0", "m1", "i1", "m2", "m3", "m4"]
    );
    assert!(stored_jobs(&db).is_empty());
    assert!(
        queue.state.lock().waiting.is_empty(),
        "nothing counted as waiting"
    );
}

#[test]
fn one_partys_thousands_of_jobs_hold_up_anothers_by_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, queue) = open(dir.path());
    for n in 0..2000 {
        let subject = format!("m{n}");
        queue
            .enqueue(Batch::default(), "convert", &subject, "mallory")
            .unwrap();
    }
    // Moved to run first, and asked for again as other work: counted once, as waiting.
    queue
        .enqueue_first(Batch::default(), "convert", "m5", "mallory")
        .unwrap();
    queue
        .enqueue(Batch::default(), "convert", "m5", "mallory")
        .unwrap();
    queue
        .enqueue(Batch::default(), "convert", "g0", "grace")
        .unwrap();
    assert_eq!(queue.state.lock().waiting["mallory"], 2000);
    let recorder = run_all(&queue, &[], 1);
    let seen = recorder.seen.lock();
    assert_eq!(seen.len(), 2001);
    assert_eq!(seen[..2], ["m0", "g0"]);
    assert!(queue.state.lock().waiting.is_empty());
}

#[test]
fn a_job_is_picked_whatever_the_counts_of_waiting_jobs_say() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, queue) = open(dir.path());
    for subject in ["a", "b"] {
        queue
            .enqueue(Batch::default(), "convert", subject, "jane")
            .unwrap();
    }
    // Counts that fell behind (as they would for a job stopped while it ran, then moved
    // to run first) hold up nothing: the scan goes on until it found a job.
    let mut state = queue.state.lock();
    state.waiting.clear();
    assert_eq!(Queue::pick(&state), Some(0));
}

#[test]
fn a_party_whose_job_waits_on_its_running_one_does_not_make_the_next_pick_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, queue) = open(dir.path());
    queue
        .enqueue(Batch::default(), "convert", "p0", "pat")
        .unwrap();
    let running = queue.next().unwrap();
    assert_eq!(running.subject, "p0");
    // Asked for again while it runs: waits for it, ahead of mallory's thousands.
    queue
        .enqueue(Batch::default(), "convert", "p0", "pat")
        .unwrap();
    for n in 0..2000 {
        queue
            .enqueue(Batch::default(), "convert", &format!("m{n}"), "mallory")
            .unwrap();
    }
    let state = queue.state.lock();
    let (picked, looked_at) = Queue::scan(&state);
    assert_eq!(picked, Some(1), "mallory's oldest, as pat's waits");
    assert!(looked_at <= 3, "looked at {looked_at} jobs");
    drop(state);
    // With only pat's waiting job and a runnable one of pat's behind it, that one runs.
    let dir = tempfile::tempdir().unwrap();
    let (_db, queue) = open(dir.path());
    for subject in ["p0", "p0", "p1"] {
        queue
            .enqueue(Batch::default(), "convert", subject, "pat")
            .unwrap();
        if queue.state.lock().running.is_empty() {
            assert_eq!(queue.next().unwrap().subject, "p0");
        }
    }
    assert_eq!(Queue::pick(&queue.state.lock()), Some(1));
}

#[test]
fn a_job_the_daemon_dies_in_again_and_again_is_given_up_and_a_stop_is_no_crash() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, queue) = open(dir.path());
        for subject in ["crashes", "after"] {
            queue
                .enqueue(Batch::default(), "convert", subject, "")
                .unwrap();
        }
    }
    // Started, and the daemon dies in it (the queue is dropped with the job running), three
    // times.
    for crashes in 0..MOST_CRASHES {
        let (db, queue) = open(dir.path());
        assert_eq!(stored_jobs(&db)[0].crashes, crashes);
        let job = queue.next().unwrap();
        assert_eq!(job.subject, "crashes");
        assert!(stored_jobs(&db)[0].running);
    }
    // A stop is not a crash: the run interrupted so leaves the count as it was.
    {
        let (db, queue) = open(dir.path());
        let job = queue.next().unwrap();
        queue.finish(&job, None);
        assert!(!stored_jobs(&db)[0].running);
        assert_eq!(stored_jobs(&db)[0].crashes, MOST_CRASHES);
    }
    let (db, queue) = open(dir.path());
    let recorder = run_all(&queue, &[], 1);
    assert_eq!(
        *recorder.seen.lock(),
        ["after"],
        "the crashing job is not run again"
    );
    let reason = outcome(&db, "crashes").unwrap();
    assert!(
        reason.contains("given up: the daemon stopped abnormally 3 times"),
        "{reason}"
    );
    assert_eq!(outcome(&db, "after").as_deref(), Some("done"));
    assert!(stored_jobs(&db).is_empty());
}

#[test]
fn after_a_crash_the_jobs_it_cut_short_run_first_each_alone() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_db, queue) = open(dir.path());
        queue.state.lock().workers = 2;
        for (subject, party) in [("culprit", "mallory"), ("bystander", "grace")] {
            queue
                .enqueue(Batch::default(), "convert", subject, party)
                .unwrap();
        }
        queue
            .enqueue(Batch::default(), "convert", "later", "grace")
            .unwrap();
        // Both run when the daemon dies.
        assert_eq!(queue.next().unwrap().subject, "culprit");
        assert_eq!(queue.next().unwrap().subject, "bystander");
    }
    {
        let (db, queue) = open(dir.path());
        queue.state.lock().workers = 2;
        assert_eq!(crashes_of(&db), ["culprit 1", "bystander 1", "later 0"]);
        // A job queued to run first waits behind them too.
        queue
            .enqueue_first(Batch::default(), "convert", "removal", "grace")
            .unwrap();
        // The culprit runs alone: nothing else starts beside it, with a worker free.
        assert_eq!(queue.next().unwrap().subject, "culprit");
        assert_eq!(Queue::pick(&queue.state.lock()), None);
    }
    // It took the daemon down alone: the crash is its own.
    let (db, queue) = open(dir.path());
    assert_eq!(
        crashes_of(&db),
        ["culprit 2", "bystander 1", "later 0", "removal 0"]
    );
    let recorder = run_all(&queue, &[], 2);
    let seen = recorder.seen.lock();
    assert_eq!(seen[..2], ["culprit", "bystander"]);
    // The two others start together on the two workers, in either order.
    let mut others = seen[2..].to_vec();
    others.sort();
    assert_eq!(others, ["later", "removal"]);
}

/// Each stored job's subject and crashes, in sequence order.
fn crashes_of(db: &Db) -> Vec<String> {
    stored_jobs(db)
        .into_iter()
        .map(|job| format!("{} {}", job.subject, job.crashes))
        .collect()
}
