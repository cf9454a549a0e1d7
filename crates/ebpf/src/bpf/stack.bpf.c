// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * latscope stack: how long received packets have been inside the kernel when they reach each of
 * netstacklat's seven hook points (ip-start … udp-socket-read). Latency = now − the skb's
 * software RX timestamp (skb->tstamp, CLOCK_REALTIME, set by net_timestamp_check() while any
 * socket asks for SOF_TIMESTAMPING_RX_SOFTWARE; latscope keeps one such socket open).
 *
 * Every probe has several implementations; user space loads one per probe, trying them in order
 * (fentry/fexit first, as netstacklat does, then tracepoints via tp_btf, raw_tp, cgroup_skb).
 * All of them funnel into record() below, so the semantics differ only in *where* "now" is taken.
 *
 * Results are per-CPU log2 histograms keyed by (probe, group); nothing per packet leaves the
 * kernel. Program names start with "lsstk_" so leftovers are recognisable in `bpftool prog list`.
 *
 * vmlinux.h: `bpftool btf dump file /sys/kernel/btf/vmlinux format c > src/bpf/vmlinux.h`.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Probe ids: keep in sync with `Probe` in src/probes.rs. */
#define PROBE_IP_START 0
#define PROBE_TCP_START 1
#define PROBE_UDP_START 2
#define PROBE_TCP_ENQUEUED 3
#define PROBE_UDP_ENQUEUED 4
#define PROBE_TCP_READ 5
#define PROBE_UDP_READ 6
#define NPROBES 7

/* Bucket k holds (2^(k-1), 2^k] ns, as latscope_core::log2 (k = 0 holds 0 and 1 ns). */
#define HIST_BUCKETS 65

#define GROUP_NONE 0
#define GROUP_IFACE 1
#define GROUP_CGROUP 2

/* Per-probe counters in `lsstk_stats` (index probe * NSTATS + stat). */
#define STAT_FALLBACK_STAMP 0 /* skb->tstamp missing; used the stamp of our earliest hook */
#define STAT_NO_STAMP 1	      /* no timestamp at all: sample dropped */
#define STAT_BAD_STAMP 2      /* timestamp in the future: sample dropped */
#define NSTATS 3

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define PROTO_ANY 0

/* Configuration, fixed before load (rodata). */
const volatile u64 tai_offset_ns = 0; /* CLOCK_TAI - CLOCK_REALTIME */
const volatile u64 mono_offset_ns = 0; /* CLOCK_REALTIME - CLOCK_MONOTONIC, if TAI is unavailable */
const volatile u32 filter_ifindex = 0;
const volatile u64 filter_netns = 0;
const volatile u32 filter_tgid = 0;
const volatile u64 filter_cgroup = 0;
const volatile u16 filter_lport = 0;
const volatile u16 filter_rport = 0;
const volatile u32 group_by = GROUP_NONE;

struct hist_key {
	u32 probe;
	u32 pad;
	u64 group;
};

struct hist_val {
	u64 buckets[HIST_BUCKETS];
	u64 sum_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hist_key);
	__type(value, struct hist_val);
} lsstk_hist SEC(".maps");

/* A zeroed value to insert new keys from (too big for the 512-byte BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct hist_val);
} lsstk_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NPROBES * NSTATS);
	__type(key, u32);
	__type(value, u64);
} lsstk_stats SEC(".maps");

/* Fallback stamps for skbs that arrive without skb->tstamp, keyed by skb address, written at the
 * earliest hook (netif_receive_skb). Bounded LRU: a stale address is overwritten the next time
 * that skb is received, and old entries age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u64);
	__type(value, u64);
} lsstk_stamps SEC(".maps");

/* The kernel before 6.11 had a 1-bit mono_delivery_time instead of the 2-bit tstamp_type. */
struct sk_buff___old {
	__u8 mono_delivery_time : 1;
} __attribute__((preserve_access_index));

static __always_inline u64 now_realtime_ns(void)
{
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_ktime_get_tai_ns))
		return bpf_ktime_get_tai_ns() - tai_offset_ns;
	return bpf_ktime_get_ns() + mono_offset_ns;
}

static __always_inline void stat_inc(u32 probe, u32 stat)
{
	u32 idx = probe * NSTATS + stat;
	u64 *v = bpf_map_lookup_elem(&lsstk_stats, &idx);
	if (v)
		*v += 1;
}

