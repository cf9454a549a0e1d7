//! The entry point of the `capture_filter` fuzz target (`fuzz/`), also replayed on the stable
//! toolchain by this module's test: a filter expression as a user types it, through libpcap's
//! compiler and our wrapper (NUL check, link type, snap length, the loopback-copy prefix), then
//! the compiled program run on a packet as the kernel would.

use crate::filter::{FilterLink, Outgoing, Program};

/// `data`: byte 0 picks the link type (bit 0) and the loopback prefix (bits 1-2), bytes 1-2
/// the snap length (big-endian), then the expression up to the first NUL byte (or the end),
/// then the packet. A program that compiles keeps at most the snap length of any packet, and
/// its kernel form is the prefix followed by the program.
pub fn filter(data: &[u8]) {
    let [sel, s0, s1, rest @ ..] = data else {
        return;
    };
    let link = if sel & 1 == 0 {
        FilterLink::Ethernet
    } else {
        FilterLink::RawIp
    };
    let outgoing = match (sel >> 1) & 3 {
        0 => Outgoing::Keep,
        1 => Outgoing::Drop,
        _ => Outgoing::DropOn(u32::from(*s0)),
    };
    let snaplen = u32::from(u16::from_be_bytes([*s0, *s1])).max(1);
    let (expr, packet) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let expr = String::from_utf8_lossy(expr);
    let Ok(p) = Program::compile(&expr, link, snaplen) else {
        return;
    };
    let kept = p.run(packet, packet.len() as u32);
    assert!(
        kept <= snaplen,
        "kept {kept} of a snap length of {snaplen}: {expr:?}"
    );
    let k = p.for_kernel(outgoing);
    assert!(!k.is_empty() && k.len() <= u16::MAX as usize, "{expr:?}");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn seeds_replay() {
        let n = latscope_sys::fuzz_seeds::replay_prefixes("capture_filter", usize::MAX, |_, b| {
            super::filter(b)
        });
        assert!(n.unwrap() > 0);
    }
}
