//! One measurement as latscope's agent names it — in its configuration and in a
//! blackbox-style `/probe?target=HOST[:PORT]&kind=K` query: the kind, the port and the timing.
//! Plain data and the query's parser, here with the probes so that the parser (fuzzed with the
//! agent's HTTP server in front, `fuzz/fuzz_targets/exporter_request.rs`) builds without the
//! agent's engines.

use std::time::Duration;

use serde::Deserialize;

/// `latscope serve`'s default port: the default of `rr` measurements.
pub const SERVE_PORT: u16 = 7373;

/// The longest timeout a /probe may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);

/// What a measurement measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// TCP SYN from a raw socket → SYN-ACK/RST (kernel to kernel; needs CAP_NET_RAW).
    Syn,
    /// A full TCP connect() (no privilege).
    Connect,
    /// One request/response over an established connection to `latscope serve`.
    Rr,
    /// One HTTP GET on a new connection (connect, TLS, response).
    Http,
    /// A Paris traceroute: per-hop RTT and loss.
    Trace,
}

impl Kind {
    /// The `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Syn => "syn",
            Kind::Connect => "connect",
            Kind::Rr => "rr",
            Kind::Http => "http",
            Kind::Trace => "trace",
        }
    }

    /// Every kind, for error messages.
    pub const ALL: [Kind; 5] = [Kind::Syn, Kind::Connect, Kind::Rr, Kind::Http, Kind::Trace];

    /// The default interval: path probes every second, heavier ones less often.
    pub fn default_interval(self) -> Duration {
        match self {
            Kind::Syn | Kind::Connect | Kind::Rr => Duration::from_secs(1),
            Kind::Http => Duration::from_secs(10),
            Kind::Trace => Duration::from_secs(60),
        }
    }

    /// Parse a `kind=` word (the /probe query).
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One measurement of a target, validated.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Measure {
    /// What it measures.
    pub kind: Kind,
    /// TCP port (syn, connect, rr, trace).
    pub port: u16,
    /// Mean time between two probes (the agent jitters it).
    pub interval: Duration,
    /// How long one probe may take before it counts as a timeout.
    pub timeout: Duration,
    /// HTTP: the URL (default `http://ADDRESS:PORT/PATH`).
    pub url: Option<String>,
    /// HTTP: the path when no URL is given.
    pub path: String,
    /// Trace: the largest TTL.
    pub max_ttl: u8,
    /// rr: request and response bytes.
    pub size: u32,
}

/// Percent-decoding of a query value (`+` is a space).
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The measurement a /probe query asks for: (address, measure), or what is wrong with it.
pub fn parse_query(query: &str) -> Result<(String, Measure), String> {
    let mut target = None;
    let mut kind = None;
    let mut port = None;
    let mut timeout = Duration::from_secs(2);
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = decode(v);
        match k {
            "target" => target = Some(v),
            "kind" | "module" => {
                kind = Some(Kind::parse(&v).ok_or_else(|| {
                    format!(
                        "unknown kind '{v}'; one of: {}",
                        Kind::ALL.map(Kind::name).join(", ")
                    )
                })?)
            }
            "port" => port = Some(v.parse::<u16>().map_err(|_| format!("bad port '{v}'"))?),
            "timeout" => {
                timeout = latscope_core::units::parse_duration(&v)
                    .map_err(|e| e.to_string())?
                    .clamp(Duration::from_millis(10), MAX_TIMEOUT)
            }
            _ => {
                return Err(format!(
                    "unknown parameter '{k}' (target, kind, port, timeout)"
                ));
            }
        }
    }
    let target = target.ok_or("missing target=HOST[:PORT]")?;
    let kind = kind.ok_or("missing kind=syn|connect|rr|http|trace")?;
    let mut url = None;
    let (host, embedded_port) = if kind == Kind::Http && target.starts_with("http") {
        url = Some(target.clone());
        (target.clone(), None)
    } else if let Some(rest) = target.strip_prefix('[') {
        let (h, p) = rest.split_once(']').ok_or("bad [IPv6] target")?;
        (
            h.to_string(),
            p.strip_prefix(':').and_then(|p| p.parse().ok()),
        )
    } else {
        match target.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (
                h.to_string(),
                Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("bad port in '{target}'"))?,
                ),
            ),
            _ => (target.clone(), None),
        }
    };
    let port = port.or(embedded_port).unwrap_or(match kind {
        Kind::Rr => SERVE_PORT,
        Kind::Http => 80,
        Kind::Trace => 33434,
        Kind::Syn | Kind::Connect => 0,
    });
    if port == 0 {
        return Err(format!(
            "kind={} needs a port: target=HOST:PORT",
            kind.name()
        ));
    }
    Ok((
        host,
        Measure {
            kind,
            port,
            interval: timeout,
            timeout,
            url,
            path: "/".into(),
            max_ttl: 30,
            size: 64,
        },
    ))
}

/// The `/probe` route's answer before it measures, for the `exporter_request` fuzz target: a
/// query it accepts names a host and a usable port, with a timeout in the allowed range (200
/// and the target), or 400 and the reason. May not panic on any query.
pub fn probe_query_answer(query: &str) -> (u16, String) {
    match parse_query(query) {
        Ok((address, m)) => {
            assert!(m.port != 0, "accepted without a port: {query:?}");
            assert!(
                m.timeout >= Duration::from_millis(10) && m.timeout <= MAX_TIMEOUT,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn probe_queries() {
        let (a, m) = parse_query("target=10.0.0.1:22&kind=connect").unwrap();
        assert_eq!(
            (a.as_str(), m.kind, m.port),
            ("10.0.0.1", Kind::Connect, 22)
        );
        let (a, m) = parse_query("target=%5B%3A%3A1%5D%3A7000&kind=rr").unwrap();
        assert_eq!((a.as_str(), m.port), ("::1", 7000));
        let (a, m) = parse_query("target=h&kind=rr&timeout=1m").unwrap();
        assert_eq!(
            (a.as_str(), m.port, m.timeout),
            ("h", SERVE_PORT, MAX_TIMEOUT)
        );
        let (_, m) = parse_query("target=http%3A%2F%2Fx%2Fy&kind=http").unwrap();
        assert_eq!(m.url.as_deref(), Some("http://x/y"));
        assert!(
            parse_query("target=h&kind=connect")
                .unwrap_err()
                .contains("needs a port")
        );
        assert!(
            parse_query("target=h&kind=icmp")
                .unwrap_err()
                .contains("unknown kind")
        );
        assert!(
            parse_query("kind=rr")
                .unwrap_err()
                .contains("missing target")
        );
        assert!(
            parse_query("target=h&kind=rr&x=1")
                .unwrap_err()
                .contains("unknown parameter")
        );
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("%zzé%41"), "%zzéA");
    }
}
