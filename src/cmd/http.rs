//! `latscope http URL`: HTTP load with wrk's speed and wrk2's coordinated-omission correction.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use latscope_core::LatencyHistogram;
use latscope_core::model::http::{CertificateCheck, HttpErrors, HttpInterval, HttpReport};
use latscope_core::model::rr::LoadMode;
use latscope_core::model::{IntervalEvent, Meta};
use latscope_core::render::{OutputFormat, emit_event};
use latscope_core::units::{self, format_ns, format_si};
use latscope_http::{Config, ErrorKind, Interval, Options, RunResult};
use latscope_tui::{Goal, LiveState, RateUnit, Tick};

use crate::exit;
use crate::live::LongRunOutput;
use crate::output;

const AFTER_HELP: &str = "\
Examples:
  latscope http http://127.0.0.1:8080/                 closed loop, 50 connections, 10 s
  latscope http http://10.0.0.2/ -c 100 -t 2 -d 30s    like wrk -c 100 -t 2 -d 30s
  latscope http http://10.0.0.2/ -q 15k -d 2m --warmup 10s   open loop at 15k req/s
  latscope http https://host/api -X POST --body '{}' -H 'Content-Type: application/json'
  latscope http https://localhost:8443/ -k -n 10000    exactly 10000 requests, no cert check
  latscope http http://svc/ --connect-to 127.0.0.1:8080 --hgrm out.hgrm
  latscope http https://host/ --http2 --streams 10 -c 10   HTTP/2, 100 streams in flight

Closed loop (default): each connection sends its next request when the previous response is complete. Open loop (-q): requests are due at a constant total rate; latency is also counted from when each request was due, so a stalled server shows up in the percentiles (coordinated omission, as corrected by wrk2).

Latency is counted from when a request's first byte is written to the socket to when the last byte of its response has been read. In closed loop every connection always has one request in flight, so the mean equals connections ÷ requests/s (Little's law; the summary shows the check).
wrk's figures can be lower under concurrency: its clock starts when its event loop gets round to writing the request, not when the previous response ended.

Exit codes: 0 ok; 1 some requests failed or were answered with an error page (status not 2xx/3xx); 2 bad input; 3 target unreachable, refused, not HTTP, or no request succeeded; 5 local system error; 130 interrupted (partial results).";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct HttpArgs {
    /// Target URL: http://HOST[:PORT]/PATH or https://...
    pub url: String,
    /// Concurrent keep-alive connections (with --http2, each carries --streams streams).
    #[arg(short = 'c', long, default_value_t = 50, value_name = "N")]
    pub connections: u32,
    /// Worker threads, never more than connections [default: one per core].
    #[arg(short = 't', long)]
    pub threads: Option<u32>,
    /// Measured duration, e.g. 10s, 2m [default: 10s unless -n is given].
    #[arg(short = 'd', long, value_parser = units::parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,
    /// Send exactly this many measured requests (e.g. 10000, 1m), then stop.
    #[arg(short = 'n', long, alias = "requests", value_parser = units::parse_count, value_name = "COUNT")]
    pub count: Option<u64>,
    /// Open loop at this total rate, requests per second (e.g. 500, 15k).
    #[arg(short = 'q', long, value_parser = units::parse_rate, value_name = "RATE")]
    pub rate: Option<f64>,
    /// Run this long before measuring; the warm-up is excluded from every figure.
    #[arg(long, short_alias = 'w', value_parser = units::parse_duration, default_value = "0s", value_name = "DURATION")]
    pub warmup: Duration,
    /// Give up on a request (or a connection attempt) after this long.
    #[arg(short = 'W', long, value_parser = units::parse_duration, default_value = "2s", value_name = "DURATION")]
    pub timeout: Duration,
    /// HTTP method (HEAD responses are read without a body).
    #[arg(short = 'X', long, short_alias = 'm', default_value = "GET")]
    pub method: String,
    /// Extra request header 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body (sets Content-Length).
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// Request body from a file.
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: super::TlsArgs,
    /// Connect to HOST:PORT instead of the URL's host (the URL still names the Host header).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect_to: Option<String>,
    /// Host header (and TLS server name) instead of the URL's host.
    #[arg(long)]
    pub host: Option<String>,
    /// Write the latency distribution to FILE in HdrHistogram's percentile-distribution format
    /// (milliseconds; from the intended send time in open loop).
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
    /// HTTP/2: h2 over TLS (ALPN) for https://, h2c with prior knowledge for http://; closed or
    /// open loop (-q).
    #[arg(long)]
    pub http2: bool,
    /// HTTP/2: concurrent streams per connection.
    #[arg(long, default_value_t = 1, requires = "http2")]
    pub streams: u32,
    /// Re-arm TCP_QUICKACK after every read: never delay an ACK (HTTP/1.1 only). A server whose
    /// Nagle algorithm waits for the client's delayed ACK then answers without the ~40 ms stall.
    #[arg(long, conflicts_with = "http2")]
    pub quickack: bool,
    #[command(flatten)]
    pub view: LongRunOutput,
}

