//! The deployment kits under deploy/ are valid: the agent's example configurations (TOML and
//! YAML) and the Kubernetes ConfigMap's agent.toml pass the agent's own validation, the manifest
//! matches the Kubernetes API's types (typed structures, unknown fields denied), the Prometheus
//! scrape config and rules pass `promtool check` (Debian package prometheus, from
//! scripts/setup.sh), and the Grafana dashboard's queries name what a real agent exports.

#![allow(clippy::unwrap_used)]

use crate::lab;

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
    let yaml = latscope_agent::config::load(&root().join("deploy/agent.example.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg, yaml, "the YAML example says what the TOML one says");
}

// ---------------------------------------------------------------------------------------------
// Kubernetes: no client-side validator works offline (Debian 12's kubernetes-client 1.20 needs an
// API server for --validate), so the manifest is parsed into typed structures of the API fields
// it uses (v1 ConfigMap, v1 Service, apps/v1 DaemonSet), unknown fields denied at every level,
// then checked against the API's validation rules that tie the objects together.

// Fields are parsed to be type-checked (that is the schema check), not all of them are read.
#[allow(dead_code)]
mod k8s {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Head {
        pub api_version: String,
        pub kind: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct ObjectMeta {
        pub name: Option<String>,
        pub namespace: Option<String>,
        #[serde(default)]
        pub labels: BTreeMap<String, String>,
        #[serde(default)]
        pub annotations: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct ConfigMap {
        pub api_version: String,
        pub kind: String,
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub data: BTreeMap<String, String>,
        pub immutable: Option<bool>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct Service {
        pub api_version: String,
        pub kind: String,
        pub metadata: ObjectMeta,
        pub spec: ServiceSpec,
    }

    #[derive(Debug, Deserialize)]
    pub enum ServiceType {
        ClusterIP,
        NodePort,
        LoadBalancer,
        ExternalName,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct ServiceSpec {
        #[serde(rename = "clusterIP")]
        pub cluster_ip: Option<String>,
        #[serde(rename = "type")]
        pub type_: Option<ServiceType>,
        #[serde(default)]
        pub selector: BTreeMap<String, String>,
        pub ports: Vec<ServicePort>,
        pub publish_not_ready_addresses: Option<bool>,
    }

    #[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
    pub enum Protocol {
        #[serde(rename = "TCP")]
        Tcp,
        #[serde(rename = "UDP")]
        Udp,
        #[serde(rename = "SCTP")]
        Sctp,
    }

    #[derive(Debug, Deserialize)]
    #[serde(untagged)]
    pub enum IntOrString {
        Int(u16),
        Str(String),
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct ServicePort {
        pub name: Option<String>,
        pub port: u16,
        pub target_port: Option<IntOrString>,
        pub protocol: Option<Protocol>,
        pub app_protocol: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct DaemonSet {
        pub api_version: String,
        pub kind: String,
        pub metadata: ObjectMeta,
        pub spec: DaemonSetSpec,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct DaemonSetSpec {
        pub selector: LabelSelector,
        pub template: PodTemplateSpec,
        pub min_ready_seconds: Option<u32>,
        pub revision_history_limit: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct LabelSelector {
        pub match_labels: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct PodTemplateSpec {
        pub metadata: ObjectMeta,
        pub spec: PodSpec,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct PodSpec {
        pub containers: Vec<Container>,
        #[serde(default)]
        pub volumes: Vec<Volume>,
        pub termination_grace_period_seconds: Option<u32>,
        pub host_network: Option<bool>,
        pub service_account_name: Option<String>,
        pub priority_class_name: Option<String>,
        #[serde(default)]
        pub node_selector: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct Container {
        pub name: String,
        pub image: String,
        pub image_pull_policy: Option<String>,
        #[serde(default)]
        pub args: Vec<String>,
        #[serde(default)]
        pub command: Vec<String>,
        #[serde(default)]
        pub ports: Vec<ContainerPort>,
        pub resources: Option<Resources>,
        pub readiness_probe: Option<Probe>,
        pub liveness_probe: Option<Probe>,
        pub security_context: Option<SecurityContext>,
        #[serde(default)]
        pub volume_mounts: Vec<VolumeMount>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct ContainerPort {
        pub name: Option<String>,
        pub container_port: u16,
        pub protocol: Option<Protocol>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Resources {
        #[serde(default)]
        pub requests: BTreeMap<String, String>,
        #[serde(default)]
        pub limits: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct Probe {
        pub http_get: Option<HttpGet>,
        pub initial_delay_seconds: Option<u32>,
        pub period_seconds: Option<u32>,
        pub timeout_seconds: Option<u32>,
        pub failure_threshold: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct HttpGet {
        pub path: String,
        pub port: IntOrString,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct SecurityContext {
        pub capabilities: Option<Capabilities>,
        pub run_as_non_root: Option<bool>,
        pub read_only_root_filesystem: Option<bool>,
        pub allow_privilege_escalation: Option<bool>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Capabilities {
        #[serde(default)]
        pub add: Vec<String>,
        #[serde(default)]
        pub drop: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct VolumeMount {
        pub name: String,
        pub mount_path: String,
        pub read_only: Option<bool>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct Volume {
        pub name: String,
        pub config_map: Option<ConfigMapVolume>,
        pub empty_dir: Option<EmptyDir>,
        pub secret: Option<SecretVolume>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct SecretVolume {
        pub secret_name: String,
        pub optional: Option<bool>,
        pub default_mode: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct ConfigMapVolume {
        pub name: String,
        pub default_mode: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    pub struct EmptyDir {
        pub medium: Option<String>,
        pub size_limit: Option<String>,
    }

    /// DNS-1123 label (names of objects, containers, volumes, ports' IANA names are stricter).
    pub fn dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    /// A port name (IANA_SVC_NAME): at most 15 characters, a letter among them.
    pub fn port_name(s: &str) -> bool {
        dns_label(s) && s.len() <= 15 && s.bytes().any(|b| b.is_ascii_lowercase())
    }

    /// A resource quantity: a decimal number with an optional SI or binary suffix.
    pub fn quantity(s: &str) -> bool {
        let num_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, suffix) = s.split_at(num_end);
        num.parse::<f64>().is_ok()
            && ["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"].contains(&suffix)
    }
}

fn k8s_parse<T: serde::de::DeserializeOwned>(
    text: &str,
    doc: &latscope_agent::yaml::Node,
    what: &str,
) -> T {
    latscope_agent::yaml::from_node(doc).unwrap_or_else(|e| {
        let line = e.offset.map_or(0, |o| text[..o].matches('\n').count() + 1);
        panic!("{what}: line {line}: {e}")
    })
}

/// The manifest's three objects, parsed with the API's types.
struct Manifest {
    cm: k8s::ConfigMap,
    svc: k8s::Service,
    ds: k8s::DaemonSet,
}

fn load_manifest() -> Manifest {
    use k8s::*;
    let text = std::fs::read_to_string(root().join("deploy/kubernetes/latscope-agent.yaml"))
        .expect("manifest");
    let docs = latscope_agent::yaml::documents(&text).unwrap_or_else(|e| panic!("YAML: {e}"));
    let (mut cms, mut svcs, mut dss) = (vec![], vec![], vec![]);
    for doc in &docs {
        let head: Head = k8s_parse(&text, doc, "object");
        match (head.api_version.as_str(), head.kind.as_str()) {
            ("v1", "ConfigMap") => cms.push(k8s_parse::<ConfigMap>(&text, doc, "ConfigMap")),
            ("v1", "Service") => svcs.push(k8s_parse::<Service>(&text, doc, "Service")),
            ("apps/v1", "DaemonSet") => dss.push(k8s_parse::<DaemonSet>(&text, doc, "DaemonSet")),
            (v, k) => panic!("unexpected object {v} {k}"),
        }
    }
    assert!(
        cms.len() == 1 && svcs.len() == 1 && dss.len() == 1,
        "want one ConfigMap, one Service, one DaemonSet"
    );
    Manifest {
        cm: cms.remove(0),
        svc: svcs.remove(0),
        ds: dss.remove(0),
    }
}

/// The version of the binary under test (`latscope --version`: "latscope X.Y.Z").
fn binary_version() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_latscope"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim()
        .strip_prefix("latscope ")
        .unwrap_or_else(|| panic!("--version says {text:?}"))
        .to_string()
}

#[test]
fn kubernetes_manifest_matches_the_api_schema() {
    use k8s::*;
    let Manifest { cm, svc, ds } = load_manifest();
    for m in [&cm.metadata, &svc.metadata, &ds.metadata] {
        assert!(dns_label(m.name.as_deref().unwrap_or("")), "{m:?}");
        assert_eq!(m.namespace, cm.metadata.namespace, "one namespace");
    }
    // The agent's own files, from the ConfigMap's data.
    let agent_file = cm
        .data
        .keys()
        .find(|k| k.starts_with("agent."))
        .expect("agent.* in data");
    let cfg = latscope_agent::config::parse(Path::new(agent_file), &cm.data[agent_file])
        .unwrap_or_else(|e| panic!("ConfigMap {e}"));
    let peers = cfg.peers.as_ref().expect("a [peers] section");
    if let Some(file) = &peers.file {
        let peers_key = file.file_name().unwrap().to_str().unwrap();
        latscope_agent::config::parse_peers(file, &cm.data[peers_key]).unwrap();
    }

    // Headless Service selecting the DaemonSet's pods.
    assert_eq!(svc.spec.cluster_ip.as_deref(), Some("None"), "headless");
    let pod = &ds.spec.template;
    for (k, v) in &ds.spec.selector.match_labels {
        assert_eq!(
            pod.metadata.labels.get(k),
            Some(v),
            "DaemonSet selector {k}"
        );
    }
    for (k, v) in &svc.spec.selector {
        assert_eq!(pod.metadata.labels.get(k), Some(v), "Service selector {k}");
    }
    let container_ports: Vec<&ContainerPort> =
        pod.spec.containers.iter().flat_map(|c| &c.ports).collect();
    for p in &svc.spec.ports {
        let target = match &p.target_port {
            Some(IntOrString::Str(name)) => container_ports
                .iter()
                .find(|c| c.name.as_deref() == Some(name.as_str()))
                .map(|c| c.container_port),
            Some(IntOrString::Int(n)) => Some(*n),
            None => Some(p.port),
        };
        assert!(
            container_ports
                .iter()
                .any(|c| Some(c.container_port) == target),
            "Service port {p:?} has no container port"
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for c in &pod.spec.containers {
        assert!(
            dns_label(&c.name) && names.insert(&c.name),
            "container {}",
            c.name
        );
        for p in &c.ports {
            assert!(p.name.as_deref().is_none_or(port_name), "port name {p:?}");
        }
        for probe in [&c.readiness_probe, &c.liveness_probe]
            .into_iter()
            .flatten()
        {
            let get = probe.http_get.as_ref().expect("httpGet");
            assert!(get.path.starts_with('/'));
            if let IntOrString::Str(n) = &get.port {
                assert!(
                    c.ports.iter().any(|p| p.name.as_ref() == Some(n)),
                    "probe port {n}"
                );
            }
        }
        for m in &c.volume_mounts {
            assert!(
                pod.spec.volumes.iter().any(|v| v.name == m.name),
                "mount {}",
                m.name
            );
            assert!(m.mount_path.starts_with('/'));
        }
        for cap in c
            .security_context
            .iter()
            .flat_map(|s| s.capabilities.iter())
            .flat_map(|c| c.add.iter().chain(&c.drop))
        {
            assert!(
                !cap.starts_with("CAP_")
                    && cap.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
                "capability {cap}"
            );
        }
        for (k, q) in c
            .resources
            .iter()
            .flat_map(|r| r.requests.iter().chain(&r.limits))
        {
            assert!(
                ["cpu", "memory", "ephemeral-storage"].contains(&k.as_str()),
                "resource {k}"
            );
            assert!(quantity(q), "quantity {q}");
        }
        // The image is the one this repository builds, at this version (scripts/build-image.sh
        // tags it so; docs/agent.md says how to push it to one's own registry).
        assert_eq!(
            c.image,
            format!("localhost/latscope:{}", binary_version()),
            "container {}: the image scripts/build-image.sh builds",
            c.name
        );
        assert_eq!(
            c.image_pull_policy.as_deref(),
            Some("IfNotPresent"),
            "container {}: an image imported on the node (no registry) must not be pulled",
            c.name
        );
        // The args are latscope's: its parser accepts them (`--help` stops after parsing).
        let out = Command::new(env!("CARGO_BIN_EXE_latscope"))
            .args(&c.args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            c.args,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for v in &pod.spec.volumes {
        assert_eq!(
            usize::from(v.config_map.is_some())
                + usize::from(v.empty_dir.is_some())
                + usize::from(v.secret.is_some()),
            1,
            "volume {} needs exactly one source",
            v.name
        );
        if let Some(sec) = &v.secret {
            assert!(dns_label(&sec.secret_name), "secret {}", sec.secret_name);
            // A key is readable by its owner only (AuthKey::from_file refuses others).
            assert!(
                sec.default_mode.is_some_and(|m| m & 0o077 == 0),
                "volume {}: a secret's defaultMode keeps it private",
                v.name
            );
        }
        if let Some(c) = &v.config_map {
            assert_eq!(
                Some(&c.name),
                cm.metadata.name.as_ref(),
                "volume {}",
                v.name
            );
        }
    }
    // The agent's config path is a mounted ConfigMap key.
    let agent = pod
        .spec
        .containers
        .iter()
        .find(|c| c.args.first().map(String::as_str) == Some("agent"))
        .expect("agent container");
    let cfg_path = agent
        .args
        .iter()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("--config");
    let cfg_path = Path::new(cfg_path);
    let mount = agent
        .volume_mounts
        .iter()
        .find(|m| cfg_path.starts_with(&m.mount_path))
        .expect("config mounted");
    let vol = pod
        .spec
        .volumes
        .iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert!(vol.config_map.is_some());
    assert!(
        cm.data
            .contains_key(cfg_path.file_name().unwrap().to_str().unwrap())
    );
    if let Some(file) = &peers.file {
        assert!(
            file.starts_with(&mount.mount_path),
            "peer file under the ConfigMap mount"
        );
    }
    // The mesh: the peers' DNS name is the headless Service's, in its namespace.
    let svc_dns = format!(
        "{}.{}.svc.cluster.local",
        svc.metadata.name.as_deref().unwrap(),
        svc.metadata.namespace.as_deref().unwrap()
    );
    assert!(
        peers.dns.contains(&svc_dns),
        "[peers] dns should name the headless Service {svc_dns}: {:?}",
        peers.dns
    );
}

#[test]
fn kubernetes_schema_check_rejects_mistakes() {
    // The typed check is not a formality: misspelt or misplaced fields and wrong types fail.
    let bad = [
        "apiVersion: v1\nkind: Service\nmetadata: { name: a }\nspec:\n  clusterIp: None\n  ports: [{ port: 1 }]\n",
        "apiVersion: v1\nkind: Service\nmetadata: { name: a }\nspec:\n  ports: [{ port: seventy }]\n",
        "apiVersion: v1\nkind: Service\nmetadata: { name: a }\nspec:\n  ports: [{ port: 1, protocol: tcp }]\n",
    ];
    for text in bad {
        let docs = latscope_agent::yaml::documents(text).unwrap();
        assert!(
            latscope_agent::yaml::from_node::<k8s::Service>(&docs[0]).is_err(),
            "accepted: {text}"
        );
    }
    let ok = "apiVersion: v1\nkind: Service\nmetadata: { name: a }\nspec:\n  clusterIP: None\n  ports: [{ port: 1, protocol: TCP }]\n";
    let docs = latscope_agent::yaml::documents(ok).unwrap();
    latscope_agent::yaml::from_node::<k8s::Service>(&docs[0]).unwrap();
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

// ---------------------------------------------------------------------------------------------
// The Grafana dashboard: every query names metrics and labels a real agent exports.

/// Reports one finding for every target (the agent's own code exports it as
/// `latscope_finding{target,rule,side}`; the real diagnose pipeline is the binary's).
struct OneFinding;

impl latscope_agent::Diagnoser for OneFinding {
    fn diagnose(
        &self,
        _ask: &latscope_agent::Ask,
        _stop: &std::sync::atomic::AtomicBool,
    ) -> Result<latscope_agent::Diagnosis, String> {
        Ok(latscope_agent::Diagnosis {
            findings: vec![latscope_agent::Finding {
                rule: "nagle_delayed_ack".into(),
                side: "client".into(),
                explains_ns: 40_000_000,
            }],
            peer: latscope_agent::PeerEvidence::NotAsked,
            report: serde_json::json!({"findings": []}),
        })
    }
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out.split_once("\r\n\r\n")?.1.to_string())
}

/// Whether a socket scan reads socket options here (root: CAP_SYS_PTRACE), so that the test
/// listener's Nagle finding shows.
fn socket_options_readable() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Run the agent in-process (loopback targets: one accepting, one closed port, an SLO that
/// every sample breaches) until its /metrics shows a finding, then stop it with SIGTERM.
/// Returns the OpenMetrics text.
fn real_agent_exposition() -> String {
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("latscope-dash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open_port = open.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in open.incoming() {
            drop(c);
        }
    });
    // The [[service]]: a listener with Nagle on in another process (a scan leaves out its own).
    let mut svc = Command::new("python3")
        .args([
            "-c",
            "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint(s.getsockname()[1],flush=True)\ntime.sleep(120)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh installs it)");
    let svc_port: u16 = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(svc.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().parse().unwrap()
    };
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let metrics_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"listen = "{metrics_addr}"
findings_log = "{log}"
[[target]]
name = "open"
address = "127.0.0.1"
labels = {{ zone = "lab" }}
measure = [{{ kind = "connect", port = {open_port}, interval = "100ms", timeout = "100ms" }}]
slo = {{ threshold = "1ns", min_samples = 2, window = "10s" }}
[[target]]
name = "closed"
address = "127.0.0.1"
measure = [{{ kind = "connect", port = {closed_port}, interval = "100ms", timeout = "100ms" }}]
[[service]]
name = "svc"
port = {svc_port}
interval = "1s"
[stack]
probes = ["ip-start", "tcp-start", "tcp-socket-enqueued", "tcp-socket-read"]
"#,
            log = dir.join("findings.jsonl").display()
        ),
    )
    .unwrap();
    let opts = latscope_agent::Options {
        config: cfg,
        listen: None,
    };
    let agent = std::thread::spawn(move || {
        latscope_agent::run(&opts, std::sync::Arc::new(OneFinding)).map_err(|e| e.to_string())
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = http_get(metrics_addr, "/metrics").unwrap_or_default();
        if t.contains("latscope_finding{")
            && t.contains("latscope_probe_failures_total{")
            && t.contains("latscope_service_sockets{")
            && t.contains("latscope_stack_probes{")
            && (t.contains("latscope_socket_finding{") || !socket_options_readable())
        {
            break;
        }
        assert!(
            Instant::now() < deadline && !agent.is_finished(),
            "no finding exported within 30 s:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A reload (SIGHUP), so that the reload counter has a series too. SAFETY (both raises): the
    // agent installed its handlers before it started the workers whose series we saw.
    unsafe { libc::raise(libc::SIGHUP) };
    let text = loop {
        let t = http_get(metrics_addr, "/metrics").unwrap_or_default();
        // The reload restarts the service scans, which remove their series on the way out:
        // wait for the new scan's.
        if t.contains("latscope_agent_config_reloads_total{")
            && t.contains("latscope_finding{")
            && t.contains("latscope_service_sockets{")
        {
            break t;
        }
        assert!(
            Instant::now() < deadline && !agent.is_finished(),
            "no reload counted within 30 s:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // SAFETY: as above; the agent stops cleanly on SIGTERM.
    unsafe { libc::raise(libc::SIGTERM) };
    agent.join().unwrap().unwrap();
    let _ = svc.kill();
    let _ = svc.wait();
    let _ = std::fs::remove_dir_all(&dir);
    text
}

/// Metric name → label names, from an OpenMetrics/Prometheus text exposition.
fn series_labels(
    text: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if line[name_end..].starts_with('{') {
            let body = &line[name_end + 1..line.rfind('}').unwrap()];
            let mut in_str = false;
            let mut key = String::new();
            for ch in body.chars() {
                match ch {
                    '"' => in_str = !in_str,
                    '=' if !in_str => {
                        labels.insert(std::mem::take(&mut key).trim().to_string());
                    }
                    ',' if !in_str => key.clear(),
                    c if !in_str => key.push(c),
                    _ => {}
                }
            }
        }
    }
    out
}

/// The metric names and label names a PromQL expression uses (string literals skipped):
/// metrics are `latscope_*` identifiers (and `up{…}`), labels are the names in `by (…)`,
/// `without (…)` and matchers `{name op "value", …}`.
fn promql_names(expr: &str) -> (Vec<String>, Vec<String>) {
    let (mut metrics, mut labels) = (vec![], vec![]);
    let (mut in_str, mut in_braces, mut grouping) = (false, false, false);
    let (mut word, mut last_word) = (String::new(), String::new());
    for c in expr.chars().chain([' ']) {
        if in_str {
            in_str = c != '"';
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '$' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            if in_braces || grouping {
                labels.push(word.clone());
            } else if word.starts_with("latscope_") || (word == "up" && c == '{') {
                metrics.push(word.clone());
            }
            last_word = std::mem::take(&mut word);
        }
        match c {
            '"' => in_str = true,
            '{' => in_braces = true,
            '}' => in_braces = false,
            '(' => grouping = last_word == "by" || last_word == "without",
            ')' => grouping = false,
            _ => {}
        }
        if !c.is_whitespace() {
            last_word.clear();
        }
    }
    (metrics, labels)
}

/// Every query of a dashboard: (panel title, expr, legend, transformation fields).
fn dashboard_queries(dash: &serde_json::Value) -> Vec<(String, String, Vec<String>)> {
    let mut out = vec![];
    let mut stack: Vec<&serde_json::Value> = dash["panels"].as_array().unwrap().iter().collect();
    while let Some(p) = stack.pop() {
        if let Some(sub) = p["panels"].as_array() {
            stack.extend(sub);
        }
        let title = p["title"].as_str().unwrap_or("?").to_string();
        let mut fields = vec![];
        for t in p["transformations"].as_array().into_iter().flatten() {
            let o = &t["options"];
            for k in ["rowField", "columnField"] {
                if let Some(f) = o[k].as_str() {
                    fields.push(f.to_string());
                }
            }
            if let Some(m) = o["indexByName"].as_object() {
                fields.extend(m.keys().cloned());
            }
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: no expr"));
            let mut used = fields.clone();
            let legend = t["legendFormat"].as_str().unwrap_or("");
            for part in legend.split("{{").skip(1) {
                used.push(part.split("}}").next().unwrap().trim().to_string());
            }
            out.push((title.clone(), expr.to_string(), used));
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            // label_values(SELECTOR, LABEL)
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("variable query {q}"));
            let (sel, label) = inner.rsplit_once(',').unwrap();
            out.push((
                format!("variable {}", v["name"]),
                sel.trim().to_string(),
                vec![label.trim().to_string()],
            ));
        }
    }
    out
}

/// Grafana's variables replaced by values PromQL parses.
fn substitute_grafana_vars(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "1h")
        .replace("$kind", "rr")
        .replace("$layer", "application")
        .replace("$instance", "h1:9573")
        .replace("$target", "h2")
}

#[test]
fn grafana_dashboard_queries_what_the_agent_exports() {
    // The agent's first scans must land within bounded waits: not beside other tests loading
    // the CPUs.
    let _serial = lab::timing_lock();
    let path = root().join("deploy/grafana/latscope-fleet.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid JSON");
    assert_eq!(dash["uid"], "latscope-fleet");
    let queries = dashboard_queries(&dash);
    let kinds: Vec<&str> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    for want in ["heatmap", "table", "timeseries"] {
        assert!(kinds.contains(&want), "no {want} panel");
    }
    assert!(queries.len() >= 10, "{queries:?}");

    let exported = series_labels(&real_agent_exposition());
    // A family the agent registers but had no sample of in this run (an empty family is not
    // written): an alert on a condition that did not happen here, such as
    // latscope_stack_unavailable while eBPF works.
    let registry = std::fs::read_to_string(root().join("crates/agent/src/metrics.rs")).unwrap();
    let registered = |m: &str| registry.contains(&format!("\"{m}\""));
    // Labels Prometheus adds at scrape time.
    let scrape_labels = ["instance", "job"];
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (title, expr, extra_labels)) in queries.iter().enumerate() {
        let (metrics, mut labels) = promql_names(expr);
        assert!(!metrics.is_empty(), "{title}: no metric in {expr}");
        labels.extend(extra_labels.iter().cloned());
        let mut known: std::collections::BTreeSet<String> =
            scrape_labels.iter().map(|s| s.to_string()).collect();
        for m in &metrics {
            if m == "up" {
                continue;
            }
            if m == "latscope_socket_finding" && !socket_options_readable() {
                eprintln!("SKIP {title}: not root, the scan reads no socket options");
                continue;
            }
            if m.starts_with("latscope_stack_")
                && m.ends_with("_seconds_bucket")
                && !socket_options_readable()
            {
                eprintln!("SKIP {title}: not root, no eBPF: no kernel stack histograms");
                continue;
            }
            let l = exported
                .get(m)
                .unwrap_or_else(|| panic!("{title}: {m} is not exported by the agent"));
            known.extend(l.iter().cloned());
        }
        for l in labels
            .iter()
            .filter(|l| *l != "__name__" && *l != "Time" && *l != "Value")
        {
            assert!(
                known.contains(l),
                "{title}: label {l} is not on {metrics:?} (labels: {known:?})"
            );
        }
        rules.push_str(&format!(
            "      - record: dashboard:query:{i}\n        expr: {}\n",
            serde_json::to_string(&substitute_grafana_vars(expr)).unwrap()
        ));
    }
    // The recording and alerting rules name exported metrics too.
    let rules_text =
        std::fs::read_to_string(root().join("deploy/prometheus/latscope-rules.yml")).unwrap();
    for line in rules_text.lines() {
        if let Some(expr) = line.trim().strip_prefix("expr: ") {
            for m in promql_names(expr).0 {
                assert!(
                    exported.contains_key(&m) || registered(&m) || m == "up",
                    "rules: {m} not exported"
                );
            }
        }
    }
    // PromQL syntax: promtool parses every query as a recording rule.
    let file = std::env::temp_dir().join(format!("latscope-dash-rules-{}.yml", std::process::id()));
    std::fs::write(&file, rules).unwrap();
    match Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool rejects a dashboard query: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => {
            eprintln!("SKIP promtool syntax check: promtool not installed (scripts/setup.sh)")
        }
    }
    let _ = std::fs::remove_file(&file);
}

// ---------------------------------------------------------------------------------------------
// The DaemonSet's containers in the image this repository builds (scripts/build-image.sh): the
// image's filesystem holds the binary, what it loads and a CA bundle, and nothing that runs
// besides them; podman runs `serve` and `agent` with the manifest's arguments, mounts and added
// capabilities (everything else dropped), on the host's network.

/// podman with a store and a configuration of its own in a temp directory: the test's image,
/// containers, locks and their cgroups (under a parent named for this process) go with it, and
/// the host's images, containers and podman settings are left alone. runc, not crun: crun
/// refuses a host whose cgroup2 hierarchy holds controllers beside cgroup v1's (this build
/// machine's).
struct Podman {
    dir: lab::TempDir,
    cgroup_parent: String,
}

impl Podman {
    fn new() -> Podman {
        let dir = lab::TempDir::new();
        let d = dir.0.display();
        std::fs::write(
            dir.path("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/storage\"\nrunroot = \"{d}/run\"\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path("containers.conf"),
            format!(
                "[engine]\nruntime = \"runc\"\nevents_logger = \"none\"\nlock_type = \"file\"\ntmp_dir = \"{d}/tmp\"\n"
            ),
        )
        .unwrap();
        Podman {
            cgroup_parent: format!("/{}", lab::unique("img")),
            dir,
        }
    }

    /// `program` with podman's configuration pointed at this store.
    fn with_env(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("CONTAINERS_STORAGE_CONF", self.dir.path("storage.conf"))
            .env("CONTAINERS_CONF", self.dir.path("containers.conf"));
        c
    }

    fn cmd(&self) -> Command {
        self.with_env("podman")
    }

    /// `podman run` with the host's network, every capability dropped, and the host's own
    /// resource limits: podman's default raises them to 1048576 as root, which a host without
    /// CAP_SYS_RESOURCE (a container, as this build machine) refuses.
    fn run(&self) -> Command {
        let limit = |res| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit fills the struct we own.
            assert_eq!(unsafe { libc::getrlimit(res, &mut l) }, 0);
            l.rlim_max
        };
        // podman lowers its own process limit to 32768 before it starts the runtime.
        let nproc = limit(libc::RLIMIT_NPROC).min(32768);
        let nofile = limit(libc::RLIMIT_NOFILE);
        let mut c = self.cmd();
        c.args(["run", "--cgroup-parent", &self.cgroup_parent])
            .args(["--ulimit", &format!("nofile={nofile}:{nofile}")])
            .args(["--ulimit", &format!("nproc={nproc}:{nproc}")])
            .args(["--network", "host", "--cap-drop", "all"]);
        c
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        self.cmd().args(args).output().expect("podman")
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.output(&["rm", "--all", "--force", "--time", "0"]);
        let _ = self.output(&["rmi", "--all", "--force"]);
        // The containers' cgroups, in every hierarchy; conmon's leaves a moment after its
        // container.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        for line in mounts.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() > 2 && (f[2] == "cgroup" || f[2] == "cgroup2") {
                let top = Path::new(f[1]).join(self.cgroup_parent.trim_start_matches('/'));
                for _ in 0..50 {
                    if remove_cgroup_tree(&top) {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
        }
    }
}

/// Remove a cgroup directory and its children (rmdir, deepest first); whether none is left.
fn remove_cgroup_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
    !dir.exists()
}

/// Every file under `root` (relative paths) with its mode, symbolic links as mode 0.
fn tree(root: &Path) -> std::collections::BTreeMap<String, u32> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.file_type().is_symlink() {
                out.insert(rel, 0);
            } else {
                out.insert(rel, meta.permissions().mode());
            }
        }
    }
    out
}

/// The image archive's configuration and its filesystem, unpacked into `into`.
fn unpack_docker_archive(archive: &Path, into: &Path) -> (Vec<String>, serde_json::Value) {
    let raw = into.join("archive");
    let rootfs = into.join("rootfs");
    std::fs::create_dir_all(&raw).unwrap();
    std::fs::create_dir_all(&rootfs).unwrap();
    lab::sh(&[
        "tar",
        "-xf",
        archive.to_str().unwrap(),
        "-C",
        raw.to_str().unwrap(),
    ]);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(raw.join("manifest.json")).unwrap()).unwrap();
    let image = &manifest[0];
    let tags: Vec<String> = image["RepoTags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(raw.join(image["Config"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    for layer in image["Layers"].as_array().unwrap() {
        lab::sh(&[
            "tar",
            "-xpf",
            raw.join(layer.as_str().unwrap()).to_str().unwrap(),
            "-C",
            rootfs.to_str().unwrap(),
        ]);
    }
    (tags, config)
}

/// Check the image's filesystem and configuration (no engine needed): what it holds, that the
/// binary runs on its libraries alone (chroot), and its entry point, ports and labels.
fn check_image_archive(archive: &Path, version: &str, work: &Path) {
    let (tags, config) = unpack_docker_archive(archive, work);
    assert_eq!(tags, [format!("localhost/latscope:{version}")]);
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/bin/latscope"]));
    assert_eq!(c["Labels"]["org.opencontainers.image.version"], version);
    for port in ["7373/tcp", "7373/udp", "7374/tcp", "9573/tcp"] {
        assert!(c["ExposedPorts"].get(port).is_some(), "{port} not exposed");
    }
    let rootfs = work.join("rootfs");
    let files = tree(&rootfs);
    // Nothing runs in it but latscope and the dynamic loader: no shell, no package manager, no
    // compiler. The rest are the libraries and the CA bundle.
    let executables: Vec<&String> = files
        .iter()
        .filter(|(_, mode)| *mode & 0o111 != 0)
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        executables,
        ["lib64/ld-linux-x86-64.so.2", "usr/bin/latscope"],
        "{files:#?}"
    );
    for (path, mode) in &files {
        let library =
            (path.starts_with("lib") || path.starts_with("usr/lib")) && path.contains(".so");
        assert!(
            library || executables.contains(&path) || path == "etc/ssl/certs/ca-certificates.crt",
            "{path} (mode {mode:o}, 0 for a symbolic link) is none of the binary, a library, the CA bundle"
        );
    }
    let bundle = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt"))
        .expect("the CA bundle");
    assert!(bundle.matches("-----BEGIN CERTIFICATE-----").count() > 100);
    // The image's libraries are enough for the binary (and its copy is the version tested).
    let out = lab::sh(&[
        "chroot",
        rootfs.to_str().unwrap(),
        "/usr/bin/latscope",
        "--version",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("latscope {version}")
    );
    // Stripped: no symbol table, no debug info.
    let sections = lab::sh(&[
        "readelf",
        "-S",
        rootfs.join("usr/bin/latscope").to_str().unwrap(),
    ]);
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_info"),
        "the image's binary is not stripped"
    );
}

/// `podman run` failed before latscope ran: the engine cannot run containers on this host.
fn engine_failure(stderr: &str) -> bool {
    [
        "OCI runtime",
        "runc:",
        "crun:",
        "conmon",
        "cgroup",
        "rlimit",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// A container's `podman run` arguments from the DaemonSet: its added capabilities, and its
/// mounts (the ConfigMap from `config_dir`, an emptyDir as a tmpfs, the optional Secret left out
/// as a pod without it would).
fn pod_options(m: &Manifest, c: &k8s::Container, config_dir: &Path) -> Vec<String> {
    let mut out = vec![];
    for cap in c
        .security_context
        .iter()
        .flat_map(|s| s.capabilities.iter())
        .flat_map(|c| c.add.iter())
    {
        out.extend(["--cap-add".to_string(), cap.clone()]);
    }
    for mount in &c.volume_mounts {
        let vol =
            m.ds.spec
                .template
                .spec
                .volumes
                .iter()
                .find(|v| v.name == mount.name)
                .unwrap();
        if vol.config_map.is_some() {
            out.extend([
                "-v".into(),
                format!("{}:{}:ro", config_dir.display(), mount.mount_path),
            ]);
        } else if vol.empty_dir.is_some() {
            out.extend(["--tmpfs".into(), mount.mount_path.clone()]);
        }
    }
    out
}

/// The agent's `/metrics` once its series for `kinds` have samples (30 s at most).
fn wait_for_samples(metrics: std::net::SocketAddr, kinds: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = http_get(metrics, "/metrics").unwrap_or_default();
        let sampled = |kind: &str| {
            text.lines().any(|l| {
                l.starts_with("latscope_latency_seconds_count{")
                    && l.contains(&format!("kind=\"{kind}\""))
                    && l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()) > Some(0.0)
            })
        };
        if kinds.iter().all(|k| sampled(k)) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {kinds:?} samples within 30 s:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn the_daemonsets_containers_run_in_the_image_this_repository_builds() {
    if !lab::is_root() {
        eprintln!("skipped: building and running the image needs root (rootful podman)");
        return;
    }
    assert!(
        Command::new("podman").arg("--version").output().is_ok(),
        "podman missing: run scripts/setup.sh (scripts/packages.d/package.txt)"
    );
    let podman = Podman::new();
    let version = binary_version();
    let out_dir = podman.dir.path("out");
    let build = podman
        .with_env("bash")
        .arg("scripts/build-image.sh")
        .args(["--binary", env!("CARGO_BIN_EXE_latscope"), "--out"])
        .arg(&out_dir)
        .current_dir(root())
        .output()
        .unwrap();
    lab::assert_success(&build);
    let said = String::from_utf8_lossy(&build.stdout);
    let image = format!("localhost/latscope:{version}");
    assert!(
        said.starts_with(&format!("build-image: {image} (")),
        "{said}"
    );
    let archive = out_dir.join(format!("latscope_{version}_image.tar"));
    check_image_archive(&archive, &version, &podman.dir.path("unpacked"));

    // Can this host run containers at all? Where it cannot, the checks above are what is left.
    let probe = podman
        .run()
        .args(["--rm", &image, "--version"])
        .output()
        .unwrap();
    let (code, stdout, stderr) = lab::split(&probe);
    if code != 0 && engine_failure(&stderr) {
        eprintln!(
            "SKIP running the image: podman cannot run containers here ({}); its filesystem and configuration were checked",
            stderr.trim()
        );
        return;
    }
    assert_eq!(
        (code, stdout.trim()),
        (0, format!("latscope {version}").as_str()),
        "{stderr}"
    );

    let m = load_manifest();
    let containers = &m.ds.spec.template.spec.containers;
    let pick = |cmd: &str| {
        containers
            .iter()
            .find(|c| c.args.first().map(String::as_str) == Some(cmd))
            .unwrap_or_else(|| panic!("no {cmd} container in the DaemonSet"))
    };
    let (serve, agent) = (pick("serve"), pick("agent"));
    let config_dir = podman.dir.path("config");
    std::fs::create_dir_all(&config_dir).unwrap();

    // serve, as the DaemonSet runs it (on a free port: the host's network is shared).
    let port = lab::free_port();
    let started = podman
        .run()
        .args(["-d", "--name", "serve"])
        .args(pod_options(&m, serve, &config_dir))
        .arg(&image)
        .args(&serve.args)
        .args(["--port", &port.to_string()])
        .output()
        .unwrap();
    lab::assert_success(&started);
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "serve in the container never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // An rr from the host against it.
    let rr = lab::json_run(
        &["rr", "127.0.0.1", "-p", &port.to_string(), "-d", "500ms"],
        0,
    );
    assert_eq!(rr["peer"], "latscope");
    assert!(
        rr["results"][0]["transactions"].as_u64() > Some(100),
        "{rr}"
    );

    // The agent, as the DaemonSet runs it (its config where the ConfigMap is mounted): rr
    // against serve, and SYN probes, which need the raw socket the DaemonSet's NET_RAW grants.
    let metrics: std::net::SocketAddr = ([127, 0, 0, 1], lab::free_port()).into();
    std::fs::write(
        config_dir.join("agent.toml"),
        format!(
            "listen = \"{metrics}\"\nfindings_log = \"/var/lib/latscope/findings.jsonl\"\n\
             [[target]]\nname = \"serve\"\naddress = \"127.0.0.1\"\nmeasure = [\n\
             {{ kind = \"rr\", port = {port}, interval = \"200ms\" }},\n\
             {{ kind = \"syn\", port = {port}, interval = \"200ms\" }},\n]\n"
        ),
    )
    .unwrap();
    let started = podman
        .run()
        .args(["-d", "--name", "agent"])
        .args(pod_options(&m, agent, &config_dir))
        .arg(&image)
        .args(&agent.args)
        .output()
        .unwrap();
    lab::assert_success(&started);
    let text = wait_for_samples(metrics, &["rr", "syn"]);
    let failures: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("latscope_probe_failures_total{") && !l.ends_with(" 0"))
        .collect();
    assert!(failures.is_empty(), "probes failed: {failures:?}");
    // The readiness and liveness probes' path.
    assert_eq!(
        http_get(metrics, "/healthz").as_deref().map(str::trim),
        Some("ok")
    );

    // Both stop cleanly on the SIGTERM Kubernetes sends (as PID 1: no default action).
    let stop = podman.output(&["stop", "--time", "10", "agent", "serve"]);
    lab::assert_success(&stop);
    for name in ["agent", "serve"] {
        let code = podman.output(&["inspect", "--format", "{{.State.ExitCode}}", name]);
        assert_eq!(
            String::from_utf8_lossy(&code.stdout).trim(),
            "0",
            "{name} did not exit cleanly on SIGTERM: {}",
            String::from_utf8_lossy(&podman.output(&["logs", name]).stderr)
        );
    }
}
