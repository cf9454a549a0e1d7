/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The transmit path, included twice by stack.bpf.c like record.bpf.h (RD/SFX select direct
 * loads for typed pointers — tp_btf, fentry, netfilter — or bpf_probe_read_kernel() for raw_tp
 * and kprobe programs). No include guard on purpose.
 *
 * Every packet carries a cursor in lsstk_tx: the last boundary it passed and when. At the next
 * boundary the time since is added to the stage between the two — only when they are adjacent
 * (BND_x then BND_x+1), so every figure is the time between its own two boundaries and a
 * packet's stages add up to its time from the socket write to its TX completion.
 */

/* The device the packet leaves by: skb->dev from the device layer on; before it (IP output,
 * netfilter) the route's device, skb->dev not being set yet. */
static __always_inline void SFX(tx_dev)(struct sk_buff *skb, u32 bnd, u32 *ifindex, u64 *netns)
{
	if (bnd >= BND_QUEUE) {
		*ifindex = RD(skb, dev, ifindex);
		if (filter_netns)
			*netns = RD(skb, dev, nd_net.net, ns.inum);
		return;
	}
	u64 refdst = RD(skb, _skb_refdst);
	struct dst_entry *dst = (struct dst_entry *)(refdst & ~1ULL);
	if (!dst)
		return;
	*ifindex = BPF_CORE_READ(dst, dev, ifindex);
	if (filter_netns)
		*netns = BPF_CORE_READ(dst, dev, nd_net.net, ns.inum);
}

/* Whether `sk` (any socket: full, request or timewait) passes the socket filters; its cgroup
 * into *cg when it is a full socket. */
static __always_inline bool SFX(tx_sk_ok)(struct sock *sk, u64 *cg)
{
	u8 state = RD(sk, __sk_common.skc_state);
	bool full = state != TCP_TIME_WAIT && state != TCP_NEW_SYN_RECV;
	if (filter_lport && RD(sk, __sk_common.skc_num) != filter_lport)
		return false;
	if (filter_rport && bpf_ntohs(RD(sk, __sk_common.skc_dport)) != filter_rport)
		return false;
	if (filter_laddr_on || filter_raddr_on) {
		u32 la[4] = {}, ra[4] = {};
		SFX(sk_addrs)(sk, la, ra);
		if (!addr_ok(filter_laddr_on, la, filter_laddr) || !addr_ok(filter_raddr_on, ra, filter_raddr))
			return false;
	}
	if (filter_netns && RD(sk, __sk_common.skc_net.net, ns.inum) != filter_netns)
		return false;
	if (full && (filter_cgroup || group_by == GROUP_CGROUP))
		*cg = RD(sk, sk_cgrp_data.cgroup, kn, id);
	if (filter_cgroup && *cg != filter_cgroup)
		return false;
	return true;
}

/* Filters and sampling, once per packet at the first boundary latscope sees it pass; the
 * verdict and the group travel in its cursor. */
static __always_inline bool SFX(tx_select)(struct sk_buff *skb, struct sock *sk, u32 bnd, u64 *group)
{
	u64 cg = 0;
	u32 ifindex = 0;
	u64 netns = 0;
	if (sk) {
		if (!SFX(tx_sk_ok)(sk, &cg))
			return false;
		if (filter_tgid) {
			struct tx_sock *q = tx_sock_get(ADDR(sk), false);
			if (!q || q->tgid != filter_tgid)
				return false;
		}
	} else {
		/* No socket (forwarded, or sent by the kernel for no socket): the packet's own
		 * headers, the source being local on the way out. */
		if (filter_cgroup || filter_tgid)
			return false;
		if (filter_lport || filter_rport || filter_laddr_on || filter_raddr_on) {
			struct pkt p = {};
			if (SFX(parse_pkt)(skb, NH_HEADER, &p) < 0)
				return false;
			/* parse_pkt names the receive direction: its "remote" is the source. */
			if (!addr_ok(filter_laddr_on, p.raddr, filter_laddr) ||
			    !addr_ok(filter_raddr_on, p.laddr, filter_raddr))
				return false;
			if (filter_lport && p.sport != filter_lport)
				return false;
			if (filter_rport && p.dport != filter_rport)
				return false;
		}
	}
	if (filter_ifindex || group_by == GROUP_IFACE || (filter_netns && !sk)) {
		SFX(tx_dev)(skb, bnd, &ifindex, &netns);
		if (filter_ifindex && ifindex != filter_ifindex)
			return false;
		if (filter_netns && !sk && netns != filter_netns)
			return false;
	}
	if (sample_every > 1) {
		u32 key = TX_SAMPLE_KEY;
		u64 *n = bpf_map_lookup_elem(&lsstk_sample, &key);
		if (n) {
			u64 seq = *n;
			*n = seq + 1;
			if (seq % sample_every)
				return false;
		}
	}
	*group = group_by == GROUP_IFACE ? ifindex : cg;
	return true;
}

