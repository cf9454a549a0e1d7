//! The stack histograms as Prometheus metrics (OpenMetrics text through `prometheus-client`;
//! the HTTP server is latscope-exporter's, shared with `latscope agent`).
//!
//! Receive: one histogram family per probe, `latscope_stack_<probe>_seconds`, labelled by `hook`
//! and `interface` (plus `cgroup` when grouping by cgroup). Transmit: one family for every
//! stage, [`TX_FAMILY`], labelled by `stage` too, so that one query shows where a packet's time
//! goes (`sum by (stage, le) (rate(latscope_stack_tx_seconds_bucket[1m]))`, Grafana's heatmap
//! with `stage` as the series). Buckets are the log2 bucket bounds in seconds
//! ([`FIRST_BUCKET`]…[`LAST_BUCKET`]), cumulative as the format requires; `+Inf` equals
//! `_count`. Counters `latscope_stack_fallback_stamped_total`, `latscope_stack_uncounted_total`
//! per probe and `latscope_stack_tx_handed_on_total`. See
//! <https://prometheus.io/docs/specs/om/open_metrics_spec/>.

use std::sync::Mutex;

use latscope_core::log2::bucket_upper;
use latscope_core::model::stack::{Direction, GroupBy, Probe, ProbeHistogram, ProbeStamps};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

/// Bucket bounds exported: 2^8 ns (256 ns) … 2^36 ns (68.7 s); faster samples count in the
/// first bucket, slower ones only in `+Inf`.
pub const FIRST_BUCKET: usize = 8;
/// The last bucket exported (upper bound 2^36 ns, about 69 s); slower samples only in `+Inf`.
pub const LAST_BUCKET: usize = 36;

/// The family of every transmit stage (label `stage`).
pub const TX_FAMILY: &str = "latscope_stack_tx_seconds";

/// Family name for a probe, e.g. `latscope_stack_tcp_socket_read_seconds`, or [`TX_FAMILY`].
pub fn family_name(p: Probe) -> String {
    match p.direction() {
        Direction::Rx => format!("latscope_stack_{}_seconds", p.name().replace('-', "_")),
        Direction::Tx => TX_FAMILY.to_string(),
    }
}

/// What a scrape shows: the latest reading of the session's maps.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// (probe, hook) of every running probe, so that families exist (with zero counts) before
    /// the first packet.
    pub attached: Vec<(Probe, String)>,
    /// The histograms read.
    pub histograms: Vec<ProbeHistogram>,
    /// Per-probe timestamp statistics.
    pub stamps: Vec<ProbeStamps>,
    /// How histograms are grouped (decides the labels).
    pub group_by: GroupBy,
}

/// A `prometheus-client` collector over the latest [`Snapshot`], replaced with
/// [`StackCollector::update`] as the session is read.
#[derive(Debug, Default)]
pub struct StackCollector {
    snapshot: Mutex<Snapshot>,
}

impl StackCollector {
    /// Replace what scrapes see.
    pub fn update(&self, s: Snapshot) {
        if let Ok(mut g) = self.snapshot.lock() {
            *g = s;
        }
    }
}

fn labels(h: &ProbeHistogram, group_by: GroupBy) -> Vec<(&'static str, String)> {
    let mut l = group_labels(h, group_by);
    if h.probe.direction() == Direction::Tx {
        l.insert(0, ("stage", h.probe.name().to_string()));
    }
    l
}

fn group_labels(h: &ProbeHistogram, group_by: GroupBy) -> Vec<(&'static str, String)> {
    match group_by {
        GroupBy::Cgroup => vec![
            ("hook", h.hook.clone()),
            ("interface", "all".into()),
            ("cgroup", h.group.clone()),
        ],
        GroupBy::Interface => vec![("hook", h.hook.clone()), ("interface", h.group.clone())],
        GroupBy::None => vec![("hook", h.hook.clone()), ("interface", "all".into())],
    }
}

/// The log2 buckets as (upper bound in seconds, count in that bucket — not cumulative), the
/// ones below [`FIRST_BUCKET`] folded into it and those above [`LAST_BUCKET`] into `+Inf`
/// (`f64::MAX`, as prometheus-client marks it).
fn buckets(h: &ProbeHistogram) -> Vec<(f64, u64)> {
    let mut out = Vec::with_capacity(LAST_BUCKET - FIRST_BUCKET + 2);
    let mut below = 0u64;
    let mut above = 0u64;
    for (k, &c) in h.hist.buckets.iter().enumerate() {
        if k < FIRST_BUCKET {
            below += c;
        } else if k > LAST_BUCKET {
            above += c;
        }
    }
    for k in FIRST_BUCKET..=LAST_BUCKET {
        let c = h.hist.buckets.get(k).copied().unwrap_or(0);
        let c = if k == FIRST_BUCKET { c + below } else { c };
        out.push((bucket_upper(k) as f64 / 1e9, c));
    }
    out.push((f64::MAX, above));
    out
}

