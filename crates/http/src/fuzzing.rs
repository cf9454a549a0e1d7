//! The entry point of the `http2_response` fuzz target (`fuzz/`), also replayed on the stable
//! toolchain by this module's test: a server's bytes, whatever they are, through the HTTP/2
//! engine's client side (h2's framing, HPACK and flow control, then the engine's own reading of
//! the response and its retry-or-error decision).

/// Run one GET against a server that sends `server` (then closes). The outcome is a response
/// (status, body bytes), a retry, or an error — never a panic or a hang — and a body can never
/// hold more bytes than the server sent.
pub fn h2_response(server: &[u8]) -> Result<(u16, u64), bool> {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Err(false);
    };
    let local = tokio::task::LocalSet::new();
    let out = local.block_on(&rt, crate::http2::respond_from(server.to_vec()));
    if let Ok((status, bytes)) = out {
        assert!((100..1000).contains(&status), "status {status}");
        assert!(
            bytes <= server.len() as u64,
            "{bytes} body bytes from {}",
            server.len()
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn seeds_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/seeds/http2_response");
        let mut seen_ok = false;
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let seed = std::fs::read(&p).unwrap();
            for cut in 0..=seed.len() {
                let _ = super::h2_response(&seed[..cut]);
            }
            if p.ends_with("ok_200") {
                assert_eq!(super::h2_response(&seed), Ok((200, 5)));
                seen_ok = true;
            }
            n += 1;
        }
        assert!(n > 1 && seen_ok);
    }
}
