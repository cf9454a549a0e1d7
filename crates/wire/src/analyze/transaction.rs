//! Transaction sniffing: client data opens a request, the server's first data after it is the
//! response (think time = last request byte → first response byte, minus the round trip to
//! the server), the client's next data closes it. HTTP/1 request lines and status codes are
//! recognised for the report; latscope's own peer-protocol greeting is set-up, not counted.

use latscope_core::LatencyHistogram;

use latscope_core::model::analyze::Transaction;

use super::evidence::{THINK_MIN_NS, delayed_ack_ceiling_ns, delayed_ack_floor_ns};
use super::flow::{Conn, TxCur, TxState};
use super::limits::MAX_TX_KEPT;
use super::segment::FirstResponse;
use super::seqnum::lt;

/// A client that sends again this long after its previous data with no answer between was not
/// waiting for an answer (`ratinfected.pcapng`: a 9-byte heartbeat every 10 s, the server's
/// command 4 s after one of them read as a 4 s think time).
pub(super) const UNANSWERED_NS: u64 = 1_000_000_000;

/// Transaction statistics across connections.
#[derive(Default)]
pub(super) struct TxStats {
    pub total: u64,
    // Allocated on first use (≈ 270 KiB each): small inputs, e.g. under a fuzzer, stay cheap.
    pub tx_hist: Option<LatencyHistogram>,
    pub think_hist: Option<LatencyHistogram>,
}

const HTTP_METHODS: [&[u8]; 9] = [
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
];

fn http_request_line(p: &[u8]) -> Option<String> {
    if !HTTP_METHODS.iter().any(|m| p.starts_with(m)) {
        return None;
    }
    let end = p
        .iter()
        .take(120)
        .position(|&c| c == b'\r' || c == b'\n')
        .unwrap_or(p.len().min(120));
    Some(String::from_utf8_lossy(&p[..end]).into_owned())
}

