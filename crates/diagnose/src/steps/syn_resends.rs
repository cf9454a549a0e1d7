//! SYNs and SYN-ACKs sent again, from the capture: the handshakes' own losses. The stall
//! detectors of `latscope analyze` count them with the data's retransmissions (as tshark does);
//! diagnose separates them, because a dropped SYN costs a connection set-up (slow_handshake),
//! not the requests of an open connection (retransmissions).

use std::collections::HashMap;

use latscope_wire::packet::{Addr, Decoded, Transport, flags};

use crate::evidence::StallTotal;

/// Handshakes tracked at once; past it the table starts afresh (a capture of one diagnose step
/// opens a few hundred connections: this only bounds a hostile or unexpected flood).
const MAX_TRACKED: usize = 16_384;
/// A SYN seen again sooner than this is the same packet captured twice (on two interfaces),
/// not a resend: the first SYN retransmission timeout is 1 s (TCP_TIMEOUT_INIT), and even a
/// tuned route's RTO stays far above this.
const SAME_PACKET_NS: u64 = 1_000_000;

/// One direction's handshake segment: who sent it, to whom, and its sequence number.
type Key = (Addr, u16, Addr, u16, u32);

/// When each SYN (or SYN-ACK) was last sent, and the resends' total.
#[derive(Debug, Default)]
pub struct SynResends {
    last_sent: HashMap<Key, u64>,
    total: StallTotal,
}

impl SynResends {
    /// One captured frame at `ts_ns`.
    pub fn push(&mut self, ts_ns: u64, d: &Decoded<'_>) {
        let Transport::Tcp { tcp, .. } = d.transport else {
            return;
        };
        if tcp.flags() & flags::SYN == 0 {
            return;
        }
        let key = (d.src, tcp.src_port(), d.dst, tcp.dst_port(), tcp.seq());
        if self.last_sent.len() >= MAX_TRACKED && !self.last_sent.contains_key(&key) {
            self.last_sent.clear();
        }
        let Some(last) = self.last_sent.get_mut(&key) else {
            self.last_sent.insert(key, ts_ns);
            return;
        };
        let waited = ts_ns.saturating_sub(*last);
        if waited < SAME_PACKET_NS {
            return;
        }
        // The wait since the previous transmission: a second resend adds only its own, so the
        // total never exceeds the capture's span.
        self.total.count += 1;
        self.total.lost_ns += waited;
        *last = ts_ns;
    }

    /// The resends and the time they lost (`None`: none).
    pub fn total(&self) -> Option<StallTotal> {
        (self.total.count > 0).then_some(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP frame with `flags` and `seq` from 10.0.0.1:`sport` to
    /// 10.0.0.2:7373.
    fn frame(sport: u16, flags: u8, seq: u32) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&40u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let tcp = &mut f[34..54];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&7373u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
        f
    }

    fn push(r: &mut SynResends, ts_ms: u64, f: &[u8]) {
        let d = latscope_wire::decode(latscope_wire::packet::LinkType::Ethernet, f).unwrap();
        r.push(ts_ms * 1_000_000, &d);
    }

    #[test]
    fn resent_syns_are_counted_once_per_wait() {
        let mut r = SynResends::default();
        let syn = frame(40000, flags::SYN, 1000);
        push(&mut r, 0, &syn);
        // The same packet on a second interface, 0.02 ms later: not a resend.
        let d = latscope_wire::decode(latscope_wire::packet::LinkType::Ethernet, &syn).unwrap();
        r.push(20_000, &d);
        assert_eq!(r.total(), None);
        push(&mut r, 1_000, &syn);
        push(&mut r, 3_000, &syn);
        // Another connection's SYN, and data: not resends.
        push(&mut r, 3_100, &frame(40001, flags::SYN, 7));
        push(&mut r, 3_200, &frame(40000, flags::ACK | flags::PSH, 1001));
        push(&mut r, 3_300, &frame(40000, flags::ACK | flags::PSH, 1001));
        let t = r.total().expect("two resends");
        assert_eq!(t.count, 2);
        assert_eq!(
            t.lost_ns, 3_000_000_000,
            "1 s then 2 s, never counted twice"
        );
    }
}
