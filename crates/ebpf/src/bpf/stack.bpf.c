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
/* Local / remote address filters: 16 bytes in network order as they lie in memory, an IPv4
 * address in its v4-mapped IPv6 form (::ffff:a.b.c.d), so dual-stack sockets match too. */
const volatile u32 filter_laddr_on = 0;
const volatile u32 filter_laddr[4] = {};
const volatile u32 filter_raddr_on = 0;
const volatile u32 filter_raddr[4] = {};
const volatile u32 group_by = GROUP_NONE;
/* Time one packet in `sample_every` at each probe (0 or 1: every packet). */
const volatile u32 sample_every = 0;
/*
 * Attach sites shared by several probes. Each probe has its own program per site (so it can be
 * loaded and can fail on its own), but every program at a site runs the same dispatcher, and once
 * the probes are chosen user space loads a single program per site, with `site_mask[site]` the
 * probes it serves (bit = probe id): one program run per packet per site instead of one per probe.
 */
#define SITE_RX_TP 0	  /* tp_btf/netif_receive_skb: stamping + ip-start */
#define SITE_RX_RAW 1	  /* raw_tp/netif_receive_skb */
#define SITE_CG 2	  /* cgroup_skb/ingress: tcp-start + udp-start */
#define SITE_DREADY_TP 3  /* tp_btf/sk_data_ready: tcp/udp-socket-enqueued + udp-socket-read queue */
#define SITE_DREADY_RAW 4 /* raw_tp/sk_data_ready */
#define NSITES 5
const volatile u32 site_mask[NSITES] = {};
#define BIT(probe) (1U << (probe))

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

/* Per-CPU, per-probe packet counters for --sample. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NPROBES);
	__type(key, u32);
	__type(value, u64);
} lsstk_sample SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NPROBES * NSTATS);
	__type(key, u32);
	__type(value, u64);
} lsstk_stats SEC(".maps");

/*
 * Fallback stamps for skbs that arrive without a realtime skb->tstamp, written at the earliest hook
 * (netif_receive_skb). A direct-mapped table indexed by a hash of the skb address, each slot
 * holding (address, stamp): an array lookup is inlined by the JIT and costs a few nanoseconds,
 * where an LRU hash update cost ~300 ns per packet (its locking and list upkeep) and dominated
 * the per-packet overhead on loopback. A slot belongs to one skb at a time; a colliding skb
 * overwrites it, and the earlier skb's later hooks then fall back to skb->tstamp (rare: a few
 * skbs are in flight against 65536 slots). The slot of an skb address that comes back with a
 * kernel stamp is cleared, so a recycled address never inherits an old stamp.
 */
#define NSTAMPS 65536
struct stamp_slot {
	u64 skb;
	u64 ts;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NSTAMPS);
	__type(key, u32);
	__type(value, struct stamp_slot);
} lsstk_stamps SEC(".maps");

/* One u64 per CPU to turn a typed kernel pointer into a plain number (see ptr_addr). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lsstk_scratch SEC(".maps");

/* The address of a BTF-typed pointer as a number. The verifier refuses arithmetic on such
 * pointers (it tracks them as pointers through registers and the stack), but a value read back
 * from a map is a plain scalar; storing a pointer there needs CAP_PERFMON, which tracing needs
 * anyway. The per-CPU array lookup is inlined: a few instructions. (A program interrupting this
 * one on the same CPU between the store and the load could swap the number: the skb would then
 * miss its fallback stamp, once; a window of two instructions.) */
static __always_inline u64 ptr_addr(void *p)
{
	u32 zero = 0;
	u64 *s = bpf_map_lookup_elem(&lsstk_scratch, &zero);
	if (!s)
		return 0;
	*s = (u64)p;
	return *(volatile u64 *)s;
}

static __always_inline u32 stamp_index(u64 addr)
{
	/* Fibonacci hashing: skb addresses are slab-aligned, their low bits carry nothing. */
	return (u32)((addr * 0x9E3779B97F4A7C15ULL) >> 48) & (NSTAMPS - 1);
}

