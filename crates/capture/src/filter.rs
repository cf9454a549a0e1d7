//! The capture filter: the tcpdump expressions people actually type (`host`, `net`, `port`,
//! `src`/`dst`, `tcp`/`udp`/`icmp`/`ip`/`ip6`/`arp`, `and`/`or`/`not`, `&&`/`||`/`!`,
//! parentheses, and qualifier carry-over as in `port 80 or 443`), compiled to classic BPF.
//!
//! The program is attached in the kernel with `SO_ATTACH_FILTER`, so unwanted packets are never
//! copied into the ring, and its return value is the snap length, so the kernel also cuts
//! packets. The same program runs in user space through [`run`] when the kernel refuses it
//! (or for jump distances classic BPF cannot encode), so filtering is exact either way.
//!
//! Semantics follow pcap-filter(7): `port` matches TCP, UDP and SCTP on the first IPv4 fragment
//! or IPv6 without extension headers; `host`/`net` match source or destination unless `src`/
//! `dst` is given. Host names are not resolved (no DNS at capture time): give an address.

use std::net::IpAddr;

use thiserror::Error;

/// A filter expression that could not be understood.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid capture filter '{expr}': {why}")]
pub struct FilterError {
    /// The expression as given.
    pub expr: String,
    /// What is wrong with it.
    pub why: String,
}

/// How the link layer looks to the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterLink {
    /// 14-byte Ethernet header (also Linux loopback).
    Ethernet,
    /// Bare IPv4/IPv6 (SOCK_DGRAM sockets, tun devices).
    RawIp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Any,
    Src,
    Dst,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
    Icmp,
    Icmp6,
    Ip,
    Ip6,
    Arp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Host(IpAddr),
    Net(IpAddr, u8),
    Port(u16),
    PortRange(u16, u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Prim {
        proto: Option<Proto>,
        dir: Dir,
        kind: Option<Kind>,
    },
}

struct Parser<'a> {
    toks: Vec<&'a str>,
    pos: usize,
    expr: &'a str,
    /// Qualifiers of the last primitive, for `port 80 or 443`.
    last: Option<(Option<Proto>, Dir, &'static str)>,
}

fn tokenize(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'(' || c == b')' || (c == b'!' && b.get(i + 1) != Some(&b'=')) {
            out.push(&s[i..i + 1]);
            i += 1;
        } else if (c == b'&' || c == b'|') && b.get(i + 1) == Some(&c) {
            out.push(&s[i..i + 2]);
            i += 2;
        } else {
            let st = i;
            while i < b.len()
                && !b[i].is_ascii_whitespace()
                && !matches!(b[i], b'(' | b')' | b'!' | b'&' | b'|')
            {
                i += 1;
            }
            if st == i {
                out.push(&s[i..i + 1]);
                i += 1;
            } else {
                out.push(&s[st..i]);
            }
        }
    }
    out
}

fn service_port(s: &str) -> Option<u16> {
    Some(match s {
        "http" | "www" => 80,
        "https" => 443,
        "ssh" => 22,
        "domain" | "dns" => 53,
        "smtp" => 25,
        "ftp" => 21,
        "telnet" => 23,
        "ntp" => 123,
        _ => return s.parse().ok(),
    })
}