/// The engine's options from the command line (reads --body-file).
fn options(args: &HttpArgs) -> anyhow::Result<Options> {
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => b.clone().into_bytes(),
        (None, Some(p)) => std::fs::read(p).map_err(|e| {
            exit::because(
                exit::USAGE,
                format!("cannot read --body-file {}", p.display()),
                e,
            )
        })?,
        (None, None) => Vec::new(),
    };
    Ok(Options {
        url: args.url.clone(),
        method: args.method.clone(),
        headers: args.headers.clone(),
        body,
        connections: args.connections,
        threads: args.threads.unwrap_or_else(latscope_http::default_threads),
        duration: args.duration,
        requests: args.count,
        rate_per_sec: args.rate,
        warmup: args.warmup,
        timeout: args.timeout,
        insecure: args.tls.insecure,
        ca_files: args.tls.cacert.clone(),
        connect_to: args.connect_to.clone(),
        host: args.host.clone(),
        http2: args.http2,
        streams: args.streams,
        quickack: args.quickack,
    })
}

pub fn run(args: &HttpArgs) -> anyhow::Result<u8> {
    let opts = options(args)?;
    let cfg = Config::new(&opts)?;
    let format = args.view.output.format();
    let started = output::unix_ms();
    let stop = crate::interrupt::stop_flag();

    let live = args.view.start_live(live_state(args, &cfg), &stop);
    let bar = (args.view.output.progress() && live.is_none()).then(|| spinner(&cfg));
    let mut total = 0u64;
    let mut on_interval = |iv: &Interval, hist: &LatencyHistogram| {
        total += iv.requests;
        if let Some(v) = &live {
            v.update(|st| {
                st.tick(Tick {
                    end_ns: iv.end_ns,
                    count: iv.requests,
                    errors: iv.errors,
                    rate: interval_event(iv).rate_per_sec,
                    latency: Some(&iv.latency),
                    hist: Some(hist),
                })
            });
        }
        if let Some(b) = &bar {
            b.set_message(progress_message(total, iv));
        }
        if format == OutputFormat::JsonLines {
            output::live(
                emit_event(&interval_event(iv), &mut std::io::stdout().lock()),
                &stop,
            );
        }
    };
    let result = latscope_http::run(&cfg, &stop, &mut on_interval);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    // The screen is given back before anything is printed, also on error.
    drop(live);
    let result = result?;

    if let Some(path) = &args.hgrm {
        let hist = if cfg.rate_per_sec.is_some() {
            &result.stats.latency_intended
        } else {
            &result.stats.latency
        };
        std::fs::write(path, hgrm_text(hist))
            .with_context(|| format!("cannot write --hgrm {}", path.display()))?;
    }
    let report = build_report(
        &cfg,
        &result,
        Meta::new("http", env!("CARGO_PKG_VERSION"), started),
    );
    args.view.print(&report)?;
    Ok(exit_code(&report))
}

/// Interrupted, nothing answered (the target's fault), some errors (findings), or clean.
fn exit_code(report: &HttpReport) -> u8 {
    if report.interrupted {
        exit::INTERRUPTED
    } else if report.requests == 0 && report.errors.total > 0 {
        exit::TARGET
    } else if report.errors.total > 0 || report.error_statuses() > 0 {
        exit::FINDINGS
    } else {
        exit::OK
    }
}

/// The progress spinner shown on a TTY when the live view is off.
fn spinner(cfg: &Config) -> ProgressBar {
    let b = ProgressBar::new_spinner();
    b.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    b.enable_steady_tick(Duration::from_millis(200));
    b.set_message(if cfg.warmup_ns > 0 {
        "warming up…".to_string()
    } else {
        "connecting…".to_string()
    });
    b
}

/// The spinner's line after an interval: requests so far, the interval's rate and percentiles.
fn progress_message(total: u64, iv: &Interval) -> String {
    let secs = (iv.end_ns - iv.start_ns) as f64 / 1e9;
    let mut m = format!(
        "{} requests  {} req/s",
        total,
        format_si(iv.requests as f64 / secs.max(1e-9))
    );
    if iv.latency.count > 0 {
        let _ = write!(
            m,
            "  p50 {}  p99 {}",
            format_ns(iv.latency.p50_ns as f64),
            format_ns(iv.latency.p99_ns as f64)
        );
    }
    if iv.errors > 0 {
        let _ = write!(m, "  {} errors", iv.errors);
    }
    m
}

