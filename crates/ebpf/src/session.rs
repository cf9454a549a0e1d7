//! Loading, probing and attaching: one BPF object per probe, all sharing the maps of an "owner"
//! object, so each probe's implementation can be chosen (and can fail) on its own.
//!
//! Teardown is by ownership: links and objects are file descriptors owned by [`Session`]; dropping
//! it detaches everything, and so does the end of the process however it ends (nothing is pinned).

use std::collections::BTreeMap;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Mutex;

use latscope_core::Log2Histogram;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, PrintLevel};

use crate::error::StackError;
use crate::probes::{Hook, HookKind, NSITES, Probe, STAMP_HOOKS, program_site};
use crate::skel::{OpenStackSkel, StackSkel, StackSkelBuilder};
use crate::sys;

/// Which implementations to consider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookMode {
    /// fentry/fexit where the kernel allows, else the fallbacks (the default).
    #[default]
    Auto,
    /// fentry/fexit only (fails where the kernel refuses them).
    Fentry,
    /// Tracepoint / cgroup_skb fallbacks only.
    Fallback,
}

/// How samples are split into histograms.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    #[default]
    /// One histogram per probe.
    None,
    /// One histogram per probe and receiving interface.
    Interface,
    /// One histogram per probe and cgroup (v2) of the reading process.
    Cgroup,
}

/// Filters applied in the kernel; `None` = no filter.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Filters {
    /// Receiving interface index (skb_iif).
    pub ifindex: Option<u32>,
    /// Network namespace inode (as in `ls -i /proc/PID/ns/net`).
    pub netns_inode: Option<u64>,
    /// Reading process (tgid); socket-read probes only.
    pub tgid: Option<u32>,
    /// cgroup v2 id (inode of the cgroup directory).
    pub cgroup_id: Option<u64>,
    /// Local (destination) port.
    pub local_port: Option<u16>,
    /// Remote (source) port.
    pub remote_port: Option<u16>,
    /// Local (destination) address; an IPv4 address also matches its v4-mapped IPv6 form on
    /// dual-stack sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_addr: Option<std::net::IpAddr>,
    /// Remote (source) address, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<std::net::IpAddr>,
}

/// `addr` as the BPF filter compares it: 16 bytes in network order, IPv4 v4-mapped, as four
/// words read from memory (native byte order). `None` → filter off.
fn addr_words(addr: Option<std::net::IpAddr>) -> (u32, [u32; 4]) {
    let Some(a) = addr else {
        return (0, [0; 4]);
    };
    let octets = match a {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    };
    let mut words = [0u32; 4];
    for (w, chunk) in words.iter_mut().zip(octets.chunks_exact(4)) {
        *w = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    (1, words)
}

/// What to load.
#[derive(Clone, Debug, Default)]
pub struct StackConfig {
    /// Probes to attach (empty = all).
    pub probes: Vec<Probe>,
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
}

/// Why one implementation could not be used.
#[derive(
    Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct HookAttempt {
    /// e.g. `fentry/tcp_v4_rcv+tcp_v6_rcv`.
    pub hook: String,
    /// Why it was refused (the loader or kernel error).
    pub error: String,
    /// Set when the kernel could run the hook but the system lacks something it needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<Prerequisite>,
}

/// Something a hook needs besides the kernel's features; a probe refused for it could work
/// on this kernel once it is there.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Prerequisite {
    /// A mounted cgroup v2 hierarchy: cgroup_skb programs attach to its root. `ip netns exec`
    /// mounts a fresh /sys without it.
    Cgroup2Mount,
}

/// The outcome of start-up for one probe.
#[derive(
    Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ProbeStatus {
    /// The hook point.
    pub probe: Probe,
    /// The implementation in use, if any.
    pub hook: Option<String>,
    /// The kind of the implementation in use, if any.
    pub hook_kind: Option<crate::probes::HookKind>,
    /// Where "now" is taken with that implementation.
    pub semantics: Option<String>,
    /// Implementations that were refused, and why.
    pub refused: Vec<HookAttempt>,
    /// Implementations after the chosen one that would also work (only with `try_all`).
    pub also_available: Vec<String>,
}

impl ProbeStatus {
    /// Whether an implementation of the probe is attached.
    pub fn available(&self) -> bool {
        self.hook.is_some()
    }

