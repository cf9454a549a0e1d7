//! The client host's own stack, measured on an rr connection of its own after the run (so the
//! measured loop never pays for the stamps): request/response exchanges with SO_TIMESTAMPING
//! ([`latscope_sys::txstamp`]) give send() → qdisc, qdisc → driver and driver → recv() times.
//! Bounded by a count and a time budget, so a long path costs at most the budget.

use std::time::{Duration, Instant};

use latscope_core::model::hoststack::HostStackTimes;
use latscope_core::model::rr::Transport;
use latscope_sys::txstamp::Stamper;

use crate::NetError;
use crate::proto::{Start, TestKind};
use crate::rr::{Peer, RrConfig};

/// Exchanges timed at most.
pub const EXCHANGES: u32 = 200;
/// Time the exchanges may take at most.
pub const BUDGET: Duration = Duration::from_secs(1);

/// Time the client's own stack over up to [`EXCHANGES`] exchanges of the run's first size
/// against latscope serve (TCP). None for other transports and peers.
pub fn measure(cfg: &RrConfig) -> Option<Result<HostStackTimes, NetError>> {
    if cfg.transport != Transport::Tcp || cfg.peer != Peer::Latscope {
        return None;
    }
    let &(req, resp) = cfg.sizes.first()?;
    Some(exchanges(cfg, req, resp))
}

fn exchanges(cfg: &RrConfig, req: u32, resp: u32) -> Result<HostStackTimes, NetError> {
    let start = Start {
        kind: TestKind::Rr,
        request_bytes: req,
        response_bytes: resp,
        duration_ms: (BUDGET + Duration::from_secs(2)).as_millis() as u64,
        server: cfg.server.clone(),
        stream: None,
        join: None,
    };
    let session = cfg.open_session(&start)?;
    let conn = session.conn;
    conn.apply(&cfg.client)
        .map_err(|e| NetError::io("setting socket options", e))?;
    conn.set_read_timeout(Some(cfg.timeout.min(BUDGET)))
        .map_err(|e| NetError::io("setting a timeout", e))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&conn);
    let io = |e| NetError::io(format!("timing the host stack against {}", cfg.target), e);
    let mut st = Stamper::new(fd).map_err(io)?;
    let request = vec![b'q'; req as usize];
    let mut response = vec![0u8; resp as usize];
    let t0 = Instant::now();
    for _ in 0..EXCHANGES {
        if t0.elapsed() >= BUDGET {
            break;
        }
        let mut sent = 0;
        while sent < request.len() {
            sent += st.send(&request[sent..]).map_err(io)?;
        }
        let mut got = 0;
        while got < response.len() {
            match st.recv(&mut response[got..]).map_err(io)? {
                0 => return Err(io(std::io::ErrorKind::UnexpectedEof.into())),
                n => got += n,
            }
        }
        st.drain();
    }
    Ok(st.summary())
}
