//! Loading BPF objects and attaching their programs: every object shares the maps of an "owner"
//! object, so each probe's (or transmit boundary's) implementation can be loaded, attached and
//! refused on its own, and the chosen ones loaded again as one object (see [`consolidate`]).

use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Mutex;

use latscope_core::model::stack::{GroupBy, HookKind, Probe};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject, PrintLevel};

use crate::config::StackConfig;
use crate::error::StackError;
use crate::probes::{Hook, NSITES, netfilter_point, program_site};
use crate::skel::{OpenStackSkel, StackSkel, StackSkelBuilder};
use crate::sys;

/// Last libbpf messages, to explain a refused load in one line.
static LIBBPF_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn libbpf_print(level: PrintLevel, msg: String) {
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

pub(crate) fn take_libbpf_log() -> Vec<String> {
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
/// bytes (a pointer) and is leaked on purpose so the skeleton can be owned by the session; the
/// kernel object itself is destroyed when the skeleton is dropped.
fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}

/// One loaded object and what attaches its programs. Dropping it detaches them.
pub(crate) struct Attached {
    // Field order = drop order: detach first, then close the object.
    _links: Vec<Link>,
    /// Netfilter links (created with the raw syscall, possibly in another namespace).
    _nf_links: Vec<OwnedFd>,
    _skel: StackSkel<'static>,
}

/// Where programs attach besides their own section's target.
#[derive(Clone, Copy)]
pub(crate) struct AttachTo<'a> {
    /// The cgroup v2 root (cgroup_skb programs).
    pub cgroup: Option<&'a File>,
    /// The network namespace of the netfilter programs: `None` latscope's own; an `Err` when
    /// the namespace asked for cannot be entered (netfilter hooks are then refused, with it).
    pub netns: Result<Option<&'a File>, &'a str>,
}

/// `addr` as the BPF filter compares it: 16 bytes in network order, IPv4 v4-mapped, as four
/// words read from memory (native byte order). `None` → filter off.
pub(crate) fn addr_words(addr: Option<std::net::IpAddr>) -> (u32, [u32; 4]) {
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

/// Values every object's rodata gets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rodata {
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
    /// Transmit stages recorded (bit = probe id).
    tx_mask: u32,
    /// Calibration: every program returns at once.
    empty: u32,
}

impl Rodata {
    pub(crate) fn new(cfg: &StackConfig) -> Self {
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
            tx_mask: 0,
            empty: u32::from(cfg.empty_programs),
            sample_every: cfg.sample_every,
        }
    }

    /// The same, with the shared sites serving `site_mask`.
    pub(crate) fn with_sites(self, site_mask: [u32; NSITES]) -> Self {
        Rodata { site_mask, ..self }
    }

    /// The same, recording the transmit stages of `tx_mask`.
    pub(crate) fn with_tx(self, tx_mask: u32) -> Self {
        Rodata { tx_mask, ..self }
    }

    pub(crate) fn apply(&self, open: &mut OpenStackSkel<'static>) -> Result<(), StackError> {
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
        ro.tx_mask = self.tx_mask;
        ro.empty = self.empty;
        Ok(())
    }
}

pub(crate) fn open_skel() -> Result<OpenStackSkel<'static>, libbpf_rs::Error> {
    StackSkelBuilder::default().open(object_storage())
}

/// A program to load and how to attach it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prog {
    name: &'static str,
    kind: HookKind,
}

pub(crate) fn hook_progs(hook: &Hook) -> Vec<Prog> {
    hook.programs
        .iter()
        .map(|&name| Prog {
            name,
            kind: hook.kind,
        })
        .collect()
}

/// site_mask for `hook` serving `probe` alone (`None`: the stamper, which serves no probe).
pub(crate) fn masks_for(probe: Option<Probe>, hook: &Hook) -> [u32; NSITES] {
    let mut m = [0; NSITES];
    if let Some(p) = probe {
        for site in hook.programs.iter().filter_map(|n| program_site(n)) {
            m[site] |= 1 << p.id();
        }
    }
    m
}

/// Why loading failed, in the words of the one thing the user can act on.
fn load_error(e: &libbpf_rs::Error, progs: &[Prog]) -> String {
    let log = take_libbpf_log();
    if let Some(target) = missing_btf_target(&log) {
        return format!(
            "this kernel has no {target} to hook (absent from its BTF: inlined, renamed or too old)"
        );
    }
    let why = explain(e, &log).replace(": failed to load BPF skeleton 'stack_bpf'", "");
    let any = |k: HookKind| progs.iter().any(|p| p.kind == k);
    if any(HookKind::Fentry) && why.contains("EPERM") {
        format!(
            "the kernel refused to load it ({why}); fentry/fexit need BPF trampolines, which this kernel does not allow"
        )
    } else if any(HookKind::Netfilter) && (why.contains("EINVAL") || why.contains("EOPNOTSUPP")) {
        format!(
            "the kernel refused a netfilter program ({why}): they need Linux 6.4 or later with CONFIG_NETFILTER_BPF_LINK"
        )
    } else {
        format!("load: {why}")
    }
}