/// The series of `probe` to show: its histograms, or before its first packet (ungrouped) an
/// empty one, so that the family exists with zero counts.
fn series<'a>(
    s: &'a Snapshot,
    probe: Probe,
    hook: &str,
    empty: &'a mut Option<ProbeHistogram>,
) -> Vec<&'a ProbeHistogram> {
    let mine: Vec<&ProbeHistogram> = s.histograms.iter().filter(|h| h.probe == probe).collect();
    if !mine.is_empty() || s.group_by != GroupBy::None {
        return mine;
    }
    vec![&*empty.insert(ProbeHistogram::new(
        probe,
        hook,
        "all".into(),
        Default::default(),
    ))]
}

impl StackCollector {
    fn encode_receive(s: &Snapshot, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        for (probe, hook) in s
            .attached
            .iter()
            .filter(|(p, _)| p.direction() == Direction::Rx)
        {
            let fam = family_name(*probe);
            let help = format!(
                "Time from the packet's software receive timestamp until it reached {} ({}).",
                probe.name(),
                probe.description()
            );
            let mut family = encoder.encode_descriptor(&fam, &help, None, MetricType::Histogram)?;
            let mut empty = None;
            for h in series(s, *probe, hook, &mut empty) {
                encode_log2(family.encode_family(&labels(h, s.group_by))?, h)?;
            }
        }
        Ok(())
    }

    fn encode_transmit(s: &Snapshot, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        let tx: Vec<&(Probe, String)> = s
            .attached
            .iter()
            .filter(|(p, _)| p.direction() == Direction::Tx)
            .collect();
        if tx.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            TX_FAMILY,
            "Time transmitted packets spend in each stage of the host's way out (label stage: \
             tcp-send-queue or udp-send, local-out, post-routing, dev-egress, qdisc, driver, \
             tx-completion); a packet's stages add up to its time from the write to its completion.",
            None,
            MetricType::Histogram,
        )?;
        for (probe, hook) in tx {
            let mut empty = None;
            for h in series(s, *probe, hook, &mut empty) {
                encode_log2(family.encode_family(&labels(h, s.group_by))?, h)?;
            }
        }
        Ok(())
    }
}

impl Collector for StackCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = match self.snapshot.lock() {
            Ok(g) => g.clone(),
            Err(_) => return Ok(()),
        };
        Self::encode_receive(&s, &mut encoder)?;
        Self::encode_transmit(&s, &mut encoder)?;
        if !s.stamps.is_empty() {
            let mut c = encoder.encode_descriptor(
                "latscope_stack_fallback_stamped",
                "Packets without skb->tstamp, timed from the first hook latscope sees instead.",
                None,
                MetricType::Counter,
            )?;
            for st in s
                .stamps
                .iter()
                .filter(|st| st.probe.direction() == Direction::Rx)
            {
                let l = [("probe", st.probe.to_string())];
                ConstCounter::new(st.stats.fallback_stamped).encode(c.encode_family(&l)?)?;
            }
            let mut c = encoder.encode_descriptor(
                "latscope_stack_uncounted",
                "Packets not counted: no usable receive timestamp (receive), or their start of the stage was not seen (transmit).",
                None,
                MetricType::Counter,
            )?;
            for st in &s.stamps {
                let l = [("probe", st.probe.to_string())];
                ConstCounter::new(st.stats.no_stamp + st.stats.bad_stamp)
                    .encode(c.encode_family(&l)?)?;
            }
        }
        if let Some(st) = s.stamps.iter().find(|st| st.probe == Probe::TxCompletion) {
            let c = encoder.encode_descriptor(
                "latscope_stack_tx_handed_on",
                "Transmitted packets a virtual device (loopback, veth, bridge, VLAN, tunnel) handed on, with no TX completion to time.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(st.stats.handed_on).encode(c)?;
        }
        Ok(())
    }
}