impl<'a> Parser<'a> {
    fn err(&self, why: impl Into<String>) -> FilterError {
        FilterError {
            expr: self.expr.to_string(),
            why: why.into(),
        }
    }
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.pos).copied()
    }
    fn next(&mut self) -> Option<&'a str> {
        let t = self.peek();
        self.pos += 1;
        t
    }
    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut l = self.and()?;
        while matches!(self.peek(), Some("or" | "||")) {
            self.pos += 1;
            let r = self.and()?;
            l = Expr::Or(Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut l = self.not()?;
        while matches!(self.peek(), Some("and" | "&&")) {
            self.pos += 1;
            let r = self.not()?;
            l = Expr::And(Box::new(l), Box::new(r));
        }
        Ok(l)
    }
    fn not(&mut self) -> Result<Expr, FilterError> {
        if matches!(self.peek(), Some("not" | "!")) {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.primary()
    }
    fn primary(&mut self) -> Result<Expr, FilterError> {
        match self.peek() {
            None => Err(self.err("expression ends too early")),
            Some("(") => {
                self.pos += 1;
                let e = self.or()?;
                if self.next() != Some(")") {
                    return Err(self.err("missing ')'"));
                }
                Ok(e)
            }
            Some(_) => self.prim(),
        }
    }
    fn value(&mut self, kind: &'static str) -> Result<Kind, FilterError> {
        let v = self
            .next()
            .ok_or_else(|| self.err(format!("'{kind}' needs a value")))?;
        match kind {
            "host" => v.parse::<IpAddr>().map(Kind::Host).map_err(|_| {
                self.err(format!(
                    "'{v}' is not an IP address (host names are not resolved; give an address)"
                ))
            }),
            "net" => {
                let (a, len) = v.split_once('/').unwrap_or((v, ""));
                let ip: IpAddr = a
                    .parse()
                    .map_err(|_| self.err(format!("'{a}' is not a network address")))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let len = if len.is_empty() {
                    max
                } else {
                    len.parse::<u8>()
                        .map_err(|_| self.err(format!("bad prefix length in '{v}'")))?
                };
                if len > max {
                    return Err(self.err(format!("prefix length {len} is too long for {ip}")));
                }
                Ok(Kind::Net(ip, len))
            }
            "port" => service_port(v)
                .map(Kind::Port)
                .ok_or_else(|| self.err(format!("'{v}' is not a port number"))),
            _ => {
                let (a, b) = v
                    .split_once('-')
                    .ok_or_else(|| self.err(format!("portrange needs A-B, got '{v}'")))?;
                match (service_port(a), service_port(b)) {
                    (Some(a), Some(b)) if a <= b => Ok(Kind::PortRange(a, b)),
                    _ => Err(self.err(format!("'{v}' is not a port range"))),
                }
            }
        }
    }
    fn prim(&mut self) -> Result<Expr, FilterError> {
        let mut proto = None;
        let mut dir = Dir::Any;
        let mut kind = None;
        let start = self.pos;
        if let Some(p) = self.peek().and_then(|t| match t {
            "tcp" => Some(Proto::Tcp),
            "udp" => Some(Proto::Udp),
            "icmp" => Some(Proto::Icmp),
            "icmp6" => Some(Proto::Icmp6),
            "ip" => Some(Proto::Ip),
            "ip6" => Some(Proto::Ip6),
            "arp" => Some(Proto::Arp),
            _ => None,
        }) {
            proto = Some(p);
            self.pos += 1;
        }
        match self.peek() {
            Some("src") => {
                dir = Dir::Src;
                self.pos += 1;
            }
            Some("dst") => {
                dir = Dir::Dst;
                self.pos += 1;
            }
            _ => {}
        }
        if let Some(k) = self.peek().and_then(|t| match t {
            "host" => Some("host"),
            "net" => Some("net"),
            "port" => Some("port"),
            "portrange" => Some("portrange"),
            _ => None,
        }) {
            self.pos += 1;
            kind = Some(self.value(k)?);
            self.last = Some((proto, dir, k));
        } else if dir != Dir::Any {
            // `src 10.0.0.1` means `src host 10.0.0.1`.
            kind = Some(self.value("host")?);
            self.last = Some((proto, dir, "host"));
        } else if proto.is_none() && self.pos == start {
            // A bare value: reuse the previous primitive's qualifiers (`port 80 or 443`).
            let Some((p, d, k)) = self.last else {
                return Err(self.err(format!("unexpected '{}'", self.peek().unwrap_or(""))));
            };
            proto = p;
            dir = d;
            kind = Some(self.value(k)?);
        }
        if proto.is_none() && kind.is_none() {
            return Err(self.err(format!("unexpected '{}'", self.peek().unwrap_or(""))));
        }
        if matches!(proto, Some(Proto::Arp | Proto::Icmp | Proto::Icmp6))
            && matches!(kind, Some(Kind::Port(_) | Kind::PortRange(..)))
        {
            return Err(self.err("ports only exist for tcp and udp"));
        }
        Ok(Expr::Prim { proto, dir, kind })
    }
}

// ---- classic BPF ----

/// One classic BPF instruction, with jump offsets wide enough for user-space execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u32,
    pub jf: u32,
    pub k: u32,
}

