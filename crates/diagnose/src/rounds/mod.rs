//! What the round-trip step measured of a URL ([`probe`]) and how a transfer's rounds are told
//! apart ([`flights`]): the evidence the round-trip rules read and the round-trip accounts
//! ([`crate::accounts`]) count.

pub mod flights;
pub mod probe;
