//! Choosing each probe's implementation at start-up: every receive probe's hooks, and every
//! transmit boundary's, are tried in order of preference (as `--hooks` allows); the first that
//! loads and attaches is kept, each refusal is recorded for `--list-probes`.

use std::collections::BTreeMap;

use latscope_core::model::stack::{HookAttempt, HookKind, Prerequisite, Probe, ProbeStatus};

use crate::config::{HookMode, StackConfig};
use crate::error::StackError;
use crate::load::{AttachTo, Attached, Rodata, hook_progs, load_and_attach, masks_for};
use crate::probes::{Boundary, Hook, ProbeHooks, STAMP_HOOKS};
use crate::skel::StackSkel;

/// The error when no probe attached: one line, the distinct reasons each with the hooks it
/// applies to.
pub(crate) fn nothing_attached(status: &[ProbeStatus], mode: HookMode) -> StackError {
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    for r in status.iter().flat_map(|s| s.refused.iter()) {
        match reasons.iter_mut().find(|(e, _)| *e == r.error) {
            Some((_, hooks)) => hooks.push(r.hook.clone()),
            None => reasons.push((r.error.clone(), vec![r.hook.clone()])),
        }
    }
    let mut why = reasons
        .iter()
        .map(|(e, hooks)| format!("{} ({})", e, hooks.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    if mode != HookMode::Auto {
        why.push_str("; try --hooks auto");
    }
    StackError::NothingAttached(why)
}

/// Whether `mode` rules `hook` out among `all` (the hooks of one probe or boundary). `--hooks
/// fentry` keeps a tracepoint where there is no fentry implementation at all (the device layer's
/// boundaries are tracepoints on every kernel).
fn skipped(mode: HookMode, hook: &Hook, all: &[Hook]) -> bool {
    match mode {
        HookMode::Auto => false,
        HookMode::Fentry => {
            hook.kind != HookKind::Fentry && all.iter().any(|h| h.kind == HookKind::Fentry)
        }
        HookMode::Fallback => hook.kind == HookKind::Fentry,
    }
}

/// What start-up made of one transmit boundary.
#[derive(Clone, Debug, Default)]
pub(crate) struct BoundaryStatus {
    /// The implementation attached.
    pub hook: Option<&'static Hook>,
    /// Implementations refused, and why.
    pub refused: Vec<HookAttempt>,
    /// Implementations after the chosen one that would also work (`try_all`).
    pub also: Vec<&'static str>,
}

/// Probes and boundaries being attached one by one: what is attached so far and where.
pub(crate) struct Attaching<'a> {
    pub owner: &'a StackSkel<'static>,
    pub rodata: Rodata,
    pub to: AttachTo<'a>,
    pub attached: Vec<Attached>,
    pub chosen: Vec<(Option<Probe>, &'static Hook)>,
    pub stamp_hook: Option<&'static Hook>,
}

impl Attaching<'_> {
    /// Try `probe`'s hooks in order of preference (as `cfg.mode` allows) and keep the first
    /// that attaches; with `cfg.try_all` the others are attached once, to report them, and
    /// detached.
    pub fn probe(&mut self, probe: Probe, cfg: &StackConfig) -> ProbeStatus {
        let mut st = ProbeStatus {
            probe,
            hook: None,
            hook_kind: None,
            semantics: None,
            refused: Vec::new(),
            also_available: Vec::new(),
        };
        for hook in probe.hooks() {
            if skipped(cfg.mode, hook, probe.hooks()) || (st.hook.is_some() && !cfg.try_all) {
                continue;
            }
            // ip-start on netif_receive_skb is where skbs without a realtime stamp get
            // latscope's: it stamps first, then records (so those read ~0 there).
            let stamps_here =
                probe == Probe::IpStart && matches!(hook.kind, HookKind::TpBtf | HookKind::RawTp);
            let ro = self.rodata.with_sites(masks_for(Some(probe), hook));
            if hook.kind == HookKind::CgroupSkb && self.to.cgroup.is_none() {
                st.refused.push(HookAttempt {
                    hook: hook.label.to_string(),
                    error: "no cgroup v2 hierarchy is mounted".into(),
                    missing: Some(Prerequisite::Cgroup2Mount),
                });
                continue;
            }
            match load_and_attach(self.owner, &ro, &hook_progs(hook), self.to) {
                Ok(a) if st.hook.is_some() => {
                    // Only probing: detach at once.
                    drop(a);
                    st.also_available.push(hook.label.to_string());
                }
                Ok(a) => {
                    self.attached.push(a);
                    self.chosen.push((Some(probe), hook));
                    if stamps_here {
                        self.stamp_hook = Some(hook);
                    }
                    st.hook = Some(hook.label.to_string());
                    st.hook_kind = Some(hook.kind);
                    st.semantics = Some(hook.semantics.to_string());
                }
                Err(e) => st.refused.push(HookAttempt {
                    hook: hook.label.to_string(),
                    error: e,
                    missing: None,
                }),
            }
        }
        st
    }

    /// Without ip-start on netif_receive_skb, a separate stamper goes there (it runs before
    /// every other hook; the fentry ip-start at ip_rcv_core comes later in the path). Best
    /// effort: without it such packets are counted as `no_stamp` or timed from a later stamp.
    pub fn stamper(&mut self) {
        let to = AttachTo {
            cgroup: None,
            ..self.to
        };
        for hook in STAMP_HOOKS.iter() {
            if let Ok(a) = load_and_attach(self.owner, &self.rodata, &hook_progs(hook), to) {
                self.attached.push(a);
                self.chosen.push((None, hook));
                self.stamp_hook = Some(hook);
                return;
            }
        }
    }

    /// Attach the boundaries the transmit `stages` need and say what became of each stage.
    pub fn transmit(&mut self, stages: &[Probe], cfg: &StackConfig) -> Vec<ProbeStatus> {
        let mut bs: BTreeMap<Boundary, BoundaryStatus> = BTreeMap::new();
        for b in boundaries_for(stages) {
            let st = self.boundary(b, cfg);
            bs.insert(b, st);
        }
        stages
            .iter()
            .filter_map(|p| {
                let (from, to) = p.span()?;
                Some(stage_status(*p, bs.get(&from)?, bs.get(&to)?))
            })
            .collect()
    }

    /// Try `b`'s hooks like [`Attaching::probe`] does a probe's.
    pub fn boundary(&mut self, b: Boundary, cfg: &StackConfig) -> BoundaryStatus {
        let mut st = BoundaryStatus::default();
        for hook in b.hooks() {
            if skipped(cfg.mode, hook, b.hooks()) || (st.hook.is_some() && !cfg.try_all) {
                continue;
            }
            match load_and_attach(self.owner, &self.rodata, &hook_progs(hook), self.to) {
                Ok(a) if st.hook.is_some() => {
                    drop(a);
                    st.also.push(hook.label);
                }
                Ok(a) => {
                    self.attached.push(a);
                    self.chosen.push((None, hook));
                    st.hook = Some(hook);
                }
                Err(e) => st.refused.push(HookAttempt {
                    hook: hook.label.to_string(),
                    error: e,
                    missing: None,
                }),
            }
        }
        st
    }
}

/// The boundaries the transmit stages in `probes` need: each stage's two, and the skb's free
/// for the qdisc stage too (a packet segmented in software hands its clock to its segments
/// there), in path order.
pub(crate) fn boundaries_for(probes: &[Probe]) -> Vec<Boundary> {
    let mut need: Vec<Boundary> = Vec::new();
    for p in probes {
        if let Some((from, to)) = p.span() {
            need.extend([from, to]);
        }
        if *p == Probe::Qdisc {
            need.push(Boundary::Freed);
        }
    }
    need.sort();
    need.dedup();
    need
}

/// A transmit stage's status from its two boundaries': available when both are, its hook
/// `from → to`, and every refusal of either.
pub(crate) fn stage_status(
    probe: Probe,
    from: &BoundaryStatus,
    to: &BoundaryStatus,
) -> ProbeStatus {
    let mut refused = from.refused.clone();
    for r in &to.refused {
        if !refused.contains(r) {
            refused.push(r.clone());
        }
    }
    let (hook, hook_kind, semantics) = match (from.hook, to.hook) {
        (Some(a), Some(b)) => (
            Some(format!("{} → {}", a.label, b.label)),
            // A stage is as much of a fallback as either of its ends.
            Some(if a.kind == HookKind::Fentry {
                b.kind
            } else {
                a.kind
            }),
            Some(format!("from {}; to {}", a.semantics, b.semantics)),
        ),
        _ => (None, None, None),
    };
    let also_available = from
        .also
        .iter()
        .map(|h| format!("{h} (start)"))
        .chain(to.also.iter().map(|h| format!("{h} (end)")))
        .collect();
    ProbeStatus {
        probe,
        hook,
        hook_kind,
        semantics,
        refused,
        also_available,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_qdisc_stage_also_needs_the_free_and_boundaries_come_once_in_order() {
        let b = boundaries_for(&[Probe::Driver, Probe::Qdisc, Probe::LocalOut]);
        assert_eq!(
            b,
            [
                Boundary::IpOut,
                Boundary::LocalOutDone,
                Boundary::DevQueue,
                Boundary::DriverStart,
                Boundary::DriverDone,
                Boundary::Freed
            ]
        );
        assert!(boundaries_for(&[Probe::TcpStart]).is_empty());
    }

    #[test]
    fn a_stage_is_available_only_when_both_its_ends_are() {
        let q = &Boundary::DevQueue.hooks()[0];
        let s = &Boundary::DriverStart.hooks()[0];
        let ok = |h: &'static Hook| BoundaryStatus {
            hook: Some(h),
            ..Default::default()
        };
        let st = stage_status(Probe::Qdisc, &ok(q), &ok(s));
        assert_eq!(
            st.hook.as_deref(),
            Some("tp_btf/net_dev_queue → tp_btf/net_dev_start_xmit")
        );
        assert_eq!(st.hook_kind, Some(HookKind::TpBtf));
        let refused = BoundaryStatus {
            hook: None,
            refused: vec![HookAttempt {
                hook: "x".into(),
                error: "no".into(),
                missing: None,
            }],
            also: vec![],
        };
        let st = stage_status(Probe::Qdisc, &ok(q), &refused);
        assert!(!st.available());
        assert_eq!(st.refused.len(), 1);
    }
}
