//! The durable job queue and its bounded pool of worker threads. It knows nothing of what a
//! job does: a job is a `kind` and a `subject` (for a conversion, the store's token), and a
//! [`Handler`] given to [`Queue::start`] does the work.
//!
//! Durability: a job is a row of the `jobs` column family, written in the same [`Batch`] as
//! whatever asked for it (a store record), and deleted in the same batch as the writes that
//! record its outcome. So a crash at any point leaves no request without its job and no
//! outcome without the job's removal: on the next start every row is pending again, and a
//! job that was running when the daemon died runs again from the start. Handlers must
//! therefore be idempotent (a conversion rewrites its store).
//!
//! Order and bounds: jobs run in the order they were queued (those queued to run first, before
//! the others), the parties that asked for them taking turns (see [`Job::party`]), at most
//! `workers` at a time, each on a thread of its own (never on the async runtime). One subject
//! has at most one job
//! waiting per kind ([`Queue::enqueue`] of a subject that has one returns it instead), and its
//! jobs of one kind never run at once: a job asked for while another of its subject runs (a
//! store reloaded during its conversion) waits for that one to end, then runs.
//!
//! Shutdown: [`Queue::stop`] lets running handlers see [`Stop::requested`]; a handler that
//! stops early answers [`Outcome::Interrupted`] and its job stays queued for the next start.
//!
//! Crashes: a job that was running when the daemon died ([`Job::running`] still set at the
//! next start) counts a crash. One that counted [`MOST_CRASHES`] is given up, with a reason,
//! instead of run again: a source that makes the daemon run out of memory, or abort, would
//! otherwise take it down again at every start, and with it every other user's work. Every
//! job running at a crash counts it, so the jobs that did run first after a start, each
//! alone: a crash while one runs is that one's, and a job that only ran beside the one that
//! crashes the daemon is not given up for it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

use crate::db::{self, Batch, Db, cf};
use crate::error::{Error, Result};

/// Format byte of a stored job.
const FORMAT: u8 = 1;

/// Crashes of the daemon during a job's runs after which it is given up (see the module's
/// docs): a job that ran into one by chance (a power cut) runs again, one that causes them
/// stops doing so.
const MOST_CRASHES: u32 = 3;

/// One job as it is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Its place in the queue (the row key), unique for the life of the database.
    #[serde(skip)]
    pub seq: u64,
    /// What to do (`convert`, ...): chooses nothing here, the handler reads it.
    pub kind: String,
    /// What to do it to (a store token, ...).
    pub subject: String,
    /// How often the job was started before, counting starts cut short by a crash or a stop.
    pub starts: u32,
    /// Runs before the jobs that are not (see [`Queue::enqueue_first`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first: bool,
    /// Who asked for it (a store's owner). The parties with jobs waiting take turns: the
    /// next job is the oldest of the party whose last job started longest ago, so one
    /// user's thousands of conversions never hold up another's one for more than a job.
    /// Rows written before parties were kept read as one party, `""`.
    #[serde(default)]
    pub party: String,
    /// Set, in the stored row, while it runs: a row found so at a start is a run a crash
    /// cut short.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
    /// Runs of it that a crash of the daemon cut short.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crashes: u32,
}

/// Whether a count is 0 (not stored then).
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl Job {
    fn encode(&self) -> Vec<u8> {
        db::encode_json(FORMAT, self)
    }

    fn decode(key: &[u8], value: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| Error::Corrupt {
            family: cf::JOBS,
            reason,
        };
        let seq = key
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt(format!("a job key of {} bytes", key.len())))?;
        let mut job: Job = db::decode_json(cf::JOBS, FORMAT, &format!("job {seq}"), value)?;
        job.seq = seq;
        Ok(job)
    }
}

/// What a handler made of a job.
pub enum Outcome {
    /// The job is finished: these writes record its outcome and are committed together with
    /// the job's removal from the queue.
    Done(Batch),
    /// The handler saw [`Stop::requested`] and stopped; the job stays queued.
    Interrupted,
}

