//! `latscope stream`: throughput per interval, per direction and side; the latency probe idle
//! against loaded; UDP loss over time.

use latscope_core::model::stream::{StreamInterval, StreamReport};
use latscope_core::units::{format_bitrate, format_bytes, format_ns, format_si};

use super::{interrupted, latency_block};
use crate::error::ReportError;
use crate::html::{facts, figure, para, table};
use crate::plot::Pick;
use crate::plot::timeline::{Axes, Line, timeline};

pub(crate) fn body(r: &StreamReport) -> Result<String, ReportError> {
    let mut out = interrupted(r.interrupted);
    if let Some(e) = &r.error {
        out += &para("warn", &format!("Ended early: {e}"));
    }
    out += &facts(&[
        ("target", r.target.clone()),
        ("transport", r.transport.name().to_string()),
        ("direction", format!("{:?}", r.direction).to_lowercase()),
        ("streams", r.streams.to_string()),
        ("write size", format_bytes(f64::from(r.buffer_bytes))),
    ]);
    let rows: Vec<Vec<String>> = r
        .results
        .iter()
        .map(|d| {
            vec![
                d.direction.clone(),
                format_bitrate(d.rate_bps),
                format_bytes(d.bytes_delivered as f64),
                // A run shorter than two intervals measured none: "-", not "0 bit/s".
                d.intervals
                    .as_ref()
                    .map_or("-".into(), |i| format_bitrate(i.min_bps)),
                d.intervals
                    .as_ref()
                    .map_or("-".into(), |i| format_bitrate(i.max_bps)),
                d.tcp
                    .as_ref()
                    .map_or("-".into(), |t| t.retransmits.to_string()),
                d.udp
                    .as_ref()
                    .map_or("-".into(), |u| format!("{:.2}%", u.loss_pct)),
            ]
        })
        .collect();
    out += &table(
        "directions",
        &[
            "direction",
            "rate",
            "delivered",
            "min interval",
            "max interval",
            "retransmits",
            "UDP loss",
        ],
        &rows,
    );
    out += &throughput(r)?;
    out += &udp_loss(r)?;
    if let Some(p) = &r.latency_probe {
        out += "<h3>Latency probe: idle against under load</h3>\n";
        out += &latency_block(&[
            ("idle".to_string(), &p.idle),
            ("during the transfer".to_string(), &p.loaded),
        ])?;
    }
    Ok(out)
}

impl crate::page::Page for StreamReport {
    fn body(&self) -> Result<String, ReportError> {
        body(self)
    }

    fn headline(&self) -> Option<(&'static str, latscope_core::Summary)> {
        self.latency_probe
            .as_ref()
            .map(|p| ("latency probe under load", p.loaded.clone()))
    }

    fn not_comparable(&self) -> &'static str {
        "run stream with its latency probe"
    }
}

/// One line per (direction, side) view.
fn views(r: &StreamReport) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    for i in &r.intervals {
        let key = (i.direction.clone(), i.side.clone());
        if !v.contains(&key) {
            v.push(key);
        }
    }
    v
}

fn throughput(r: &StreamReport) -> Result<String, ReportError> {
    if r.intervals.is_empty() {
        return Ok(String::new());
    }
    let lines: Vec<Line> = views(r)
        .into_iter()
        .map(|(dir, side)| Line {
            points: r
                .intervals
                .iter()
                .filter(|i| i.direction == dir && i.side == side)
                .map(|i| (i.end_ns as f64 / 1e9, i.rate_bps))
                .collect(),
            label: format!("{dir} ({side}'s count)"),
            pick: Pick::Mean,
        })
        .collect();
    let axes = Axes {
        y_desc: "throughput (bit/s)",
        y_fmt: |v| format_bitrate(v),
        log_y: false,
    };
    Ok(figure(
        "throughput",
        &timeline(&axes, &lines)?,
        "Throughput per interval, per direction, as each side counted it: sender and receiver \
         lines should overlap; a sawtooth or dips are congestion control backing off.",
    ))
}