/* The fallback stamp of the skb at `addr`, or 0. */
static __always_inline u64 fallback_stamp(u64 addr)
{
	u32 idx = stamp_index(addr);
	struct stamp_slot *slot = bpf_map_lookup_elem(&lsstk_stamps, &idx);
	if (slot && addr && slot->skb == addr)
		return slot->ts;
	return 0;
}

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

/*
 * The udp-socket-read fallback's per-socket FIFO of receive stamps (see lsstk_udpr_tp): a ring of
 * UDP_RING stamps, one per queued datagram. If a socket queues more datagrams than the ring holds,
 * the FIFO resynchronises: every datagram queued at that moment is skipped (`skip` reads pass
 * without a sample) and tracking restarts with the next one.
 */
#define UDP_RING 256
struct udp_fifo {
	u64 head; /* sequence number of the next datagram read */
	u64 tail; /* sequence number of the next datagram queued */
	u32 skip; /* reads to pass over: datagrams queued while we were not tracking */
	u32 seen; /* set once the socket's queue length at first sight was taken into `skip` */
	u64 ts[UDP_RING];
};

/* tp_btf: socket-local storage, freed with the socket, no hashing or locking on lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct udp_fifo);
} lsstk_udpq SEC(".maps");

/* raw_tp (untyped socket pointers cannot use socket storage): a hash keyed by socket address. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, struct udp_fifo);
} lsstk_udpfifo SEC(".maps");

/* A zeroed FIFO to insert new keys from (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct udp_fifo);
} lsstk_fzero SEC(".maps");

static __always_inline struct udp_fifo *udp_fifo_storage(struct sock *sk, bool create)
{
	return bpf_sk_storage_get(&lsstk_udpq, sk, NULL, create ? BPF_SK_STORAGE_GET_F_CREATE : 0);
}

static __always_inline struct udp_fifo *udp_fifo_hash(struct sock *sk, bool create)
{
	u64 key = (u64)sk;
	struct udp_fifo *q = bpf_map_lookup_elem(&lsstk_udpfifo, &key);
	if (q || !create)
		return q;
	u32 zero = 0;
	struct udp_fifo *z = bpf_map_lookup_elem(&lsstk_fzero, &zero);
	if (!z)
		return NULL;
	bpf_map_update_elem(&lsstk_udpfifo, &key, z, BPF_NOEXIST);
	return bpf_map_lookup_elem(&lsstk_udpfifo, &key);
}

static __always_inline u64 log2_bucket(u64 v)
{
	/* smallest k with v <= 2^k, i.e. 64 - clz(v - 1) for v > 1 */
	if (v <= 1)
		return 0;
	v -= 1;
	u64 r = 0, shift;
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
	u32 laddr[4]; /* destination address (v4-mapped for IPv4), when an address filter is on */
	u32 raddr[4]; /* source address */
};

#define AF_INET_ 2
#define AF_INET6_ 10

/* An IPv4 address (network order) as its v4-mapped IPv6 words. */
static __always_inline void v4_mapped(u32 *a, u32 v4)
{
	a[0] = 0;
	a[1] = 0;
	a[2] = bpf_htonl(0xffff);
	a[3] = v4;
}

/* Whether address `a` passes the filter `want` (off: everything passes). */
static __always_inline bool addr_ok(u32 on, const u32 *a, const volatile u32 *want)
{
	if (!on)
		return true;
	return a[0] == want[0] && a[1] == want[1] && a[2] == want[2] && a[3] == want[3];
}

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
	/* The clamp must bound the very register that indexes: left alone, the compiler checks
	 * one copy (zero-extended, or before the bucket's final +1) and indexes with another,
	 * which verifiers before ~6.3 cannot relate (6.1: "unbounded memory access"). Hence 64-bit
	 * values and a barrier on each side of the clamp. */
	u64 b = log2_bucket(lat);
	barrier_var(b);
	if (b > HIST_BUCKETS - 1)
		b = HIST_BUCKETS - 1;
	barrier_var(b);
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
#define UDP_FIFO udp_fifo_storage
#define ADDR(p) ptr_addr(p)
#define SFX(name) name##_direct
#include "record.bpf.h"
#undef RD
#undef RD_BITFIELD
#undef CUR_NETNS
#undef UDP_FIFO
#undef ADDR
#undef SFX