const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const ALU_AND_K: u16 = 0x54;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the ancillary load of the packet type.
const AD_PKTTYPE: u32 = 0xffff_f004;
/// `SKF_AD_OFF + SKF_AD_IFINDEX`: the ancillary load of the interface index.
const AD_IFINDEX: u32 = 0xffff_f008;

/// The host's own copies of packets: on the loopback device each packet is delivered twice
/// (sent and received); libpcap drops the sent copy, and so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outgoing {
    /// Keep everything (a real NIC: sent packets are seen once).
    Keep,
    /// Drop every outgoing packet (capturing on the loopback device).
    Drop,
    /// Drop outgoing packets of this interface index only (capturing on "any": loopback's).
    DropOn(u32),
}
/// `PACKET_OUTGOING`.
pub const PACKET_OUTGOING: u32 = 4;

#[derive(Debug, Clone, Copy)]
enum Load {
    Abs(u16, u32),
    /// Relative to the IPv4 header length (X loaded with `ldxb 4*([ip]&0xf)`).
    Ind(u32),
}

#[derive(Debug, Clone)]
enum Cond {
    True,
    False,
    Test {
        load: Load,
        mask: Option<u32>,
        op: u16,
        k: u32,
    },
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

fn and(a: Cond, b: Cond) -> Cond {
    Cond::And(Box::new(a), Box::new(b))
}
fn or(a: Cond, b: Cond) -> Cond {
    Cond::Or(Box::new(a), Box::new(b))
}
fn test(load: Load, k: u32) -> Cond {
    Cond::Test {
        load,
        mask: None,
        op: JEQ_K,
        k,
    }
}

struct Lower {
    link: FilterLink,
    /// Offset of the IP header.
    l3: u32,
}

impl Lower {
    fn is_v4(&self) -> Cond {
        match self.link {
            FilterLink::Ethernet => test(Load::Abs(LD_H_ABS, 12), 0x0800),
            FilterLink::RawIp => Cond::Test {
                load: Load::Abs(LD_B_ABS, 0),
                mask: Some(0xf0),
                op: JEQ_K,
                k: 0x40,
            },
        }
    }
    fn is_v6(&self) -> Cond {
        match self.link {
            FilterLink::Ethernet => test(Load::Abs(LD_H_ABS, 12), 0x86dd),
            FilterLink::RawIp => Cond::Test {
                load: Load::Abs(LD_B_ABS, 0),
                mask: Some(0xf0),
                op: JEQ_K,
                k: 0x60,
            },
        }
    }
    fn is_arp(&self) -> Cond {
        match self.link {
            FilterLink::Ethernet => test(Load::Abs(LD_H_ABS, 12), 0x0806),
            FilterLink::RawIp => Cond::False,
        }
    }
    fn v4_proto(&self, p: u32) -> Cond {
        and(self.is_v4(), test(Load::Abs(LD_B_ABS, self.l3 + 9), p))
    }
    fn v6_proto(&self, p: u32) -> Cond {
        and(self.is_v6(), test(Load::Abs(LD_B_ABS, self.l3 + 6), p))
    }
    fn proto(&self, p: Proto) -> Cond {
        match p {
            Proto::Tcp => or(self.v4_proto(6), self.v6_proto(6)),
            Proto::Udp => or(self.v4_proto(17), self.v6_proto(17)),
            Proto::Icmp => self.v4_proto(1),
            Proto::Icmp6 => self.v6_proto(58),
            Proto::Ip => self.is_v4(),
            Proto::Ip6 => self.is_v6(),
            Proto::Arp => self.is_arp(),
        }
    }
    fn addr_match(&self, ip: IpAddr, prefix: u8, dir: Dir) -> Cond {
        let side = |src: bool| -> Cond {
            match ip {
                IpAddr::V4(a) => {
                    let off = self.l3 + if src { 12 } else { 16 };
                    let mask = if prefix == 0 {
                        0
                    } else {
                        u32::MAX << (32 - u32::from(prefix))
                    };
                    let k = u32::from(a) & mask;
                    let c = Cond::Test {
                        load: Load::Abs(LD_W_ABS, off),
                        mask: (mask != u32::MAX).then_some(mask),
                        op: JEQ_K,
                        k,
                    };
                    and(self.is_v4(), c)
                }
                IpAddr::V6(a) => {
                    let base = self.l3 + if src { 8 } else { 24 };
                    let o = a.octets();
                    let mut c = self.is_v6();
                    for w in 0..4u32 {
                        let bits_before = w * 32;
                        let p = u32::from(prefix);
                        if p <= bits_before {
                            break;
                        }
                        let n = (p - bits_before).min(32);
                        let mask = if n == 32 {
                            u32::MAX
                        } else {
                            u32::MAX << (32 - n)
                        };
                        let i = (w * 4) as usize;
                        let k = u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]) & mask;
                        c = and(
                            c,
                            Cond::Test {
                                load: Load::Abs(LD_W_ABS, base + w * 4),
                                mask: (mask != u32::MAX).then_some(mask),
                                op: JEQ_K,
                                k,
                            },
                        );
                    }
                    c
                }
            }
        };
        match dir {
            Dir::Src => side(true),
            Dir::Dst => side(false),
            Dir::Any => or(side(true), side(false)),
        }
    }
    fn port_match(&self, lo: u16, hi: u16, dir: Dir, proto: Option<Proto>) -> Cond {
        let (lo, hi) = (u32::from(lo), u32::from(hi));
        let cmp = |load: Load| -> Cond {
            if lo == hi {
                test(load, lo)
            } else {
                and(
                    Cond::Test {
                        load,
                        mask: None,
                        op: JGE_K,
                        k: lo,
                    },
                    Cond::Not(Box::new(Cond::Test {
                        load,
                        mask: None,
                        op: JGT_K,
                        k: hi,
                    })),
                )
            }
        };
        let sides = |src: Load, dst: Load| match dir {
            Dir::Src => cmp(src),
            Dir::Dst => cmp(dst),
            Dir::Any => or(cmp(src), cmp(dst)),
        };
        let protos: Vec<u32> = match proto {
            Some(Proto::Tcp) => vec![6],
            Some(Proto::Udp) => vec![17],
            _ => vec![6, 17, 132],
        };
        let any_of = |f: &dyn Fn(u32) -> Cond| {
            let mut it = protos.iter();
            let first = it.next().map_or(Cond::False, |&p| f(p));
            it.fold(first, |acc, &p| or(acc, f(p)))
        };
        let v4 = and(
            and(
                self.is_v4(),
                any_of(&|p| test(Load::Abs(LD_B_ABS, self.l3 + 9), p)),
            ),
            and(
                Cond::Not(Box::new(Cond::Test {
                    load: Load::Abs(LD_H_ABS, self.l3 + 6),
                    mask: None,
                    op: JSET_K,
                    k: 0x1fff,
                })),
                sides(Load::Ind(0), Load::Ind(2)),
            ),
        );
        let v6 = and(
            and(
                self.is_v6(),
                any_of(&|p| test(Load::Abs(LD_B_ABS, self.l3 + 6), p)),
            ),
            sides(
                Load::Abs(LD_H_ABS, self.l3 + 40),
                Load::Abs(LD_H_ABS, self.l3 + 42),
            ),
        );
        if matches!(proto, Some(Proto::Ip)) {
            v4
        } else if matches!(proto, Some(Proto::Ip6)) {
            v6
        } else {
            or(v4, v6)
        }
    }
    fn lower(&self, e: &Expr) -> Cond {
        match e {
            Expr::And(a, b) => and(self.lower(a), self.lower(b)),
            Expr::Or(a, b) => or(self.lower(a), self.lower(b)),
            Expr::Not(a) => Cond::Not(Box::new(self.lower(a))),
            Expr::Prim { proto, dir, kind } => match kind {
                None => proto.map_or(Cond::True, |p| self.proto(p)),
                Some(Kind::Host(ip)) => {
                    let bits = if ip.is_ipv4() { 32 } else { 128 };
                    let c = self.addr_match(*ip, bits, *dir);
                    self.with_proto(c, *proto)
                }
                Some(Kind::Net(ip, len)) => {
                    let c = self.addr_match(*ip, *len, *dir);
                    self.with_proto(c, *proto)
                }
                Some(Kind::Port(p)) => self.port_match(*p, *p, *dir, *proto),
                Some(Kind::PortRange(a, b)) => self.port_match(*a, *b, *dir, *proto),
            },
        }
    }
    fn with_proto(&self, c: Cond, proto: Option<Proto>) -> Cond {
        match proto {
            None | Some(Proto::Ip | Proto::Ip6) => c,
            Some(p) => and(self.proto(p), c),
        }
    }
}