/// The UDP receivers' intervals of one (direction, side) view, in time order.
fn udp_views(r: &StreamReport) -> Vec<(String, Vec<&StreamInterval>)> {
    views(r)
        .into_iter()
        .map(|(dir, side)| {
            let ivs: Vec<&StreamInterval> = r
                .intervals
                .iter()
                .filter(|i| i.direction == dir && i.side == side && i.udp_lost.is_some())
                .collect();
            (dir, ivs)
        })
        .filter(|(_, ivs)| !ivs.is_empty())
        .collect()
}

/// Loss per interval (%, from the cumulative gap and receive counts), or the cumulative count
/// for results of older versions that carry no receive count.
fn loss_points(ivs: &[&StreamInterval]) -> (Vec<(f64, f64)>, bool) {
    let per_interval = ivs.iter().all(|i| i.udp_received.is_some());
    let (mut lost0, mut recv0) = (0u64, 0u64);
    let pts = ivs
        .iter()
        .map(|i| {
            let t = i.end_ns as f64 / 1e9;
            let lost = i.udp_lost.unwrap_or(0);
            if !per_interval {
                return (t, lost as f64);
            }
            let recv = i.udp_received.unwrap_or(0);
            // The gap count can shrink when a late datagram fills a gap.
            let (dl, dr) = (lost.saturating_sub(lost0), recv.saturating_sub(recv0));
            (lost0, recv0) = (lost, recv);
            let pct = if dl + dr == 0 {
                0.0
            } else {
                100.0 * dl as f64 / (dl + dr) as f64
            };
            (t, pct)
        })
        .collect();
    (pts, per_interval)
}

fn udp_loss(r: &StreamReport) -> Result<String, ReportError> {
    let views = udp_views(r);
    if views.is_empty() {
        return Ok(String::new());
    }
    let mut per_interval = true;
    let lines: Vec<Line> = views
        .iter()
        .map(|(dir, ivs)| {
            let (points, pct) = loss_points(ivs);
            per_interval &= pct;
            Line {
                label: dir.clone(),
                points,
                pick: Pick::Max,
            }
        })
        .collect();
    let (axes, caption) = if per_interval {
        (
            Axes {
                y_desc: "datagrams lost in the interval (%)",
                y_fmt: |v| format!("{v:.1}%"),
                log_y: false,
            },
            "UDP datagrams lost in each interval, per direction: a flat line at zero is no loss; \
             loss that comes and goes with the rate is a queue overflowing; steady loss is a \
             sending rate above what the path or the receiver can take.",
        )
    } else {
        (
            Axes {
                y_desc: "datagrams missing so far (count)",
                y_fmt: |v| format_si(v),
                log_y: false,
            },
            "UDP datagrams missing so far: a flat line is no loss; a steady slope is a rate \
             above what the path or receiver can take.",
        )
    };
    let mut out = figure("udp-loss", &timeline(&axes, &lines)?, caption);
    out += &udp_jitter(&views)?;
    Ok(out)
}

fn udp_jitter(views: &[(String, Vec<&StreamInterval>)]) -> Result<String, ReportError> {
    let lines: Vec<Line> = views
        .iter()
        .map(|(dir, ivs)| Line {
            label: dir.clone(),
            points: ivs
                .iter()
                .filter_map(|i| i.udp_jitter_ns.map(|j| (i.end_ns as f64 / 1e9, j)))
                .collect(),
            pick: Pick::Max,
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    if lines.is_empty() {
        return Ok(String::new());
    }
    let axes = Axes {
        y_desc: "interarrival jitter (time)",
        y_fmt: |v| format_ns(v),
        log_y: false,
    };
    Ok(figure(
        "udp-jitter",
        &timeline(&axes, &lines)?,
        "RFC 3550 interarrival jitter at the end of each interval (a running average of how much \
         the spacing of datagrams changed on the way): a line that climbs with the load is a \
         queue filling on the path; spikes are bursts of cross traffic or scheduling delays.",
    ))
}
