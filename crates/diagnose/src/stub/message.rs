//! The DNS messages of the name queries: a query as glibc's `res_nmkquery` builds it (one
//! question, recursion desired, an EDNS(0) record under `options edns0`), and a reply read the
//! way glibc's `send_dg` judges it. Encoding and decoding are hickory-proto's.

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query as Question, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use latscope_core::model::names::{Answer, QueryType};

/// glibc's EDNS(0) buffer size (`RESOLV_EDNS_BUFFER_SIZE`).
const EDNS_PAYLOAD: u16 = 1200;

/// A query on the wire, and what a reply must repeat.
#[derive(Clone, Debug)]
pub struct Asked {
    pub id: u16,
    pub qtype: QueryType,
    pub name: String,
    pub bytes: Vec<u8>,
}

fn record_type(t: QueryType) -> RecordType {
    match t {
        QueryType::A => RecordType::A,
        QueryType::Aaaa => RecordType::AAAA,
    }
}

/// The query for `name` (absolute, without the root's dot) of type `qtype`, or why the name
/// cannot be asked (a label over 63 bytes, a name over 255).
pub fn query(id: u16, name: &str, qtype: QueryType, edns0: bool) -> Result<Asked, String> {
    let fqdn = Name::from_ascii(format!("{}.", name.trim_end_matches('.')))
        .map_err(|e| format!("'{name}' is not a DNS name: {e}"))?;
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    m.add_query(Question::query(fqdn, record_type(qtype)));
    if edns0 {
        let mut e = Edns::new();
        e.set_max_payload(EDNS_PAYLOAD);
        m.set_edns(e);
    }
    let bytes = m
        .to_vec()
        .map_err(|e| format!("cannot encode the query for '{name}': {e}"))?;
    Ok(Asked {
        id,
        qtype,
        name: name.into(),
        bytes,
    })
}

/// How `send_dg` takes a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// An answer the lookup uses (records, NODATA, NXDOMAIN, …).
    Use(Answer),
    /// SERVFAIL, NOTIMP, REFUSED, or a referral (NOERROR, no records, neither authoritative
    /// nor recursive): no data from this nameserver.
    Reject(Answer),
    /// Truncated: ask the same nameserver over TCP.
    Truncated,
}

/// A reply to one of `asked`: which one, and how glibc takes it; `None` for a datagram glibc
/// ignores (too short, another ID, a question that does not match, a query not a reply).
pub fn reply(bytes: &[u8], asked: &[&Asked]) -> Option<(usize, Verdict)> {
    if bytes.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([bytes[0], bytes[1]]);
    let which = asked.iter().position(|a| a.id == id)?;
    let a = asked[which];
    let Ok(m) = Message::from_vec(bytes) else {
        // A header glibc can read with a body that does not decode: it is the TC bit it acts
        // on; otherwise the question cannot match and the datagram is ignored.
        return (bytes[2] & 0x02 != 0 && bytes[2] & 0x80 != 0)
            .then_some((which, Verdict::Truncated));
    };
    if m.message_type() != MessageType::Response {
        return None;
    }
    let q = m.queries();
    let matches = q.len() == 1
        && q[0].query_type() == record_type(a.qtype)
        && names_equal(&q[0].name().to_ascii(), &a.name);
    if !matches {
        return None;
    }
    Some((which, judge(&m, a.qtype)))
}

/// DNS names compare without case and without the root's dot.
fn names_equal(x: &str, y: &str) -> bool {
    x.trim_end_matches('.')
        .eq_ignore_ascii_case(y.trim_end_matches('.'))
}

fn judge(m: &Message, qtype: QueryType) -> Verdict {
    let rcode = m.response_code();
    if matches!(
        rcode,
        ResponseCode::ServFail | ResponseCode::NotImp | ResponseCode::Refused
    ) {
        return Verdict::Reject(answer_of(m, qtype));
    }
    if m.truncated() {
        return Verdict::Truncated;
    }
    if rcode == ResponseCode::NoError
        && m.answers().is_empty()
        && !m.authoritative()
        && !m.recursion_available()
        && m.additionals().is_empty()
        && m.extensions().is_none()
    {
        return Verdict::Reject(Answer::NoData);
    }
    Verdict::Use(answer_of(m, qtype))
}