#[derive(Default)]
struct Gen {
    /// Offset of the IP header, for the indirect (IPv4 header length relative) loads.
    l3_hint: u32,
    code: Vec<(u16, Option<usize>, Option<usize>, u32)>,
    labels: Vec<Option<usize>>,
}

impl Gen {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn place(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }
    fn emit(&mut self, code: u16, k: u32) {
        self.code.push((code, None, None, k));
    }
    fn emit_cond(&mut self, c: &Cond, t: usize, f: usize) {
        match c {
            Cond::True => self.code.push((JA, Some(t), None, 0)),
            Cond::False => self.code.push((JA, Some(f), None, 0)),
            Cond::Test { load, mask, op, k } => {
                match *load {
                    Load::Abs(code, off) => self.emit(code, off),
                    Load::Ind(off) => {
                        // X = IPv4 header length; then the port at l3 + X + off.
                        self.emit(LDX_B_MSH, self.l3_hint);
                        self.emit(LD_H_IND, self.l3_hint + off);
                    }
                }
                if let Some(m) = mask {
                    self.emit(ALU_AND_K, *m);
                }
                self.code.push((*op, Some(t), Some(f), *k));
            }
            Cond::And(a, b) => {
                let m = self.label();
                self.emit_cond(a, m, f);
                self.place(m);
                self.emit_cond(b, t, f);
            }
            Cond::Or(a, b) => {
                let m = self.label();
                self.emit_cond(a, t, m);
                self.place(m);
                self.emit_cond(b, t, f);
            }
            Cond::Not(a) => self.emit_cond(a, f, t),
        }
    }
}

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct Program {
    pub insns: Vec<Insn>,
}

