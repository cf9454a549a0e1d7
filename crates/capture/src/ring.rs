//! An AF_PACKET socket with a TPACKET_V3 memory-mapped receive ring (packet(7),
//! Documentation/networking/packet_mmap.rst): the kernel fills blocks of packets in a shared
//! ring, we walk a block when the kernel hands it over (`TP_STATUS_USER`) and give it back
//! (`TP_STATUS_KERNEL`). No copy into user space, one wake-up per block (or per 50 ms timeout).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{Ordering, fence};

const SOL_PACKET: libc::c_int = 263;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const ETH_P_ALL: u16 = 0x0003;

#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

// Offsets inside `struct tpacket_block_desc` (version u32, offset_to_priv u32, then
// tpacket_hdr_v1: block_status u32, num_pkts u32, offset_to_first_pkt u32, …).
const BLK_STATUS: usize = 8;
const BLK_NUM_PKTS: usize = 12;
const BLK_FIRST: usize = 16;
// Offsets inside `struct tpacket3_hdr`.
const H_NEXT: usize = 0;
const H_SEC: usize = 4;
const H_NSEC: usize = 8;
const H_SNAPLEN: usize = 12;
const H_LEN: usize = 16;
const H_MAC: usize = 24;
/// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))`: where the `sockaddr_ll` follows the header.
const H_SLL: usize = 48;
/// `sockaddr_ll.sll_protocol`, `.sll_ifindex` and `.sll_pkttype` offsets.
const SLL_PROTOCOL: usize = 2;
const SLL_IFINDEX: usize = 4;
const SLL_PKTTYPE: usize = 10;

/// Kernel counters (`PACKET_STATISTICS`), accumulated (the kernel resets them on every read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets the socket received (passed the filter), including dropped ones.
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen.
    pub freeze_q: u64,
}

/// One packet handed out by the ring.
pub struct RingPacket<'a> {
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: &'a [u8],
    pub pkttype: u8,
    pub protocol: u16,
    pub ifindex: u32,
}

