//! The rounds of a response's transfer as the client receives it: a sender lets out what its
//! congestion window (or a smaller window or buffer) allows, then waits for the ACKs, so across
//! a path of milliseconds the response arrives in flights one round trip apart. The pauses
//! between reads tell them apart; the flights' sizes say what held the sender: a first flight
//! of the initial window that doubles each round (slow start, RFC 5681 §3.1), or a flight that
//! stays the same size round after round (a window or a buffer, not the network).

/// Segments of a first flight by RFC 6928: Linux's initial congestion window since 2.6.39.
pub const INITIAL_WINDOW_SEGMENTS: u64 = 10;

/// A pause between two reads of at least this share of the path's RTT starts a new flight:
/// within a flight segments follow each other at the bottleneck's pace, between flights the
/// sender waits for the ACKs of the last one.
const GAP_SHARE: f64 = 0.25;

/// Flights are told apart over a path of at least this RTT: over a LAN or a loopback the
/// pauses between them are microseconds, the scheduler's own noise, and a round trip there
/// costs nothing worth counting.
pub const MIN_RTT_NS: u64 = 2_000_000;

/// The bytes of each flight of a response, in order, from its reads `(at_ns, bytes)` and the
/// moment its first byte arrived: reads well before the first byte (a TLS session ticket the
/// server sent after the handshake) are not the response's. Empty over a path shorter than
/// [`MIN_RTT_NS`].
pub fn flights(reads: &[(u64, u64)], first_byte_ns: u64, rtt_ns: u64) -> Vec<u64> {
    if rtt_ns < MIN_RTT_NS {
        return Vec::new();
    }
    let gap = (rtt_ns as f64 * GAP_SHARE) as u64;
    let mut out: Vec<u64> = Vec::new();
    let mut last: Option<u64> = None;
    for &(at, bytes) in reads {
        if at.saturating_add(gap) < first_byte_ns {
            continue;
        }
        match (last, out.last_mut()) {
            (Some(prev), Some(f)) if at.saturating_sub(prev) < gap => *f += bytes,
            _ => out.push(bytes),
        }
        last = Some(at);
    }
    out
}

/// The round trips a transfer spanned after its first flight: its time in round trips of the
/// path, at least as many as the flights after the first (each waited for the ACKs of the
/// last). Once a window (the client's receive window early in a connection, or a buffer) paces
/// the sender, data arrives continuously, one window per round trip, and only the time counts
/// them. 0 over a path shorter than [`MIN_RTT_NS`], where round trips are not counted.
pub fn transfer_rounds(flights: &[u64], transfer_ns: u64, rtt_ns: u64) -> u32 {
    if rtt_ns < MIN_RTT_NS {
        return 0;
    }
    let by_time = (transfer_ns + rtt_ns / 2) / rtt_ns;
    (flights.len().saturating_sub(1) as u64)
        .max(by_time)
        .min(u64::from(u32::MAX)) as u32
}

/// The further rounds after the first flight that `bytes` need at best: a first flight of
/// [`INITIAL_WINDOW_SEGMENTS`] of `mss`, doubling every round, nothing else in the way.
pub fn floor_rounds(bytes: u64, mss: u32) -> u32 {
    let mut window = INITIAL_WINDOW_SEGMENTS * u64::from(mss.max(1));
    let mut sent = window;
    let mut rounds = 0;
    while sent < bytes && rounds < 64 {
        window = window.saturating_mul(2);
        sent = sent.saturating_add(window);
        rounds += 1;
    }
    rounds
}

/// A run of flights that stay the same size: what a window or a buffer lets out per round
/// trip, whatever the congestion window would allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plateau {
    /// The flights' median size, bytes.
    pub bytes: u64,
    /// How many flights in a row.
    pub rounds: u32,
}

/// The least flights in a row that make a plateau: fewer could be the top of slow start.
pub const PLATEAU_ROUNDS: usize = 4;