/* A write to `sk` by the current task: its transmit state (created on the first write), if the
 * socket and the writer pass the filters. */
static __always_inline struct tx_sock *SFX(tx_writer)(struct sock *sk)
{
	if (empty)
		return NULL;
	u64 cg = 0;
	if (!SFX(tx_sk_ok)(sk, &cg))
		return NULL;
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (filter_tgid && tgid != filter_tgid)
		return NULL;
	struct tx_sock *q = tx_sock_get(ADDR(sk), true);
	if (q)
		q->tgid = tgid;
	return q;
}

/* The writes of a TCP socket not yet sent: a ring of (first sequence number, time), pushed at
 * every write and consumed as segments leave for the first time. */
static __always_inline void SFX(tx_write_tcp)(struct sock *sk)
{
	struct tx_sock *q = SFX(tx_writer)(sk);
	if (!q)
		return;
	u32 ws = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	u64 head = q->head, tail = q->tail;
	if (tail > head) {
		u32 last = q->seq[(tail - 1) & (TXW_RING - 1)];
		s32 d = (s32)(ws - last);
		if (d == 0)
			return; /* nothing written since: the older stamp stands */
		if (d < 0 || d > (1 << 30)) {
			/* Not this connection's sequence space: a new socket at a recycled address. */
			q->head = tail;
			head = tail;
		}
	}
	if (tail - head >= TXW_RING) {
		/* More unsent writes than the ring holds: the oldest loses its stamp. */
		q->head = head + 1;
		stat_inc(PROBE_TCP_SENDQ, STAT_NO_STAMP);
	}
	q->seq[tail & (TXW_RING - 1)] = ws;
	q->ts[tail & (TXW_RING - 1)] = bpf_ktime_get_ns();
	q->tail = tail + 1;
}

/* A UDP datagram's clock starts at the first sendmsg() that contributes to it (corked or
 * MSG_MORE datagrams go out at the last). */
static __always_inline void SFX(tx_write_udp)(struct sock *sk)
{
	struct tx_sock *q = SFX(tx_writer)(sk);
	if (q && !q->pending_udp)
		q->pending_udp = bpf_ktime_get_ns();
}

/* The socket stage, at the start of IP output: TCP data sent for the first time is timed from
 * the write that put its first byte in the socket; a UDP datagram from its sendmsg(). */
