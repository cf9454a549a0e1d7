//! A test session with `latscope serve`: connect, greet (with the key's proof when the server
//! asks for one), ask for a test and read the server's answer — what `rr`, `connect --crr`,
//! `stream` and the host-stack timing share before they measure.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use latscope_core::model::rr::ServerBehaviour;

use crate::NetError;
use crate::auth::{AuthKey, AuthProof};
use crate::proto::{self, ClientHello, FrameError, Reply, ServerHello, Start};
use crate::sock::{Conn, Target, connect, set_nodelay};

/// Time a latscope server has to greet us.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Accepted test: the connection, the behaviour the server will apply, the UDP token.
pub struct Session {
    /// The control (and, for stream tests, data) connection.
    pub conn: Conn,
    /// The behaviour the server will apply.
    pub server: ServerBehaviour,
    /// UDP and stream tests: the test's token.
    pub udp_token: Option<u64>,
    /// The server's greeting.
    pub hello: ServerHello,
}

/// Connect, greet and ask for a test. `first_message` (a request) may be pipelined behind the
/// test request so that a connect-request-response transaction costs one round trip.
pub fn open_session(
    target: &Target,
    addr: Option<SocketAddr>,
    connect_timeout: Duration,
    auth: Option<&AuthKey>,
    start: &Start,
    first_message: &[u8],
) -> Result<Session, NetError> {
    let conn = connect(target, addr, connect_timeout)?;
    handshake(conn, target, auth, start, first_message)
}

/// Greet and ask for a test on an already connected socket. With a key, the client waits for
/// the server's greeting (its challenge) before sending its own; without, greeting, request and
/// `first_message` go out at once.
pub fn handshake(
    mut conn: Conn,
    target: &Target,
    auth: Option<&AuthKey>,
    start: &Start,
    first_message: &[u8],
) -> Result<Session, NetError> {
    let name = target.to_string();
    let io_err = |e: io::Error| NetError::io(format!("talking to {name}"), e);
    conn.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(io_err)?;
    if conn.is_tcp() {
        set_nodelay(conn.as_raw_fd(), true).map_err(io_err)?;
    }
    let greet = |auth: Option<AuthProof>, out: &mut Vec<u8>| {
        let hello = ClientHello {
            software: format!("latscope {}", env!("CARGO_PKG_VERSION")),
            auth,
        };
        proto::encode_greeting(&hello, out);
        proto::encode_frame(start, out);
        out.extend_from_slice(first_message);
    };
    let mut out = Vec::with_capacity(256 + first_message.len());
    let server: ServerHello = if let Some(key) = auth {
        let server: ServerHello =
            proto::read_greeting(&mut conn).map_err(|e| greeting_error(&name, e, None))?;
        let proof = match &server.challenge {
            Some(c) => Some(key.prove(c)?),
            None => None,
        };
        greet(proof, &mut out);
        conn.write_all(&out).map_err(io_err)?;
        server
    } else {
        greet(None, &mut out);
        // A peer that is not latscope may close or reset as soon as it sees our greeting: read
        // its answer before deciding what went wrong.
        let write_res = conn.write_all(&out);
        match proto::read_greeting(&mut conn) {
            Ok(h) => h,
            Err(e) => return Err(greeting_error(&name, e, write_res.err())),
        }
    };
    let reply: Reply = proto::read_frame(&mut conn).map_err(|e| match e {
        FrameError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            NetError::Protocol(format!("{name} closed the connection during the handshake"))
        }
        e => NetError::Protocol(format!("{name}: {e}")),
    })?;
    match reply {
        Reply::Accepted {
            server: behaviour,
            udp_token,
            ..
        } => Ok(Session {
            conn,
            server: behaviour,
            udp_token,
            hello: server,
        }),
        Reply::Refused { code, message, .. } => Err(NetError::ServerRefused { code, message }),
    }
}

fn greeting_error(name: &str, e: FrameError, write_err: Option<io::Error>) -> NetError {
    match e {
        FrameError::NotLatscope(bytes) => NetError::WrongProtocol {
            target: name.into(),
            detail: format!("it answered {}", proto::printable(&bytes)),
        },
        FrameError::Version(v) => NetError::WrongProtocol {
            target: name.into(),
            detail: format!(
                "it speaks latscope protocol version {v}, this latscope speaks {}; use matching versions",
                proto::VERSION
            ),
        },
        FrameError::Io(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            NetError::WrongProtocol {
                target: name.into(),
                detail: format!(
                    "no latscope greeting within {}",
                    latscope_core::units::format_duration(HANDSHAKE_TIMEOUT)
                ),
            }
        }
        FrameError::Io(e) => NetError::WrongProtocol {
            target: name.into(),
            detail: format!(
                "it closed the connection without a latscope greeting ({})",
                write_err.unwrap_or(e)
            ),
        },
        other => NetError::WrongProtocol {
            target: name.into(),
            detail: other.to_string(),
        },
    }
}
