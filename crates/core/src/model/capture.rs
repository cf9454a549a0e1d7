//! The result model of `latscope capture`: what was written where, and what the kernel dropped.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::Meta;

/// The `latscope capture` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureReport {
    /// Who and when.
    pub meta: Meta,
    /// Interface captured on.
    pub interface: String,
    /// Output file ("-" for stdout).
    pub file: String,
    /// The filter expression ("" = everything).
    pub filter: String,
    /// "kernel (classic BPF, N instructions)" or "user space".
    pub filter_mode: String,
    /// Link type written to the file (pcap LINKTYPE_ number).
    pub link_type: u32,
    /// Bytes kept per packet.
    pub snaplen: u32,
    /// Packets written.
    pub packets: u64,
    /// Captured bytes written.
    pub bytes: u64,
    /// Packets the kernel's socket received (after the filter).
    pub kernel_received: u64,
    /// Packets the kernel dropped because the ring was full.
    pub kernel_drops: u64,
    /// Wall time.
    pub duration_ns: u64,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
}
