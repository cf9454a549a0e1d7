//! `receive_window_limited`: the client's receive window caps a response's transfer — its
//! receive buffer (SO_RCVBUF, `tcp_rmem`) or a window without scaling lets the server put no
//! more than one window in flight per round trip, whatever the path's bandwidth.

use latscope_core::model::transfer::TransferLimits;
use latscope_core::units::{format_bitrate, format_bytes};

use super::*;

/// A transfer shorter than this many of the path's round trips says nothing of its steady
/// pace: slow start and the first windows dominate it.
pub const MIN_TRANSFER_RTTS: u64 = 4;

/// The share of the window's rate (window ÷ RTT) a transfer must reach to be paced by the
/// window. A sender can never exceed it; in slow start a transfer reaches at most about half of
/// it, because receive auto-tuning keeps the window at twice what arrives per round trip.
pub const WINDOW_PACED: f64 = 0.6;

/// Below this share of the window's rate, the client's window was open and the sender did not
/// fill it: the pace was set at the sending end (or by the path).
pub const SENDER_PACED: f64 = 0.3;

/// The share of the server's busy sending time a limit must hold it back for (tcp_info's
/// chrono counters): most of it.
pub const LIMITED_SHARE: f64 = 0.5;

/// The least limited time that counts, µs: a few of a short transfer's round trips against a
/// full window happen on every healthy path.
pub const MIN_LIMITED_US: u64 = 10_000;

/// The least a window seen by the server alone must cost a request: 1 ms. On a fast path a
/// sender waits for the window whenever the receiving application reads slower than it writes
/// (a healthy client on a veth), so tcpi_rwnd_limited alone names a window only where the time
/// it costs could not be a reader's lag.
pub const SERVER_SEEN_FLOOR_NS: u64 = 1_000_000;

/// The least a window the client's own socket shows at its ceiling, the transfer at its pace,
/// must cost: 100 µs (and, as every finding, a material share of the request). Its cause is
/// proven whatever the distance: the lab's 16 KiB `tcp_rmem` on a 37 µs path made a 256 KiB
/// page take 1.0 ms — 27 windows of 9.6 KB, 94% of the server's sending waiting for them —
/// where the 1 ms floor of the server's view called it clean.
pub const CLIENT_SEEN_FLOOR_NS: u64 = 100_000;

/// The client's view of a download: its pace against what the client's own window allows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowPace {
    /// The window the client advertised, bytes.
    pub window: u32,
    /// window ÷ path RTT, bit/s: the most any sender could put through it.
    pub allowed_bps: f64,
    /// What the response's body reached, bit/s.
    pub reached_bps: f64,
    /// The transfer took this many of the path's round trips.
    pub rtts: u64,
}

impl WindowPace {
    /// reached ÷ allowed.
    pub fn ratio(&self) -> f64 {
        self.reached_bps / self.allowed_bps
    }
}

/// The download's pace against the client's window, when the download lasted at least
/// [`MIN_TRANSFER_RTTS`] of the path's round trips and the window is known.
pub fn window_pace(e: &Evidence) -> Option<WindowPace> {
    let d = e.download?;
    let rtt = e.path.as_ref()?.p50_ns.max(1);
    let window = d.window_bytes()?;
    let rtts = d.transfer_ns / rtt;
    if rtts < MIN_TRANSFER_RTTS {
        return None;
    }
    Some(WindowPace {
        window,
        allowed_bps: f64::from(window) * 8.0 / (window_round_trip(e, rtt) as f64 / 1e9),
        reached_bps: d.rate_bps(),
        rtts,
    })
}

/// The round trip a window waits for: the path's, or the connects' when both hosts' own work
/// makes them longer by less than a millisecond. A window opens again only once the receiving
/// application has read and its ACK is back, so on a near path the hosts' per-exchange work,
/// which a connect measures (SYN, SYN-ACK, accept) and a kernel-timestamped SYN ping does not,
/// is most of it: the lab's 16 KiB `tcp_rmem` at ~0 (a 5 µs SYN ping, 45–64 µs connects)
/// moved a 9.4 KiB window every 28–49 µs, 13–18% of window ÷ the ping and "not the window's
/// pace". Beyond a millisecond the difference is the path's jitter, not the hosts' work.
fn window_round_trip(e: &Evidence, path_ns: u64) -> u64 {
    e.handshake
        .as_ref()
        .map(|h| h.p50_ns)
        .filter(|&h| h > path_ns && h - path_ns < 1_000_000)
        .unwrap_or(path_ns)
}

/// Whether the client's window could grow no further: its buffer is at `tcp_rmem`'s ceiling,
/// or the connection has no window scaling (a window then stops at 64 KiB).
pub(crate) fn window_cannot_grow(d: &Download) -> bool {
    let unscaled = d.client.is_some_and(|c| c.rcv_wscale.is_none());
    d.buffer_at_ceiling() || unscaled
}

/// The client's own instrument: the transfer ran at the pace its window allows over the path's
/// round trip, and its window could not open any wider.
fn client_sees_it(e: &Evidence) -> Option<WindowPace> {
    let pace = window_pace(e)?;
    (pace.ratio() >= WINDOW_PACED && window_cannot_grow(&e.download?)).then_some(pace)
}

