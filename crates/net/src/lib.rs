//! latscope's socket engines: the peer protocol ([`proto`]), the server ([`serve`]), a client's
//! test session with it ([`session`]), and the request/response ([`rr`]) and connection
//! ([`connect`]) measurements.
//!
//! `missing_docs` is warned: every public item (types, fields, variants, functions) says what
//! it is, in the units it uses.

#![warn(missing_docs)]

pub mod auth;
pub mod error;
pub mod proto;
pub mod serve;
pub mod session;
pub mod sock;

pub use error::NetError;
pub mod connect;
pub mod fair;
pub mod flow;
pub mod hoststack;
pub mod interval_clock;
pub mod pace;
pub mod rr;
pub mod stream;
pub mod udp_batch;
