//! Waiting for descriptors: `ppoll` with nanosecond timeouts, so microsecond probe intervals
//! and connect deadlines are kept exactly (poll's milliseconds would round them).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// `ppoll` over `fds` until `timeout`; `Ok(false)` when a signal interrupted the wait. The
/// number of ready descriptors is in their `revents`.
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<bool> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: fds is a live slice of pollfd of the given length; ts is valid.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(true)
}

/// Wait until one of `fds` (at most 4) is readable or has a queued error, at most `timeout`.
/// Nothing is allocated: this is on every probe's path.
pub fn readable(fds: &[RawFd], timeout: Duration) -> io::Result<()> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 4];
    if fds.len() > p.len() {
        return Err(io::Error::other(
            "poll::readable takes at most 4 descriptors",
        ));
    }
    for (slot, &fd) in p.iter_mut().zip(fds) {
        slot.fd = fd;
    }
    ppoll(&mut p[..fds.len()], timeout)?;
    Ok(())
}

/// Wait until one of `fds` is writable (a non-blocking connect ended), at most `timeout`: the
/// `revents` of each descriptor, all 0 on a timeout or an interruption.
pub fn writable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<i16>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        })
        .collect();
    if !ppoll(&mut p, timeout)? {
        return Ok(vec![0; fds.len()]);
    }
    Ok(p.iter().map(|x| x.revents).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Instant;

    #[test]
    fn waits_end_at_data_or_the_timeout() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = Instant::now();
        readable(&[a.as_raw_fd()], Duration::from_millis(30)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(30));
        a.send_to(b"x", a.local_addr().unwrap()).unwrap();
        let t = Instant::now();
        readable(&[a.as_raw_fd()], Duration::from_secs(5)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(readable(&[0; 5], Duration::ZERO).is_err());
        let w = writable(&[a.as_raw_fd()], Duration::from_secs(5)).unwrap();
        assert_eq!(w, vec![libc::POLLOUT]);
    }
}
