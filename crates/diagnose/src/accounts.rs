//! The round-trip accounts of a run: each request the steps measured, part by part, in round
//! trips of the path ([`RoundTrips`]), with the parts a fix would save marked by the finding
//! that names them. The findings decide what is avoidable — a part is never marked without
//! the rule that stands on its evidence — and the accounts count what the requests measured;
//! what is left is the path's floor.

use latscope_core::model::diagnose::{Diagnosis, RuleId};
use latscope_core::model::diagnose::{RequestRounds, RoundTrip, RoundTrips};
use latscope_core::model::round_trips::{
    RequestKind, RoundTripFix, RoundTripKind, TlsKind, TlsVersion,
};
use latscope_core::units::{count, format_bytes, format_ns};

use crate::evidence::Evidence;
use crate::rounds::probe::{
    AfterPause, Exchanged, Opened, Reuse, RoundTripProbe, handshake_saving,
};

/// A DNS lookup shorter than this is an address, not a name: no part of its own.
const DNS_FLOOR_NS: u64 = 50_000;

/// The requests' round trips: a URL's from the round-trip step, a latscope server's from the
/// handshakes and the single requests; `None` without the path's RTT.
pub fn round_trips(e: &Evidence, findings: &[Diagnosis]) -> Option<RoundTrips> {
    let rtt = e.path.as_ref()?.p50_ns;
    let requests = match &e.browser {
        Some(p) => Accounts {
            e,
            p,
            findings,
            rtt,
        }
        .all(),
        None => rr_accounts(e),
    };
    (!requests.is_empty()).then_some(RoundTrips {
        rtt_ns: rtt,
        requests,
    })
}

struct Accounts<'a> {
    e: &'a Evidence,
    p: &'a RoundTripProbe,
    findings: &'a [Diagnosis],
    rtt: u64,
}

