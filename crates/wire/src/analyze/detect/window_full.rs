//! Receive window full: a segment filled the receiver's advertised window (Wireshark's
//! `tcp.analysis.window_full`: its end is the peer's last ACK plus its window), and the
//! sender's next new data had to wait for the receiver to ACK and open the window again. The
//! wait, from the window-filling segment to that next segment, is time lost to the receiver's
//! buffer (SO_RCVBUF, `tcp_rmem`, window scaling), M-Lab NDT's "receiver limited".
//!
//! Evidence needed: both directions, no segment missing from the capture since, the peer sent
//! no data in between (a new request is the application's pace, not the window's), the window
//! never went to zero meanwhile (the zero-window detector's), the sender resent nothing
//! meanwhile (a wait spent in loss recovery is the loss's: `smtp.pcap`'s 801 ms were path MTU
//! discovery, a router's "fragmentation needed" for four full segments, resent smaller and
//! then released at the congestion window's pace while the receiver's window had room), and a
//! wait of at least [`MIN_WAIT_NS`].

use latscope_core::model::analyze::StallKind;

use super::super::detector::{Detector, Sink};
use super::super::flow::Conn;
use super::super::ladder::fmt_ms;
use super::super::segment::{A_WIN_FULL, Segment};

/// Waits shorter than this are not reported (a LAN round trip).
const MIN_WAIT_NS: u64 = 1_000_000;

/// Times each wait after a window-full segment.
pub(in super::super) struct WindowFull;

impl Detector for WindowFull {
    fn inspect(&self, s: &Segment<'_>, c: &mut Conn, out: &mut Sink<'_>) {
        // The receiver closed its window: that is a zero-window stall, not this.
        if s.raw_win == 0 {
            c.dirs[1 - s.d].win_full_since = None;
        }
        if s.new_data {
            if let Some((t0, f0)) = c.dirs[s.d].win_full_since.take() {
                let wait = s.ts.saturating_sub(t0);
                let judged = wait >= MIN_WAIT_NS
                    && c.judgeable()
                    && c.unbroken_since(t0)
                    && c.dirs[1 - s.d].last_data_ts <= t0
                    && c.dirs[s.d].last_rexmit_ts.is_none_or(|r| r < t0);
                if judged {
                    out.notes.push(|| {
                        format!(
                            "<< STALL receive window full at #{f0}: next data {} later",
                            fmt_ms(wait)
                        )
                    });
                    out.stall(c, StallKind::ReceiveWindowFull, s.frame, f0, wait);
                }
            }
        }
        if s.analysis & A_WIN_FULL != 0 && s.len > 0 {
            c.dirs[s.d].win_full_since.get_or_insert((s.ts, s.frame));
        }
    }
}