/// The live view's empty state: the run's end is its -n count, or warm-up + duration.
fn live_state(args: &HttpArgs, cfg: &Config) -> LiveState {
    let goal = match (cfg.requests, args.duration) {
        (Some(n), _) => Goal::Count(n),
        (None, d) => Goal::Duration(args.warmup + d.unwrap_or(Duration::from_secs(10))),
    };
    let mut title = format!(
        "latscope http {}  {} connections",
        cfg.url_text, cfg.connections
    );
    if let Some(r) = cfg.rate_per_sec {
        let _ = write!(title, ", open loop at {} req/s", format_si(r));
    }
    let mut st = LiveState::new(title, goal, RateUnit::PerSec("req/s"));
    st.status = if cfg.warmup_ns > 0 {
        "warming up…".into()
    } else {
        "connecting…".into()
    };
    st
}

fn interval_event(iv: &Interval) -> IntervalEvent {
    let secs = (iv.end_ns - iv.start_ns) as f64 / 1e9;
    IntervalEvent {
        event: "interval".into(),
        command: "http".into(),
        label: String::new(),
        start_ns: iv.start_ns,
        end_ns: iv.end_ns,
        count: iv.requests,
        rate_per_sec: if secs > 0.0 {
            iv.requests as f64 / secs
        } else {
            0.0
        },
        errors: iv.errors,
        latency: iv.latency.clone(),
    }
}

/// The report (the same struct `--json` prints) from what the engine measured.
pub fn build_report(cfg: &Config, r: &RunResult, meta: Meta) -> HttpReport {
    let s = &r.stats;
    let secs = r.elapsed_ns as f64 / 1e9;
    let per_sec = |v: u64| if secs > 0.0 { v as f64 / secs } else { 0.0 };
    let e = &s.errors;
    HttpReport {
        meta,
        url: cfg.url_text.clone(),
        method: cfg.method.clone(),
        protocol: if cfg.h2.is_some() {
            "HTTP/2".into()
        } else {
            "HTTP/1.1".into()
        },
        streams_per_connection: cfg.h2.as_ref().map(|_| cfg.h2_streams),
        address: r.addr.to_string(),
        address_choice: Some(r.address_choice.clone()),
        tls: cfg.tls.is_some(),
        certificate: cfg.tls.is_some().then_some(if cfg.insecure {
            CertificateCheck::NotVerified
        } else {
            CertificateCheck::Verified
        }),
        connections: cfg.connections,
        threads: cfg.threads,
        load: match cfg.rate_per_sec {
            Some(rate_per_sec) => LoadMode::Open { rate_per_sec },
            None => LoadMode::Closed,
        },
        warmup_ns: cfg.warmup_ns,
        elapsed_ns: r.elapsed_ns,
        requests: s.requests,
        requests_per_sec: per_sec(s.requests),
        bytes_read: s.bytes_read,
        bytes_read_per_sec: per_sec(s.bytes_read),
        bytes_written: s.bytes_written,
        latency: s.latency.summary(),
        latency_from_intended: cfg.rate_per_sec.map(|_| s.latency_intended.summary()),
        latency_bins: Some(s.latency.log_bins()),
        latency_from_intended_bins: cfg.rate_per_sec.map(|_| s.latency_intended.log_bins()),
        late_sends: s.late_sends,
        status: s.status_counts(),
        error_responses: s.error_responses(),
        errors: HttpErrors {
            connect: e.get(ErrorKind::Connect),
            timeout: e.get(ErrorKind::Timeout),
            reset: e.get(ErrorKind::Reset),
            closed: e.get(ErrorKind::Closed),
            malformed: e.get(ErrorKind::Malformed),
            tls: e.get(ErrorKind::Tls),
            io: e.get(ErrorKind::Io),
            total: e.total(),
        },
        error_samples: s.error_samples.clone(),
        connections_opened: s.connections_opened,
        connect: s.connect.summary(),
        tls_handshake: cfg.tls.is_some().then(|| s.tls_handshake.summary()),
        warmup_requests: s.warmup_requests,
        timeline: r
            .intervals
            .iter()
            .map(|iv| {
                let secs = (iv.end_ns - iv.start_ns) as f64 / 1e9;
                HttpInterval {
                    start_ns: iv.start_ns,
                    end_ns: iv.end_ns,
                    requests: iv.requests,
                    requests_per_sec: if secs > 0.0 {
                        iv.requests as f64 / secs
                    } else {
                        0.0
                    },
                    errors: iv.errors,
                    bytes_read: iv.bytes,
                    p50_ns: iv.latency.p50_ns,
                    p99_ns: iv.latency.p99_ns,
                    max_ns: iv.latency.max_ns,
                    raw_p50_ns: iv.raw_latency.as_ref().map(|s| s.p50_ns),
                    raw_p99_ns: iv.raw_latency.as_ref().map(|s| s.p99_ns),
                }
            })
            .collect(),
        interrupted: r.interrupted,
    }
}

