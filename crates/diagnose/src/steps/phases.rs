//! A URL request broken into phases, as `curl -w` / httpstat show it: DNS, connect, TLS, time to
//! first byte, transfer. Each request is a new connection (the phases of a first request), and
//! the medians of a few go into the evidence. The first is a browser's ([`browser`]): on its
//! connection the next request, and another after an idle pause, show what the server lets a
//! client reuse and the rounds each response needs; the other samples are made during the
//! pause.

use std::time::{Duration, Instant};

use latscope_core::model::diagnose::{RequestPhases, StepName, TargetKind};
use latscope_core::units::format_ns;

use super::browser::{self, Browser};
use super::engines::{Reach, http_options};
use super::step::{Measure, NotRun, requests_target};
use crate::context::Context;
use crate::evidence::{Download, Evidence};
use crate::plan::Plan;
use crate::rounds::probe::RoundTripProbe;

pub struct Phases;

/// Requests measured (each a new connection), at most.
const REQUESTS: usize = 5;
/// Time allowed for all of them, the browser's requests included: its first request is the
/// first sample, and samples are made while its connection idles.
const TIME: Duration = Duration::from_millis(2500);

impl Measure for Phases {
    const NAME: StepName = StepName::RequestPhases;
    type Output = Measured;

    fn run(cx: &Context, ev: &Evidence) -> Result<Measured, NotRun> {
        if requests_target(ev)? != TargetKind::Http {
            return Err(NotRun::Skipped("URL targets only".into()));
        }
        let Some(url) = &cx.plan.url else {
            return Err(NotRun::Skipped("URL targets only".into()));
        };
        let rtt = ev.path.as_ref().map_or(0, |p| p.p50_ns);
        let until = Instant::now() + time_for(ev.single.as_ref().map(|s| s.p50_ns), rtt);
        let mut got = Vec::with_capacity(REQUESTS);
        let (mut browser, mut last_err) = match Browser::open(&cx.plan.tls, url, rtt, until) {
            Ok(b) => {
                got.push(b.first);
                (Some(b), None)
            }
            Err(e) => (None, Some(e)),
        };
        if let Some(b) = browser.as_mut().filter(|_| !cx.stopped()) {
            b.returning(until);
            // Samples while the first connection idles; a sample the pause's end cut short is
            // made again after it.
            let _ = samples(
                cx,
                url,
                &mut got,
                b.pause_ends().unwrap_or(until).min(until),
            );
            b.after_pause(until);
        }
        if let Some(e) = samples(cx, url, &mut got, until) {
            last_err = Some(e);
        }
        if let Some(b) = browser.as_mut().filter(|_| !cx.stopped()) {
            b.follow(url, until);
        }
        if got.is_empty() {
            return Err(NotRun::Failed(
                last_err.unwrap_or_else(|| "no request completed in time".into()),
            ));
        }
        Ok(Measured {
            phases: medians(&got),
            download: download(&got),
            browser: browser.map(|b| b.probe),
        })
    }

    fn detail(_cx: &Context, m: &Measured) -> String {
        let (p, f) = (&m.phases, |v: u64| format_ns(v as f64));
        let window = m
            .download
            .and_then(|d| d.window_bytes())
            .map(|w| format!(", window advertised {w} B"))
            .unwrap_or_default();
        format!(
            "median of {}: DNS {}, connect {}, TLS {}, first byte {}, transfer {}{window}",
            p.requests,
            f(p.dns_ns),
            f(p.connect_ns),
            p.tls_ns.map(f).unwrap_or_else(|| "-".into()),
            f(p.ttfb_ns),
            f(p.transfer_ns)
        ) + &m
            .browser
            .as_ref()
            .map(|b| format!("; {}", browser::detail(b)))
            .unwrap_or_default()
    }

    /// Its requests share TIME.
    fn budget(_plan: &Plan) -> Duration {
        TIME + Duration::from_millis(500)
    }

    fn store(ev: &mut Evidence, m: Measured) {
        ev.phases = Some(m.phases);
        ev.download = m.download;
        ev.browser = m.browser;
    }
}

