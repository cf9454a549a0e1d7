//! `latscope analyze`: read a capture (or capture live) and find the stalls — Nagle × delayed
//! ACK, delayed ACK, TCP_CORK, RTO retransmissions, zero window, server think time — ranked by
//! the time they cost, with Wireshark-compatible retransmission analysis.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use latscope_core::model::Meta;
use latscope_core::render::emit;
use latscope_core::units::parse_duration;
use latscope_wire::capfile::FileKind;
use latscope_wire::packet::decode_packets;
use latscope_wire::{
    AnalyzeOptions, Analyzer, CaptureReader, ReadError, analyze_capture, build_report,
};

use latscope_capture::{CaptureConfig, LiveCapture};

use crate::cmd::capture::open_writer;
use crate::exit;
use crate::interrupt::stop_flag;
use crate::output::{OutputArgs, unix_ms};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  latscope analyze nginx.pcap                   ranked stalls, worst connections
  latscope analyze nginx.pcap --conn 3          connection 3 as a ladder, stalls marked
  latscope analyze big.pcapng --json            the report as JSON (schema: latscope schema analyze)
  latscope analyze --live -I eth0 -d 10s tcp port 8080

Exit code 1 when a stall detector fired, 2 when frames were read but none could be decoded (unknown link type, not IP, encrypted 802.11): nothing was analysed.")]
pub struct AnalyzeArgs {
    /// Capture file (pcap or pcapng, optionally gzip-compressed; Ethernet, Linux cooked v1/v2,
    /// raw IP, loopback, PPP, Cisco HDLC, 802.11 (plain, radiotap, PPI; encrypted frames are
    /// counted, not read), IP over InfiniBand; VLAN, PPPoE, MPLS, GRE, WCCP, IP-in-IP, VXLAN
    /// and Geneve decoded down to the inner TCP); "-" = stdin.
    /// With --live: the capture filter's words instead, as tcpdump takes them.
    #[arg(required_unless_present = "live", value_name = "FILE | FILTER")]
    pub file: Vec<String>,
    /// Show connection N (numbered from 0 in order of appearance, like tcp.stream) as a ladder.
    #[arg(long, value_name = "N")]
    pub conn: Option<u64>,
    /// How many of the worst connections to list.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// How many examples each finding lists, the largest first (every stall is counted
    /// whatever N is).
    #[arg(long, value_name = "N", default_value_t = latscope_wire::analyze::DEFAULT_EXAMPLES)]
    pub examples: usize,
    /// Capture live instead of reading a file (needs -I and CAP_NET_RAW).
    #[arg(long, requires = "interface")]
    pub live: bool,
    /// Interface for --live.
    #[arg(short = 'I', long, short_alias = 'i', value_name = "IFACE")]
    pub interface: Option<String>,
    /// How long to capture with --live.
    #[arg(short = 'd', long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// Filter for --live in tcpdump syntax, as one argument (or as the trailing words).
    #[arg(short = 'f', long, value_name = "EXPR", requires = "live")]
    pub filter: Option<String>,
    /// With --live, also save the packets to this pcap file.
    #[arg(short = 'w', long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    #[command(flatten)]
    pub ring: crate::cmd::capture::RingArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub report: crate::cmd::report::ReportFile,
}

impl AnalyzeArgs {
    /// `--live`'s filter: `-f EXPR` or the trailing words (tcpdump's two ways), not both.
    fn live_filter(&self) -> anyhow::Result<String> {
        match (&self.filter, self.file.is_empty()) {
            (Some(_), false) => Err(exit::coded(
                exit::USAGE,
                "give the filter once: -f EXPR or as the trailing words, not both",
            )),
            (Some(f), true) => Ok(f.clone()),
            (None, _) => Ok(self.file.join(" ")),
        }
    }

    /// The one capture file to read (without `--live`).
    fn file_path(&self) -> anyhow::Result<PathBuf> {
        match self.file.as_slice() {
            [one] => Ok(PathBuf::from(one)),
            _ => Err(exit::coded(
                exit::USAGE,
                format!(
                    "one capture file, not {} words: a filter applies to --live only",
                    self.file.len()
                ),
            )),
        }
    }
}

/// A capture file that cannot be read: an I/O error is the system's, a malformed file is bad
/// input (`exit::class_of` says which).
fn read_error(path: &str, e: ReadError) -> anyhow::Error {
    match e {
        ReadError::Io(io) => anyhow::Error::new(io).context(format!("reading '{path}'")),
        other => anyhow::Error::new(other).context(format!("'{path}'")),
    }
}

/// Where the analysed packets came from, and whether reading them was cut short.
struct Source {
    /// The file name, or `live:IFACE`.
    name: String,
    /// `pcap`, `pcapng` or `live`.
    format: String,
    interrupted: bool,
    /// The file ends in the middle of a packet: what was analysed is what came before it.
    truncated: bool,
}

