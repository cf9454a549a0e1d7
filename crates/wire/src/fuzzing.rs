//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the stable seed-replay test, so
//! both exercise exactly the same code. Neither may panic on any input.

use std::sync::atomic::AtomicBool;

use crate::packet::{Decoded, LinkType, Transport, decode, decode_packets};
use crate::{AnalyzeOptions, Analyzer, CaptureReader, analyze_capture};

/// Read `data` as a capture file and analyse every frame (with a ladder, to cover that path).
pub fn capfile(data: &[u8]) {
    if let Ok(r) = CaptureReader::new(data) {
        let mut a = Analyzer::new(AnalyzeOptions {
            trace_conn: Some(0),
            top: 4,
        });
        let _ = analyze_capture(r, &mut a, &AtomicBool::new(false), |_| {});
        let _ = a.finish();
    }
}

/// Decode `data` (first byte picks the link type) and feed it to the analyzer twice, as if the
/// frame were seen, then retransmitted.
pub fn packet(data: &[u8]) {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let link = match sel % 32 {
        0 => LinkType::Ethernet,
        1 => LinkType::Raw,
        2 => LinkType::LinuxSll,
        3 => LinkType::LinuxSll2,
        4 => LinkType::Null,
        5 => LinkType::Loop,
        6 => LinkType::Ipv4,
        7 => LinkType::Ipv6,
        8 => LinkType::Ppp,
        9 => LinkType::PppEther,
        10 => LinkType::CiscoHdlc,
        11 => LinkType::Ieee80211,
        12 => LinkType::Radiotap,
        13 => LinkType::Ppi,
        14 => LinkType::IpoIb,
        16 => LinkType::ArcnetBsd,
        17 => LinkType::ArcnetLinux,
        // 18..=27: the Juniper link types, by their numbers.
        n @ 18..=27 => {
            const JUNIPER: [u32; 10] = [130, 133, 135, 136, 137, 167, 178, 179, 181, 183];
            LinkType::from_u32(JUNIPER[usize::from(n - 18)])
        }
        _ => LinkType::Other(u32::from(sel)),
    };
    for d in decode_packets(link, frame, Some(frame.len())) {
        if let Ok(Decoded {
            transport: Transport::Tcp { tcp, .. },
            ..
        }) = d
        {
            let _ = tcp.options();
            let _ = tcp.syn_options_in_linux_order();
        }
    }
    let mut a = Analyzer::new(AnalyzeOptions {
        trace_conn: Some(0),
        top: 1,
    });
    a.push(1, 1, decode(link, frame));
    a.push_packets(2, 300_000_000, decode_packets(link, frame, None));
    let _ = a.finish();
}
