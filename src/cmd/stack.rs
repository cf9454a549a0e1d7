//! `latscope stack`: kernel receive-stack latency per hook point (netstacklat's probes) and the
//! time transmitted packets spend in each stage of the way out, from eBPF log2 histograms;
//! `--prometheus` serves them at /metrics.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use latscope_core::log2::format_estimate_ns;
use latscope_core::model::Meta;
use latscope_core::model::stack::{
    Directions, Filters, GroupBy, HookKind, Probe, ProbeHistogram, ProbeStamps, StackInterval,
    StackReport,
};
use latscope_core::render::stack as report;
use latscope_core::render::{OutputFormat, Page, emit_event};
use latscope_core::units::parse_duration;
use latscope_ebpf::prometheus::{Snapshot, StackCollector};
use latscope_ebpf::session::RawHistogram;
use latscope_ebpf::{HookMode, Session, StackConfig, sys};
use latscope_exporter::{Limits, Server};
use latscope_tui::{Goal, LiveState, RateUnit, Tick};

use crate::exit;
use crate::interrupt::stop_flag;
use crate::live::LongRunOutput;
use crate::output::unix_ms;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupByArg {
    None,
    Interface,
    Cgroup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DirectionArg {
    /// The receive path: time since each packet's arrival at seven hook points (netstacklat's).
    Rx,
    /// The transmit path: time in each of eight stages, from the socket write to TX completion.
    Tx,
    /// Both.
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HooksArg {
    /// fentry/fexit where the kernel allows, else tracepoint/cgroup_skb/netfilter/kprobe fallbacks.
    Auto,
    /// Only fentry/fexit (netstacklat's hooks).
    Fentry,
    /// Only the tracepoint/tp_btf/raw_tp/cgroup_skb/netfilter/kprobe fallbacks.
    Fallback,
}

const AFTER_HELP: &str = "\
Examples:
  latscope stack --list-probes               which probes this kernel supports, and how
  latscope stack -I eth0                     all probes for packets received on eth0, every 5 s
  latscope stack --probes tcp-socket-enqueued,tcp-socket-read --pid $(pidof nginx)
  latscope stack --direction tx --lport 443  where nginx's responses wait on their way out
  latscope stack --direction both --group-by interface -i 10s -d 1m --json
  latscope stack --prometheus                serve /metrics on 127.0.0.1:9573 until Ctrl-C

Receive: latency = now − the packet's software receive timestamp, which latscope turns on while it runs.
Transmit: each stage's time, so a packet's stages add up from the write to its TX completion.
Needs CAP_BPF and CAP_PERFMON (or root) and a kernel with BTF (exit code 4 otherwise).";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct StackArgs {
    /// Show each probe, whether this kernel supports it, the hook implementing it and why not.
    #[arg(long)]
    pub list_probes: bool,
    /// The receive path, the transmit path, or both: every probe of that direction.
    #[arg(long, value_enum, default_value = "rx", conflicts_with = "probes")]
    pub direction: DirectionArg,
    /// Probes to attach, comma-separated, of either direction (default: all of --direction).
    #[arg(
        long,
        short_alias = 'p',
        value_delimiter = ',',
        value_name = "PROBE,..."
    )]
    pub probes: Vec<Probe>,
    /// Only packets received (or sent) on this interface (name in this namespace, or ifindex).
    #[arg(short = 'I', long, value_name = "IFACE")]
    pub interface: Option<String>,
    /// Only packets in this network namespace (/proc/PID/ns/net, a name in /run/netns, or inode).
    #[arg(long, value_name = "NETNS")]
    pub netns: Option<String>,
    /// Only reads by this process (socket-read probes), or packets of the sockets it writes to
    /// (transmit stages).
    #[arg(long)]
    pub pid: Option<u32>,
    /// Only sockets in this cgroup v2 (directory or id); ip-start, which has no socket yet, then records nothing.
    #[arg(long, value_name = "CGROUP")]
    pub cgroup: Option<String>,
    /// Only packets to (received) or from (sent) this local port.
    #[arg(long, value_name = "PORT")]
    pub lport: Option<u16>,
    /// Only packets from (received) or to (sent) this remote port.
    #[arg(long, value_name = "PORT")]
    pub rport: Option<u16>,
    /// Only packets of this local address (IPv4 also matches dual-stack sockets).
    #[arg(long, value_name = "ADDR")]
    pub laddr: Option<std::net::IpAddr>,
    /// Only packets of this remote address.
    #[arg(long, value_name = "ADDR")]
    pub raddr: Option<std::net::IpAddr>,
    /// One histogram per interface or per cgroup.
    #[arg(long, value_enum, default_value = "none")]
    pub group_by: GroupByArg,
    /// Print the histograms every INTERVAL.
    #[arg(
        short = 'i',
        long,
        short_alias = 'r',
        default_value = "5s",
        value_name = "DURATION"
    )]
    pub interval: String,
    /// Stop after DURATION (default: run until Ctrl-C).
    #[arg(short = 'd', long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Which implementations to use.
    #[arg(long, value_enum, default_value = "auto")]
    pub hooks: HooksArg,
    /// Time one packet in N at each probe (default 1: every packet). Cuts the per-packet cost
    /// at high packet rates; the histograms then hold ~1/N of the packets.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,
    /// Serve Prometheus metrics at http://ADDR/metrics (PORT or HOST:PORT; loopback:9573 if empty).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:9573")]
    pub prometheus: Option<String>,
    /// Calibration for the overhead benches: the same programs on the same hooks, each
    /// returning at once (nothing is recorded).
    #[arg(long, hide = true)]
    pub empty_programs: bool,
    #[command(flatten)]
    pub view: LongRunOutput,
}

