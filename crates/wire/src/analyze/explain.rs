//! The plain-language reasoning behind each stall kind, shown with its finding.

use crate::report::StallKind;

/// The plain-language reasoning behind each detector.
pub fn explain(k: StallKind) -> String {
    match k {
        StallKind::NagleDelayedAck => "The sender wrote a response in pieces; Nagle held the second small piece until the first was \
ACKed, and the receiver delayed that ACK (Linux: 40 ms minimum, up to 200 ms). The first exchange of a connection escapes \
because the receiver starts in quick-ack mode; later ones stall once it switches to delayed ACKs. Fix: write the response in \
one call (writev), or set TCP_NODELAY on the sender; TCP_QUICKACK on the receiver only helps per read."
            .into(),
        StallKind::DelayedAck => "The sender waited for a delayed ACK with full-sized segments outstanding (congestion or receive \
window limit), so Nagle was not the cause. Larger windows or TCP_QUICKACK on the receiver avoid it."
            .into(),
        StallKind::Cork => "A small segment left ~200 ms after the previous data without any packet from the peer: the TCP_CORK \
timer flushed it. Uncork (setsockopt TCP_CORK 0) after the last write, or use MSG_MORE only on non-final writes."
            .into(),
        StallKind::RtoRetransmission => "A segment was resent after a timer (RTO or tail-loss probe) rather than after duplicate \
ACKs: the loss was only repaired after waiting. Look for loss on the path, or too few segments in flight for fast retransmit."
            .into(),
        StallKind::ZeroWindow => "The receiver's buffer was full (window 0) and the sender waited until it reopened: the \
receiving application did not read fast enough."
            .into(),
        StallKind::ThinkTime => "The server took this long to start answering after the request arrived (network round trip \
from the capture point already subtracted): time spent in the application, not the network."
            .into(),
        StallKind::CwndLimited => "The sender had a full window in flight, stopped, and its next segments left only as the \
ACKs for that window reached it, one round trip later: its congestion window, not the application or a timer, set the pace. \
On a long path each window costs a whole round trip. A larger initial window, a congestion control that grows faster \
(BBR), fewer round trips per transfer (connection reuse, larger responses) or a shorter path help."
            .into(),
        StallKind::SynRetransmission => "A SYN (or SYN-ACK) got no answer and was sent again after the handshake's \
retransmission timeout (Linux: 1 s, then 2 s, 4 s ...): the connection set-up waited that long before any request could \
leave. A full accept queue drops SYNs this way (nstat ListenOverflows/ListenDrops on the server: raise the listen backlog, \
net.core.somaxconn, or accept faster); otherwise a filter, a SYN-flood guard or loss on the path."
            .into(),
        StallKind::ReceiveWindowFull => "The sender filled the receiver's advertised window (Wireshark: window full) and had to \
wait for the receiver to ACK and open it again: the receiver's buffer limited the transfer, not the path or the sender. \
Raise the receiver's buffer (SO_RCVBUF, or net.ipv4.tcp_rmem's maximum), keep window scaling on, and read faster."
            .into(),
        StallKind::PmtuBlackHole => "Full-size segments were resent again and again and never acknowledged while smaller ones \
from the same sender got through: a link on the path has a smaller MTU and the ICMP \"fragmentation needed\" (IPv6: \
\"packet too big\") that should tell the sender is filtered. Let that ICMP through, clamp the MSS on the router \
(iptables -t mangle ... TCPMSS --clamp-mss-to-pmtu), or enable net.ipv4.tcp_mtu_probing=1 on the sender."
            .into(),
        StallKind::UnseenLoss => "The sender stopped with less in flight than it had already sent at once on this connection \
and room in the receiver's window, and went on only when the receiver's (delayed) ACK reached it. Neither window held \
it back, Nagle holds no full segment and an application writes on its own clock, not the ACK's: what it \
sent was lost before the capture point, and TCP sent it again on the next ACK or its timer without the capture seeing a \
retransmission (a drop in the sender's own netfilter OUTPUT path or a policer fails the send locally; a tail lost on the \
path is resent unseen). Look for drops on the sender's host (nstat IpOutRequests vs IpOutTransmits, nft/iptables \
counters, tc -s qdisc) and along the path towards the receiver."
            .into(),
    }
}