/// An SSH message of the key exchange, sent in clear before the keys are (RFC 4253 §6–8: the
/// version line, or a binary packet — length, padding length ≥ 4, then KEXINIT 20,
/// KEXDH_INIT 30 or the group exchange's 32/34): a machine's request, answered by the
/// server's own computation, on a protocol otherwise paced by a person.
fn ssh_key_exchange(p: &[u8]) -> bool {
    if p.starts_with(b"SSH-") {
        return true;
    }
    let [a, b, c, d, pad, code, ..] = *p else {
        return false;
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    len.saturating_add(4) <= p.len() && pad >= 4 && matches!(code, 20 | 30 | 32 | 34)
}

fn http_status(p: &[u8]) -> Option<u16> {
    if p.len() < 12 || !p.starts_with(b"HTTP/1.") {
        return None;
    }
    std::str::from_utf8(&p[9..12]).ok()?.parse().ok()
}

/// How late an acknowledgement may come and still be taken as sent on the request's arrival.
const PROMPT_ACK_NS: u64 = 2_000_000;

/// What of transaction `t`'s think time (its first response just in) the server's
/// acknowledgement of the request leaves proven, on a path of round trip `rtt`, and the
/// server's delayed-ACK timer if this transaction shows it. An acknowledgement that came late
/// leaves the time up to it open: the request held on its way, the acknowledgement held on
/// its way back, or the server busy before it acknowledged (`telesec.pcap`: acknowledgement
/// and answer two server ticks apart, arriving together 108 ms late). The time after it is
/// the server's. The whole is when the lateness is the server's delayed-ACK timer (RFC 1122
/// §4.2.3.2: a receiver whose answer is not ready acknowledges on its timer): within the
/// timer's band and either followed by at least 10 ms more of the server's time (an RTU's ACK
/// 171 ms after the request on a 0.3 ms path, its answer 201 ms later) or the same lateness
/// the server already showed that way on this connection (a Windows server acknowledging at
/// 200 ms every time, `aurora.pcapng`) — a path does not hold packets for a constant time.
fn proven_think(t: &TxCur, rtt: u64, timer_seen: Option<u64>) -> (u64, Option<u64>) {
    let Some(acked) = t.acked_ts else {
        return (t.think, None);
    };
    let late = acked.saturating_sub(t.req_last).saturating_sub(rtt);
    if late <= PROMPT_ACK_NS {
        return (t.think, None);
    }
    let after = t.think.saturating_sub(late);
    if !(delayed_ack_floor_ns()..=delayed_ack_ceiling_ns()).contains(&late) {
        return (after, None);
    }
    if after >= THINK_MIN_NS {
        return (t.think, Some(late));
    }
    let again = timer_seen.is_some_and(|seen| seen.abs_diff(late) <= (seen / 20).max(5_000_000));
    if again {
        (t.think, None)
    } else {
        (after, None)
    }
}

impl TxStats {
    /// New in-order data from direction `d`: advance the connection's transaction.
    pub(super) fn on_data(
        &mut self,
        c: &mut Conn,
        d: usize,
        frame: u64,
        ts: u64,
        payload: &[u8],
        tsecr: Option<u32>,
    ) -> Option<FirstResponse> {
        if d == 0 {
            self.on_request_data(c, frame, ts, payload);
            return None;
        }
        match c.tx_state {
            TxState::Request => {
                // Without the handshake the round trip is unknown and the gap is not the
                // server's time, nor is it known which side asks (a connection caught in the
                // middle: an OpenFlow controller's HELLO 381 ms after the switch's ECHO_REPLY,
                // a BGP KEEPALIVE after UPDATEs) — except for an HTTP request, answered by
                // definition, whose server acknowledged it before answering: the time after
                // that acknowledgement is the server's (a loopback server's ACK 57 µs after
                // the request, its answer 187 ms later: `test_loopback.pcap`). A human-paced
                // protocol's next output is no answer.
                // The round trip is the handshake's, or the server's ACKs' when they came back
                // sooner (a 700 ms SYN→SYN-ACK, then ACKs in 0.2 ms: `suspicious-time.pcap`).
                let rtt = c.rtt_to_server.and(c.quickest_rtt_to_sender(1));
                let judged = !c.interactive || c.tx.as_ref().is_some_and(|t| t.machine);
                let t = c.tx.as_mut()?;
                t.resp_first = ts;
                t.resp_last = ts;
                t.resp_last_frame = frame;
                t.http_status = http_status(payload);
                // The request's last transmission the server answered.
                if let Some((resent, val)) = t.resent.take() {
                    let original_arrived =
                        matches!((tsecr, val), (Some(ecr), Some(v)) if lt(ecr, v));
                    if !original_arrived {
                        t.req_last = t.req_last.max(resent);
                    }
                }
                t.think = match (rtt, t.acked_ts) {
                    (Some(rtt), _) => ts.saturating_sub(t.req_last).saturating_sub(rtt),
                    (None, Some(acked)) if !t.http_request.is_empty() => ts.saturating_sub(acked),
                    (None, _) => 0,
                };
                c.tx_state = TxState::Response;
                let timed = rtt.is_some() || (t.acked_ts.is_some() && !t.http_request.is_empty());
                if t.setup || t.unanswered || !timed || !judged {
                    t.think = 0;
                    return None;
                }
                // A server pushing on its own clock did not answer the request: no think time.
                if c.dirs[1].cadence.app_clock() {
                    t.think = 0;
                    return None;
                }
                self.think_hist
                    .get_or_insert_with(LatencyHistogram::new)
                    .record(t.think.max(1));
                let (proven, timer) = match rtt {
                    Some(rtt) => proven_think(t, rtt, c.server_ack_timer),
                    None => (t.think, None),
                };
                if timer.is_some() {
                    c.server_ack_timer = timer;
                }
                Some(FirstResponse {
                    req_frame: t.req_frame,
                    think_ns: t.think,
                    proven_ns: proven,
                })
            }
            TxState::Response => {
                if let Some(t) = &mut c.tx {
                    t.resp_last = ts;
                    t.resp_last_frame = frame;
                }
                None
            }
            TxState::Idle => None,
        }
    }

    fn on_request_data(&mut self, c: &mut Conn, frame: u64, ts: u64, payload: &[u8]) {
        if c.tx_state == TxState::Response {
            self.close(c);
        }
        if c.tx_state == TxState::Idle {
            c.tx = Some(TxCur {
                req_frame: frame,
                req_start: ts,
                req_last: ts,
                resp_first: 0,
                resp_last: 0,
                resp_last_frame: 0,
                http_request: http_request_line(payload).unwrap_or_default(),
                http_status: None,
                stall: None,
                stall_lost: 0,
                think: 0,
                setup: payload.starts_with(latscope_core::PEER_MAGIC),
                unanswered: c.client_unanswered,
                acked_ts: None,
                resent: None,
                machine: ssh_key_exchange(payload),
            });
            c.tx_state = TxState::Request;
        } else if let Some(t) = &mut c.tx {
            if ts.saturating_sub(t.req_last) >= UNANSWERED_NS {
                // Once seen, the client's messages on this connection are not requests
                // (`ratinfected.pcapng`: a heartbeat every 10 s, most unanswered).
                t.unanswered = true;
                c.client_unanswered = true;
            }
            t.req_last = ts;
            // Only an acknowledgement of the request's last byte counts, and a resend of an
            // earlier part of it is overtaken.
            t.acked_ts = None;
            t.resent = None;
        }
    }

    /// A segment of the request sent again (a timer or fast retransmission) at `ts` with TSval
    /// `tsval`: the server could answer only once it arrived, so the think time runs from the
    /// resend — unless the answer's timestamp echo shows the original arrived (RFC 7323 §4.3:
    /// it echoes an earlier TSval).
    pub(super) fn on_request_resent(&mut self, c: &mut Conn, ts: u64, tsval: Option<u32>) {
        if c.tx_state == TxState::Request {
            if let Some(t) = &mut c.tx {
                t.resent = Some((ts, tsval));
            }
        }
    }

    /// A segment of the server with no data acknowledging everything the client sent: the
    /// request's acknowledgement, if it is the first.
    pub(super) fn on_server_ack(&mut self, c: &mut Conn, ts: u64) {
        if c.tx_state == TxState::Request {
            if let Some(t) = &mut c.tx {
                t.acked_ts.get_or_insert(ts);
            }
        }
    }

    /// Forget the transaction in progress without timing it (segments were not captured).
    pub(super) fn abandon(&mut self, c: &mut Conn) {
        c.tx = None;
        c.tx_state = TxState::Idle;
    }

    /// End the connection's transaction (the next request began, or the connection ended).
    pub(super) fn close(&mut self, c: &mut Conn) {
        if let Some(t) = c.tx.take() {
            if c.tx_state == TxState::Response && !t.setup {
                let dur = t.resp_last.saturating_sub(t.req_start);
                self.tx_hist
                    .get_or_insert_with(LatencyHistogram::new)
                    .record(dur.max(1));
                self.total += 1;
                c.tx_count += 1;
                keep(
                    c,
                    Transaction {
                        request_frame: t.req_frame,
                        last_response_frame: t.resp_last_frame,
                        duration_ns: dur,
                        think_ns: t.think,
                        http_request: t.http_request,
                        http_status: t.http_status,
                        stall: t.stall,
                        stall_lost_ns: t.stall_lost,
                    },
                );
            }
        }
        c.tx_state = TxState::Idle;
    }
}

/// Keep transaction `t` of `c`: while there is room; for a connection that keeps its worst,
/// in place of the kept one that lost least time (then was shortest) if `t` is worse. The
/// list stays in order of requests (`t` is the latest).
fn keep(c: &mut Conn, t: Transaction) {
    if c.txs.len() < c.tx_keep {
        c.txs.push(t);
        return;
    }
    if c.tx_keep >= MAX_TX_KEPT {
        return;
    }
    let badness = |x: &Transaction| (x.stall_lost_ns, x.duration_ns);
    let Some((i, least)) = c.txs.iter().enumerate().min_by_key(|(_, x)| badness(x)) else {
        return;
    };
    if badness(least) < badness(&t) {
        c.txs.remove(i);
        c.txs.push(t);
    }
}