/// HdrHistogram's classic percentile-distribution text (`outputPercentileDistribution`, the
/// `.hgrm` format HdrHistogram's plotter and wrk2 use), values in milliseconds.
pub fn hgrm_text(h: &LatencyHistogram) -> String {
    let mut out = String::from("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
    for (value_ns, q, cum) in h.percentile_distribution(5) {
        let ms = value_ns as f64 / 1e6;
        if q < 1.0 {
            let _ = writeln!(out, "{ms:12.3} {q:2.12} {cum:10} {:14.2}", 1.0 / (1.0 - q));
        } else {
            let _ = writeln!(out, "{ms:12.3} {q:2.12} {cum:10}");
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean_ns() / 1e6,
        h.stddev_ns() / 1e6
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max_ns() as f64 / 1e6,
        h.count()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/http.md's flag table and `latscope http --help` describe the same flags, with the
    /// same defaults and the same restrictions (the doc said `--http2` runs closed or open loop
    /// while the help said "closed loop only"; the engine does both).
    #[test]
    fn help_agrees_with_the_docs() {
        use clap::CommandFactory;
        let doc = include_str!("../../docs/http.md");
        let table = doc
            .split("\n## Flags\n")
            .nth(1)
            .and_then(|t| t.split("\n## ").next())
            .expect("docs/http.md has a '## Flags' section");
        // Long flag → its row, lower-cased.
        let mut rows: std::collections::BTreeMap<String, String> = Default::default();
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let first = row.split(" | ").next().unwrap_or(row);
            for flag in first.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
                if let Some(long) = flag.strip_prefix("--") {
                    rows.insert(long.to_string(), row.to_lowercase());
                }
            }
        }
        let cli = crate::cli::Cli::command();
        let http = cli.find_subcommand("http").expect("an http subcommand");
        let mut problems = Vec::new();
        for arg in http.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set() || ["help", "version"].contains(&long) {
                continue;
            }
            let Some(row) = rows.remove(long) else {
                problems.push(format!("--{long} is not in docs/http.md's flag table"));
                continue;
            };
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string().to_lowercase())
                .unwrap_or_default();
            for d in arg.get_default_values() {
                let d = d.to_string_lossy().to_lowercase();
                let squashed: String = row.split_whitespace().collect();
                if !["0s", "false"].contains(&d.as_str())
                    && !squashed.contains(&format!("default{d}"))
                {
                    problems.push(format!(
                        "--{long}: --help's default is {d}, the doc's row: {row}"
                    ));
                }
            }
            for claim in [
                "closed loop only",
                "open loop",
                "http/1.1 only",
                "repeatable",
            ] {
                if help.contains(claim) != row.contains(claim) {
                    problems.push(format!(
                        "--{long}: '{claim}' in {} only (help: {help}; doc: {row})",
                        if help.contains(claim) {
                            "--help"
                        } else {
                            "the doc"
                        }
                    ));
                }
            }
        }
        for long in rows.keys() {
            problems.push(format!(
                "docs/http.md lists --{long}, which latscope http does not have"
            ));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn hgrm_layout() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1_000_000);
        }
        let text = hgrm_text(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("Percentile TotalCount"));
        // Monotonic values and counts; the last data row is percentile 1 with every sample.
        let rows: Vec<Vec<&str>> = lines[2..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let last = rows.last().unwrap();
        assert_eq!(last[1].parse::<f64>().unwrap(), 1.0);
        assert_eq!(last[2], "1000");
        assert!((last[0].parse::<f64>().unwrap() - 1000.0).abs() < 1.0);
        let median = rows
            .iter()
            .find(|r| r[1].parse::<f64>().unwrap() >= 0.5)
            .unwrap();
        assert!(
            (median[0].parse::<f64>().unwrap() - 500.0).abs() < 1.0,
            "{median:?}"
        );
        assert!(text.contains("Total count    =         1000]"));
    }
}
