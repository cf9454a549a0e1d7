//! `latscope serve`'s log, written for the person running it: a line per test started and
//! ended, naming tests as the CLI does (`rr --udp`, `stream -R -c 4`); bare TCP connects
//! (`latscope connect`, port scans: closed before a greeting) summarised once per interval
//! instead of a line each; refusals (a wrong protocol's greeting, a limit) a line for the first
//! of each source per interval and a count for the rest; and a last line saying the server
//! stopped and what it cut short.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use latscope_core::model::rr::Transport;
use latscope_core::model::stream::Direction;
use latscope_core::units::{format_bitrate, format_bytes, format_duration};
use latscope_net::proto::{StreamSpec, TestKind};
use latscope_net::serve::ServeEvent;

/// How often bare connects and repeated refusals are summarised.
pub const BARE_SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Sources whose first refusal of an interval gets a line of its own; beyond them, refusals are
/// only counted (a scan from many addresses stays a few lines).
const REFUSED_LINES_PER_INTERVAL: usize = 10;

/// The log's memory: tests running, bare connects since the last summary.
#[derive(Default)]
pub struct ServeLog {
    quiet: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: BTreeSet<u64>,
    /// Bare connects per source address since the last summary.
    bare: BTreeMap<String, u64>,
    /// Refusals per source address since the last summary, and how many of them were logged.
    refused: BTreeMap<String, u64>,
    refused_logged: u64,
}

