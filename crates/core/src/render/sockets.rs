use std::fmt::Write;

use super::{Human, Page, Table};
use crate::model::sockets::{SetsockoptEvent, Severity, SocketRow, SocketsReport, WatchSummary};
use crate::units::{format_bitrate, format_bytes};

fn onoff(b: Option<bool>) -> String {
    match b {
        Some(true) => "on".into(),
        Some(false) => "off".into(),
        None => "-".into(),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

fn us(v: u32) -> String {
    if v >= 10_000 {
        format!("{}ms", v / 1000)
    } else if v >= 1000 {
        format!("{:.1}ms", f64::from(v) / 1000.0)
    } else {
        format!("{v}us")
    }
}

fn bytes(v: Option<u32>) -> String {
    v.map(|b| format_bytes(f64::from(b)))
        .unwrap_or_else(|| "-".into())
}

fn pct(part: Option<u64>, whole: Option<u64>) -> String {
    match (part, whole) {
        (Some(p), Some(w)) if w > 0 => format!("{:.0}%", p as f64 * 100.0 / w as f64),
        _ => "-".into(),
    }
}

/// "nginx[1234]" for the first owner, "+N" for more.
pub(crate) fn owner_text(r: &SocketRow) -> (String, String) {
    match r.owners.first() {
        // TIME-WAIT, orphaned and not-yet-accepted sockets: no process holds them (inode 0).
        None if r.inode == 0 => ("no process".into(), "-".into()),
        // No readable owner: the uid is still known from sock_diag.
        None => (format!("uid {}", r.uid), "-".into()),
        Some(o) => {
            let more = if r.owners.len() > 1 {
                format!(" +{}", r.owners.len() - 1)
            } else {
                String::new()
            };
            (format!("{}[{}]{more}", o.comm, o.pid), o.fd.to_string())
        }
    }
}

impl Human for SocketsReport {
    fn render_human(&self, out: &mut Page) {
        let n = self.sockets.len();
        let _ = writeln!(
            out,
            "latscope sockets — {}: {}",
            self.selection,
            crate::units::count(n as u64, "socket")
        );
        if n > 0 {
            out.push('\n');
            self.sockets_table(out);
            self.options_table(out);
            self.tcp_info_table(out);
        }
        self.findings_section(out);
        self.notes_section(out);
    }
}

impl SocketsReport {
    /// Who owns each socket, its state and addresses.
    fn sockets_table(&self, out: &mut Page) {
        let mut t = Table::new(&[
            "#", "process", "fd", "proto", "state", "local", "remote", "netns",
        ]);
        for (i, r) in self.sockets.iter().enumerate() {
            let (p, fd) = owner_text(r);
            let ns = match (r.netns_is_own, r.netns) {
                (true, _) => "own".to_string(),
                (false, 0) => "?".to_string(),
                (false, n) => n.to_string(),
            };
            t.row(vec![
                (i + 1).to_string(),
                p,
                fd,
                r.proto.clone(),
                r.state.clone(),
                r.local.clone(),
                r.remote.clone(),
                ns,
            ]);
        }
        t.render("  ", out);
    }

    /// The options read with getsockopt, for the sockets whose fd could be duplicated.
    fn options_table(&self, out: &mut Page) {
        let mut t = Table::new(&[
            "#",
            "nodelay",
            "cork",
            "quickack*",
            "sndbuf",
            "rcvbuf",
            "notsent_lowat",
            "cc",
            "keepalive",
            "busy_poll",
            "rto_min",
            "delack_max",
        ]);
        let mut any = false;
        for (i, r) in self.sockets.iter().enumerate() {
            let Some(o) = &r.options else { continue };
            any = true;
            let lowat = match o.notsent_lowat {
                Some(0) => "sysctl".into(),
                Some(v) if v < u32::MAX / 2 => format_bytes(f64::from(v)),
                Some(_) => "off".into(),
                None => "-".into(),
            };
            let ka = match (o.keepalive, o.keepidle_s) {
                (Some(true), Some(idle)) => format!("{idle}s"),
                (k, _) => onoff(k),
            };
            t.row(vec![
                (i + 1).to_string(),
                onoff(o.nodelay),
                onoff(o.cork),
                onoff(o.quickack_now),
                bytes(o.sndbuf),
                bytes(o.rcvbuf),
                lowat,
                opt(o.congestion.clone()),
                ka,
                o.busy_poll_us
                    .map(|v| {
                        if v == 0 {
                            "off".into()
                        } else {
                            format!("{v}us")
                        }
                    })
                    .unwrap_or_else(|| "-".into()),
                o.rto_min_us.map(us).unwrap_or_else(|| "-".into()),
                o.delack_max_us.map(us).unwrap_or_else(|| "-".into()),
            ]);
        }
        if any {
            out.push_str("\n  options (getsockopt on a duplicate of the fd):\n");
            t.render("  ", out);
            out.push_str("  * quickack: the kernel's quick-ack mode right now — a transient state it leaves by itself, not a sticky option\n");
        }
    }

    /// TCP_INFO from sock_diag for every connected TCP socket.
    fn tcp_info_table(&self, out: &mut Page) {
        let mut t = Table::new(&[
            "#",
            "rtt",
            "rttvar",
            "min_rtt",
            "ato",
            "rto",
            "cwnd",
            "unacked",
            "retrans",
            "notsent",
            "delivery",
            "sndbuf_ltd",
            "rwnd_ltd",
        ]);
        let mut any = false;
        for (i, r) in self.sockets.iter().enumerate() {
            let Some(s) = &r.tcp else { continue };
            if r.state == "LISTEN" {
                continue;
            }
            any = true;
            t.row(vec![
                (i + 1).to_string(),
                us(s.rtt_us),
                us(s.rttvar_us),
                s.min_rtt_us
                    .filter(|&v| v != u32::MAX)
                    .map(us)
                    .unwrap_or_else(|| "-".into()),
                us(s.ato_us),
                us(s.rto_us),
                s.snd_cwnd.to_string(),
                s.unacked.to_string(),
                s.total_retrans.to_string(),
                bytes(s.notsent_bytes),
                s.delivery_rate_bps
                    .map(|b| format_bitrate(b as f64))
                    .unwrap_or_else(|| "-".into()),
                pct(s.sndbuf_limited_us, s.busy_time_us),
                pct(s.rwnd_limited_us, s.busy_time_us),
            ]);
        }
        if any {
            out.push_str("\n  tcp_info (sock_diag):\n");
            t.render("  ", out);
        }
    }

    /// Findings per socket.
    fn findings_section(&self, out: &mut Page) {
        let with_findings: Vec<_> = self
            .sockets
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.findings.is_empty())
            .collect();
        if !with_findings.is_empty() {
            out.push_str("\nFindings:\n");
            for (i, r) in with_findings {
                let (p, fd) = owner_text(r);
                let _ = writeln!(
                    out,
                    "  #{} {p} fd {fd} {} {} → {}:",
                    i + 1,
                    r.proto,
                    r.local,
                    r.remote
                );
                for f in &r.findings {
                    let mark = if f.severity == Severity::Warn {
                        "!"
                    } else {
                        "-"
                    };
                    let _ = writeln!(out, "    {mark} {}", f.text);
                }
            }
        }
    }

    /// Options that could not be read, what this run could not see, and notes.
    fn notes_section(&self, out: &mut Page) {
        let errs: Vec<_> = self
            .sockets
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.options_error.as_ref().map(|e| (i, e)))
            .collect();
        if !errs.is_empty() && errs.len() <= 5 {
            out.push('\n');
            for (i, e) in errs {
                let _ = writeln!(out, "  #{}: options not read: {e}", i + 1);
            }
        }
        if !self.access.missing.is_empty() {
            out.push_str("\nNot shown in this run:\n");
            for m in &self.access.missing {
                let _ = writeln!(out, "  - {m}");
            }
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n");
            for m in &self.notes {
                let _ = writeln!(out, "  - {m}");
            }
        }
    }
}