fn config(a: &StackArgs) -> anyhow::Result<StackConfig> {
    let filters = Filters {
        ifindex: a
            .interface
            .as_deref()
            .map(sys::resolve_ifindex)
            .transpose()?,
        netns_inode: a.netns.as_deref().map(sys::resolve_netns).transpose()?,
        tgid: a.pid,
        cgroup_id: a.cgroup.as_deref().map(sys::resolve_cgroup).transpose()?,
        local_port: a.lport,
        remote_port: a.rport,
        local_addr: a.laddr,
        remote_addr: a.raddr,
    };
    if filters.tgid.is_some() && !a.probes.is_empty() && !a.probes.iter().any(|p| p.pid_applies()) {
        return Err(exit::coded(
            exit::USAGE,
            "--pid applies only to tcp-socket-read, udp-socket-read and the transmit stages; add one of them to --probes",
        ));
    }
    Ok(StackConfig {
        probes: a.probes.clone(),
        direction: match a.direction {
            DirectionArg::Rx => Directions::Rx,
            DirectionArg::Tx => Directions::Tx,
            DirectionArg::Both => Directions::Both,
        },
        empty_programs: a.empty_programs,
        mode: match a.hooks {
            HooksArg::Auto => HookMode::Auto,
            HooksArg::Fentry => HookMode::Fentry,
            HooksArg::Fallback => HookMode::Fallback,
        },
        filters,
        group_by: match a.group_by {
            GroupByArg::None => GroupBy::None,
            GroupByArg::Interface => GroupBy::Interface,
            GroupByArg::Cgroup => GroupBy::Cgroup,
        },
        try_all: a.list_probes,
        sample_every: a.sample,
    })
}

fn start(cfg: &StackConfig) -> anyhow::Result<Session> {
    Ok(Session::start(cfg)?)
}

