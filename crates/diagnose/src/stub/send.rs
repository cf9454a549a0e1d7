//! One name's queries sent as glibc's `__res_context_send` sends them (resolv/res_send.c):
//! `attempts` times round the nameservers (from a rotating start under `rotate`), each waited
//! for its share of `timeout`; A and AAAA at once from one UDP socket, or one after the other
//! (`single-request`), the second from a new socket (`single-request-reopen`); over TCP under
//! `use-vc` or after a truncated answer. When one answer of the pair is in and the other never
//! comes, glibc asks again one at a time, then again from new sockets, each round a full wait,
//! and keeps that mode for the thread's later lookups (`send_dg`): that is how a resolver that
//! drops AAAA queries costs three timeouts on a process's first lookup and one on each after.
//!
//! Every query is recorded with what came back and when. Waits are glibc's, capped (`cap`) so
//! that a broken resolver cannot hold the run: the record keeps both.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latscope_core::model::names::{Answer, Query, QueryType, ResolvConf, SendMode};

use super::message::{self, Asked, Verdict};

/// The longest one read blocks before the stop flag is looked at again.
const POLL: Duration = Duration::from_millis(50);

/// What one name's queries gave (`__res_context_send`'s result).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// A nameserver's replies, by query; `None` for one glibc went on without.
    Replies(Vec<Option<Answer>>),
    /// No nameserver gave a usable reply in time (ETIMEDOUT); `last` is the last rejected
    /// reply seen (a SERVFAIL leaves glibc searching on).
    TimedOut { last: Option<Answer> },
    /// No nameserver could be reached (ECONNREFUSED): the lookup ends.
    Unreachable,
    /// The step was told to stop, or its time ran out.
    Stopped,
}

/// How one nameserver's round ended (`send_dg`'s and `send_vc`'s results).
enum Round {
    Done(Vec<Option<Answer>>),
    /// Nothing usable: the next nameserver. `reached`: something answered (`gotsomewhere`).
    Next {
        reached: bool,
    },
    Tcp,
    Stopped,
}

/// The sender: glibc's per-thread resolver state for a walk (the mode it fell back to), the
/// queries sent, and the time glibc would have spent.
pub struct Sender<'a> {
    conf: &'a ResolvConf,
    stop: &'a AtomicBool,
    deadline: Instant,
    cap: Duration,
    t0: Instant,
    /// The mode glibc is in: the options', or the fallback it switched to.
    mode: SendMode,
    /// The `rotate` offset, advanced per name.
    offset: usize,
    pub queries: Vec<Query>,
    /// What glibc would have waited: measured answer times, full timeouts, ns.
    pub glibc_ns: u64,
    /// Of it, the rounds that ended by switching to a fallback mode (not paid again later).
    pub fallback_ns: u64,
    /// Of it, the timeouts.
    pub timeouts_ns: u64,
    /// The longest this run waited in one round.
    pub longest_wait: Duration,
}

