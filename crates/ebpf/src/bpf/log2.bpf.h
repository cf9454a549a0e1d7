/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The log2 histogram both BPF objects fill (stack.bpf.c, runq.bpf.c): bucket k holds
 * (2^(k-1), 2^k] ns, as latscope_core::log2 (k = 0 holds 0 and 1 ns), and the sum of the values.
 */
#ifndef LATSCOPE_LOG2_BPF_H
#define LATSCOPE_LOG2_BPF_H

#define HIST_BUCKETS 65

struct hist_val {
	u64 buckets[HIST_BUCKETS];
	u64 sum_ns;
};

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

/* Count `ns` in `h`. The clamp must bound the very register that indexes: left alone, the
 * compiler checks one copy (zero-extended, or before the bucket's final +1) and indexes with
 * another, which verifiers before ~6.3 cannot relate (6.1: "unbounded memory access"). Hence
 * 64-bit values and a barrier on each side of the clamp. Per-CPU values: no atomics needed (a
 * socket read preempted by softirq on the same CPU may lose an increment; negligible). */
static __always_inline void hist_val_add(struct hist_val *h, u64 ns)
{
	u64 b = log2_bucket(ns);
	barrier_var(b);
	if (b > HIST_BUCKETS - 1)
		b = HIST_BUCKETS - 1;
	barrier_var(b);
	h->buckets[b] += 1;
	h->sum_ns += ns;
}

#endif