/// Interface indices are per network namespace: names are looked up only when the packets are
/// known to be from latscope's own namespace (`names`), else the label is `if<index>`.
fn group_label(group_by: GroupBy, group: u64, names: bool) -> String {
    match group_by {
        GroupBy::None => "all".into(),
        GroupBy::Interface if names => {
            sys::ifname(group as u32).unwrap_or_else(|| format!("if{group}"))
        }
        GroupBy::Interface => format!("if{group}"),
        GroupBy::Cgroup => format!("cgroup{group}"),
    }
}

/// Whether `--netns` (if any) is latscope's own namespace.
fn netns_is_own(filter: Option<u64>) -> bool {
    use std::os::unix::fs::MetadataExt;
    match filter {
        None => true,
        Some(ino) => std::fs::metadata("/proc/self/ns/net").is_ok_and(|m| m.ino() == ino),
    }
}

struct View<'a> {
    session: &'a Session,
    group_by: GroupBy,
    names: bool,
}

impl View<'_> {
    fn hook_of(&self, p: Probe) -> String {
        self.session
            .status()
            .iter()
            .find(|s| s.probe == p)
            .and_then(|s| s.hook.clone())
            .unwrap_or_default()
    }

    fn histograms(&self, raw: &[RawHistogram]) -> Vec<ProbeHistogram> {
        raw.iter()
            .map(|r| {
                ProbeHistogram::new(
                    r.probe,
                    &self.hook_of(r.probe),
                    group_label(self.group_by, r.group, self.names),
                    r.hist.clone(),
                )
            })
            .collect()
    }

    fn stamps(&self) -> anyhow::Result<Vec<ProbeStamps>> {
        let stats = self.session.read_stamp_stats()?;
        Ok(self
            .session
            .status()
            .iter()
            .filter(|s| s.available())
            .map(|s| ProbeStamps {
                probe: s.probe,
                stats: stats.get(&s.probe).copied().unwrap_or_default(),
            })
            .collect())
    }

    fn read(&self) -> anyhow::Result<Vec<RawHistogram>> {
        Ok(self.session.read_histograms()?)
    }

    fn attached(&self) -> Vec<(Probe, String)> {
        self.session
            .status()
            .iter()
            .filter_map(|s| s.hook.clone().map(|h| (s.probe, h)))
            .collect()
    }
}

fn delta(now: &[RawHistogram], before: &[RawHistogram]) -> Vec<RawHistogram> {
    now.iter()
        .map(|r| {
            let prev = before
                .iter()
                .find(|b| b.probe == r.probe && b.group == r.group);
            RawHistogram {
                probe: r.probe,
                group: r.group,
                hist: prev
                    .map(|p| r.hist.delta_since(&p.hist))
                    .unwrap_or_else(|| r.hist.clone()),
            }
        })
        .filter(|r| r.hist.count() > 0)
        .collect()
}

/// The start-up line: how many probes attached, on which hooks, what is unavailable.
fn attach_note(session: &Session, cfg: &StackConfig, server: Option<&Server>) -> String {
    let refused = session.unavailable_probes();
    let attached = session.attached_probes();
    let mut note = format!(
        "latscope stack: {} attached",
        latscope_core::units::count(attached as u64, "probe")
    );
    // Probes on a fallback because their fentry/fexit hook was refused or is missing here.
    let fell_back: Vec<String> = session
        .status()
        .iter()
        .filter(|s| s.available() && s.hook_kind != Some(HookKind::Fentry))
        .filter(|s| {
            s.refused
                .iter()
                .any(|r| r.hook.starts_with("fentry") || r.hook.starts_with("fexit"))
        })
        .map(|s| s.probe.to_string())
        .collect();
    let on_fentry = session
        .status()
        .iter()
        .any(|s| s.hook_kind == Some(HookKind::Fentry));
    if !fell_back.is_empty() && !on_fentry {
        note.push_str(
            " (fentry/fexit refused by this kernel: using fallback hooks; see --list-probes)",
        );
    } else if !fell_back.is_empty() {
        note.push_str(&format!(
            " (on fallback hooks, their fentry/fexit being unavailable here: {}; see --list-probes)",
            fell_back.join(", ")
        ));
    }
    if !refused.is_empty() {
        note.push_str(&format!("; unavailable: {}", refused.join(", ")));
    }
    if cfg.sample_every > 1 {
        note.push_str(&format!(
            "; timing one packet in {} at each probe",
            cfg.sample_every
        ));
    }
    if let Some(s) = server {
        note.push_str(&format!("; metrics at http://{}/metrics", s.local_addr()));
    }
    note
}

