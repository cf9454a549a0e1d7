//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the stable seed-replay test, so
//! both exercise exactly the same code. Neither may panic on any input.

use std::sync::atomic::AtomicBool;

use crate::packet::{LinkType, Transport, decode};
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
    let link = match sel % 16 {
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
        _ => LinkType::Other(u32::from(sel)),
    };
    if let Ok(d) = decode(link, frame) {
        if let Transport::Tcp { tcp, .. } = d.transport {
            let _ = tcp.options();
        }
    }
    let mut a = Analyzer::new(AnalyzeOptions {
        trace_conn: Some(0),
        top: 1,
    });
    a.push(1, 1, decode(link, frame));
    a.push(2, 300_000_000, decode(link, frame));
    let _ = a.finish();
}