/* skb->tstamp if it is a CLOCK_REALTIME receive stamp, else 0. */
static __always_inline u64 skb_rx_tstamp(struct sk_buff *skb)
{
	u64 ts = BPF_CORE_READ(skb, tstamp);
	if (!ts)
		return 0;
	if (bpf_core_field_exists(skb->tstamp_type)) {
		if (BPF_CORE_READ_BITFIELD_PROBED(skb, tstamp_type) != 0)
			return 0; /* a monotonic/TAI delivery time (EDT), not a receive stamp */
	} else {
		struct sk_buff___old *old = (void *)skb;
		if (bpf_core_field_exists(old->mono_delivery_time) &&
		    BPF_CORE_READ_BITFIELD_PROBED(old, mono_delivery_time))
			return 0;
	}
	return ts;
}

static __always_inline u32 log2_bucket(u64 v)
{
	/* smallest k with v <= 2^k, i.e. 64 - clz(v - 1) for v > 1 */
	if (v <= 1)
		return 0;
	v -= 1;
	u32 r = 0, shift;
	shift = (v > 0xFFFFFFFFULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xFFFF) << 4; v >>= shift; r |= shift;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r + 1;
}

/* Where the IP header is: at the device layer skb->data points at it before network_header is
 * reset; later, head + network_header. */
#define NH_DATA 0
#define NH_HEADER 1

struct pkt {
	u8 proto;  /* IPPROTO_TCP / IPPROTO_UDP / other */
	u16 sport; /* remote port (host order) */
	u16 dport; /* local port (host order) */
};

static __always_inline int parse_pkt(struct sk_buff *skb, int nh_mode, struct pkt *p)
{
	u16 eth = bpf_ntohs(BPF_CORE_READ(skb, protocol));
	unsigned char *nh;
	if (nh_mode == NH_DATA)
		nh = BPF_CORE_READ(skb, data);
	else
		nh = BPF_CORE_READ(skb, head) + BPF_CORE_READ(skb, network_header);
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

static __always_inline u64 sock_cgroup_id(struct sock *sk)
{
	if (!sk)
		return 0;
	return BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id);
}

/* What the caller knows about the context. */
#define CTX_SOFTIRQ 0 /* receive path: current task is unrelated */
#define CTX_TASK 1    /* socket read: current task is the reader */

/*
 * Record one sample for `probe`. `want` is the L4 protocol the probe is about (PROTO_ANY for
 * ip-start). `sk` may be NULL. `pre_ts` is a timestamp the hook got elsewhere (tcp_recv_timestamp),
 * 0 to read skb->tstamp.
 */