impl SetsockoptEvent {
    /// One human line: `12:00:01.123 nginx[1234/1234] fd 7 SOL_TCP TCP_NODELAY = 1 (now 1)`.
    pub fn human_line(&self) -> String {
        let secs = self.unix_ms / 1000;
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let mut line = format!(
            "{h:02}:{m:02}:{s:02}.{:03} UTC  {}[{}/{}]  fd {}  {} {} = {}",
            self.unix_ms % 1000,
            self.comm,
            self.pid,
            self.tid,
            self.fd,
            self.level,
            self.option,
            self.value.as_deref().unwrap_or("?")
        );
        if self.value_source.as_deref() == Some("process memory after the call") {
            line.push_str(" (read after the call)");
        }
        if let Some(e) = &self.effective {
            if Some(e) != self.value.as_ref() {
                let _ = write!(line, "  (socket now: {e})");
            }
        }
        line
    }
}

impl Human for WatchSummary {
    fn render_human(&self, out: &mut Page) {
        let _ = writeln!(
            out,
            "{} reported",
            crate::units::count(self.events, "setsockopt call")
        );
        if self.lost > 0 {
            let _ = writeln!(
                out,
                "{} lost: the kernel's ring buffer was full",
                crate::units::count(self.lost, "call")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Meta;
    use crate::model::sockets::{Access, Owner, SocketFinding, SocketOptions, TcpStats};

    #[test]
    fn renders_rows_options_and_findings() {
        let row = SocketRow {
            proto: "tcp".into(),
            family: "ipv4".into(),
            state: "ESTAB".into(),
            local: "127.0.0.1:8080".into(),
            remote: "127.0.0.1:5555".into(),
            inode: 9,
            uid: 0,
            netns: 1,
            netns_is_own: true,
            owners: vec![Owner {
                pid: 42,
                comm: "nginx".into(),
                fd: 7,
            }],
            options: Some(SocketOptions {
                nodelay: Some(false),
                sndbuf: Some(4608),
                ..Default::default()
            }),
            options_error: None,
            tcp: Some(TcpStats {
                rtt_us: 40,
                ato_us: 40_000,
                ..Default::default()
            }),
            mem: None,
            route: None,
            findings: vec![SocketFinding {
                severity: Severity::Warn,
                rule: "nagle-on-rr".into(),
                text: "Nagle on".into(),
            }],
        };
        let r = SocketsReport {
            meta: Meta::new("sockets", "0", 0),
            selection: "pid 42".into(),
            access: Access::default(),
            sockets: vec![row],
            notes: vec!["pid 1 exited".into()],
        };
        let s = crate::render::human_text(&r, 200);
        assert!(s.contains("nginx[42]"), "{s}");
        assert!(
            s.contains("4.5 KiB") || s.contains("4.6 KB") || s.contains("4608"),
            "{s}"
        );
        assert!(s.contains("40ms"), "{s}");
        assert!(s.contains("! Nagle on"), "{s}");
        assert!(s.contains("pid 1 exited"), "{s}");
    }
}
