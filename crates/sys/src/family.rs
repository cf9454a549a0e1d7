//! The address-family preference of `-4` / `-6`.

use std::net::IpAddr;

/// Which address family to use when a name resolves to several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Family {
    /// Whatever the name resolves to first.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

impl Family {
    /// From the `-4` / `-6` flags (`-4` wins if both are given; clap forbids that anyway).
    pub fn from_flags(ipv4: bool, ipv6: bool) -> Family {
        if ipv4 {
            Family::V4
        } else if ipv6 {
            Family::V6
        } else {
            Family::Any
        }
    }

    /// Whether `ip` is of this family.
    pub fn accepts(self, ip: IpAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => ip.is_ipv4(),
            Family::V6 => ip.is_ipv6(),
        }
    }

    /// "IP", "IPv4" or "IPv6", for messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::Any => "IP",
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_filter() {
        assert_eq!(Family::from_flags(false, true), Family::V6);
        let v4: IpAddr = [127, 0, 0, 1].into();
        assert!(Family::V4.accepts(v4) && !Family::V6.accepts(v4) && Family::Any.accepts(v4));
        assert_eq!(Family::V6.name(), "IPv6");
    }
}
