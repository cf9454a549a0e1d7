//! HTTP/2 load (`--http2`): h2 over TLS (ALPN `h2`) or h2c with prior knowledge for `http://`,
//! several concurrent streams per connection, closed or open loop.
//!
//! Open loop (`--rate`): each thread keeps one schedule of intended send times at its share of
//! the rate, paced by a timerfd at absolute nanosecond deadlines (tokio's own timers have
//! millisecond resolution). At each due time the request goes to the next free stream of the
//! thread's connections; when none is free it is sent as soon as one is, back to back until the
//! schedule is caught up, and its latency counts from the intended time (the
//! coordinated-omission correction, as in the HTTP/1.1 engine).
//!
//! HTTP/2's framing, flow control and HPACK come from the `h2` crate, which runs on tokio: each
//! worker thread drives its connections on its own single-threaded runtime, so the threads stay
//! independent as in the HTTP/1.1 engine, and each keeps the same [`Stats`] (HDR histograms and
//! counters, merged by addition at the end).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use bytes::Bytes;
use latscope_core::LatencyHistogram;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::handshake::{self, HandshakeFailure};
use crate::stats::{ErrorKind, Stats};
use crate::sys;
use crate::worker::{LATE_NS, Share, WorkerResult};
use crate::{Config, IntervalMsg};

/// Wait before retrying a failed connection.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(50);

trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

/// What the tasks of one thread share (single-threaded: a RefCell, never held across awaits).
struct State {
    stats: Stats,
    quota: Option<u64>,
    outstanding_measured: u64,
    acc_index: u64,
    acc_requests: u64,
    acc_errors: u64,
    acc_bytes: u64,
    acc_hist: LatencyHistogram,
    /// Open loop: latency from the actual send time (`acc_hist` is from the intended one).
    acc_raw_hist: Option<LatencyHistogram>,
    /// Gives up when every TLS handshake fails the same way.
    handshakes: handshake::Detector,
}

/// What the HTTP/2 engine needs to build requests, prepared once by [`crate::Config::new`].
#[derive(Debug, Clone)]
pub struct H2Parts {
    /// Request method.
    pub method: http::Method,
    /// Request URI (scheme, authority, path).
    pub uri: http::Uri,
    /// Request headers (user headers; no connection-specific ones).
    pub headers: http::HeaderMap,
    /// Request body, shared by every request.
    pub body: Bytes,
}