/// One interval's output: a snapshot table, or a JSON-lines event with the delta since the last.
fn print_interval(
    view: &View<'_>,
    format: OutputFormat,
    raw: &[RawHistogram],
    (prev, prev_ns, end_ns): (&[RawHistogram], u64, u64),
    stdout: &mut impl Write,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Human => {
            let mut page = Page::at_terminal_width();
            report::render_snapshot(unix_ms(), &view.histograms(raw), &mut page);
            page.push('\n');
            stdout.write_all(page.finish().as_bytes())?;
            stdout.flush()?;
        }
        OutputFormat::JsonLines => {
            let ev = StackInterval {
                event: "interval".into(),
                command: "stack".into(),
                start_ns: prev_ns,
                end_ns,
                histograms: view.histograms(&delta(raw, prev)),
            };
            emit_event(&ev, stdout)?;
        }
        OutputFormat::Json => {}
    }
    Ok(())
}

/// The live view's empty state: the run ends after -d, or when stopped.
fn live_state(duration: Option<Duration>, direction: Directions) -> LiveState {
    let goal = duration.map_or(Goal::Open, Goal::Duration);
    let mut st = LiveState::new(
        match direction {
            Directions::Rx => "latscope stack  kernel receive-path latency per hook",
            Directions::Tx => "latscope stack  time in each stage of the way out",
            Directions::Both => "latscope stack  receive latency per hook, transmit time per stage",
        },
        goal,
        RateUnit::PerSec("pkt/s"),
    );
    st.status = "waiting for the first interval…".into();
    st
}

/// One interval into the live view: the rate of the busiest hook, and a row per hook and group
/// with its packets and percentiles so far and in the interval.
fn live_tick(
    st: &mut LiveState,
    view: &View<'_>,
    raw: &[RawHistogram],
    (prev, prev_ns, end_ns): (&[RawHistogram], u64, u64),
) {
    let recent = view.histograms(&delta(raw, prev));
    let busiest = recent.iter().map(|h| h.count).max().unwrap_or(0);
    let secs = end_ns.saturating_sub(prev_ns) as f64 / 1e9;
    st.tick(Tick {
        end_ns,
        count: 0,
        errors: 0,
        rate: if secs > 0.0 {
            busiest as f64 / secs
        } else {
            0.0
        },
        latency: None,
        hist: None,
    });
    let rows = view
        .histograms(raw)
        .iter()
        .map(|h| {
            let now = recent
                .iter()
                .find(|r| r.probe == h.probe && r.group == h.group);
            vec![
                h.probe.to_string(),
                h.group.clone(),
                h.count.to_string(),
                format_estimate_ns(h.p50_ns),
                format_estimate_ns(h.p99_ns),
                now.map_or_else(|| "-".into(), |r| r.count.to_string()),
                now.filter(|r| r.count > 0)
                    .map_or_else(|| "-".into(), |r| format_estimate_ns(r.p99_ns)),
            ]
        })
        .collect();
    let header = [
        "hook",
        "group",
        "packets",
        "p50",
        "p99",
        "last packets",
        "last p99",
    ];
    st.table = Some((header.iter().map(|h| h.to_string()).collect(), rows));
}

/// Everything the session attaches is owned by file descriptors (nothing is pinned), so any
/// exit detaches it; the hook only says so, so that a panic message is not read as "probes left
/// behind".
fn note_detach_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        eprintln!(
            "latscope stack: internal error; its BPF programs are detached as the process exits"
        );
    }));
}

