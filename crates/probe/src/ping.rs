//! The ping engine: send probes at an interval (or as fast as answers come back with
//! `flood`), match answers, count losses, and hand each answer to a callback as it comes.
//! The engine never prints.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::LatencyHistogram;
use latscope_core::model::Meta;
use latscope_core::model::ping::{PingReply, PingReport, PortState};

use crate::error::ProbeError;
use crate::packet;
use crate::prober::{Prober, Response};

/// How to ping.
#[derive(Clone, Debug)]
pub struct PingOptions {
    /// Stop after this many probes (None: until stopped).
    pub count: Option<u64>,
    /// Time between probes.
    pub interval: Duration,
    /// Send the next probe as soon as the previous one is answered (and at least every 10 ms).
    pub flood: bool,
    /// How long to wait for each answer.
    pub timeout: Duration,
    /// At most this many answers are kept in the report (all are counted).
    pub keep_replies: usize,
    /// The first probe's sequence number (its id is the low 16 bits). A caller that pings one
    /// probe at a time with the same prober (latscope agent) moves it on each call, so every
    /// probe has its own id — for SYN probes its own source port and sequence number — and a
    /// late answer to an earlier probe is never taken for the current one.
    pub first_seq: u64,
}

impl Default for PingOptions {
    fn default() -> Self {
        PingOptions {
            count: Some(5),
            interval: Duration::from_secs(1),
            flood: false,
            timeout: Duration::from_secs(1),
            keep_replies: 100_000,
            first_seq: 0,
        }
    }
}

/// What the caller knows about the run, copied into the report.
#[derive(Clone, Debug)]
pub struct PingContext {
    /// Report metadata.
    pub meta: Meta,
    /// The target as given.
    pub target: String,
    /// The address it resolved to.
    pub address: IpAddr,
    /// Destination port (TCP and UDP modes).
    pub port: Option<u16>,
    /// Why this probe mode.
    pub mode_reason: String,
    /// Payload bytes per probe.
    pub payload_bytes: u64,
}

/// The RTT of an answer: kernel timestamps where both ends have one.
pub(crate) fn rtt_of(prober: &mut dyn Prober, r: &Response) -> Option<(u64, bool)> {
    let (tx, tx_kernel) = prober.tx_time(r.id)?;
    Some((r.rx_ns.saturating_sub(tx), tx_kernel && r.rx_kernel))
}

/// A description of where RTTs came from, for the report.
pub(crate) fn timestamps_text(prober: &dyn Prober, kernel: u64, total: u64) -> String {
    if total == 0 {
        return format!("{} (no answers)", prober.ts_source().name());
    }
    if kernel == total || prober.ts_source() == crate::sys::TsSource::User {
        return prober.ts_source().name().to_string();
    }
    format!(
        "{}; {kernel} of {total} RTTs had kernel timestamps at both ends, the rest used the user-space clock",
        prober.ts_source().name()
    )
}

/// What the answers so far add up to.
#[derive(Default)]
struct Tally {
    received: u64,
    lost: u64,
    kernel_rtts: u64,
    hist: LatencyHistogram,
    kinds: BTreeMap<&'static str, u64>,
    states: Vec<PortState>,
    replies: Vec<PingReply>,
}

impl Tally {
    /// Count one answer to probe `seq` with its RTT, hand it to `on_reply`, keep it while fewer
    /// than `keep` are kept.
    fn answer(
        &mut self,
        r: &Response,
        seq: u64,
        (rtt_ns, kernel): (u64, bool),
        keep: usize,
        on_reply: &mut dyn FnMut(&PingReply),
    ) {
        self.received += 1;
        if kernel {
            self.kernel_rtts += 1;
        }
        self.hist.record(rtt_ns.max(1));
        *self.kinds.entry(r.kind.label()).or_default() += 1;
        if let Some(s) = r.kind.port_state() {
            self.states.push(s);
        }
        let reply = PingReply {
            seq,
            from: r.from.to_string(),
            kind: r.kind,
            flags: r.tcp_flags.map(packet::tcp_flag_letters),
            ttl: r.ttl,
            size: r.size as u64,
            rtt_ns,
            kernel_timestamps: kernel,
        };
        on_reply(&reply);
        if self.replies.len() < keep {
            self.replies.push(reply);
        }
    }