impl H2Parts {
    /// Build from the user's method, URL, headers and body. The Host header (or `--host`)
    /// becomes the `:authority`; HTTP/1-only connection headers are dropped (RFC 9113 §8.2.2).
    pub fn new(
        method: &str,
        url: &crate::Url,
        host: Option<&str>,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<H2Parts, crate::HttpError> {
        let bad = |what: String| crate::HttpError::Header(what);
        let scheme = if url.scheme == crate::Scheme::Https {
            "https"
        } else {
            "http"
        };
        let user_host = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.as_str());
        let authority = host
            .or(user_host)
            .map(str::to_string)
            .unwrap_or_else(|| url.host_header());
        let uri: http::Uri = format!("{scheme}://{authority}{}", url.path)
            .parse()
            .map_err(|e| bad(format!("'{authority}': {e}")))?;
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            let lk = k.to_ascii_lowercase();
            if matches!(
                lk.as_str(),
                "host"
                    | "connection"
                    | "keep-alive"
                    | "proxy-connection"
                    | "transfer-encoding"
                    | "upgrade"
            ) {
                continue;
            }
            let name = http::HeaderName::from_bytes(lk.as_bytes())
                .map_err(|e| bad(format!("'{k}': {e}")))?;
            let value =
                http::HeaderValue::from_str(v).map_err(|e| bad(format!("'{k}: {v}': {e}")))?;
            map.append(name, value);
        }
        if !map.contains_key(http::header::USER_AGENT) {
            map.insert(
                http::header::USER_AGENT,
                http::HeaderValue::from_static(concat!("latscope/", env!("CARGO_PKG_VERSION"))),
            );
        }
        let method = http::Method::from_bytes(method.as_bytes())
            .map_err(|e| crate::HttpError::Config(e.to_string()))?;
        Ok(H2Parts {
            method,
            uri,
            headers: map,
            body: Bytes::copy_from_slice(body),
        })
    }

    fn request(&self) -> http::Request<()> {
        let mut r = http::Request::new(());
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// Everything the tasks of one thread share; owned (the tasks are `'static`), single-threaded
/// (a RefCell, never borrowed across an await).
struct Ctx {
    addr: SocketAddr,
    tls: Option<(
        std::sync::Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    parts: H2Parts,
    timeout: Duration,
    streams: u32,
    measure_start_ns: u64,
    end_ns: Option<u64>,
    /// Copied from the run's stop flag by the thread's ticker.
    stopped: std::cell::Cell<bool>,
    state: RefCell<State>,
    /// Open loop: free streams wait here for their next intended send time.
    free: Option<tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<u64>>>,
}

impl Ctx {
    fn over(&self, now: u64) -> bool {
        self.end_ns.is_some_and(|e| now >= e) || self.stopped.get()
    }

    fn wants_more(&self, now: u64) -> bool {
        let st = self.state.borrow();
        !self.over(now) && st.quota != Some(0) && !st.handshakes.gave_up()
    }

    /// Reserve a request intended at `intended` (closed loop: now); returns whether it is
    /// measured, or None when done.
    fn take(&self, now: u64, intended: u64) -> Option<bool> {
        if self.over(now) {
            return None;
        }
        let measured = intended >= self.measure_start_ns;
        let mut st = self.state.borrow_mut();
        if measured {
            match st.quota.as_mut() {
                Some(0) => return None,
                Some(q) => *q -= 1,
                None => {}
            }
            st.outstanding_measured += 1;
        }
        Some(measured)
    }

    /// Give back a reservation made by [`Ctx::take`] for a request that was not sent.
    fn unreserve(&self, measured: bool) {
        let mut st = self.state.borrow_mut();
        if measured {
            st.outstanding_measured -= 1;
            if let Some(q) = st.quota.as_mut() {
                *q += 1;
            }
        }
    }

    fn error(&self, kind: ErrorKind, msg: &dyn std::fmt::Display, measured: bool) {
        let mut st = self.state.borrow_mut();
        if measured {
            st.outstanding_measured -= 1;
        }
        if measured || sys::monotonic_ns() >= self.measure_start_ns {
            st.stats.errors.add(kind);
            st.stats.sample_error(kind, msg);
            st.acc_errors += 1;
        }
    }

    /// A connection attempt (TCP, TLS or HTTP/2 set-up) failed: counted as an error and, when
    /// measured, as one of `-n`'s, so that a run against a target that fails every attempt ends.
    fn attempt_failed(&self, kind: ErrorKind, msg: &dyn std::fmt::Display) {
        self.error(kind, msg, false);
        let mut st = self.state.borrow_mut();
        if sys::monotonic_ns() >= self.measure_start_ns
            && let Some(q) = st.quota.as_mut()
        {
            *q = q.saturating_sub(1);
        }
    }

    /// A TLS handshake failed with `f` (for the detector, then as a failed attempt).
    fn handshake_failed(&self, f: HandshakeFailure) {
        self.state.borrow_mut().handshakes.failed(f.clone());
        self.attempt_failed(ErrorKind::Tls, &f);
    }

    fn finished(&self, now: u64) -> bool {
        let st = self.state.borrow();
        self.over(now)
            || (st.quota == Some(0) && st.outstanding_measured == 0)
            || st.handshakes.gave_up()
    }
}

/// Why a request did not complete.
enum Failure {
    /// Not served, safe to send again on a new connection.
    Retry,
    Error(ErrorKind, String),
}

/// What an h2 error means for the request. A stream ended by a graceful GOAWAY was above the
/// server's last processed stream id, and REFUSED_STREAM means not processed either (RFC 9113
/// §6.8, §8.7): both are safe to retry.
fn failure(e: h2::Error) -> Failure {
    let graceful = (e.is_go_away() && e.reason() == Some(h2::Reason::NO_ERROR))
        || e.reason() == Some(h2::Reason::REFUSED_STREAM);
    if graceful {
        Failure::Retry
    } else {
        Failure::Error(classify(&e), e.to_string())
    }
}

/// Wait for a response and read its body to the end (giving the flow-control window back as it
/// comes): its status and body bytes.
async fn read_response(resp: h2::client::ResponseFuture) -> Result<(u16, u64), Failure> {
    let resp = resp.await.map_err(failure)?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = 0u64;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(failure)?;
        bytes += chunk.len() as u64;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok((status, bytes))
}

/// The client side of one request against a server whose bytes are `server` (for the
/// `http2_response` fuzz target): h2's handshake and framing, then [`read_response`], on an
/// in-memory connection. `Ok((status, body bytes))`, `Err(true)` when the request may be
/// retried, `Err(false)` for an error.
pub async fn respond_from(server: Vec<u8>) -> Result<(u16, u64), bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (client, peer) = tokio::io::duplex(64 * 1024);
    let (mut peer_rd, mut peer_wr) = tokio::io::split(peer);
    // The fake server answers once the request is on the wire (a response to a stream the
    // client has not opened yet is a protocol error, whatever the bytes): it reads the client's
    // preface and frames until a HEADERS frame, then writes its bytes and closes, and keeps
    // reading (and dropping) whatever else the client sends.
    let (asked, heard) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::task::spawn_local(async move {
        let _ = heard.await;
        let _ = peer_wr.write_all(&server).await;
        let _ = peer_wr.shutdown().await;
    });
    let reader = tokio::task::spawn_local(async move {
        let mut seen = Vec::new();
        let mut asked = Some(asked);
        let mut sink = [0u8; 4096];
        while let Ok(n) = peer_rd.read(&mut sink).await {
            if n == 0 {
                break;
            }
            if asked.is_some() {
                seen.extend_from_slice(&sink[..n]);
                if has_headers_frame(&seen)
                    && let Some(tx) = asked.take()
                {
                    let _ = tx.send(());
                }
            }
        }
    });
    let outcome = async {
        let (send, conn) = h2::client::handshake(client).await.map_err(failure)?;
        let driver = tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        let mut ready = send.ready().await.map_err(failure)?;
        let req = http::Request::get("http://fuzz/")
            .body(())
            .map_err(|e| Failure::Error(ErrorKind::Malformed, e.to_string()))?;
        let (resp, _) = ready.send_request(req, true).map_err(failure)?;
        let r = read_response(resp).await;
        driver.abort();
        r
    }
    .await;
    writer.abort();
    reader.abort();
    outcome.map_err(|f| matches!(f, Failure::Retry))
}

/// Whether a client's bytes (the 24-byte connection preface, then frames) hold a HEADERS frame.
fn has_headers_frame(client: &[u8]) -> bool {
    let mut at = 24;
    while let Some(h) = client.get(at..at + 9) {
        if h[3] == 0x1 {
            return true;
        }
        at += 9 + (usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]));
    }
    false
}

