//! The capture filter: tcpdump's language, compiled by libpcap itself (`pcap_compile` on a dead
//! handle of the capture's link type and snap length), so every expression tcpdump accepts works
//! here and means the same (pcap-filter(7)).
//!
//! The classic BPF program is attached in the kernel with `SO_ATTACH_FILTER`, so unwanted
//! packets are never copied into the ring, and its accept value is the snap length, so the
//! kernel also cuts packets. When the kernel refuses it, the same program runs in user space
//! through libpcap's `bpf_filter`.

use std::ffi::{CStr, CString, c_char, c_int, c_uint};

use thiserror::Error;

/// A filter expression libpcap could not compile.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid capture filter '{expr}': {why}")]
pub struct FilterError {
    /// The expression as given.
    pub expr: String,
    /// libpcap's message.
    pub why: String,
}

/// How the link layer looks to the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterLink {
    /// 14-byte Ethernet header (also Linux loopback): `DLT_EN10MB`.
    Ethernet,
    /// Bare IPv4/IPv6 (SOCK_DGRAM sockets, tun devices, "any"): `DLT_RAW`.
    RawIp,
}

impl FilterLink {
    /// The DLT_ value libpcap compiles for (pcap/dlt.h; `DLT_RAW` is 12 on Linux).
    fn dlt(self) -> c_int {
        match self {
            FilterLink::Ethernet => 1,
            FilterLink::RawIp => 12,
        }
    }
}

/// The host's own copies of packets: on the loopback device each packet is delivered twice
/// (sent and received); libpcap drops the sent copy, and so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outgoing {
    /// Keep everything (a real NIC: sent packets are seen once).
    Keep,
    /// Drop every outgoing packet (capturing on the loopback device).
    Drop,
    /// Drop outgoing packets of this interface index only (capturing on "any": loopback's).
    DropOn(u32),
}

/// `PACKET_OUTGOING` (linux/if_packet.h).
const PACKET_OUTGOING: u32 = 4;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the ancillary load of the packet type.
const AD_PKTTYPE: u32 = 0xffff_f004;
/// `SKF_AD_OFF + SKF_AD_IFINDEX`: the ancillary load of the interface index.
const AD_IFINDEX: u32 = 0xffff_f008;
const LD_W_ABS: u16 = 0x20;
const LD_IMM: u16 = 0x00;
const LDX_IMM: u16 = 0x01;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `PCAP_NETMASK_UNKNOWN`: `ip broadcast` cannot be compiled without a netmask, as in tcpdump
/// on an interface without an IPv4 address.
const NETMASK_UNKNOWN: u32 = 0xffff_ffff;

impl Outgoing {
    /// Whether a packet of this type, seen on this interface, is a copy to drop.
    pub fn drops(self, pkttype: u8, ifindex: u32) -> bool {
        let out = u32::from(pkttype) == PACKET_OUTGOING;
        match self {
            Outgoing::Keep => false,
            Outgoing::Drop => out,
            Outgoing::DropOn(lo) => out && ifindex == lo,
        }
    }

    /// The same test in classic BPF, run before the filter: rejects the copies, then clears A
    /// and X so the filter starts as it would alone.
    fn prefix(self) -> Vec<libc::sock_filter> {
        let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
        let mut p = match self {
            Outgoing::Keep => Vec::new(),
            Outgoing::Drop => vec![
                op(LD_W_ABS, 0, 0, AD_PKTTYPE),
                op(JEQ_K, 0, 1, PACKET_OUTGOING),
                op(RET_K, 0, 0, 0),
            ],
            Outgoing::DropOn(lo) => vec![
                op(LD_W_ABS, 0, 0, AD_PKTTYPE),
                op(JEQ_K, 0, 3, PACKET_OUTGOING),
                op(LD_W_ABS, 0, 0, AD_IFINDEX),
                op(JEQ_K, 0, 1, lo),
                op(RET_K, 0, 0, 0),
            ],
        };
        if !p.is_empty() {
            p.push(op(LD_IMM, 0, 0, 0));
            p.push(op(LDX_IMM, 0, 0, 0));
        }
        p
    }
}

