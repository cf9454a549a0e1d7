//! Application think time: last request byte to first response byte, minus the round trip
//! between the capture point and the server (from the handshake), when ≥ 10 ms. No TCP timer is
//! involved, so the threshold is not one of `TcpTimer`'s bands.
//!
//! Evidence needed: the handshake (without it the round trip is unknown and a slow path would
//! read as a slow server), both directions, and a request–response protocol: on a human-paced
//! one (telnet, ssh, X11, VNC, RDP) the server's next screen update is not an answer; a
//! server pushing on its own clock (a PLC's 1 s cycle, its answers to requests in between
//! not moving it: [`super::super::flow::PhaseGrid`]) did not answer the message before its
//! push.

use crate::report::StallKind;

use super::super::flow::{Conn, PENDING_THINK, PendingThink};
use super::super::ladder::fmt_ms;
use super::{Detector, Segment, Sink};

/// Think time below this is not reported as a stall.
const THINK_MIN_NS: u64 = 10_000_000;

/// Reports slow first response bytes.
pub(in super::super) struct ThinkTime;

impl Detector for ThinkTime {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        let Some(r) = s.first_response else {
            return;
        };
        if r.think_ns < THINK_MIN_NS
            || c.rtt_to_server.is_none()
            || c.interactive
            || !c.both_directions()
        {
            return;
        }
        let grid = c.dirs[1].cadence.grid;
        if grid.on && grid.own_clock {
            // The server pushes on its own clock (a PLC's cycle): this burst is its next
            // point, not an answer, and neither were the ones charged while the grid was
            // unproven: they are taken back.
            for p in std::mem::take(&mut c.dirs[1].pending_think) {
                out.retract(c, StallKind::ThinkTime, p.frame, p.think_ns);
            }
            return;
        }
        if grid.hits == 0 {
            c.dirs[1].pending_think.clear();
        }
        out.notes.push(|| {
            format!(
                "<< STALL think time: server answered {} after the request",
                fmt_ms(r.think_ns)
            )
        });
        out.stall(c, StallKind::ThinkTime, s.frame, r.req_frame, r.think_ns);
        if grid.on {
            // On a grid not yet shown to be the server's clock: remembered, to be taken back
            // if it is.
            let held = &mut c.dirs[1].pending_think;
            if held.len() >= PENDING_THINK {
                held.remove(0);
            }
            held.push(PendingThink {
                frame: s.frame,
                think_ns: r.think_ns,
            });
        }
    }
}