fn classify(e: &h2::Error) -> ErrorKind {
    if let Some(io) = e.get_io() {
        ErrorKind::of_io(io)
    } else if e.is_go_away() || e.is_reset() {
        ErrorKind::Reset
    } else {
        ErrorKind::Malformed
    }
}

/// Run one worker thread of an HTTP/2 load.
pub(crate) fn run_thread(
    cfg: &Config,
    addr: SocketAddr,
    stop: &AtomicBool,
    tx: Sender<IntervalMsg>,
    share: Share<'_>,
    run_start_ns: u64,
) -> std::io::Result<WorkerResult> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let measure_start_ns = run_start_ns + cfg.warmup_ns;
    let Some(parts) = cfg.h2.clone() else {
        return Err(std::io::Error::other(
            "HTTP/2 run without HTTP/2 request parts",
        ));
    };
    let open = cfg.rate_per_sec.filter(|r| *r > 0.0).map(|rate| {
        // This thread's share of the rate: in proportion to its connections.
        let share_rate = rate * share.ids.len() as f64 / f64::from(cfg.connections.max(1));
        let spacing = (1e9 / share_rate).max(1.0) as u64;
        // Stagger the threads' schedules over one spacing.
        let first = run_start_ns + spacing * share.thread as u64 / u64::from(cfg.threads.max(1));
        (first, spacing)
    });
    let (free_tx, free_rx) = match open {
        Some(_) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let ctx = Rc::new(Ctx {
        free: free_tx,
        addr,
        tls: cfg.tls.clone(),
        parts,
        timeout: Duration::from_nanos(cfg.timeout_ns),
        streams: cfg.h2_streams.max(1),
        measure_start_ns,
        end_ns: cfg.duration_ns.map(|d| measure_start_ns + d),
        stopped: std::cell::Cell::new(false),
        state: RefCell::new(State {
            stats: Stats::default(),
            quota: share.quota,
            outstanding_measured: 0,
            acc_index: 0,
            acc_requests: 0,
            acc_errors: 0,
            acc_bytes: 0,
            acc_hist: LatencyHistogram::new(),
            acc_raw_hist: open.is_some().then(LatencyHistogram::new),
            handshakes: handshake::Detector::new(share.ids.len()),
        }),
    });
    let local = tokio::task::LocalSet::new();
    let n_conns = share.ids.len();
    let thread = share.thread;
    let interval_ns = cfg.interval_ns;
    let timer = match open {
        Some(_) => {
            let _rt = rt.enter();
            Some(sys::async_timer()?)
        }
        None => None,
    };
    let finished_ns = local.block_on(&rt, async {
        let mut handles: Vec<_> = (0..n_conns)
            .map(|_| tokio::task::spawn_local(connection_loop(ctx.clone())))
            .collect();
        if let (Some((first, spacing)), Some(timer), Some(free_rx)) = (open, timer, free_rx) {
            handles.push(tokio::task::spawn_local(pacer(
                ctx.clone(),
                timer,
                free_rx,
                first,
                spacing,
            )));
        }
        let mut interval_end = measure_start_ns + interval_ns;
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let now = sys::monotonic_ns();
            if stop.load(Ordering::Relaxed) {
                ctx.stopped.set(true);
            }
            while now >= interval_end && ctx.end_ns.is_none_or(|e| interval_end <= e) {
                flush(&ctx, &tx, thread, interval_ns, interval_end, false);
                interval_end += interval_ns;
            }
            if ctx.finished(now) {
                break;
            }
        }
        for h in handles {
            h.abort();
        }
        let now = sys::monotonic_ns();
        let end = ctx.end_ns.map_or(now, |e| e.min(now));
        flush(&ctx, &tx, thread, interval_ns, end, true);
        end
    });
    drop(local);
    drop(rt);
    let ctx = Rc::try_unwrap(ctx)
        .map_err(|_| std::io::Error::other("HTTP/2 tasks outlived their thread"))?;
    let state = ctx.state.into_inner();
    Ok(WorkerResult {
        stats: state.stats,
        finished_ns,
        not_http: None,
        handshake: state.handshakes.into_verdict(),
    })
}