impl<'a> Sender<'a> {
    pub fn new(
        conf: &'a ResolvConf,
        stop: &'a AtomicBool,
        deadline: Instant,
        cap: Duration,
    ) -> Sender<'a> {
        let mode = if conf.single_request_reopen {
            SendMode::SequentialReopen
        } else if conf.single_request {
            SendMode::Sequential
        } else {
            SendMode::Parallel
        };
        Sender {
            conf,
            stop,
            deadline,
            cap,
            t0: Instant::now(),
            mode,
            offset: 0,
            queries: Vec::new(),
            glibc_ns: 0,
            fallback_ns: 0,
            timeouts_ns: 0,
            longest_wait: Duration::ZERO,
        }
    }

    /// Ask for `name`'s `types` (`__res_context_send`).
    pub fn send(&mut self, name: &str, types: &[QueryType]) -> Result<Sent, String> {
        let asked: Vec<Asked> = types
            .iter()
            .map(|&t| message::query(rand::random(), name, t, self.conf.edns0))
            .collect::<Result<_, _>>()?;
        let n = self.conf.nameservers.len();
        let offset = self.offset;
        if self.conf.rotate {
            self.offset = (self.offset + 1) % n.max(1);
        }
        let mut tcp = self.conf.use_vc;
        let first_query = self.queries.len();
        let (mut reached, mut last) = (false, None);
        let mut attempt = 0;
        while attempt < self.conf.attempts {
            let this = attempt + 1;
            for shift in 0..n {
                let ns = (shift + offset) % n;
                // Over TCP, one attempt per nameserver (res_send.c: `try = statp->retry`).
                let round = if tcp {
                    attempt = self.conf.attempts;
                    self.send_vc(ns, this, &asked)
                } else {
                    match self.send_dg(ns, this, &asked) {
                        Round::Tcp => {
                            tcp = true;
                            attempt = self.conf.attempts;
                            self.send_vc(ns, this, &asked)
                        }
                        r => r,
                    }
                };
                match round {
                    Round::Done(got) => return Ok(Sent::Replies(got)),
                    Round::Next { reached: r } => reached |= r,
                    Round::Tcp => {}
                    Round::Stopped => return Ok(Sent::Stopped),
                }
                if let Some(q) = self.queries[first_query..]
                    .iter()
                    .rev()
                    .find(|q| q.answer.answered())
                {
                    last = Some(q.answer);
                }
            }
            attempt += 1;
        }
        Ok(if reached {
            Sent::TimedOut { last }
        } else {
            Sent::Unreachable
        })
    }

    /// glibc's wait for nameserver `ns` this round, and the wait this run gives it.
    fn waits(&self, ns: usize) -> (Duration, Duration) {
        let glibc = self.conf.server_wait(ns);
        (glibc, glibc.min(self.cap).min(self.left()))
    }

    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether a wait of `wait` was cut by the run (its deadline or its stop flag) rather
    /// than by glibc's timeout or the cap.
    fn cut(&self, glibc: Duration, wait: Duration, spent: Duration) -> bool {
        self.stop.load(Ordering::Relaxed)
            || (wait < glibc.min(self.cap) && spent >= wait && self.left().is_zero())
    }

    fn record(
        &mut self,
        a: &Asked,
        server: SocketAddr,
        attempt: u32,
        mode: SendMode,
        glibc: Duration,
    ) -> usize {
        self.queries.push(Query {
            name: a.name.clone(),
            qtype: a.qtype,
            server,
            attempt,
            mode,
            sent_ns: self.t0.elapsed().as_nanos() as u64,
            answer: Answer::NoAnswer,
            took_ns: 0,
            glibc_wait_ns: glibc.as_nanos() as u64,
        });
        self.queries.len() - 1
    }

    /// One nameserver over UDP (`send_dg`), with glibc's fallbacks when half the pair is lost.
    fn send_dg(&mut self, ns: usize, attempt: u32, asked: &[Asked]) -> Round {
        let server = self.conf.nameservers[ns];
        loop {
            let mode = self.mode;
            let (glibc, wait) = self.waits(ns);
            let started = Instant::now();
            let out = self.dg_round(server, attempt, asked, mode, glibc, wait);
            let spent = started.elapsed();
            self.longest_wait = self.longest_wait.max(spent);
            match out {
                DgEnd::Over(r) => {
                    self.glibc_ns += spent.as_nanos() as u64;
                    return r;
                }
                DgEnd::TimedOut { first_good } => {
                    if self.cut(glibc, wait, spent) {
                        return Round::Stopped;
                    }
                    let g = glibc.as_nanos() as u64;
                    self.glibc_ns += g;
                    self.timeouts_ns += g;
                    let Some((i, good)) = first_good.filter(|_| asked.len() == 2) else {
                        return Round::Next { reached: true };
                    };
                    match mode {
                        SendMode::Parallel => self.mode = SendMode::Sequential,
                        SendMode::Sequential => self.mode = SendMode::SequentialReopen,
                        _ => {
                            let mut got = vec![None; asked.len()];
                            got[i] = Some(good);
                            return Round::Done(got);
                        }
                    }
                    self.fallback_ns += g;
                }
            }
        }
    }

    /// One round to one nameserver in one mode, waited for `wait` in all.
    fn dg_round(
        &mut self,
        server: SocketAddr,
        attempt: u32,
        asked: &[Asked],
        mode: SendMode,
        glibc: Duration,
        wait: Duration,
    ) -> DgEnd {
        let finish = Instant::now() + wait;
        let Some(mut sock) = udp_to(server) else {
            return DgEnd::Over(Round::Next { reached: false });
        };
        let mut pending: Vec<(usize, usize)> = Vec::new(); // (asked index, query record)
        let mut got: Vec<Option<Answer>> = vec![None; asked.len()];
        let mut arrived = 0;
        let mut first_good: Option<(usize, Answer)> = None;
        let sequential = mode != SendMode::Parallel;
        // After a rejected first reply glibc waits for a reply only: in single-request mode the
        // second query is then never sent (send_dg's SERVFAIL branch jumps back to the wait).
        let mut hold = false;
        let mut next = 0;
        loop {
            while next < asked.len() && !hold && (!sequential || pending.is_empty()) {
                if sequential && next > 0 && mode == SendMode::SequentialReopen {
                    match udp_to(server) {
                        Some(s) => sock = s,
                        None => return DgEnd::Over(Round::Next { reached: true }),
                    }
                }
                let a = &asked[next];
                let rec = self.record(a, server, attempt, mode, glibc);
                if sock.send(&a.bytes).is_err() {
                    for r in pending.iter().map(|&(_, r)| r).chain([rec]) {
                        self.queries[r].answer = Answer::Unreachable;
                    }
                    return DgEnd::Over(Round::Next {
                        reached: arrived > 0,
                    });
                }
                pending.push((next, rec));
                next += 1;
            }
            let Some(bytes) = self.recv_until(&sock, finish, &pending) else {
                return DgEnd::TimedOut { first_good };
            };
            let Ok(bytes) = bytes else {
                return DgEnd::Over(Round::Next {
                    reached: arrived > 0,
                });
            };
            let waiting: Vec<&Asked> = pending.iter().map(|&(i, _)| &asked[i]).collect();
            let Some((w, verdict)) = message::reply(&bytes, &waiting) else {
                continue;
            };
            let (i, rec) = pending.remove(w);
            arrived += 1;
            let q = &mut self.queries[rec];
            q.took_ns = (self.t0.elapsed().as_nanos() as u64).saturating_sub(q.sent_ns);
            match verdict {
                Verdict::Truncated => {
                    q.answer = Answer::Truncated;
                    return DgEnd::Over(Round::Tcp);
                }
                Verdict::Reject(ans) => {
                    q.answer = ans;
                    // After a good reply glibc goes on with that one alone; after nothing or
                    // another rejection, with the next nameserver.
                    if first_good.is_some() {
                        return DgEnd::Over(Round::Done(got));
                    }
                    if arrived == asked.len() {
                        return DgEnd::Over(Round::Next { reached: true });
                    }
                    hold = sequential;
                }
                Verdict::Use(ans) => {
                    q.answer = ans;
                    if arrived == 1 {
                        first_good = Some((i, ans));
                    }
                    got[i] = Some(ans);
                    if arrived == asked.len() {
                        return DgEnd::Over(Round::Done(got));
                    }
                }
            }
        }
    }

    /// The next datagram before `finish`: `None` at the deadline (the pending queries are
    /// left unanswered with the time waited), `Some(Err)` when the nameserver's host refused
    /// it (ICMP port unreachable: nothing listens there).
    fn recv_until(
        &mut self,
        sock: &UdpSocket,
        finish: Instant,
        pending: &[(usize, usize)],
    ) -> Option<Result<Vec<u8>, ()>> {
        let mut buf = vec![0u8; 65536];
        loop {
            let now = Instant::now();
            if now >= finish || self.stop.load(Ordering::Relaxed) {
                let at = self.t0.elapsed().as_nanos() as u64;
                for &(_, rec) in pending {
                    let q = &mut self.queries[rec];
                    q.took_ns = at.saturating_sub(q.sent_ns);
                }
                return None;
            }
            let _ =
                sock.set_read_timeout(Some((finish - now).min(POLL).max(Duration::from_millis(1))));
            match sock.recv(&mut buf) {
                Ok(n) => return Some(Ok(buf[..n].to_vec())),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => {
                    let at = self.t0.elapsed().as_nanos() as u64;
                    for &(_, rec) in pending {
                        let q = &mut self.queries[rec];
                        q.answer = Answer::Unreachable;
                        q.took_ns = at.saturating_sub(q.sent_ns);
                    }
                    return Some(Err(()));
                }
            }
        }
    }

    /// One nameserver over TCP (`send_vc`): both queries on one connection, one after the
    /// other, the replies read as they come.
    fn send_vc(&mut self, ns: usize, attempt: u32, asked: &[Asked]) -> Round {
        let server = self.conf.nameservers[ns];
        let (glibc, wait) = self.waits(ns);
        let started = Instant::now();
        let finish = started + wait;
        let recs: Vec<usize> = asked
            .iter()
            .map(|a| self.record(a, server, attempt, SendMode::Tcp, glibc))
            .collect();
        let out = self.vc_exchange(server, asked, &recs, finish);
        let spent = started.elapsed();
        self.longest_wait = self.longest_wait.max(spent);
        let at = self.t0.elapsed().as_nanos() as u64;
        for &rec in &recs {
            let q = &mut self.queries[rec];
            if q.answer == Answer::NoAnswer || q.answer == Answer::Unreachable {
                q.took_ns = at.saturating_sub(q.sent_ns);
            }
        }
        match &out {
            Round::Next { reached: true } => {
                let g = glibc.as_nanos() as u64;
                self.glibc_ns += g;
                self.timeouts_ns += g;
            }
            _ => self.glibc_ns += spent.as_nanos() as u64,
        }
        if matches!(out, Round::Next { reached: true }) && self.cut(glibc, wait, spent) {
            return Round::Stopped;
        }
        out
    }

    fn vc_exchange(
        &mut self,
        server: SocketAddr,
        asked: &[Asked],
        recs: &[usize],
        finish: Instant,
    ) -> Round {
        let left = finish
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let mut s = match TcpStream::connect_timeout(&server, left) {
            Ok(s) => s,
            Err(e) => {
                let refused = e.kind() == ErrorKind::ConnectionRefused;
                for &r in recs {
                    self.queries[r].answer = if refused {
                        Answer::Unreachable
                    } else {
                        Answer::NoAnswer
                    };
                }
                return Round::Next { reached: !refused };
            }
        };
        let mut out = Vec::new();
        for a in asked {
            out.extend_from_slice(&(a.bytes.len() as u16).to_be_bytes());
            out.extend_from_slice(&a.bytes);
        }
        if s.write_all(&out).is_err() {
            return Round::Next { reached: true };
        }
        let mut got: Vec<Option<Answer>> = vec![None; asked.len()];
        while got.iter().any(Option::is_none) {
            let Some(msg) = self.read_framed(&mut s, finish) else {
                return Round::Next {
                    reached: got.iter().any(Option::is_some),
                };
            };
            let waiting: Vec<&Asked> = asked.iter().collect();
            let Some((i, verdict)) = message::reply(&msg, &waiting) else {
                continue;
            };
            let ans = match verdict {
                Verdict::Use(a) | Verdict::Reject(a) => a,
                Verdict::Truncated => Answer::Truncated,
            };
            let q = &mut self.queries[recs[i]];
            q.answer = ans;
            q.took_ns = (self.t0.elapsed().as_nanos() as u64).saturating_sub(q.sent_ns);
            got[i] = Some(ans);
        }
        Round::Done(got)
    }

    /// One length-prefixed message from a TCP stream before `finish`.
    fn read_framed(&self, s: &mut TcpStream, finish: Instant) -> Option<Vec<u8>> {
        let mut len = [0u8; 2];
        self.read_exact_until(s, &mut len, finish)?;
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        self.read_exact_until(s, &mut msg, finish)?;
        Some(msg)
    }

    fn read_exact_until(&self, s: &mut TcpStream, buf: &mut [u8], finish: Instant) -> Option<()> {
        let mut at = 0;
        while at < buf.len() {
            let now = Instant::now();
            if now >= finish || self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let _ =
                s.set_read_timeout(Some((finish - now).min(POLL).max(Duration::from_millis(1))));
            match s.read(&mut buf[at..]) {
                Ok(0) => return None,
                Ok(n) => at += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => return None,
            }
        }
        Some(())
    }
}

/// How a UDP round ended.
enum DgEnd {
    Over(Round),
    /// The wait ran out; the first reply, when it was one glibc uses, lets glibc fall back.
    TimedOut {
        first_good: Option<(usize, Answer)>,
    },
}

/// A UDP socket connected to `server` (a connected socket hears ICMP port unreachable).
fn udp_to(server: SocketAddr) -> Option<UdpSocket> {
    let local: SocketAddr = if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let s = UdpSocket::bind(local).ok()?;
    s.connect(server).ok()?;
    Some(s)
}