/// The time the step's requests get: [`TIME`], or, where one request on a kept connection took
/// longer than that leaves for a first one (a large page far away through a small window takes
/// seconds), a new connection's request — the kept one's time, 25% more, and two round trips for
/// the handshakes — at most [`LONGEST`]. The collector's deadline for the step (its budget and
/// what the steps before it left) still bounds it: without a first request there is no split of
/// the time before the first byte from the transfer.
fn time_for(single_p50_ns: Option<u64>, rtt_ns: u64) -> Duration {
    let first = single_p50_ns.map_or(Duration::ZERO, |p| {
        Duration::from_nanos(
            p.saturating_add(p / 4)
                .saturating_add(rtt_ns.saturating_mul(2)),
        )
    });
    TIME.max(first).min(LONGEST)
}

/// The most [`time_for`] gives a first request.
const LONGEST: Duration = Duration::from_secs(10);

/// Phase samples — each a new connection with a full TLS handshake — until there are
/// [`REQUESTS`] or `end` comes, each started only when the last one's time still fits. The
/// error of a sample that failed, if one did.
fn samples(
    cx: &Context,
    url: &str,
    got: &mut Vec<latscope_http::Phases>,
    end: Instant,
) -> Option<String> {
    loop {
        let expect = Duration::from_nanos(got.last().map_or(0, |p| p.total_ns()));
        if got.len() >= REQUESTS || cx.stopped() || Instant::now() + expect >= end {
            return None;
        }
        let mut o = http_options(
            Reach::resolved(&cx.plan.tls, url),
            1,
            false,
            Duration::from_secs(1),
        );
        o.timeout = browser::left(end).max(Duration::from_millis(100));
        match latscope_http::request_phases(&o) {
            Ok(p) => got.push(p),
            Err(e) => return Some(e.to_string()),
        }
    }
}

/// The phases' medians, the median request's transfer as the client received it, and the
/// browser's requests.
pub struct Measured {
    phases: RequestPhases,
    download: Option<Download>,
    browser: Option<RoundTripProbe>,
}

/// The transfer of the request with the median transfer time, with its client socket's limits
/// and this host's `tcp_rmem` ceiling; `None` for responses without a body.
fn download(all: &[latscope_http::Phases]) -> Option<Download> {
    let mut by_transfer: Vec<&latscope_http::Phases> = all.iter().collect();
    by_transfer.sort_unstable_by_key(|p| p.transfer_ns);
    let p = by_transfer.get(by_transfer.len() / 2)?;
    (p.body_bytes > 0).then(|| Download {
        body_bytes: p.body_bytes,
        transfer_ns: p.transfer_ns,
        client: p.limits,
        rmem_max: rmem_max(),
    })
}

/// `net.ipv4.tcp_rmem`'s third value in this process's network namespace: how far receive
/// auto-tuning may grow a socket's buffer.
fn rmem_max() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").ok()?;
    s.split_whitespace().nth(2)?.parse().ok()
}

/// Each phase's median (the upper median of an even count) over the requests.
fn medians(all: &[latscope_http::Phases]) -> RequestPhases {
    let med = |f: &dyn Fn(&latscope_http::Phases) -> u64| {
        let mut v: Vec<u64> = all.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    RequestPhases {
        requests: all.len() as u32,
        dns_ns: med(&|p| p.dns_ns),
        connect_ns: med(&|p| p.connect_ns),
        tls_ns: all
            .iter()
            .all(|p| p.tls_ns.is_some())
            .then(|| med(&|p| p.tls_ns.unwrap_or(0))),
        // Over the requests that timed it (the round-trip probe's first connection does not).
        tls_client_cpu_ns: {
            let mut v: Vec<u64> = all.iter().filter_map(|p| p.tls_client_cpu_ns).collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied()
        },
        ttfb_ns: med(&|p| p.ttfb_ns),
        transfer_ns: med(&|p| p.transfer_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::{LONGEST, TIME, time_for};
    use std::time::Duration;

    #[test]
    fn a_slow_page_gets_the_time_of_one_first_request() {
        assert_eq!(time_for(None, 0), TIME);
        assert_eq!(time_for(Some(1_000_000), 20_000_000), TIME);
        // 2.2 s through a 128 KiB window 120 ms away: 2.75 s and 0.24 s of handshakes.
        assert_eq!(
            time_for(Some(2_200_000_000), 120_000_000),
            Duration::from_millis(2_990)
        );
        assert_eq!(time_for(Some(60_000_000_000), 0), LONGEST);
    }
}
