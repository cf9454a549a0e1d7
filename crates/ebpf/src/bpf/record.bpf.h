/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Included twice by stack.bpf.c: RD/RD_BITFIELD/CUR_NETNS/SFX select direct loads (typed
 * pointers: tp_btf, fentry, cgroup_skb via bpf_cast_to_kern_ctx) or bpf_probe_read_kernel()
 * (raw_tp). No include guard on purpose.
 */

/* skb->tstamp if it is a CLOCK_REALTIME receive stamp, else 0. */
static __always_inline u64 SFX(skb_rx_tstamp)(struct sk_buff *skb)
{
	u64 ts = RD(skb, tstamp);
	if (!ts)
		return 0;
	if (bpf_core_field_exists(skb->tstamp_type)) {
		if (RD_BITFIELD(skb, tstamp_type) != 0)
			return 0; /* a monotonic/TAI delivery time (EDT), not a receive stamp */
	} else {
		struct sk_buff___old *old = (void *)skb;
		if (bpf_core_field_exists(old->mono_delivery_time) && RD_BITFIELD(old, mono_delivery_time))
			return 0;
	}
	return ts;
}

/* Protocol and ports from the packet itself (hooks without a socket). */
static __always_inline int SFX(parse_pkt)(struct sk_buff *skb, int nh_mode, struct pkt *p)
{
	u16 eth = bpf_ntohs(RD(skb, protocol));
	unsigned char *nh;
	if (nh_mode == NH_DATA)
		nh = RD(skb, data);
	else
		nh = RD(skb, head) + RD(skb, network_header);
	u32 l4off;
	if (eth == ETH_P_IP) {
		u8 vihl = 0;
		bpf_probe_read_kernel(&vihl, 1, nh);
		if ((vihl >> 4) != 4)
			return -1;
		bpf_probe_read_kernel(&p->proto, 1, nh + 9);
		l4off = (vihl & 0xF) * 4;
	} else if (eth == ETH_P_IPV6) {
		bpf_probe_read_kernel(&p->proto, 1, nh + 6);
		l4off = 40; /* extension headers are not followed: ports read as 0 then */
	} else {
		return -1;
	}
	if (filter_laddr_on || filter_raddr_on) {
		if (eth == ETH_P_IP) {
			u32 sd[2] = {};
			bpf_probe_read_kernel(sd, sizeof(sd), nh + 12);
			v4_mapped(p->raddr, sd[0]);
			v4_mapped(p->laddr, sd[1]);
		} else {
			bpf_probe_read_kernel(p->raddr, 16, nh + 8);
			bpf_probe_read_kernel(p->laddr, 16, nh + 24);
		}
	}
	p->sport = 0;
	p->dport = 0;
	if ((filter_lport || filter_rport) && (p->proto == IPPROTO_TCP_ || p->proto == IPPROTO_UDP_)) {
		u16 ports[2] = {};
		bpf_probe_read_kernel(ports, sizeof(ports), nh + (l4off & 0x3c));
		p->sport = bpf_ntohs(ports[0]);
		p->dport = bpf_ntohs(ports[1]);
	}
	return 0;
}

/* The socket's local and remote addresses (v4-mapped for IPv4 sockets). */
static __always_inline void SFX(sk_addrs)(struct sock *sk, u32 *la, u32 *ra)
{
	if (RD(sk, __sk_common.skc_family) == AF_INET6_) {
		la[0] = RD(sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[0]);
		la[1] = RD(sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[1]);
		la[2] = RD(sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[2]);
		la[3] = RD(sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32[3]);
		ra[0] = RD(sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32[0]);
		ra[1] = RD(sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32[1]);
		ra[2] = RD(sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32[2]);
		ra[3] = RD(sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32[3]);
	} else {
		v4_mapped(la, RD(sk, __sk_common.skc_rcv_saddr));
		v4_mapped(ra, RD(sk, __sk_common.skc_daddr));
	}
}

/*
 * Record one sample for `probe`. `want` is the L4 protocol the probe is about (PROTO_ANY for
 * ip-start). `sk` may be NULL. `pre_ts` is a stamp the hook got elsewhere (tcp_recv_timestamp,
 * the UDP FIFO), 0 to use the skb's.
 */