/// Whether the daemon is stopping, or a job's time is up, for handlers to check between
/// steps of long work.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    /// Set when the daemon stops.
    stopping: Arc<AtomicBool>,
    /// When the work this is handed to must end (`None`: whenever it ends).
    deadline: Option<std::time::Instant>,
}

impl Stop {
    /// Whether the handler should stop as soon as it can: the daemon stops, or its time
    /// is up.
    pub fn requested(&self) -> bool {
        self.stopping() || self.expired()
    }

    /// Whether the daemon stops (the work is then left for the next start).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Whether the time given by [`Stop::until`] is up.
    pub fn expired(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| std::time::Instant::now() >= deadline)
    }

    /// When its time is up, if it is bounded ([`Stop::until`]).
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    /// This stop, also requested once `deadline` has passed.
    #[must_use]
    pub fn until(&self, deadline: std::time::Instant) -> Stop {
        Stop {
            stopping: Arc::clone(&self.stopping),
            deadline: Some(deadline),
        }
    }

    /// Asks whoever watches this flag to stop.
    pub(crate) fn request(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

/// Does the jobs of a queue.
pub trait Handler: Send + Sync + 'static {
    /// Does `job`.
    ///
    /// # Errors
    /// A failure the handler could not record itself; the queue then calls
    /// [`Handler::give_up`] and removes the job.
    fn run(&self, job: &Job, stop: &Stop) -> Result<Outcome>;

    /// The writes that record that `job` failed for `reason` (an error [`Handler::run`]
    /// returned, or its panic), committed together with the job's removal.
    fn give_up(&self, job: &Job, reason: &str) -> Batch;
}

/// The queue's state in memory: what is pending and what is running.
#[derive(Default)]
struct State {
    /// Sequence numbers waiting for a worker, oldest first.
    pending: VecDeque<u64>,
    /// Every queued or running job by sequence number.
    jobs: BTreeMap<u64, Job>,
    /// `(kind, subject)` -> sequence number of its job waiting to run.
    subjects: HashMap<(String, String), u64>,
    /// `(kind, subject)` -> sequence number of its running job.
    running: HashMap<(String, String), u64>,
    /// The next sequence number to hand out.
    next_seq: u64,
    /// Set by [`Queue::stop`]: workers take no further job.
    stopping: bool,
    /// How many workers run jobs (see [`Queue::start`]).
    workers: usize,
    /// The turn at which each party's last job started (parties that had none since the
    /// queue opened: none, and they go first).
    turns: HashMap<String, u64>,
    /// The turn of the next job to start.
    turn: u64,
    /// How many jobs each party has waiting, those queued to run first left out: how many
    /// parties [`Queue::pick`] looks for.
    waiting: HashMap<String, usize>,
}

impl State {
    /// Counts a job of `party` more (`true`) or less as waiting.
    fn count_waiting(&mut self, party: &str, more: bool) {
        if more {
            *self.waiting.entry(party.to_string()).or_default() += 1;
        } else if let Some(count) = self.waiting.get_mut(party) {
            *count -= 1;
            if *count == 0 {
                self.waiting.remove(party);
            }
        }
    }

    /// Puts job `seq` (known in `jobs`) among the pending ones: last, or, queued to run
    /// first, among those, in the order of their sequence numbers (the order a restart gives
    /// them).
    fn add_pending(&mut self, seq: u64) {
        let job = &self.jobs[&seq];
        let at = if job.first {
            // After the jobs a crash cut short (the first ones), among those queued to run
            // first in the order of their sequence numbers.
            self.pending
                .iter()
                .position(|&pending| {
                    self.jobs
                        .get(&pending)
                        .is_none_or(|job| job.crashes == 0 && (pending > seq || !job.first))
                })
                .unwrap_or(self.pending.len())
        } else {
            let party = job.party.clone();
            self.count_waiting(&party, true);
            self.pending.len()
        };
        self.pending.insert(at, seq);
    }

    /// Takes job `seq` out of the pending ones, at `at`.
    fn take_pending(&mut self, at: usize) -> Option<u64> {
        let seq = self.pending.remove(at)?;
        let job = &self.jobs[&seq];
        if !job.first {
            let party = job.party.clone();
            self.count_waiting(&party, false);
        }
        Some(seq)
    }