/// The flights before the last (the last carries the rest of the response) ending in a run
/// where at least [`PLATEAU_ROUNDS`] flights, and three in four of the run, are of one size:
/// within two segments or a tenth of the run's median, and not growing (congestion avoidance
/// after a loss adds a segment each round, which four rounds show). The odd flight in a run —
/// one read in two by a late wake-up or a delayed ACK, or two read as one — does not end it:
/// the lab's 8 KiB send buffer 20 ms away, on a noisy host, let 69 KiB out per round trip for
/// 18 rounds, and a run that had to be unbroken was found in two runs of three.
pub fn plateau(flights: &[u64], mss: u32) -> Option<Plateau> {
    let full = flights.get(..flights.len().checked_sub(1)?)?;
    let mss = u64::from(mss.max(1));
    let mut found = None;
    for start in (0..full.len().saturating_sub(PLATEAU_ROUNDS - 1)).rev() {
        let run = &full[start..];
        let mut sorted = run.to_vec();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        let band = (2 * mss).max(median / 10);
        let level: Vec<u64> = run
            .iter()
            .copied()
            .filter(|b| b.abs_diff(median) <= band)
            .collect();
        let (Some(&first), Some(&last)) = (level.first(), level.last()) else {
            continue;
        };
        if level.len() >= PLATEAU_ROUNDS && level.len() * 4 >= run.len() * 3 && last <= first + mss
        {
            found = Some(Plateau {
                bytes: median,
                rounds: level.len() as u32,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Reads of `sizes` flights one RTT apart, each flight in reads of 16 KiB 50 µs apart.
    fn reads(sizes: &[u64], rtt: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let mut t = i as u64 * rtt;
            let mut left = s;
            while left > 0 {
                let n = left.min(16_384);
                out.push((t, n));
                left -= n;
                t += 50_000;
            }
        }
        out
    }

    #[test]
    fn flights_one_round_trip_apart_are_told_apart() {
        let sizes = [14_480, 28_960, 57_920, 30_000];
        let r = reads(&sizes, 40 * MS);
        assert_eq!(flights(&r, 0, 40 * MS), sizes.to_vec());
        // A read before the first byte (a session ticket) is not the response's.
        let mut with_ticket = vec![(0, 500)];
        with_ticket.extend(r.iter().map(|&(t, b)| (t + 40 * MS, b)));
        assert_eq!(flights(&with_ticket, 40 * MS, 40 * MS), sizes.to_vec());
        // Over a LAN nothing is told apart.
        assert!(flights(&r, 0, MS).is_empty());
    }

    #[test]
    fn a_transfer_counts_its_time_in_round_trips() {
        // 256 KiB over 40 ms from a Linux client whose window grows a round at a time: three
        // flights told apart, then a continuous flow for the rest: 181 ms are 5 round trips.
        assert_eq!(
            transfer_rounds(&[13_000, 28_300, 220_000], 181 * MS, 40 * MS),
            5
        );
        assert_eq!(
            transfer_rounds(&[14_480, 28_960, 57_920], 70 * MS, 40 * MS),
            2
        );
        assert_eq!(transfer_rounds(&[], 3 * MS, 60_000), 0, "not over a LAN");
    }

    #[test]
    fn the_floor_is_slow_start_from_ten_segments() {
        assert_eq!(floor_rounds(10_000, 1448), 0);
        assert_eq!(floor_rounds(14_480, 1448), 0);
        assert_eq!(floor_rounds(14_481, 1448), 1);
        // 10 + 20 + 40 + 80 segments: 150 × 1448 = 217 200 bytes in the first flight and 3 more.
        assert_eq!(floor_rounds(217_200, 1448), 3);
        assert_eq!(floor_rounds(256 * 1024, 1448), 4);
        assert!(floor_rounds(u64::MAX, 0) <= 64, "bounded");
    }

    #[test]
    fn a_plateau_is_a_window_and_slow_start_is_not() {
        let mss = 1448;
        // An 8 KiB send buffer: after the first flights the sender lets out ~16 KiB per round.
        let buffered = [14_480, 16_000, 16_400, 16_100, 16_300, 16_200, 5_000];
        assert_eq!(
            plateau(&buffered, mss),
            Some(Plateau {
                bytes: 16_200,
                rounds: 5
            })
        );
        let slow_start = [14_480, 28_960, 57_920, 115_840, 20_000];
        assert_eq!(plateau(&slow_start, mss), None);
        // Congestion avoidance: a segment more every round.
        let avoidance: Vec<u64> = (0..8).map(|i| 40_000 + i * 1448).collect();
        assert_eq!(plateau(&avoidance, mss), None);
        assert_eq!(plateau(&[], mss), None);
        // The odd flight: one read in two halves, and two read as one, among 69 KiB a round.
        let mut noisy = vec![6_000, 65_000];
        noisy.extend([70_900; 6]);
        noisy.extend([35_500, 35_400]);
        noisy.extend([70_900; 5]);
        noisy.push(141_800);
        noisy.extend([70_900; 3]);
        noisy.push(12_000);
        assert_eq!(
            plateau(&noisy, mss),
            Some(Plateau {
                bytes: 70_900,
                rounds: 14
            })
        );
        // Odd flights are a minority or it is no plateau.
        let ragged = [
            14_480, 16_000, 30_000, 8_000, 16_000, 31_000, 16_100, 9_000, 5_000,
        ];
        assert_eq!(plateau(&ragged, mss), None);
        assert_eq!(
            plateau(&[16_000, 16_000, 16_000, 16_000], mss),
            None,
            "three full flights"
        );
    }
}
