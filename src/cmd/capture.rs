//! `latscope capture`: live capture to a pcap file (nanosecond timestamps) through an AF_PACKET
//! TPACKET_V3 ring, with the tcpdump filter compiled to classic BPF by libpcap and run in the kernel.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use clap::{Args, ValueEnum};
use latscope_capture::{CaptureConfig, FilterMode, LiveCapture};
use latscope_core::model::Meta;
use latscope_core::model::capture::CaptureReport;
use latscope_core::render::emit;
use latscope_core::units::{parse_count, parse_duration, parse_size};
use latscope_wire::{CaptureWriter, LinkType, PcapNgWriter, PcapWriter};

use crate::exit;
use crate::interrupt::stop_flag;
use crate::output::{OutputArgs, unix_ms};

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  latscope capture -I eth0 -w web.pcap tcp port 8080      until Ctrl-C
  latscope capture -I lo -w - -n 1000 host 127.0.0.1 | tshark -r -
  latscope capture -I any -w all.pcap -d 30s -f 'tcp and not port 22'

The filter is tcpdump's (pcap-filter(7)), as trailing words or -f EXPR; compiled by libpcap as tcpdump does, e.g. 'tcp[tcpflags] & (tcp-syn|tcp-fin) != 0', 'greater 200', 'ip[8] < 65'; it runs in the kernel as classic BPF. Needs CAP_NET_RAW.
Ctrl-C stops, flushes the file and prints the counts (kernel drops included); the exit code is then 130, as for every command that Ctrl-C stops.")]
pub struct CaptureArgs {
    /// Interface to capture on ("any" for all interfaces, written as raw IP).
    #[arg(short = 'I', long, short_alias = 'i', value_name = "IFACE")]
    pub interface: String,
    /// Write the packets to this pcap file ("-" for stdout).
    #[arg(short = 'w', long, value_name = "FILE")]
    pub write: String,
    /// File format (default: pcapng for a .pcapng name, else pcap with ns timestamps).
    #[arg(long, value_enum)]
    pub format: Option<FileFormat>,
    /// Stop after this many packets.
    #[arg(short = 'n', long, short_alias = 'c', value_parser = parse_count, value_name = "COUNT")]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 10s, 2m).
    #[arg(short = 'd', long, value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub ring: RingArgs,
    /// Filter expression in tcpdump syntax, as one argument (or as the trailing words).
    #[arg(
        short = 'f',
        long,
        value_name = "EXPR",
        conflicts_with = "filter_words"
    )]
    pub filter: Option<String>,
    /// Filter expression in tcpdump syntax: the remaining words, as tcpdump takes them.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = false,
        value_name = "FILTER"
    )]
    pub filter_words: Vec<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(a: &CaptureArgs) -> anyhow::Result<u8> {
    let started = unix_ms();
    let cfg = CaptureConfig {
        iface: a.interface.clone(),
        filter: a.filter.clone().unwrap_or_else(|| a.filter_words.join(" ")),
        snaplen: a.ring.snaplen,
        buffer_bytes: a.ring.buffer as usize,
    };
    let mut cap = LiveCapture::open(&cfg)?;
    let mut w = open_writer(
        &a.write,
        a.format,
        cap.link_type(),
        cfg.snaplen.clamp(64, 262_144),
        &a.interface,
    )?;
    let mode = match cap.filter_mode() {
        FilterMode::Kernel => format!("kernel (classic BPF, {} instructions)", cap.filter_len),
        FilterMode::UserSpace => "user space".to_string(),
    };
    eprintln!(
        "latscope: capturing on {} (filter: {}), Ctrl-C to stop",
        a.interface, mode
    );
    // The stop takes at most ~0.2 s (one poll, the drain) plus the flush: a second Ctrl-C waits
    // for it instead of leaving a truncated file.
    let stop = stop_flag();
    // A live packet count for people (stderr is a terminal), never when writing to stdout.
    let bar = (a.output.progress() && a.write != "-").then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    });
    let mut n: u64 = 0;
    let stats = cap.run(&stop, a.count, a.duration, |ts, orig, data| {
        n += 1;
        if n % 256 == 1 {
            if let Some(b) = &bar {
                b.set_message(format!("{n} packets"));
            }
        }
        w.write_frame(ts, orig, data)
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    w.flush()?;
    let report = CaptureReport {
        meta: Meta::new("capture", env!("CARGO_PKG_VERSION"), started),
        interface: a.interface.clone(),
        file: a.write.clone(),
        filter: cfg.filter.clone(),
        filter_mode: mode,
        link_type: cap.link_type().to_u32(),
        snaplen: cfg.snaplen.clamp(64, 262_144),
        packets: stats.packets,
        bytes: stats.bytes,
        kernel_received: stats.kernel.packets,
        kernel_drops: stats.kernel.drops,
        duration_ns: stats.elapsed.as_nanos() as u64,
        interrupted: stats.interrupted,
    };
    // The summary goes to stderr when the packets go to stdout.
    if a.write == "-" {
        emit(&report, a.output.format(), &mut io::stderr())?;
    } else {
        emit(&report, a.output.format(), &mut io::stdout())?;
    }
    // Ctrl-C is how an open-ended capture ends, and still exit 130 as for every command that
    // Ctrl-C stops: the file is complete, but a script learns that a person ended the run.
    Ok(if stats.interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}

/// Output file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FileFormat {
    /// Classic pcap with nanosecond timestamps.
    Pcap,
    /// pcapng (nanosecond `if_tsresol`).
    Pcapng,
}

/// Open `path` ("-" = stdout) for writing captured frames; the format defaults to pcapng for a
/// `.pcapng` name and pcap otherwise.
pub fn open_writer(
    path: &str,
    format: Option<FileFormat>,
    link: LinkType,
    snaplen: u32,
    iface: &str,
) -> anyhow::Result<CaptureWriter<BufWriter<Box<dyn Write>>>> {
    let out: Box<dyn Write> = if path == "-" {
        Box::new(io::stdout())
    } else {
        Box::new(create_output(Path::new(path))?)
    };
    let w = BufWriter::with_capacity(1 << 20, out);
    let format = format.unwrap_or(if path.ends_with(".pcapng") {
        FileFormat::Pcapng
    } else {
        FileFormat::Pcap
    });
    Ok(match format {
        FileFormat::Pcap => CaptureWriter::Pcap(PcapWriter::new(w, link, snaplen)?),
        FileFormat::Pcapng => CaptureWriter::PcapNg(PcapNgWriter::new(w, link, snaplen, iface)?),
    })
}

/// Open the output file without being tricked into writing elsewhere, as a root capture in a
/// shared directory could be (/tmp): a symbolic link is refused (`O_NOFOLLOW`), a new file is
/// created exclusively (`O_EXCL`), and an existing regular file is truncated only when it is
/// ours and has no other hard link. Devices and pipes (`/dev/null`, a FIFO) are written as is.
fn create_output(path: &Path) -> anyhow::Result<File> {
    let shown = path.display();
    let refuse =
        |why: &str| exit::coded(exit::USAGE, format!("refusing to write '{shown}': {why}"));
    let cannot = |e: io::Error| exit::because(exit::USAGE, format!("cannot create '{shown}'"), e);
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match created {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(cannot(e)),
        Err(_) => {}
    }
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refuse("it is a symbolic link (give the real path)")
            } else {
                cannot(e)
            }
        })?;
    let meta = f.metadata().map_err(cannot)?;
    if meta.file_type().is_file() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if meta.uid() != euid {
            return Err(refuse("it belongs to another user (remove it first)"));
        }
        if meta.nlink() > 1 {
            return Err(refuse("it has other hard links (remove it first)"));
        }
        f.set_len(0).map_err(cannot)?;
    }
    Ok(f)
}

/// How a live capture's kernel ring is set up (`capture`, and `analyze --live`).
#[derive(Args, Debug, Clone)]
pub struct RingArgs {
    /// Bytes kept of each packet captured live.
    #[arg(
        long,
        short_alias = 's',
        default_value_t = 262_144,
        value_name = "BYTES"
    )]
    pub snaplen: u32,
    /// Size of the kernel ring buffer of a live capture.
    #[arg(long, default_value = "32MiB", value_parser = parse_size, value_name = "SIZE")]
    pub buffer: u64,
}