    /// Takes job `seq` out of the pending ones, when it is there (a job stopped while it ran
    /// is not, until the next start).
    fn remove_pending(&mut self, seq: u64) {
        if let Some(at) = self.pending.iter().position(|&pending| pending == seq) {
            self.take_pending(at);
        }
    }
}

/// The durable queue.
pub struct Queue {
    db: Arc<Db>,
    state: Mutex<State>,
    /// Signalled when a job is queued or the queue stops.
    wake: Condvar,
    /// Signalled when a worker finishes a job.
    idle: Condvar,
    stop: Stop,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Queue {
    /// Opens the queue of `db`: every stored job is pending again, in its old order.
    ///
    /// # Errors
    /// A read error or a corrupt job row.
    pub fn open(db: Arc<Db>) -> Result<Self> {
        let mut state = State::default();
        let mut crashed = Batch::default();
        db.for_each(cf::JOBS, |key, value| {
            let mut job = Job::decode(key, value)?;
            if job.running {
                job.running = false;
                job.crashes += 1;
                tracing::warn!(job = job.seq, kind = %job.kind, subject = %job.subject,
                    crashes = job.crashes, "a job was running when the daemon stopped");
                crashed.put(cf::JOBS, key.to_vec(), job.encode());
            }
            state.next_seq = job.seq + 1;
            state.pending.push_back(job.seq);
            if !job.first {
                state.count_waiting(&job.party, true);
            }
            state
                .subjects
                .insert((job.kind.clone(), job.subject.clone()), job.seq);
            state.jobs.insert(job.seq, job);
            Ok(true)
        })?;
        db.write(crashed)?;
        // Those a crash cut short, then those queued to run first, then the others, each in
        // sequence order (a stable sort).
        let jobs = &state.jobs;
        state
            .pending
            .make_contiguous()
            .sort_by_key(|seq| (jobs[seq].crashes == 0, !jobs[seq].first));
        Ok(Queue {
            db,
            state: Mutex::new(state),
            wake: Condvar::new(),
            idle: Condvar::new(),
            stop: Stop::default(),
            workers: Mutex::new(Vec::new()),
        })
    }

    /// Queues a job of `kind` on `subject`, committing it together with `batch` (the request
    /// it belongs to). When the subject already has a job of this kind waiting to run, only
    /// `batch` is written and that job is returned; one running does not count (its work
    /// may predate the request).
    ///
    /// # Errors
    /// A write error; then neither the job nor `batch` was written.
    pub fn enqueue(&self, batch: Batch, kind: &str, subject: &str, party: &str) -> Result<Job> {
        self.queue(batch, kind, subject, party, false)
    }

    /// As [`Queue::enqueue`], to run before every job not queued so (after those that were):
    /// short work that must not wait for a long queue (a removed store's deletion). A job of
    /// the subject already waiting is moved there; one of these asked for again by
    /// [`Queue::enqueue`] goes back to the end of the queue as a new job. Such jobs take at
    /// most all workers but one (the one, when there is one), so that the others never wait
    /// for a run of them when there are more.
    ///
    /// # Errors
    /// A write error; then neither the job nor `batch` was written.
    pub fn enqueue_first(
        &self,
        batch: Batch,
        kind: &str,
        subject: &str,
        party: &str,
    ) -> Result<Job> {
        self.queue(batch, kind, subject, party, true)
    }

    fn queue(
        &self,
        mut batch: Batch,
        kind: &str,
        subject: &str,
        party: &str,
        first: bool,
    ) -> Result<Job> {
        let mut state = self.state.lock();
        let identity = (kind.to_string(), subject.to_string());
        let mut replaced = None;
        if let Some(&seq) = state.subjects.get(&identity) {
            let mut existing = state.jobs[&seq].clone();
            if first && !existing.first {
                existing.first = true;
                batch.put(cf::JOBS, seq.to_be_bytes(), existing.encode());
                self.db.write(batch)?;
                state.remove_pending(seq);
                state.jobs.insert(seq, existing.clone());
                state.add_pending(seq);
                return Ok(existing);
            }
            if first || !existing.first {
                self.db.write(batch)?;
                return Ok(existing);
            }
            // Waiting to run first, and now asked for as other work is (a removed store
            // asked for again before its deletion ran: the job will convert it): queued
            // again as new, last, so that no request gets ahead of those before it.
            batch.delete(cf::JOBS, seq.to_be_bytes());
            replaced = Some(seq);
        }
        let job = Job {
            seq: state.next_seq,
            kind: identity.0.clone(),
            subject: identity.1.clone(),
            starts: 0,
            first,
            party: party.to_string(),
            running: false,
            crashes: 0,
        };
        batch.put(cf::JOBS, job.seq.to_be_bytes(), job.encode());
        // Holding the lock while writing keeps rows in sequence order with the memory state.
        self.db.write(batch)?;
        if let Some(seq) = replaced {
            state.remove_pending(seq);
            state.jobs.remove(&seq);
        }
        state.next_seq += 1;
        state.subjects.insert(identity, job.seq);
        state.jobs.insert(job.seq, job.clone());
        state.add_pending(job.seq);
        drop(state);
        self.wake.notify_one();
        Ok(job)
    }

    /// The job of `kind` on `subject` waiting to run, else the one running.
    pub fn find(&self, kind: &str, subject: &str) -> Option<Job> {
        let state = self.state.lock();
        let identity = (kind.to_string(), subject.to_string());
        let seq = state
            .subjects
            .get(&identity)
            .or_else(|| state.running.get(&identity))?;
        Some(state.jobs[seq].clone())
    }

    /// How many jobs are queued or running.
    pub fn len(&self) -> usize {
        self.state.lock().jobs.len()
    }

    /// Whether no job is queued or running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts `workers` threads (at least one) that run the queue's jobs with `handler`.
    ///
    /// # Errors
    /// When a thread cannot be spawned.
    pub fn start(self: &Arc<Self>, workers: usize, handler: &Arc<dyn Handler>) -> Result<()> {
        let mut handles = self.workers.lock();
        self.state.lock().workers += workers.max(1);
        for n in 0..workers.max(1) {
            let queue = Arc::clone(self);
            let handler = Arc::clone(handler);
            let handle = std::thread::Builder::new()
                .name(format!("job-worker-{n}"))
                .spawn(move || queue.work(handler.as_ref()))
                .map_err(|e| Error::io("start a job worker", e))?;
            handles.push(handle);
        }
        Ok(())
    }

    /// The daemon's stop, as handlers see it: requested once the queue begins to stop
    /// ([`Queue::begin_stop`]). What waits for the daemon's work (a reader waiting for a
    /// conversion or a restore) watches it too, and ends its wait then.
    pub fn stopping(&self) -> Stop {
        self.stop.clone()
    }

    /// Asks handlers to stop and workers to take no further job, and returns at once
    /// ([`Queue::stop`] then waits for them).
    pub fn begin_stop(&self) {
        self.state.lock().stopping = true;
        self.stop.request();
        self.wake.notify_all();
    }

    /// Asks handlers to stop, lets every worker finish its current job (or be interrupted)
    /// and joins them. Jobs not finished stay queued for the next start.
    pub fn stop(&self) {
        self.begin_stop();
        for handle in self.workers.lock().drain(..) {
            if handle.join().is_err() {
                tracing::error!("a job worker panicked outside its job");
            }
        }
    }

    /// Waits until no job is queued or running (for tests and `svcd store convert`).
    pub fn wait_idle(&self) {
        let mut state = self.state.lock();
        while !state.jobs.is_empty() && !state.stopping {
            self.idle.wait(&mut state);
        }
    }

    /// Runs the job of `kind` on `subject` waiting to run, here and now, when the queue has
    /// no workers (a stopped daemon's store opened by the CLI, whose removal of a store should
    /// not wait for the next start, nor start every other queued job); `false` when it has
    /// workers (they run it) or no such job waits.
    pub fn run_waiting(&self, kind: &str, subject: &str, handler: &dyn Handler) -> bool {
        let workers = self.workers.lock();
        if !workers.is_empty() {
            return false;
        }
        let mut state = self.state.lock();
        let identity = (kind.to_string(), subject.to_string());
        let Some(&seq) = state.subjects.get(&identity) else {
            return false;
        };
        if state.stopping || state.running.contains_key(&identity) {
            return false;
        }
        state.remove_pending(seq);
        let job = self.mark_started(state, seq);
        // Held, so that no worker starts meanwhile to take the subject's next job.
        self.run(&job, handler);
        drop(workers);
        true
    }

    /// One worker: takes the oldest pending job, runs it, records its outcome.
    fn work(&self, handler: &dyn Handler) {
        while let Some(job) = self.next() {
            self.run(&job, handler);
        }
    }

    /// Runs `job`, marked as started, and records its outcome.
    fn run(&self, job: &Job, handler: &dyn Handler) {
        if job.crashes >= MOST_CRASHES {
            let reason = format!(
                "given up: the daemon stopped abnormally {} times while this ran (out of \
                 memory, say); an operator's log has more",
                job.crashes
            );
            tracing::error!(job = job.seq, kind = %job.kind, subject = %job.subject, %reason);
            self.finish(job, Some(handler.give_up(job, &reason)));
            return;
        }
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| handler.run(job, &self.stop)));
        let finished = match outcome {
            Ok(Ok(Outcome::Done(batch))) => Some(batch),
            Ok(Ok(Outcome::Interrupted)) => None,
            Ok(Err(e)) => {
                tracing::error!(job = job.seq, kind = %job.kind, subject = %job.subject,
                    error = %e.chain(), "job failed");
                Some(handler.give_up(job, &e.to_string()))
            }
            Err(panic) => {
                let reason = panic_message(panic.as_ref());
                tracing::error!(job = job.seq, kind = %job.kind, subject = %job.subject,
                    %reason, "job panicked");
                Some(handler.give_up(job, &format!("internal error: {reason}")))
            }
        };
        self.finish(job, finished);
    }

    /// The next pending job, marked as started; `None` once the queue stops.
    fn next(&self) -> Option<Job> {
        let mut state = self.state.lock();
        loop {
            if state.stopping {
                return None;
            }
            if let Some(seq) = Self::pick(&state).and_then(|at| state.take_pending(at)) {
                return Some(self.mark_started(state, seq));
            }
            self.wake.wait(&mut state);
        }
    }

    /// Where in `pending` the job to start next is, among those whose subject has no job of
    /// their kind running: the oldest of those queued to run first while those running leave
    /// a worker to the others; else the oldest of the party whose last job started longest
    /// ago (one with none first). A scan of the waiting jobs, done once per job started under
    /// the queue's lock, that ends once it found a job and has accounted for every party
    /// waiting: by its oldest runnable job, or by a job that waits for its subject's running
    /// one (so one party's thousands of jobs cost a step each only when another's one is
    /// behind them, once, and a party whose job waits on a running one costs no more).
    fn pick(state: &State) -> Option<usize> {
        Self::scan(state).0
    }

    /// [`Queue::pick`], and how many pending jobs it looked at.
    fn scan(state: &State) -> (Option<usize>, usize) {
        // Jobs a crash cut short run first, each alone (see the module's docs).
        let crashed = |seq: &u64| state.jobs.get(seq).is_some_and(|job| job.crashes > 0);
        if state.running.values().any(crashed) {
            return (None, 0);
        }
        if state.pending.front().is_some_and(crashed) {
            return (state.running.is_empty().then_some(0), 1);
        }
        let first_running = state
            .running
            .values()
            .filter(|seq| state.jobs.get(seq).is_some_and(|job| job.first))
            .count();
        let first_allowed = first_running < state.workers.saturating_sub(1).max(1);
        let mut best: Option<(usize, u64)> = None;
        // Parties whose oldest runnable job was looked at (their later jobs are skipped).
        let mut seen: HashSet<&str> = HashSet::new();
        // Parties accounted for: seen, or with a job that waits on its subject's running job.
        // A party with only such jobs can have a runnable job further on; passing it over
        // while another party's job runs delays it until its subject's job ends, never
        // longer, and the scan goes on to it when no other job was found.
        let mut accounted: HashSet<&str> = HashSet::new();
        for (at, seq) in state.pending.iter().enumerate() {
            let job = &state.jobs[seq];
            if !job.first {
                // Only once a job was found: the counts cannot then starve a party's jobs.
                if best.is_some() && accounted.len() >= state.waiting.len() {
                    return (best.map(|(at, _)| at), at);
                }
                if seen.contains(job.party.as_str()) {
                    continue;
                }
            }
            let running = state
                .running
                .keys()
                .any(|(kind, subject)| *kind == job.kind && *subject == job.subject);
            if running || (job.first && !first_allowed) {
                if !job.first {
                    accounted.insert(&job.party);
                }
                continue;
            }
            if job.first {
                // Those queued to run first come before every other in `pending`.
                return (Some(at), at + 1);
            }
            let Some(&turn) = state.turns.get(&job.party) else {
                return (Some(at), at + 1);
            };
            seen.insert(&job.party);
            accounted.insert(&job.party);
            if best.is_none_or(|(_, best_turn)| turn < best_turn) {
                best = Some((at, turn));
            }
        }
        (best.map(|(at, _)| at), state.pending.len())
    }

    /// Marks job `seq`, taken out of `pending`, as started: running, no longer waiting, one
    /// start more.
    fn mark_started(&self, mut state: MutexGuard<'_, State>, seq: u64) -> Job {
        let job = state.jobs.get_mut(&seq).expect("pending jobs are known");
        job.starts += 1;
        job.running = true;
        let job = job.clone();
        state.turn += 1;
        let turn = state.turn;
        state.turns.insert(job.party.clone(), turn);
        let identity = (job.kind.clone(), job.subject.clone());
        if state.subjects.get(&identity) == Some(&seq) {
            state.subjects.remove(&identity);
        }
        state.running.insert(identity, seq);
        drop(state);
        // Counting the start durably tells an operator which job keeps crashing the daemon;
        // losing the count in a crash loses nothing else.
        let mut batch = Batch::default();
        batch.put(cf::JOBS, job.seq.to_be_bytes(), job.encode());
        if let Err(e) = self.db.write(batch) {
            tracing::warn!(job = job.seq, error = %e.chain(), "cannot count a job start");
        }
        job
    }

    /// Removes a finished job with the writes of its outcome, or leaves an interrupted one
    /// queued (for the next start: this run stops taking jobs).
    fn finish(&self, job: &Job, outcome: Option<Batch>) {
        let mut state = self.state.lock();
        let identity = (job.kind.clone(), job.subject.clone());
        state.running.remove(&identity);
        if let Some(mut batch) = outcome {
            batch.delete(cf::JOBS, job.seq.to_be_bytes());
            if let Err(e) = self.db.write(batch) {
                // The row stays, so the next start runs the job again.
                tracing::error!(job = job.seq, error = %e.chain(),
                    "cannot record a job's outcome; it runs again at the next start");
            }
            state.jobs.remove(&job.seq);
        } else {
            // Interrupted: it waits for the next start, as queued again, not running (a
            // stop is no crash).
            state.subjects.entry(identity).or_insert(job.seq);
            if let Some(queued) = state.jobs.get_mut(&job.seq) {
                queued.running = false;
                let mut batch = Batch::default();
                batch.put(cf::JOBS, job.seq.to_be_bytes(), queued.encode());
                if let Err(e) = self.db.write(batch) {
                    tracing::warn!(job = job.seq, error = %e.chain(),
                        "cannot record that a job was stopped; the next start counts a crash");
                }
            }
        }
        drop(state);
        // A job of the same subject may run now.
        self.wake.notify_all();
        self.idle.notify_all();
    }
}

/// The message a panic carried.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests;