static __always_inline int SFX(record_at)(u32 probe, struct sk_buff *skb, struct sock *sk, int nh_mode,
					  int ctx_kind, u8 want, u64 pre_ts, u64 now_ts)
{
	if (empty)
		return 0;
	/* A queued/read TCP skb is owned by its socket (skb_set_owner_r()); UDP leaves skb->sk NULL
	 * and reuses skb->dev as dev_scratch, so skb->dev is not trusted in task context. */
	if (!sk && skb && ctx_kind == CTX_TASK)
		sk = RD(skb, sk);

	u16 lport = 0, rport = 0;
	bool by_addr = filter_laddr_on || filter_raddr_on;
	/* Neither socket nor packet: no address to filter on (tested in the branch below, not as
	 * `!sk && !skb` up here, which clang folds into `(sk | skb) == 0` — pointer arithmetic the
	 * verifier refuses on fentry/tp_btf programs, where both are typed pointers). */
	if (sk) {
		if (want != PROTO_ANY && RD(sk, sk_protocol) != want)
			return 0;
		if (filter_lport || filter_rport) {
			lport = RD(sk, __sk_common.skc_num);
			rport = bpf_ntohs(RD(sk, __sk_common.skc_dport));
		}
		if (by_addr) {
			u32 la[4] = {}, ra[4] = {};
			SFX(sk_addrs)(sk, la, ra);
			if (!addr_ok(filter_laddr_on, la, filter_laddr) ||
			    !addr_ok(filter_raddr_on, ra, filter_raddr))
				return 0;
		}
	} else if (skb) {
		if (want != PROTO_ANY || filter_lport || filter_rport || by_addr) {
			struct pkt p = {};
			if (SFX(parse_pkt)(skb, nh_mode, &p) < 0)
				return 0;
			if (want != PROTO_ANY && p.proto != want)
				return 0;
			if (!addr_ok(filter_laddr_on, p.laddr, filter_laddr) ||
			    !addr_ok(filter_raddr_on, p.raddr, filter_raddr))
				return 0;
			lport = p.dport;
			rport = p.sport;
		} else {
			u16 eth = bpf_ntohs(RD(skb, protocol));
			if (eth != ETH_P_IP && eth != ETH_P_IPV6)
				return 0;
		}
	} else if (by_addr) {
		return 0;
	}
	if (filter_lport && lport != filter_lport)
		return 0;
	if (filter_rport && rport != filter_rport)
		return 0;

	u64 cg = 0;
	if (filter_cgroup || group_by == GROUP_CGROUP) {
		if (sk)
			cg = RD(sk, sk_cgrp_data.cgroup, kn, id);
		else if (ctx_kind == CTX_TASK)
			cg = bpf_get_current_cgroup_id();
		if (filter_cgroup && cg != filter_cgroup)
			return 0;
	}
	if (filter_tgid && ctx_kind == CTX_TASK && (bpf_get_current_pid_tgid() >> 32) != filter_tgid)
		return 0;

	u32 ifindex = 0;
	if (skb && (filter_ifindex || group_by == GROUP_IFACE)) {
		ifindex = RD(skb, skb_iif);
		if (!ifindex && ctx_kind == CTX_SOFTIRQ && RD(skb, dev))
			ifindex = RD(skb, dev, ifindex);
		if (filter_ifindex && ifindex != filter_ifindex)
			return 0;
	}

	if (filter_netns) {
		u64 ns = 0;
		if (sk)
			ns = RD(sk, __sk_common.skc_net.net, ns.inum);
		else if (ctx_kind == CTX_TASK)
			ns = CUR_NETNS();
		else if (skb && RD(skb, dev))
			ns = RD(skb, dev, nd_net.net, ns.inum);
		if (ns != filter_netns)
			return 0;
	}

	/* --sample N: one packet in N per probe and CPU goes on, before any clock read. */
	if (sample_every > 1) {
		u32 key = probe;
		u64 *n = bpf_map_lookup_elem(&lsstk_sample, &key);
		if (n) {
			u64 seq = *n;
			*n = seq + 1;
			if (seq % sample_every)
				return 0;
		}
	}

	/* An entry in lsstk_stamps means the skb had no realtime stamp when it entered
	 * __netif_receive_skb_core() (a monotonic EDT delivery time kept over loopback/veth, or none);
	 * the kernel may stamp it later (ip_local_deliver_finish() does, *after* netfilter INPUT), so
	 * the earlier stamp is the one to use. */
	u64 ts = pre_ts;
	if (skb && !ts) {
		ts = fallback_stamp(ADDR(skb));
		if (ts)
			stat_inc(probe, STAT_FALLBACK_STAMP);
		else
			ts = SFX(skb_rx_tstamp)(skb);
	}
	if (!ts) {
		stat_inc(probe, STAT_NO_STAMP);
		return 0;
	}
	/* A clock read costs 50-150 ns on a VM with return-thunk mitigations: the biggest part of a
	 * program run. `now_ts` is the caller's, when it just read the clock. */
	u64 now = now_ts ? now_ts : now_realtime_ns();
	if (ts > now) {
		stat_inc(probe, STAT_BAD_STAMP);
		return 0;
	}
	hist_add(probe, group_by == GROUP_IFACE ? ifindex : cg, now - ts);
	return 0;
}

static __always_inline int SFX(record)(u32 probe, struct sk_buff *skb, struct sock *sk, int nh_mode,
				       int ctx_kind, u8 want, u64 pre_ts)
{
	return SFX(record_at)(probe, skb, sk, nh_mode, ctx_kind, want, pre_ts, 0);
}

