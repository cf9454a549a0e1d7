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
#include "log2.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Probe ids: keep in sync with `Probe` in src/probes.rs. */
#define PROBE_IP_START 0
#define PROBE_TCP_START 1
#define PROBE_UDP_START 2
#define PROBE_TCP_ENQUEUED 3
#define PROBE_UDP_ENQUEUED 4
#define PROBE_TCP_READ 5
#define PROBE_UDP_READ 6
/* Transmit stages (tx.bpf.h): each the time between two adjacent boundaries. */
#define PROBE_TCP_SENDQ 7    /* the write → IP output (TCP's send queue) */
#define PROBE_UDP_SEND 8     /* sendmsg() → IP output */
#define PROBE_LOCAL_OUT 9    /* IP output → end of netfilter LOCAL_OUT */
#define PROBE_POST_ROUTING 10 /* → end of netfilter POST_ROUTING */
#define PROBE_DEV_EGRESS 11  /* → net_dev_queue: neighbour, netdev/tc egress */
#define PROBE_QDISC 12       /* → the driver's start_xmit */
#define PROBE_DRIVER 13      /* → start_xmit returned */
#define PROBE_TX_DONE 14     /* → the skb freed: TX completion */
#define NPROBES 15
/* The per-CPU sampling counter of transmitted packets (one decision per packet). */
#define TX_SAMPLE_KEY NPROBES

#define GROUP_NONE 0
#define GROUP_IFACE 1
#define GROUP_CGROUP 2

/* Per-probe counters in `lsstk_stats` (index probe * NSTATS + stat). */
#define STAT_FALLBACK_STAMP 0 /* skb->tstamp missing; used the stamp of our earliest hook */
#define STAT_NO_STAMP 1	      /* no timestamp at all: sample dropped */
#define STAT_BAD_STAMP 2      /* timestamp in the future: sample dropped */
#define STAT_HANDED_ON 3      /* TX: the device handed the skb on (no completion to time) */
#define NSTATS 4

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
/* Transmit stages recorded (bit = probe id): the boundary programs run for their neighbours. */
const volatile u32 tx_mask = 0;
/* Calibration (benches): every program returns at once, to price the hooks themselves. */
const volatile u32 empty = 0;
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
	__uint(max_entries, NPROBES + 1);
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


/* ---------------------------------------------------------------------------------------------
 * Transmit path state (tx.bpf.h).
 */
#define BND_IPOUT 1   /* IP output starts: __ip_local_out(), ip6_xmit(), or LOCAL_OUT's first hook */
#define BND_LODONE 2  /* netfilter LOCAL_OUT done: ip_output(), or LOCAL_OUT's last hook */
#define BND_PRDONE 3  /* netfilter POST_ROUTING done: ip_finish_output(), or its last hook */
#define BND_QUEUE 4   /* net:net_dev_queue, right before the qdisc */
#define BND_DSTART 5  /* net:net_dev_start_xmit */
#define BND_DDONE 6   /* net:net_dev_xmit */
#define BND_FREED 7   /* skb:consume_skb after the driver */

/* A packet's cursor, in a direct-mapped table indexed like lsstk_stamps. A colliding packet
 * takes the slot over (the older one is then timed no further); a slot only continues for the
 * very skb address that wrote it. */
struct tx_slot {
	u64 skb;
	u64 head;  /* skb->head when the driver returned: a recycled sk_buff has another */
	u64 ts;    /* when it passed `bnd` (CLOCK_MONOTONIC) */
	u64 group; /* decided at first sight */
	u32 ifindex; /* the device whose driver it is in */
	u8 bnd;    /* the last boundary passed */
	u8 keep;   /* passed the filters and sampling */
	u8 pad[2];
};

#define NTX 65536
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NTX);
	__type(key, u32);
	__type(value, struct tx_slot);
} lsstk_tx SEC(".maps");

/* The cursor a packet consumed between the qdisc and the driver (software GSO) leaves to its
 * segments, which follow on the same CPU: `left` of them, of the same socket. */
struct tx_handover {
	u64 sk;
	u64 ts;
	u64 group;
	u32 left;
	u8 keep;
	u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tx_handover);
} lsstk_txgso SEC(".maps");

/* Per socket: its unsent writes (TCP) or its pending datagram (UDP), and its last writer. A
 * hash keyed by socket address rather than socket storage: the netfilter programs that end the
 * socket stage on kernels without fentry cannot use socket storage. */
