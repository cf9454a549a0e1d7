//! Run-queue latency of chosen processes, as bcc's runqlat (`src/bpf/runq.bpf.c`): how long
//! their threads wait for a CPU after becoming runnable, from the `sched_wakeup`,
//! `sched_wakeup_new` and `sched_switch` tracepoints (tp_btf). A thread that waits for a CPU
//! adds that wait to whatever it was about to do — answering a request, for a server.
//!
//! Dropping the [`RunQueue`] detaches the programs.

use std::mem::MaybeUninit;

use latscope_core::Log2Histogram;
use latscope_core::log2::BUCKETS;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::error::StackError;
use crate::skel::runq::{RunqSkel, RunqSkelBuilder};

/// Most processes one session times (the size of the BPF filter map).
pub const MAX_PROCESSES: usize = 64;

/// Attached run-queue probes for a set of processes.
pub struct RunQueue {
    // Field order = drop order: detach first, then close the object.
    _links: Vec<Link>,
    skel: RunqSkel<'static>,
    ncpus: usize,
}

impl RunQueue {
    /// Time the threads of processes `tgids` (at most [`MAX_PROCESSES`]) from now on.
    pub fn start(tgids: &[u32]) -> Result<RunQueue, StackError> {
        if tgids.is_empty() {
            return Err(StackError::Load("no process to time".into()));
        }
        crate::sys::check_caps()?;
        crate::sys::check_btf()?;
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let open = RunqSkelBuilder::default()
            .open(storage)
            .map_err(|e| StackError::Load(format!("open runq: {e}")))?;
        let mut skel = open
            .load()
            .map_err(|e| StackError::Load(format!("load runq: {e}")))?;
        for t in tgids.iter().take(MAX_PROCESSES) {
            skel.maps
                .lsrq_tgids
                .update(&t.to_ne_bytes(), &[1u8], MapFlags::ANY)
                .map_err(|e| StackError::Load(format!("runq filter: {e}")))?;
        }
        let mut links = Vec::new();
        for prog in skel.object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            links.push(
                prog.attach()
                    .map_err(|e| StackError::Load(format!("attach {name}: {e}")))?,
            );
        }
        let ncpus = libbpf_rs::num_possible_cpus()
            .map_err(|e| StackError::System(format!("possible CPUs: {e}")))?;
        Ok(RunQueue {
            _links: links,
            skel,
            ncpus,
        })
    }

    /// The waits recorded since [`RunQueue::start`], summed over CPUs.
    pub fn histogram(&self) -> Result<Log2Histogram, StackError> {
        let per_cpu = self
            .skel
            .maps
            .lsrq_hist
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| StackError::Read(e.to_string()))?
            .unwrap_or_default();
        let mut counts = [0u64; BUCKETS];
        let mut sum = 0u64;
        let o = BUCKETS * 8;
        for v in per_cpu.iter().take(self.ncpus) {
            if v.len() < o + 8 {
                continue;
            }
            for (k, c) in counts.iter_mut().enumerate() {
                *c += u64::from_ne_bytes(v[k * 8..k * 8 + 8].try_into().unwrap_or([0; 8]));
            }
            sum = sum.wrapping_add(u64::from_ne_bytes(v[o..o + 8].try_into().unwrap_or([0; 8])));
        }
        Ok(Log2Histogram::from_buckets(&counts, sum))
    }
}
