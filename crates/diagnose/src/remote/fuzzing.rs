//! Entry point of the cargo-fuzz target `evidence_request` (`fuzz/fuzz_targets/`), also
//! replayed on the stable toolchain by this module's test. It may not panic on any input.

use latscope_net::proto;
use latscope_net::serve::evidence::MAX_REQUEST_BYTES;

use super::{EvidenceRequest, ServerEvidence};

/// Both ends' parsers of the exchange. The first byte picks: even, the agent's input — the
/// bytes after the evidence `Start` as they come off the socket (a length-prefixed frame, read
/// with the agent's size limit) and the same bytes as a bare body, through
/// [`EvidenceRequest::parse`]; odd, an agent's answer as the client reads it: JSON that must
/// survive a round trip once it parses as [`ServerEvidence`] (a hostile agent is input too).
pub fn evidence(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        if let Ok(body) = proto::read_frame_bytes(&mut &rest[..], MAX_REQUEST_BYTES) {
            assert!(body.len() <= MAX_REQUEST_BYTES);
            check(&body);
        }
        check(rest);
    } else if let Ok(e) = serde_json::from_slice::<ServerEvidence>(rest) {
        let again = serde_json::to_vec(&e).unwrap_or_default();
        let back: Result<ServerEvidence, _> = serde_json::from_slice(&again);
        assert!(back.is_ok(), "evidence that parsed does not parse again");
    }
}

/// A request that parses names a port and this version.
fn check(body: &[u8]) {
    if let Ok(r) = EvidenceRequest::parse(body) {
        assert!(r.port != 0 && r.version == super::EVIDENCE_VERSION, "{r:?}");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// The committed seeds, every truncation of each, replayed on stable.
    #[test]
    fn seeds_replay() {
        let n =
            latscope_sys::fuzz_seeds::replay_prefixes("evidence_request", usize::MAX, |_, b| {
                super::evidence(b)
            });
        assert!(n.unwrap() > 0, "no seeds for evidence_request");
    }
}