    /// The report: probes still waiting when interrupted are neither answered nor lost.
    fn report(
        self,
        prober: &dyn Prober,
        ctx: PingContext,
        elapsed_ns: u64,
        interrupted: bool,
    ) -> PingReport {
        let sent = self.received + self.lost;
        let mode = prober.mode();
        let udp = mode == latscope_core::model::ping::ProbeMode::Udp;
        PingReport {
            meta: ctx.meta,
            target: ctx.target,
            address: ctx.address.to_string(),
            address_choice: None,
            port: ctx.port,
            mode,
            mode_reason: ctx.mode_reason,
            timestamps: timestamps_text(prober, self.kernel_rtts, self.received),
            payload_bytes: ctx.payload_bytes,
            sent,
            received: self.received,
            lost: self.lost,
            loss_percent: if sent == 0 {
                0.0
            } else {
                self.lost as f64 * 100.0 / sent as f64
            },
            replies_by_kind: self
                .kinds
                .into_iter()
                .map(|(k, n)| (k.to_string(), n))
                .collect(),
            rtt: self.hist.summary(),
            port_state: ctx.port.map(|_| port_state(&self.states, udp)),
            elapsed_ns,
            rate_per_sec: if elapsed_ns == 0 {
                0.0
            } else {
                sent as f64 * 1e9 / elapsed_ns as f64
            },
            replies: self.replies,
            interrupted,
        }
    }
}

/// Ping with `prober` until `count` probes are done or `stop` is set; `on_reply` sees every
/// answer as it arrives.
pub fn ping(
    prober: &mut dyn Prober,
    ctx: PingContext,
    opts: &PingOptions,
    stop: &AtomicBool,
    on_reply: &mut dyn FnMut(&PingReply),
) -> Result<PingReport, ProbeError> {
    let interval = if opts.flood {
        Duration::from_millis(10)
    } else {
        opts.interval
    };
    let start = Instant::now();
    let mut next_send = start;
    let mut outstanding: VecDeque<(u16, u64, Instant)> = VecDeque::new();
    let mut seq: u64 = opts.first_seq;
    let mut tally = Tally::default();
    let mut responses: Vec<Response> = Vec::new();
    let mut interrupted = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let now = Instant::now();
        while let Some(&(id, _, sent)) = outstanding.front() {
            if sent + opts.timeout > now {
                break;
            }
            outstanding.pop_front();
            prober.forget(id);
            tally.lost += 1;
        }
        let more = opts.count.is_none_or(|c| seq - opts.first_seq < c);
        if !more && outstanding.is_empty() {
            break;
        }
        if more && (now >= next_send || (opts.flood && outstanding.is_empty())) {
            let id = seq as u16;
            prober.send(id, None)?;
            outstanding.push_back((id, seq, now));
            seq += 1;
            next_send = (next_send + interval).max(now);
            continue;
        }
        let mut wake = outstanding
            .front()
            .map(|o| o.2 + opts.timeout)
            .unwrap_or(now + opts.timeout);
        if more {
            wake = wake.min(next_send);
        }
        let wait = wake
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        responses.clear();
        prober.recv(wait, &mut responses)?;
        for r in responses.drain(..) {
            let Some(pos) = outstanding.iter().position(|o| o.0 == r.id) else {
                continue;
            };
            let Some(rtt) = rtt_of(prober, &r) else {
                continue;
            };
            let (_, probe_seq, _) = outstanding.remove(pos).unwrap_or((r.id, 0, now));
            prober.forget(r.id);
            tally.answer(&r, probe_seq, rtt, opts.keep_replies, on_reply);
        }
    }
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    Ok(tally.report(prober, ctx, elapsed_ns, interrupted))
}

