//! What a diagnose run is asked to do: a [`Request`] as a caller states it (the CLI's flags, or
//! the fleet agent's defaults), checked and resolved into the [`Plan`] the pipeline runs.

use std::net::SocketAddr;
use std::time::Duration;

use latscope_http::tls::TlsOptions;
use latscope_net::NetError;
use latscope_net::auth::AuthKey;
use latscope_net::proto::DEFAULT_PORT;
use latscope_net::sock::Target;
use latscope_probe::Family;

/// The default of `--max-time`: a run finishes within about this, whatever the target does.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(30);

/// A run as the caller asks for it, before it is checked. [`Request::new`] gives the defaults
/// `latscope diagnose` documents.
#[derive(Clone, Debug)]
pub struct Request {
    /// An http:// or https:// URL, or HOST[:PORT] (a latscope server on port 7373 by default, or
    /// any TCP service).
    pub target: String,
    /// Time per application measurement (at least 200 ms).
    pub duration: Duration,
    /// Connections for the concurrency step (1–1000).
    pub concurrency: u32,
    /// Request and response size for latscope targets (1 B – 1 MiB).
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// Skip the latency-under-load step (it saturates the path for a few seconds).
    pub no_load: bool,
    /// The whole run's time budget (at least 1 s).
    pub max_time: Duration,
    /// The address family names resolve in (`-4`, `-6`).
    pub family: Family,
    /// The key for an authenticating latscope server (`--auth-file`).
    pub auth: Option<AuthKey>,
    /// HOST[:PORT] of the server's agent to ask for its end's evidence (`--server-agent`).
    pub server_agent: Option<String>,
    /// How an https:// target's certificate is checked (`--insecure`, `--cacert`).
    pub tls: TlsOptions,
}

impl Request {
    /// A run of `target` with the documented defaults: 2 s per step, 8 connections, 64 B
    /// requests and 1 KiB responses, the load step on, 30 s in all, any address family.
    pub fn new(target: impl Into<String>) -> Request {
        Request {
            target: target.into(),
            duration: Duration::from_secs(2),
            concurrency: 8,
            request_bytes: 64,
            response_bytes: 1024,
            no_load: false,
            max_time: DEFAULT_MAX_TIME,
            family: Family::Any,
            auth: None,
            server_agent: None,
            tls: TlsOptions::default(),
        }
    }
}

/// Why a request cannot be run.
#[derive(Debug)]
pub enum PlanError {
    /// A setting out of range or a target that is not a network target: the caller's input.
    Usage(String),
    /// The target's name does not resolve, or is malformed (the network layer's error, which
    /// carries its own exit class).
    Net(NetError),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Usage(why) => f.write_str(why),
            PlanError::Net(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PlanError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlanError::Usage(_) => None,
            PlanError::Net(e) => Some(e),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub target: Target,
    pub addr: SocketAddr,
    /// Time per application measurement.
    pub duration: Duration,
    pub concurrency: u32,
    /// Request and response size for latscope targets.
    pub request_bytes: u32,
    pub response_bytes: u32,
    /// Skip the latency-under-load step (it saturates the path for a few seconds).
    pub no_load: bool,
    /// An http:// or https:// URL: the application steps use the HTTP load engine.
    pub url: Option<String>,
    /// The key for an authenticating latscope server (`--auth-file`).
    pub auth: Option<AuthKey>,
    /// The whole run's time budget: a step still running when it is spent is stopped, later
    /// ones are not started (both reported as cut short).
    pub max_time: Duration,
    /// The address family asked for (`-4`, `-6`), or any.
    pub family: Family,
    /// The server's agent to ask for its end's evidence (`--server-agent`; port 7373 by
    /// default). Resolved when the step runs: an agent that cannot be reached leaves the run
    /// client-only.
    pub server_agent: Option<Target>,
    /// How an https:// target's certificate is checked: verified unless `--insecure`.
    pub tls: TlsOptions,
}

impl Plan {
    /// Whether the target is an https:// URL.
    pub fn target_is_https(&self) -> bool {
        self.url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"))
    }

    /// Check a request's settings and resolve its target.
    pub fn new(r: &Request) -> Result<Plan, PlanError> {
        let usage = |why: &str| Err(PlanError::Usage(why.to_string()));
        if r.concurrency == 0 || r.concurrency > 1000 {
            return usage("--connections must be between 1 and 1000");
        }
        if r.request_bytes == 0
            || r.response_bytes == 0
            || r.request_bytes > 1 << 20
            || r.response_bytes > 1 << 20
        {
            return usage("--request-size and --response-size must be between 1 B and 1 MiB");
        }
        if r.max_time < Duration::from_secs(1) {
            return usage("--max-time must be at least 1s");
        }
        if r.duration < Duration::from_millis(200) {
            return usage("--duration must be at least 200ms");
        }
        let url = (r.target.starts_with("http://") || r.target.starts_with("https://"))
            .then(|| r.target.clone());
        let target = match &url {
            Some(u) => {
                let parsed =
                    latscope_http::Url::parse(u).map_err(|e| PlanError::Usage(e.to_string()))?;
                Target::Inet {
                    host: parsed.host,
                    port: parsed.port,
                }
            }
            None => Target::parse(&r.target, DEFAULT_PORT).map_err(PlanError::Net)?,
        };
        if matches!(target, Target::Unix(_)) {
            return usage("diagnose needs a network target (HOST[:PORT])");
        }
        if r.target.starts_with("https://") {
            // An unreadable --cacert is the caller's input, said before any step runs.
            latscope_http::tls::client_config(r.tls.insecure, &r.tls.ca_files, b"http/1.1")
                .map_err(|e| PlanError::Usage(e.to_string()))?;
        }
        let addr = target.resolve(r.family).map_err(PlanError::Net)?;
        let server_agent = match r.server_agent.as_deref() {
            None => None,
            Some(a) => match Target::parse(a, DEFAULT_PORT) {
                Ok(Target::Unix(_)) | Err(_) => {
                    return usage(&format!(
                        "--server-agent '{a}' is not HOST[:PORT] (the server's agent, port {DEFAULT_PORT} by default)"
                    ));
                }
                Ok(t) => Some(t),
            },
        };
        Ok(Plan {
            target,
            addr,
            duration: r.duration,
            concurrency: r.concurrency,
            request_bytes: r.request_bytes as u32,
            response_bytes: r.response_bytes as u32,
            no_load: r.no_load,
            url,
            auth: r.auth.clone(),
            max_time: r.max_time,
            family: r.family,
            server_agent,
            tls: r.tls.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_usage_errors() {
        let mut r = Request::new("127.0.0.1");
        r.concurrency = 0;
        assert!(matches!(Plan::new(&r), Err(PlanError::Usage(m)) if m.contains("--connections")));
        let mut r = Request::new("127.0.0.1");
        r.duration = Duration::from_millis(100);
        assert!(matches!(Plan::new(&r), Err(PlanError::Usage(m)) if m.contains("--duration")));
        let r = Request::new("/tmp/x.sock");
        assert!(
            Plan::new(&r).is_err(),
            "a unix socket is not a network target"
        );
    }

    #[test]
    fn urls_and_host_ports_resolve() {
        let p = Plan::new(&Request::new("http://127.0.0.1:8080/x")).expect("a URL");
        assert_eq!(p.addr.port(), 8080);
        assert_eq!(p.url.as_deref(), Some("http://127.0.0.1:8080/x"));
        let p = Plan::new(&Request::new("127.0.0.1")).expect("a host");
        assert_eq!(p.addr.port(), DEFAULT_PORT);
        assert!(p.url.is_none());
    }
}
