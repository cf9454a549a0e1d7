//! The request-phases step's browser: a URL requested as a browser requests it, to count what
//! it costs in round trips and what the server lets a client reuse — a first request on a new
//! connection (no TLS session yet), the next one back to back on the same connection when the
//! server keeps it, another after an idle pause longer than the connection's retransmission
//! timeout (a person reading the page), and a second connection offering the TLS session the
//! first one got. Each response's reads are timed, so the rounds of its transfer can be told
//! apart; a redirect is followed a few hops to see where it ends.
//!
//! The step drives it in turns ([`Browser::open`], [`Browser::returning`],
//! [`Browser::after_pause`], [`Browser::follow`]), making its own phase samples while the first
//! connection idles.

use std::time::{Duration, Instant};

use latscope_core::units::{count, format_bytes, format_ns};
use latscope_http::reuse::{Client, Connection, Exchange, Idle, closed_before_response};
use latscope_http::tls::TlsOptions;

use super::engines::{Reach, http_options};
use crate::rounds::flights::{flights, transfer_rounds};
use crate::rounds::probe::{
    AfterPause, Exchanged, HeadSaid, Hop, IdlePause, Opened, Reuse, RoundTripProbe, Visit,
};

/// The idle pause: several of the connection's retransmission timeouts (Linux halves the
/// congestion window for every RTO a connection was idle, down to the initial window:
/// `tcp_cwnd_restart`), at least [`MIN_PAUSE`], at most [`MAX_PAUSE`].
const PAUSE_RTOS: u32 = 4;
const MIN_PAUSE: Duration = Duration::from_millis(300);
const MAX_PAUSE: Duration = Duration::from_millis(1_200);
/// A pause shorter than this many retransmission timeouts shows no restart: not made.
const LEAST_PAUSE_RTOS: f64 = 1.5;
/// Redirects followed at most.
const MAX_HOPS: usize = 4;

/// The browser's requests so far, and the connection it keeps.
pub struct Browser {
    client: Client,
    /// How certificates are checked, for the hops the redirects lead to.
    tls: TlsOptions,
    conn: Option<Connection>,
    rtt_ns: u64,
    /// When the kept connection went idle, and for how long it is to stay so.
    pause: Option<(Instant, Duration, Option<u32>)>,
    /// What was measured.
    pub probe: RoundTripProbe,
    /// The first request as a phase sample (a new connection, a full handshake).
    pub first: latscope_http::Phases,
}

impl Browser {
    /// The first request on a new connection, and the next one back to back when the server
    /// keeps the connection; `rtt_ns` is the path's (0: unknown).
    pub fn open(
        tls: &TlsOptions,
        url: &str,
        rtt_ns: u64,
        until: Instant,
    ) -> Result<Browser, String> {
        let client = Client::new(&http_options(
            Reach::resolved(tls, url),
            1,
            false,
            left(until),
        ))
        .map_err(|e| e.to_string())?;
        let mut conn = client.connect(left(until)).map_err(|e| e.to_string())?;
        let x1 = conn
            .request(&client, left(until))
            .map_err(|e| e.to_string())?;
        let first = latscope_http::Phases {
            addr: conn.setup.addr,
            dns_ns: client.resolve_ns(),
            connect_ns: conn.setup.connect_ns,
            tls_ns: conn.setup.tls.map(|t| t.handshake_ns),
            tls_client_cpu_ns: None,
            ttfb_ns: x1.ttfb_ns,
            transfer_ns: x1.transfer_ns,
            status: x1.status,
            body_bytes: x1.body_bytes,
            limits: x1.limits,
        };
        let mut b = Browser {
            tls: tls.clone(),
            probe: RoundTripProbe {
                first: opened(&conn),
                first_exchange: exchanged(&x1, rtt_ns),
                reuse: if x1.closes {
                    Reuse::SaidClose
                } else {
                    Reuse::Kept
                },
                ..RoundTripProbe::default()
            },
            client,
            conn: None,
            rtt_ns,
            pause: None,
            first,
        };
        if b.probe.reuse == Reuse::Kept {
            match conn.request(&b.client, left(until)) {
                Ok(x2) => {
                    let (pause, rto_us) = pause_for(&x2);
                    b.pause = Some((Instant::now(), pause, rto_us));
                    b.probe.next = Some(exchanged(&x2, rtt_ns));
                    b.conn = Some(conn);
                }
                Err(e) if closed_before_response(&e) => b.probe.reuse = Reuse::ClosedSilently,
                Err(_) => {}
            }
        }
        Ok(b)
    }