#define TXW_RING 32
struct tx_sock {
	u64 head; /* ring index of the oldest unsent write */
	u64 tail; /* ring index of the next write */
	u64 pending_udp; /* first sendmsg() of the datagram not yet sent, 0 if none */
	u32 tgid;
	u32 pad;
	u32 seq[TXW_RING]; /* first sequence number of each write */
	u64 ts[TXW_RING];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, u64);
	__type(value, struct tx_sock);
} lsstk_txsk SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct tx_sock);
} lsstk_txzero SEC(".maps");

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
	hist_val_add(h, lat);
}

/* The per-socket transmit state (writes not yet sent), created on the socket's first write. */
static __always_inline struct tx_sock *tx_sock_get(u64 key, bool create)
{
	struct tx_sock *q = bpf_map_lookup_elem(&lsstk_txsk, &key);
	if (q || !create)
		return q;
	u32 zero = 0;
	struct tx_sock *z = bpf_map_lookup_elem(&lsstk_txzero, &zero);
	if (!z)
		return NULL;
	bpf_map_update_elem(&lsstk_txsk, &key, z, BPF_NOEXIST);
	return bpf_map_lookup_elem(&lsstk_txsk, &key);
}

/* The stage that ends at boundary `bnd`. */
#define TX_STAGE(bnd) (PROBE_TCP_SENDQ + (bnd))

static __always_inline void tx_record(struct tx_slot *s, u32 bnd, u64 now)
{
	u32 stage = TX_STAGE(bnd);
	if (s->keep && (tx_mask & BIT(stage)) && now >= s->ts)
		hist_add(stage, s->group, now - s->ts);
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
#include "tx.bpf.h"
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
#include "tx.bpf.h"

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
	if (empty)
		return 1;
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

/* =============================================================================================
 * The transmit path (tx.bpf.h): one program per boundary and implementation; each runs the
 * boundary's logic, which records the stage the boundary ends if tx_mask asks for it.
 */

/* The write. tcp_sendmsg_locked() serves write()/send()/sendmsg() and, from 6.5, sendfile and
 * splice (MSG_SPLICE_PAGES) and kTLS; before 6.5 those go through do_tcp_sendpages(). The
 * tcp:tcp_sendmsg_locked tracepoint (6.11+) fires in its copy loop, once per skb filled. */
SEC("fentry/tcp_sendmsg_locked")
int BPF_PROG(lsstk_tw_fe, struct sock *sk)
{
	tx_write_tcp_direct(sk);
	return 0;
}

SEC("fentry/do_tcp_sendpages")
int BPF_PROG(lsstk_tw_fep, struct sock *sk)
{
	tx_write_tcp_direct(sk);
	return 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(lsstk_tw_tp, const struct sock *sk)
{
	tx_write_tcp_direct((struct sock *)sk);
	return 0;
}

SEC("raw_tp/tcp_sendmsg_locked")
int BPF_PROG(lsstk_tw_raw, const struct sock *sk)
{
	tx_write_tcp_probe((struct sock *)sk);
	return 0;
}

SEC("kprobe/tcp_sendmsg_locked")
int BPF_KPROBE(lsstk_tw_kp, struct sock *sk)
{
	tx_write_tcp_probe(sk);
	return 0;
}

SEC("kprobe/do_tcp_sendpages")
int BPF_KPROBE(lsstk_tw_kpp, struct sock *sk)
{
	tx_write_tcp_probe(sk);
	return 0;
}

/* udpv6_sendmsg() hands v4-mapped destinations to udp_sendmsg(): the first stamp stands. */
SEC("fentry/udp_sendmsg")
int BPF_PROG(lsstk_uw_fe, struct sock *sk)
{
	tx_write_udp_direct(sk);
	return 0;
}

SEC("fentry/udpv6_sendmsg")
int BPF_PROG(lsstk_uw_fe6, struct sock *sk)
{
	tx_write_udp_direct(sk);
	return 0;
}

SEC("kprobe/udp_sendmsg")
int BPF_KPROBE(lsstk_uw_kp, struct sock *sk)
{
	tx_write_udp_probe(sk);
	return 0;
}

SEC("kprobe/udpv6_sendmsg")
int BPF_KPROBE(lsstk_uw_kp6, struct sock *sk)
{
	tx_write_udp_probe(sk);
	return 0;
}

/* IP output starts. IPv4: __ip_local_out() (every local packet: TCP through ip_queue_xmit(),
 * UDP, raw, ICMP). IPv6: TCP through ip6_xmit(), which runs LOCAL_OUT itself, the others through
 * __ip6_local_out(). Netfilter: a program at LOCAL_OUT's first priority (6.4+, per namespace). */
SEC("fentry/__ip_local_out")
int BPF_PROG(lsstk_io_fe, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_IPOUT);
}

SEC("fentry/__ip6_local_out")
int BPF_PROG(lsstk_io_fe6, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_IPOUT);
}

