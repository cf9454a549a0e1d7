//! TCP_CORK: a small segment sent within the ~200 ms timer band after the sender's previous
//! data, with no packet from the peer in the preceding round trip: the kernel's cork timer
//! (`TCP_CORK` in tcp(7), flushed from `tcp_write_timer`) released it, not an ACK.
//!
//! Evidence needed: the 200 ms timer is Linux's, so the sender's SYN must show Linux's option
//! layout; the handshake gives the round trip the "no trigger" window is measured in; both
//! directions captured and nothing missing since the held segment (a peer packet lost from the
//! capture could have been the trigger); not a human-paced protocol (a keystroke 200 ms after
//! the previous one is a typist, not a timer); and the segment before it full-size, since a
//! corked socket sends nothing smaller before the timer (two small messages 200 ms apart in a
//! public MPTCP capture were an application's pace); and nothing in flight when it left: the
//! 200 ms ceiling is Linux's zero-window-probe timer (`tcp_check_probe_timer()`), armed only
//! when no data is unacknowledged — with data in flight the ACKs, Nagle or a loss probe time
//! the next segment (`heuristic_tcp_ack_payload.pcap`: a 5-byte tail 217 ms after 5.5 KB left
//! unacknowledged on a path that lost its first segment).

use latscope_core::timer::TcpTimer;

use latscope_core::model::analyze::StallKind;

use super::super::detector::{Detector, Sink};
use super::super::flow::Conn;
use super::super::ladder::fmt_ms;
use super::super::segment::Segment;
use super::super::seqnum::lt;

/// Reports small segments flushed by the cork timer.
pub(in super::super) struct Cork;

impl Detector for Cork {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        let Some(d1) = s.held else {
            return;
        };
        let evidence = c.dirs[s.d].linux_syn == Some(true)
            && c.rtt_to_sender(s.d).is_some()
            && c.judgeable()
            && c.unbroken_since(d1.ts)
            && !c.interactive;
        if !evidence {
            return;
        }
        let peer = &c.dirs[1 - s.d];
        let gap = s.ts.saturating_sub(d1.ts);
        let smss = c.sender_mss(s.d);
        // Under TCP_CORK only full segments leave before the timer: a small D1 that left at
        // once says no cork was in force (an application that paused is likelier).
        let corked = d1.len >= smss
            && s.len < smss
            && !c.dirs[s.d].cadence.app_clock()
            && TcpTimer::classify(gap) == Some(TcpTimer::DelayedAckMaxOrRtoMin)
            && s.ts.saturating_sub(peer.last_pkt_ts) > c.release_window(s.d)
            && peer.last_data_ts <= d1.ts
            // Everything the sender had sent was acknowledged before the segment left.
            && !lt(peer.lastack, d1.end);
        if !corked {
            return;
        }
        out.notes.push(|| {
            format!(
                "<< STALL TCP_CORK: {} after #{} with no trigger from the peer",
                fmt_ms(gap),
                d1.frame
            )
        });
        out.stall(c, StallKind::Cork, s.frame, d1.frame, gap);
    }
}