fn encode_log2(
    mut m: prometheus_client::encoding::MetricEncoder<'_>,
    h: &ProbeHistogram,
) -> Result<(), std::fmt::Error> {
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        h.hist.sum_ns as f64 / 1e9,
        h.hist.count(),
        &buckets(h),
        None,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use latscope_core::Log2Histogram;
    use prometheus_client::registry::Registry;

    fn page(s: Snapshot) -> String {
        let c = std::sync::Arc::new(StackCollector::default());
        c.update(s);
        let mut r = Registry::default();
        r.register_collector(Box::new(c));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn buckets_are_cumulative_and_inf_equals_count() {
        let mut hist = Log2Histogram::new();
        hist.record(100); // below the first exported bound: counted in le=2.56e-7
        hist.record(40_000);
        hist.record(40_000);
        hist.record(100_000_000_000); // 100 s: only in +Inf
        let h = ProbeHistogram::new(Probe::TcpStart, "cgroup_skb/ingress", "all".into(), hist);
        let text = page(Snapshot {
            attached: vec![(Probe::TcpStart, "cgroup_skb/ingress".into())],
            histograms: vec![h],
            stamps: vec![],
            group_by: GroupBy::None,
        });
        let fam = "latscope_stack_tcp_start_seconds";
        assert!(text.contains(&format!("# TYPE {fam} histogram")), "{text}");
        let mut last = 0u64;
        let mut n = 0;
        for l in text
            .lines()
            .filter(|l| l.starts_with(&format!("{fam}_bucket")))
        {
            let v: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(v >= last, "{l}");
            last = v;
            n += 1;
        }
        assert_eq!(n, LAST_BUCKET - FIRST_BUCKET + 2);
        let labels = "hook=\"cgroup_skb/ingress\",interface=\"all\"";
        for (le, v) in [("2.56e-7", 1), ("0.000065536", 3), ("+Inf", 4)] {
            assert!(
                text.contains(&format!("{fam}_bucket{{le=\"{le}\",{labels}}} {v}")),
                "le={le}: {text}"
            );
        }
        assert!(
            text.contains(&format!("{fam}_count{{{labels}}} 4")),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn transmit_stages_share_one_family_labelled_by_stage() {
        let mut q = Log2Histogram::new();
        q.record(12_000_000);
        let mut d = Log2Histogram::new();
        d.record(400);
        let text = page(Snapshot {
            attached: vec![
                (Probe::TcpStart, "cgroup_skb/ingress".into()),
                (
                    Probe::Qdisc,
                    "tp_btf/net_dev_queue → tp_btf/net_dev_start_xmit".into(),
                ),
                (
                    Probe::Driver,
                    "tp_btf/net_dev_start_xmit → tp_btf/net_dev_xmit".into(),
                ),
                (
                    Probe::TxCompletion,
                    "tp_btf/net_dev_xmit → tp_btf/consume_skb".into(),
                ),
            ],
            histograms: vec![
                ProbeHistogram::new(Probe::Qdisc, "q", "all".into(), q),
                ProbeHistogram::new(Probe::Driver, "d", "all".into(), d),
            ],
            stamps: vec![ProbeStamps {
                probe: Probe::TxCompletion,
                stats: latscope_core::model::stack::StampStats {
                    handed_on: 7,
                    ..Default::default()
                },
            }],
            group_by: GroupBy::None,
        });
        assert_eq!(
            text.matches("# TYPE latscope_stack_tx_seconds histogram")
                .count(),
            1,
            "{text}"
        );
        assert!(text.contains("# TYPE latscope_stack_tcp_start_seconds histogram"));
        for stage in ["qdisc", "driver", "tx-completion"] {
            assert!(
                text.contains(&format!(
                    "latscope_stack_tx_seconds_count{{stage=\"{stage}\","
                )),
                "{stage}: {text}"
            );
        }
        assert!(text.contains(
            "latscope_stack_tx_seconds_bucket{le=\"0.016777216\",stage=\"qdisc\",hook=\"q\",interface=\"all\"} 1"
        ), "{text}");
        assert!(
            text.contains("latscope_stack_tx_handed_on_total 7"),
            "{text}"
        );
    }

    #[test]
    fn empty_probe_still_has_a_family_and_counters_end_in_total() {
        let text = page(Snapshot {
            attached: vec![(Probe::UdpSocketRead, "x".into())],
            histograms: vec![],
            stamps: vec![ProbeStamps {
                probe: Probe::UdpSocketRead,
                stats: Default::default(),
            }],
            group_by: GroupBy::None,
        });
        assert!(
            text.contains(
                "latscope_stack_udp_socket_read_seconds_count{hook=\"x\",interface=\"all\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE latscope_stack_uncounted counter"),
            "{text}"
        );
        assert!(
            text.contains("latscope_stack_uncounted_total{probe=\"udp-socket-read\"} 0"),
            "{text}"
        );
    }
}
