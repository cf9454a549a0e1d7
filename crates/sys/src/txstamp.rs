//! The client host's own stack, timed on latscope's own TCP sockets with the kernel's software
//! timestamps (SO_TIMESTAMPING, Documentation/networking/timestamping.rst): each send() is
//! matched by its OPT_ID key (the byte count of its last byte, OPT_ID_TCP) to the TX_SCHED
//! stamp (the packet reached the qdisc) and the TX_SOFTWARE stamp (handed to the driver), read
//! from MSG_ERRQUEUE with OPT_TSONLY (no payload copy); each recv() reads the RX_SOFTWARE stamp
//! (the driver received it) from its control message. Bounded: at most [`MAX_PENDING`] sends
//! wait for their stamps and [`MAX_SAMPLES`] samples are kept per stage.
//!
//! Timestamps are CLOCK_REALTIME, so the user-space ends are read from the same clock.

use std::io;
use std::os::fd::RawFd;

use latscope_core::model::hoststack::{HostStackTimes, StageTimes};

use crate::clock::realtime_ns;
use crate::msg;

/// Sends waiting for their timestamps; older ones are counted missing.
pub const MAX_PENDING: usize = 256;
/// Samples kept per stage.
pub const MAX_SAMPLES: usize = 100_000;

/// include/uapi/linux/errqueue.h: which stamp an error-queue message carries.
const SCM_TSTAMP_SND: u32 = 0;
const SCM_TSTAMP_SCHED: u32 = 1;

/// Turn the stamps on for `fd` (a connected TCP socket, before the sends to time).
pub fn enable(fd: RawFd) -> io::Result<()> {
    let base = libc::SOF_TIMESTAMPING_TX_SCHED
        | libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_RX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    let set = |flags: libc::c_uint| {
        crate::sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags as i32)
    };
    // OPT_ID_TCP (6.2+) counts keys from the next byte written, whatever is unacknowledged;
    // without it keys start at the unacknowledged byte, the same on an idle connection.
    set(base | libc::SOF_TIMESTAMPING_OPT_ID_TCP).or_else(|_| set(base))
}

/// One send waiting for its stamps.
#[derive(Clone, Copy)]
struct Pending {
    key: u32,
    sent_ns: u64,
    sched_ns: Option<u64>,
}

/// The stamps of one socket's sends and receives.
pub struct Stamper {
    fd: RawFd,
    sent_bytes: u64,
    pending: Vec<Pending>,
    send_to_sched: Vec<u64>,
    sched_to_driver: Vec<u64>,
    driver_to_recv: Vec<u64>,
    missing: u64,
}

impl Stamper {
    /// Enable the stamps on `fd` and start timing.
    pub fn new(fd: RawFd) -> io::Result<Stamper> {
        enable(fd)?;
        Ok(Stamper {
            fd,
            sent_bytes: 0,
            pending: Vec::with_capacity(MAX_PENDING),
            send_to_sched: Vec::new(),
            sched_to_driver: Vec::new(),
            driver_to_recv: Vec::new(),
            missing: 0,
        })
    }

    /// The connection is about to close: read its last stamps and let go of its descriptor
    /// (the sends still waiting are counted missing), so that nothing is read from whatever
    /// socket takes its number next.
    pub fn close(&mut self) {
        self.drain();
        self.missing += self.pending.len() as u64;
        self.pending.clear();
        self.fd = -1;
    }

    /// Go on timing on `fd`, a new connection (the last one [`Stamper::close`]d): the samples
    /// so far are kept.
    pub fn restart(&mut self, fd: RawFd) -> io::Result<()> {
        enable(fd)?;
        self.missing += self.pending.len() as u64;
        self.pending.clear();
        self.fd = fd;
        self.sent_bytes = 0;
        Ok(())
    }