fn flush(
    ctx: &Ctx,
    tx: &Sender<IntervalMsg>,
    thread: usize,
    interval_ns: u64,
    end_ns: u64,
    last: bool,
) {
    let mut st = ctx.state.borrow_mut();
    if end_ns <= ctx.measure_start_ns {
        return;
    }
    let start = ctx.measure_start_ns + st.acc_index * interval_ns;
    let _ = tx.send(IntervalMsg {
        thread,
        index: st.acc_index,
        start_ns: start - ctx.measure_start_ns,
        end_ns: end_ns.max(start) - ctx.measure_start_ns,
        requests: st.acc_requests,
        errors: st.acc_errors,
        bytes: st.acc_bytes,
        hist: st.acc_hist.clone(),
        raw_hist: st.acc_raw_hist.clone(),
        last,
    });
    st.acc_index += 1;
    st.acc_requests = 0;
    st.acc_errors = 0;
    st.acc_bytes = 0;
    st.acc_hist.reset();
    if let Some(h) = &mut st.acc_raw_hist {
        h.reset();
    }
}

async fn connection_loop(ctx: Rc<Ctx>) {
    let timeout = ctx.timeout;
    while ctx.wants_more(sys::monotonic_ns()) {
        let t0 = sys::monotonic_ns();
        let tcp =
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(ctx.addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    ctx.attempt_failed(ErrorKind::Connect, &e);
                    tokio::time::sleep(RECONNECT_BACKOFF).await;
                    continue;
                }
                Err(_) => {
                    ctx.attempt_failed(ErrorKind::Connect, &"connection set-up timed out");
                    continue;
                }
            };
        let t1 = sys::monotonic_ns();
        {
            let mut st = ctx.state.borrow_mut();
            st.stats.connect.record(t1 - t0);
            st.stats.connections_opened += 1;
        }
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &ctx.tls {
            Some((tls, name)) => {
                let connector = tokio_rustls::TlsConnector::from(tls.clone());
                match tokio::time::timeout(timeout, connector.connect(name.clone(), tcp)).await {
                    Ok(Ok(s)) => {
                        if s.get_ref().1.alpn_protocol() != Some(b"h2") {
                            ctx.handshake_failed(HandshakeFailure::NoProtocol { offered: "h2" });
                            tokio::time::sleep(RECONNECT_BACKOFF).await;
                            continue;
                        }
                        let mut st = ctx.state.borrow_mut();
                        st.handshakes.completed();
                        st.stats.tls_handshake.record(sys::monotonic_ns() - t1);
                        drop(st);
                        Box::new(s)
                    }
                    Ok(Err(e)) => {
                        match HandshakeFailure::of_io(&e, "h2") {
                            Some(f) => ctx.handshake_failed(f),
                            None => ctx.attempt_failed(ErrorKind::of_io(&e), &e),
                        }
                        tokio::time::sleep(RECONNECT_BACKOFF).await;
                        continue;
                    }
                    Err(_) => {
                        ctx.attempt_failed(ErrorKind::Timeout, &"TLS handshake timed out");
                        continue;
                    }
                }
            }
            None => Box::new(tcp),
        };
        let (send, conn) = match tokio::time::timeout(timeout, h2::client::handshake(io)).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                ctx.attempt_failed(classify(&e), &e);
                tokio::time::sleep(RECONNECT_BACKOFF).await;
                continue;
            }
            Err(_) => {
                ctx.attempt_failed(ErrorKind::Timeout, &"HTTP/2 handshake timed out");
                continue;
            }
        };
        let driver = tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        let streams: Vec<_> = (0..ctx.streams)
            .map(|_| tokio::task::spawn_local(stream_loop(ctx.clone(), send.clone())))
            .collect();
        drop(send);
        for s in streams {
            let _ = s.await;
        }
        driver.abort();
    }
}

