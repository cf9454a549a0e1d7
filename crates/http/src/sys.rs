//! Thin safe wrappers over the Linux calls the event loop needs: the monotonic clock (from
//! latscope-sys), epoll, timerfd and sched_yield. Every `unsafe` block of the crate is here.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// CLOCK_MONOTONIC in nanoseconds: the engine's one time source (the same clock timerfd uses,
/// so absolute timer deadlines and measured times agree).
pub use latscope_sys::clock::monotonic_ns;

/// The calling thread's CPU time, ns (latscope-sys).
pub use latscope_sys::clock::thread_cpu_ns;

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// Readiness bits, as epoll reports them.
pub const READABLE: u32 = libc::EPOLLIN as u32;
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;
pub const HANGUP: u32 = (libc::EPOLLHUP | libc::EPOLLRDHUP | libc::EPOLLERR) as u32;

/// One readiness event: the `token` given at registration and the readiness bits.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub token: u64,
    pub bits: u32,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall without pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is valid for the call; the kernel copies it.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Register `fd` edge-triggered for input, output and hang-up: one registration per
    /// connection, no `epoll_ctl` per request.
    pub fn add_edge(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let bits = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        self.ctl(libc::EPOLL_CTL_ADD, fd, bits, token)
    }

    /// Register `fd` level-triggered for input (timers).
    pub fn add_level(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, token)
    }

    /// Wait up to `timeout_ms` and fill `out` with ready events (clears it first).
    pub fn wait(
        &self,
        buf: &mut [libc::epoll_event],
        out: &mut Vec<Event>,
        timeout_ms: i32,
    ) -> io::Result<()> {
        out.clear();
        // SAFETY: `buf` is a valid writable array of `buf.len()` epoll_event structs.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len() as i32,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for ev in &buf[..n as usize] {
            out.push(Event {
                token: ev.u64,
                bits: ev.events,
            });
        }
        Ok(())
    }
}

/// Give this thread's core to another runnable task, if there is one, without sleeping.
pub fn yield_core() {
    // SAFETY: sched_yield takes no arguments and cannot fail on Linux.
    unsafe { libc::sched_yield() };
}

/// Whether `ip` is one of this host's own addresses, so a server there shares this host's
/// cores: loopback, or an address a socket can be bound to (bind fails with EADDRNOTAVAIL for
/// any address no interface of this host has).
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// A CLOCK_MONOTONIC timerfd armed at absolute nanosecond deadlines (sub-millisecond pacing;
/// `epoll_wait`'s own timeout only has millisecond resolution).
#[derive(Debug)]
pub struct Timer {
    fd: OwnedFd,
}

impl Timer {
    pub fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall without pointers.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        Ok(Timer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Fire once at `deadline_ns` on CLOCK_MONOTONIC (a past deadline fires at once).
    pub fn arm_at(&self, deadline_ns: u64) -> io::Result<()> {
        let deadline_ns = deadline_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old value pointer may be null.
        let r = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Consume the expiration count so the level-triggered registration goes quiet.
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is 8 writable bytes, what a timerfd read needs; errors (EAGAIN when it
        // has not fired) are irrelevant.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }
}

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A [`Timer`] registered with the current tokio runtime (HTTP/2 open-loop pacing). Must be
/// called inside the runtime.
pub fn async_timer() -> io::Result<tokio::io::unix::AsyncFd<Timer>> {
    let timer = Timer::new()?;
    // SAFETY: the Timer owns its descriptor (an OwnedFd that is never replaced), and the AsyncFd
    // owns the Timer: the descriptor stays open and the same for the AsyncFd's whole life.
    unsafe { tokio::io::unix::AsyncFd::register(timer) }.map_err(io::Error::from)
}

/// A zeroed epoll event buffer for [`Epoll::wait`].
pub fn event_buffer(n: usize) -> Vec<libc::epoll_event> {
    vec![libc::epoll_event { events: 0, u64: 0 }; n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_are_this_hosts_own() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(
            is_local("127.3.2.1".parse().unwrap()),
            "all of 127/8 is loopback"
        );
        assert!(
            is_local("0.0.0.0".parse().unwrap()),
            "connecting to 0.0.0.0 reaches this host"
        );
        // TEST-NET-1 (RFC 5737) is never assigned to an interface.
        assert!(!is_local("192.0.2.1".parse().unwrap()));
        assert!(!is_local("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn timer_fires_at_absolute_deadline() {
        let ep = Epoll::new().unwrap();
        let t = Timer::new().unwrap();
        ep.add_level(t.raw(), 7).unwrap();
        let start = monotonic_ns();
        t.arm_at(start + 2_000_000).unwrap();
        let mut buf = event_buffer(4);
        let mut evs = vec![];
        while evs.is_empty() {
            ep.wait(&mut buf, &mut evs, 1000).unwrap();
        }
        let waited = monotonic_ns() - start;
        assert_eq!(evs[0].token, 7);
        // Not before the deadline; well within a second after it even on a loaded machine.
        assert!((2_000_000..1_000_000_000).contains(&waited), "{waited}");
        t.drain();
    }
}