/// open if anything said open; closed if the host said nothing listens; otherwise filtered
/// (silence or an administrative reject) — for UDP, silence may also be a service that does not
/// answer: open|filtered.
fn port_state(states: &[PortState], udp: bool) -> PortState {
    if states.contains(&PortState::Open) {
        PortState::Open
    } else if states.contains(&PortState::Closed) {
        PortState::Closed
    } else if udp && !states.contains(&PortState::Filtered) {
        PortState::OpenFiltered
    } else {
        PortState::Filtered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::TsSource;
    use latscope_core::model::ping::{ProbeMode, ReplyKind};

    /// A prober that answers every probe after a fixed delay, except those in `drop`.
    struct Fake {
        delay_ns: u64,
        drop: Vec<u16>,
        sent: BTreeMap<u16, u64>,
        clock: u64,
    }

    impl Prober for Fake {
        fn send(&mut self, id: u16, _ttl: Option<u8>) -> Result<(), ProbeError> {
            self.clock += 1_000;
            self.sent.insert(id, self.clock);
            Ok(())
        }
        fn recv(&mut self, _t: Duration, out: &mut Vec<Response>) -> Result<(), ProbeError> {
            for (&id, &t) in &self.sent {
                if !self.drop.contains(&id) {
                    out.push(Response {
                        id,
                        from: "10.0.0.2".parse().expect("ip"),
                        kind: if id % 2 == 0 {
                            ReplyKind::SynAck
                        } else {
                            ReplyKind::Rst
                        },
                        tcp_flags: Some(0x12),
                        ttl: Some(64),
                        size: 44,
                        rx_ns: t + self.delay_ns,
                        rx_kernel: true,
                    });
                }
            }
            Ok(())
        }
        fn tx_time(&mut self, id: u16) -> Option<(u64, bool)> {
            self.sent.get(&id).map(|t| (*t, true))
        }
        fn forget(&mut self, id: u16) {
            self.sent.remove(&id);
        }
        fn ts_source(&self) -> TsSource {
            TsSource::Kernel
        }
        fn mode(&self) -> ProbeMode {
            ProbeMode::Syn
        }
    }

    #[test]
    fn counts_answers_losses_and_rtts() {
        let mut f = Fake {
            delay_ns: 250_000,
            drop: vec![3],
            sent: BTreeMap::new(),
            clock: 0,
        };
        let ctx = PingContext {
            meta: Meta::new("ping", "0", 0),
            target: "x".into(),
            address: "10.0.0.2".parse().expect("ip"),
            port: Some(80),
            mode_reason: "test".into(),
            payload_bytes: 0,
        };
        let opts = PingOptions {
            count: Some(6),
            interval: Duration::from_micros(100),
            timeout: Duration::from_millis(20),
            ..PingOptions::default()
        };
        let mut lines = 0;
        let stop = AtomicBool::new(false);
        let r = ping(&mut f, ctx, &opts, &stop, &mut |_| lines += 1).expect("runs");
        assert_eq!((r.sent, r.received, r.lost, lines), (6, 5, 1, 5));
        assert_eq!(r.rtt.p50_ns / 1000, 250);
        assert_eq!(r.port_state, Some(PortState::Open));
        assert!((r.loss_percent - 100.0 / 6.0).abs() < 1e-9);
        assert_eq!(r.timestamps, TsSource::Kernel.name());
    }

    #[test]
    fn port_states() {
        assert_eq!(port_state(&[PortState::Closed], false), PortState::Closed);
        assert_eq!(port_state(&[], false), PortState::Filtered);
        assert_eq!(port_state(&[], true), PortState::OpenFiltered);
        assert_eq!(
            port_state(&[PortState::Filtered], true),
            PortState::Filtered
        );
        assert_eq!(
            port_state(&[PortState::Closed, PortState::Open], false),
            PortState::Open
        );
    }
}
