//! Live capture for latscope: an AF_PACKET TPACKET_V3 ring ([`ring`]) with the tcpdump filter
//! compiled to classic BPF by libpcap and attached in the kernel ([`filter`]). Used by
//! `latscope capture` (writes pcap), `latscope analyze --live` (feeds the analyzer directly) and
//! `latscope diagnose` (captures the target's port).
//!
//! The crate knows nothing of the command line: it takes a [`CaptureConfig`], hands each packet
//! to a callback and returns [`CaptureStats`]; what goes wrong is a [`CaptureError`].

#![warn(missing_docs)]

mod error;
mod filter;
pub mod fuzzing;
mod ring;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_wire::LinkType;

pub use error::CaptureError;
pub use filter::FilterError;
use filter::{FilterLink, Outgoing, Program};
pub use ring::KernelStats;
use ring::Ring;

/// What to capture.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// Interface name, or "any".
    pub iface: String,
    /// tcpdump-style filter expression ("" = everything).
    pub filter: String,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Ring size in bytes.
    pub buffer_bytes: usize,
}

/// How filtering was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterMode {
    /// Classic BPF attached with SO_ATTACH_FILTER.
    Kernel,
    /// The same program run on each packet in user space (the kernel refused it).
    UserSpace,
}

/// An open live capture.
pub struct LiveCapture {
    ring: Ring,
    prog: Program,
    outgoing: Outgoing,
    mode: FilterMode,
    link: LinkType,
    dgram: bool,
    snaplen: u32,
    /// Instructions in the filter program.
    pub filter_len: usize,
}

/// The end-of-capture figures.
#[derive(Debug, Clone, Copy)]
pub struct CaptureStats {
    /// Packets handed to the consumer.
    pub packets: u64,
    /// Bytes handed to the consumer (captured lengths).
    pub bytes: u64,
    /// Kernel counters.
    pub kernel: KernelStats,
    /// Wall time.
    pub elapsed: Duration,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
}

const BLOCK: usize = 1 << 20;
/// The kernel's limit on a classic BPF program (`BPF_MAXINSNS`).
const BPF_MAXINSNS: usize = 4096;

/// `cfg.iface` → (ifindex, ARPHRD type); "any" is (0, 0).
fn resolve_iface(name: &str) -> Result<(u32, u32), CaptureError> {
    if name == "any" {
        return Ok((0, 0));
    }
    let cname = std::ffi::CString::new(name)
        .map_err(|_| CaptureError::BadInterfaceName(name.to_string()))?;
    // SAFETY: a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if idx == 0 {
        return Err(CaptureError::NoSuchInterface(name.to_string()));
    }
    Ok((idx, iface_type(name).unwrap_or(0)))
}

