//! One request at a time: the latency the application adds on top of the path — and, meanwhile,
//! this host's own scheduling noise (a thread sleeping 1 ms at a time and timing how late it
//! wakes, as cyclictest does): a tail the client's host makes by itself is not the server's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::Summary;
use latscope_core::hist::LatencyHistogram;
use latscope_core::model::diagnose::StepName;
use latscope_core::units::{format_bytes, format_ns};

use super::engines::{Sizes, Slices, app_latency_sized, client_host};
use super::step::{Measure, NotRun, requests_target};
use crate::context::Context;
use crate::evidence::{ClientHost, Evidence, Responses, TimeSlice};

pub struct Single;

/// The requests' latency and the client host's wake-up lateness meanwhile.
pub struct Outcome {
    latency: Summary,
    noise: Option<Summary>,
    /// The requests by time slice, each with the host's lateness within it.
    slices: Vec<TimeSlice>,
    /// What each exchange weighed.
    sizes: Option<Sizes>,
    /// HTTP responses by status code.
    responses: Option<Responses>,
    /// This host's own stack, timed after the requests (latscope targets).
    client_host: Option<ClientHost>,
}

/// The noise thread's period.
const TICK: Duration = Duration::from_millis(1);

/// How late a sleeping thread woke: every wake-up (when, how late) and their distribution.
struct Noise {
    wakes: Vec<(Instant, u64)>,
    summary: Summary,
}

/// Sleep [`TICK`] at a time until `done`, recording how late each wake-up is.
fn wakeup_lateness(done: &AtomicBool) -> Option<Noise> {
    let mut h = LatencyHistogram::new();
    let mut wakes = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        std::thread::sleep(TICK);
        let now = Instant::now();
        let late = (now - t0).saturating_sub(TICK).as_nanos() as u64;
        h.record(late);
        wakes.push((now, late));
    }
    let summary = h.summary();
    (summary.count > 0).then_some(Noise { wakes, summary })
}

/// The engine's slices with the latest wake-up of the sleeping thread that overlapped each: a
/// wake-up `late` ns late at `at` means the thread waited from `at − late` to `at`.
fn slices_with_noise(slices: &Slices, noise: Option<&Noise>) -> Vec<TimeSlice> {
    slices
        .placed()
        .map(|(from, to, requests, slow)| TimeSlice {
            requests,
            slow: slow.to_vec(),
            host_late_ns: noise.and_then(|n| {
                n.wakes
                    .iter()
                    .filter(|&&(at, late)| {
                        at >= from
                            && at
                                .checked_sub(Duration::from_nanos(late))
                                .is_none_or(|s| s <= to)
                    })
                    .map(|&(_, late)| late)
                    .max()
            }),
        })
        .collect()
}

impl Measure for Single {
    const NAME: StepName = StepName::OneRequest;
    type Output = Outcome;

    fn run(cx: &Context, ev: &Evidence) -> Result<Outcome, NotRun> {
        requests_target(ev)?;
        let done = AtomicBool::new(false);
        let mut slices = Slices::default();
        std::thread::scope(|s| {
            let noise = s.spawn(|| wakeup_lateness(&done));
            let latency = app_latency_sized(cx.plan, cx.plan.duration, cx.stop, &mut slices);
            done.store(true, Ordering::Relaxed);
            // After the requests, within this step's set-up slack: never in their loop.
            let client_host = (latency.is_ok() && !cx.stopped())
                .then(|| client_host(cx.plan))
                .flatten();
            let noise = noise.join().ok().flatten();
            let sliced = slices_with_noise(&slices, noise.as_ref());
            latency
                .map(|r| Outcome {
                    latency: r.latency,
                    noise: noise.map(|n| n.summary),
                    slices: sliced,
                    sizes: r.sizes,
                    responses: r.responses,
                    client_host,
                })
                .map_err(NotRun::Failed)
        })
    }

    fn detail(cx: &Context, o: &Outcome) -> String {
        format!(
            "{}{}p50 {}, p99 {}{}",
            errors_label(o.responses.as_ref()),
            size_label(cx.plan.url.is_some(), o.sizes),
            format_ns(o.latency.p50_ns as f64),
            format_ns(o.latency.p99_ns as f64),
            o.noise
                .as_ref()
                .map(|n| format!(
                    "; this host wakes a sleeping thread up to {} late (p99; p99.9 {})",
                    format_ns(n.p99_ns as f64),
                    format_ns(n.p999_ns as f64)
                ))
                .unwrap_or_default()
        ) + &o
            .client_host
            .and_then(|c| c.per_exchange_ns().map(|x| (c, x)))
            .map(|(c, x)| {
                let f = |v: Option<u64>| v.map_or("-".into(), |v| format_ns(v as f64));
                format!(
                    "; this host's own stack {} per exchange (send → qdisc {}, send → driver {}, driver → recv {}; {} timestamps)",
                    format_ns(x as f64),
                    f(c.send_to_qdisc_ns),
                    f(c.send_to_driver_ns),
                    f(c.driver_to_recv_ns),
                    c.samples
                )
            })
            .unwrap_or_default()
    }

    fn distribution(o: &Outcome) -> Option<Summary> {
        Some(o.latency.clone())
    }

    fn store(ev: &mut Evidence, o: Outcome) {
        ev.single = Some(o.latency);
        ev.sizes = o.sizes;
        ev.host_noise = o.noise;
        ev.slices = o.slices;
        ev.responses = o.responses;
        ev.client_host = o.client_host;
    }
}

/// "error responses: 403 × 120 of 120; " when some responses were errors (measured error pages
/// are not the application's normal work), else nothing.
fn errors_label(r: Option<&Responses>) -> String {
    let Some(r) = r.filter(|r| r.error_count() > 0) else {
        return String::new();
    };
    let codes: Vec<String> = r.errors().map(|(s, n)| format!("{s} × {n}")).collect();
    format!("error responses: {} of {}; ", codes.join(", "), r.total())
}

/// "64 B / 1.0 KiB, " for latscope's sizes; "request ≈ 78 B, response ≈ 853 B (headers
/// included), " for an HTTP exchange as measured.
fn size_label(http: bool, sizes: Option<Sizes>) -> String {
    let b = |n: u64| format_bytes(n as f64);
    match (http, sizes) {
        (_, None) => String::new(),
        (false, Some(s)) => format!("{} / {}, ", b(s.request), b(s.response)),
        (true, Some(s)) => format!(
            "request ≈ {}, response ≈ {} (headers included), ",
            b(s.request),
            b(s.response)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_exchange_is_labelled_with_its_measured_sizes() {
        let s = Sizes::average(7_800, 85_300, 100);
        assert_eq!(
            size_label(true, s),
            format!(
                "request ≈ {}, response ≈ {} (headers included), ",
                format_bytes(78.0),
                format_bytes(853.0)
            )
        );
        assert!(!size_label(true, s).contains("64 B"));
        let rr = Some(Sizes {
            request: 64,
            response: 1024,
        });
        assert_eq!(
            size_label(false, rr),
            format!("{} / {}, ", format_bytes(64.0), format_bytes(1024.0))
        );
        assert_eq!(size_label(true, None), "");
    }
}