/// The C side: pcap/pcap.h and pcap/bpf.h (libpcap ≥ 1.8, whose `pcap_compile` is thread-safe).
mod ffi {
    use super::{c_char, c_int, c_uint};

    #[repr(C)]
    pub struct Pcap {
        _private: [u8; 0],
    }

    /// `struct bpf_program`; `struct bpf_insn` has the layout of `struct sock_filter`.
    #[repr(C)]
    pub struct BpfProgram {
        pub bf_len: c_uint,
        pub bf_insns: *mut libc::sock_filter,
    }

    #[link(name = "pcap")]
    unsafe extern "C" {
        pub fn pcap_open_dead(linktype: c_int, snaplen: c_int) -> *mut Pcap;
        pub fn pcap_compile(
            p: *mut Pcap,
            prog: *mut BpfProgram,
            expr: *const c_char,
            optimize: c_int,
            netmask: u32,
        ) -> c_int;
        pub fn pcap_geterr(p: *mut Pcap) -> *mut c_char;
        pub fn pcap_freecode(prog: *mut BpfProgram);
        pub fn pcap_close(p: *mut Pcap);
        pub fn bpf_filter(
            insns: *const libc::sock_filter,
            pkt: *const u8,
            wirelen: c_uint,
            buflen: c_uint,
        ) -> c_uint;
    }
}

/// A compiled filter (libpcap's classic BPF).
#[derive(Debug, Clone)]
pub struct Program {
    insns: Vec<libc::sock_filter>,
}

impl Program {
    /// Compile `expr` (empty = everything) as tcpdump would on a `link` interface; accepted
    /// packets are cut to `snaplen`.
    pub fn compile(expr: &str, link: FilterLink, snaplen: u32) -> Result<Program, FilterError> {
        let err = |why: String| FilterError {
            expr: expr.to_string(),
            why,
        };
        let cexpr = CString::new(expr).map_err(|_| err("contains a NUL byte".into()))?;
        let snaplen = c_int::try_from(snaplen).unwrap_or(c_int::MAX);
        // SAFETY: plain call; the handle is checked for NULL and closed by `Dead`'s Drop.
        let handle = Dead(unsafe { ffi::pcap_open_dead(link.dlt(), snaplen) });
        if handle.0.is_null() {
            return Err(err("libpcap could not open a handle to compile it".into()));
        }
        let mut prog = ffi::BpfProgram {
            bf_len: 0,
            bf_insns: std::ptr::null_mut(),
        };
        // SAFETY: a live handle, a valid out-pointer and a NUL-terminated expression.
        let rc =
            unsafe { ffi::pcap_compile(handle.0, &mut prog, cexpr.as_ptr(), 1, NETMASK_UNKNOWN) };
        if rc != 0 {
            // SAFETY: pcap_geterr returns the handle's NUL-terminated error buffer, valid
            // until the handle is closed (after this copy).
            let why = unsafe { CStr::from_ptr(ffi::pcap_geterr(handle.0)) };
            return Err(err(why.to_string_lossy().into_owned()));
        }
        // SAFETY: on success bf_insns points to bf_len instructions owned by `prog`, copied
        // here before pcap_freecode releases them.
        let insns = unsafe {
            let v = std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize).to_vec();
            ffi::pcap_freecode(&mut prog);
            v
        };
        Ok(Program { insns })
    }

    /// The program to attach to the socket: the loopback-copy test, then the filter (whose
    /// jumps are relative, so prefixing keeps them right).
    pub fn for_kernel(&self, outgoing: Outgoing) -> Vec<libc::sock_filter> {
        let mut p = outgoing.prefix();
        p.extend_from_slice(&self.insns);
        p
    }

    /// Run the filter on a packet in user space, as the kernel would: the bytes to keep
    /// (0 = drop). `wire_len` is the packet's length on the wire (`len`/`greater`/`less`).
    pub fn run(&self, pkt: &[u8], wire_len: u32) -> u32 {
        let buflen = c_uint::try_from(pkt.len()).unwrap_or(c_uint::MAX);
        // SAFETY: a program produced by pcap_compile (libpcap's validated code) and a buffer
        // of `buflen` readable bytes; bpf_filter checks every load against `buflen`.
        unsafe { ffi::bpf_filter(self.insns.as_ptr(), pkt.as_ptr(), wire_len, buflen) }
    }
}

