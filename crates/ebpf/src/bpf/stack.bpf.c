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
/* ip-start's netif_receive_skb programs also do the stamping (one program per packet less). */
const volatile bool stamp_in_ip_start = false;

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

/* Without grouping the key is just the probe: an array, whose lookup is inlined by the JIT. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NPROBES);
	__type(key, u32);
	__type(value, struct hist_val);
} lsstk_hista SEC(".maps");

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

/* What the caller knows about the context. */
#define CTX_SOFTIRQ 0 /* receive path: current task is unrelated */
#define CTX_TASK 1    /* socket read: current task is the reader */

#define MSG_PEEK_ 2

struct pkt {
	u8 proto;  /* IPPROTO_TCP / IPPROTO_UDP / other */
	u16 sport; /* remote port (host order) */
	u16 dport; /* local port (host order) */
};

static __always_inline void hist_add(u32 probe, u64 group, u64 lat)
{
	struct hist_val *h;
	if (group_by == GROUP_NONE) {
		h = bpf_map_lookup_elem(&lsstk_hista, &probe);
	} else {
		struct hist_key key = {.probe = probe, .group = group};
		h = bpf_map_lookup_elem(&lsstk_hist, &key);
		if (!h) {
			u32 zero = 0;
			struct hist_val *z = bpf_map_lookup_elem(&lsstk_zero, &zero);
			if (!z)
				return;
			bpf_map_update_elem(&lsstk_hist, &key, z, BPF_NOEXIST);
			h = bpf_map_lookup_elem(&lsstk_hist, &key);
		}
	}
	if (!h)
		return;
	u32 b = log2_bucket(lat);
	if (b >= HIST_BUCKETS)
		b = HIST_BUCKETS - 1;
	/* Per-CPU values: no atomics needed (a socket read preempted by softirq on the same CPU
	 * may lose an increment; negligible). */
	h->buckets[b] += 1;
	h->sum_ns += lat;
}

/*
 * The functions that read kernel structures are compiled twice from record.bpf.h: with direct
 * (BTF-checked, JIT-inlined) loads for tp_btf/fentry/cgroup_skb programs, whose arguments are
 * typed pointers, and with bpf_probe_read_kernel() (BPF_CORE_READ) for raw_tp programs, whose
 * arguments are plain integers. Both are CO-RE relocated.
 */
#define ___DR1(s, a) ((s)->a)
#define ___DR2(s, a, b) ((s)->a->b)
#define ___DR3(s, a, b, c) ((s)->a->b->c)
#define ___DR4(s, a, b, c, d) ((s)->a->b->c->d)
#define ___DRN(_1, _2, _3, _4, N, ...) N
#define DIRECT_READ(s, ...) ___DRN(__VA_ARGS__, ___DR4, ___DR3, ___DR2, ___DR1)(s, __VA_ARGS__)

#define RD DIRECT_READ
#define RD_BITFIELD BPF_CORE_READ_BITFIELD
#define CUR_NETNS() (bpf_get_current_task_btf()->nsproxy->net_ns->ns.inum)
#define SFX(name) name##_direct
#include "record.bpf.h"
#undef RD
#undef RD_BITFIELD
#undef CUR_NETNS
#undef SFX

