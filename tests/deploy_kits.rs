//! The deployment kits under deploy/ are valid: the agent's example configurations (TOML and
//! YAML) and the Kubernetes ConfigMap's agent.toml pass the agent's own validation, the manifest
//! matches the Kubernetes API's types (typed structures, unknown fields denied), the Prometheus
//! scrape config and rules pass `promtool check` (Debian package prometheus, from
//! scripts/setup.sh), and the Grafana dashboard's queries name what a real agent exports.

#![allow(clippy::unwrap_used)]

#[macro_use]
mod lab;

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

#[test]
fn kubernetes_manifest_matches_the_api_schema() {
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
    let ([cm], [svc], [ds]) = (cms.as_slice(), svcs.as_slice(), dss.as_slice()) else {
        panic!("want one ConfigMap, one Service, one DaemonSet");
    };
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
