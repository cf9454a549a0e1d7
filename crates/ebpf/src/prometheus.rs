//! The stack histograms as Prometheus metrics (OpenMetrics text through `prometheus-client`;
//! the HTTP server is latscope-exporter's, shared with `latscope agent`).
//!
//! One histogram family per probe, `latscope_stack_<probe>_seconds`, labelled by `hook` and
//! `interface` (plus `cgroup` when grouping by cgroup). Buckets are the log2 bucket bounds in
//! seconds ([`FIRST_BUCKET`]…[`LAST_BUCKET`]), cumulative as the format requires; `+Inf`
//! equals `_count`. Counters `latscope_stack_fallback_stamped_total` and
//! `latscope_stack_uncounted_total` per probe. See
//! <https://prometheus.io/docs/specs/om/open_metrics_spec/>.

use std::sync::Mutex;

use latscope_core::log2::bucket_upper;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

use crate::probes::Probe;
use crate::report::{ProbeHistogram, ProbeStamps};
use crate::session::GroupBy;

/// Bucket bounds exported: 2^8 ns (256 ns) … 2^36 ns (68.7 s); faster samples count in the
/// first bucket, slower ones only in `+Inf`.
pub const FIRST_BUCKET: usize = 8;
/// The last bucket exported (upper bound 2^36 ns, about 69 s); slower samples only in `+Inf`.
pub const LAST_BUCKET: usize = 36;

/// Family name for a probe, e.g. `latscope_stack_tcp_socket_read_seconds`.
pub fn family_name(p: Probe) -> String {
    format!("latscope_stack_{}_seconds", p.name().replace('-', "_"))
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

impl Collector for StackCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = match self.snapshot.lock() {
            Ok(g) => g.clone(),
            Err(_) => return Ok(()),
        };
        for (probe, hook) in &s.attached {
            let fam = family_name(*probe);
            let help = format!(
                "Time from the packet's software receive timestamp until it reached {} ({}).",
                probe.name(),
                probe.description()
            );
            let mut family = encoder.encode_descriptor(&fam, &help, None, MetricType::Histogram)?;
            let mine: Vec<&ProbeHistogram> =
                s.histograms.iter().filter(|h| h.probe == *probe).collect();
            let empty;
            let series: Vec<&ProbeHistogram> = if mine.is_empty() && s.group_by == GroupBy::None {
                empty = ProbeHistogram::new(*probe, hook, "all".into(), Default::default());
                vec![&empty]
            } else {
                mine
            };
            for h in series {
                let l = labels(h, s.group_by);
                let m = family.encode_family(&l)?;
                encode_log2(m, h)?;
            }
        }
        if !s.stamps.is_empty() {
            let mut c = encoder.encode_descriptor(
                "latscope_stack_fallback_stamped",
                "Packets without skb->tstamp, timed from the first hook latscope sees instead.",
                None,
                MetricType::Counter,
            )?;
            for st in &s.stamps {
                let l = [("probe", st.probe.to_string())];
                ConstCounter::new(st.stats.fallback_stamped).encode(c.encode_family(&l)?)?;
            }
            let mut c = encoder.encode_descriptor(
                "latscope_stack_uncounted",
                "Packets not counted because they had no usable receive timestamp.",
                None,
                MetricType::Counter,
            )?;
            for st in &s.stamps {
                let l = [("probe", st.probe.to_string())];
                ConstCounter::new(st.stats.no_stamp + st.stats.bad_stamp)
                    .encode(c.encode_family(&l)?)?;
            }
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