    /// When the idle pause ends, if one is under way.
    pub fn pause_ends(&self) -> Option<Instant> {
        self.pause.map(|(since, pause, _)| since + pause)
    }

    /// A second connection offering the session the first one got, and its request (https).
    pub fn returning(&mut self, until: Instant) {
        if self.probe.first.tls.is_none() {
            return;
        }
        self.probe.returning = self.client.connect(left(until)).ok().map(|mut c| Visit {
            opened: opened(&c),
            exchange: c
                .request(&self.client, left(until))
                .ok()
                .map(|x| exchanged(&x, self.rtt_ns)),
        });
    }

    /// The rest of the pause, then a request on the kept connection if the server kept it. A
    /// close seen late (other requests ran meanwhile) counts from when it was seen: at most that
    /// long into the pause. Not made when the pause would be too short to show a restart, or
    /// the request after it would not fit before `until`.
    pub fn after_pause(&mut self, until: Instant) {
        let (Some((since, pause, rto_us)), Some(mut conn)) = (self.pause.take(), self.conn.take())
        else {
            return;
        };
        let end = since + pause;
        let rto = Duration::from_micros(u64::from(rto_us.unwrap_or(0)));
        let room = end + Duration::from_nanos(self.rtt_ns.saturating_mul(3));
        if room > until || pause.as_secs_f64() < LEAST_PAUSE_RTOS * rto.as_secs_f64() {
            return;
        }
        let outcome = match conn.idle(end.saturating_duration_since(Instant::now())) {
            Idle::Closed { .. } => AfterPause::Closed {
                after_ns: since.elapsed().as_nanos() as u64,
            },
            Idle::Open => match conn.request(&self.client, left(until)) {
                Ok(x) => AfterPause::Open(exchanged(&x, self.rtt_ns)),
                // Closed as the request went out: the server's timeout was about the pause.
                Err(e) if closed_before_response(&e) => AfterPause::Closed {
                    after_ns: pause.as_nanos() as u64,
                },
                Err(_) => return,
            },
        };
        self.probe.idle = Some(IdlePause {
            pause_ns: since.elapsed().min(pause).as_nanos() as u64,
            rto_us,
            outcome,
        });
    }

    /// Follow the redirects the URL leads through, each hop requested on a new connection (at
    /// most [`MAX_HOPS`], within `until`): where it points and what it cost.
    pub fn follow(&mut self, url: &str, until: Instant) {
        let Ok(mut from) = latscope_http::Url::parse(url) else {
            return;
        };
        let (mut x, mut setup) = (self.probe.first_exchange.clone(), self.probe.first);
        while let Some(loc) = x.head.location.clone() {
            let Ok(to) = from.join(&loc) else {
                break;
            };
            let same_origin = from.same_origin(&to);
            // To another origin, the hop's own connection is the client's loss too.
            let (cost_ns, round_trips) = if same_origin {
                (x.total_ns(), 1)
            } else {
                (setup.total_ns() + x.total_ns(), setup.round_trips() + 1)
            };
            self.probe.redirects.push(Hop {
                from: from.text(),
                status: x.status,
                to: to.text(),
                same_origin,
                cost_ns,
                round_trips,
            });
            if self.probe.redirects.len() >= MAX_HOPS || Instant::now() >= until {
                break;
            }
            let to_url = to.text();
            let o = http_options(Reach::resolved(&self.tls, &to_url), 1, false, left(until));
            let Ok(client) = Client::new(&o) else {
                break;
            };
            let Ok(mut c) = client.connect(left(until)) else {
                break;
            };
            let Ok(got) = c.request(&client, left(until)) else {
                break;
            };
            setup = opened(&c);
            x = exchanged(&got, 0);
            from = to;
            if x.head.location.is_none() {
                self.probe.page = Some(Visit {
                    opened: setup,
                    exchange: Some(x.clone()),
                });
            }
        }
    }
}