/// Window-filling segments per captured exchange, on average, that show a sender held at the
/// receiver's window in every exchange: a response that needs more than a window meets its
/// edge at least once per window it waits for.
pub const WIRE_FILLS_PER_EXCHANGE: u64 = 2;

/// The wire's instrument: the client's capture saw the server fill the client's window again
/// and again (at least [`WIRE_FILLS_PER_EXCHANGE`] window-filling segments per exchange, and
/// at least eight), the window could not open wider, and the transfer lasted the round trips a
/// pace needs. What each window then waits for does not matter: on a near path it is mostly
/// both hosts' own work (the reader's wake-up, the ACK's way back), which no ping measures, so
/// the pace over the ping's round trip says nothing there — the fills do.
fn wire_sees_it(e: &Evidence) -> Option<(WindowPace, u64)> {
    let c = e.capture.as_ref()?;
    let fills = c.window_full_segments;
    let enough = c.transactions > 0
        && fills >= 8
        && fills >= WIRE_FILLS_PER_EXCHANGE.saturating_mul(c.transactions);
    let pace = window_pace(e)?;
    (enough && window_cannot_grow(&e.download?)).then_some((pace, fills))
}

/// The server's own instrument: its end of our connections spent most of its busy sending time
/// waiting for the client's window (tcpi_rwnd_limited).
fn server_sees_it(e: &Evidence) -> Option<TransferLimits> {
    let l = e.server_sockets.as_ref()?.limits?;
    (l.rwnd_limited_us >= MIN_LIMITED_US && l.share(l.rwnd_limited_us) >= LIMITED_SHARE)
        .then_some(l)
}

/// What a limit on a transfer costs a request: the download's transfer beyond what a window
/// that fits the path would leave of it — one round trip, or over a long path the round trips
/// slow start needs for the response from ten segments —, less the bottleneck's serialisation
/// when a rate above the transfer's was measured; without a download, `share` of the single
/// request's time beyond the path. Never more than the single request measured beyond the path.
pub(crate) fn transfer_cost(e: &Evidence, share: f64) -> u64 {
    let (single, path) = (
        e.single.as_ref().map_or(0, |s| s.p50_ns),
        e.path.as_ref().map_or(0, |p| p.p50_ns),
    );
    let beyond_path = single.saturating_sub(path);
    let Some(d) = e.download else {
        return (beyond_path as f64 * share) as u64;
    };
    let wire = e
        .bottleneck
        .and_then(|b| b.down)
        .filter(|r| r.rate_bps > 1.5 * d.rate_bps())
        .map_or(0, |r| r.serialise_ns(d.body_bytes));
    let mss = e
        .browser
        .as_ref()
        .and_then(|b| b.first_exchange.mss)
        .unwrap_or(1448);
    let slow_start = u64::from(crate::rounds::flights::floor_rounds(d.body_bytes, mss)) * path;
    let cost = d
        .transfer_ns
        .saturating_sub(path.max(slow_start))
        .saturating_sub(wire);
    if beyond_path > 0 {
        cost.min(beyond_path)
    } else {
        cost
    }
}