    /// What the system lacks for an implementation the kernel could run, when the probe is
    /// unavailable for that reason rather than for the kernel's.
    pub fn missing(&self) -> Option<Prerequisite> {
        if self.available() {
            return None;
        }
        self.refused.iter().find_map(|r| r.missing)
    }
}

/// Counters the BPF side keeps per probe about timestamps.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct StampStats {
    /// Samples whose skb had no `skb->tstamp`; latency measured from latscope's earliest hook.
    pub fallback_stamped: u64,
    /// Samples dropped: no timestamp at all.
    pub no_stamp: u64,
    /// Samples dropped: timestamp in the future (clock stepped?).
    pub bad_stamp: u64,
}

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

const NSTATS: u32 = 3;

/// Last libbpf messages, to explain a refused load in one line.
static LIBBPF_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn libbpf_print(level: PrintLevel, msg: String) {
    if std::env::var_os("LATSCOPE_BPF_DEBUG").is_some() {
        // Not eprint!: it panics when stderr is gone (`2>&1 | head`), and a panic in this
        // callback, called from C, aborts.
        use std::io::Write;
        let _ = std::io::stderr().write_all(msg.as_bytes());
    }
    if level == PrintLevel::Debug {
        return;
    }
    if let Ok(mut log) = LIBBPF_LOG.lock() {
        if log.len() >= 64 {
            log.remove(0);
        }
        log.push(msg.trim_end().to_string());
    }
}

fn take_libbpf_log() -> Vec<String> {
    LIBBPF_LOG
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default()
}

/// The hook target libbpf could not find in the kernel's BTF, if that is why a load failed.
fn missing_btf_target(log: &[String]) -> Option<&str> {
    log.iter().rev().find_map(|l| {
        let rest = l.split("failed to find kernel BTF type ID of '").nth(1)?;
        rest.split('\'').next()
    })
}

/// The most telling libbpf line for an error (the verifier's last words, or a failed attach).
fn explain(err: &libbpf_rs::Error, log: &[String]) -> String {
    let interesting = log
        .iter()
        .rev()
        .find(|l| l.contains("failed to attach") || l.contains("failed to load"));
    match interesting {
        Some(l) => format!("{err}: {}", l.trim_start_matches("libbpf: ")),
        None => err.to_string(),
    }
}

/// Storage for one object. The skeleton borrows it for as long as the object lives; it is a few
/// bytes (a pointer) and is leaked on purpose so the skeleton can be owned by [`Session`]; the
/// kernel object itself is destroyed when the skeleton is dropped.
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

struct Attached {
    // Field order = drop order: detach first, then close the object.
    _links: Vec<Link>,
    _skel: StackSkel<'static>,
}

/// A running set of probes. Drop detaches them all.
pub struct Session {
    attached: Vec<Attached>,
    /// Owns the shared maps.
    owner: StackSkel<'static>,
    status: Vec<ProbeStatus>,
    stamp_hook: Option<&'static Hook>,
    _timestamping: sys::RxTimestamping,
    _cgroup: Option<File>,
    ncpus: usize,
}

/// Values every object's rodata gets.
#[derive(Clone, Copy, Debug)]
struct Rodata {
    tai_offset_ns: u64,
    mono_offset_ns: u64,
    filter_ifindex: u32,
    filter_netns: u64,
    filter_tgid: u32,
    filter_cgroup: u64,
    filter_lport: u16,
    filter_rport: u16,
    filter_laddr: (u32, [u32; 4]),
    filter_raddr: (u32, [u32; 4]),
    group_by: u32,
    sample_every: u32,
    /// Probes each shared site serves (bit = probe id); see [`crate::probes::program_site`].
    site_mask: [u32; NSITES],
}

impl Rodata {
    fn new(cfg: &StackConfig) -> Self {
        let (tai, mono) = sys::clock_offsets_ns();
        let f = &cfg.filters;
        Rodata {
            tai_offset_ns: tai,
            mono_offset_ns: mono,
            filter_ifindex: f.ifindex.unwrap_or(0),
            filter_netns: f.netns_inode.unwrap_or(0),
            filter_tgid: f.tgid.unwrap_or(0),
            filter_cgroup: f.cgroup_id.unwrap_or(0),
            filter_lport: f.local_port.unwrap_or(0),
            filter_rport: f.remote_port.unwrap_or(0),
            filter_laddr: addr_words(f.local_addr),
            filter_raddr: addr_words(f.remote_addr),
            group_by: match cfg.group_by {
                GroupBy::None => 0,
                GroupBy::Interface => 1,
                GroupBy::Cgroup => 2,
            },
            site_mask: [0; NSITES],
            sample_every: cfg.sample_every,
        }
    }