/// The socket and its mapped ring. Dropping it unmaps and closes (nothing is left behind).
pub struct Ring {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    block_nr: usize,
    cur: usize,
    stats: KernelStats,
}

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Ring {
    /// Open a socket on `ifindex` (0 = all interfaces). `dgram` sockets deliver packets without
    /// the link-layer header. `filter`, when given, is attached before binding so no unfiltered
    /// packet ever enters the ring.
    pub fn open(
        ifindex: u32,
        dgram: bool,
        filter: Option<&[libc::sock_filter]>,
        block_size: usize,
        block_nr: usize,
    ) -> io::Result<Ring> {
        let ty = if dgram {
            libc::SOCK_DGRAM
        } else {
            libc::SOCK_RAW
        };
        // Protocol 0: the socket receives nothing until bind() names ETH_P_ALL and the interface
        // (as libpcap does). Opened with ETH_P_ALL it would take packets of every interface from
        // this call on, and between the ring's set-up and bind() those passing the filter would
        // enter the ring from interfaces the user did not ask for.
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, ty | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(last_err("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let ver: libc::c_int = TPACKET_V3;
        setsockopt(
            &fd,
            SOL_PACKET,
            PACKET_VERSION,
            &ver,
            "PACKET_VERSION TPACKET_V3",
        )?;
        if let Some(f) = filter {
            attach_filter(&fd, f)?;
        }
        let frame_size = 2048u32;
        let req = TpacketReq3 {
            tp_block_size: block_size as u32,
            tp_block_nr: block_nr as u32,
            tp_frame_size: frame_size,
            tp_frame_nr: (block_size * block_nr) as u32 / frame_size,
            tp_retire_blk_tov: 50,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(&fd, SOL_PACKET, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        let map_len = block_size * block_nr;
        // SAFETY: mapping the ring the kernel just allocated for this socket; length matches
        // the request; the result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(last_err("mmap of the packet ring"));
        }
        let ring = Ring {
            fd,
            map: map.cast(),
            map_len,
            block_size,
            block_nr,
            cur: 0,
            stats: KernelStats::default(),
        };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(last_err("bind to the interface"));
        }
        Ok(ring)
    }

    #[inline]
    fn block(&self, i: usize) -> *mut u8 {
        // SAFETY: i < block_nr, so the offset stays inside the mapping.
        unsafe { self.map.add(i * self.block_size) }
    }

    #[inline]
    fn read_u32(p: *const u8) -> u32 {
        // SAFETY: callers pass pointers inside the mapping; the kernel aligns headers, but we do
        // not rely on it.
        u32::from_ne_bytes(unsafe { std::ptr::read_volatile(p.cast::<[u8; 4]>()) })
    }

    /// Wait up to `timeout_ms` for the next block and hand each of its packets to `f`.
    /// Returns the number of packets seen.
    pub fn poll_block(
        &mut self,
        timeout_ms: i32,
        mut f: impl FnMut(RingPacket<'_>),
    ) -> io::Result<usize> {
        let blk = self.block(self.cur);
        // SAFETY: blk points at the block header inside the mapping.
        let status = Self::read_u32(unsafe { blk.add(BLK_STATUS) });
        if status & TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    return Ok(0);
                }
                return Err(e);
            }
            return Ok(0);
        }
        // Read the block contents only after seeing the status (pairs with the kernel's
        // smp_wmb before it flips the status).
        fence(Ordering::Acquire);
        // SAFETY: header fields inside the mapping.
        let num = Self::read_u32(unsafe { blk.add(BLK_NUM_PKTS) }) as usize;
        let mut off = Self::read_u32(unsafe { blk.add(BLK_FIRST) }) as usize;
        for _ in 0..num {
            if off + H_SLL + 12 > self.block_size {
                break;
            }
            // SAFETY: off was checked to leave room for the header inside this block.
            let h = unsafe { blk.add(off) };
            let next = Self::read_u32(unsafe { h.add(H_NEXT) }) as usize;
            let sec = Self::read_u32(unsafe { h.add(H_SEC) });
            let nsec = Self::read_u32(unsafe { h.add(H_NSEC) });
            let snap = Self::read_u32(unsafe { h.add(H_SNAPLEN) }) as usize;
            let len = Self::read_u32(unsafe { h.add(H_LEN) });
            // SAFETY: inside the header checked above.
            let mac = usize::from(u16::from_ne_bytes(unsafe {
                std::ptr::read(h.add(H_MAC).cast::<[u8; 2]>())
            }));
            let protocol = u16::from_be_bytes(unsafe {
                std::ptr::read(h.add(H_SLL + SLL_PROTOCOL).cast::<[u8; 2]>())
            });
            let pkttype = unsafe { std::ptr::read(h.add(H_SLL + SLL_PKTTYPE)) };
            // SAFETY: inside the sockaddr_ll that follows the header (checked above).
            let ifindex = u32::from_ne_bytes(unsafe {
                std::ptr::read(h.add(H_SLL + SLL_IFINDEX).cast::<[u8; 4]>())
            });
            if off + mac + snap <= self.block_size {
                // SAFETY: the packet bytes lie inside this block (checked), and the kernel does not
                // touch the block until we set TP_STATUS_KERNEL below, after `f` returned.
                let data = unsafe { std::slice::from_raw_parts(h.add(mac), snap) };
                f(RingPacket {
                    ts_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
                    orig_len: len,
                    data,
                    pkttype,
                    ifindex,
                    protocol,
                });
            }
            if next == 0 {
                break;
            }
            off += next;
        }
        fence(Ordering::Release);
        // SAFETY: hand the block back to the kernel.
        unsafe { std::ptr::write_volatile(blk.add(BLK_STATUS).cast::<u32>(), TP_STATUS_KERNEL) };
        self.cur = (self.cur + 1) % self.block_nr;
        Ok(num)
    }

    /// Read (and accumulate) the kernel's counters.
    pub fn stats(&mut self) -> KernelStats {
        let mut s = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `s` is large enough for tpacket_stats_v3 and `len` says so.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut s as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            self.stats.packets += u64::from(s.tp_packets);
            self.stats.drops += u64::from(s.tp_drops);
            self.stats.freeze_q += u64::from(s.tp_freeze_q_cnt);
        }
        self.stats
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `open`; the fd closes after.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
    what: &str,
) -> io::Result<()> {
    latscope_sys::sockopt::set_raw(fd.as_raw_fd(), level, name, v)
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))
}

fn attach_filter(fd: &OwnedFd, insns: &[libc::sock_filter]) -> io::Result<()> {
    let mut prog = insns.to_vec();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_ATTACH_FILTER,
        &fprog,
        "SO_ATTACH_FILTER",
    )
}