/// The client's receive window limits the transfer. Either end can show it: the client's
/// download ran at its window ÷ RTT with the window at its ceiling (its buffer at `tcp_rmem`'s
/// maximum, or no window scaling), or the server's socket spent most of its busy time with the
/// client's window full. The cause is on the client: the window, not the path's bandwidth.
pub fn receive_window_limited(e: &Evidence) -> Option<Diagnosis> {
    let wire = wire_sees_it(e);
    let client = client_sees_it(e).or(wire.map(|(p, _)| p));
    let server = server_sees_it(e);
    if client.is_none() && server.is_none() {
        return None;
    }
    let share = server.map_or(1.0, |l| l.share(l.rwnd_limited_us));
    let explains = transfer_cost(e, share);
    let floor = if client.is_some() {
        CLIENT_SEEN_FLOOR_NS
    } else {
        SERVER_SEEN_FLOOR_NS
    };
    if explains < floor {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some(d) = e.download {
        evidence.push(download_line(e, &d));
    }
    if let Some(p) = client.or_else(|| window_pace(e)) {
        let paced = if p.ratio() >= WINDOW_PACED {
            "paced by the window"
        } else {
            "each window also waited for both hosts' own work, which the round trip measured does not hold"
        };
        evidence.push(format!(
            "the client advertised a window of {}: over the path's round trip that allows {}, and the transfer reached {} ({:.0}%) — {paced}",
            format_bytes(f64::from(p.window)),
            format_bitrate(p.allowed_bps),
            format_bitrate(p.reached_bps),
            100.0 * p.ratio()
        ));
    }
    if let (Some((_, fills)), Some(c)) = (wire, e.capture.as_ref()) {
        evidence.push(format!(
            "on the wire: {} filled the client's window, {:.1} per exchange over {} (Wireshark's tcp.analysis.window_full): the server sent as far as the window let it, again and again",
            count(fills, "segment"),
            fills as f64 / c.transactions.max(1) as f64,
            count(c.transactions, "exchange")
        ));
    }
    if let Some(d) = e.download {
        evidence.push(buffer_line(&d));
    }
    if let Some(l) = server {
        evidence.push(format!(
            "the server's socket: {} of its {} busy sending waited for the client's window (tcpi_rwnd_limited, {:.0}%)",
            format_ns(l.rwnd_limited_us as f64 * 1e3),
            format_ns(l.busy_us as f64 * 1e3),
            100.0 * l.share(l.rwnd_limited_us)
        ));
    }
    if let Some(w) = e.capture.as_ref().and_then(|c| c.window_full) {
        evidence.push(format!(
            "on the wire: the server filled the client's window and waited {} ({} in all; Wireshark's tcp.analysis.window_full)",
            count(w.count, "time"),
            format_ns(w.lost_ns as f64)
        ));
    }
    Some(Diagnosis {
        rule: RuleId::ReceiveWindowLimited,
        title: "the client's receive window limits the transfer: one window per round trip, whatever the path's bandwidth".into(),
        explains_ns: explains,
        confidence: if client.is_some() && server.is_some() { 0.9 } else { 0.8 },
        side: Side::Client,
        evidence,
        fix: "let the client's window reach the path's bandwidth × RTT: raise the third value of net.ipv4.tcp_rmem on the client host (receive auto-tuning's ceiling), do not set SO_RCVBUF in the client (it turns auto-tuning off), and keep window scaling on (net.ipv4.tcp_window_scaling = 1, not stripped by a middlebox)".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}

/// "the response's 256 KiB took 430 ms to arrive (21 round trips): 4.9 Mbit/s".
pub(crate) fn download_line(e: &Evidence, d: &Download) -> String {
    let rtt = e.path.as_ref().map_or(0, |p| p.p50_ns).max(1);
    format!(
        "a response of {} took {} from its first byte to its last ({} of {}): {}",
        format_bytes(d.body_bytes as f64),
        format_ns(d.transfer_ns as f64),
        count(d.transfer_ns / rtt, "round trip"),
        format_ns(rtt as f64),
        format_bitrate(d.rate_bps())
    )
}

/// The client's buffer and window scaling, and whether auto-tuning could grow them.
fn buffer_line(d: &Download) -> String {
    let c = d.client.unwrap_or_default();
    let scale = match c.rcv_wscale {
        Some(s) => format!("window scale {s}"),
        None => "no window scaling (a window stops at 64 KiB)".into(),
    };
    let buf = c
        .rcvbuf_bytes
        .map_or("-".into(), |b| format_bytes(f64::from(b)));
    let ceiling = d
        .rmem_max
        .map_or("not read".into(), |m| format_bytes(f64::from(m)));
    let verdict = if d.buffer_at_ceiling() {
        ": auto-tuning can open the window no wider"
    } else {
        ""
    };
    format!(
        "the client's receive buffer is {buf} (net.ipv4.tcp_rmem's ceiling {ceiling}), {scale}{verdict}"
    )
}

/// The client's window was open and the transfer did not fill it, with no loss on the wire: the
/// pace was set at the sending end (its send buffer, its application's writes, its congestion
/// window). The line that says so, or `None` when the download does not show it.
pub(crate) fn sender_held_back(e: &Evidence) -> Option<String> {
    let p = window_pace(e)?;
    let lossless = e.capture.as_ref().is_some_and(|c| lost_on_wire(e, c) == 0);
    let no_bottleneck = e
        .bottleneck
        .and_then(|b| b.down)
        .is_none_or(|r| r.rate_bps > 2.0 * p.reached_bps);
    (p.ratio() < SENDER_PACED && lossless && no_bottleneck).then(|| {
        format!(
            "the response arrived at {} over {}, {:.0}% of the {} the client's open window ({}) allows, with no loss on the wire and no slower link measured: the server held it back (its send buffer, its application's writes or its congestion window, which only its host can tell apart)",
            format_bitrate(p.reached_bps),
            count(p.rtts, "round trip"),
            100.0 * p.ratio(),
            format_bitrate(p.allowed_bps),
            format_bytes(f64::from(p.window))
        )
    })
}

/// Whether the measured bottleneck is the pace a window or buffer set: the slowest measured rate
/// is no more than twice the rate the download reached (a link faster than that would have
/// let the transfer go faster, had the window allowed it). Without a download, a rate measured
/// from the responses themselves (their trains or delivery) is theirs; a bulk transfer's, or
/// what many requests carried at once, is the path's.
pub(crate) fn limit_paces_bottleneck(e: &Evidence) -> bool {
    let Some(b) = e.bottleneck else {
        return false;
    };
    match (e.download, b.slowest_bps()) {
        (Some(d), Some(r)) => d.rate_bps() > 0.0 && r <= 2.0 * d.rate_bps(),
        _ => [b.up, b.down].iter().flatten().all(|r| {
            !matches!(
                r.source,
                RateSource::BulkTransfer | RateSource::Carried { .. }
            )
        }),
    }
}