SEC("fentry/ip6_xmit")
int BPF_PROG(lsstk_io_fex6, const struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_IPOUT);
}

SEC("kprobe/__ip_local_out")
int BPF_KPROBE(lsstk_io_kp, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_IPOUT);
}

SEC("kprobe/__ip6_local_out")
int BPF_KPROBE(lsstk_io_kp6, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_IPOUT);
}

SEC("kprobe/ip6_xmit")
int BPF_KPROBE(lsstk_io_kpx6, const struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_IPOUT);
}

#define NF_ACCEPT_ 1

SEC("netfilter")
int lsstk_io_nf(struct bpf_nf_ctx *ctx)
{
	tx_at_direct(ctx->skb, BND_IPOUT);
	return NF_ACCEPT_;
}

/* LOCAL_OUT done: dst_output() calls ip_output()/ip6_output(); netfilter: LOCAL_OUT's last
 * priority. */
SEC("fentry/ip_output")
int BPF_PROG(lsstk_lo_fe, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_LODONE);
}

SEC("fentry/ip6_output")
int BPF_PROG(lsstk_lo_fe6, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_LODONE);
}

SEC("kprobe/ip_output")
int BPF_KPROBE(lsstk_lo_kp, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_LODONE);
}

SEC("kprobe/ip6_output")
int BPF_KPROBE(lsstk_lo_kp6, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_LODONE);
}

SEC("netfilter")
int lsstk_lo_nf(struct bpf_nf_ctx *ctx)
{
	tx_at_direct(ctx->skb, BND_LODONE);
	return NF_ACCEPT_;
}

/* POST_ROUTING done: ip_output() hands the packet to ip_finish_output() (its okfn); netfilter:
 * POST_ROUTING's last priority. */
SEC("fentry/ip_finish_output")
int BPF_PROG(lsstk_pr_fe, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_PRDONE);
}

SEC("fentry/ip6_finish_output")
int BPF_PROG(lsstk_pr_fe6, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_PRDONE);
}

SEC("kprobe/ip_finish_output")
int BPF_KPROBE(lsstk_pr_kp, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_PRDONE);
}

SEC("kprobe/ip6_finish_output")
int BPF_KPROBE(lsstk_pr_kp6, struct net *net, struct sock *sk, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_PRDONE);
}

SEC("netfilter")
int lsstk_pr_nf(struct bpf_nf_ctx *ctx)
{
	tx_at_direct(ctx->skb, BND_PRDONE);
	return NF_ACCEPT_;
}

/* The device layer: net:net_dev_queue (in __dev_queue_xmit(), after netdev/tc egress, right
 * before the qdisc), net:net_dev_start_xmit / net:net_dev_xmit around the driver's
 * ndo_start_xmit(), skb:consume_skb (the skb freed after use). */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(lsstk_dq_tp, struct sk_buff *skb)
{
	return tx_at_direct(skb, BND_QUEUE);
}

SEC("raw_tp/net_dev_queue")
int BPF_PROG(lsstk_dq_raw, struct sk_buff *skb)
{
	return tx_at_probe(skb, BND_QUEUE);
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(lsstk_ds_tp, const struct sk_buff *skb)
{
	return tx_at_direct((struct sk_buff *)skb, BND_DSTART);
}

SEC("raw_tp/net_dev_start_xmit")
int BPF_PROG(lsstk_ds_raw, const struct sk_buff *skb)
{
	return tx_at_probe((struct sk_buff *)skb, BND_DSTART);
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(lsstk_dd_tp, struct sk_buff *skb, int rc, struct net_device *dev)
{
	return tx_driver_done_direct(skb, rc, dev);
}

SEC("raw_tp/net_dev_xmit")
int BPF_PROG(lsstk_dd_raw, struct sk_buff *skb, int rc, struct net_device *dev)
{
	return tx_driver_done_probe(skb, rc, dev);
}

SEC("tp_btf/consume_skb")
int BPF_PROG(lsstk_fr_tp, struct sk_buff *skb)
{
	return tx_freed_direct(skb);
}

SEC("raw_tp/consume_skb")
int BPF_PROG(lsstk_fr_raw, struct sk_buff *skb)
{
	return tx_freed_probe(skb);
}