impl Program {
    /// Whether every jump fits classic BPF's 8-bit offsets (needed for the kernel).
    pub fn fits_kernel(&self) -> bool {
        self.insns.iter().all(|i| i.jt <= 255 && i.jf <= 255) && self.insns.len() <= 4096
    }
}

/// Compile `expr` (empty = everything) for `link`. Accepted packets are cut to `snaplen`.
/// `outgoing` rejects the host's own copies first, as libpcap does on loopback.
pub fn compile(
    expr: &str,
    link: FilterLink,
    snaplen: u32,
    outgoing: Outgoing,
) -> Result<Program, FilterError> {
    let toks = tokenize(expr);
    let cond = if toks.is_empty() {
        Cond::True
    } else {
        let mut p = Parser {
            toks,
            pos: 0,
            expr,
            last: None,
        };
        let e = p.or()?;
        if p.pos < p.toks.len() {
            return Err(p.err(format!("unexpected '{}'", p.toks[p.pos])));
        }
        let l3 = match link {
            FilterLink::Ethernet => 14,
            FilterLink::RawIp => 0,
        };
        Lower { link, l3 }.lower(&e)
    };
    let is_out = test(Load::Abs(LD_W_ABS, AD_PKTTYPE), PACKET_OUTGOING);
    let cond = match outgoing {
        Outgoing::Keep => cond,
        Outgoing::Drop => and(Cond::Not(Box::new(is_out)), cond),
        Outgoing::DropOn(ifindex) => and(
            Cond::Not(Box::new(and(
                is_out,
                test(Load::Abs(LD_W_ABS, AD_IFINDEX), ifindex),
            ))),
            cond,
        ),
    };
    let mut g = Gen {
        l3_hint: if link == FilterLink::Ethernet { 14 } else { 0 },
        ..Gen::default()
    };
    let acc = g.label();
    let rej = g.label();
    g.emit_cond(&cond, acc, rej);
    g.place(acc);
    g.emit(RET_K, snaplen.max(1));
    g.place(rej);
    g.emit(RET_K, 0);
    let mut insns = Vec::with_capacity(g.code.len());
    for (i, &(code, t, f, k)) in g.code.iter().enumerate() {
        let rel = |l: Option<usize>| -> u32 {
            l.and_then(|l| g.labels[l])
                .map_or(0, |target| (target - (i + 1)) as u32)
        };
        let (jt, jf, k) = if code == JA {
            (0, 0, rel(t))
        } else {
            (rel(t), rel(f), k)
        };
        insns.push(Insn { code, jt, jf, k });
    }
    Ok(Program { insns })
}

