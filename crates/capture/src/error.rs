//! Why a live capture could not start or stopped early.

use std::io;

use thiserror::Error;

use crate::filter::FilterError;

/// What can go wrong while opening or running a live capture.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// The interface name cannot be passed to the kernel (it contains a NUL byte).
    #[error("interface name '{0}' contains a NUL byte")]
    BadInterfaceName(String),
    /// No interface has this name.
    #[error("no network interface named '{0}' (list them with `ip link`; 'any' captures on all)")]
    NoSuchInterface(String),
    /// The filter expression is not valid tcpdump syntax.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// Opening an AF_PACKET socket was refused: CAP_NET_RAW is missing.
    #[error(
        "live capture needs CAP_NET_RAW: run as root or `sudo setcap cap_net_raw+ep $(command -v latscope)`; \
`latscope analyze FILE` works without it"
    )]
    Privilege(#[source] io::Error),
    /// Setting up the socket or its ring failed.
    #[error("opening the capture socket")]
    Open(#[source] io::Error),
    /// Waiting for the ring failed.
    #[error("reading the capture ring")]
    Ring(#[source] io::Error),
    /// The consumer of the packets (e.g. the file writer) failed.
    #[error("writing captured packets")]
    Consumer(#[source] io::Error),
}

impl CaptureError {
    /// A failed socket set-up: a permission error means the capability is missing.
    pub(crate) fn open(e: io::Error) -> CaptureError {
        if e.kind() == io::ErrorKind::PermissionDenied {
            CaptureError::Privilege(e)
        } else {
            CaptureError::Open(e)
        }
    }
}
