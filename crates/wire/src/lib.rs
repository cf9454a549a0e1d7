//! latscope's packet evidence, without syscalls: zero-copy packet views ([`packet`]), streaming
//! pcap/pcapng reading and pcap writing ([`capfile`]), TCP flow tracking with Wireshark-style
//! segment analysis and the stall detectors ([`analyze`]). The `analyze` and `capture` result
//! models and their human renderings live in `latscope_core` (`model::analyze`,
//! `model::capture`, `render::analyze`, `render::capture`): this crate fills them.
//!
//! Everything here works on bytes handed in by the caller, so every parser can be fuzzed and
//! unit-tested without a network.

#![warn(missing_docs)]

pub mod analyze;
pub mod capfile;
#[doc(hidden)]
pub mod fuzzing;
mod fxhash;
pub mod handshake;
pub mod packet;
pub mod synth;

pub use analyze::{AnalyzeOptions, Analyzer};
pub use capfile::{CaptureReader, CaptureWriter, PcapNgWriter, PcapWriter, ReadError};
pub use packet::{LinkType, decode};

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use latscope_core::model::Meta;
use latscope_core::model::analyze::{Analysis, AnalyzeReport};

use crate::capfile::FileKind;

/// Read a whole capture through the analyzer. Stops early (keeping what was analysed) when
/// `stop` becomes true; `progress` is called every 2^20 frames with the bytes read so far.
pub fn analyze_capture<R: Read>(
    mut reader: CaptureReader<R>,
    analyzer: &mut Analyzer,
    stop: &AtomicBool,
    mut progress: impl FnMut(u64),
) -> Result<FileSummary, ReadError> {
    let kind = reader.kind();
    let mut n: u64 = 0;
    while let Some(f) = reader.next_frame()? {
        let packets = packet::decode_packets(f.link, f.data, Some(f.orig_len as usize));
        analyzer.push_packets(f.number, f.ts_ns, packets);
        n += 1;
        if n & 0xf_ffff == 0 {
            progress(reader.stats().bytes);
            if stop.load(Ordering::Relaxed) {
                return Ok(FileSummary {
                    kind,
                    stats: reader.stats(),
                    interrupted: true,
                });
            }
        }
    }
    Ok(FileSummary {
        kind,
        stats: reader.stats(),
        interrupted: false,
    })
}

/// What the file reader noticed.
#[derive(Debug, Clone, Copy)]
pub struct FileSummary {
    /// pcap or pcapng.
    pub kind: FileKind,
    /// Reader statistics.
    pub stats: capfile::ReadStats,
    /// Stopped by the caller.
    pub interrupted: bool,
}

/// Assemble the report from an analysis: the analysis itself, with where it came from and
/// warnings about frames it had to skip.
pub fn build_report(
    meta: Meta,
    source: String,
    format: &str,
    analysis: Analysis,
    mut warnings: Vec<String>,
) -> AnalyzeReport {
    let skipped = &analysis.skipped;
    if skipped.truncated > 0 {
        warnings.push(format!(
            "{} {} cut short before the TCP/UDP header (snap length too small?) and skipped",
            latscope_core::units::count(skipped.truncated, "frame"),
            latscope_core::units::verb(skipped.truncated, "was", "were")
        ));
    }
    if skipped.unknown_link_type > 0 {
        warnings.push(format!(
            "{} {} a link type latscope does not decode and {} skipped",
            latscope_core::units::count(skipped.unknown_link_type, "frame"),
            latscope_core::units::verb(skipped.unknown_link_type, "has", "have"),
            latscope_core::units::verb(skipped.unknown_link_type, "was", "were")
        ));
    }
    if skipped.encrypted > 0 {
        warnings.push(format!(
            "{} 802.11 frames are encrypted (WEP/WPA) and were skipped: capture on the wired side, or decrypt first (e.g. `airdecap-ng`)",
            skipped.encrypted
        ));
    }
    AnalyzeReport {
        meta,
        source,
        format: format.into(),
        analysis,
        warnings,
    }
}
