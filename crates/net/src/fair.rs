//! A byte rate shared by several threads — all the flows of one source address on `serve`
//! (`--per-source-rate`) — and shared *fairly*.
//!
//! Two parts. A GCRA bucket (ITU-T I.371's generic cell rate algorithm, "virtual scheduling"
//! form: one time, the theoretical arrival time `tat` of the next byte) bounds the average and
//! the burst. In front of it, start-time fair queueing (Goyal, Vin & Cheng, "Start-time Fair
//! Queueing", SIGCOMM 1996) decides whose bytes go next: every flow's request gets a start tag,
//! `max(virtual time, the flow's previous finish tag)`, in bytes; the waiting request with the
//! smallest tag is served first, and the virtual time is the start tag of the last request
//! served.
//!
//! The bucket alone is not enough: served first come, first served, a flow gets one turn per
//! round whatever its size, so a TCP flow writing 128 KiB at a time took 90 times the share of a
//! UDP flow sending 1.4 KB datagrams, and a policed flow (received datagrams, which cannot
//! wait) never found room in a bucket the waiting flows kept full — two concurrent UDP tests from
//! one address got 0.5 and 0 Mbit/s next to two TCP tests. With the tags, flows share the rate
//! in bytes whatever their write sizes, and a policed datagram is let through when its flow is
//! not ahead of the next waiting flow (dropped when it is: that flow's turn). Every byte let
//! through is accounted in the bucket, so the average never exceeds the rate: over any time
//! `T` at most `rate × (T + 2 × burst)` bytes pass.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::pace::sleep_until_or_stop;

/// How often a waiting thread looks at its stop flag and deadline, at the longest.
const CHECK: Duration = Duration::from_millis(50);

/// A byte-rate limit shared by the flows of one source address; each flow takes a [`Share`].
#[derive(Debug)]
pub struct RateLimit {
    ns_per_byte: f64,
    burst: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The bucket: when the rate is used up to (None: never used).
    tat: Option<Instant>,
    /// Virtual time, bytes: the start tag of the last request served.
    virtual_bytes: u64,
    /// Each live flow's finish tag: the start tag of its last request served plus its bytes.
    finish: HashMap<u64, u64>,
    /// Requests waiting for their turn, by (start tag, ticket), with the thread to wake.
    queue: BTreeMap<(u64, u64), Thread>,
    next_ticket: u64,
    next_flow: u64,
}

impl State {
    fn start_tag(&self, flow: u64) -> u64 {
        self.finish
            .get(&flow)
            .copied()
            .unwrap_or(0)
            .max(self.virtual_bytes)
    }

    /// Account `bytes` of `flow` served now with start tag `start`.
    fn serve(&mut self, flow: u64, start: u64, bytes: u64, cost: Duration, now: Instant) {
        self.tat = Some(self.tat.map_or(now, |t| t.max(now)) + cost);
        self.virtual_bytes = self.virtual_bytes.max(start);
        self.finish.insert(flow, start.saturating_add(bytes));
    }

    /// Leave the queue and wake the request now at its head.
    fn leave(&mut self, key: (u64, u64)) {
        self.queue.remove(&key);
        if let Some((_, t)) = self.queue.first_key_value() {
            t.unpark();
        }
    }
}

impl RateLimit {
    /// `bytes_per_s` on average (> 0), bursts of `burst` (e.g. 50 ms) at most.
    pub fn new(bytes_per_s: f64, burst: Duration) -> RateLimit {
        RateLimit {
            ns_per_byte: 1e9 / bytes_per_s.max(1.0),
            burst,
            state: Mutex::new(State::default()),
        }
    }

    /// The average rate, bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        1e9 / self.ns_per_byte
    }

    /// A new flow's share of the rate.
    pub fn share(self: &Arc<Self>) -> Share {
        let mut st = self.lock();
        let flow = st.next_flow;
        st.next_flow += 1;
        Share {
            limit: self.clone(),
            flow,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `bytes` cost in time; saturated at a day so a tiny rate cannot overflow `Instant`
    /// (every wait is bounded by the caller's deadline anyway).
    fn cost(&self, bytes: u64) -> Duration {
        Duration::from_nanos((bytes as f64 * self.ns_per_byte).min(86_400e9) as u64)
    }

    /// When the bucket has room for `cost` (now or earlier: at once). A request larger than
    /// the burst goes once the bucket is empty, and the next waits for it.
    fn room_at(&self, st: &State, cost: Duration, now: Instant) -> Instant {
        let base = st.tat.map_or(now, |t| t.max(now)) + cost.min(self.burst);
        base.checked_sub(self.burst).unwrap_or(now)
    }

    fn wait(&self, flow: u64, bytes: u64, deadline: Option<Instant>, stop: &AtomicBool) -> bool {
        let cost = self.cost(bytes);
        let mut st = self.lock();
        let start = st.start_tag(flow);
        let key = (start, st.next_ticket);
        st.next_ticket += 1;
        st.queue.insert(key, std::thread::current());
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
                st.leave(key);
                return false;
            }
            if st.queue.first_key_value().map(|(k, _)| *k) != Some(key) {
                // Not our turn: the request before us wakes us when it is served or leaves.
                drop(st);
                let left = deadline.map_or(CHECK, |d| d.saturating_duration_since(now));
                std::thread::park_timeout(left.min(CHECK));
                st = self.lock();
                continue;
            }
            let at = self.room_at(&st, cost, now);
            if at <= now {
                st.serve(flow, start, bytes, cost, now);
                st.leave(key);
                return true;
            }
            if let Some(d) = deadline.filter(|d| at >= *d) {
                // The bytes cannot go before the deadline: give the turn away, and sleep up to
                // the deadline so a caller that loops is not a busy loop.
                st.leave(key);
                drop(st);
                sleep_until_or_stop(d, stop);
                return false;
            }
            drop(st);
            sleep_until_or_stop(at, stop);
            st = self.lock();
        }
    }

    fn admit(&self, flow: u64, bytes: u64) -> bool {
        let now = Instant::now();
        let cost = self.cost(bytes);
        let mut st = self.lock();
        let start = st.start_tag(flow);
        // A waiting flow that is behind this one has the turn: the datagram is dropped. A
        // datagram of a flow that is behind the waiting ones may overdraw the bucket by one
        // burst: the waiting flows, which wake exactly when room appears, would otherwise take
        // all of it before a datagram arrives, and they make up for it by waiting longer.
        let slack = match st.queue.first_key_value() {
            Some(((s, _), _)) if *s < start => return false,
            Some(_) => self.burst,
            None => Duration::ZERO,
        };
        if self.room_at(&st, cost, now) > now + slack {
            return false;
        }
        st.serve(flow, start, bytes, cost, now);
        true
    }
}