/// `analyze --live`: capture on an interface for the run's duration (optionally writing the
/// packets to a file too) and feed every frame to the analyzer.
fn analyze_live(
    a: &AnalyzeArgs,
    analyzer: &mut Analyzer,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Source> {
    let iface = a.interface.clone().unwrap_or_default();
    let cfg = CaptureConfig {
        iface: iface.clone(),
        filter: a.live_filter()?,
        snaplen: a.ring.snaplen,
        buffer_bytes: a.ring.buffer as usize,
    };
    let mut cap = LiveCapture::open(&cfg)?;
    let link = cap.link_type();
    let mut writer = match &a.write {
        Some(p) => Some(open_writer(
            &p.display().to_string(),
            None,
            link,
            a.ring.snaplen.clamp(64, 262_144),
            &iface,
        )?),
        None => None,
    };
    // Always said (on stderr), like tcpdump's "listening on": scripts wait for it.
    eprintln!(
        "latscope: capturing on {iface} for {}, Ctrl-C to stop early",
        latscope_core::units::format_duration(a.duration)
    );
    let mut frame = 0u64;
    let stats = cap.run(stop, None, Some(a.duration), |ts, orig, data| {
        frame += 1;
        analyzer.push_packets(frame, ts, decode_packets(link, data, Some(orig as usize)));
        match &mut writer {
            Some(w) => w.write_frame(ts, orig, data),
            None => Ok(()),
        }
    })?;
    if let Some(w) = &mut writer {
        w.flush()?;
    }
    if stats.kernel.drops > 0 {
        warnings.push(format!(
            "the kernel dropped {} packets (ring full): the analysis misses them",
            stats.kernel.drops
        ));
    }
    Ok(Source {
        name: format!("live:{iface}"),
        format: "live".to_string(),
        interrupted: stats.interrupted,
        truncated: false,
    })
}

/// `analyze FILE` (or `-` for stdin): read a pcap/pcapng file, with a progress bar on a TTY.
fn analyze_file(
    a: &AnalyzeArgs,
    analyzer: &mut Analyzer,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Source> {
    let path = a.file_path()?;
    let name = path.display().to_string();
    // "-" reads the capture from stdin: `latscope capture -w - ... | latscope analyze -`.
    let (input, total): (Box<dyn std::io::Read>, u64) = if name == "-" {
        (Box::new(io::stdin().lock()), 0)
    } else {
        let f = File::open(&path)
            .map_err(|e| exit::because(exit::USAGE, format!("cannot open '{name}'"), e))?;
        let total = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(f), total)
    };
    let reader = CaptureReader::new(input).map_err(|e| read_error(&name, e))?;
    // The reader counts decompressed bytes: a compressed file's size is no total for them.
    let total = if reader.compressed() { 0 } else { total };
    let bar = if a.output.progress() {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let summary = analyze_capture(reader, analyzer, stop, |bytes| {
        if let Some(b) = &bar {
            b.set_position(bytes);
        }
    })
    .map_err(|e| read_error(&name, e))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if summary.stats.truncated_tail {
        warnings.push("the file ends in the middle of a packet (cut short); everything before it was analysed".into());
    }
    if summary.stats.skipped_blocks > 0 {
        warnings.push(format!(
            "{} pcapng blocks of other types were skipped",
            summary.stats.skipped_blocks
        ));
    }
    let fmt = match summary.kind {
        FileKind::Pcap => "pcap",
        FileKind::PcapNg => "pcapng",
    };
    Ok(Source {
        name,
        format: fmt.to_string(),
        interrupted: summary.interrupted,
        truncated: summary.stats.truncated_tail,
    })
}

pub fn run(a: &AnalyzeArgs) -> anyhow::Result<u8> {
    let started = unix_ms();
    let opts = AnalyzeOptions {
        trace_conn: a.conn,
        top: a.top,
    };
    let mut analyzer = Analyzer::new(opts);
    analyzer.keep_examples(a.examples);
    let stop = stop_flag();
    let mut warnings = Vec::new();
    let Source {
        name: source,
        format,
        interrupted,
        truncated,
    } = if a.live {
        analyze_live(a, &mut analyzer, &stop, &mut warnings)?
    } else {
        analyze_file(a, &mut analyzer, &stop, &mut warnings)?
    };
    if interrupted {
        warnings.push("interrupted: partial results".into());
    }
    let report = build_report(
        Meta::new("analyze", env!("CARGO_PKG_VERSION"), started),
        source,
        &format,
        analyzer.finish(),
        warnings,
    );
    emit(&report, a.output.format(), &mut io::stdout().lock())?;
    a.report.write(&report)?;
    Ok(if interrupted {
        exit::INTERRUPTED
    } else if report.analysis.nothing_readable() || truncated {
        // A file cut short is input that cannot be wholly used (issue 41: it exited 0): the
        // report of what came before it is printed, the code says it is not the whole capture.
        exit::USAGE
    } else if report.analysis.findings.is_empty() {
        exit::OK
    } else {
        exit::FINDINGS
    })
}
