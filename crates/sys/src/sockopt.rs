//! `setsockopt` / `getsockopt` for the value shapes latscope uses: ints, strings
//! (TCP_CONGESTION) and plain-old-data structs (tcp_info, packet rings). Each takes a raw
//! descriptor: an invalid one yields EBADF, never undefined behaviour.

use std::io;
use std::os::fd::RawFd;

fn cvt(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt` with an `int` value.
pub fn set_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set_raw(fd, level, name, &value)
}

/// TCP_NODELAY on (`true`: Nagle's algorithm off) or off.
pub fn set_nodelay(fd: RawFd, on: bool) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, i32::from(on))
}

/// `getsockopt` for an `int` option.
pub fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    get_raw(fd, level, name, &mut value)?;
    Ok(value)
}

/// `setsockopt` with the bytes of a string (e.g. TCP_CONGESTION's algorithm name).
pub fn set_bytes(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &[u8]) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`'s bytes, valid for the call; the kernel
    // copies them.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    })
}

/// `getsockopt` into `buf`; returns how many bytes the kernel wrote.
pub fn get_bytes(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is valid for writes of `len` bytes and `len` for one socklen_t; the kernel
    // writes at most `len` bytes and updates `len`.
    cvt(unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &mut len) })?;
    Ok((len as usize).min(buf.len()))
}

/// `setsockopt` with any plain-old-data value (`T` must be the C struct the option expects).
pub fn set_raw<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: the pointer and length describe a live `T`; the kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
}

/// `getsockopt` into a plain-old-data value (`T` must be a C struct for which every bit
/// pattern is valid, e.g. `libc::tcp_info`); returns how many bytes the kernel filled (older
/// kernels fill a prefix of newer structs).
pub fn get_raw<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is valid for writes of size_of::<T>() bytes, and the caller's `T` is
    // plain data for which any bytes are valid; the kernel writes at most `len` bytes.
    cvt(unsafe { libc::getsockopt(fd, level, name, (value as *mut T).cast(), &mut len) })?;
    Ok(len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn int_and_string_options_roundtrip() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let s = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let fd = s.as_raw_fd();
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).expect("set");
        assert_eq!(
            get_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).ok(),
            Some(1)
        );
        let mut cc = [0u8; 16];
        let n = get_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut cc).expect("cc");
        assert!(n > 0 && cc[0].is_ascii_alphabetic());
        let mut info: libc::tcp_info = unsafe_zeroed();
        assert!(get_raw(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info).expect("info") > 0);
        assert!(set_int(-1, libc::SOL_SOCKET, libc::SO_SNDBUF, 1).is_err());
    }

    fn unsafe_zeroed() -> libc::tcp_info {
        // SAFETY: tcp_info is plain integers; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
}
