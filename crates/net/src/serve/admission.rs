//! Admission: connection and test slots, the `--workers` queue, and the check of a test request
//! against the server's limits.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use latscope_core::model::rr::Transport;
use latscope_core::units::format_span;

use super::{ServeConfig, Shared};
use crate::fair::RateLimit;
use crate::proto::{self, Limits, RefusalCode, Start, StreamSpec, TestKind, UDP_HEADER_LEN};

/// First come, first served admission to the `--workers` slots (a plain semaphore would let
/// the thread that just finished win again and starve the others — unlike a real worker,
/// which takes queued requests in order).
#[derive(Debug, Default)]
pub(super) struct WorkerQueue {
    busy: u32,
    next_ticket: u64,
    next_admit: u64,
}

/// One of `--workers` request slots; waits its turn, gives the slot back when dropped.
pub(super) struct WorkerPermit<'a>(Option<&'a Shared>);

impl<'a> WorkerPermit<'a> {
    pub(super) fn take(sh: &'a Shared) -> WorkerPermit<'a> {
        let Some(max) = sh.cfg.workers else {
            return WorkerPermit(None);
        };
        let Ok(mut q) = sh.busy.lock() else {
            return WorkerPermit(None);
        };
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        while q.next_admit != ticket || q.busy >= max {
            q = match sh.free.wait(q) {
                Ok(q) => q,
                Err(_) => return WorkerPermit(None),
            };
        }
        q.next_admit += 1;
        q.busy += 1;
        // The next ticket may be admissible too (more than one free slot).
        sh.free.notify_all();
        WorkerPermit(Some(sh))
    }
}

impl Drop for WorkerPermit<'_> {
    fn drop(&mut self) {
        if let Some(sh) = self.0
            && let Ok(mut q) = sh.busy.lock()
        {
            q.busy = q.busy.saturating_sub(1);
            sh.free.notify_all();
        }
    }
}

/// What one source address holds.
#[derive(Debug, Default)]
pub(super) struct SourceUse {
    conns: u32,
    tests: u32,
}

/// A budgeted resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resource {
    /// One of `--max-connections` (and of the source's share).
    Conn,
    /// One of `--max-tests` (and of the source's share).
    Test,
    /// Bytes of buffers.
    Memory(u64),
}

/// A resource held; given back when dropped.
pub(super) struct Held {
    sh: Arc<Shared>,
    what: Resource,
    ip: Option<IpAddr>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({:?})", self.what)
    }
}

/// Take `what` for a client at `ip` (None: a unix socket, no per-source share), or say why not.
pub(super) fn take(sh: &Arc<Shared>, what: Resource, ip: Option<IpAddr>) -> Result<Held, Refusal> {
    let cfg = &sh.cfg;
    let ip = ip.map(super::canonical);
    match what {
        Resource::Conn | Resource::Test => {
            let (counter, max, name) = match what {
                Resource::Conn => (&sh.conns, cfg.max_connections, "connections"),
                _ => (&sh.tests, cfg.limits.max_tests, "tests"),
            };
            if counter.fetch_add(1, Ordering::SeqCst) >= max {
                counter.fetch_sub(1, Ordering::SeqCst);
                let running = sh.tests.load(Ordering::Relaxed).min(cfg.limits.max_tests);
                return Err((
                    RefusalCode::Busy,
                    format!("{running} tests running, retry later"),
                ));
            }
            if let Some(ip) = ip
                && let Err(share) = take_share(sh, what, ip)
            {
                counter.fetch_sub(1, Ordering::SeqCst);
                return Err((
                    RefusalCode::Quota,
                    format!("{ip} already holds its share of {share} {name} on this server"),
                ));
            }
        }
        Resource::Memory(bytes) => take_memory(sh, bytes)?,
    }
    Ok(Held {
        sh: sh.clone(),
        what,
        ip,
    })
}

/// Count one more connection or test of `ip`; Err(its share) when it has it all.
fn take_share(sh: &Shared, what: Resource, ip: IpAddr) -> Result<(), u32> {
    let Ok(mut m) = sh.sources.lock() else {
        return Ok(());
    };
    let u = m.entry(ip).or_default();
    let (n, share) = match what {
        Resource::Conn => (&mut u.conns, sh.cfg.connections_per_source()),
        _ => (&mut u.tests, sh.cfg.tests_per_source()),
    };
    if *n >= share {
        if u.conns == 0 && u.tests == 0 {
            m.remove(&ip);
        }
        return Err(share);
    }
    *n += 1;
    Ok(())
}

