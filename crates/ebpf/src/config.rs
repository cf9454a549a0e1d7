//! What to load: the probes or directions asked for, the kinds of implementation allowed, the
//! in-kernel filters and grouping. Below `choose`, `load` and `session`, which all read it.

use latscope_core::model::stack::{Directions, Filters, GroupBy, Probe};

/// Which implementations to consider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookMode {
    /// fentry/fexit where the kernel allows, else the fallbacks (the default).
    #[default]
    Auto,
    /// fentry/fexit only (fails where the kernel refuses them); the transmit path's device
    /// layer, which has only tracepoints, keeps them.
    Fentry,
    /// Tracepoint / cgroup_skb / netfilter / kprobe fallbacks only.
    Fallback,
}

/// What to load.
#[derive(Clone, Debug, Default)]
pub struct StackConfig {
    /// Probes to attach (empty = every probe of `direction`).
    pub probes: Vec<Probe>,
    /// The directions attached when `probes` is empty.
    pub direction: Directions,
    /// Which kinds of implementation may be used.
    pub mode: HookMode,
    /// Filters applied in the kernel.
    pub filters: Filters,
    /// How histograms are split.
    pub group_by: GroupBy,
    /// Also try the implementations after the chosen one (and detach them again), to report
    /// everything the kernel allows (`--list-probes`).
    pub try_all: bool,
    /// Time one packet in N at each probe (0 and 1: every packet).
    pub sample_every: u32,
    /// Calibration for the overhead benches: the same programs on the same hooks, each
    /// returning at once (nothing is recorded).
    pub empty_programs: bool,
}

impl StackConfig {
    /// The probes asked for: `probes`, or every probe of `direction`.
    pub fn wanted(&self) -> Vec<Probe> {
        if self.probes.is_empty() {
            self.direction.probes()
        } else {
            self.probes.clone()
        }
    }
}
