//! What a sender's IPv4 identification says about packets the capture did not see. Linux
//! gives each connected socket its own counter for DF packets (`ip_select_ident_segs()`:
//! `inet_sk(sk)->inet_id += segs`, before netfilter's OUTPUT hook, so a packet dropped on its
//! way out still used its number); other stacks use one counter for the host, random numbers
//! or zero, and IPv6 has no identification. Only a counter seen stepping by one packet at a time
//! on this connection shows what was sent between two captured packets.

/// Steps that must agree before the identification is taken for this connection's counter.
const PROOF_STEPS: u32 = 4;
/// The most packets taken for sent unseen between two captured ones: a larger jump is a
/// counter shared with other traffic, not a few lost segments.
const MAX_UNSEEN: u16 = 64;

/// What the identification of a packet says about the packets before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdEvidence {
    /// The sender's identification does not count its packets on this connection (zero,
    /// random, shared with other traffic, or IPv6), or it is not proven yet.
    Uncounted,
    /// Nothing was sent between this sender's previous captured packet and this one.
    Continuous,
    /// This many packets were sent between them that the capture did not see.
    Unseen(u16),
}

/// One sender's IPv4 identification on one connection.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct IpIdCounter {
    last: Option<u16>,
    /// Steps of exactly the packets captured (one per segment sent).
    steps: u32,
    /// Other steps (small gaps included).
    other: u32,
}

impl IpIdCounter {
    /// A packet with identification `id` that `segs` segments' worth of numbers after the
    /// previous packet would follow (more than one for a frame a TSO/GRO engine made of
    /// several segments). Copies of one packet are not passed here.
    pub(super) fn on_packet(&mut self, id: Option<u16>, segs: u16) -> IdEvidence {
        let Some(id) = id else {
            return IdEvidence::Uncounted;
        };
        let Some(last) = self.last.replace(id) else {
            return IdEvidence::Uncounted;
        };
        let step = id.wrapping_sub(last);
        let expected = segs.max(1);
        // One step in eight may be a gap (segments lost before the capture, or not captured);
        // a counter shared with other traffic or random numbers jump far more often.
        let counted = self.steps >= PROOF_STEPS
            && self.other.saturating_mul(8) <= self.steps.saturating_add(8);
        if id == 0 || step == 0 {
            // A stack that leaves DF packets' identification at zero counts nothing.
            self.other += 1;
            return IdEvidence::Uncounted;
        }
        if step == expected {
            self.steps += 1;
            return if counted {
                IdEvidence::Continuous
            } else {
                IdEvidence::Uncounted
            };
        }
        self.other += 1;
        match step.checked_sub(expected) {
            Some(n) if counted && n <= MAX_UNSEEN => IdEvidence::Unseen(n),
            _ => IdEvidence::Uncounted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_shows_gaps_only_once_proven() {
        let mut c = IpIdCounter::default();
        for id in 10..15 {
            c.on_packet(Some(id), 1);
        }
        assert_eq!(c.on_packet(Some(15), 1), IdEvidence::Continuous);
        assert_eq!(c.on_packet(Some(17), 1), IdEvidence::Unseen(1));
        // A TSO frame of three segments is followed three numbers on.
        assert_eq!(c.on_packet(Some(18), 1), IdEvidence::Continuous);
        assert_eq!(c.on_packet(Some(21), 3), IdEvidence::Continuous);
        // A host-wide counter jumps by other traffic's packets.
        assert_eq!(c.on_packet(Some(900), 1), IdEvidence::Uncounted);
    }

    #[test]
    fn zero_random_and_missing_identifications_count_nothing() {
        let mut c = IpIdCounter::default();
        for _ in 0..10 {
            assert_eq!(c.on_packet(Some(0), 1), IdEvidence::Uncounted);
        }
        let mut c = IpIdCounter::default();
        for id in [0x1234, 0x9f00, 0x0c11, 0x5555, 0xe001, 0x7777, 0x7779] {
            assert_eq!(c.on_packet(Some(id), 1), IdEvidence::Uncounted);
        }
        assert_eq!(
            IpIdCounter::default().on_packet(None, 1),
            IdEvidence::Uncounted
        );
    }
}
