//! The entry point of the `exporter_request` fuzz target (`fuzz/`), also replayed on the stable
//! toolchain by this module's test: arbitrary bytes from a client through the exporter's real
//! connection handling (hyper's parser with [`Limits`], the routes), in memory.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Limits, Routes};

/// The most a fuzzed connection may get back: answers to what fits in one input, never more
/// than a few per request byte.
const MAX_ANSWER: usize = 1 << 20;

/// Send `data` (then EOF) on one connection to `routes` and return what the server answered.
/// The input ends with EOF, so the server never waits for more (a head cut short is answered
/// or dropped at once). Checks that every answer is HTTP/1.x and bounded.
pub fn request(data: &[u8], routes: Arc<dyn Routes>) -> Vec<u8> {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let limits = Limits::default();
    let input = data.to_vec();
    let out = rt.block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut rd, mut wr) = tokio::io::split(client);
        let served = tokio::spawn(crate::server::serve_connection(
            hyper_util::rt::TokioIo::new(server),
            routes,
            limits,
            true,
        ));
        let writer = async {
            let _ = wr.write_all(&input).await;
            let _ = wr.shutdown().await;
        };
        let mut out = Vec::new();
        let (_, _) = tokio::join!(writer, async {
            let mut buf = [0u8; 8192];
            loop {
                match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) if out.len() < MAX_ANSWER => out.extend_from_slice(&buf[..n]),
                    Ok(_) => break,
                }
            }
        });
        let _ = served.await;
        out
    });
    assert!(
        out.is_empty() || out.starts_with(b"HTTP/1."),
        "not an HTTP answer: {:?}",
        String::from_utf8_lossy(&out[..out.len().min(64)])
    );
    assert!(
        out.len() < MAX_ANSWER,
        "unbounded answer to {} bytes",
        data.len()
    );
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    struct Fixed;
    impl Routes for Fixed {
        fn metrics(&self) -> String {
            "# EOF\n".into()
        }
    }

    #[test]
    fn seeds_replay() {
        let n = latscope_sys::fuzz_seeds::replay_prefixes("exporter_request", 16, |_, b| {
            request(b, Arc::new(Fixed));
        });
        assert!(n.unwrap() > 0);
        let ok = request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Arc::new(Fixed));
        assert!(
            ok.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&ok)
        );
    }
}