/// What a reply says for the type asked.
fn answer_of(m: &Message, qtype: QueryType) -> Answer {
    match m.response_code() {
        ResponseCode::NoError if m.answers().is_empty() => Answer::NoData,
        ResponseCode::NoError => {
            let addresses = m
                .answers()
                .iter()
                .filter(|r| {
                    matches!(
                        (r.data(), qtype),
                        (RData::A(_), QueryType::A) | (RData::AAAA(_), QueryType::Aaaa)
                    )
                })
                .count() as u32;
            Answer::Records {
                records: m.answers().len() as u32,
                addresses,
            }
        }
        ResponseCode::NXDomain => Answer::NxDomain,
        ResponseCode::ServFail => Answer::ServFail,
        ResponseCode::Refused => Answer::Refused,
        other => Answer::Rcode {
            code: u16::from(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Record;
    use std::net::Ipv4Addr;

    fn response(to: &Asked, rcode: ResponseCode, ra: bool, addr: Option<Ipv4Addr>) -> Vec<u8> {
        let q = Message::from_vec(&to.bytes).unwrap();
        let mut m = Message::new();
        m.set_id(to.id)
            .set_message_type(MessageType::Response)
            .set_op_code(OpCode::Query)
            .set_response_code(rcode)
            .set_recursion_available(ra);
        m.add_query(q.queries()[0].clone());
        if let Some(a) = addr {
            let name = q.queries()[0].name().clone();
            m.add_answer(Record::from_rdata(name, 60, RData::A(a.into())));
        }
        m.to_vec().unwrap()
    }

    #[test]
    fn queries_are_what_glibc_sends() {
        let q = query(0x1234, "Web.Lab.Test", QueryType::Aaaa, false).unwrap();
        let m = Message::from_vec(&q.bytes).unwrap();
        assert_eq!(m.id(), 0x1234);
        assert!(m.recursion_desired());
        assert_eq!(m.queries()[0].query_type(), RecordType::AAAA);
        assert_eq!(m.queries()[0].name().to_ascii(), "Web.Lab.Test.");
        assert!(m.extensions().is_none());
        assert_eq!(q.bytes.len(), 12 + 14 + 4);
        let q = query(1, "web.lab.test", QueryType::A, true).unwrap();
        let m = Message::from_vec(&q.bytes).unwrap();
        assert_eq!(m.extensions().as_ref().map(|e| e.max_payload()), Some(1200));
        assert!(query(1, &"a".repeat(64), QueryType::A, false).is_err());
    }

    #[test]
    fn replies_are_judged_as_send_dg_does() {
        let a = query(7, "web.lab.test", QueryType::A, false).unwrap();
        let aaaa = query(8, "web.lab.test", QueryType::Aaaa, false).unwrap();
        let both = [&a, &aaaa];
        let ok = response(
            &a,
            ResponseCode::NoError,
            true,
            Some(Ipv4Addr::new(10, 0, 0, 1)),
        );
        assert_eq!(
            reply(&ok, &both),
            Some((
                0,
                Verdict::Use(Answer::Records {
                    records: 1,
                    addresses: 1
                })
            ))
        );
        let nodata = response(&aaaa, ResponseCode::NoError, true, None);
        assert_eq!(
            reply(&nodata, &both),
            Some((1, Verdict::Use(Answer::NoData)))
        );
        let nx = response(&aaaa, ResponseCode::NXDomain, true, None);
        assert_eq!(reply(&nx, &both), Some((1, Verdict::Use(Answer::NxDomain))));
        let sf = response(&a, ResponseCode::ServFail, true, None);
        assert_eq!(
            reply(&sf, &both),
            Some((0, Verdict::Reject(Answer::ServFail)))
        );
        let referral = response(&a, ResponseCode::NoError, false, None);
        assert_eq!(
            reply(&referral, &both),
            Some((0, Verdict::Reject(Answer::NoData)))
        );
        // The A reply with the AAAA's ID does not answer the AAAA's question: ignored.
        let mut wrong = ok.clone();
        wrong[..2].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(reply(&wrong, &both), None);
        assert_eq!(reply(&ok, &[&aaaa]), None, "another ID");
        assert_eq!(reply(&a.bytes, &both), None, "a query, not a reply");
        assert_eq!(reply(&ok[..11], &both), None);
        let mut tc = ok.clone();
        tc[2] |= 0x02;
        assert_eq!(reply(&tc, &both), Some((0, Verdict::Truncated)));
        tc.truncate(20);
        assert_eq!(
            reply(&tc, &both),
            Some((0, Verdict::Truncated)),
            "a truncated body"
        );
    }
}