/// Run a program on a packet in user space, as the kernel would: the return value is the number
/// of bytes to keep (0 = drop). Out-of-range loads drop the packet.
pub fn run(p: &Program, pkt: &[u8], pkttype: u32, ifindex: u32) -> u32 {
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut pc = 0usize;
    let load = |off: u32, size: usize| -> Option<u32> {
        if off == AD_PKTTYPE {
            return Some(pkttype);
        }
        if off == AD_IFINDEX {
            return Some(ifindex);
        }
        let off = off as usize;
        let b = pkt.get(off..off.checked_add(size)?)?;
        Some(b.iter().fold(0u32, |acc, &v| (acc << 8) | u32::from(v)))
    };
    for _ in 0..p.insns.len() + 1 {
        let Some(i) = p.insns.get(pc) else { return 0 };
        pc += 1;
        match i.code {
            LD_W_ABS | LD_H_ABS | LD_B_ABS => {
                let size = match i.code {
                    LD_W_ABS => 4,
                    LD_H_ABS => 2,
                    _ => 1,
                };
                match load(i.k, size) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LD_H_IND => match load(x.wrapping_add(i.k), 2) {
                Some(v) => a = v,
                None => return 0,
            },
            LDX_B_MSH => match load(i.k, 1) {
                Some(v) => x = (v & 0xf) * 4,
                None => return 0,
            },
            ALU_AND_K => a &= i.k,
            JA => pc += i.k as usize,
            JEQ_K | JGT_K | JGE_K | JSET_K => {
                let hit = match i.code {
                    JEQ_K => a == i.k,
                    JGT_K => a > i.k,
                    JGE_K => a >= i.k,
                    _ => a & i.k != 0,
                };
                pc += if hit { i.jt } else { i.jf } as usize;
            }
            RET_K => return i.k,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn eth_v4(proto: u8, src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&[0u8; 16]);
        f
    }

    fn eth_v6(proto: u8, src: std::net::Ipv6Addr, sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, proto, 64]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        f.extend_from_slice(&[0u8; 16]);
        f
    }

    fn m(expr: &str, pkt: &[u8]) -> bool {
        let p = compile(expr, FilterLink::Ethernet, 65535, Outgoing::Keep).unwrap();
        assert!(p.fits_kernel());
        run(&p, pkt, 0, 1) != 0
    }

    #[test]
    fn primitives() {
        let tcp80 = eth_v4(6, [10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let udp53 = eth_v4(17, [192, 168, 1, 5], [8, 8, 8, 8], 5353, 53);
        assert!(m("", &tcp80));
        assert!(m("tcp", &tcp80) && !m("tcp", &udp53));
        assert!(m("udp", &udp53) && !m("udp", &tcp80));
        assert!(m("port 80", &tcp80) && !m("port 80", &udp53));
        assert!(m("tcp port http", &tcp80) && !m("udp port 80", &tcp80));
        assert!(m("dst port 80", &tcp80) && !m("src port 80", &tcp80));
        assert!(m("host 10.0.0.2", &tcp80) && !m("host 10.0.0.3", &tcp80));
        assert!(m("src host 10.0.0.1", &tcp80) && !m("dst host 10.0.0.1", &tcp80));
        assert!(m("src 10.0.0.1", &tcp80));
        assert!(m("net 10.0.0.0/8", &tcp80) && !m("net 10.0.0.0/8", &udp53));
        assert!(m("net 192.168.0.0/16 and udp", &udp53));
        assert!(m("port 53 or port 80", &tcp80) && m("port 53 or 80", &udp53));
        assert!(m("not port 53", &tcp80) && !m("! port 53", &udp53));
        assert!(m(
            "tcp and (port 80 or port 443) and not host 1.2.3.4",
            &tcp80
        ));
        assert!(m("tcp && port 80 || udp", &udp53));
        assert!(m("portrange 70-90", &tcp80) && !m("portrange 81-90", &tcp80));
        assert!(m("ip", &tcp80) && !m("ip6", &tcp80));
    }

    #[test]
    fn ipv6_and_fragments() {
        let v6 = eth_v6(6, "2001:db8::1".parse().unwrap(), 1234, 443);
        assert!(m("ip6 and tcp port 443", &v6));
        assert!(m("host 2001:db8::1", &v6) && !m("host 2001:db8::2", &v6));
        assert!(m("net 2001:db8::/32", &v6) && !m("net 2001:db9::/32", &v6));
        let mut frag = eth_v4(6, [10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        frag[20] = 0x00;
        frag[21] = 0x10; // fragment offset 16: no ports
        assert!(!m("port 80", &frag) && m("tcp", &frag));
    }

    #[test]
    fn snaplen_and_outgoing() {
        let tcp80 = eth_v4(6, [10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let p = compile("tcp", FilterLink::Ethernet, 96, Outgoing::Drop).unwrap();
        assert_eq!(run(&p, &tcp80, 0, 1), 96);
        assert_eq!(run(&p, &tcp80, PACKET_OUTGOING, 1), 0);
        // On "any": only loopback's (ifindex 1) outgoing copies are dropped.
        let any = compile("", FilterLink::RawIp, 100, Outgoing::DropOn(1)).unwrap();
        assert_eq!(run(&any, &tcp80[14..], PACKET_OUTGOING, 1), 0);
        assert_eq!(run(&any, &tcp80[14..], PACKET_OUTGOING, 2), 100);
        assert_eq!(run(&any, &tcp80[14..], 0, 1), 100);
        let raw = compile("tcp port 80", FilterLink::RawIp, 100, Outgoing::Keep).unwrap();
        assert_eq!(run(&raw, &tcp80[14..], 0, 1), 100);
        assert_eq!(run(&raw, &tcp80[..20], 0, 1), 0);
    }

    #[test]
    fn errors_are_clear() {
        for bad in [
            "host",
            "host example.com",
            "port x",
            "tcp and",
            "(tcp",
            "foo",
            "net 10.0.0.0/40",
            "icmp port 1",
        ] {
            let e = compile(bad, FilterLink::Ethernet, 100, Outgoing::Keep).unwrap_err();
            assert!(
                e.to_string().contains("invalid capture filter"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn truncated_packets_never_match_ports() {
        let tcp80 = eth_v4(6, [10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let p = compile("port 80", FilterLink::Ethernet, 100, Outgoing::Keep).unwrap();
        for n in 0..tcp80.len() {
            let _ = run(&p, &tcp80[..n], 0, 1);
        }
        assert_eq!(run(&p, &tcp80[..35], 0, 1), 0);
    }
}
