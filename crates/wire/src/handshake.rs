//! Resent SYNs and SYN-ACKs: the handshakes' own losses. A dropped SYN (a full accept queue,
//! a filter, loss) costs a connection set-up its first retransmission timeout — 1 s on Linux
//! (`TCP_TIMEOUT_INIT`, RFC 6298 §2.1), doubling each time — not the requests of an open
//! connection, so the wire analyzer reports it apart from data retransmissions.
//!
//! [`SynResends`] is usable on its own (feed it every decoded frame, e.g. from a capture of
//! diagnose's own connections) and is what [`crate::Analyzer`] uses for `latscope analyze`'s
//! "connection set-up waited" finding.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::analyze::FxHasher;
use crate::packet::{Addr, Decoded, Transport, flags};

/// Handshakes tracked at once; past it the table starts afresh. Only a SYN flood comes near
/// (each entry is one SYN's 4-tuple and ISN), and then the resends of the forgotten SYNs are
/// missed, never invented.
pub const MAX_TRACKED: usize = 16_384;
/// A SYN seen again with the same IPv4 identification, or sooner than this, is the same packet
/// captured twice (on two interfaces or VLANs, or on both sides of a router), not a resend: the first SYN retransmission timeout is 1 s, and even a tuned route's
/// RTO (`ip route ... rto_min`) stays far above this.
pub const SAME_PACKET_NS: u64 = 1_000_000;

/// Which handshake segment was sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HandshakeSegment {
    /// The client's SYN (no answer: lost, dropped by a full accept queue or a filter).
    Syn,
    /// The server's SYN-ACK (the client's ACK, or the SYN-ACK itself, was lost — or the server
    /// dropped the ACK because its accept queue was full: see [`SynResends`]).
    SynAck,
}

/// One resend: the segment, how long its sender had waited since the previous transmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynResend {
    /// SYN or SYN-ACK.
    pub segment: HandshakeSegment,
    /// Time since the same segment was last sent (the timeout that fired).
    pub waited_ns: u64,
}

/// The resends of one kind of handshake segment, in total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResendTotal {
    /// Resends seen.
    pub count: u64,
    /// Time their senders waited, summed: each resend adds only the wait since the previous
    /// transmission, so a handshake's total never exceeds its span.
    pub waited_ns: u64,
    /// The longest single wait.
    pub longest_ns: u64,
}

impl ResendTotal {
    fn add(&mut self, waited_ns: u64) {
        self.count += 1;
        self.waited_ns = self.waited_ns.saturating_add(waited_ns);
        self.longest_ns = self.longest_ns.max(waited_ns);
    }
}

/// What the handshakes' resends cost, by segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HandshakeResends {
    /// Resent SYNs (the client waited for an answer).
    pub syn: ResendTotal,
    /// Resent SYN-ACKs (the server waited for the handshake's last ACK).
    pub syn_ack: ResendTotal,
}

impl HandshakeResends {
    /// No resend at all.
    pub fn is_empty(&self) -> bool {
        self.syn.count == 0 && self.syn_ack.count == 0
    }

    /// SYNs and SYN-ACKs together.
    pub fn total(&self) -> ResendTotal {
        ResendTotal {
            count: self.syn.count + self.syn_ack.count,
            waited_ns: self.syn.waited_ns.saturating_add(self.syn_ack.waited_ns),
            longest_ns: self.syn.longest_ns.max(self.syn_ack.longest_ns),
        }
    }
}

/// One direction's handshake segment: who sent it, to whom, and its sequence number (a new
/// ISN is a new connection attempt, not a resend).
type Key = (Addr, u16, Addr, u16, u32);

/// When a handshake segment was last sent, and what the peer did about it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    ts_ns: u64,
    /// That transmission's IPv4 identification.
    id: Option<u16>,
    /// The peer answered it with a RST: the next SYN is a new attempt at a refused port
    /// (Windows retries a refused connect after ~0.5 s), not a resend of a lost one.
    refused: bool,
    /// A SYN-ACK the client acknowledged: the handshake is complete on the client's side.
    answered: bool,
    /// The client sent data after acknowledging this SYN-ACK: it believes it is connected and
    /// waits for an answer.
    client_data: bool,
    /// The server sent something other than this SYN-ACK on the connection: it took the
    /// handshake (only a socket still in SYN-RECV sends its SYN-ACK again).
    taken: bool,
    /// This is a SYN-ACK (the server's), not a SYN.
    syn_ack: bool,
}