#define RD BPF_CORE_READ
#define RD_BITFIELD BPF_CORE_READ_BITFIELD_PROBED
#define CUR_NETNS() BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), nsproxy, net_ns, ns.inum)
#define SFX(name) name##_probe
#include "record.bpf.h"

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(lsstk_stamp_tp, struct sk_buff *skb)
{
	return stamp_skb_direct(skb);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(lsstk_stamp_raw, struct sk_buff *skb)
{
	return stamp_skb_probe(skb);
}

/* ---------------------------------------------------------------------------------------------
 * ip-start. fentry: ip_rcv_core()/ip6_rcv_core() (netstacklat). Fallback: the netif_receive_skb
 * tracepoint in __netif_receive_skb_core(), i.e. just *before* tc ingress and the IP layer.
 */
SEC("fentry/ip_rcv_core")
int BPF_PROG(lsstk_ip_fe, struct sk_buff *skb)
{
	return record_direct(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

SEC("fentry/ip6_rcv_core")
int BPF_PROG(lsstk_ip6_fe, struct sk_buff *skb)
{
	return record_direct(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(lsstk_ip_tp, struct sk_buff *skb)
{
	if (stamp_in_ip_start)
		stamp_skb_direct(skb);
	return record_direct(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(lsstk_ip_raw, struct sk_buff *skb)
{
	if (stamp_in_ip_start)
		stamp_skb_probe(skb);
	return record_probe(PROBE_IP_START, skb, NULL, NH_DATA, CTX_SOFTIRQ, PROTO_ANY, 0);
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
	return record_direct(PROBE_TCP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fentry/tcp_v6_rcv")
int BPF_PROG(lsstk_tcp_fe6, struct sk_buff *skb)
{
	return record_direct(PROBE_TCP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fentry/udp_rcv")
int BPF_PROG(lsstk_udp_fe4, struct sk_buff *skb)
{
	return record_direct(PROBE_UDP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
}

SEC("fentry/udpv6_rcv")
int BPF_PROG(lsstk_udp_fe6, struct sk_buff *skb)
{
	return record_direct(PROBE_UDP_START, skb, NULL, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
}

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

static __always_inline int cg_start(struct __sk_buff *ctx, u32 probe, u8 want)
{
	/* Cheap exit through the context first: both start probes run for every packet. */
	struct bpf_sock *bs = ctx->sk;
	if (!bs)
		return 1;
	bs = bpf_sk_fullsock(bs);
	if (!bs || bs->protocol != want)
		return 1;
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);
	record_direct(probe, skb, skb->sk, NH_HEADER, CTX_SOFTIRQ, want, 0);
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
	return record_direct(PROBE_TCP_ENQUEUED, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fexit/tcp_data_queue_ofo")
int BPF_PROG(lsstk_tcpq_fxo, struct sock *sk, struct sk_buff *skb)
{
	return record_direct(PROBE_TCP_ENQUEUED, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
}

SEC("fexit/__udp_enqueue_schedule_skb")
int BPF_PROG(lsstk_udpq_fx, struct sock *sk, struct sk_buff *skb, int ret)
{
	if (ret != 0)
		return 0;
	return record_direct(PROBE_UDP_ENQUEUED, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_tcpq_tp, struct sock *sk)
{
	return data_ready_direct(sk, PROBE_TCP_ENQUEUED, IPPROTO_TCP_);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_tcpq_raw, struct sock *sk)
{
	return data_ready_probe(sk, PROBE_TCP_ENQUEUED, IPPROTO_TCP_);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_udpq_tp, struct sock *sk)
{
	return data_ready_direct(sk, PROBE_UDP_ENQUEUED, IPPROTO_UDP_);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_udpq_raw, struct sock *sk)
{
	return data_ready_probe(sk, PROBE_UDP_ENQUEUED, IPPROTO_UDP_);
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
	u64 sec = tss->ts[0].tv_sec;
	u64 nsec = tss->ts[0].tv_nsec;
	u64 ts = sec * 1000000000ULL + nsec;
	if (!ts)
		return 0;
	return record_direct(PROBE_TCP_READ, NULL, sk, NH_HEADER, CTX_TASK, IPPROTO_TCP_, ts);
}

SEC("fentry/skb_consume_udp")
int BPF_PROG(lsstk_udpr_fe, struct sock *sk, struct sk_buff *skb, int len)
{
	return record_direct(PROBE_UDP_READ, skb, sk, NH_HEADER, CTX_TASK, IPPROTO_UDP_, 0);
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(lsstk_tcpr_tp, const struct sk_buff *skb, int len)
{
	return record_direct(PROBE_TCP_READ, (struct sk_buff *)skb, NULL, NH_HEADER, CTX_TASK, IPPROTO_TCP_, 0);
}

SEC("raw_tp/skb_copy_datagram_iovec")
int BPF_PROG(lsstk_tcpr_raw, const struct sk_buff *skb, int len)
{
	return record_probe(PROBE_TCP_READ, (struct sk_buff *)skb, NULL, NH_HEADER, CTX_TASK, IPPROTO_TCP_, 0);
}

/* UDP reads. udp_recvmsg() copies linear datagrams with copy_linear_skb() and unverified ones
 * with skb_copy_and_csum_datagram_msg(), neither of which has a tracepoint, and 6.18 frees the
 * datagram without skb:consume_skb. What every read does pass is sock:sock_recv_length (after the
 * protocol's recvmsg returns, in the reader's context) — without the skb. UDP sockets are FIFO,
 * so the stamp of each datagram is pushed on a per-socket queue when it is enqueued
 * (sock:sk_data_ready, the receive queue's tail) and popped by each successful non-peeking read.
 * Datagrams already queued when latscope attached are skipped (their count is taken from the
 * queues' lengths the first time the socket is seen). */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_udpr_q, struct sock *sk)
{
	return udp_push_direct(sk);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(lsstk_udpr_tp, struct sock *sk, int ret, int flags)
{
	return udp_pop_direct(sk, ret, flags);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_udpr_rawq, struct sock *sk)
{
	return udp_push_probe(sk);
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(lsstk_udpr_raw, struct sock *sk, int ret, int flags)
{
	return udp_pop_probe(sk, ret, flags);
}