static __always_inline int record(u32 probe, struct sk_buff *skb, struct sock *sk, int nh_mode, int ctx_kind,
				  u8 want, u64 pre_ts)
{
	struct pkt p = {};
	/* For queued/read skbs skb->sk is the owning socket (TCP sets it with skb_set_owner_r();
	 * UDP leaves it NULL and reuses skb->dev as dev_scratch, so skb->dev is not trusted in
	 * task context). */
	if (!sk && skb && nh_mode == NH_HEADER)
		sk = BPF_CORE_READ(skb, sk);
	if (skb) {
		if (parse_pkt(skb, nh_mode, &p) < 0)
			return 0;
		if (want != PROTO_ANY && p.proto != want)
			return 0;
	}

	u64 cg = 0;
	if (ctx_kind == CTX_TASK) {
		if (filter_tgid && (bpf_get_current_pid_tgid() >> 32) != filter_tgid)
			return 0;
		if (filter_cgroup || group_by == GROUP_CGROUP)
			cg = sk ? sock_cgroup_id(sk) : bpf_get_current_cgroup_id();
	} else if (filter_cgroup || group_by == GROUP_CGROUP) {
		cg = sock_cgroup_id(sk);
	}
	if (filter_cgroup && cg != filter_cgroup)
		return 0;

	u32 ifindex = 0;
	if (skb) {
		ifindex = BPF_CORE_READ(skb, skb_iif);
		if (!ifindex && ctx_kind == CTX_SOFTIRQ)
			ifindex = BPF_CORE_READ(skb, dev, ifindex);
	}
	if (filter_ifindex && ifindex != filter_ifindex)
		return 0;

	if (filter_netns) {
		u64 ns = 0;
		if (sk) {
			ns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
		} else if (ctx_kind == CTX_TASK) {
			struct task_struct *t = (void *)bpf_get_current_task();
			ns = BPF_CORE_READ(t, nsproxy, net_ns, ns.inum);
		} else if (skb && BPF_CORE_READ(skb, dev)) {
			ns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
		}
		if (ns != filter_netns)
			return 0;
	}

	if (filter_lport || filter_rport) {
		u16 lport = p.dport, rport = p.sport;
		if (sk && !skb) {
			lport = BPF_CORE_READ(sk, __sk_common.skc_num);
			rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
		}
		if (filter_lport && lport != filter_lport)
			return 0;
		if (filter_rport && rport != filter_rport)
			return 0;
	}

	/* An entry in lsstk_stamps means the skb had no realtime stamp when it entered
	 * __netif_receive_skb_core() (a monotonic EDT delivery time kept over loopback/veth, or none);
	 * the kernel may stamp it later (ip_local_deliver_finish() does, *after* netfilter INPUT), so
	 * the earlier stamp is the one to use. */
	u64 ts = pre_ts;
	if (skb) {
		u64 key = (u64)skb;
		u64 *st = bpf_map_lookup_elem(&lsstk_stamps, &key);
		if (st) {
			ts = *st;
			stat_inc(probe, STAT_FALLBACK_STAMP);
		} else if (!ts) {
			ts = skb_rx_tstamp(skb);
		}
	}
	if (!ts) {
		stat_inc(probe, STAT_NO_STAMP);
		return 0;
	}
	u64 now = now_realtime_ns();
	if (ts > now) {
		stat_inc(probe, STAT_BAD_STAMP);
		return 0;
	}
	u64 lat = now - ts;

	struct hist_key key = {.probe = probe};
	if (group_by == GROUP_IFACE)
		key.group = ifindex;
	else if (group_by == GROUP_CGROUP)
		key.group = cg;
	struct hist_val *h = bpf_map_lookup_elem(&lsstk_hist, &key);
	if (!h) {
		u32 zero = 0;
		struct hist_val *z = bpf_map_lookup_elem(&lsstk_zero, &zero);
		if (!z)
			return 0;
		bpf_map_update_elem(&lsstk_hist, &key, z, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&lsstk_hist, &key);
		if (!h)
			return 0;
	}
	u32 b = log2_bucket(lat);
	if (b >= HIST_BUCKETS)
		b = HIST_BUCKETS - 1;
	/* Per-CPU values: no atomics needed (a socket read preempted by softirq on the same CPU
	 * may lose an increment; negligible). */
	h->buckets[b] += 1;
	h->sum_ns += lat;
	return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Stamp for skbs without skb->tstamp, at the earliest hook we use.
 */
static __always_inline int stamp_skb(struct sk_buff *skb)
{
	u64 key = (u64)skb;
	if (skb_rx_tstamp(skb)) {
		/* Stamped by the kernel: make sure no entry of an earlier skb at this address is
		 * mistaken for this one's (skbs are recycled LIFO, addresses come back fast). */
		if (bpf_map_lookup_elem(&lsstk_stamps, &key))
			bpf_map_delete_elem(&lsstk_stamps, &key);
		return 0;
	}
	u64 now = now_realtime_ns();
	bpf_map_update_elem(&lsstk_stamps, &key, &now, BPF_ANY);
	return 0;
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(lsstk_stamp_tp, struct sk_buff *skb)
{
	return stamp_skb(skb);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(lsstk_stamp_raw, struct sk_buff *skb)
{
	return stamp_skb(skb);
}

/* ---------------------------------------------------------------------------------------------
 * ip-start. fentry: ip_rcv_core()/ip6_rcv_core() (netstacklat). Fallback: the netif_receive_skb
 * tracepoint in __netif_receive_skb_core(), i.e. just *before* tc ingress and the IP layer.
 */
SEC("fentry/ip_rcv_core")
int BPF_PROG(lsstk_ip_fe, struct sk_buff *skb)
{
	return record(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

SEC("fentry/ip6_rcv_core")
int BPF_PROG(lsstk_ip6_fe, struct sk_buff *skb)
{
	return record(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(lsstk_ip_tp, struct sk_buff *skb)
{
	return record(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(lsstk_ip_raw, struct sk_buff *skb)
{
	return record(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

/* ---------------------------------------------------------------------------------------------
 * tcp-start / udp-start. fentry: tcp_v4_rcv/tcp_v6_rcv, udp_rcv/udpv6_rcv (netstacklat).
 * Fallback: cgroup_skb ingress on the root cgroup v2, run from sk_filter_trim_cap() by
 * tcp_filter() in tcp_v4_rcv() / by udp_queue_rcv_one_skb(): past IP, routing and netfilter
 * INPUT, right after the socket lookup.
 */
SEC("fentry/tcp_v4_rcv")
int BPF_PROG(lsstk_tcp_fe4, struct sk_buff *skb)
{
	return record(PROBE_TCP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fentry/tcp_v6_rcv")
int BPF_PROG(lsstk_tcp_fe6, struct sk_buff *skb)
{
	return record(PROBE_TCP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fentry/udp_rcv")
int BPF_PROG(lsstk_udp_fe4, struct sk_buff *skb)
{
	return record(PROBE_UDP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
}

SEC("fentry/udpv6_rcv")
int BPF_PROG(lsstk_udp_fe6, struct sk_buff *skb)
{
	return record(PROBE_UDP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
}

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

static __always_inline int cg_start(struct __sk_buff *ctx, u32 probe, u8 want)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);
	struct sock *sk = BPF_CORE_READ(skb, sk);
	record(probe, skb, sk, NH_HEADER, CTX_SOFTIRQ, want, 0);
	return 1; /* always let the packet pass */
}

SEC("cgroup_skb/ingress")
int lsstk_tcp_cg(struct __sk_buff *ctx)
{
	return cg_start(ctx, PROBE_TCP_START, IPPROTO_TCP_);
}

SEC("cgroup_skb/ingress")
int lsstk_udp_cg(struct __sk_buff *ctx)
{
	return cg_start(ctx, PROBE_UDP_START, IPPROTO_UDP_);
}

/* ---------------------------------------------------------------------------------------------
 * tcp-socket-enqueued / udp-socket-enqueued. fexit: tcp_queue_rcv, tcp_data_queue_ofo,
 * __udp_enqueue_schedule_skb (netstacklat). Fallback: the sock:sk_data_ready tracepoint (6.6+)
 * that sock_def_readable() fires right after the data was queued; the skb is the receive queue's
 * tail.
 */
SEC("fexit/tcp_queue_rcv")
int BPF_PROG(lsstk_tcpq_fx, struct sock *sk, struct sk_buff *skb, bool *fragstolen, int ret)
{
	return record(PROBE_TCP_ENQUEUED, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fexit/tcp_data_queue_ofo")
int BPF_PROG(lsstk_tcpq_fxo, struct sock *sk, struct sk_buff *skb)
{
	return record(PROBE_TCP_ENQUEUED, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fexit/__udp_enqueue_schedule_skb")
int BPF_PROG(lsstk_udpq_fx, struct sock *sk, struct sk_buff *skb, int ret)
{
	if (ret != 0)
		return 0;
	return record(PROBE_UDP_ENQUEUED, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
}

static __always_inline int data_ready(struct sock *sk, u32 probe, u8 want)
{
	if (BPF_CORE_READ(sk, sk_protocol) != want)
		return 0;
	if (BPF_CORE_READ(sk, sk_receive_queue.qlen) == 0)
		return 0;
	struct sk_buff *skb = BPF_CORE_READ(sk, sk_receive_queue.prev);
	if (!skb)
		return 0;
	return record(probe, skb, sk, NH_HEADER, CTX_SOFTIRQ, want, 0);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_tcpq_tp, struct sock *sk)
{
	return data_ready(sk, PROBE_TCP_ENQUEUED, IPPROTO_TCP_);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_tcpq_raw, struct sock *sk)
{
	return data_ready(sk, PROBE_TCP_ENQUEUED, IPPROTO_TCP_);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_udpq_tp, struct sock *sk)
{
	return data_ready(sk, PROBE_UDP_ENQUEUED, IPPROTO_UDP_);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_udpq_raw, struct sock *sk)
{
	return data_ready(sk, PROBE_UDP_ENQUEUED, IPPROTO_UDP_);
}

/* ---------------------------------------------------------------------------------------------
 * tcp-socket-read / udp-socket-read. fentry: tcp_recv_timestamp (gets the stamp of the last skb
 * read) and skb_consume_udp (netstacklat). Fallback: the skb:skb_copy_datagram_iovec tracepoint
 * in skb_copy_datagram_iter(), fired for every skb whose payload is copied to user space by
 * recvmsg()/read() (one sample per skb copied, MSG_PEEK included; zero-copy receive and splice
 * are not seen).
 */
SEC("fentry/tcp_recv_timestamp")
int BPF_PROG(lsstk_tcpr_fe, struct msghdr *msg, struct sock *sk, struct scm_timestamping_internal *tss)
{
	u64 sec = BPF_CORE_READ(tss, ts[0].tv_sec);
	u64 nsec = BPF_CORE_READ(tss, ts[0].tv_nsec);
	u64 ts = sec * 1000000000ULL + nsec;
	if (!ts)
		return 0;
	return record(PROBE_TCP_READ, NULL, sk, NH_HEADER, CTX_TASK, IPPROTO_TCP_, ts);
}

SEC("fentry/skb_consume_udp")
int BPF_PROG(lsstk_udpr_fe, struct sock *sk, struct sk_buff *skb, int len)
{
	return record(PROBE_UDP_READ, skb, sk, NH_HEADER, CTX_TASK, IPPROTO_UDP_, 0);
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(lsstk_tcpr_tp, const struct sk_buff *skb, int len)
{
	return record(PROBE_TCP_READ, (struct sk_buff *)skb, NULL, NH_HEADER, CTX_TASK, IPPROTO_TCP_, 0);
}

SEC("raw_tp/skb_copy_datagram_iovec")
int BPF_PROG(lsstk_tcpr_raw, const struct sk_buff *skb, int len)
{
	return record(PROBE_TCP_READ, (struct sk_buff *)skb, NULL, NH_HEADER, CTX_TASK, IPPROTO_TCP_, 0);
}

/* UDP reads. udp_recvmsg() copies linear datagrams with copy_linear_skb() and unverified ones
 * with skb_copy_and_csum_datagram_msg(), neither of which has a tracepoint, and 6.18 frees the
 * datagram without skb:consume_skb. What every read does pass is sock:sock_recv_length (after the
 * protocol's recvmsg returns, in the reader's context) — without the skb. UDP sockets are FIFO,
 * so the stamp of each datagram is pushed on a per-socket queue when it is enqueued
 * (sock:sk_data_ready, the receive queue's tail) and popped by each successful non-peeking read.
 * Datagrams already queued when latscope attached are skipped (their count is taken from the
 * queues' lengths the first time the socket is seen). */
struct udp_fifo {
	u64 head;
	u64 tail;
	u64 skip;
};

struct udp_fifo_key {
	u64 sk;
	u64 seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, u64);
	__type(value, struct udp_fifo);
} lsstk_udpfifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct udp_fifo_key);
	__type(value, u64);
} lsstk_udpts SEC(".maps");

#define MSG_PEEK_ 2

static __always_inline int udp_push(struct sock *sk)
{
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_UDP_)
		return 0;
	u32 qlen = BPF_CORE_READ(sk, sk_receive_queue.qlen);
	if (qlen == 0)
		return 0;
	struct sk_buff *skb = BPF_CORE_READ(sk, sk_receive_queue.prev);
	if (!skb)
		return 0;
	u64 key = (u64)sk;
	struct udp_fifo *q = bpf_map_lookup_elem(&lsstk_udpfifo, &key);
	if (!q) {
		struct udp_sock *up = (void *)sk;
		struct udp_fifo init = {};
		/* everything queued before this datagram predates us */
		init.skip = qlen - 1 + BPF_CORE_READ(up, reader_queue.qlen);
		bpf_map_update_elem(&lsstk_udpfifo, &key, &init, BPF_NOEXIST);
		q = bpf_map_lookup_elem(&lsstk_udpfifo, &key);
		if (!q)
			return 0;
	}
	u64 skbkey = (u64)skb;
	u64 ts = 0;
	u64 *st = bpf_map_lookup_elem(&lsstk_stamps, &skbkey);
	if (st)
		ts = *st;
	else
		ts = skb_rx_tstamp(skb);
	struct udp_fifo_key fk = {.sk = key, .seq = q->tail};
	bpf_map_update_elem(&lsstk_udpts, &fk, &ts, BPF_ANY);
	q->tail += 1;
	return 0;
}

static __always_inline int udp_pop(struct sock *sk, int ret, int flags)
{
	if (ret < 0 || (flags & MSG_PEEK_))
		return 0;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_UDP_)
		return 0;
	u64 key = (u64)sk;
	struct udp_fifo *q = bpf_map_lookup_elem(&lsstk_udpfifo, &key);
	if (!q)
		return 0;
	if (q->skip) {
		q->skip -= 1;
		return 0;
	}
	if (q->head >= q->tail)
		return 0;
	struct udp_fifo_key fk = {.sk = key, .seq = q->head};
	q->head += 1;
	u64 *tsp = bpf_map_lookup_elem(&lsstk_udpts, &fk);
	if (!tsp)
		return 0;
	u64 ts = *tsp;
	bpf_map_delete_elem(&lsstk_udpts, &fk);
	if (!ts) {
		stat_inc(PROBE_UDP_READ, STAT_NO_STAMP);
		return 0;
	}
	return record(PROBE_UDP_READ, NULL, sk, NH_HEADER, CTX_TASK, IPPROTO_UDP_, ts);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_udpr_q, struct sock *sk)
{
	return udp_push(sk);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(lsstk_udpr_tp, struct sock *sk, int ret, int flags)
{
	return udp_pop(sk, ret, flags);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_udpr_rawq, struct sock *sk)
{
	return udp_push(sk);
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(lsstk_udpr_raw, struct sock *sk, int ret, int flags)
{
	return udp_pop(sk, ret, flags);
}
