//! Sequence-number arithmetic modulo 2^32 (RFC 793 §3.3, RFC 1982 serial numbers): `a` before
//! `b` when the signed distance from `b` to `a` is negative. TCP timestamps (RFC 7323 §5.2)
//! compare the same way.

/// `a` comes before `b`.
#[inline]
pub(super) fn lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes after `b`.
#[inline]
pub(super) fn gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `a` is `b` or comes before it.
#[inline]
pub(super) fn le(a: u32, b: u32) -> bool {
    !gt(a, b)
}