fn iface_type(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/type"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl LiveCapture {
    /// Open the ring on `cfg.iface` with the filter attached.
    pub fn open(cfg: &CaptureConfig) -> Result<Self, CaptureError> {
        let (ifindex, hatype) = resolve_iface(&cfg.iface)?;
        // ARPHRD_ETHER (1) and ARPHRD_LOOPBACK (772) carry an Ethernet header; everything else
        // (tun, ip tunnels, "any") is opened as SOCK_DGRAM and written as raw IP.
        let ethernet = matches!(hatype, 1 | 772);
        // Loopback delivers each packet twice (sent and received): keep the received copy, as
        // libpcap does; on "any" that applies to the loopback interface only.
        let outgoing = if hatype == 772 {
            Outgoing::Drop
        } else if ifindex == 0 {
            // SAFETY: a valid NUL-terminated string.
            match unsafe { libc::if_nametoindex(c"lo".as_ptr()) } {
                0 => Outgoing::Keep,
                lo => Outgoing::DropOn(lo),
            }
        } else {
            Outgoing::Keep
        };
        let (flink, link) = if ethernet {
            (FilterLink::Ethernet, LinkType::Ethernet)
        } else {
            (FilterLink::RawIp, LinkType::Raw)
        };
        let snaplen = cfg.snaplen.clamp(64, 262_144);
        let prog = Program::compile(&cfg.filter, flink, snaplen)?;
        let kernel_prog = prog.for_kernel(outgoing);
        let block_nr = (cfg.buffer_bytes / BLOCK).clamp(2, 1024);
        let open =
            |f: Option<&[libc::sock_filter]>| Ring::open(ifindex, !ethernet, f, BLOCK, block_nr);
        let (ring, mode) = if kernel_prog.len() <= BPF_MAXINSNS {
            match open(Some(&kernel_prog)) {
                Ok(r) => (r, FilterMode::Kernel),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(CaptureError::Privilege(e));
                }
                Err(_) => (
                    open(None).map_err(CaptureError::open)?,
                    FilterMode::UserSpace,
                ),
            }
        } else {
            (
                open(None).map_err(CaptureError::open)?,
                FilterMode::UserSpace,
            )
        };
        Ok(LiveCapture {
            ring,
            filter_len: kernel_prog.len(),
            prog,
            outgoing,
            mode,
            link,
            dgram: !ethernet,
            snaplen,
        })
    }

    /// The link type of the frames handed out.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Where the filter runs.
    pub fn filter_mode(&self) -> FilterMode {
        self.mode
    }

    /// Capture until `count` packets, `duration`, or `stop`; each packet goes to `on`.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        count: Option<u64>,
        duration: Option<Duration>,
        mut on: impl FnMut(u64, u32, &[u8]) -> io::Result<()>,
    ) -> Result<CaptureStats, CaptureError> {
        let start = Instant::now();
        let mut packets = 0u64;
        let mut bytes = 0u64;
        let mut err: Option<io::Error> = None;
        let (prog, outgoing, mode, dgram, snaplen) = (
            &self.prog,
            self.outgoing,
            self.mode,
            self.dgram,
            self.snaplen as usize,
        );
        let mut interrupted = false;
        let keep_len = |p: &ring::RingPacket<'_>| -> usize {
            if dgram && !matches!(p.protocol, 0x0800 | 0x86dd) {
                return 0;
            }
            match mode {
                FilterMode::Kernel => p.data.len(),
                FilterMode::UserSpace if outgoing.drops(p.pkttype, p.ifindex) => 0,
                FilterMode::UserSpace => (prog.run(p.data, p.orig_len) as usize)
                    .min(p.data.len())
                    .min(snaplen),
            }
        };
        let mut deliver = |p: ring::RingPacket<'_>,
                           packets: &mut u64,
                           bytes: &mut u64,
                           err: &mut Option<io::Error>| {
            if err.is_some() || count.is_some_and(|c| *packets >= c) {
                return;
            }
            let keep = keep_len(&p);
            if keep == 0 {
                return;
            }
            *packets += 1;
            *bytes += keep as u64;
            if let Err(e) = on(p.ts_ns, p.orig_len, &p.data[..keep]) {
                *err = Some(e);
            }
        };
        loop {
            if count.is_some_and(|c| packets >= c) || duration.is_some_and(|d| start.elapsed() >= d)
            {
                break;
            }
            if stop.load(Ordering::Relaxed) {
                interrupted = true;
                break;
            }
            self.ring
                .poll_block(100, |p| deliver(p, &mut packets, &mut bytes, &mut err))
                .map_err(CaptureError::Ring)?;
            if let Some(e) = err.take() {
                return Err(CaptureError::Consumer(e));
            }
        }
        // Drain blocks the kernel already handed over, so packets that arrived before the stop
        // are kept (a partially filled block is retired by the kernel within 50 ms).
        std::thread::sleep(Duration::from_millis(60));
        loop {
            let n = self
                .ring
                .poll_block(0, |p| deliver(p, &mut packets, &mut bytes, &mut err))
                .map_err(CaptureError::Ring)?;
            if n == 0 || count.is_some_and(|c| packets >= c) {
                break;
            }
        }
        if let Some(e) = err {
            return Err(CaptureError::Consumer(e));
        }
        Ok(CaptureStats {
            packets,
            bytes,
            kernel: self.ring.stats(),
            elapsed: start.elapsed(),
            interrupted,
        })
    }
}
