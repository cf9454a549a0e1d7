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
        use latscope_sys::fuzz_seeds;
        let n = fuzz_seeds::replay_prefixes("http2_response", usize::MAX, |_, b| {
            let _ = super::h2_response(b);
        });
        assert!(n.unwrap() > 1);
        let ok = std::fs::read(fuzz_seeds::dir("http2_response").join("ok_200")).unwrap();
        assert_eq!(super::h2_response(&ok), Ok((200, 5)));
    }
}