#define RD BPF_CORE_READ
#define RD_BITFIELD BPF_CORE_READ_BITFIELD_PROBED
#define CUR_NETNS() BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), nsproxy, net_ns, ns.inum)
#define UDP_FIFO udp_fifo_hash
#define ADDR(p) ((u64)(p))
#define SFX(name) name##_probe
#include "record.bpf.h"

/* The stamper: the netif_receive_skb site without ip-start (e.g. when ip-start uses fentry). */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(lsstk_stamp_tp, struct sk_buff *skb)
{
	return rx_direct(skb, SITE_RX_TP);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(lsstk_stamp_raw, struct sk_buff *skb)
{
	return rx_probe(skb, SITE_RX_RAW);
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

/* Also the stamper: skbs without a realtime stamp get latscope's first, so they read ~0 here. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(lsstk_ip_tp, struct sk_buff *skb)
{
	return rx_direct(skb, SITE_RX_TP);
}

SEC("raw_tp/netif_receive_skb")
int BPF_PROG(lsstk_ip_raw, struct sk_buff *skb)
{
	return rx_probe(skb, SITE_RX_RAW);
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

/* Linux 6.2+. Weak: on older kernels the object still loads (fentry and tracepoint programs),
 * and only the cgroup_skb programs, which call it, are refused; user space checks the kernel's
 * BTF for it first to say why. */
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym __weak;

/* The cgroup_skb site: tcp-start and/or udp-start, as site_mask[SITE_CG] says. */
static __always_inline int cg_start(struct __sk_buff *ctx)
{
	/* The kernel runs cgroup_skb ingress programs only for full sockets and points skb->sk at
	 * the receiving socket meanwhile (__cgroup_bpf_run_filter_skb), so the socket is read
	 * straight from the kernel skb: no bpf_sk_fullsock() call on this per-packet path. */
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);
	struct sock *sk = skb->sk;
	if (!sk)
		return 1;
	u32 mask = site_mask[SITE_CG];
	u16 proto = sk->sk_protocol;
	if (proto == IPPROTO_TCP_) {
		if (mask & BIT(PROBE_TCP_START))
			record_direct(PROBE_TCP_START, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_TCP_, 0);
	} else if (proto == IPPROTO_UDP_) {
		if (mask & BIT(PROBE_UDP_START))
			record_direct(PROBE_UDP_START, skb, sk, NH_HEADER, CTX_SOFTIRQ, IPPROTO_UDP_, 0);
	}
	return 1; /* always let the packet pass */
}

SEC("cgroup_skb/ingress")
int lsstk_tcp_cg(struct __sk_buff *ctx)
{
	return cg_start(ctx);
}

SEC("cgroup_skb/ingress")
int lsstk_udp_cg(struct __sk_buff *ctx)
{
	return cg_start(ctx);
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
	return dready_direct(sk, SITE_DREADY_TP);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_tcpq_raw, struct sock *sk)
{
	return dready_probe(sk, SITE_DREADY_RAW);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(lsstk_udpq_tp, struct sock *sk)
{
	return dready_direct(sk, SITE_DREADY_TP);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_udpq_raw, struct sock *sk)
{
	return dready_probe(sk, SITE_DREADY_RAW);
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
	return dready_direct(sk, SITE_DREADY_TP);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(lsstk_udpr_tp, struct sock *sk, int ret, int flags)
{
	return udp_pop_direct(sk, ret, flags);
}

SEC("raw_tp/sk_data_ready")
int BPF_PROG(lsstk_udpr_rawq, struct sock *sk)
{
	return dready_probe(sk, SITE_DREADY_RAW);
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(lsstk_udpr_raw, struct sock *sk, int ret, int flags)
{
	return udp_pop_probe(sk, ret, flags);
}