impl ServeLog {
    /// A log; `quiet` keeps only the start-up and stop lines.
    pub fn new(quiet: bool) -> ServeLog {
        ServeLog {
            quiet,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lines to print for one event (none for a bare connect: it is counted).
    pub fn event(&self, ev: &ServeEvent) -> Vec<String> {
        let mut st = self.state();
        match ev {
            ServeEvent::Listening { .. } => Vec::new(), // printed by the command itself
            ServeEvent::TestStarted {
                id,
                peer,
                kind,
                request_bytes,
                response_bytes,
                stream,
            } => {
                st.running.insert(*id);
                self.line(format!(
                    "test {id} from {peer}: {}",
                    test_name(*kind, *request_bytes, *response_bytes, stream.as_ref())
                ))
            }
            ServeEvent::TestEnded {
                id,
                kind,
                transactions,
                elapsed,
                reason,
                ..
            } => {
                st.running.remove(id);
                let took = format_duration(*elapsed);
                let what = if *kind == TestKind::Stream {
                    let secs = elapsed.as_secs_f64().max(1e-9);
                    format!(
                        "{} moved in {took} ({})",
                        format_bytes(*transactions as f64),
                        format_bitrate(*transactions as f64 * 8.0 / secs)
                    )
                } else if *transactions == 1 {
                    format!("1 transaction in {took}")
                } else {
                    format!("{transactions} transactions in {took}")
                };
                self.line(format!("test {id} ended: {what}; {reason}"))
            }
            ServeEvent::BareConnect { peer } => {
                *st.bare.entry(source_ip(peer)).or_default() += 1;
                Vec::new()
            }
            ServeEvent::Refused { peer, reason } => {
                let sources = st.refused.len();
                let n = st.refused.entry(source_ip(peer)).or_default();
                *n += 1;
                // The first refusal of a source in this interval says why; repeats (an HTTP
                // client retrying, a scanner) are counted for the summary.
                if *n == 1 && sources < REFUSED_LINES_PER_INTERVAL {
                    st.refused_logged += 1;
                    self.line(format!("refused {peer}: {reason}"))
                } else {
                    Vec::new()
                }
            }
        }
    }

    fn line(&self, s: String) -> Vec<String> {
        if self.quiet { Vec::new() } else { vec![s] }
    }

    /// The summary lines since the last one (None if there is nothing to say): bare connects,
    /// e.g. "1000 bare TCP connects in the last 10 s (closed before a greeting): 1000 from
    /// 127.0.0.1", then the refusals that had no line of their own.
    pub fn summary(&self, over: Duration) -> Option<String> {
        let (bare, refused, logged) = {
            let mut st = self.state();
            let logged = std::mem::take(&mut st.refused_logged);
            (
                std::mem::take(&mut st.bare),
                std::mem::take(&mut st.refused),
                logged,
            )
        };
        if self.quiet {
            return None;
        }
        let lines: Vec<String> = [bare_line(bare, over), refused_line(refused, logged, over)]
            .into_iter()
            .flatten()
            .collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// The last line, once the server stopped on Ctrl-C.
    pub fn stopped(&self) -> String {
        match self.state().running.len() {
            0 => "latscope serve: stopped (Ctrl-C)".into(),
            1 => "latscope serve: stopped (Ctrl-C); 1 running test was cut short".into(),
            n => format!("latscope serve: stopped (Ctrl-C); {n} running tests were cut short"),
        }
    }
}

/// The source address of a peer `IP:PORT` (the peer text itself if it is not one).
fn source_ip(peer: &str) -> String {
    peer.parse::<SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| peer.to_string())
}

/// "990 from 127.0.0.1, 10 from 10.0.0.9": the three busiest sources, then the others in one.
fn by_source(counts: BTreeMap<String, u64>) -> String {
    let mut by: Vec<(String, u64)> = counts.into_iter().collect();
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut from: Vec<String> = by
        .iter()
        .take(3)
        .map(|(ip, n)| format!("{n} from {ip}"))
        .collect();
    if by.len() > 3 {
        from.push(format!(
            "{} from {} other addresses",
            by[3..].iter().map(|x| x.1).sum::<u64>(),
            by.len() - 3
        ));
    }
    from.join(", ")
}

/// The bare connects of an interval, by source.
fn bare_line(bare: BTreeMap<String, u64>, over: Duration) -> Option<String> {
    if bare.is_empty() {
        return None;
    }
    let total: u64 = bare.values().sum();
    let noun = if total == 1 {
        "bare TCP connect"
    } else {
        "bare TCP connects"
    };
    Some(format!(
        "{total} {noun} in the last {} (closed before a greeting, as `latscope connect` does): {}",
        format_duration(over),
        by_source(bare)
    ))
}

/// The refusals of an interval beyond the lines logged (`logged`), by source.
fn refused_line(refused: BTreeMap<String, u64>, logged: u64, over: Duration) -> Option<String> {
    let total: u64 = refused.values().sum();
    let unlogged = total.saturating_sub(logged);
    if unlogged == 0 {
        return None;
    }
    Some(format!(
        "{} in the last {} without a line of their own (the first of each source says why): {}",
        latscope_core::units::count(unlogged, "more refusal"),
        format_duration(over),
        by_source(refused)
    ))
}

/// A test as the client's command line would ask for it, with its sizes.
fn test_name(kind: TestKind, request: u32, response: u32, stream: Option<&StreamSpec>) -> String {
    match (kind, stream) {
        (TestKind::Rr, _) => format!("rr, {request} B requests / {response} B responses"),
        (TestKind::UdpRr, _) => format!("rr --udp, {request} B requests / {response} B responses"),
        (TestKind::Crr, _) => {
            format!("connect (a new connection per transaction), {request} B / {response} B")
        }
        (TestKind::Stream, Some(s)) => {
            let mut cmd = String::from("stream");
            if s.transport == Transport::Udp {
                cmd.push_str(" --udp");
            }
            match s.direction {
                Direction::Send => {}
                Direction::Receive => cmd.push_str(" -R"),
                Direction::Both => cmd.push_str(" --bidir"),
            }
            if s.streams > 1 {
                cmd.push_str(&format!(" -c {}", s.streams));
            }
            if let Some(r) = s.udp_rate_bps.filter(|_| s.transport == Transport::Udp) {
                cmd.push_str(&format!(" -b {}", format_bitrate(r)));
            }
            format!("{cmd}, {} B writes", s.buffer_bytes)
        }
        (TestKind::Stream, None) => "stream".into(),
        (TestKind::StreamJoin, _) => "a stream test's data connection".into(),
        (TestKind::Evidence, _) => "an evidence request (diagnose --server-agent)".into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn started(id: u64, kind: TestKind, stream: Option<StreamSpec>) -> ServeEvent {
        ServeEvent::TestStarted {
            id,
            peer: "127.0.0.1:40000".into(),
            kind,
            request_bytes: 64,
            response_bytes: 64,
            stream,
        }
    }

    fn spec(transport: Transport, direction: Direction, streams: u32) -> StreamSpec {
        StreamSpec {
            transport,
            direction,
            streams,
            duration_ms: 2000,
            bytes_per_stream: None,
            buffer_bytes: 131_072,
            udp_rate_bps: Some(3e8),
            options: Default::default(),
            interval_ms: 1000,
        }
    }

    #[test]
    fn tests_are_named_as_the_cli_names_them() {
        let log = ServeLog::new(false);
        let line = |ev| log.event(&ev).join("\n");
        assert_eq!(
            line(started(1, TestKind::Rr, None)),
            "test 1 from 127.0.0.1:40000: rr, 64 B requests / 64 B responses"
        );
        assert!(line(started(2, TestKind::UdpRr, None)).contains(": rr --udp, 64 B"));
        assert!(line(started(3, TestKind::Crr, None)).contains(": connect (a new connection"));
        let s = line(started(
            4,
            TestKind::Stream,
            Some(spec(Transport::Udp, Direction::Receive, 4)),
        ));
        assert!(s.contains(": stream --udp -R -c 4 -b 300"), "{s}");
        let s = line(started(
            5,
            TestKind::Stream,
            Some(spec(Transport::Tcp, Direction::Both, 1)),
        ));
        assert!(s.ends_with(": stream --bidir, 131072 B writes"), "{s}");
        for s in [line(started(6, TestKind::UdpRr, None)), s] {
            assert!(
                !s.contains("Rr") && !s.contains("Udp") && !s.contains("Stream"),
                "{s}"
            );
        }
    }

    #[test]
    fn stream_tests_end_in_bytes_and_a_rate_rr_tests_in_transactions() {
        let log = ServeLog::new(false);
        let ended = |kind, n| ServeEvent::TestEnded {
            id: 7,
            peer: "127.0.0.1:40000".into(),
            kind,
            transactions: n,
            elapsed: Duration::from_secs(2),
            reason: "client stopped the test".into(),
        };
        let s = log.event(&ended(TestKind::Stream, 25_000_000)).join("");
        assert!(
            s.contains("MiB moved in 2s") && s.contains("(100 Mbit/s)"),
            "{s}"
        );
        assert!(!s.contains("transaction"), "{s}");
        let s = log.event(&ended(TestKind::Rr, 1234)).join("");
        assert!(s.contains("1234 transactions in 2"), "{s}");
        assert!(
            log.event(&ended(TestKind::Crr, 1))
                .join("")
                .contains(" 1 transaction in")
        );
    }

    #[test]
    fn bare_connects_are_summarised_not_logged_one_by_one() {
        let log = ServeLog::new(false);
        let mut lines = 0;
        for i in 0..1000 {
            let peer = if i % 100 == 0 {
                "10.0.0.9:1000"
            } else {
                "127.0.0.1:40000"
            };
            lines += log
                .event(&ServeEvent::BareConnect { peer: peer.into() })
                .len();
        }
        assert_eq!(lines, 0);
        let s = log.summary(BARE_SUMMARY_EVERY).unwrap();
        assert!(
            s.starts_with("1000 bare TCP connects in the last 10")
                && s.contains("990 from 127.0.0.1, 10 from 10.0.0.9"),
            "{s}"
        );
        assert_eq!(log.summary(BARE_SUMMARY_EVERY), None, "counted once");
    }

    #[test]
    fn refusals_get_a_line_per_source_then_a_count() {
        let log = ServeLog::new(false);
        let refused = |peer: &str| ServeEvent::Refused {
            peer: peer.into(),
            reason: "bad greeting: not latscope's protocol".into(),
        };
        let mut lines = Vec::new();
        for i in 0..500 {
            lines.extend(log.event(&refused(&format!("127.0.0.1:{}", 40000 + i))));
        }
        lines.extend(log.event(&refused("10.0.0.9:1000")));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("refused 127.0.0.1:40000: bad greeting"),
            "{lines:?}"
        );
        let s = log.summary(BARE_SUMMARY_EVERY).unwrap();
        assert!(
            s.starts_with("499 more refusals in the last 10")
                && s.ends_with("500 from 127.0.0.1, 1 from 10.0.0.9"),
            "{s}"
        );
        assert_eq!(log.summary(BARE_SUMMARY_EVERY), None, "counted once");
        // A new interval: the source's next refusal says why again.
        assert_eq!(log.event(&refused("127.0.0.1:41000")).len(), 1);
    }

    #[test]
    fn the_stop_line_counts_what_was_cut_short() {
        let log = ServeLog::new(true);
        assert!(
            log.event(&started(1, TestKind::Rr, None)).is_empty(),
            "quiet"
        );
        log.event(&started(2, TestKind::Rr, None));
        assert!(log.stopped().contains("2 running tests were cut short"));
        log.event(&ServeEvent::TestEnded {
            id: 1,
            peer: String::new(),
            kind: TestKind::Rr,
            transactions: 1,
            elapsed: Duration::ZERO,
            reason: String::new(),
        });
        assert!(log.stopped().contains("1 running test was cut short"));
    }
}