static __always_inline void SFX(tx_sock_stage)(struct sk_buff *skb, struct sock *sk, bool keep, u64 group, u64 now)
{
	u8 state = RD(sk, __sk_common.skc_state);
	if (state == TCP_TIME_WAIT || state == TCP_NEW_SYN_RECV)
		return;
	u16 proto = RD(sk, sk_protocol);
	if (proto != IPPROTO_TCP_ && proto != IPPROTO_UDP_)
		return;
	struct tx_sock *q = tx_sock_get(ADDR(sk), false);
	if (!q)
		return;
	if (proto == IPPROTO_UDP_) {
		u64 ts = q->pending_udp;
		q->pending_udp = 0;
		if (ts && keep && (tx_mask & BIT(PROBE_UDP_SEND)) && now >= ts)
			hist_add(PROBE_UDP_SEND, group, now - ts);
		return;
	}
	/* TCP: the header's sequence number and whether the segment carries new data. */
	unsigned char *head = RD(skb, head);
	u16 th_off = RD(skb, transport_header);
	if (th_off == 0xffff)
		return;
	u8 th[16] = {};
	if (bpf_probe_read_kernel(th, sizeof(th), head + th_off) < 0)
		return;
	u32 seq = bpf_ntohl(*(u32 *)&th[4]);
	u32 doff = (th[12] >> 4) * 4;
	u32 data_off = (u32)(RD(skb, data) - head);
	u32 len = RD(skb, len);
	u32 hdrs = th_off - data_off + doff;
	if (len <= hdrs)
		return; /* no payload: an ACK, SYN or FIN, never written by the application */
	u32 snd_nxt = BPF_CORE_READ((struct tcp_sock *)sk, snd_nxt);
	if ((s32)(seq - snd_nxt) < 0)
		return; /* a retransmission: its data left once already */
	u64 h = q->head, t = q->tail;
	/* Drop the writes wholly before this segment: the write holding its first byte is the
	 * last one that starts at or before it. */
	for (int i = 0; i < 16; i++) {
		if (t - h < 2)
			break;
		u32 next = q->seq[(h + 1) & (TXW_RING - 1)];
		if ((s32)(seq - next) < 0)
			break;
		h += 1;
	}
	q->head = h;
	if (h >= t)
		return;
	u32 first = q->seq[h & (TXW_RING - 1)];
	if ((s32)(seq - first) < 0) {
		/* Written before latscope attached, or its stamp was lost to a full ring. */
		if (keep)
			stat_inc(PROBE_TCP_SENDQ, STAT_NO_STAMP);
		return;
	}
	u64 ts = q->ts[h & (TXW_RING - 1)];
	if (keep && (tx_mask & BIT(PROBE_TCP_SENDQ)) && now >= ts)
		hist_add(PROBE_TCP_SENDQ, group, now - ts);
}

/* A packet first seen at `bnd`: filters, a new cursor, and at IP output the socket stage. */
static __always_inline int SFX(tx_start)(struct sk_buff *skb, struct tx_slot *s, u64 addr, u32 bnd, u64 now)
{
	struct sock *sk = RD(skb, sk);
	u64 group = 0;
	bool keep = SFX(tx_select)(skb, sk, bnd, &group);
	s->skb = addr;
	s->ts = now;
	s->bnd = bnd;
	s->keep = keep;
	s->group = group;
	if (bnd == BND_IPOUT) {
		if (sk)
			SFX(tx_sock_stage)(skb, sk, keep, group, now);
	} else if (keep && bnd > BND_IPOUT && (tx_mask & BIT(TX_STAGE(bnd)))) {
		/* It skipped the stage's start (another namespace's netfilter, forwarded, or sent
		 * before latscope attached): not timed there. */
		stat_inc(TX_STAGE(bnd), STAT_NO_STAMP);
	}
	return 0;
}

/* Software GSO: the segments of a packet consumed just before the driver take its cursor. */
static __always_inline bool SFX(tx_inherit)(struct sk_buff *skb, struct tx_slot *s, u64 addr)
{
	u32 zero = 0;
	struct tx_handover *h = bpf_map_lookup_elem(&lsstk_txgso, &zero);
	if (!h || !h->left)
		return false;
	struct sock *sk = RD(skb, sk);
	if (!sk || ADDR(sk) != h->sk)
		return false;
	h->left -= 1;
	s->skb = addr;
	s->ts = h->ts;
	s->bnd = BND_QUEUE;
	s->keep = h->keep;
	s->group = h->group;
	return true;
}

