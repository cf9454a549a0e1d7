//! The deployment kits under deploy/ are valid: the agent's example configuration and the
//! Kubernetes ConfigMap's agent.toml pass the agent's own validation, and the Prometheus scrape
//! config and rules pass `promtool check` (Debian package prometheus, from scripts/setup.sh).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn example_agent_config_is_valid() {
    let p = root().join("deploy/agent.example.toml");
    let cfg = latscope_agent::config::load(&p).unwrap_or_else(|e| panic!("{e}"));
    assert!(cfg.peers.is_some());
    assert!(!cfg.targets.is_empty());
}

#[test]
fn kubernetes_configmap_agent_config_is_valid() {
    let text = std::fs::read_to_string(root().join("deploy/kubernetes/latscope-agent.yaml"))
        .expect("manifest");
    // The ConfigMap's `agent.toml: |` block: the indented lines that follow it.
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("agent.toml: |"));
    lines.next().expect("agent.toml block");
    let block: Vec<&str> = lines
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect();
    let toml = block.join("\n");
    latscope_agent::config::parse(Path::new("configmap agent.toml"), &toml)
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    for kind in [
        "kind: ConfigMap",
        "kind: Service",
        "kind: DaemonSet",
        "clusterIP: None",
    ] {
        assert!(text.contains(kind), "{kind} missing");
    }
}

#[test]
fn promtool_accepts_the_scrape_config_and_rules() {
    let dir = root().join("deploy/prometheus");
    let Ok(out) = Command::new("promtool")
        .args(["check", "rules", "latscope-rules.yml"])
        .current_dir(&dir)
        .output()
    else {
        let root_or_ci = std::env::var_os("CI").is_some()
            // SAFETY: geteuid has no preconditions.
            || unsafe { libc::geteuid() } == 0;
        assert!(
            !root_or_ci,
            "promtool missing: run scripts/setup.sh (package prometheus)"
        );
        eprintln!("SKIP: promtool not installed (scripts/setup.sh installs it)");
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("promtool")
        .args(["check", "config", "prometheus.yml"])
        .current_dir(&dir)
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
