//! `send_buffer_limited`: the server's send buffer (SO_SNDBUF) caps a response's transfer — it
//! holds less than the path's bandwidth × RTT, so the server can have no more than the buffer
//! in flight per round trip, while its congestion window and the client's window allow more.
//!
//! Only the server's own socket shows it (tcp_info's tcpi_sndbuf_limited): from the client, a
//! small send buffer, an application that writes slowly and a congestion window that does not
//! grow look alike — the download shows that the server held the data back
//! ([`sender_held_back`], said by [`unexplained`]), never which of them.

use latscope_core::units::format_bytes;

use crate::rounds::flights::plateau;

use super::*;

/// The share of the server's busy sending time the send buffer must hold it back for: a tenth,
/// as `latscope sockets` warns of a socket ("sndbuf-limited"). A small buffer's own waits are
/// a minor part of the busy time — TCP still fills one GSO-sized buffer past the limit, and the
/// time from the buffer emptying to the application's next write counts as merely busy: the
/// lab's 8 KiB buffer on a 20 ms round trip showed 24–42% while it made a 1 MiB page take 2.6×
/// as long. What tells it from a network-limited sender is the buffer against the congestion
/// window ([`send_buffer_limited`]), not this share.
pub const SNDBUF_SHARE: f64 = 0.1;

/// The server's send buffer limits a transfer, as its own socket says ([`seen_by_server`]) or,
/// from the client alone over a long path, as the response's flights show it
/// ([`seen_by_client`]).
pub fn send_buffer_limited(e: &Evidence) -> Option<Diagnosis> {
    seen_by_server(e).or_else(|| seen_by_client(e))
}

