//! Threads that run the blocking jobs of many parties fairly: [`FairPool`].
//!
//! Restores from the cold tier (one party per store) and the mount's reads that wait for them
//! (one party per local user) can each take minutes on a tape-class cold tier. Run first come
//! first served on a fixed set of threads, one party's thousand jobs would hold every thread
//! and queue everyone else's behind them, past their deadlines. Here a party holds at most
//! `per_party` of the threads at once, and the parties' queued jobs are taken in turn, so
//! another party's job starts as soon as a thread is free whoever queued more.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// A job of a [`FairPool`].
type Job = Box<dyn FnOnce() + Send>;

/// At most `threads` threads, started as jobs come (and kept, idle, once started), running
/// the jobs of parties `K`: at most `per_party` of one party at once, parties in turn.
pub struct FairPool<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    name: String,
    threads: usize,
    per_party: usize,
    state: Mutex<State<K>>,
    /// A job was queued, a party's running job ended, or the pool closed.
    changed: Condvar,
}

struct State<K> {
    /// Queued jobs by party (a party is here only while it has some), and their number.
    queued: HashMap<K, VecDeque<Job>>,
    queued_jobs: usize,
    /// The parties with queued jobs, in the order of their next turn.
    turns: VecDeque<K>,
    /// Jobs running, by party (a party is here only while it has some).
    running: HashMap<K, usize>,
    /// Threads started, and how many of them wait for a job (woken or not).
    started: usize,
    idle: usize,
    /// Dropped: threads end once nothing is left to run.
    closed: bool,
}

