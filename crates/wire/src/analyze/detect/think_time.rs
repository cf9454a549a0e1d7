//! Application think time: last request byte to first response byte, minus the round trip
//! between the capture point and the server (from the handshake), when ≥ 10 ms. No TCP timer is
//! involved, so the threshold is not one of `TcpTimer`'s bands.
//!
//! Evidence needed: the handshake (without it the round trip is unknown and a slow path would
//! read as a slow server) — or, without it, the server's acknowledgement of the request, after
//! which only the server's own time is counted; both directions, and a request–response protocol: on a human-paced
//! one (telnet, ssh, X11, VNC, RDP) the server's next screen update is not an answer; a
//! server pushing on its own clock (a PLC's 1 s cycle, its answers to requests in between
//! not moving it: [`super::super::flow::PhaseGrid`]) did not answer the message before its
//! push; nor does a server that sends on its own now and then (two bursts ≥ 1 s after its
//! previous data with nothing from the client between, not closing: a peer-to-peer link, a
//! chat server — `gnutella.pcap`'s 13.8 s "answer" to a ping): every think time charged on
//! its connection is taken back.
//!
//! What is measured must be the server's: the request's last transmission (a resend, when
//! the original was lost) starts it, and when the server acknowledged the request late —
//! later than a quarter of the round trip after it — the time up to that acknowledgement
//! may have been spent on the way (the request queued towards the server, or the
//! acknowledgement and answer queued back, as `telesec.pcap`'s two server ticks apart
//! arriving together 108 ms late) or in the server before it acknowledged. Only what follows
//! the acknowledgement is proven: reported when that alone reaches 10 ms, undecided when only
//! the whole does.

use latscope_core::model::analyze::{StallKind, Undecided};

use crate::packet::flags;

use super::super::detector::{Detector, Sink};
use super::super::evidence::THINK_MIN_NS;
use super::super::flow::{Conn, PENDING_THINK, PendingThink};
use super::super::ladder::fmt_ms;
use super::super::segment::Segment;

/// A server burst this long after its previous data, with nothing from the client between,
/// was sent on the server's own (the mirror of the client's heartbeat rule,
/// `transaction::UNANSWERED_NS`).
const PUSH_SILENCE_NS: u64 = 1_000_000_000;
/// Bursts on its own that show a server is not only answering (one may be a closing alert).
const PUSHES: u8 = 2;

/// Reports slow first response bytes.
pub(in super::super) struct ThinkTime;

impl Detector for ThinkTime {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        if s.d == 1 && s.new_data && s.first_response.is_none() {
            on_server_push(s, c, out);
        }
        let Some(r) = s.first_response else {
            return;
        };
        // (A human-paced protocol's answers were refused by the transaction tracker, but for a
        // machine's request on it: an SSH key exchange.)
        if r.think_ns < THINK_MIN_NS || !c.judgeable() || c.server_pushes >= PUSHES {
            return;
        }
        let grid = c.dirs[1].cadence.grid;
        if grid.on && grid.own_clock {
            // The server pushes on its own clock (a PLC's cycle): this burst is its next
            // point, not an answer, and neither were the ones charged while the grid was
            // unproven: they are taken back.
            for p in std::mem::take(&mut c.dirs[1].pending_think) {
                c.think_charged.0 = c.think_charged.0.saturating_sub(1);
                c.think_charged.1 = c.think_charged.1.saturating_sub(p.think_ns);
                out.retract(c, StallKind::ThinkTime, p.frame, p.think_ns);
            }
            return;
        }
        if grid.hits == 0 {
            c.dirs[1].pending_think.clear();
        }
        if r.proven_ns < THINK_MIN_NS {
            out.undecided(
                c,
                StallKind::ThinkTime,
                Undecided::AckAndAnswerLate,
                s.frame,
                r.req_frame,
                r.think_ns,
            );
            return;
        }
        let think = r.proven_ns;
        out.notes.push(|| {
            format!(
                "<< STALL think time: server answered {} after the request",
                fmt_ms(think)
            )
        });
        out.stall(c, StallKind::ThinkTime, s.frame, r.req_frame, think);
        c.think_charged = (
            c.think_charged.0 + 1,
            c.think_charged.1.saturating_add(think),
        );
        if grid.on {
            // On a grid not yet shown to be the server's clock: remembered, to be taken back
            // if it is.
            let held = &mut c.dirs[1].pending_think;
            if held.len() >= PENDING_THINK {
                held.remove(0);
            }
            held.push(PendingThink {
                frame: s.frame,
                think_ns: think,
            });
        }
    }
}

/// New server data that answers nothing: after ≥ 1 s of the server's silence with no data of
/// the client's since the server's previous data, and not closing the connection. The
/// second such burst shows the server sends on its own; the think times charged on the
/// connection are taken back.
fn on_server_push(s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
    let (server, client) = (&c.dirs[1], &c.dirs[0]);
    let unprompted = server.last_data_ts != 0
        && s.ts.saturating_sub(server.last_data_ts) >= PUSH_SILENCE_NS
        && client.last_data_ts <= server.last_data_ts
        && s.flags & flags::FIN == 0;
    if !unprompted || c.server_pushes >= PUSHES {
        return;
    }
    c.server_pushes += 1;
    if c.server_pushes < PUSHES {
        return;
    }
    let (n, lost) = std::mem::take(&mut c.think_charged);
    if n > 0 {
        out.notes.push(|| {
            format!("the server sends on its own: {n} think times on this connection taken back")
        });
        out.retract_conn(c, StallKind::ThinkTime, n, lost);
    }
    c.dirs[1].pending_think.clear();
}