/// `-i/--interval`, at least 100 ms. `-i` was the interface before the one flag grammar (now
/// `-I`, as in ping): an interface name given to `-i` gets that hint rather than a bare parse error.
fn parse_interval(v: &str) -> anyhow::Result<Duration> {
    // A bare number is no duration (units::parse_duration), and was an ifindex for the old
    // `-i`: both hints.
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(exit::coded(
            exit::USAGE,
            format!("-i {v}: {v} what? write {v}ms or {v}s; for ifindex {v} give -I {v}"),
        ));
    }
    let interval = match parse_duration(v) {
        Ok(d) => d,
        Err(e) if std::path::Path::new("/sys/class/net").join(v).exists() => {
            return Err(exit::coded(
                exit::USAGE,
                format!("-i {v}: {e}; for the interface {v} give -I {v} (-i is the interval)"),
            ));
        }
        Err(e) => return Err(exit::coded(exit::USAGE, format!("-i/--interval: {e}"))),
    };
    if interval < Duration::from_millis(100) {
        return Err(exit::coded(
            exit::USAGE,
            "-i/--interval must be at least 100ms",
        ));
    }
    Ok(interval)
}

/// `stack --list-probes`: which probes attached, as a table or JSON.
fn print_probe_list(
    session: &Session,
    format: OutputFormat,
    stdout: &mut impl Write,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Human => {
            let mut page = Page::at_terminal_width();
            report::render_probe_list(session.status(), session.stamp_hook(), &mut page);
            stdout.write_all(page.finish().as_bytes())?;
        }
        _ => {
            serde_json::to_writer_pretty(&mut *stdout, session.status())?;
            writeln!(stdout)?;
        }
    }
    Ok(())
}

/// `--prometheus ADDR`: serve the collector's snapshots on /metrics.
fn start_exporter(
    addr: std::net::SocketAddr,
    collector: &std::sync::Arc<StackCollector>,
) -> anyhow::Result<Server> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(collector.clone()));
    Server::start(addr, std::sync::Arc::new(registry), Limits::default()).map_err(|e| {
        exit::because(
            exit::SYSTEM,
            format!("--prometheus: cannot listen on {addr}"),
            e,
        )
    })
}

