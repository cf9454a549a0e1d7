//! Entry points of the cargo-fuzz targets for the server's input (`fuzz/fuzz_targets/serve_*`)
//! and for both ends of the evidence exchange (`evidence_request`), also replayed on the stable
//! toolchain by this module's tests. None may panic on any input.

use latscope_core::model::evidence::{EVIDENCE_VERSION, EvidenceRequest, ServerEvidence};

use super::ServeConfig;
use super::admission::{memory_needed, validate};
use super::evidence::MAX_REQUEST_BYTES;
use crate::flow::UdpRx;
use crate::proto::{self, ClientHello, Control, FrameReader, Start, StreamDatagram, UdpHeader};

/// The control connection's input, in the order the server reads it. The first byte picks the
/// form of the rest: even, the bytes as they come off the socket (greeting, then a frame);
/// odd, the JSON body of a test request (framed here, so the fuzzer explores the values a
/// client may send rather than the length prefix). A request that decodes goes through the
/// server's checks exactly as in `control`: `validate`, then `memory_needed` only if valid.
pub fn control(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let cfg = ServeConfig::default();
    let start = if sel & 1 == 1 {
        let mut framed = Vec::with_capacity(rest.len() + 4);
        framed.extend_from_slice(&(rest.len() as u32).to_be_bytes());
        framed.extend_from_slice(rest);
        proto::read_frame::<Start>(&mut &framed[..]).ok()
    } else {
        let mut r = rest;
        let _ = proto::read_greeting::<ClientHello>(&mut r);
        let mut fr = FrameReader::default();
        let _ = fr.poll::<Control>(&mut &rest[..]);
        proto::read_frame::<Start>(&mut r).ok()
    };
    if let Some(s) = start {
        for unix in [false, true] {
            if validate(&s, &cfg, unix).is_ok() {
                let m = memory_needed(&s);
                assert!(m > 0, "a valid test reserves memory: {s:?}");
            }
        }
    }
}

/// Datagrams on the server's UDP socket, as the UDP thread parses and accounts them: `data`
/// is a sequence of records `u8 length` + that many bytes. Each is parsed as a stream datagram
/// (whose sequence numbers go through one flow's receive accounting, as `stream_join` does) and
/// as a UDP rr header; a header must write back to what was parsed.
pub fn datagrams(data: &[u8]) {
    let mut rx = UdpRx::default();
    let mut rest = data;
    let mut fed = 0u64;
    let mut arrival = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        let (d, tail) = tail.split_at((len as usize).min(tail.len()));
        rest = tail;
        if let Some(h) = StreamDatagram::parse(d) {
            let mut buf = [0u8; proto::UDP_STREAM_HEADER_LEN];
            h.write(&mut buf);
            assert_eq!(StreamDatagram::parse(&buf), Some(h));
            if h.seq != proto::UDP_JOIN_SEQ {
                arrival = arrival.saturating_add(u64::from(len) * 1_000);
                rx.on_datagram(h.seq, d.len(), h.send_ns, arrival);
                fed += 1;
            }
        }
        if let Some(h) = UdpHeader::parse(d) {
            let mut buf = [0u8; proto::UDP_HEADER_LEN];
            h.write(&mut buf);
            assert_eq!(UdpHeader::parse(&buf), Some(h));
        }
    }
    assert!(rx.received() <= fed, "more datagrams counted than fed");
    let f = rx.figures(fed);
    assert!(f.jitter_ns.is_finite() && f.jitter_ns >= 0.0);
    assert!(f.lost <= f.sent && f.loss_pct <= 100.0);
}

/// Both ends' parsers of the evidence exchange. The first byte picks: even, the agent's input —
/// the bytes after the evidence `Start` as they come off the socket (a length-prefixed frame,
/// read with the agent's size limit) and the same bytes as a bare body, through
/// [`EvidenceRequest::parse`]; odd, an agent's answer as the client reads it: JSON that must
/// survive a round trip once it parses as [`ServerEvidence`] (a hostile agent is input too).
pub fn evidence(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        if let Ok(body) = proto::read_frame_bytes(&mut &rest[..], MAX_REQUEST_BYTES) {
            assert!(body.len() <= MAX_REQUEST_BYTES);
            evidence_request(&body);
        }
        evidence_request(rest);
    } else if let Ok(e) = serde_json::from_slice::<ServerEvidence>(rest) {
        let again = serde_json::to_vec(&e).unwrap_or_default();
        let back: Result<ServerEvidence, _> = serde_json::from_slice(&again);
        assert!(back.is_ok(), "evidence that parsed does not parse again");
    }
}

/// A request that parses names a port and this version.
fn evidence_request(body: &[u8]) {
    if let Ok(r) = EvidenceRequest::parse(body) {
        assert!(r.port != 0 && r.version == EVIDENCE_VERSION, "{r:?}");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// The committed seeds of the three targets, every truncation of each, replayed on stable.
    #[test]
    fn seeds_replay() {
        for (target, f) in [
            ("serve_control", super::control as fn(&[u8])),
            ("serve_datagram", super::datagrams),
            ("evidence_request", super::evidence),
        ] {
            let n = latscope_sys::fuzz_seeds::replay_prefixes(target, usize::MAX, |_, b| f(b));
            assert!(n.unwrap() > 0, "no seeds for {target}");
        }
    }
}