/// The server's socket says its send buffer held it back for a material part of its busy
/// time, more than the client's window did, and the buffer is smaller than the congestion
/// window (the network would let more in flight than the buffer holds). A network-limited
/// sender also finds its buffer full while it waits for ACKs, but auto-tuning keeps that
/// buffer at twice the congestion window: there the network is the limit, not the buffer.
fn seen_by_server(e: &Evidence) -> Option<Diagnosis> {
    let ss = e.server_sockets.as_ref()?;
    let l = ss.limits?;
    let share = l.share(l.sndbuf_limited_us);
    if l.sndbuf_limited_us < MIN_LIMITED_US
        || share < SNDBUF_SHARE
        || l.sndbuf_limited_us < l.rwnd_limited_us
    {
        return None;
    }
    let buffer_smaller = match (l.sndbuf_bytes, ss.cwnd_bytes) {
        (Some(b), Some(c)) => u64::from(b) < c,
        // Without both figures, only a buffer that held the sender back most of the time.
        _ => share >= LIMITED_SHARE,
    };
    if !buffer_smaller {
        return None;
    }
    let explains = transfer_cost(e, share);
    if explains < 1_000_000 {
        return None;
    }
    let mut evidence = vec![format!(
        "{}'s socket: {} of its {} busy sending waited for room in its send buffer (tcpi_sndbuf_limited, {:.0}%), {} for the client's window",
        ss.process,
        format_ns(l.sndbuf_limited_us as f64 * 1e3),
        format_ns(l.busy_us as f64 * 1e3),
        100.0 * share,
        format_ns(l.rwnd_limited_us as f64 * 1e3)
    )];
    if let (Some(b), Some(c)) = (l.sndbuf_bytes, ss.cwnd_bytes) {
        evidence.push(format!(
            "its send buffer is {} (SO_SNDBUF as the kernel reports it, twice what was set), less than its congestion window of {}: the network would take more in flight than the buffer holds",
            format_bytes(f64::from(b)),
            format_bytes(c as f64)
        ));
    }
    if let Some(d) = e.download {
        evidence.push(download_line(e, &d));
    }
    if let Some(p) = window_pace(e) {
        evidence.push(format!(
            "the client's window ({}) allows {} over the path's round trip: it was not the limit",
            format_bytes(f64::from(p.window)),
            latscope_core::units::format_bitrate(p.allowed_bps)
        ));
    }
    Some(Diagnosis {
        rule: RuleId::SendBufferLimited,
        title: "the server's send buffer limits the transfer: it holds less than the path carries per round trip".into(),
        explains_ns: explains,
        confidence: 0.8,
        side: Side::Server,
        evidence,
        fix: FIX.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// From the client alone: the browser's first response arrived in flights of one size round
/// after round ([`plateau`]), at most half the window the client advertised, with a pause
/// between flights (a link that set the pace would leave none): the sender kept a fixed amount
/// in flight per round trip whatever the window and the path allowed. A congestion window grows
/// round by round instead, even after a loss. What a buffer costs is the round trips beyond
/// those slow start needs from ten segments. A send buffer and an application that writes that
/// much per round trip look alike from here: the confidence is lower, and the evidence says
/// which host can tell them apart.
///
/// The first response on a new connection is read first; where its flights show no plateau
/// (slow start's own growth can hide a buffer of about its size, and one round more or less
/// decides it), the next response on the same connection is read: its congestion window has
/// grown, so a fixed amount per round trip there is the buffer's (the lab's 16 KiB buffer at
/// 20 ms: a plateau in one run of three from the first response, in all three from the next).
///
/// Neither end's own instrument may contradict it: where the server's socket was read, its
/// counters decide ([`seen_by_server`]; a server 0% send-buffer-limited and 57% waiting for the
/// client's window is no send buffer) — unless they are silent ([`server_counters_silent`]:
/// neither limit held the sender while its buffer is smaller than its congestion window, which
/// contradicts nothing); and where the client's own window could grow no further
/// (its buffer at `tcp_rmem`'s ceiling, or no window scaling), a fixed amount per round trip may
/// be that window — the one read after the response is fully open, not what a full buffer's
/// overhead left of it while the flights arrived (the lab's 16 KiB `tcp_rmem`: flights of
/// 2.8 KiB under a window read as 7.9 KiB).
fn seen_by_client(e: &Evidence) -> Option<Diagnosis> {
    let silent = server_counters_silent(e);
    if (silent.is_none()
        && e.server_sockets
            .as_ref()
            .is_some_and(|ss| ss.limits.is_some()))
        || e.download.is_some_and(|d| window_cannot_grow(&d))
    {
        return None;
    }
    let (p, rtt) = browser(e)?;
    let limited = |x: &'_ crate::rounds::probe::Exchanged| {
        let flat = plateau(&x.flights, x.mss?)?;
        let window = x.window?;
        (flat.bytes.saturating_mul(2) <= u64::from(window)).then_some((flat, window))
    };
    let (x, (flat, window), which) = match limited(&p.first_exchange) {
        Some(f) => (&p.first_exchange, f, "a new connection's response"),
        None => {
            let next = p.next.as_ref()?;
            (
                next,
                limited(next)?,
                "the next response on the same connection",
            )
        }
    };
    if link_paced(e, x) {
        return None;
    }
    let floor = x.floor_rounds();
    let explains = x.rounds_saving(floor, rtt);
    if explains < PHASE_FLOOR_NS {
        return None;
    }
    let mut evidence = vec![
        format!(
            "{which} of {} took {} of {} after its first flight; then {} flights in a row of about {} each, a pause between them",
            format_bytes(x.wire_bytes as f64),
            count(u64::from(x.further_rounds()), "round trip"),
            format_ns(rtt as f64),
            flat.rounds,
            format_bytes(flat.bytes as f64)
        ),
        format!(
            "the client advertised a window of {}, more than twice that: the window was not the limit, and the pauses say the link was not either",
            format_bytes(f64::from(window))
        ),
        format!(
            "from ten segments, doubling, the response would need {}: {} lost",
            count(u64::from(floor), "round trip"),
            format_ns(explains as f64)
        ),
    ];
    evidence.push(match &silent {
        Some(line) => line.clone(),
        None => format!(
            "the server's socket is not visible from here: a send buffer and an application that writes {} per round trip look alike from the client; the server's host (or `--server-agent`) tells them apart (tcpi_sndbuf_limited)",
            format_bytes(flat.bytes as f64)
        ),
    });
    Some(Diagnosis {
        rule: RuleId::SendBufferLimited,
        title: "the server's send buffer limits the transfer: it holds less than the path carries per round trip".into(),
        explains_ns: explains,
        confidence: if silent.is_some() { 0.7 } else { 0.6 },
        side: Side::Server,
        evidence,
        fix: FIX.into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// Whether the client's capture saw the responses paced by a link, not sent in bursts a round
/// trip apart: it rated their delivery ([`RateSource::Delivery`], which refuses a transfer whose
/// arrivals the round trip clocks), and the response's bytes at that rate take three quarters
/// of its transfer or more. A buffer holds the sender to a burst per round trip, with the link
/// idle in between; a link (or a shaper) that takes the whole transfer to serialise the
/// response is what limited it, and the flights' pauses are the reader's wake-ups between
/// chunks of an even stream (the lab's held-back 20 Mbit/s tbf 10 ms away, from the client
/// alone: "21 flights of 11.3 KiB" in a 512 KiB page delivered at 20.5 Mbit/s, 206 ms of its
/// 218 ms request — named a send buffer in 3 runs of 3).
fn link_paced(e: &Evidence, x: &crate::rounds::probe::Exchanged) -> bool {
    let Some(r) = e.bottleneck.and_then(|b| b.down) else {
        return false;
    };
    if !matches!(r.source, RateSource::Delivery { .. }) || r.rate_bps <= 0.0 {
        return false;
    }
    r.serialise_ns(x.wire_bytes).saturating_mul(4) >= x.transfer_ns.saturating_mul(3)
}

/// Where the server's socket was read and its counters name no limit — neither its send buffer
/// nor the client's window held it back for a tenth of its busy time ([`SNDBUF_SHARE`]) — while
/// its send buffer is smaller than its congestion window, so that the buffer caps what it can
/// have in flight: the line that says so, for the evidence. The kernel's count of send-buffer
/// waits misses a small buffer's (its own comment above): the lab's nginx with `sndbuf=4k` 20 ms
/// away read 0% of 300 ms busy in one run of three and 17% in the next two, the same 8 KiB
/// buffer under a congestion window of 154 KiB and a 1 MiB page 23 round trips long in each,
/// and the run that read 0% said "no latency problem found" for a 476 ms request. Counters
/// that name a limit, or a buffer that holds the window, decide instead (`None`).
fn server_counters_silent(e: &Evidence) -> Option<String> {
    let ss = e.server_sockets.as_ref()?;
    let l = ss.limits?;
    let (buffer, cwnd) = (l.sndbuf_bytes?, ss.cwnd_bytes?);
    let quiet = |us: u64| us < MIN_LIMITED_US || l.share(us) < SNDBUF_SHARE;
    (quiet(l.sndbuf_limited_us) && quiet(l.rwnd_limited_us) && u64::from(buffer) < cwnd).then(|| {
        format!(
            "{}'s socket: its send buffer ({}) is smaller than its congestion window ({}), and its counters named no limit over {} busy sending ({:.0}% send-buffer-limited, {:.0}% waiting for the client's window; the kernel counts few of a small buffer's waits): the flights decide",
            ss.process,
            format_bytes(f64::from(buffer)),
            format_bytes(cwnd as f64),
            format_ns(l.busy_us as f64 * 1e3),
            100.0 * l.share(l.sndbuf_limited_us),
            100.0 * l.share(l.rwnd_limited_us)
        )
    })
}

/// What to change for a send buffer that is too small.
const FIX: &str = "let the server's send buffer reach the path's bandwidth × RTT: do not set SO_SNDBUF that small (nginx `listen … sndbuf=`, setsockopt in the application; setting it turns auto-tuning off), or raise the third value of net.ipv4.tcp_wmem on the server host";
