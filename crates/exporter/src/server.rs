//! The HTTP/1.1 server: one tokio task per connection, hyper's parser with bounded heads and
//! head timeouts, a connection budget, and a lifetime per connection.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};

use crate::{Limits, OPENMETRICS_CONTENT_TYPE, Reply, Routes};

/// Accept errors such as EMFILE repeat until a descriptor frees up: wait this long instead of
/// spinning on them.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Serve `routes` on `listener` until `shutdown` completes. Connections in progress when it does
/// are dropped with the task (a scrape in flight fails; Prometheus retries at the next interval).
pub async fn serve(
    listener: TcpListener,
    routes: Arc<dyn Routes>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let budget = Arc::new(Semaphore::new(limits.max_connections));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        // Reap finished connections so the set does not grow.
        while tasks.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(_) => {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Over budget: close at once (the client sees a reset or EOF, and retries later).
        let Ok(permit) = budget.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let routes = routes.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            serve_connection(TokioIo::new(stream), routes, limits, false).await;
        });
    }
    tasks.abort_all();
}

/// One connection: hyper's HTTP/1.1 parser with the head limits and timeouts of `limits`, for
/// at most the connection's lifetime. With `half_close`, a client that shuts its sending side
/// down after its requests still gets the answers (the fuzz target's in-memory client does).
pub(crate) async fn serve_connection<I>(
    io: I,
    routes: Arc<dyn Routes>,
    limits: Limits,
    half_close: bool,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| {
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(handle(routes.as_ref(), req).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(limits.max_head_bytes.max(8192))
        .max_headers(limits.max_headers)
        .half_close(half_close);
    let conn = builder.serve_connection(io, svc);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = tokio::time::sleep(limits.max_connection_lifetime) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.drain_timeout, conn).await;
        }
    }
}

fn reply(r: Reply, head_only: bool) -> Response<Full<Bytes>> {
    let body = if head_only {
        Bytes::new()
    } else {
        Bytes::from(r.body)
    };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    resp
}

