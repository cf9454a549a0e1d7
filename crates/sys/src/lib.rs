//! latscope's one home for shared low-level code: thin, safe wrappers over libc that several
//! engines need, so that each fact lives in one place.
//!
//! - [`sockopt`]: `setsockopt`/`getsockopt` for ints, strings and plain-old-data values;
//! - [`clock`]: the clocks, each named after what it reads ([`clock::monotonic_ns`],
//!   [`clock::realtime_ns`]) — two functions once both called `now_ns` read different clocks;
//! - [`error`]: classification of `io::Error`s ([`error::is_transient`]);
//! - [`Family`]: the address-family preference of `-4` / `-6`; [`happy`]: every address of a
//!   name tried as RFC 8305 (Happy Eyeballs v2) does;
//! - [`mem`]: giving freed memory back to the kernel; [`net`]: the host's interfaces and
//!   allowed congestion controls; [`netns`]: code run inside another network namespace;
//!   [`snmp`]: a namespace's protocol counters (what `nstat` reads);
//! - [`msg`]: `recvmsg` and its control messages (kernel timestamps, TTL, extended errors from
//!   the error queue, GRO sizes), with the options that ask for them; [`poll`]: `ppoll`;
//! - [`tcpinfo`]: `struct tcp_info` parsed at whatever length the kernel returns; [`txstamp`]:
//!   the client host's own stack timed with SO_TIMESTAMPING on latscope's own sockets;
//! - [`fuzz_seeds`]: the committed fuzz seeds, for the parsing crates' seed-replay tests.
//!
//! `Family` lives here rather than in `latscope-core`: the result model never needs it (it
//! records addresses, not preferences); only the engines that resolve names do, and they all
//! depend on this crate.
//!
//! Every `unsafe` block of the crate carries a `// SAFETY:` comment; nothing here allocates on
//! a hot path.

#![warn(missing_docs)]

pub mod clock;
pub mod error;
pub mod family;
pub mod fuzz_seeds;
pub mod happy;
pub mod mem;
pub mod msg;
pub mod net;
pub mod netns;
pub mod poll;
pub mod snmp;
pub mod sockopt;
pub mod tcpinfo;
pub mod txstamp;

pub use family::Family;
