//! latscope's eBPF side: how long received packets wait inside the kernel, at netstacklat's seven
//! hook points, and how long transmitted packets spend in each of eight stages on their way out,
//! as per-CPU log2 histograms.
//!
//! - [`probes`]: the registry (probe or transmit boundary → implementations tried in order, with
//!   their semantics).
//! - [`session`]: start-up and reading the maps; `choose` picks each implementation, `load`
//!   loads objects sharing one set of maps and attaches their programs.
//! - `config`: what to load ([`StackConfig`], [`HookMode`]), below the three that read it.
//! - [`runq`]: run-queue latency of chosen processes (sched tracepoints, as bcc's runqlat).
//! - [`prometheus`]: the histograms as a `prometheus-client` collector (served by latscope-exporter).
//!
//! What is measured — the probes, their status, the histograms — is the result model,
//! `latscope_core::model::stack` (rendered by `latscope_core::render::stack`): this crate fills it.
//!
//! BPF sources live in `src/bpf/`; `build.rs` compiles them into a skeleton (libbpf-cargo).

#![warn(missing_docs)]

mod choose;
mod config;
pub mod error;
mod load;
pub mod probes;
pub mod prometheus;
pub mod runq;
pub mod session;
mod skel;
pub mod sys;

pub use config::{HookMode, StackConfig};
pub use error::StackError;
pub use probes::{Boundary, Hook, ProbeHooks};
pub use session::Session;