    fn apply(&self, open: &mut OpenStackSkel<'static>) -> Result<(), StackError> {
        let ro = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| StackError::Load("BPF object has no mmapable .rodata".into()))?;
        ro.tai_offset_ns = self.tai_offset_ns;
        ro.mono_offset_ns = self.mono_offset_ns;
        ro.filter_ifindex = self.filter_ifindex;
        ro.filter_netns = self.filter_netns;
        ro.filter_tgid = self.filter_tgid;
        ro.filter_cgroup = self.filter_cgroup;
        ro.filter_lport = self.filter_lport;
        ro.filter_rport = self.filter_rport;
        (ro.filter_laddr_on, ro.filter_laddr) = self.filter_laddr;
        (ro.filter_raddr_on, ro.filter_raddr) = self.filter_raddr;
        ro.group_by = self.group_by;
        ro.site_mask = self.site_mask;
        ro.sample_every = self.sample_every;
        Ok(())
    }
}

fn open_skel() -> Result<OpenStackSkel<'static>, libbpf_rs::Error> {
    StackSkelBuilder::default().open(object_storage())
}

/// A program to load and how to attach it.
#[derive(Clone, Copy, Debug)]
struct Prog {
    name: &'static str,
    kind: HookKind,
}

fn hook_progs(hook: &Hook) -> Vec<Prog> {
    hook.programs
        .iter()
        .map(|&name| Prog {
            name,
            kind: hook.kind,
        })
        .collect()
}

/// site_mask for `hook` serving `probe` alone (`None`: the stamper, which serves no probe).
fn masks_for(probe: Option<Probe>, hook: &Hook) -> [u32; NSITES] {
    let mut m = [0; NSITES];
    if let Some(p) = probe {
        for site in hook.programs.iter().filter_map(|n| program_site(n)) {
            m[site] |= 1 << p.id();
        }
    }
    m
}

/// Open an object with only `progs` enabled, sharing `owner`'s maps, and load it.
fn load(
    owner: &StackSkel<'static>,
    rodata: &Rodata,
    progs: &[Prog],
) -> Result<StackSkel<'static>, String> {
    let _ = take_libbpf_log();
    let mut open = open_skel().map_err(|e| e.to_string())?;
    rodata.apply(&mut open).map_err(|e| e.to_string())?;
    {
        let m = &mut open.maps;
        let o = &owner.maps;
        let shared = [
            (&mut m.lsstk_hist, o.lsstk_hist.as_fd()),
            (&mut m.lsstk_hista, o.lsstk_hista.as_fd()),
            (&mut m.lsstk_zero, o.lsstk_zero.as_fd()),
            (&mut m.lsstk_stats, o.lsstk_stats.as_fd()),
            (&mut m.lsstk_stamps, o.lsstk_stamps.as_fd()),
            (&mut m.lsstk_udpq, o.lsstk_udpq.as_fd()),
            (&mut m.lsstk_udpfifo, o.lsstk_udpfifo.as_fd()),
            (&mut m.lsstk_fzero, o.lsstk_fzero.as_fd()),
            (&mut m.lsstk_scratch, o.lsstk_scratch.as_fd()),
            (&mut m.lsstk_sample, o.lsstk_sample.as_fd()),
        ];
        for (map, fd) in shared {
            map.reuse_fd(fd).map_err(|e| e.to_string())?;
        }
    }
    for mut prog in open.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        prog.set_autoload(progs.iter().any(|p| p.name == name));
    }
    open.load().map_err(|e| {
        let log = take_libbpf_log();
        if let Some(target) = missing_btf_target(&log) {
            return format!(
                "this kernel has no {target} to hook (absent from its BTF: inlined, renamed or too old)"
            );
        }
        let why = explain(&e, &log).replace(": failed to load BPF skeleton 'stack_bpf'", "");
        if progs.iter().any(|p| p.kind == HookKind::Fentry) && why.contains("EPERM") {
            format!("the kernel refused to load it ({why}); fentry/fexit need BPF trampolines, which this kernel does not allow")
        } else {
            format!("load: {why}")
        }
    })
}

