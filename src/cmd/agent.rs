//! `latscope agent --config FILE`: fleet mode (crates/agent); this file is the clap layer. The
//! agent runs diagnose on SLO breaches itself (`latscope_agent::pipeline`).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use latscope_agent::Options;
use latscope_agent::pipeline::InProcess;

use crate::exit;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  latscope agent --config /etc/latscope/agent.toml
  latscope agent --config agent.toml --listen 0.0.0.0:9573   expose /metrics to other hosts
  latscope agent --config agent.toml --check                 validate the file and exit

Config (TOML, or YAML when the file ends in .yaml/.yml; every key is in docs/agent.md):
  listen = \"127.0.0.1:9573\"
  findings_log = \"/var/log/latscope/findings.jsonl\"
  [[target]]
  address = \"10.0.0.2\"
  measure = [{ kind = \"connect\", port = 22 }, { kind = \"rr\" }, { kind = \"trace\", interval = \"1m\" }]
  slo = { kind = \"rr\", quantile = 0.99, threshold = \"5ms\", window = \"5m\" }
  [peers]
  file = \"peers.txt\"       # ADDRESS [NAME] [label=value ...] per line; re-read on change and SIGHUP
  dns = [\"latscope.mon.svc.cluster.local\"]  # and/or: all its A/AAAA records, every 30s
  measure = [{ kind = \"rr\" }]
  [stack]                  # `latscope stack` histograms (CAP_BPF, CAP_PERFMON)
  probes = [\"tcp-socket-read\"]
  [evidence]               # answer the peers' diagnose runs about this host's end (off by default)
  auth_file = \"/etc/latscope/fleet.key\"   # the fleet's shared key, mode 600
  ports = [80, 443]        # or \"all\"; listen = \"[::]:7374\" (evidence requests only)
  [diagnose]
  server_agent_port = 7374 # SLO breaches ask the target's own agent for its end's evidence

Serves /metrics (OpenMetrics), /healthz and /probe?target=HOST[:PORT]&kind=KIND.
SIGHUP reloads the configuration and the peer list (a broken file keeps the previous one); SIGTERM or SIGINT stop it cleanly.

Exit codes: 0 stopped by a signal (or --check passed); 2 bad configuration, an unreadable key file, or an address already in use (as `latscope serve`); 5 cannot listen for another reason.")]
pub struct AgentArgs {
    /// The configuration file: TOML, or YAML when it ends in .yaml or .yml.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Serve metrics here instead of the file's `listen` (PORT or HOST:PORT).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Validate the configuration (and the peer list) and exit.
    #[arg(long)]
    pub check: bool,
}

pub fn run(a: &AgentArgs) -> anyhow::Result<u8> {
    let listen = a
        .listen
        .as_deref()
        .map(latscope_exporter::parse_listen_addr)
        .transpose()
        .map_err(|e| exit::coded(exit::USAGE, format!("--listen: {e}")))?;
    if a.check {
        let cfg = latscope_agent::config::load(&a.config)
            .map_err(|e| exit::coded(exit::USAGE, e.to_string()))?;
        let mut peers = vec![];
        if let Some(file) = cfg.peers.as_ref().and_then(|p| p.file.as_ref()) {
            let text = std::fs::read_to_string(file).map_err(|e| {
                exit::coded(
                    exit::USAGE,
                    format!("{}: cannot read the peer list: {e}", file.display()),
                )
            })?;
            peers = latscope_agent::config::parse_peers(file, &text)
                .map_err(|e| exit::coded(exit::USAGE, e.to_string()))?;
        }
        // The targets as the running agent counts them at start-up: the file's, and one per
        // peer with the [peers] measurements.
        let targets = cfg.all_targets(&peers);
        let dns = cfg.peers.as_ref().map_or(0, |p| p.dns.len());
        let measures: usize = targets.iter().map(|t| t.measures.len()).sum();
        let mut extra = String::new();
        if dns > 0 {
            extra.push_str(&format!(
                ", {} resolved at run time",
                latscope_core::units::count(dns as u64, "peer DNS name")
            ));
        }
        if cfg.stack.is_some() {
            extra.push_str(", kernel stack histograms");
        }
        cfg.check_keys(&a.config)
            .map_err(|e| exit::coded(exit::USAGE, e.to_string()))?;
        if let Some(e) = &cfg.evidence {
            extra.push_str(&format!(", answers evidence requests on {}", e.listen));
        }
        let asking = cfg
            .targets
            .iter()
            .filter(|t| t.server_agent.is_some())
            .count();
        if asking > 0 || cfg.diagnose.server_agent_port.is_some() {
            extra.push_str(", diagnose asks the targets' agents");
        }
        println!(
            "{}: ok ({} with {}, {}{extra})",
            a.config.display(),
            latscope_core::units::count(targets.len() as u64, "target"),
            latscope_core::units::count(measures as u64, "measurement"),
            latscope_core::units::count(peers.len() as u64, "peer")
        );
        return Ok(exit::OK);
    }
    let opts = Options {
        config: a.config.clone(),
        listen,
    };
    match latscope_agent::run(&opts, Arc::new(InProcess)) {
        Ok(()) => Ok(exit::OK),
        Err(
            e @ (latscope_agent::AgentError::Config(_)
            | latscope_agent::AgentError::Evidence(
                latscope_agent::evidence::EndpointError::Key(_),
            )),
        ) => Err(exit::coded(exit::USAGE, e.to_string())),
        // The port the user chose is taken: their input, as for `latscope serve` (exit 2).
        Err(latscope_agent::AgentError::Listen { addr, source })
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            Err(exit::coded(
                exit::USAGE,
                format!(
                    "cannot listen on {addr}: the address is already in use (another agent or \
                     server listens there): stop it, or choose another with --listen (or the \
                     file's listen)"
                ),
            ))
        }
        Err(e) => Err(exit::coded(exit::SYSTEM, e.to_string())),
    }
}