impl Accounts<'_> {
    fn fired(&self, rule: RuleId) -> bool {
        self.findings.iter().any(|f| f.rule == rule)
    }

    fn all(&self) -> Vec<RequestRounds> {
        let p = self.p;
        let mut out = vec![self.first()];
        if let Some(v) = &p.returning {
            let x = v.exchange.as_ref().unwrap_or(&p.first_exchange);
            out.push(account(
                RequestKind::Returning,
                None,
                [
                    self.setup(&v.opened, RequestKind::Returning),
                    self.exchange(x),
                ]
                .concat(),
            ));
        }
        match (p.reuse, &p.next) {
            (Reuse::Kept, Some(x)) => {
                let mut parts = self.exchange(x);
                parts.extend(self.timeouts());
                out.push(account(RequestKind::Next, None, parts));
            }
            (Reuse::Kept, None) => {}
            _ => {
                let mut parts = self.new_connection();
                parts.extend(self.exchange(&p.first_exchange));
                parts.extend(self.timeouts());
                out.push(account(RequestKind::Next, None, parts));
            }
        }
        if let Some(i) = &p.idle {
            let idle_ms = Some(i.pause_ns / 1_000_000);
            let parts = match &i.outcome {
                AfterPause::Open(x) => self.after_idle(x),
                AfterPause::Closed { .. } => {
                    [self.new_connection(), self.exchange(&p.first_exchange)].concat()
                }
            };
            out.push(account(RequestKind::AfterIdle, idle_ms, parts));
        }
        out
    }

    /// A first visit: the name, the redirects, a new connection without a TLS session, the
    /// request and its transfer.
    fn first(&self) -> RequestRounds {
        let p = self.p;
        let mut parts = Vec::new();
        if let Some(ph) = self.e.phases.filter(|ph| ph.dns_ns >= DNS_FLOOR_NS) {
            let mut dns = RoundTrip::needed(
                RoundTripKind::Dns,
                1,
                ph.dns_ns,
                format!("the name looked up (median of {})", ph.requests),
            );
            if let Some(f) = self.findings.iter().find(|f| f.rule == RuleId::SlowDns) {
                dns = dns.avoid(
                    0,
                    f.explains_ns,
                    RuleId::SlowDns,
                    RoundTripFix::ResolverOptions,
                );
            }
            parts.push(dns);
        }
        if p.redirects.is_empty() {
            parts.extend(self.setup(&p.first, RequestKind::First));
            parts.extend(self.exchange(&p.first_exchange));
            return account(RequestKind::First, None, parts);
        }
        // Through redirects: the first connection is the page's unless the first hop leaves
        // its origin (then it is that hop's); the page comes on the last hop's connection.
        if p.redirects[0].same_origin {
            parts.extend(self.setup(&p.first, RequestKind::First));
        }
        for h in &p.redirects {
            let mut r = RoundTrip::needed(
                RoundTripKind::Redirect,
                h.round_trips,
                h.cost_ns,
                format!("{} {} → {}", h.status, h.from, h.to),
            );
            if self.fired(RuleId::Redirects) {
                r = r.avoid(
                    h.round_trips,
                    h.cost_ns,
                    RuleId::Redirects,
                    RoundTripFix::FinalUrl,
                );
            }
            parts.push(r);
        }
        if let Some(page) = &p.page {
            if p.redirects.iter().any(|h| !h.same_origin) {
                parts.extend(self.setup(&page.opened, RequestKind::First));
            }
            parts.extend(page.exchange.iter().flat_map(|x| self.exchange(x)));
        }
        account(RequestKind::First, None, parts)
    }

    /// A connection's TCP and TLS handshakes as `request` meets them.
    fn setup(&self, o: &Opened, request: RequestKind) -> Vec<RoundTrip> {
        let mut parts = vec![RoundTrip::needed(
            RoundTripKind::TcpHandshake,
            1,
            o.connect_ns,
            "SYN → SYN-ACK".into(),
        )];
        if let Some(t) = o.tls {
            let mut tls = RoundTrip::needed(
                RoundTripKind::TlsHandshake,
                t.round_trips(),
                t.handshake_ns,
                t.describe(),
            );
            let full12 = t.version == TlsVersion::Tls12 && t.kind != TlsKind::Resumed;
            if request == RequestKind::Returning && t.kind != TlsKind::Resumed {
                if self.fired(RuleId::TlsNotResumed) {
                    let extra = t.round_trips().saturating_sub(1);
                    tls = tls.avoid(
                        extra,
                        handshake_saving(&t, extra, self.rtt),
                        RuleId::TlsNotResumed,
                        RoundTripFix::TlsResumption,
                    );
                }
            } else if full12 && self.fired(RuleId::OldTlsVersion) {
                tls = tls.avoid(
                    1,
                    handshake_saving(&t, 1, self.rtt),
                    RuleId::OldTlsVersion,
                    RoundTripFix::Tls13,
                );
            }
            parts.push(tls);
        }
        parts
    }

    /// The new connection a request pays when the server did not keep the last one: all of
    /// it avoidable by keep-alive when `connection_not_reused` fired.
    fn new_connection(&self) -> Vec<RoundTrip> {
        let o = self.p.new_connection();
        let mut parts = self.setup(&o, RequestKind::Next);
        if self.fired(RuleId::ConnectionNotReused) {
            for part in &mut parts {
                *part = part.clone().avoid(
                    part.count,
                    part.cost_ns,
                    RuleId::ConnectionNotReused,
                    RoundTripFix::KeepAlive,
                );
            }
        }
        parts
    }

    /// A request and the rounds of its response's transfer.
    fn exchange(&self, x: &Exchanged) -> Vec<RoundTrip> {
        let mut parts = vec![RoundTrip::needed(
            RoundTripKind::Request,
            1,
            x.ttfb_ns,
            format!(
                "{} → first byte: one round trip and {} at the server",
                x.status,
                format_ns(x.ttfb_ns.saturating_sub(self.rtt) as f64)
            ),
        )];
        parts.extend(self.transfer(x, None));
        parts
    }

    /// The rounds of a transfer: slow start, and the rounds a window or a small initial window
    /// cost when their finding fired; `after` is the slow start after an idle pause.
    fn transfer(&self, x: &Exchanged, after: Option<u32>) -> Vec<RoundTrip> {
        let further = x.further_rounds();
        if further == 0 {
            return Vec::new();
        }
        let floor = x.floor_rounds().min(further);
        let detail = format!(
            "{} arrived in {} after a first flight of {}",
            format_bytes(x.wire_bytes as f64),
            count(u64::from(further), "further round"),
            format_bytes(x.flights.first().copied().unwrap_or(0) as f64)
        );
        let window = [
            (RuleId::ReceiveWindowLimited, RoundTripFix::ReceiveWindow),
            (RuleId::SendBufferLimited, RoundTripFix::SendBuffer),
        ]
        .into_iter()
        .find(|(r, _)| self.fired(*r));
        if let Some((rule, fix)) = window.filter(|_| further > floor) {
            let lost = x.rounds_saving(floor, self.rtt);
            let slow = RoundTrip::needed(
                RoundTripKind::SlowStart,
                floor,
                x.transfer_ns - lost,
                detail,
            );
            let held = RoundTrip::needed(
                RoundTripKind::WindowLimited,
                further - floor,
                lost,
                "rounds beyond slow start's, each as much as the window lets out".into(),
            )
            .avoid(further - floor, lost, rule, fix);
            return [slow, held].into_iter().filter(|p| p.count > 0).collect();
        }
        let mut slow = RoundTrip::needed(RoundTripKind::SlowStart, further, x.transfer_ns, detail);
        if let Some(before) = after.filter(|_| self.fired(RuleId::SlowStartAfterIdle)) {
            slow = slow.avoid(
                further.saturating_sub(before),
                x.rounds_saving(before, self.rtt),
                RuleId::SlowStartAfterIdle,
                RoundTripFix::KeepWindowWhenIdle,
            );
        } else if after.is_none() && self.fired(RuleId::SmallInitialWindow) {
            slow = slow.avoid(
                further - floor,
                x.rounds_saving(floor, self.rtt),
                RuleId::SmallInitialWindow,
                RoundTripFix::InitialWindow,
            );
        }
        vec![slow]
    }

    /// The request after the idle pause, its slow start measured against the back-to-back
    /// request's.
    fn after_idle(&self, x: &Exchanged) -> Vec<RoundTrip> {
        let before = self.p.next.as_ref().map_or(0, Exchanged::further_rounds);
        let mut parts = self.exchange(x);
        parts.truncate(1);
        parts.extend(self.transfer(x, Some(before)));
        parts
    }

    /// The retransmission timeouts the packet capture saw, as an average request meets them.
    fn timeouts(&self) -> Option<RoundTrip> {
        let c = self.e.capture.as_ref()?;
        let rto = c.rto_stalls.filter(|s| s.count > 0)?;
        let per_request = rto.lost_ns / c.transactions.max(1);
        let mut part = RoundTrip::needed(
            RoundTripKind::RetransmissionTimeout,
            u32::try_from(rto.count).unwrap_or(u32::MAX),
            per_request,
            format!(
                "{} over {} requests: {} in all, {} a request on average",
                count(rto.count, "timeout"),
                c.transactions,
                format_ns(rto.lost_ns as f64),
                format_ns(per_request as f64)
            ),
        );
        if self.fired(RuleId::Retransmissions) {
            part = part.avoid(
                0,
                per_request,
                RuleId::Retransmissions,
                RoundTripFix::RemoveLoss,
            );
        }
        Some(part)
    }
}

fn account(request: RequestKind, idle_ms: Option<u64>, parts: Vec<RoundTrip>) -> RequestRounds {
    RequestRounds {
        request,
        measured_ns: parts.iter().map(|p| p.cost_ns).sum(),
        idle_ms,
        parts,
    }
}

/// A latscope server's requests: a first one pays the TCP handshake; the rest go on the open
/// connection, one round trip each.
fn rr_accounts(e: &Evidence) -> Vec<RequestRounds> {
    let (Some(single), Some(connect)) = (&e.single, &e.handshake) else {
        return Vec::new();
    };
    let request = || {
        RoundTrip::needed(
            RoundTripKind::Request,
            1,
            single.p50_ns,
            "request → response (median)".into(),
        )
    };
    let tcp = RoundTrip::needed(
        RoundTripKind::TcpHandshake,
        1,
        connect.p50_ns,
        "SYN → SYN-ACK (median)".into(),
    );
    vec![
        account(RequestKind::First, None, vec![tcp, request()]),
        account(RequestKind::Next, None, vec![request()]),
    ]
}