/// One flow's share of a [`RateLimit`]; the flow is forgotten when dropped.
#[derive(Debug)]
pub struct Share {
    limit: Arc<RateLimit>,
    flow: u64,
}

impl Share {
    /// Shaping: wait for this flow's turn and for the rate to allow `bytes`. False, without
    /// waiting it out, when `stop` is set or `deadline` comes first.
    pub fn wait(&self, bytes: u64, deadline: Option<Instant>, stop: &AtomicBool) -> bool {
        self.limit.wait(self.flow, bytes, deadline, stop)
    }

    /// Policing (what cannot be slowed down, e.g. datagrams already received): whether `bytes`
    /// may pass now; they are accounted only if they do.
    pub fn admit(&self, bytes: u64) -> bool {
        self.limit.admit(self.flow, bytes)
    }

    /// The whole limit's average rate, bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        self.limit.bytes_per_s()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.limit.lock().finish.remove(&self.flow);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn shapes_to_its_rate() {
        // 1 MB/s, 10 ms bursts: 300 KB take ~0.29 s (the first 10 KB go at once).
        let r = Arc::new(RateLimit::new(1e6, Duration::from_millis(10)));
        let s = r.share();
        let stop = AtomicBool::new(false);
        let t0 = Instant::now();
        for _ in 0..30 {
            assert!(s.wait(10_000, None, &stop));
        }
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(270) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // A request larger than the burst goes once the bucket is empty; the next waits for
        // it (a second): before a deadline 30 ms away it cannot go: false, at the deadline.
        assert!(s.wait(1_000_000, None, &stop));
        let d = Instant::now() + Duration::from_millis(30);
        assert!(!s.wait(1_000, Some(d), &stop));
        assert!(Instant::now() >= d);
    }

    #[test]
    fn polices() {
        let r = Arc::new(RateLimit::new(1e6, Duration::from_millis(10)));
        let s = r.share();
        // The burst (10 ms of 1 MB/s = 10 KB) fits, the next datagram does not.
        assert!(s.admit(5_000));
        assert!(s.admit(5_000));
        assert!(!s.admit(5_000));
        std::thread::sleep(Duration::from_millis(20));
        assert!(s.admit(5_000));
    }

    /// Bytes each flow gets in `run` when they all want more than the rate: shapers with the
    /// given request sizes, plus (if `policed`) one flow offering eight 1,400-byte datagrams
    /// every 100 µs (≈ 900 Mbit/s; bursts, as a socket buffer delivers them, so a thread that
    /// a loaded machine wakes late still offers more than its share).
    fn contend(sizes: &[u64], policed: bool, run: Duration) -> Vec<u64> {
        let r = Arc::new(RateLimit::new(4e6, Duration::from_millis(20)));
        let stop = Arc::new(AtomicBool::new(false));
        let got: Arc<Vec<AtomicU64>> =
            Arc::new((0..sizes.len() + 1).map(|_| AtomicU64::new(0)).collect());
        let mut threads = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let (share, stop, got) = (r.share(), stop.clone(), got.clone());
            threads.push(std::thread::spawn(move || {
                while share.wait(size, None, &stop) {
                    got[i].fetch_add(size, Ordering::Relaxed);
                }
            }));
        }
        if policed {
            let (share, stop, got) = (r.share(), stop.clone(), got.clone());
            let i = sizes.len();
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..8 {
                        if share.admit(1_400) {
                            got[i].fetch_add(1_400, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }));
        }
        std::thread::sleep(run);
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        got.iter().map(|g| g.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn flows_share_in_bytes_whatever_their_request_sizes() {
        // 4 MB/s for 1 s among 128 KiB, 128 KiB and 1.4 KB requests, and a policed flow: each
        // gets about a quarter (1 MB). Before fair queueing the small-request flow got ~1% of
        // the large ones and the policed flow nothing. Generous bounds: a loaded machine
        // delays threads, never gives one the others' share.
        let got = contend(&[131_072, 131_072, 1_400], true, Duration::from_secs(1));
        let total: u64 = got.iter().sum();
        assert!(total <= 4_000_000 + 400_000, "{got:?}: over the rate");
        for (i, g) in got.iter().enumerate() {
            assert!(
                *g * 8 >= total,
                "flow {i} got {g} B of {total} ({got:?}): less than half its fair share"
            );
        }
    }
}
