//! `latscope stream`: throughput per interval, per direction and side; the latency probe idle
//! against loaded; UDP loss over time.

use latscope_core::model::stream::StreamReport;
use latscope_core::units::{format_bitrate, format_bytes, format_si};

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
                format_bitrate(d.intervals.min_bps),
                format_bitrate(d.intervals.max_bps),
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

fn udp_loss(r: &StreamReport) -> Result<String, ReportError> {
    let pts: Vec<(f64, f64)> = r
        .intervals
        .iter()
        .filter_map(|i| i.udp_lost.map(|l| (i.end_ns as f64 / 1e9, l as f64)))
        .collect();
    if pts.is_empty() {
        return Ok(String::new());
    }
    let axes = Axes {
        y_desc: "datagrams missing so far",
        y_fmt: |v| format_si(v),
        log_y: false,
    };
    let line = Line {
        label: "lost (cumulative)".into(),
        points: pts,
        pick: Pick::Max,
    };
    Ok(figure(
        "udp-loss",
        &timeline(&axes, &[line])?,
        "UDP datagrams missing so far: a flat line is no loss; a steady slope is a rate above \
         what the path or receiver can take.",
    ))
}
