//! The kernel's protocol counters of a network namespace (`/proc/net/snmp` and
//! `/proc/net/netstat`, what `nstat` reads): `TcpExt ListenOverflows`, `Udp RcvbufErrors`, …
//!
//! Both files hold pairs of lines, a header and its values, each starting with the group name:
//!
//! ```text
//! TcpExt: SyncookiesSent SyncookiesRecv ... ListenOverflows ListenDrops ...
//! TcpExt: 0 0 ... 3 3 ...
//! ```
//!
//! The counters belong to the namespace of the thread that reads them
//! (`/proc/thread-self/net/...`), so a reader that entered another namespace with setns(2) gets
//! that namespace's counters.

use std::collections::HashMap;
use std::io;
use std::path::Path;

/// One reading of a namespace's counters: (group, name) → value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    values: HashMap<(String, String), u64>,
}

impl Counters {
    /// The counters of the calling thread's network namespace.
    pub fn read_own() -> io::Result<Counters> {
        Self::read_dir(Path::new("/proc/thread-self/net"))
    }

    /// The counters of the network namespace process `pid` lives in (`/proc/PID/net`).
    pub fn read_pid(pid: u32) -> io::Result<Counters> {
        Self::read_dir(&Path::new("/proc").join(pid.to_string()).join("net"))
    }

    fn read_dir(dir: &Path) -> io::Result<Counters> {
        let mut c = Counters::parse(&std::fs::read_to_string(dir.join("snmp"))?);
        // netstat holds the extended counters (TcpExt, IpExt); absent on odd kernels.
        if let Ok(text) = std::fs::read_to_string(dir.join("netstat")) {
            c.values.extend(Counters::parse(&text).values);
        }
        // IPv6's counters are one `Udp6RcvbufErrors 0` per line, filed under "Snmp6".
        if let Ok(text) = std::fs::read_to_string(dir.join("snmp6")) {
            c.values.extend(Counters::parse_snmp6(&text).values);
        }
        Ok(c)
    }

    /// Parse `/proc/net/snmp6` (`name value` lines) into the group "Snmp6".
    pub fn parse_snmp6(text: &str) -> Counters {
        let values = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (name, v) = (f.next()?, f.next()?.parse::<u64>().ok()?);
                Some((("Snmp6".to_string(), name.to_string()), v))
            })
            .collect();
        Counters { values }
    }

    /// Parse the text of `/proc/net/snmp` or `/proc/net/netstat`; lines that do not pair up
    /// are skipped.
    pub fn parse(text: &str) -> Counters {
        let mut values = HashMap::new();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let [head, vals] = pair else { continue };
            let (Some((g1, names)), Some((g2, nums))) =
                (head.split_once(':'), vals.split_once(':'))
            else {
                continue;
            };
            if g1 != g2 {
                continue;
            }
            for (name, v) in names.split_whitespace().zip(nums.split_whitespace()) {
                // Some counters (Tcp MaxConn) are signed; a negative value is not a count.
                if let Ok(v) = v.parse::<u64>() {
                    values.insert((g1.to_string(), name.to_string()), v);
                }
            }
        }
        Counters { values }
    }

    /// The counter `name` of `group` ("TcpExt", "ListenOverflows"), if the kernel has it.
    pub fn get(&self, group: &str, name: &str) -> Option<u64> {
        self.values
            .get(&(group.to_string(), name.to_string()))
            .copied()
    }

    /// How much counter `name` of `group` grew since `before` (0 when it did not, or when
    /// either reading lacks it).
    pub fn delta(&self, before: &Counters, group: &str, name: &str) -> u64 {
        match (self.get(group, name), before.get(group, name)) {
            (Some(now), Some(then)) => now.saturating_sub(then),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NETSTAT: &str = "TcpExt: SyncookiesSent EmbryonicRsts ListenOverflows ListenDrops\n\
                           TcpExt: 0 50 3 7\n\
                           IpExt: InNoRoutes InTruncatedPkts\n\
                           IpExt: 0 0\n";

    #[test]
    fn pairs_of_lines_become_named_counters() {
        let c = Counters::parse(NETSTAT);
        assert_eq!(c.get("TcpExt", "EmbryonicRsts"), Some(50));
        assert_eq!(c.get("TcpExt", "ListenOverflows"), Some(3));
        assert_eq!(c.get("TcpExt", "ListenDrops"), Some(7));
        assert_eq!(c.get("IpExt", "InNoRoutes"), Some(0));
        assert_eq!(c.get("TcpExt", "Nope"), None);
        assert_eq!(c.get("IpExt", "ListenDrops"), None);
    }

    #[test]
    fn delta_between_readings() {
        let before = Counters::parse("Udp: InDatagrams RcvbufErrors MaxConn\nUdp: 10 4 -1\n");
        let after = Counters::parse("Udp: InDatagrams RcvbufErrors MaxConn\nUdp: 90 19 -1\n");
        assert_eq!(after.delta(&before, "Udp", "RcvbufErrors"), 15);
        assert_eq!(after.delta(&before, "Udp", "InDatagrams"), 80);
        assert_eq!(after.delta(&before, "Udp", "MaxConn"), 0);
        assert_eq!(before.delta(&after, "Udp", "RcvbufErrors"), 0);
    }

    #[test]
    fn snmp6_lines_are_named_counters() {
        let c = Counters::parse_snmp6("Udp6InDatagrams 12\nUdp6RcvbufErrors 3\n");
        assert_eq!(c.get("Snmp6", "Udp6RcvbufErrors"), Some(3));
    }

    #[test]
    fn own_namespace_has_tcp_counters() {
        let c = Counters::read_own().unwrap();
        assert!(c.get("Tcp", "ActiveOpens").is_some());
        assert!(c.get("Udp", "RcvbufErrors").is_some());
    }
}