/// A `pcap_open_dead` handle, closed on drop.
struct Dead(*mut ffi::Pcap);

impl Drop for Dead {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a handle from pcap_open_dead, closed once.
            unsafe { ffi::pcap_close(self.0) };
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn eth_v4(proto: u8, ttl: u8, sp: u16, dp: u16, flags: u8, pad: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        let total = (40 + pad) as u16;
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, ttl, proto, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2]);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.resize(f.len() + pad, 0);
        f
    }

    fn m(expr: &str, pkt: &[u8]) -> bool {
        let p = Program::compile(expr, FilterLink::Ethernet, 65535).unwrap();
        p.run(pkt, pkt.len() as u32) != 0
    }

    #[test]
    fn what_the_hand_written_compiler_refused() {
        let syn = eth_v4(6, 64, 40000, 80, 0x02, 0);
        let synack = eth_v4(6, 64, 80, 40000, 0x12, 0);
        let big = eth_v4(17, 32, 53, 53, 0, 1000);
        assert!(m("tcp[tcpflags] & (tcp-syn|tcp-fin) != 0", &syn));
        assert!(!m("tcp[tcpflags] & (tcp-syn|tcp-fin) != 0", &big));
        assert!(m("tcp[13] = 18", &synack));
        assert!(!m("tcp[13] = 18", &syn));
        assert!(m("ip[8] < 65", &big));
        assert!(!m("ip[8] < 64", &syn));
        assert!(m("greater 200", &big) && !m("greater 200", &syn));
        assert!(m("less 100", &syn) && !m("less 100", &big));
        assert!(m("len > 1000", &big) && !m("len > 1000", &syn));
        assert!(m("ether proto 0x0800", &syn));
        assert!(m("tcp port 80 and not udp", &syn));
        assert!(m("udp port 53 or 443", &big) && !m("udp port 53 or 443", &syn));
    }

    #[test]
    fn snaplen_is_the_accept_value_and_empty_takes_everything() {
        let p = Program::compile("", FilterLink::RawIp, 128).unwrap();
        assert_eq!(p.run(&[0x45; 300], 300), 128);
    }

    #[test]
    fn errors_quote_libpcap() {
        let e = Program::compile("port eighty", FilterLink::Ethernet, 65535).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid capture filter 'port eighty': ")
        );
        assert!(!e.why.is_empty());
        // Raw IP has no Ethernet addresses, as in tcpdump on a tun device.
        assert!(Program::compile("ether host 1:2:3:4:5:6", FilterLink::RawIp, 65535).is_err());
    }

    #[test]
    fn loopback_copies_are_rejected_first() {
        let p = Program::compile("tcp", FilterLink::Ethernet, 65535).unwrap();
        let k = p.for_kernel(Outgoing::DropOn(1));
        assert_eq!(k.len(), p.insns.len() + 7);
        assert!(Outgoing::DropOn(1).drops(4, 1));
        assert!(!Outgoing::DropOn(1).drops(4, 2));
        assert!(!Outgoing::DropOn(1).drops(0, 1));
        assert!(Outgoing::Drop.drops(4, 9));
        assert!(!Outgoing::Keep.drops(4, 9));
    }
}
