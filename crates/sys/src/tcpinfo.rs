//! `struct tcp_info` (include/uapi/linux/tcp.h) of any TCP socket — latscope's own ([`read`])
//! or another process's (sock_diag's INET_DIAG_INFO, in latscope-inspect) — parsed by the
//! length the kernel actually returned: old kernels return a prefix, new kernels append fields.
//! Every field past the 4.x-era core (offset 104) is optional, and fields a newer kernel
//! appends beyond what we know are ignored. The one home of the layout.

use std::io;
use std::os::fd::RawFd;

use latscope_core::model::sockets::TcpStats;
use latscope_core::model::transfer::TransferLimits;

/// Offsets of the fields we read, from include/uapi/linux/tcp.h.
mod off {
    pub const OPTIONS: usize = 5;
    /// snd_wscale:4 (low nibble), rcv_wscale:4 (high nibble).
    pub const WSCALE: usize = 6;
    pub const RTO: usize = 8;
    pub const ATO: usize = 12;
    pub const SND_MSS: usize = 16;
    pub const RCV_MSS: usize = 20;
    pub const UNACKED: usize = 24;
    pub const LOST: usize = 32;
    pub const RETRANS: usize = 36;
    pub const LAST_DATA_SENT: usize = 44;
    pub const LAST_DATA_RECV: usize = 52;
    pub const RTT: usize = 68;
    pub const RTTVAR: usize = 72;
    pub const SND_SSTHRESH: usize = 76;
    pub const SND_CWND: usize = 80;
    pub const RCV_SPACE: usize = 96;
    pub const TOTAL_RETRANS: usize = 100;
    pub const PACING_RATE: usize = 104;
    pub const BYTES_ACKED: usize = 120;
    pub const BYTES_RECEIVED: usize = 128;
    pub const NOTSENT_BYTES: usize = 144;
    pub const MIN_RTT: usize = 148;
    pub const DATA_SEGS_IN: usize = 152;
    pub const DATA_SEGS_OUT: usize = 156;
    pub const DELIVERY_RATE: usize = 160;
    pub const BUSY_TIME: usize = 168;
    pub const RWND_LIMITED: usize = 176;
    pub const SNDBUF_LIMITED: usize = 184;
    pub const SND_WND: usize = 228;
    pub const RCV_WND: usize = 232;
    pub const TOTAL_RTO: usize = 240;
}

/// The shortest tcp_info we accept: everything up to and including tcpi_total_retrans (Linux
/// 2.6-era layout, 104 bytes).
pub const MIN_LEN: usize = 104;

fn u32_opt(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_opt(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o + 8).map(|s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_ne_bytes(a)
    })
}

fn u16_opt(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o + 2).map(|s| u16::from_ne_bytes([s[0], s[1]]))
}

/// TCPI_OPT_WSCALE: the handshake negotiated window scaling.
const OPT_WSCALE: u8 = 4;

/// The tcp_info of one of this process's own TCP sockets (`getsockopt(TCP_INFO)`), parsed at
/// the length the kernel returned.
pub fn read(fd: RawFd) -> io::Result<TcpStats> {
    let mut buf = [0u8; 512];
    let len = crate::sockopt::get_bytes(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    parse(&buf[..len]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a tcp_info {len} bytes long, shorter than the {MIN_LEN} every kernel returns"),
        )
    })
}

/// Who limited the transfer on one of this process's own TCP sockets: its tcp_info with its
/// SO_RCVBUF / SO_SNDBUF ([`TransferLimits`]).
pub fn limits(fd: RawFd) -> io::Result<(TcpStats, TransferLimits)> {
    let t = read(fd)?;
    let buf = |name| {
        crate::sockopt::get_int(fd, libc::SOL_SOCKET, name)
            .ok()
            .and_then(|b| u32::try_from(b).ok())
    };
    let l = TransferLimits::from_stats(&t, buf(libc::SO_RCVBUF), buf(libc::SO_SNDBUF));
    Ok((t, l))
}

