//! Two-ended diagnosis: the server's host observes its end of the client's connections while
//! the client's steps run, and answers with typed evidence. The exchange's types — the
//! `EvidenceRequest` a client sends and the `ServerEvidence` it gets back (`latscope schema
//! evidence`) — are plain data in `latscope_core::model::evidence`; [`server`]
//! answers requests (`latscope serve --evidence-ports`); the diagnose step that asks
//! (`--server-agent`) is `steps::server_agent`. The transport, authentication and rate limits are `latscope serve`'s
//! (`latscope_net::serve::evidence`), and so is the fuzzing of both ends' parsers
//! (`latscope_net::serve::fuzzing::evidence`).
//!
//! No clock synchronisation is assumed: the evidence is durations and counts over the
//! observation window; the one cross-host time (when the client said it was done) only
//! estimates the clocks' offset, and says so.

pub mod server;