fn take_memory(sh: &Shared, bytes: u64) -> Result<(), Refusal> {
    let b = &sh.cfg.budget;
    let mib = |n: u64| n.div_ceil(1 << 20);
    if bytes > b.max_test_memory_bytes {
        return Err((
            RefusalCode::Limit,
            format!(
                "the test needs {} MiB of buffers; this server allows {} MiB per test: use fewer streams or a smaller --length",
                mib(bytes),
                mib(b.max_test_memory_bytes)
            ),
        ));
    }
    let mut cur = sh.memory.load(Ordering::SeqCst);
    loop {
        if cur + bytes > b.max_memory_bytes {
            let running = sh.tests.load(Ordering::Relaxed);
            return Err((
                RefusalCode::Busy,
                format!("{running} tests running, retry later"),
            ));
        }
        match sh
            .memory
            .compare_exchange(cur, cur + bytes, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => return Ok(()),
            Err(now) => cur = now,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let sh = &self.sh;
        match self.what {
            Resource::Memory(bytes) => {
                sh.memory.fetch_sub(bytes, Ordering::SeqCst);
                return;
            }
            Resource::Conn => sh.conns.fetch_sub(1, Ordering::SeqCst),
            Resource::Test => sh.tests.fetch_sub(1, Ordering::SeqCst),
        };
        if let Some(ip) = self.ip
            && let Ok(mut m) = sh.sources.lock()
            && let Some(u) = m.get_mut(&ip)
        {
            match self.what {
                Resource::Conn => u.conns = u.conns.saturating_sub(1),
                _ => u.tests = u.tests.saturating_sub(1),
            }
            if u.conns == 0 && u.tests == 0 {
                m.remove(&ip);
            }
        }
    }
}

/// Bursts a source's rate allows (`--per-source-rate`): 50 ms worth of it.
const RATE_BURST: std::time::Duration = std::time::Duration::from_millis(50);

/// The rate limit a test of `ip` shares with that address's other running tests; None when the
/// server has no per-source rate, or for unix-socket clients.
pub(super) fn source_rate(sh: &Shared, ip: Option<IpAddr>) -> Option<Arc<RateLimit>> {
    let bytes_per_s = sh.cfg.budget.max_source_rate_bytes?;
    let ip = super::canonical(ip?);
    let mut m = sh.rates.lock().ok()?;
    if let Some(l) = m.get(&ip).and_then(std::sync::Weak::upgrade) {
        return Some(l);
    }
    // Forget addresses none of whose tests run any more.
    m.retain(|_, w| w.strong_count() > 0);
    let l = Arc::new(RateLimit::new(bytes_per_s, RATE_BURST));
    m.insert(ip, Arc::downgrade(&l));
    Some(l)
}

/// Bytes of thread stack of every connection and flow thread.
pub(super) const THREAD_STACK: usize = 256 * 1024;

/// The buffers a test will allocate, bytes (see [`super::Budget`]).
pub(super) fn memory_needed(start: &Start) -> u64 {
    let stack = THREAD_STACK as u64;
    match (&start.stream, start.kind) {
        (Some(spec), TestKind::Stream) => {
            let buf = u64::from(spec.buffer_bytes).max(4096);
            (0..spec.flows())
                .map(|i| {
                    let server_sends = !spec.client_sends(i);
                    match spec.transport {
                        Transport::Udp if !server_sends => 0,
                        _ if server_sends && spec.options.zerocopy => 2 * buf + stack,
                        _ => buf + stack,
                    }
                })
                .sum()
        }
        _ => u64::from(start.request_bytes) + u64::from(start.response_bytes),
    }
}

/// Why a request is refused: the protocol's code and a message telling the client what to change.
pub(super) type Refusal = (RefusalCode, String);

/// Check a test request against the limits; the refusal text tells the client what to change.
pub(super) fn validate(start: &Start, cfg: &ServeConfig, unix: bool) -> Result<(), Refusal> {
    if cfg.evidence_only && start.kind != TestKind::Evidence {
        return Err((
            RefusalCode::Invalid,
            "this is an agent's evidence endpoint: it answers evidence requests only (run tests against latscope serve)".into(),
        ));
    }
    let limits = &cfg.limits;
    check_sizes(start, limits)?;
    check_duration(start.duration_ms, limits)?;
    if start.kind == TestKind::UdpRr {
        check_udp_rr(start, unix)?;
        check_amplification(start, cfg.budget.max_udp_amplification)?;
    }
    if start.kind == TestKind::Stream {
        check_stream(start, limits, unix)?;
        if let Some(spec) = &start.stream {
            check_udp_rate(spec, cfg.budget.max_udp_rate_bps)?;
            check_congestion(spec, &latscope_sys::net::allowed_congestion_controls())?;
        }
    }
    if start.server.think_ns > 10_000_000_000 {
        return Err((RefusalCode::Limit, "think time above 10 s".into()));
    }
    Ok(())
}

fn check_sizes(start: &Start, limits: &Limits) -> Result<(), Refusal> {
    let max = limits.max_message_bytes;
    for (what, n) in [
        ("request", start.request_bytes),
        ("response", start.response_bytes),
    ] {
        if n == 0 {
            return Err((
                RefusalCode::Invalid,
                format!("{what} size 0: messages must be at least 1 byte"),
            ));
        }
        if n > max {
            return Err((
                RefusalCode::Limit,
                format!(
                    "{what} size {n} B exceeds this server's limit of {max} B (serve --max-message)"
                ),
            ));
        }
    }
    Ok(())
}

fn check_duration(duration_ms: u64, limits: &Limits) -> Result<(), Refusal> {
    if duration_ms > limits.max_duration_ms {
        return Err((
            RefusalCode::DurationLimit,
            format!(
                "a {} test exceeds this server's limit of {} (serve --max-duration)",
                format_span(Duration::from_millis(duration_ms)),
                format_span(Duration::from_millis(limits.max_duration_ms))
            ),
        ));
    }
    Ok(())
}

fn check_udp_rr(start: &Start, unix: bool) -> Result<(), Refusal> {
    if unix {
        return Err((
            RefusalCode::Invalid,
            "UDP tests need a TCP control connection, not a unix socket".into(),
        ));
    }
    if start.request_bytes < UDP_HEADER_LEN as u32 || start.response_bytes < UDP_HEADER_LEN as u32 {
        return Err((
            RefusalCode::Invalid,
            format!(
                "UDP messages carry a {UDP_HEADER_LEN}-byte header: sizes must be ≥ {UDP_HEADER_LEN}"
            ),
        ));
    }
    if start.request_bytes > 65_507 || start.response_bytes > 65_507 {
        return Err((
            RefusalCode::Invalid,
            "UDP messages are at most 65507 bytes".into(),
        ));
    }
    if start.server.think_ns > 0 {
        return Err((
            RefusalCode::Invalid,
            "think time is supported on stream tests only".into(),
        ));
    }
    Ok(())
}

fn check_stream(start: &Start, limits: &Limits, unix: bool) -> Result<(), Refusal> {
    let max = limits.max_message_bytes;
    let Some(spec) = &start.stream else {
        return Err((
            RefusalCode::Invalid,
            "a stream test without its description".into(),
        ));
    };
    if spec.streams == 0 || spec.streams > 128 {
        return Err((
            RefusalCode::Limit,
            format!("{} streams: this server allows 1 to 128", spec.streams),
        ));
    }
    if spec.buffer_bytes == 0 || spec.buffer_bytes > max {
        return Err((
            RefusalCode::Limit,
            format!(
                "buffer length {} B is outside 1 B – {max} B (serve --max-message)",
                spec.buffer_bytes
            ),
        ));
    }
    check_duration(spec.duration_ms, limits)?;
    if spec.duration_ms == 0 && spec.bytes_per_stream.is_none() {
        return Err((
            RefusalCode::Invalid,
            "a stream test needs a duration or a byte count".into(),
        ));
    }
    if spec.transport == Transport::Udp
        && (spec.buffer_bytes < proto::UDP_STREAM_HEADER_LEN as u32 || spec.buffer_bytes > 65_507)
    {
        return Err((
            RefusalCode::Invalid,
            format!(
                "UDP datagrams must be {}–65507 B",
                proto::UDP_STREAM_HEADER_LEN
            ),
        ));
    }
    if (spec.transport == Transport::Unix) != unix {
        return Err((
            RefusalCode::Invalid,
            "the stream's transport does not match this connection".into(),
        ));
    }
    Ok(())
}

/// A UDP answer at most `ratio` times the request: the server must not amplify.
fn check_amplification(start: &Start, ratio: u32) -> Result<(), Refusal> {
    let max = u64::from(start.request_bytes) * u64::from(ratio.max(1));
    if u64::from(start.response_bytes) > max {
        return Err((
            RefusalCode::Limit,
            format!(
                "a {} B UDP response to a {} B request: this server answers at most {ratio}× the request",
                start.response_bytes, start.request_bytes
            ),
        ));
    }
    Ok(())
}

/// UDP the server sends is paced, at a positive rate, and at most `max_bps` per test.
fn check_udp_rate(spec: &StreamSpec, max_bps: f64) -> Result<(), Refusal> {
    if spec.transport != Transport::Udp {
        return Ok(());
    }
    let rate = spec.udp_rate_bps.unwrap_or(f64::INFINITY);
    if rate.is_nan() || rate <= 0.0 {
        return Err((
            RefusalCode::Invalid,
            "a UDP test needs a rate above 0 bit/s".into(),
        ));
    }
    let server_flows = (0..spec.flows()).filter(|&i| !spec.client_sends(i)).count();
    let total = rate * server_flows as f64;
    if total > max_bps {
        return Err((
            RefusalCode::Limit,
            format!(
                "{:.0} Mbit/s of UDP from the server: this server sends at most {:.0} Mbit/s per test",
                total / 1e6,
                max_bps / 1e6
            ),
        ));
    }
    Ok(())
}

/// Only congestion controls unprivileged users may pick (`allowed`): the server may run as
/// root, and a name outside the list could autoload a kernel module.
fn check_congestion(spec: &StreamSpec, allowed: &[String]) -> Result<(), Refusal> {
    match &spec.options.congestion {
        Some(cc) if !allowed.iter().any(|a| a == cc) => Err((
            RefusalCode::Invalid,
            format!(
                "congestion control '{cc}' is not allowed on this server (net.ipv4.tcp_allowed_congestion_control: {})",
                allowed.join(" ")
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latscope_core::model::rr::ServerBehaviour;

    fn start(kind: TestKind, req: u32, resp: u32, dur: u64) -> Start {
        Start {
            kind,
            request_bytes: req,
            response_bytes: resp,
            duration_ms: dur,
            server: ServerBehaviour::default(),
            stream: None,
            join: None,
        }
    }

    #[test]
    fn limits_are_enforced() {
        let cfg = ServeConfig {
            limits: Limits {
                max_tests: 1,
                max_duration_ms: 10_000,
                max_message_bytes: 1000,
            },
            ..ServeConfig::default()
        };
        let code = |s: &Start, unix| validate(s, &cfg, unix).map_err(|e| e.0);
        assert!(code(&start(TestKind::Rr, 64, 64, 1000), false).is_ok());
        assert_eq!(
            code(&start(TestKind::Rr, 0, 64, 1000), false),
            Err(RefusalCode::Invalid)
        );
        assert_eq!(
            code(&start(TestKind::Rr, 64, 2000, 1000), false),
            Err(RefusalCode::Limit)
        );
        assert_eq!(
            code(&start(TestKind::Rr, 64, 64, 20_000), false),
            Err(RefusalCode::DurationLimit)
        );
        assert_eq!(
            code(&start(TestKind::UdpRr, 10, 64, 1000), false),
            Err(RefusalCode::Invalid)
        );
        assert_eq!(
            code(&start(TestKind::UdpRr, 64, 64, 1000), true),
            Err(RefusalCode::Invalid)
        );
        // Amplification: 20 B asking for 1000 B is refused, 100 B for 1000 B is not.
        assert_eq!(
            code(&start(TestKind::UdpRr, 20, 1000, 1000), false),
            Err(RefusalCode::Limit)
        );
        assert!(code(&start(TestKind::UdpRr, 100, 1000, 1000), false).is_ok());
    }

    #[test]
    fn an_evidence_endpoint_refuses_tests() {
        let cfg = ServeConfig {
            evidence_only: true,
            ..ServeConfig::default()
        };
        for kind in [
            TestKind::Rr,
            TestKind::Crr,
            TestKind::UdpRr,
            TestKind::Stream,
        ] {
            let r = validate(&start(kind, 64, 64, 1000), &cfg, false);
            assert!(
                matches!(&r, Err((RefusalCode::Invalid, m)) if m.contains("evidence requests only")),
                "{kind:?}: {r:?}"
            );
        }
        assert!(validate(&start(TestKind::Evidence, 1, 1, 5000), &cfg, false).is_ok());
    }

    #[test]
    fn congestion_control_must_be_allowed() {
        let mut spec = StreamSpec {
            transport: Transport::Tcp,
            direction: latscope_core::model::stream::Direction::Send,
            streams: 1,
            duration_ms: 1000,
            bytes_per_stream: None,
            buffer_bytes: 1000,
            udp_rate_bps: None,
            options: Default::default(),
            interval_ms: 1000,
        };
        let allowed = vec!["reno".to_string(), "cubic".to_string()];
        assert!(check_congestion(&spec, &allowed).is_ok());
        spec.options.congestion = Some("cubic".into());
        assert!(check_congestion(&spec, &allowed).is_ok());
        spec.options.congestion = Some("tcp_evil".into());
        assert_eq!(
            check_congestion(&spec, &allowed).map_err(|e| e.0),
            Err(RefusalCode::Invalid)
        );
    }

    #[test]
    fn udp_rate_is_capped_and_positive() {
        let spec = |rate: Option<f64>| StreamSpec {
            transport: Transport::Udp,
            direction: latscope_core::model::stream::Direction::Receive,
            streams: 2,
            duration_ms: 1000,
            bytes_per_stream: None,
            buffer_bytes: 1000,
            udp_rate_bps: rate,
            options: Default::default(),
            interval_ms: 1000,
        };
        assert!(check_udp_rate(&spec(Some(1.0)), 1e9).is_ok());
        assert!(check_udp_rate(&spec(Some(0.0)), 1e9).is_err());
        assert!(check_udp_rate(&spec(None), 1e9).is_err());
        // Two server-sent flows at 600 Mbit/s: 1.2 Gbit/s > 1 Gbit/s.
        assert_eq!(
            check_udp_rate(&spec(Some(6e8)), 1e9).map_err(|e| e.0),
            Err(RefusalCode::Limit)
        );
    }

    /// Stable-toolchain fuzzing of the control protocol (cargo-fuzz needs nightly): random and
    /// mutated frames through framing, JSON decoding, `validate`, `memory_needed` and both
    /// datagram parsers. Run in a debug build, overflow checks catch arithmetic on hostile
    /// values; every input must give a value or an error, never a panic.
    #[test]
    fn control_protocol_survives_random_and_mutated_input() {
        use crate::proto::{StreamDatagram, UdpHeader};
        let cfg = ServeConfig::default();
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        let valid = [
            start(TestKind::Rr, 64, 64, 1000),
            start(TestKind::UdpRr, 20, 200, 5000),
            Start {
                stream: Some(crate::proto::StreamSpec {
                    transport: latscope_core::model::rr::Transport::Udp,
                    direction: latscope_core::model::stream::Direction::Both,
                    streams: 4,
                    duration_ms: 1000,
                    bytes_per_stream: Some(u64::MAX),
                    buffer_bytes: u32::MAX,
                    udp_rate_bps: Some(f64::MAX),
                    options: Default::default(),
                    interval_ms: u64::MAX,
                }),
                ..start(TestKind::Stream, 1, 1, u64::MAX)
            },
        ];
        for v in &valid {
            let mut f = Vec::new();
            proto::encode_frame(v, &mut f);
            seeds.push(f);
        }
        // xorshift64*: deterministic, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for round in 0..20_000 {
            let mut input = seeds[round % seeds.len()].clone();
            match rnd() % 4 {
                0 => {
                    let n = (rnd() % 96) as usize;
                    input = (0..n).map(|_| rnd() as u8).collect();
                }
                1 => {
                    for _ in 0..1 + rnd() % 4 {
                        let i = (rnd() as usize) % input.len();
                        input[i] = rnd() as u8;
                    }
                }
                2 => {
                    // Digits swapped into numbers: huge, negative, fractional values.
                    let i = (rnd() as usize) % input.len();
                    let digits: &[u8] = [&b"-1"[..], b"1e308", b"18446744073709551615", b"0.5"]
                        [(rnd() % 4) as usize];
                    input.splice(i..i, digits.iter().copied());
                }
                _ => input.truncate((rnd() as usize) % (input.len() + 1)),
            }
            if let Ok(s) = proto::read_frame::<Start>(&mut &input[..]) {
                let _ = validate(&s, &cfg, false);
                let _ = validate(&s, &cfg, true);
                let _ = memory_needed(&s);
            }
            let _ = proto::read_greeting::<proto::ClientHello>(&mut &input[..]);
            let mut fr = proto::FrameReader::default();
            let _ = fr.poll::<proto::Control>(&mut &input[..]);
            let _ = UdpHeader::parse(&input);
            let _ = StreamDatagram::parse(&input);
        }
    }
}