/// Tracks when each SYN (and SYN-ACK) was last sent and totals the resends.
///
/// A SYN-ACK sent again after the client acknowledged it is a resend only when the client had
/// sent data the server never acknowledged (the server sent nothing since its SYN-ACK): the
/// server never took the handshake's last ACK — Linux drops it when the listen socket's accept
/// queue is full (`tcp_check_req()` → `ListenOverflows`) and re-sends its SYN-ACK on the
/// request socket's timer, while the client, connected on its side, resends its request until
/// the server takes the connection. Without the client's data nobody waited: a server with
/// `TCP_DEFER_ACCEPT` ignores a bare ACK and re-sends its SYN-ACK ~30 s later to connections
/// a browser opened in advance (a public capture: sessionhijacking), not a set-up wait.
#[derive(Debug, Default)]
pub struct SynResends {
    last_sent: HashMap<Key, Sent, BuildHasherDefault<FxHasher>>,
    /// SYN-ACKs the server has not yet followed with another segment (the segments of their
    /// connections are looked up only while some are).
    untaken_syn_acks: usize,
    totals: HandshakeResends,
}

/// The shortest wait taken for a stack's SYN timer: the start of the initial-RTO band (1 s on
/// Linux and macOS, RFC 6298 §2.1; 3 s on older stacks). A SYN repeated sooner is a scanner's
/// retry (nmap's probes 175 ms apart in a public capture), not a set-up's timeout.
fn syn_timer_floor_ns() -> u64 {
    *latscope_core::timer::TcpTimer::InitialRto.band_ns().start()
}

impl SynResends {
    /// One captured frame at `ts_ns`; returns the resend it is, if it is one.
    pub fn push(&mut self, ts_ns: u64, d: &Decoded<'_>) -> Option<SynResend> {
        let Transport::Tcp { tcp, .. } = d.transport else {
            return None;
        };
        let fl = tcp.flags();
        if fl & (flags::SYN | flags::RST) != flags::SYN {
            self.answer(d, fl, tcp.ack());
            return None;
        }
        // A SYN with FIN or URG is a scanner's crafted probe, never a stack's set-up.
        if fl & (flags::FIN | flags::URG) != 0 {
            return None;
        }
        let key = (d.src, tcp.src_port(), d.dst, tcp.dst_port(), tcp.seq());
        if self.last_sent.len() >= MAX_TRACKED && !self.last_sent.contains_key(&key) {
            self.last_sent.clear();
            self.untaken_syn_acks = 0;
        }
        let segment = if fl & flags::ACK != 0 {
            HandshakeSegment::SynAck
        } else {
            HandshakeSegment::Syn
        };
        let id = d.ip_id.filter(|&i| i != 0);
        let Some(last) = self.last_sent.get_mut(&key) else {
            self.last_sent.insert(
                key,
                Sent {
                    ts_ns,
                    id,
                    refused: false,
                    answered: false,
                    client_data: false,
                    taken: false,
                    syn_ack: segment == HandshakeSegment::SynAck,
                },
            );
            if segment == HandshakeSegment::SynAck {
                self.untaken_syn_acks += 1;
            }
            return None;
        };
        if id.is_some() && id == last.id {
            return None;
        }
        // Time going backwards (merged or reordered captures) is no wait.
        let waited_ns = ts_ns.checked_sub(last.ts_ns)?;
        if waited_ns < SAME_PACKET_NS {
            return None;
        }
        // After the client's ACK, a copy counts only while the client's data waits unanswered.
        let waiting = last.client_data && !last.taken;
        let settled = last.answered && !waiting;
        let new_attempt = last.refused || settled || waited_ns < syn_timer_floor_ns();
        last.ts_ns = ts_ns;
        last.id = id;
        last.refused = false;
        if new_attempt {
            return None;
        }
        match segment {
            HandshakeSegment::Syn => self.totals.syn.add(waited_ns),
            HandshakeSegment::SynAck => self.totals.syn_ack.add(waited_ns),
        }
        Some(SynResend { segment, waited_ns })
    }

    /// A segment other than a SYN: a RST refusing a SYN, or the ACK completing a handshake,
    /// settles that SYN or SYN-ACK (its next copy is no resend) — unless the server never took
    /// that ACK while the client's data waited ([`SynResends`]); the server's own next segment
    /// shows it took the handshake.
    fn answer(&mut self, d: &Decoded<'_>, fl: u8, ack: u32) {
        let Transport::Tcp { tcp, payload_len } = d.transport else {
            return;
        };
        let rst = fl & flags::RST != 0;
        if !rst && self.untaken_syn_acks == 0 {
            return;
        }
        // The server's first segment after its SYN-ACK carries the sequence number after it.
        let own = (
            d.src,
            tcp.src_port(),
            d.dst,
            tcp.dst_port(),
            tcp.seq().wrapping_sub(1),
        );
        if !rst
            && let Some(sent) = self.last_sent.get_mut(&own)
            && sent.syn_ack
        {
            if !sent.taken {
                sent.taken = true;
                self.untaken_syn_acks = self.untaken_syn_acks.saturating_sub(1);
            }
            return;
        }
        if fl & flags::ACK == 0 {
            return;
        }
        let key = (
            d.dst,
            tcp.dst_port(),
            d.src,
            tcp.src_port(),
            ack.wrapping_sub(1),
        );
        let Some(sent) = self.last_sent.get_mut(&key) else {
            return;
        };
        if rst {
            sent.refused = true;
            return;
        }
        sent.answered = true;
        sent.client_data |= payload_len > 0;
    }