async fn handle(routes: &dyn Routes, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let head_only = req.method() == Method::HEAD;
    if req.method() != Method::GET && !head_only {
        let mut r = reply(Reply::text(405, "only GET and HEAD\n"), false);
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("");
    let r = match path {
        "/metrics" => Reply {
            status: 200,
            content_type: OPENMETRICS_CONTENT_TYPE,
            body: routes.metrics(),
        },
        "/healthz" => Reply::text(200, "ok\n"),
        "/" => Reply::text(200, routes.index()),
        _ => match routes.route(path, query) {
            Some(fut) => fut.await,
            None => Reply::text(404, "not found; try /metrics\n"),
        },
    };
    reply(r, head_only)
}

/// A server on its own thread and tokio runtime, for callers that are not async themselves
/// (`latscope stack`); stops and joins on drop.
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Bind `addr` now (so a busy port is an error here, not in a thread) and serve `routes`.
    pub fn start(addr: SocketAddr, routes: Arc<dyn Routes>, limits: Limits) -> io::Result<Server> {
        let std_listener = std::net::TcpListener::bind(addr)?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (tx, rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("latscope-metrics".into())
            .spawn(move || {
                rt.block_on(async move {
                    match TcpListener::from_std(std_listener) {
                        Ok(l) => {
                            serve(l, routes, limits, async {
                                let _ = rx.await;
                            })
                            .await
                        }
                        Err(e) => eprintln!("latscope: metrics server: {e}"),
                    }
                });
            })?;
        Ok(Server {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    #[derive(Default)]
    struct Page(AtomicU64);

    impl Routes for Page {
        fn metrics(&self) -> String {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            format!("# TYPE scrapes counter\nscrapes_total {n}\n# EOF\n")
        }
        fn route(&self, path: &str, query: &str) -> Option<crate::ReplyFuture> {
            let q = query.to_string();
            (path == "/echo")
                .then(|| Box::pin(async move { Reply::text(200, q) }) as crate::ReplyFuture)
        }
    }

    fn start(limits: Limits) -> Server {
        Server::start(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Page::default()),
            limits,
        )
        .unwrap()
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    }

    fn rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    #[test]
    fn routes_and_content_types() {
        let srv = start(Limits::default());
        let m = get(srv.local_addr(), "/metrics");
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(
            m.contains("application/openmetrics-text; version=1.0.0"),
            "{m}"
        );
        assert!(m.ends_with("scrapes_total 0\n# EOF\n"), "{m}");
        let h = get(srv.local_addr(), "/healthz");
        assert!(
            h.starts_with("HTTP/1.1 200 OK\r\n") && h.ends_with("ok\n"),
            "{h}"
        );
        let e = get(srv.local_addr(), "/echo?a=b");
        assert!(e.ends_with("\r\n\r\na=b"), "{e}");
        let n = get(srv.local_addr(), "/nope");
        assert!(n.starts_with("HTTP/1.1 404"), "{n}");
        let mut c = TcpStream::connect(srv.local_addr()).unwrap();
        c.write_all(
            b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        assert!(s.starts_with("HTTP/1.1 405"), "{s}");
    }

    /// A request line far beyond the head limit is refused after at most the limit is buffered:
    /// sending 1 GiB of it grows the process by far less than the data sent.
    #[test]
    fn a_huge_request_line_is_refused_without_buffering_it() {
        let srv = start(Limits::default());
        let before = rss_kib();
        let mut c = TcpStream::connect(srv.local_addr()).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /").unwrap();
        let chunk = vec![b'a'; 1 << 20];
        let mut sent = 0usize;
        while sent < 1 << 30 {
            match c.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break, // the server answered 431 and closed: what we want
            }
        }
        let after = rss_kib();
        // The server must have stopped reading long before 1 GiB (the socket buffers hold a few
        // MiB at most), and the process has not grown by anything like what was sent.
        assert!(sent < 1 << 30, "the server read 1 GiB of request line");
        assert!(
            after.saturating_sub(before) < 64 * 1024,
            "RSS grew {} KiB",
            after.saturating_sub(before)
        );
        // And it still serves.
        assert!(get(srv.local_addr(), "/metrics").starts_with("HTTP/1.1 200"));
    }

    /// A client that sends half a request and stalls, and one that asks and never reads, do not
    /// delay a scrape.
    #[test]
    fn slow_clients_never_block_a_scrape() {
        let srv = start(Limits::default());
        let mut stalled = Vec::new();
        for _ in 0..20 {
            let mut c = TcpStream::connect(srv.local_addr()).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
            stalled.push(c);
        }
        for _ in 0..5 {
            let mut c = TcpStream::connect(srv.local_addr()).unwrap();
            // Pipelined requests, never read.
            for _ in 0..200 {
                let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
            }
            stalled.push(c);
        }
        let t0 = Instant::now();
        let r = get(srv.local_addr(), "/metrics");
        let took = t0.elapsed();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(took < Duration::from_secs(2), "scrape took {took:?}");
        drop(stalled);
    }

    /// Heads sent slower than the head timeout are cut off, freeing the connection budget.
    #[test]
    fn head_timeout_and_connection_budget() {
        let limits = Limits {
            max_connections: 4,
            head_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let srv = start(limits);
        let mut held = Vec::new();
        for _ in 0..4 {
            let mut c = TcpStream::connect(srv.local_addr()).unwrap();
            c.write_all(b"GET /met").unwrap();
            held.push(c);
        }
        std::thread::sleep(Duration::from_millis(100));
        // Over budget: closed at once without an answer.
        let mut extra = TcpStream::connect(srv.local_addr()).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = extra.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut buf = Vec::new();
        let _ = extra.read_to_end(&mut buf);
        assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
        // After the head timeout the stalled ones are gone and scrapes work again.
        std::thread::sleep(Duration::from_millis(800));
        assert!(get(srv.local_addr(), "/metrics").starts_with("HTTP/1.1 200"));
        for mut c in held {
            let mut b = Vec::new();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = c.read_to_end(&mut b);
        }
    }
}
