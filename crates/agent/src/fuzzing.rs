//! The agent's part of the `exporter_request` fuzz target (`fuzz/`): the `/probe` query parser
//! on whatever query a client sends, without running the probe.

use std::time::Duration;

/// Parse a `/probe` query as the route does; a query it accepts names a host and a usable
/// port, with a timeout in the allowed range. Returns the answer the route would give before
/// measuring: 200 with the target, or 400 with the reason.
pub fn probe_query(query: &str) -> (u16, String) {
    match crate::probe_route::parse_query(query) {
        Ok((address, m)) => {
            assert!(m.port != 0, "accepted without a port: {query:?}");
            assert!(
                m.timeout >= Duration::from_millis(10) && m.timeout <= Duration::from_secs(10),
                "timeout {:?} out of range: {query:?}",
                m.timeout
            );
            (200, format!("{address} {} {}\n", m.kind.name(), m.port))
        }
        Err(e) => {
            assert!(!e.is_empty());
            (400, format!("{e}\n"))
        }
    }
}