/* skb passes boundary `bnd` (IP output … driver start). */
static __always_inline int SFX(tx_at)(struct sk_buff *skb, u32 bnd)
{
	if (empty)
		return 0;
	u64 addr = ADDR(skb);
	u32 idx = stamp_index(addr);
	struct tx_slot *s = bpf_map_lookup_elem(&lsstk_tx, &idx);
	if (!s || !addr)
		return 0;
	u64 now = bpf_ktime_get_ns();
	if (bnd == BND_IPOUT)
		return SFX(tx_start)(skb, s, addr, bnd, now);
	if (s->skb != addr && !(bnd == BND_DSTART && SFX(tx_inherit)(skb, s, addr)))
		return SFX(tx_start)(skb, s, addr, bnd, now);
	u32 prev = s->bnd;
	if (bnd == prev + 1) {
		tx_record(s, bnd, now);
	} else if (bnd == BND_QUEUE && prev == BND_DSTART) {
		/* A stacked device (VLAN, bond, bridge) hands the packet to the device below: the
		 * upper device's driver time ends here, the lower device's path begins. */
		tx_record(s, BND_DDONE, now);
	}
	s->bnd = bnd;
	s->ts = now;
	if (bnd == BND_DSTART)
		s->ifindex = RD(skb, dev, ifindex);
	return 0;
}

/* net:net_dev_xmit: the driver's ndo_start_xmit() returned `rc` for skb on `dev`. The skb may be
 * freed already (completed, or handed to a peer's receive path): only its address is used. */
static __always_inline int SFX(tx_driver_done)(struct sk_buff *skb, int rc, struct net_device *dev)
{
	if (empty)
		return 0;
	u64 addr = ADDR(skb);
	u32 idx = stamp_index(addr);
	struct tx_slot *s = bpf_map_lookup_elem(&lsstk_tx, &idx);
	if (!s || !addr || s->skb != addr || s->bnd != BND_DSTART)
		return 0;
	/* The upper device of a stacked pair returning after its lower device's transmit. */
	if (s->ifindex != RD(dev, ifindex))
		return 0;
	u64 now = bpf_ktime_get_ns();
	if (rc == NETDEV_TX_BUSY) {
		/* Requeued by the qdisc layer: its wait until the retry is another qdisc sample. */
		s->bnd = BND_QUEUE;
		s->ts = now;
		return 0;
	}
	tx_record(s, BND_DDONE, now);
	/* Loopback, veth, bridges, VLANs, tunnels (IFF_NO_QUEUE devices) hand the skb on to a
	 * receive path or another device: there is no transmit completion to time. */
	u64 flags = RD_BITFIELD(dev, priv_flags);
	if (flags & IFF_NO_QUEUE) {
		if (s->keep && (tx_mask & BIT(PROBE_TX_DONE)))
			stat_inc(PROBE_TX_DONE, STAT_HANDED_ON);
		s->skb = 0;
		return 0;
	}
	s->bnd = BND_DDONE;
	s->ts = now;
	s->head = ADDR(RD(skb, head));
	return 0;
}

/* skb:consume_skb: the skb is freed after use. After the driver: its TX completion. During the
 * driver call: the driver freed it at once. Between the qdisc and the driver: software GSO
 * replaced it by its segments, which inherit its cursor. */
static __always_inline int SFX(tx_freed)(struct sk_buff *skb)
{
	if (empty)
		return 0;
	u64 addr = ADDR(skb);
	u32 idx = stamp_index(addr);
	struct tx_slot *s = bpf_map_lookup_elem(&lsstk_tx, &idx);
	if (!s || !addr || s->skb != addr)
		return 0;
	u32 prev = s->bnd;
	s->skb = 0;
	if (prev == BND_DDONE) {
		/* A recycled sk_buff whose first life ended unseen (a drop) has another head. */
		if (s->head != ADDR(RD(skb, head)))
			return 0;
		tx_record(s, BND_FREED, bpf_ktime_get_ns());
	} else if (prev == BND_DSTART) {
		tx_record(s, BND_DDONE, bpf_ktime_get_ns());
	} else if (prev == BND_QUEUE) {
		u32 zero = 0;
		struct tx_handover *h = bpf_map_lookup_elem(&lsstk_txgso, &zero);
		if (!h)
			return 0;
		unsigned char *head = RD(skb, head);
		struct skb_shared_info *sh = (void *)(head + RD(skb, end));
		u16 segs = BPF_CORE_READ(sh, gso_segs);
		struct sock *sk = RD(skb, sk);
		h->left = sk ? segs : 0;
		h->sk = sk ? ADDR(sk) : 0;
		h->ts = s->ts;
		h->keep = s->keep;
		h->group = s->group;
	}
	return 0;
}
