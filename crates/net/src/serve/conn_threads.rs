//! The threads that serve connections: one per connection, kept once its connection ends for
//! the next one (a cached pool, like Java's `newCachedThreadPool`). Starting a thread — mapping
//! its stack, cloning, the first schedule — on the accept loop's time for every connection let
//! `latscope connect`, a client that opens and closes connections as fast as the kernel
//! completes their handshakes, outrun the server: the listen queue overflowed and a dropped SYN
//! was resent a second later, once per run (issue 41). A connection still never waits for
//! another: with no idle thread, a new one is started.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What a thread runs for one connection.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Idle threads kept at most: beyond, a thread whose connection ended exits.
const MAX_IDLE: usize = 32;

/// How long a thread waits for a next connection before it exits.
const IDLE_FOR: Duration = Duration::from_secs(10);

/// How often an idle thread looks at the server's stop flag.
const POLL: Duration = Duration::from_millis(100);

/// The connection threads of one server.
pub(super) struct ConnThreads {
    state: Mutex<Pool>,
    wake: Condvar,
    stop: Arc<AtomicBool>,
    stack_bytes: usize,
    /// Threads kept beyond their connection only while the pool has no more than this many:
    /// the server's `--max-connections`, so that its thread budget (`max_connections` + 3)
    /// holds after a burst as it does during one.
    keep_at_most: usize,
}

#[derive(Default)]
struct Pool {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads alive, busy or idle.
    alive: usize,
}

impl ConnThreads {
    /// Threads with stacks of `stack_bytes`, which end when `stop` is set; at most
    /// `keep_at_most` of them (and [`MAX_IDLE`] idle) outlive their connection.
    pub(super) fn new(
        stop: Arc<AtomicBool>,
        stack_bytes: usize,
        keep_at_most: usize,
    ) -> Arc<ConnThreads> {
        Arc::new(ConnThreads {
            state: Mutex::new(Pool::default()),
            wake: Condvar::new(),
            stop,
            stack_bytes,
            keep_at_most,
        })
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `job` on an idle thread, or on a new one when none is idle.
    pub(super) fn run(self: &Arc<Self>, job: Job) -> io::Result<()> {
        {
            let mut p = self.pool();
            if p.idle > p.jobs.len() {
                p.jobs.push_back(job);
                self.wake.notify_one();
                return Ok(());
            }
            p.alive += 1;
        }
        let pool = self.clone();
        let spawned = thread::Builder::new()
            .name("serve-conn".into())
            .stack_size(self.stack_bytes)
            .spawn(move || {
                // Counted out however the thread ends (a connection's code that panics too).
                let _alive = Alive(&pool);
                pool.work(job);
            });
        if spawned.is_err() {
            self.pool().alive -= 1;
        }
        spawned.map(drop)
    }

    /// Threads waiting for a connection now.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.pool().idle
    }

    /// One thread's life: its first job, then the next ones handed to it, until it has waited
    /// [`IDLE_FOR`] for one, [`MAX_IDLE`] others are idle already, the pool holds more than
    /// `keep_at_most` threads, or the server stops.
    fn work(&self, first: Job) {
        first();
        loop {
            let mut p = self.pool();
            if p.idle >= MAX_IDLE.min(self.keep_at_most) || p.alive > self.keep_at_most {
                return;
            }
            p.idle += 1;
            let until = Instant::now() + IDLE_FOR;
            let job = loop {
                if let Some(j) = p.jobs.pop_front() {
                    break Some(j);
                }
                let now = Instant::now();
                if now >= until || self.stop.load(Ordering::Relaxed) {
                    break None;
                }
                p = match self.wake.wait_timeout(p, POLL.min(until - now)) {
                    Ok((p, _)) => p,
                    Err(e) => e.into_inner().0,
                };
            };
            p.idle -= 1;
            drop(p);
            match job {
                Some(j) => j(),
                None => return,
            }
        }
    }
}

/// One of the pool's threads, while it lives.
struct Alive<'a>(&'a ConnThreads);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.pool().alive -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Connections one after the other are served by one thread; one that arrives while the
    /// others are busy gets a thread of its own, never a wait.
    #[test]
    fn a_thread_serves_the_next_connection_and_none_waits_for_another() {
        let stop = Arc::new(AtomicBool::new(false));
        let pool = ConnThreads::new(stop.clone(), 256 * 1024, 8);
        let (tx, rx) = mpsc::channel();
        for _ in 0..50 {
            let tx = tx.clone();
            pool.run(Box::new(move || {
                let _ = tx.send(thread::current().id());
            }))
            .expect("runs");
            let _ = rx.recv_timeout(Duration::from_secs(5)).expect("served");
            // Let the thread go back to waiting before the next connection.
            let t0 = Instant::now();
            while pool.idle() == 0 && t0.elapsed() < Duration::from_secs(5) {
                thread::sleep(Duration::from_millis(1));
            }
        }
        drop(tx);
        assert_eq!(pool.idle(), 1, "one thread served all fifty in turn");
        // Two connections that take a while: the second is not queued behind the first.
        let (started, seen) = mpsc::channel();
        let t0 = Instant::now();
        for _ in 0..2 {
            let started = started.clone();
            pool.run(Box::new(move || {
                let _ = started.send(());
                thread::sleep(Duration::from_millis(500));
            }))
            .expect("runs");
        }
        for _ in 0..2 {
            seen.recv_timeout(Duration::from_secs(5)).expect("served");
        }
        assert!(
            t0.elapsed() < Duration::from_millis(400),
            "both ran at once: {:?}",
            t0.elapsed()
        );
        // The server stops: idle threads end.
        stop.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        while pool.idle() > 0 && t0.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pool.idle(), 0);
    }
}
