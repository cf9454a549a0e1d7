//! latscope's eBPF side: how long received packets wait inside the kernel, at netstacklat's seven
//! hook points, as per-CPU log2 histograms.
//!
//! - [`probes`]: the registry (probe → implementations tried in order, with their semantics).
//! - [`session`]: loads one BPF object per probe sharing one set of maps, attaches, reads maps.
//! - [`report`]: the result model (`latscope stack --json`) and its human rendering.
//! - [`runq`]: run-queue latency of chosen processes (sched tracepoints, as bcc's runqlat).
//! - [`prometheus`]: the histograms as a `prometheus-client` collector (served by latscope-exporter).
//!
//! BPF sources live in `src/bpf/`; `build.rs` compiles them into a skeleton (libbpf-cargo).

#![warn(missing_docs)]

pub mod error;
pub mod probes;
pub mod prometheus;
pub mod report;
pub mod runq;
pub mod session;
mod skel;
pub mod sys;

pub use error::StackError;
pub use probes::{Hook, HookKind, Probe};
pub use session::{Filters, GroupBy, HookMode, ProbeStatus, Session, StackConfig};
