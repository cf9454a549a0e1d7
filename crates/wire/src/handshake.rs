//! Resent SYNs and SYN-ACKs: the handshakes' own losses. A dropped SYN (a full accept queue,
//! a filter, loss) costs a connection set-up its first retransmission timeout — 1 s on Linux
//! (`TCP_TIMEOUT_INIT`, RFC 6298 §2.1), doubling each time — not the requests of an open
//! connection, so the wire analyzer reports it apart from data retransmissions: the set-up
//! detector (`analyze/detect/syn_wait.rs`) charges the resends that kept a set-up waiting and
//! totals them in `latscope_core::model::analyze::HandshakeResends`.

/// A SYN seen again with the same IPv4 identification, or sooner than this, is the same packet
/// captured twice (on two interfaces or VLANs, or on both sides of a router), not a resend:
/// the first SYN retransmission timeout is 1 s, and even a tuned route's RTO
/// (`ip route ... rto_min`) stays far above this.
pub const SAME_PACKET_NS: u64 = 1_000_000;
