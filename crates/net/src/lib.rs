//! latscope's socket engines: the peer protocol ([`proto`]), the server ([`serve`]), and the
//! request/response ([`rr`]) and connection ([`connect`]) measurements.

pub mod error;

pub use error::NetError;