    /// The resends so far, by segment.
    pub fn totals(&self) -> HandshakeResends {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An Ethernet + IPv4 + TCP frame with `flags` and `seq` from 10.0.0.1:`sport` to
    /// 10.0.0.2:7373 (or back, with `reply`).
    fn frame(sport: u16, fl: u8, seq: u32, reply: bool) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&40u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let (s, d) = if reply { (b, a) } else { (a, b) };
        ip[12..16].copy_from_slice(&s);
        ip[16..20].copy_from_slice(&d);
        let (sp, dp) = if reply { (7373, sport) } else { (sport, 7373) };
        let tcp = &mut f[34..54];
        tcp[0..2].copy_from_slice(&sp.to_be_bytes());
        tcp[2..4].copy_from_slice(&dp.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = fl;
        tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
        f
    }

    /// `frame` with an acknowledgement number.
    fn frame_ack(sport: u16, fl: u8, seq: u32, ack: u32, reply: bool) -> Vec<u8> {
        let mut f = frame(sport, fl, seq, reply);
        f[42..46].copy_from_slice(&ack.to_be_bytes());
        f
    }

    /// `frame_ack` carrying `len` bytes of payload.
    fn frame_data(sport: u16, seq: u32, ack: u32, len: u16, reply: bool) -> Vec<u8> {
        let mut f = frame_ack(sport, flags::ACK | flags::PSH, seq, ack, reply);
        f.resize(f.len() + usize::from(len), 0x61);
        f[16..18].copy_from_slice(&(40 + len).to_be_bytes());
        f
    }

    fn push(r: &mut SynResends, ts_ns: u64, f: &[u8]) -> Option<SynResend> {
        let d = crate::decode(crate::packet::LinkType::Ethernet, f).unwrap();
        r.push(ts_ns, &d)
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn resent_syns_are_counted_once_per_wait() {
        let mut r = SynResends::default();
        let syn = frame(40000, flags::SYN, 1000, false);
        assert_eq!(push(&mut r, 0, &syn), None);
        // The same packet on a second interface, 0.02 ms later: not a resend.
        assert_eq!(push(&mut r, 20_000, &syn), None);
        assert!(r.totals().is_empty());
        let first = push(&mut r, 1_000 * MS, &syn).unwrap();
        assert_eq!(first.segment, HandshakeSegment::Syn);
        assert_eq!(first.waited_ns, 1_000 * MS);
        push(&mut r, 3_000 * MS, &syn).unwrap();
        // Another connection's SYN, a new ISN on the same ports, and data: not resends.
        assert_eq!(
            push(&mut r, 3_100 * MS, &frame(40001, flags::SYN, 7, false)),
            None
        );
        assert_eq!(
            push(&mut r, 3_150 * MS, &frame(40000, flags::SYN, 9, false)),
            None
        );
        let data = frame(40000, flags::ACK | flags::PSH, 1001, false);
        push(&mut r, 3_200 * MS, &data);
        assert_eq!(push(&mut r, 3_300 * MS, &data), None);
        let t = r.totals();
        assert_eq!(t.syn.count, 2);
        assert_eq!(
            t.syn.waited_ns,
            3_000 * MS,
            "1 s then 2 s, never counted twice"
        );
        assert_eq!(t.syn.longest_ns, 2_000 * MS);
        assert_eq!(t.syn_ack, ResendTotal::default());
    }

    /// Frames 1 and 3 of a public capture: one SYN on both sides of a router, 1.4 ms apart,
    /// with the same IPv4 identification.
    #[test]
    fn the_same_identification_is_the_same_packet() {
        let mut r = SynResends::default();
        let mut syn = frame(40000, flags::SYN, 1000, false);
        syn[18..20].copy_from_slice(&5u16.to_be_bytes());
        push(&mut r, 0, &syn);
        assert_eq!(push(&mut r, 5 * MS, &syn), None);
        let mut resent = syn.clone();
        resent[18..20].copy_from_slice(&7u16.to_be_bytes());
        assert!(push(&mut r, 3_000 * MS, &resent).is_some());
    }

    #[test]
    fn syn_acks_are_told_from_syns_and_time_going_back_is_no_wait() {
        let mut r = SynResends::default();
        let sa = frame(40000, flags::SYN | flags::ACK, 5, true);
        push(&mut r, 10 * MS, &sa);
        assert_eq!(push(&mut r, 5 * MS, &sa), None, "earlier timestamp");
        let x = push(&mut r, 1_010 * MS, &sa).unwrap();
        assert_eq!(x.segment, HandshakeSegment::SynAck);
        assert_eq!(r.totals().total().count, 1);
        assert_eq!(r.totals().syn.count, 0);
    }

    /// A refused port: Windows tries again ~0.5 s after the RST (nowebaccess2.pcapng), a new
    /// attempt rather than the resend of a lost SYN.
    #[test]
    fn a_syn_after_a_reset_is_a_new_attempt() {
        let mut r = SynResends::default();
        let syn = frame(40000, flags::SYN, 1000, false);
        push(&mut r, 0, &syn);
        push(
            &mut r,
            MS,
            &frame_ack(40000, flags::RST | flags::ACK, 0, 1001, true),
        );
        assert_eq!(push(&mut r, 1_000 * MS, &syn), None);
        // Unanswered this time: the next one is a resend.
        assert!(push(&mut r, 4_000 * MS, &syn).is_some());
    }

    /// A scanner's probes: SYN+FIN+URG, or plain SYNs 175 ms apart (activeosfingerprinting).
    #[test]
    fn scanner_probes_are_no_resends() {
        let mut r = SynResends::default();
        let odd = frame(40000, flags::SYN | flags::FIN | flags::URG, 5, false);
        push(&mut r, 0, &odd);
        assert_eq!(push(&mut r, 2_000 * MS, &odd), None);
        let syn = frame(40001, flags::SYN, 5, false);
        push(&mut r, 0, &syn);
        assert_eq!(push(&mut r, 175 * MS, &syn), None);
        assert!(r.totals().is_empty());
    }

    /// A SYN-ACK repeated after the client's ACK completed the handshake (sessionhijacking:
    /// 31 s later) kept no set-up waiting; one the client never answered did.
    #[test]
    fn a_syn_ack_after_the_handshake_is_no_resend() {
        let mut r = SynResends::default();
        let sa = frame_ack(40000, flags::SYN | flags::ACK, 5, 1001, true);
        push(&mut r, 0, &sa);
        push(&mut r, MS, &frame_ack(40000, flags::ACK, 1001, 6, false));
        assert_eq!(push(&mut r, 31_000 * MS, &sa), None);
        let lonely = frame_ack(40001, flags::SYN | flags::ACK, 9, 77, true);
        push(&mut r, 0, &lonely);
        assert!(push(&mut r, 3_000 * MS, &lonely).is_some());
    }

    /// A full accept queue, seen from the client: the server drops the handshake's last ACK,
    /// the client sends its request (and again after its timer), and the server, still in
    /// SYN-RECV, sends its SYN-ACK again 1 s later — the set-up waited. The same copy after the
    /// server acknowledged the request is no resend.
    #[test]
    fn a_syn_ack_again_while_the_request_waits_is_the_server_not_taking_the_handshake() {
        let mut r = SynResends::default();
        let sa = frame_ack(40000, flags::SYN | flags::ACK, 5, 1001, true);
        push(&mut r, 0, &sa);
        push(&mut r, MS, &frame_ack(40000, flags::ACK, 1001, 6, false));
        let request = frame_data(40000, 1001, 6, 120, false);
        push(&mut r, MS, &request);
        assert_eq!(push(&mut r, 205 * MS, &request), None, "a data resend");
        let x = push(&mut r, 1_000 * MS, &sa).expect("the server never took the ACK");
        assert_eq!(x.segment, HandshakeSegment::SynAck);
        assert_eq!(x.waited_ns, 1_000 * MS);
        assert_eq!(r.totals().syn_ack.count, 1);
        // Another connection whose server acknowledged the request: it took the handshake, and
        // a later copy of its SYN-ACK (stray, or forged) kept nobody waiting.
        let sa = frame_ack(40001, flags::SYN | flags::ACK, 9, 2001, true);
        push(&mut r, 0, &sa);
        push(&mut r, MS, &frame_ack(40001, flags::ACK, 2001, 10, false));
        push(&mut r, MS, &frame_data(40001, 2001, 10, 120, false));
        push(
            &mut r,
            2 * MS,
            &frame_ack(40001, flags::ACK, 10, 2121, true),
        );
        assert_eq!(push(&mut r, 1_000 * MS, &sa), None);
        assert_eq!(r.totals().syn_ack.count, 1);
    }
}