/// Open loop: hand each intended send time of this thread's schedule to a free stream, at that
/// time (a timerfd armed at the absolute deadline) or, if no stream is free then, as soon as one
/// is.
async fn pacer(
    ctx: Rc<Ctx>,
    timer: tokio::io::unix::AsyncFd<sys::Timer>,
    mut free: tokio::sync::mpsc::UnboundedReceiver<tokio::sync::oneshot::Sender<u64>>,
    first: u64,
    spacing: u64,
) {
    let mut due = first;
    loop {
        if sys::monotonic_ns() < due {
            if timer.get_ref().arm_at(due).is_err() {
                return;
            }
            while sys::monotonic_ns() < due {
                let Ok(mut guard) = timer.readable().await else {
                    return;
                };
                guard.get_inner().drain();
                guard.clear_ready();
            }
        }
        if ctx.over(sys::monotonic_ns()) {
            return;
        }
        // The next free stream takes it; one whose connection died meanwhile has dropped its
        // receiver, and the time goes to the next.
        loop {
            let Some(waiter) = free.recv().await else {
                return;
            };
            if waiter.send(due).is_ok() {
                break;
            }
        }
        due += spacing;
    }
}

/// The next intended send time (open loop: from the pacer; closed loop: now), or None when the
/// run is over.
async fn next_intended(ctx: &Ctx) -> Option<u64> {
    let Some(free) = &ctx.free else {
        return Some(sys::monotonic_ns());
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    free.send(tx).ok()?;
    rx.await.ok()
}

/// One stream slot: requests one after another until the run ends or the connection fails.
async fn stream_loop(ctx: Rc<Ctx>, send: h2::client::SendRequest<Bytes>) {
    let timeout = ctx.timeout;
    let mut send = send;
    loop {
        let Some(intended) = next_intended(&ctx).await else {
            return;
        };
        let Some(measured) = ctx.take(sys::monotonic_ns(), intended) else {
            return;
        };
        let result =
            tokio::time::timeout(timeout, one_request(&ctx, &mut send, measured, intended)).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(Failure::Retry)) => {
                // The server closed the connection gracefully (GOAWAY NO_ERROR, e.g. nginx's
                // http2_max_requests) or refused the stream before processing it: the request
                // was not served, so it is not an error; it is sent again on a new connection.
                ctx.unreserve(measured);
                return;
            }
            Ok(Err(Failure::Error(kind, msg))) => {
                ctx.error(kind, &msg, measured);
                return; // the connection is re-established by connection_loop
            }
            Err(_) => {
                ctx.error(
                    ErrorKind::Timeout,
                    &"no complete response within the timeout",
                    measured,
                );
                return;
            }
        }
    }
}