impl<K: Hash + Eq + Clone + Send + 'static> FairPool<K> {
    /// A pool of up to `threads` threads (at least one) named `name-N`, at most `per_party`
    /// of them (at least one, at most all) running one party's jobs.
    pub fn new(name: &str, threads: usize, per_party: usize) -> Self {
        FairPool {
            shared: Arc::new(Shared {
                name: name.to_string(),
                threads: threads.max(1),
                per_party: per_party.clamp(1, threads.max(1)),
                state: Mutex::new(State {
                    queued: HashMap::new(),
                    queued_jobs: 0,
                    turns: VecDeque::new(),
                    running: HashMap::new(),
                    started: 0,
                    idle: 0,
                    closed: false,
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Queues `job` of `party`; it runs on a thread of the pool in its party's turn.
    ///
    /// When no thread can be started and the pool has none, the jobs queued (this one, and
    /// any other party's) run here, on the caller's thread, rather than never: a machine out
    /// of threads is better served slowly than not at all.
    pub fn run(&self, party: K, job: Job) {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        if !state.queued.contains_key(&party) {
            state.turns.push_back(party.clone());
        }
        state.queued.entry(party).or_default().push_back(job);
        state.queued_jobs += 1;
        if state.idle > 0 {
            shared.changed.notify_one();
        }
        // A thread woken takes one job; jobs queued before it woke need threads of their own.
        if state.idle >= state.queued_jobs || state.started >= shared.threads {
            return;
        }
        state.started += 1;
        let n = state.started;
        drop(state);
        let worker = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{n}", shared.name))
            .spawn(move || worker.work());
        if let Err(e) = spawned {
            let mut state = shared.state.lock();
            state.started -= 1;
            // The pool's threads take the job in turn.
            if state.started > 0 {
                tracing::warn!(pool = %shared.name, error = %e, "cannot start another thread");
                return;
            }
            tracing::warn!(pool = %shared.name, error = %e, "cannot start a thread; jobs run on their caller's");
            // Every job queued meanwhile too: no thread would take it.
            while state.started == 0
                && let Some((party, job)) = state.next_within(usize::MAX)
            {
                drop(state);
                shared.finish(&party, job);
                state = shared.state.lock();
            }
        }
    }
}

impl<K: Hash + Eq + Clone> State<K> {
    /// The next job to run (its party's running count taken): of the parties below
    /// `per_party`, the one with the fewest jobs running, the first in turn of those; it
    /// then goes to the back of the turns. (Fewest first: a party at its share that frees a
    /// thread does not take it back ahead of one with nothing running.)
    fn next_within(&mut self, per_party: usize) -> Option<(K, Job)> {
        let running = |party: &K| self.running.get(party).copied().unwrap_or(0);
        let (position, _) = self
            .turns
            .iter()
            .map(running)
            .enumerate()
            .filter(|(_, running)| *running < per_party)
            .min_by_key(|(_, running)| *running)?;
        let party = self
            .turns
            .remove(position)
            .expect("a position found in the turns");
        let jobs = self
            .queued
            .get_mut(&party)
            .expect("a party in turn has jobs");
        let job = jobs.pop_front().expect("a party in turn has jobs");
        self.queued_jobs -= 1;
        if jobs.is_empty() {
            self.queued.remove(&party);
        } else {
            self.turns.push_back(party.clone());
        }
        *self.running.entry(party.clone()).or_default() += 1;
        Some((party, job))
    }
}

impl<K: Hash + Eq + Clone> Shared<K> {
    fn work(&self) {
        let mut state = self.state.lock();
        loop {
            if let Some((party, job)) = state.next_within(self.per_party) {
                drop(state);
                self.finish(&party, job);
                state = self.state.lock();
                continue;
            }
            if state.closed && state.running.is_empty() {
                return;
            }
            state.idle += 1;
            self.changed.wait(&mut state);
            state.idle -= 1;
        }
    }

    /// Runs `job` of `party` (a panic in it ends the job, not the thread) and counts it done.
    fn finish(&self, party: &K, job: Job) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        let mut state = self.state.lock();
        if let Some(running) = state.running.get_mut(party) {
            *running -= 1;
            if *running == 0 {
                state.running.remove(party);
            }
        }
        // That party's next job may run now, on any thread.
        if state.queued.contains_key(party) || state.closed {
            self.changed.notify_all();
        }
    }
}

impl<K> Drop for FairPool<K> {
    fn drop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A job of `party` that reports its start and then waits for its release.
    fn held(
        pool: &FairPool<&'static str>,
        party: &'static str,
        started: &mpsc::Sender<&'static str>,
    ) -> mpsc::Sender<()> {
        let (release, released) = mpsc::channel::<()>();
        let started = started.clone();
        pool.run(
            party,
            Box::new(move || {
                let _ = started.send(party);
                let _ = released.recv();
            }),
        );
        release
    }

    const SOON: Duration = Duration::from_secs(10);
    const NOT_YET: Duration = Duration::from_millis(200);

    #[test]
    fn one_party_holds_at_most_its_share_and_another_party_starts_at_once() {
        let pool = FairPool::new("test", 4, 2);
        let (started, starts) = mpsc::channel();
        // A job with a thousand reads queued: two of them run, the rest wait.
        let greedy: Vec<_> = (0..1000).map(|_| held(&pool, "greedy", &started)).collect();
        assert_eq!(starts.recv_timeout(SOON), Ok("greedy"));
        assert_eq!(starts.recv_timeout(SOON), Ok("greedy"));
        assert!(
            starts.recv_timeout(NOT_YET).is_err(),
            "a third of one party's jobs ran"
        );
        // Another party's job, queued after all of them, starts without waiting for them.
        let _other = held(&pool, "other", &started);
        assert_eq!(starts.recv_timeout(SOON), Ok("other"));
        // One greedy job ends: the next of that party takes its place.
        greedy[0].send(()).unwrap();
        assert_eq!(starts.recv_timeout(SOON), Ok("greedy"));
        assert!(starts.recv_timeout(NOT_YET).is_err());
    }

    #[test]
    fn a_party_with_nothing_running_goes_before_one_that_frees_a_thread() {
        let pool = FairPool::new("test", 4, 2);
        let (started, starts) = mpsc::channel();
        let a: Vec<_> = (0..3).map(|_| held(&pool, "a", &started)).collect();
        let _c: Vec<_> = (0..3).map(|_| held(&pool, "c", &started)).collect();
        for _ in 0..4 {
            starts.recv_timeout(SOON).unwrap();
        }
        // Every thread is taken (two of a, two of c); b queues behind a's and c's third.
        let _b = held(&pool, "b", &started);
        assert!(starts.recv_timeout(NOT_YET).is_err());
        a[0].send(()).unwrap();
        assert_eq!(starts.recv_timeout(SOON), Ok("b"));
    }

    #[test]
    fn parties_take_turns_and_every_job_runs_once() {
        let pool = FairPool::new("test", 1, 1);
        let (done, finished) = mpsc::channel();
        let (started, starts) = mpsc::channel();
        // The one thread is held while the turns are queued.
        let first = held(&pool, "a", &started);
        assert_eq!(starts.recv_timeout(SOON), Ok("a"));
        for (party, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("b", 2)] {
            let done = done.clone();
            pool.run(party, Box::new(move || done.send((party, n)).unwrap()));
        }
        first.send(()).unwrap();
        let order: Vec<_> = (0..6)
            .map(|_| finished.recv_timeout(SOON).unwrap())
            .collect();
        assert_eq!(
            order,
            [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("a", 3)]
        );
        assert!(finished.recv_timeout(NOT_YET).is_err());
    }

    #[test]
    fn a_job_that_panics_leaves_the_pool_working() {
        let pool = FairPool::new("test", 1, 1);
        let (done, finished) = mpsc::channel();
        pool.run("a", Box::new(|| panic!("a failing job")));
        pool.run("a", Box::new(move || done.send(()).unwrap()));
        assert_eq!(finished.recv_timeout(SOON), Ok(()));
    }

    #[test]
    fn jobs_queued_before_the_pool_is_dropped_still_run() {
        let (done, finished) = mpsc::channel();
        let (started, starts) = mpsc::channel();
        let pool = FairPool::new("test", 1, 1);
        let first = held(&pool, "a", &started);
        assert_eq!(starts.recv_timeout(SOON), Ok("a"));
        pool.run("b", Box::new(move || done.send(()).unwrap()));
        drop(pool);
        first.send(()).unwrap();
        assert_eq!(finished.recv_timeout(SOON), Ok(()));
    }
}
