//! latscope's measurement core. Nothing in this crate performs I/O: engines elsewhere measure,
//! this crate holds what they measured (histograms, summaries), the result model every command
//! returns, and the renderings of that model (human tables, JSON).
//!
//! Data flows one way: engine → histogram → [`summary::Summary`] → report struct in [`model`] →
//! [`render`].
#![warn(missing_docs)]

pub mod bins;
pub mod hist;
pub mod log2;
pub mod model;
mod named;
pub mod registry;
pub mod render;
pub mod summary;
pub mod sweep;
pub mod timer;
pub mod units;

/// The first bytes of every latscope peer-protocol connection (`latscope_net::proto`'s
/// greeting), which a capture analysis recognises as latscope's own set-up, not traffic.
pub const PEER_MAGIC: &[u8; 8] = b"LATSCOPE";

pub use bins::LogBins;
pub use hist::LatencyHistogram;
pub use log2::Log2Histogram;
pub use summary::Summary;