    /// send() `buf` (blocking, as the socket is), remembering when it was called. A peer that
    /// closed is an EPIPE error, never a signal (MSG_NOSIGNAL).
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let t = realtime_ns();
        // SAFETY: `buf` is a live slice for the call.
        let n = unsafe { libc::send(self.fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as u64;
        if n > 0 {
            if self.pending.len() >= MAX_PENDING {
                self.pending.remove(0);
                self.missing += 1;
            }
            self.pending.push(Pending {
                key: (self.sent_bytes + n - 1) as u32,
                sent_ns: t,
                sched_ns: None,
            });
            self.sent_bytes += n;
        }
        Ok(n as usize)
    }

    /// recv() into `buf`, timing the driver's receive stamp → this call's return.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let m = msg::recv(self.fd, buf, 0)?;
        let t = realtime_ns();
        if let Some(s) = m.control.kernel_ns
            && m.len > 0
        {
            push(&mut self.driver_to_recv, t.saturating_sub(s));
        }
        Ok(m.len)
    }

    /// Read every queued transmit stamp (non-blocking) and match it to its send.
    pub fn drain(&mut self) {
        if self.fd < 0 {
            return;
        }
        let mut scratch = [0u8; 1];
        while let Ok(Some(m)) = msg::try_recv(self.fd, &mut scratch, libc::MSG_ERRQUEUE) {
            let (Some(ns), Some(e)) = (m.control.kernel_ns, m.control.err) else {
                continue;
            };
            if e.origin != libc::SO_EE_ORIGIN_TIMESTAMPING {
                continue;
            }
            let (kind, key) = (e.info, e.data);
            let Some(i) = self.pending.iter().position(|p| p.key == key) else {
                continue;
            };
            match kind {
                SCM_TSTAMP_SCHED => self.pending[i].sched_ns = Some(ns),
                SCM_TSTAMP_SND => {
                    let p = self.pending.remove(i);
                    // Sends before this one whose stamps never came are lost to the count.
                    let older = self.pending.iter().take_while(|q| q.key < key).count();
                    self.missing += older as u64;
                    self.pending.drain(..older);
                    if let Some(sched) = p.sched_ns {
                        push(&mut self.send_to_sched, sched.saturating_sub(p.sent_ns));
                        push(&mut self.sched_to_driver, ns.saturating_sub(sched));
                    }
                }
                _ => {}
            }
        }
    }

    /// The run's figures.
    pub fn summary(&mut self) -> HostStackTimes {
        self.drain();
        HostStackTimes {
            send_to_sched: StageTimes::of(&mut self.send_to_sched),
            sched_to_driver: StageTimes::of(&mut self.sched_to_driver),
            driver_to_recv: StageTimes::of(&mut self.driver_to_recv),
            missing: self.missing + self.pending.len() as u64,
        }
    }
}

fn push(v: &mut Vec<u64>, ns: u64) {
    if v.len() < MAX_SAMPLES {
        v.push(ns);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn loopback_exchanges_are_stamped_and_small() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nodelay(true).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let echo = std::thread::spawn(move || {
            let mut b = [0u8; 64];
            for _ in 0..200 {
                s.read_exact(&mut b).unwrap();
                s.write_all(&b).unwrap();
            }
        });
        let mut st = Stamper::new(c.as_raw_fd()).unwrap();
        // Receive stamping is switched on through a static key from a kernel workqueue
        // (net_enable_timestamp): on a busy machine the first packets after enabling may come
        // unstamped.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut b = [7u8; 64];
        for _ in 0..200 {
            assert_eq!(st.send(&b).unwrap(), 64);
            let mut got = 0;
            while got < 64 {
                got += st.recv(&mut b[got..]).unwrap();
            }
            st.drain();
        }
        echo.join().unwrap();
        let h = st.summary();
        let sched = h.send_to_sched.expect("TX_SCHED stamps");
        let drv = h.sched_to_driver.expect("TX_SOFTWARE stamps");
        let rx = h.driver_to_recv.expect("RX_SOFTWARE stamps");
        assert!(sched.samples >= 150 && rx.samples >= 150, "{h:?}");
        // Loopback: microseconds, far below a millisecond at the median.
        assert!(sched.p50_ns < 1_000_000 && drv.p50_ns < 1_000_000, "{h:?}");
        assert!(rx.p50_ns < 5_000_000, "{h:?}");
    }
}