/// Attach the loaded `progs` of `skel`.
fn attach(
    mut skel: StackSkel<'static>,
    progs: &[Prog],
    cgroup: Option<&File>,
) -> Result<Attached, String> {
    let mut links = Vec::new();
    for prog in skel.object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let Some(p) = progs.iter().find(|p| p.name == name) else {
            continue;
        };
        let link = if p.kind == HookKind::CgroupSkb {
            let cg = cgroup.ok_or_else(|| "no cgroup v2 hierarchy is mounted".to_string())?;
            prog.attach_cgroup(cg.as_raw_fd())
        } else {
            prog.attach()
        };
        match link {
            Ok(l) => links.push(l),
            Err(e) => {
                return Err(format!(
                    "attach {name}: {}",
                    explain(&e, &take_libbpf_log())
                ));
            }
        }
    }
    Ok(Attached {
        _links: links,
        _skel: skel,
    })
}

fn load_and_attach(
    owner: &StackSkel<'static>,
    rodata: &Rodata,
    progs: &[Prog],
    cgroup: Option<&File>,
) -> Result<Attached, String> {
    if progs.iter().any(|p| p.kind == HookKind::CgroupSkb) && !cast_to_kern_ctx() {
        return Err(
            "needs the bpf_cast_to_kern_ctx kfunc (Linux 6.2 and later), which this kernel lacks"
                .into(),
        );
    }
    attach(load(owner, rodata, progs)?, progs, cgroup)
}

/// The cgroup_skb programs read the kernel's skb and socket through `bpf_cast_to_kern_ctx`.
fn cast_to_kern_ctx() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| sys::has_kfunc("bpf_cast_to_kern_ctx"))
}

