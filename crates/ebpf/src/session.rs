//! A running set of probes: start-up (prerequisites, the map owner, each probe's and transmit
//! boundary's implementation chosen in `choose`, the chosen programs loaded again as one object
//! in `load`), and reading the histograms and counters.
//!
//! Teardown is by ownership: links and objects are file descriptors owned by [`Session`]; dropping
//! it detaches everything, and so does the end of the process however it ends (nothing is pinned).

use std::collections::BTreeMap;
use std::fs::File;

use latscope_core::Log2Histogram;
use latscope_core::model::stack::{Direction, Probe, ProbeStatus, StampStats};
use libbpf_rs::skel::OpenSkel;
use libbpf_rs::{MapCore, MapFlags, PrintLevel};

use crate::choose::{Attaching, nothing_attached};
use crate::config::StackConfig;
use crate::error::StackError;
use crate::load::{
    AttachTo, Attached, Rodata, attach, consolidate, libbpf_print, load, open_skel, take_libbpf_log,
};
use crate::probes::Hook;
use crate::skel::StackSkel;
use crate::sys;

/// One histogram read from the kernel: a probe and a group (ifindex / cgroup id / 0).
#[derive(Clone, Debug, PartialEq)]
pub struct RawHistogram {
    /// The hook point.
    pub probe: Probe,
    /// The group key: ifindex, cgroup id, or 0 without grouping.
    pub group: u64,
    /// The histogram as read from the per-CPU maps, summed.
    pub hist: Log2Histogram,
}

const NSTATS: u32 = 4;

/// A running set of probes. Drop detaches them all.
pub struct Session {
    attached: Vec<Attached>,
    /// Owns the shared maps.
    owner: StackSkel<'static>,
    status: Vec<ProbeStatus>,
    stamp_hook: Option<&'static Hook>,
    _timestamping: Option<sys::RxTimestamping>,
    _cgroup: Option<File>,
    ncpus: usize,
}

/// The transmit stages among `probes`, as the BPF side's `tx_mask` (bit = probe id).
fn stage_mask(probes: &[Probe]) -> u32 {
    probes
        .iter()
        .filter(|p| p.direction() == Direction::Tx)
        .fold(0, |m, p| m | 1 << p.id())
}

/// The object that owns every map: loaded with no program.
fn load_owner(rodata: &Rodata) -> Result<StackSkel<'static>, StackError> {
    let mut open = open_skel().map_err(|e| StackError::Load(e.to_string()))?;
    rodata.apply(&mut open)?;
    for mut prog in open.open_object_mut().progs_mut() {
        prog.set_autoload(false);
    }
    open.load()
        .map_err(|e| StackError::from_load(&e, &take_libbpf_log()))
}