/// Parse a tcp_info of any length ≥ [`MIN_LEN`]; None if shorter.
pub fn parse(b: &[u8]) -> Option<TcpStats> {
    if b.len() < MIN_LEN {
        return None;
    }
    let u = |o| u32_opt(b, o).unwrap_or(0);
    let wscale = b[off::OPTIONS] & OPT_WSCALE != 0;
    Some(TcpStats {
        info_len: b.len() as u32,
        congestion: None,
        rtt_us: u(off::RTT),
        rttvar_us: u(off::RTTVAR),
        min_rtt_us: u32_opt(b, off::MIN_RTT),
        rto_us: u(off::RTO),
        ato_us: u(off::ATO),
        snd_mss: u(off::SND_MSS),
        rcv_mss: u(off::RCV_MSS),
        snd_cwnd: u(off::SND_CWND),
        snd_ssthresh: u(off::SND_SSTHRESH),
        unacked: u(off::UNACKED),
        lost: u(off::LOST),
        retrans: u(off::RETRANS),
        total_retrans: u(off::TOTAL_RETRANS),
        notsent_bytes: u32_opt(b, off::NOTSENT_BYTES),
        delivery_rate_bps: u64_opt(b, off::DELIVERY_RATE)
            .map(|bytes_per_s| bytes_per_s.saturating_mul(8)),
        pacing_rate_bps: u64_opt(b, off::PACING_RATE).map(|r| {
            if r == u64::MAX {
                r
            } else {
                r.saturating_mul(8)
            }
        }),
        bytes_acked: u64_opt(b, off::BYTES_ACKED),
        bytes_received: u64_opt(b, off::BYTES_RECEIVED),
        data_segs_in: u32_opt(b, off::DATA_SEGS_IN),
        data_segs_out: u32_opt(b, off::DATA_SEGS_OUT),
        busy_time_us: u64_opt(b, off::BUSY_TIME),
        rwnd_limited_us: u64_opt(b, off::RWND_LIMITED),
        sndbuf_limited_us: u64_opt(b, off::SNDBUF_LIMITED),
        last_data_sent_ms: u(off::LAST_DATA_SENT),
        last_data_recv_ms: u(off::LAST_DATA_RECV),
        snd_wnd: u32_opt(b, off::SND_WND),
        total_rto: u16_opt(b, off::TOTAL_RTO),
        rcv_wnd: u32_opt(b, off::RCV_WND),
        rcv_space: u(off::RCV_SPACE),
        rcv_wscale: wscale.then_some(b[off::WSCALE] >> 4),
        snd_wscale: wscale.then_some(b[off::WSCALE] & 0x0f),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], o: usize, v: u32) {
        b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn short_info_leaves_new_fields_empty() {
        let mut b = vec![0u8; MIN_LEN];
        put32(&mut b, off::RTT, 1234);
        put32(&mut b, off::ATO, 40_000);
        let t = parse(&b).expect("parses");
        assert_eq!(t.rtt_us, 1234);
        assert_eq!(t.ato_us, 40_000);
        assert_eq!(t.min_rtt_us, None);
        assert_eq!(t.busy_time_us, None);
        assert_eq!(t.snd_wnd, None);
    }

    #[test]
    fn long_info_reads_new_fields_and_ignores_unknown_tail() {
        let mut b = vec![0u8; 300];
        put32(&mut b, off::MIN_RTT, 77);
        b[off::SNDBUF_LIMITED..off::SNDBUF_LIMITED + 8].copy_from_slice(&3000u64.to_ne_bytes());
        b[off::DELIVERY_RATE..off::DELIVERY_RATE + 8].copy_from_slice(&1000u64.to_ne_bytes());
        b[off::TOTAL_RTO..off::TOTAL_RTO + 2].copy_from_slice(&5u16.to_ne_bytes());
        let t = parse(&b).expect("parses");
        assert_eq!(t.info_len, 300);
        assert_eq!(t.min_rtt_us, Some(77));
        assert_eq!(t.sndbuf_limited_us, Some(3000));
        assert_eq!(t.delivery_rate_bps, Some(8000));
        assert_eq!(t.total_rto, Some(5));
    }

    #[test]
    fn window_scale_nibbles() {
        let mut b = vec![0u8; MIN_LEN];
        assert_eq!(parse(&b).expect("parses").rcv_wscale, None);
        b[off::OPTIONS] = OPT_WSCALE;
        b[off::WSCALE] = 0x72; // rcv 7, snd 2
        let t = parse(&b).expect("parses");
        assert_eq!((t.rcv_wscale, t.snd_wscale), (Some(7), Some(2)));
    }

    #[test]
    fn reads_an_own_socket() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let t = read(c.as_raw_fd()).expect("tcp_info");
        assert!(t.info_len as usize >= MIN_LEN && t.snd_mss > 0, "{t:?}");
        assert!(t.rcv_wscale.is_some(), "loopback negotiates window scaling");
        assert!(read(l.as_raw_fd()).is_ok());
    }

    #[test]
    fn too_short_is_none() {
        assert!(parse(&[0u8; 40]).is_none());
    }
}