/// Open an object with only `progs` enabled, sharing `owner`'s maps, and load it.
pub(crate) fn load(
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
            (&mut m.lsstk_tx, o.lsstk_tx.as_fd()),
            (&mut m.lsstk_txgso, o.lsstk_txgso.as_fd()),
            (&mut m.lsstk_txsk, o.lsstk_txsk.as_fd()),
            (&mut m.lsstk_txzero, o.lsstk_txzero.as_fd()),
        ];
        for (map, fd) in shared {
            map.reuse_fd(fd).map_err(|e| e.to_string())?;
        }
    }
    for mut prog in open.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        prog.set_autoload(progs.iter().any(|p| p.name == name));
    }
    open.load().map_err(|e| load_error(&e, progs))
}

/// Attach one loaded program as its kind says: a link, or netfilter links.
fn attach_one(
    prog: &libbpf_rs::ProgramMut<'_>,
    p: &Prog,
    to: AttachTo<'_>,
    links: &mut Vec<Link>,
    nf: &mut Vec<OwnedFd>,
) -> Result<(), String> {
    let link = match p.kind {
        HookKind::CgroupSkb => {
            let cg = to
                .cgroup
                .ok_or_else(|| "no cgroup v2 hierarchy is mounted".to_string())?;
            prog.attach_cgroup(cg.as_raw_fd())
        }
        HookKind::Netfilter => {
            let (hooknum, priority) = netfilter_point(p.name)
                .ok_or_else(|| format!("{}: no netfilter hook is known for it", p.name))?;
            let netns = to.netns.map_err(str::to_string)?;
            let fd = prog.as_fd().as_raw_fd();
            nf.extend(sys::netfilter_links(fd, hooknum, priority, netns)?);
            return Ok(());
        }
        HookKind::Fentry | HookKind::TpBtf | HookKind::RawTp | HookKind::Kprobe => prog.attach(),
    };
    let l = link.map_err(|e| format!("attach {}: {}", p.name, explain(&e, &take_libbpf_log())))?;
    links.push(l);
    Ok(())
}

/// Attach the loaded `progs` of `skel`.
pub(crate) fn attach(
    mut skel: StackSkel<'static>,
    progs: &[Prog],
    to: AttachTo<'_>,
) -> Result<Attached, String> {
    let mut links = Vec::new();
    let mut nf = Vec::new();
    for prog in skel.object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if let Some(p) = progs.iter().find(|p| p.name == name) {
            attach_one(&prog, p, to, &mut links, &mut nf)?;
        }
    }
    Ok(Attached {
        _links: links,
        _nf_links: nf,
        _skel: skel,
    })
}

/// What the kernel or the system lacks for `progs`, known before loading them.
fn unmet(progs: &[Prog], to: AttachTo<'_>) -> Option<String> {
    let any = |k: HookKind| progs.iter().any(|p| p.kind == k);
    if any(HookKind::CgroupSkb) && !cast_to_kern_ctx() {
        return Some(
            "needs the bpf_cast_to_kern_ctx kfunc (Linux 6.2 and later), which this kernel lacks"
                .into(),
        );
    }
    if any(HookKind::Kprobe) && !sys::has_kprobes() {
        return Some("this kernel has no kprobes (CONFIG_KPROBES is off)".into());
    }
    if any(HookKind::Netfilter) {
        if let Err(e) = to.netns {
            return Some(e.to_string());
        }
    }
    None
}

pub(crate) fn load_and_attach(
    owner: &StackSkel<'static>,
    rodata: &Rodata,
    progs: &[Prog],
    to: AttachTo<'_>,
) -> Result<Attached, String> {
    if let Some(why) = unmet(progs, to) {
        return Err(why);
    }
    attach(load(owner, rodata, progs)?, progs, to)
}

/// The cgroup_skb programs read the kernel's skb and socket through `bpf_cast_to_kern_ctx`.
fn cast_to_kern_ctx() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| sys::has_kfunc("bpf_cast_to_kern_ctx"))
}

/// The final set of programs once every implementation is known: programs of the chosen hooks,
/// one per shared site (the site's mask gathers the probes it serves), and each transmit
/// boundary's once.
pub(crate) fn consolidate(chosen: &[(Option<Probe>, &'static Hook)]) -> (Vec<Prog>, [u32; NSITES]) {
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
                None if progs.iter().any(|q| q.name == p.name) => {}
                None => progs.push(p),
            }
        }
    }
    (progs, masks)
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