pub fn run(a: &StackArgs) -> anyhow::Result<u8> {
    let interval = parse_interval(&a.interval)?;
    let cfg = config(a)?;
    let duration = a
        .duration
        .as_deref()
        .map(parse_duration)
        .transpose()
        .context("-d/--duration")?;
    let prom_addr = a
        .prometheus
        .as_deref()
        .map(latscope_exporter::parse_listen_addr)
        .transpose()
        .map_err(|e| exit::coded(exit::USAGE, format!("--prometheus: {e}")))?;
    let format = a.view.output.format();
    let stop = stop_flag();
    let mut stdout = std::io::stdout().lock();

    note_detach_on_panic();
    let session = start(&cfg)?;
    if a.list_probes {
        print_probe_list(&session, format, &mut stdout)?;
        return Ok(exit::OK);
    }
    // Started after attaching: a bind failure is an error after attach, and the session's Drop
    // detaches everything on the way out.
    let collector = std::sync::Arc::new(StackCollector::default());
    let server = prom_addr
        .map(|addr| start_exporter(addr, &collector))
        .transpose()?;

    let view = View {
        session: &session,
        group_by: cfg.group_by,
        names: netns_is_own(cfg.filters.netns_inode),
    };
    let note = attach_note(&session, &cfg, server.as_ref());
    // Always on stderr (stdout stays pure JSON with --json): scripts wait for this line.
    eprintln!("{note}. Ctrl-C to stop.");
    let live = a
        .view
        .start_live(live_state(duration, Directions::of(&cfg.wanted())), &stop);
    // The live view moves once a second; the printed snapshots keep -r.
    let interval = if live.is_some() {
        interval.min(Duration::from_secs(1))
    } else {
        interval
    };

    let started = Instant::now();
    let started_ms = unix_ms();
    let mut last_print = started;
    let mut last_prom = started;
    let mut prev: Vec<RawHistogram> = Vec::new();
    let mut prev_ns = 0u64;
    let interrupted = loop {
        std::thread::sleep(Duration::from_millis(50));
        if stop.load(Ordering::SeqCst) {
            break true;
        }
        let now = Instant::now();
        let done = duration.is_some_and(|d| now.duration_since(started) >= d);
        if server.is_some() && (now.duration_since(last_prom) >= Duration::from_secs(1) || done) {
            let raw = view.read()?;
            collector.update(Snapshot {
                attached: view.attached(),
                histograms: view.histograms(&raw),
                stamps: view.stamps()?,
                group_by: cfg.group_by,
            });
            last_prom = now;
        }
        if done {
            break false;
        }
        if now.duration_since(last_print) >= interval {
            last_print = now;
            let raw = view.read()?;
            let end_ns = now.duration_since(started).as_nanos() as u64;
            match &live {
                Some(v) => v.update(|st| live_tick(st, &view, &raw, (&prev, prev_ns, end_ns))),
                None => print_interval(&view, format, &raw, (&prev, prev_ns, end_ns), &mut stdout)?,
            }
            prev = raw;
            prev_ns = end_ns;
        }
    };
    // The screen is given back before anything is printed.
    drop(live);
    let raw = view.read()?;
    let report = StackReport {
        meta: Meta::new("stack", env!("CARGO_PKG_VERSION"), started_ms),
        group_by: cfg.group_by,
        filters: cfg.filters.clone(),
        probes: session.status().to_vec(),
        stamp_hook: session.stamp_hook().map(str::to_string),
        sample_every: cfg.sample_every.max(1),
        duration_ns: started.elapsed().as_nanos() as u64,
        interrupted,
        histograms: view.histograms(&raw),
        stamps: view.stamps()?,
    };
    drop(server);
    drop(session);
    a.view.print(&report)?;
    Ok(if interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use latscope_core::Log2Histogram;

    fn raw(probe: Probe, group: u64, values: &[u64]) -> RawHistogram {
        let mut hist = Log2Histogram::new();
        for &v in values {
            hist.record(v);
        }
        RawHistogram { probe, group, hist }
    }

    #[test]
    fn interval_delta_subtracts_per_probe_and_group_and_drops_empty() {
        let before = vec![
            raw(Probe::TcpStart, 0, &[1000]),
            raw(Probe::IpStart, 0, &[10]),
        ];
        let now = vec![
            raw(Probe::TcpStart, 0, &[1000, 2000, 2000]),
            raw(Probe::IpStart, 0, &[10]),
            raw(Probe::UdpStart, 3, &[5]),
        ];
        let d = delta(&now, &before);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].probe, Probe::TcpStart);
        assert_eq!(d[0].hist.count(), 2);
        assert_eq!(d[0].hist.sum_ns, 4000);
        assert_eq!(
            (d[1].probe, d[1].group, d[1].hist.count()),
            (Probe::UdpStart, 3, 1)
        );
    }

    #[test]
    fn group_labels() {
        assert_eq!(group_label(GroupBy::None, 7, true), "all");
        assert_eq!(group_label(GroupBy::Cgroup, 42, true), "cgroup42");
        assert_eq!(group_label(GroupBy::Interface, 1, true), "lo");
        assert_eq!(group_label(GroupBy::Interface, 1, false), "if1");
        assert_eq!(group_label(GroupBy::Interface, 999_999, true), "if999999");
        assert!(netns_is_own(None));
        assert!(!netns_is_own(Some(1)));
    }
}
