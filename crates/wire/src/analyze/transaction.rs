//! Transaction sniffing: client data opens a request, the server's first data after it is the
//! response (think time = last request byte → first response byte, minus the round trip to
//! the server), the client's next data closes it. HTTP/1 request lines and status codes are
//! recognised for the report; latscope's own peer-protocol greeting is set-up, not counted.

use latscope_core::LatencyHistogram;

use crate::report::{StallKind, Transaction};

use super::flow::Conn;

/// Transactions kept in full for the connection drawn with `--conn` (its first ones).
pub const MAX_TX_KEPT: usize = 256;
/// Transactions kept for every other connection: the ones that lost the most time (a
/// connection that never closes keeps no more however many it makes; `tx_count` counts all).
pub const MAX_TX_WORST: usize = 16;

/// Where a connection is in its request/response cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxState {
    Idle,
    Request,
    Response,
}

/// The transaction in progress.
#[derive(Debug)]
pub(super) struct TxCur {
    pub req_frame: u64,
    pub req_start: u64,
    pub req_last: u64,
    pub resp_first: u64,
    pub resp_last: u64,
    pub resp_last_frame: u64,
    pub http_request: String,
    pub http_status: Option<u16>,
    /// The largest stall charged to it.
    pub stall: Option<StallKind>,
    pub stall_lost: u64,
    pub think: u64,
    /// latscope's own peer-protocol set-up (greeting, test request): neither a transaction
    /// nor think time of the application.
    pub setup: bool,
    /// The client sent again after a long silence with no answer between
    /// ([`UNANSWERED_NS`]): it was not waiting for one (a heartbeat, a stream of reports),
    /// so the server's next data is not shown to answer it.
    pub unanswered: bool,
}

/// A client that sends again this long after its previous data with no answer between was not
/// waiting for an answer (`ratinfected.pcapng`: a 9-byte heartbeat every 10 s, the server's
/// command 4 s after one of them read as a 4 s think time).
pub(super) const UNANSWERED_NS: u64 = 1_000_000_000;

/// The first response byte of a transaction arrived.
#[derive(Debug, Clone, Copy)]
pub(super) struct FirstResponse {
    /// Frame of the first request byte.
    pub req_frame: u64,
    /// Last request byte → first response byte, minus the round trip to the server.
    pub think_ns: u64,
}

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

fn http_status(p: &[u8]) -> Option<u16> {
    if p.len() < 12 || !p.starts_with(b"HTTP/1.") {
        return None;
    }
    std::str::from_utf8(&p[9..12]).ok()?.parse().ok()
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
    ) -> Option<FirstResponse> {
        if d == 0 {
            self.on_request_data(c, frame, ts, payload);
            return None;
        }
        match c.tx_state {
            TxState::Request => {
                // Without the handshake the round trip is unknown: the gap is not the
                // server's time. A human-paced protocol's next output is no answer.
                // The round trip is the handshake's, or the server's ACKs' when they came back
                // sooner (a 700 ms SYN→SYN-ACK, then ACKs in 0.2 ms: `suspicious-time.pcap`).
                let rtt = c.rtt_to_server.and(c.quickest_rtt_to_sender(1));
                let judged = !c.interactive;
                let t = c.tx.as_mut()?;
                t.resp_first = ts;
                t.resp_last = ts;
                t.resp_last_frame = frame;
                t.http_status = http_status(payload);
                t.think = ts
                    .saturating_sub(t.req_last)
                    .saturating_sub(rtt.unwrap_or(0));
                c.tx_state = TxState::Response;
                if t.setup || t.unanswered || rtt.is_none() || !judged {
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
                Some(FirstResponse {
                    req_frame: t.req_frame,
                    think_ns: t.think,
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
