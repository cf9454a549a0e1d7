//! `send_buffer_limited`: the server's send buffer (SO_SNDBUF) caps a response's transfer — it
//! holds less than the path's bandwidth × RTT, so the server can have no more than the buffer
//! in flight per round trip, while its congestion window and the client's window allow more.
//!
//! Only the server's own socket shows it (tcp_info's tcpi_sndbuf_limited): from the client, a
//! small send buffer, an application that writes slowly and a congestion window that does not
//! grow look alike — the download shows that the server held the data back
//! ([`sender_held_back`], said by [`unexplained`]), never which of them.

use latscope_core::units::format_bytes;

use super::*;

/// The share of the server's busy sending time the send buffer must hold it back for: a tenth,
/// as `latscope sockets` warns of a socket ("sndbuf-limited"). A small buffer's own waits are
/// a minor part of the busy time — TCP still fills one GSO-sized buffer past the limit, and the
/// time from the buffer emptying to the application's next write counts as merely busy: the
/// lab's 8 KiB buffer on a 20 ms round trip showed 24–42% while it made a 1 MiB page take 2.6×
/// as long. What tells it from a network-limited sender is the buffer against the congestion
/// window ([`send_buffer_limited`]), not this share.
pub const SNDBUF_SHARE: f64 = 0.1;

/// The server's socket says its send buffer held it back for a material part of its busy
/// time, more than the client's window did, and the buffer is smaller than the congestion
/// window (the network would let more in flight than the buffer holds). A network-limited
/// sender also finds its buffer full while it waits for ACKs, but auto-tuning keeps that
/// buffer at twice the congestion window: there the network is the limit, not the buffer.
pub fn send_buffer_limited(e: &Evidence) -> Option<Diagnosis> {
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
        fix: "let the server's send buffer reach the path's bandwidth × RTT: do not set SO_SNDBUF that small (nginx `listen … sndbuf=`, setsockopt in the application; setting it turns auto-tuning off), or raise the third value of net.ipv4.tcp_wmem on the server host".into(),
        caused_by: None,
        causes: Vec::new(),
    })
}