/// The final set of programs once every probe's implementation is known: programs of the chosen
/// hooks, one per shared site (the site's mask gathers the probes it serves).
fn consolidate(chosen: &[(Option<Probe>, &'static Hook)]) -> (Vec<Prog>, [u32; NSITES]) {
    let mut progs: Vec<Prog> = Vec::new();
    let mut masks = [0u32; NSITES];
    let mut site_taken = [false; NSITES];
    for (probe, hook) in chosen {
        let m = masks_for(*probe, hook);
        for (acc, bit) in masks.iter_mut().zip(m) {
            *acc |= bit;
        }
        for p in hook_progs(hook) {
            match program_site(p.name) {
                Some(site) if site_taken[site] => {}
                Some(site) => {
                    site_taken[site] = true;
                    progs.push(p);
                }
                None => progs.push(p),
            }
        }
    }
    (progs, masks)
}

/// The error when no probe attached: one line, the distinct reasons each with the hooks it
/// applies to.
fn nothing_attached(status: &[ProbeStatus], mode: HookMode) -> StackError {
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

/// Probes being attached one by one: what is attached so far and where.
struct Attaching<'a> {
    owner: &'a StackSkel<'static>,
    rodata: Rodata,
    cgroup: Option<&'a File>,
    attached: Vec<Attached>,
    chosen: Vec<(Option<Probe>, &'static Hook)>,
    stamp_hook: Option<&'static Hook>,
}

impl Attaching<'_> {
    /// Try `probe`'s hooks in order of preference (as `cfg.mode` allows) and keep the first
    /// that attaches; with `cfg.try_all` the others are attached once, to report them, and
    /// detached.
    fn probe(&mut self, probe: Probe, cfg: &StackConfig) -> ProbeStatus {
        let mut st = ProbeStatus {
            probe,
            hook: None,
            hook_kind: None,
            semantics: None,
            refused: Vec::new(),
            also_available: Vec::new(),
        };
        for hook in probe.hooks() {
            let skip = match cfg.mode {
                HookMode::Auto => false,
                HookMode::Fentry => hook.kind != HookKind::Fentry,
                HookMode::Fallback => hook.kind == HookKind::Fentry,
            };
            if skip || (st.hook.is_some() && !cfg.try_all) {
                continue;
            }
            // ip-start on netif_receive_skb is where skbs without a realtime stamp get
            // latscope's: it stamps first, then records (so those read ~0 there).
            let stamps_here =
                probe == Probe::IpStart && matches!(hook.kind, HookKind::TpBtf | HookKind::RawTp);
            let ro = Rodata {
                site_mask: masks_for(Some(probe), hook),
                ..self.rodata
            };
            if hook.kind == HookKind::CgroupSkb && self.cgroup.is_none() {
                st.refused.push(HookAttempt {
                    hook: hook.label.to_string(),
                    error: "no cgroup v2 hierarchy is mounted".into(),
                    missing: Some(Prerequisite::Cgroup2Mount),
                });
                continue;
            }
            match load_and_attach(self.owner, &ro, &hook_progs(hook), self.cgroup) {
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
}

impl Session {
    /// Check the prerequisites, load and attach. Probes that cannot be attached are reported in
    /// [`Session::status`]; it is an error only when none can.
    pub fn start(cfg: &StackConfig) -> Result<Session, StackError> {
        libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_print)));
        sys::check_btf()?;
        sys::check_caps()?;
        let rodata = Rodata::new(cfg);
        let timestamping = sys::RxTimestamping::enable()?;
        let cgroup = sys::open_cgroup2_root().ok();

        let mut open = open_skel().map_err(|e| StackError::Load(e.to_string()))?;
        rodata.apply(&mut open)?;
        for mut prog in open.open_object_mut().progs_mut() {
            prog.set_autoload(false);
        }
        let owner = open
            .load()
            .map_err(|e| StackError::from_load(&e, &take_libbpf_log()))?;

        let wanted: Vec<Probe> = if cfg.probes.is_empty() {
            Probe::ALL.to_vec()
        } else {
            cfg.probes.clone()
        };
        let mut att = Attaching {
            owner: &owner,
            rodata,
            cgroup: cgroup.as_ref(),
            attached: Vec::new(),
            chosen: Vec::new(),
            stamp_hook: None,
        };
        let status: Vec<ProbeStatus> = wanted.into_iter().map(|p| att.probe(p, cfg)).collect();
        let Attaching {
            mut attached,
            mut chosen,
            mut stamp_hook,
            ..
        } = att;
        // Without ip-start on netif_receive_skb, a separate stamper goes there (it runs before
        // every other hook; the fentry ip-start at ip_rcv_core comes later in the path). Best
        // effort: without it such packets are counted as `no_stamp` or timed from a later stamp.
        if stamp_hook.is_none() {
            for hook in STAMP_HOOKS.iter() {
                if let Ok(a) = load_and_attach(&owner, &rodata, &hook_progs(hook), None) {
                    attached.push(a);
                    chosen.push((None, hook));
                    stamp_hook = Some(hook);
                    break;
                }
            }
        }
        if status.iter().all(|s| !s.available()) {
            return Err(nothing_attached(&status, cfg.mode));
        }
        // Each probe was attached on its own, which proves it loads here; now the same programs
        // again as one object with one program per shared site. If that object is refused the
        // per-probe objects simply stay (same samples, more program runs per packet).
        if !cfg.try_all && attached.len() > 1 {
            let (progs, site_mask) = consolidate(&chosen);
            let ro = Rodata {
                site_mask,
                ..rodata
            };
            if let Ok(skel) = load(&owner, &ro, &progs) {
                // Detach first: for a moment nothing is attached rather than samples twice.
                attached.clear();
                let one = attach(skel, &progs, cgroup.as_ref()).map_err(StackError::Load)?;
                attached.push(one);
            }
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

#[cfg(test)]
mod tests {
    use super::addr_words;

    /// The words lie in memory exactly as the kernel's address bytes do (network order), with
    /// IPv4 in its v4-mapped form, which is what the BPF side compares them with.
    #[test]
    fn address_filters_are_v4_mapped_bytes_in_network_order() {
        assert_eq!(addr_words(None), (0, [0; 4]));
        let (on, w) = addr_words(Some("10.1.2.3".parse().unwrap()));
        assert_eq!(on, 1);
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_ne_bytes()).collect();
        assert_eq!(
            bytes,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
        let (_, w6) = addr_words(Some("::ffff:10.1.2.3".parse().unwrap()));
        assert_eq!(
            w6, w,
            "a dual-stack socket's v4-mapped address is the same filter"
        );
        let (_, w6) = addr_words(Some("fd00::1".parse().unwrap()));
        let bytes: Vec<u8> = w6.iter().flat_map(|x| x.to_ne_bytes()).collect();
        assert_eq!(bytes[..2], [0xfd, 0]);
        assert_eq!(bytes[15], 1);
    }
}