async fn one_request(
    ctx: &Ctx,
    send: &mut h2::client::SendRequest<Bytes>,
    measured: bool,
    intended: u64,
) -> Result<(), Failure> {
    let mut ready = send.clone().ready().await.map_err(failure)?;
    let sent_ns = sys::monotonic_ns();
    let req = ctx.parts.request();
    let body = ctx.parts.body.clone();
    let end = body.is_empty();
    let (resp, mut stream) = ready.send_request(req, end).map_err(failure)?;
    if !end {
        stream.send_data(body, true).map_err(failure)?;
    }
    let (status, bytes) = read_response(resp).await?;
    let now = sys::monotonic_ns();
    let mut st = ctx.state.borrow_mut();
    if measured {
        // The warm-up's bytes are not counted, like its requests.
        st.stats.bytes_read += bytes;
        st.acc_bytes += bytes;
        st.outstanding_measured -= 1;
        let lat = now - sent_ns;
        st.stats.latency.record(lat);
        st.stats.requests += 1;
        st.stats.status[usize::from(status).min(599)] += 1;
        st.acc_requests += 1;
        if ctx.free.is_some() {
            let corrected = now.saturating_sub(intended);
            st.stats.latency_intended.record(corrected);
            st.acc_hist.record(corrected);
            if let Some(h) = &mut st.acc_raw_hist {
                h.record(lat);
            }
            if sent_ns > intended + LATE_NS {
                st.stats.late_sends += 1;
            }
        } else {
            st.acc_hist.record(lat);
        }
    } else {
        st.stats.warmup_requests += 1;
    }
    Ok(())
}
