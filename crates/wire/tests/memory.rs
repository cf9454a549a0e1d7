//! Memory per open connection stays bounded however long a connection lives: the analyzer's
//! heap is measured with a counting allocator on generated captures where every connection
//! stays open over the whole capture (a connection pool), captured both ways and one way
//! (no ACK of the server's data ever seen), at two capture lengths.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use latscope_wire::synth::{Shape, generate_shape};
use latscope_wire::{AnalyzeOptions, Analyzer, CaptureReader, analyze_capture};

/// The system allocator, counting the bytes allocated now and the most at once.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = NOW.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        NOW.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > l.size() {
            let now = NOW.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        } else {
            NOW.fetch_sub(l.size() - new, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap bytes of analysing a capture of `conns` persistent connections and `packets`
/// packets (the capture itself, generated beforehand, not counted), and the connections seen.
fn analysis_peak(conns: usize, packets: u64, one_way: bool) -> (usize, u64) {
    let mut file = Vec::new();
    let shape = Shape {
        persistent: true,
        one_way,
    };
    generate_shape(&mut file, packets, conns, 7, shape).unwrap();
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut a = Analyzer::new(AnalyzeOptions::default());
    analyze_capture(
        CaptureReader::new(&file[..]).unwrap(),
        &mut a,
        &AtomicBool::new(false),
        |_| {},
    )
    .unwrap();
    let open = a.open_connections();
    let r = a.finish();
    assert_eq!(r.connections, conns as u64, "every connection stays open");
    assert_eq!(open, conns as u64);
    (PEAK.load(Ordering::Relaxed) - base, r.connections)
}

/// Heap bytes per open connection: the difference between `2n` and `n` connections with the
/// same packets per connection, so the fixed costs (read buffer, histograms) cancel out.
fn bytes_per_conn(n: usize, packets_per_conn: u64, one_way: bool) -> usize {
    let (small, _) = analysis_peak(n, n as u64 * packets_per_conn, one_way);
    let (large, _) = analysis_peak(2 * n, 2 * n as u64 * packets_per_conn, one_way);
    large.saturating_sub(small) / n
}

#[test]
fn bytes_per_open_connection_are_bounded_and_do_not_grow_with_age() {
    // One way, every response stays unacknowledged: the list fills to its cap (256 entries,
    // one per response) by ~3000 packets, then stays there.
    for (one_way, n, short_pkts, long_pkts) in [(false, 500, 400, 1600), (true, 250, 3200, 6400)] {
        let short = bytes_per_conn(n, short_pkts, one_way);
        let long = bytes_per_conn(n, long_pkts, one_way);
        eprintln!(
            "{}: {short} bytes per open connection after ~{short_pkts} packets each, {long} after ~{long_pkts}",
            if one_way { "one way" } else { "both ways" }
        );
        assert!(
            long <= short + short / 4 + 256,
            "memory per connection grows with its age: {short} → {long} bytes"
        );
        assert!(long < 16 * 1024, "{long} bytes per open connection");
    }
}