/// Each implementation was attached on its own, which proves it loads here; now the same
/// programs again as one object with one program per shared site. If that object is refused the
/// separate objects simply stay (same samples, more program runs per packet).
fn consolidate_into(
    attached: &mut Vec<Attached>,
    owner: &StackSkel<'static>,
    rodata: Rodata,
    chosen: &[(Option<Probe>, &'static Hook)],
    to: AttachTo<'_>,
) -> Result<(), StackError> {
    let (progs, site_mask) = consolidate(chosen);
    let Ok(skel) = load(owner, &rodata.with_sites(site_mask), &progs) else {
        return Ok(());
    };
    // Detach first: for a moment nothing is attached rather than samples twice (and netfilter
    // allows one BPF hook per priority).
    attached.clear();
    attached.push(attach(skel, &progs, to).map_err(StackError::Load)?);
    Ok(())
}

impl Session {
    /// Check the prerequisites, load and attach. Probes that cannot be attached are reported in
    /// [`Session::status`]; it is an error only when none can.
    pub fn start(cfg: &StackConfig) -> Result<Session, StackError> {
        libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_print)));
        sys::check_btf()?;
        sys::check_caps()?;
        let wanted = cfg.wanted();
        let (rx, tx): (Vec<Probe>, Vec<Probe>) =
            wanted.iter().partition(|p| p.direction() == Direction::Rx);
        let rodata = Rodata::new(cfg).with_tx(stage_mask(&tx));
        // Receive latency is measured from the skb's receive timestamp, which the kernel takes
        // only while some socket asks for it.
        let timestamping = (!rx.is_empty())
            .then(sys::RxTimestamping::enable)
            .transpose()?;
        let cgroup = sys::open_cgroup2_root().ok();
        // Netfilter programs attach in one namespace: --netns's, else latscope's own.
        let netns = match cfg.filters.netns_inode {
            Some(ino) if !tx.is_empty() => sys::netns_file(ino),
            _ => Ok(None),
        };
        let owner = load_owner(&rodata)?;
        let mut att = Attaching {
            owner: &owner,
            rodata,
            to: AttachTo {
                cgroup: cgroup.as_ref(),
                netns: netns.as_ref().map(Option::as_ref).map_err(String::as_str),
            },
            attached: Vec::new(),
            chosen: Vec::new(),
            stamp_hook: None,
        };
        let mut by_probe: BTreeMap<Probe, ProbeStatus> = BTreeMap::new();
        for p in &rx {
            by_probe.insert(*p, att.probe(*p, cfg));
        }
        for st in att.transmit(&tx, cfg) {
            by_probe.insert(st.probe, st);
        }
        let status: Vec<ProbeStatus> = wanted.iter().filter_map(|p| by_probe.remove(p)).collect();
        if !rx.is_empty() && att.stamp_hook.is_none() {
            att.stamper();
        }
        if status.iter().all(|s| !s.available()) {
            return Err(nothing_attached(&status, cfg.mode));
        }
        let Attaching {
            mut attached,
            chosen,
            stamp_hook,
            to,
            ..
        } = att;
        if !cfg.try_all && attached.len() > 1 {
            let available: Vec<Probe> = status
                .iter()
                .filter(|s| s.available())
                .map(|s| s.probe)
                .collect();
            let ro = rodata.with_tx(stage_mask(&available));
            consolidate_into(&mut attached, &owner, ro, &chosen, to)?;
        }
        let ncpus = libbpf_rs::num_possible_cpus().map_err(|e| StackError::Load(e.to_string()))?;
        Ok(Session {
            attached,
            owner,
            status,
            stamp_hook,
            _timestamping: timestamping,
            _cgroup: cgroup,
            ncpus,
        })
    }

    /// What happened to each requested probe.
    pub fn status(&self) -> &[ProbeStatus] {
        &self.status
    }

    /// How many of the requested probes are attached.
    pub fn attached_probes(&self) -> usize {
        self.status.iter().filter(|s| s.available()).count()
    }

    /// The names of the requested probes that could not be attached.
    pub fn unavailable_probes(&self) -> Vec<String> {
        self.status
            .iter()
            .filter(|s| !s.available())
            .map(|s| s.probe.to_string())
            .collect()
    }

    /// The hook that stamps skbs arriving without `skb->tstamp`, if it could be attached.
    pub fn stamp_hook(&self) -> Option<&'static str> {
        self.stamp_hook.map(|h| h.label)
    }

    /// Number of BPF objects attached (one once the probes are consolidated).
    pub fn attached_objects(&self) -> usize {
        self.attached.len()
    }

    /// Read and sum every (probe, group) histogram over CPUs. Cumulative since start.
    pub fn read_histograms(&self) -> Result<Vec<RawHistogram>, StackError> {
        let mut out: BTreeMap<(u32, u64), Log2Histogram> = BTreeMap::new();
        // Without grouping: the per-probe array.
        let arr = &self.owner.maps.lsstk_hista;
        for probe in Probe::ALL {
            if let Some(per_cpu) = arr
                .lookup_percpu(&probe.id().to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| StackError::Read(e.to_string()))?
            {
                let h = self.sum_cpus(&per_cpu);
                if h.count() > 0 {
                    out.entry((probe.id(), 0)).or_default().merge(&h);
                }
            }
        }
        // Grouped: the (probe, group) hash.
        let map = &self.owner.maps.lsstk_hist;
        for key in map.keys() {
            if key.len() < 16 {
                continue;
            }
            let probe_id = u32::from_ne_bytes(le4(&key[0..4]));
            let group = u64::from_ne_bytes(le8(&key[8..16]));
            if let Some(per_cpu) = map
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(|e| StackError::Read(e.to_string()))?
            {
                let h = self.sum_cpus(&per_cpu);
                out.entry((probe_id, group)).or_default().merge(&h);
            }
        }
        Ok(out
            .into_iter()
            .filter_map(|((p, group), hist)| {
                Probe::from_id(p).map(|probe| RawHistogram { probe, group, hist })
            })
            .collect())
    }

    /// Sum one `struct hist_val` over CPUs.
    fn sum_cpus(&self, per_cpu: &[Vec<u8>]) -> Log2Histogram {
        let mut counts = [0u64; latscope_core::log2::BUCKETS];
        let mut sum = 0u64;
        let o = latscope_core::log2::BUCKETS * 8;
        for v in per_cpu.iter().take(self.ncpus) {
            if v.len() < o + 8 {
                continue;
            }
            for (k, c) in counts.iter_mut().enumerate() {
                *c += u64::from_ne_bytes(le8(&v[k * 8..k * 8 + 8]));
            }
            sum = sum.wrapping_add(u64::from_ne_bytes(le8(&v[o..o + 8])));
        }
        Log2Histogram::from_buckets(&counts, sum)
    }

    /// Timestamp counters per probe, cumulative.
    pub fn read_stamp_stats(&self) -> Result<BTreeMap<Probe, StampStats>, StackError> {
        let map = &self.owner.maps.lsstk_stats;
        let mut out = BTreeMap::new();
        for probe in Probe::ALL {
            let mut st = [0u64; NSTATS as usize];
            for (s, slot) in st.iter_mut().enumerate() {
                let idx = probe.id() * NSTATS + s as u32;
                if let Some(per_cpu) = map
                    .lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)
                    .map_err(|e| StackError::Read(e.to_string()))?
                {
                    *slot = per_cpu
                        .iter()
                        .map(|v| u64::from_ne_bytes(le8(&v[0..8])))
                        .sum();
                }
            }
            out.insert(
                probe,
                StampStats {
                    fallback_stamped: st[0],
                    no_stamp: st[1],
                    bad_stamp: st[2],
                    handed_on: st[3],
                },
            );
        }
        Ok(out)
    }
}

fn le4(b: &[u8]) -> [u8; 4] {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    a
}

fn le8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    a
}
