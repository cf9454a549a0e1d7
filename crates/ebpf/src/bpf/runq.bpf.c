// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Run-queue latency of chosen processes, as bcc's runqlat: the time from a task becoming
 * runnable (sched_wakeup / sched_wakeup_new, or being preempted while still runnable at
 * sched_switch) to it getting a CPU (sched_switch to it). Only threads whose process (tgid) is in
 * `runq_tgids` are timed. One log2 histogram, per CPU (log2.bpf.h). Program names start with
 * "lsrq_".
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "log2.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define TASK_RUNNING 0

/* Processes to time (tgid → 1), filled by user space before attaching. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u8);
} lsrq_tgids SEC(".maps");

/* Thread id → when it became runnable. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} lsrq_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct hist_val);
} lsrq_hist SEC(".maps");

static __always_inline void enqueued(struct task_struct *p)
{
	u32 tgid = p->tgid;
	if (!bpf_map_lookup_elem(&lsrq_tgids, &tgid))
		return;
	u32 pid = p->pid;
	u64 ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&lsrq_start, &pid, &ts, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(lsrq_wakeup, struct task_struct *p)
{
	enqueued(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(lsrq_wakeup_new, struct task_struct *p)
{
	enqueued(p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(lsrq_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	/* Preempted while runnable: it waits in the run queue from now. */
	if (prev_state == TASK_RUNNING)
		enqueued(prev);
	u32 pid = next->pid;
	u64 *tsp = bpf_map_lookup_elem(&lsrq_start, &pid);
	if (!tsp)
		return 0;
	u64 delta = bpf_ktime_get_ns() - *tsp;
	bpf_map_delete_elem(&lsrq_start, &pid);
	u32 zero = 0;
	struct hist_val *h = bpf_map_lookup_elem(&lsrq_hist, &zero);
	if (!h)
		return 0;
	hist_val_add(h, delta);
	return 0;
}
