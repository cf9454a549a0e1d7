//! What the test kinds' modules share with the control protocol, below both: the admitted
//! [`Test`] a kind's `run` receives and the [`Ended`] it returns, the refusal frame, and the
//! handshake's reader bounded by one deadline.

use std::io::{self, Read};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use latscope_core::model::rr::ServerBehaviour;

use super::{ServeEvent, Shared};
use crate::proto::{self, RefusalCode, Reply, Start, TestKind};
use crate::sock::Conn;

/// How a test ended: what it did (transactions, or bytes for stream tests) and why it stopped.
pub(super) struct Ended {
    pub(super) transactions: u64,
    pub(super) reason: String,
}

impl Ended {
    pub(super) fn new(transactions: u64, reason: impl Into<String>) -> Ended {
        Ended {
            transactions,
            reason: reason.into(),
        }
    }
}

/// An admitted test, handed to its kind's `run`. The kind calls [`Test::accept`] once it is
/// ready for the client (a stream test registers itself first).
pub(super) struct Test<'a> {
    pub(super) sh: &'a Arc<Shared>,
    pub(super) conn: &'a mut Conn,
    pub(super) start: &'a Start,
    pub(super) peer: &'a str,
    pub(super) peer_ip: Option<IpAddr>,
    /// The behaviour to apply (forced by the server, or the client's).
    pub(super) behaviour: ServerBehaviour,
    pub(super) id: u64,
    /// UDP and stream tests: the token that identifies the test's datagrams and connections.
    pub(super) token: u64,
    /// When the test must end at the latest.
    pub(super) deadline: Instant,
}

impl Test<'_> {
    /// Tell the client the test is accepted, and log its start. False: the client left.
    pub(super) fn accept(&mut self) -> bool {
        let uses_token = matches!(self.start.kind, TestKind::UdpRr | TestKind::Stream);
        let reply = Reply::Accepted {
            test_id: self.id,
            server: self.behaviour.clone(),
            udp_token: uses_token.then_some(self.token),
        };
        if proto::write_frame(self.conn, &reply).is_err() {
            return false;
        }
        (self.sh.log)(ServeEvent::TestStarted {
            id: self.id,
            peer: self.peer.to_string(),
            kind: self.start.kind,
            request_bytes: self.start.request_bytes,
            response_bytes: self.start.response_bytes,
            stream: self.start.stream.clone(),
        });
        true
    }
}

/// Send a refusal frame.
pub(super) fn refuse(conn: &mut Conn, code: RefusalCode, message: &str) -> io::Result<()> {
    proto::write_frame(
        conn,
        &Reply::Refused {
            code,
            message: message.into(),
            running_tests: None,
        },
    )
}

/// A connection's reads during the handshake, all bounded by one deadline: a client sending a
/// byte a second cannot stretch it (slowloris).
pub(super) struct Handshake<'a> {
    pub(super) conn: &'a mut Conn,
    pub(super) deadline: Instant,
}

impl Read for Handshake<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "handshake deadline passed",
            ));
        }
        self.conn.set_read_timeout(Some(left))?;
        self.conn.read(buf)
    }
}