/* The netif_receive_skb site: stamp skbs that lack a realtime skb->tstamp (the earliest hook
 * latscope uses), then record ip-start if this site serves it. */
static __always_inline int SFX(rx)(struct sk_buff *skb, u32 site)
{
	if (empty)
		return 0;
	u64 addr = ADDR(skb);
	u32 idx = stamp_index(addr);
	struct stamp_slot *slot = bpf_map_lookup_elem(&lsstk_stamps, &idx);
	u64 now = 0;
	if (slot && addr) {
		if (SFX(skb_rx_tstamp)(skb)) {
			/* Stamped by the kernel: an earlier skb's stamp at this address must not be
			 * taken for this one's (skbs are recycled LIFO, addresses come back fast). */
			if (slot->skb == addr)
				slot->skb = 0;
		} else {
			now = now_realtime_ns();
			slot->ts = now;
			slot->skb = addr;
		}
	}
	if (site_mask[site] & BIT(PROBE_IP_START))
		SFX(record_at)(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0, now);
	return 0;
}

/* sock:sk_data_ready: the skb just queued is the receive queue's tail. */
static __always_inline int SFX(data_ready)(struct sock *sk, u32 probe, u8 want)
{
	if (RD(sk, sk_receive_queue.qlen) == 0)
		return 0;
	struct sk_buff *skb = RD(sk, sk_receive_queue.prev);
	if (!skb)
		return 0;
	return SFX(record)(probe, skb, sk, NH_HEADER, CTX_SOFTIRQ, want, 0);
}

/* UDP read fallback, enqueue side: push the tail datagram's stamp on the socket's FIFO. */
static __always_inline int SFX(udp_push)(struct sock *sk)
{
	u32 qlen = RD(sk, sk_receive_queue.qlen);
	if (qlen == 0)
		return 0;
	struct sk_buff *skb = RD(sk, sk_receive_queue.prev);
	if (!skb)
		return 0;
	struct udp_fifo *q = UDP_FIFO(sk, true);
	if (!q)
		return 0;
	/* udp_sock lies beyond struct sock: a probe read, on first sight and on overflow only */
	struct udp_sock *up = (void *)sk;
	if (!q->seen) {
		/* everything queued before this datagram predates us */
		q->seen = 1;
		q->skip = qlen - 1 + BPF_CORE_READ(up, reader_queue.qlen);
	}
	if (q->tail - q->head >= UDP_RING) {
		/* More datagrams queued than the ring holds: skip all of them, restart after. */
		q->skip = qlen + BPF_CORE_READ(up, reader_queue.qlen);
		q->head = q->tail;
		stat_inc(PROBE_UDP_READ, STAT_NO_STAMP);
		return 0;
	}
	u64 ts = fallback_stamp(ADDR(skb));
	if (!ts)
		ts = SFX(skb_rx_tstamp)(skb);
	q->ts[q->tail & (UDP_RING - 1)] = ts;
	q->tail += 1;
	return 0;
}

/* The sk_data_ready site: tcp-socket-enqueued, udp-socket-enqueued and the udp-socket-read
 * queue, as site_mask[site] says. */
static __always_inline int SFX(dready)(struct sock *sk, u32 site)
{
	if (empty)
		return 0;
	u8 proto = RD(sk, sk_protocol);
	u32 mask = site_mask[site];
	if (proto == IPPROTO_TCP_) {
		if (mask & BIT(PROBE_TCP_ENQUEUED))
			SFX(data_ready)(sk, PROBE_TCP_ENQUEUED, IPPROTO_TCP_);
	} else if (proto == IPPROTO_UDP_) {
		if (mask & BIT(PROBE_UDP_ENQUEUED))
			SFX(data_ready)(sk, PROBE_UDP_ENQUEUED, IPPROTO_UDP_);
		if (mask & BIT(PROBE_UDP_READ))
			SFX(udp_push)(sk);
	}
	return 0;
}

/* UDP read fallback, read side: a successful non-peeking read consumed the FIFO's head. */
static __always_inline int SFX(udp_pop)(struct sock *sk, int ret, int flags)
{
	if (empty)
		return 0;
	if (ret < 0 || (flags & MSG_PEEK_))
		return 0;
	if (RD(sk, sk_protocol) != IPPROTO_UDP_)
		return 0;
	struct udp_fifo *q = UDP_FIFO(sk, false);
	if (!q)
		return 0;
	if (q->skip) {
		q->skip -= 1;
		return 0;
	}
	if (q->head >= q->tail)
		return 0;
	u64 ts = q->ts[q->head & (UDP_RING - 1)];
	q->head += 1;
	if (!ts) {
		stat_inc(PROBE_UDP_READ, STAT_NO_STAMP);
		return 0;
	}
	return SFX(record)(PROBE_UDP_READ, NULL, sk, NH_HEADER, CTX_TASK, IPPROTO_UDP_, ts);
}