/// The browser's part of the step's line: what was reused, the pause, the redirects.
pub fn detail(p: &RoundTripProbe) -> String {
    let f = |ns: u64| format_ns(ns as f64);
    let mut d = format!("first request: connect {}", f(p.first.connect_ns));
    if let Some(t) = p.first.tls {
        d += &format!(", {} {}", t.describe(), f(t.handshake_ns));
    }
    d += &format!(", {}", exchange_detail(&p.first_exchange));
    d += &match p.reuse {
        Reuse::Kept => p.next.as_ref().map_or_else(String::new, |n| {
            format!("; next on the same connection: {}", exchange_detail(n))
        }),
        Reuse::SaidClose => "; the server closes the connection after each response".into(),
        Reuse::ClosedSilently => {
            "; the server closed the connection after the response without saying so".into()
        }
    };
    if let Some(i) = &p.idle {
        d += &match &i.outcome {
            AfterPause::Open(x) => {
                format!("; after {} idle: {}", f(i.pause_ns), exchange_detail(x))
            }
            AfterPause::Closed { after_ns } => format!(
                "; the server closed the idle connection within {}",
                f(*after_ns)
            ),
        };
    }
    if let Some(v) = &p.returning
        && let Some(t) = v.opened.tls
    {
        d += &format!(
            "; a second connection: {} {}",
            t.describe(),
            f(t.handshake_ns)
        );
    }
    for h in &p.redirects {
        d += &format!("; {} → {} ({})", h.status, h.to, f(h.cost_ns));
    }
    d
}

/// "200, 612 B, first byte 40.5ms, transfer 181ms in 5 flights (14 KiB, 28 KiB, …)".
fn exchange_detail(x: &Exchanged) -> String {
    let flights = match x.flights.len() {
        0 => String::new(),
        n => {
            let sizes: Vec<String> = x
                .flights
                .iter()
                .take(6)
                .map(|&b| format_bytes(b as f64))
                .collect();
            format!(
                " in {} ({}{})",
                count(n as u64, "flight"),
                sizes.join(", "),
                if n > 6 { ", …" } else { "" }
            )
        }
    };
    format!(
        "{}, {}, first byte {}, transfer {}{flights}",
        x.status,
        format_bytes(x.body_bytes as f64),
        format_ns(x.ttfb_ns as f64),
        format_ns(x.transfer_ns as f64)
    )
}

/// Time left before `until` (at least a millisecond, so a call fails at once rather than
/// hanging without a timeout).
pub fn left(until: Instant) -> Duration {
    until
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn opened(c: &Connection) -> Opened {
    Opened {
        connect_ns: c.setup.connect_ns,
        tls: c.setup.tls,
    }
}

/// The evidence of one exchange: its times and sizes, its flights over the path's `rtt_ns` (or
/// the socket's own RTT when the path was not measured), what its head said.
fn exchanged(x: &Exchange, rtt_ns: u64) -> Exchanged {
    let rtt = match rtt_ns {
        0 => x.tcp.as_ref().map_or(0, |t| u64::from(t.rtt_us) * 1_000),
        r => r,
    };
    let reads: Vec<(u64, u64)> = x
        .arrivals
        .iter()
        .map(|a| (a.at_ns, u64::from(a.bytes)))
        .collect();
    let head = x.head.as_ref();
    let flights = flights(&reads, x.sent_ns + x.ttfb_ns, rtt);
    Exchanged {
        rounds: transfer_rounds(&flights, x.transfer_ns, rtt),
        ttfb_ns: x.ttfb_ns,
        transfer_ns: x.transfer_ns,
        status: x.status,
        body_bytes: x.body_bytes,
        wire_bytes: reads.iter().map(|r| r.1).sum(),
        flights,
        mss: x
            .tcp
            .as_ref()
            .map(|t| t.rcv_mss)
            .filter(|&m| m > 0)
            .or_else(|| x.tcp.as_ref().map(|t| t.snd_mss)),
        rto_us: x.tcp.as_ref().map(|t| t.rto_us),
        window: x.tcp.as_ref().and_then(|t| t.rcv_wnd),
        head: HeadSaid {
            http10: head.is_some_and(|h| h.http10),
            close: x.closes,
            keep_alive_timeout_s: head.and_then(|h| h.keep_alive_timeout_s),
            location: head.and_then(|h| h.location.clone()),
        },
    }
}

/// How long to leave a connection idle after `x`: [`PAUSE_RTOS`] of its retransmission timeout
/// within [`MIN_PAUSE`]..=[`MAX_PAUSE`] (and the timeout, µs).
fn pause_for(x: &Exchange) -> (Duration, Option<u32>) {
    let rto_us = x.tcp.as_ref().map(|t| t.rto_us);
    let rto = Duration::from_micros(u64::from(rto_us.unwrap_or(1_000_000)));
    ((rto * PAUSE_RTOS).clamp(MIN_PAUSE, MAX_PAUSE), rto_us)
}
