//! YAML for the agent's configuration: a located node tree from `saphyr-parser` (YAML 1.2) and a
//! serde deserializer over it that speaks `serde_spanned`'s protocol, so the same `Spanned`
//! fields the TOML path fills carry byte spans into the YAML text — every error, syntax or
//! validation, names its line and column in either format.
//!
//! Scalars follow the YAML 1.2 core schema: a plain `~`/`null`/empty is null, `true`/`false`
//! booleans, decimal, `0x` and `0o` integers, floats (`.inf`, `.nan` too); quoted and block
//! scalars are always strings. Anchors and aliases are resolved; duplicate keys are an error.

use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// A YAML error at a byte offset of the text (None: the whole document).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Byte offset of the node (or the syntax error) in the text.
    pub offset: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl Error {
    fn at(mut self, offset: usize) -> Error {
        self.offset.get_or_insert(offset);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error {
            offset: None,
            message: msg.to_string(),
        }
    }
}

/// A node and the byte range it spans.
#[derive(Clone, Debug)]
pub struct Node {
    /// What it is.
    pub value: Value,
    /// Byte offset of its start.
    pub start: usize,
    /// Byte offset of its end.
    pub end: usize,
}

/// A node's content.
#[derive(Clone, Debug)]
pub enum Value {
    /// A scalar; `plain` when unquoted (then typed by the core schema).
    Scalar {
        /// The text.
        text: String,
        /// Unquoted, not a block scalar.
        plain: bool,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<(Node, Node)>),
}

/// Byte offsets of (line, column) positions: saphyr's markers count characters.
struct Offsets<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> Offsets<'a> {
    fn new(text: &'a str) -> Offsets<'a> {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Offsets { text, line_starts }
    }

    /// `line` is 1-based, `col` 0-based characters.
    fn byte(&self, line: usize, col: usize) -> usize {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return self.text.len();
        };
        let rest = &self.text[start..];
        start + rest.char_indices().nth(col).map_or(rest.len(), |(i, _)| i)
    }

    fn span(&self, s: &Span) -> (usize, usize) {
        (
            self.byte(s.start.line(), s.start.col()),
            self.byte(s.end.line(), s.end.col()),
        )
    }
}

/// Builds nodes from the event stream.
struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    offsets: Offsets<'a>,
    anchors: HashMap<usize, Node>,
}

enum Step {
    Node(Node),
    End(usize),
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<(Event<'a>, (usize, usize)), Error> {
        match self.parser.next_event() {
            Some(Ok((ev, span))) => Ok((ev, self.offsets.span(&span))),
            Some(Err(e)) => {
                let m = e.marker();
                Err(Error {
                    offset: Some(self.offsets.byte(m.line(), m.col())),
                    message: format!("YAML syntax: {}", e.info()),
                })
            }
            None => Err(Error {
                offset: None,
                message: "unexpected end of the YAML stream".into(),
            }),
        }
    }

    /// The next node, or the end of the enclosing collection/document (its end offset).
    fn step(&mut self) -> Result<Step, Error> {
        let (ev, (start, end)) = self.next()?;
        let (node, anchor) = match ev {
            Event::Scalar(text, style, anchor, _tag) => (
                Node {
                    value: Value::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                    },
                    start,
                    end,
                },
                anchor,
            ),
            Event::SequenceStart(anchor, _) => {
                let mut items = vec![];
                let end = loop {
                    match self.step()? {
                        Step::Node(n) => items.push(n),
                        Step::End(e) => break e,
                    }
                };
                let value = Value::Seq(items);
                (Node { value, start, end }, anchor)
            }
            Event::MappingStart(anchor, _) => self.mapping(start, anchor)?,
            Event::Alias(id) => {
                let mut n = self.anchors.get(&id).cloned().ok_or_else(|| Error {
                    offset: Some(start),
                    message: "alias to an unknown anchor".into(),
                })?;
                (n.start, n.end) = (start, end);
                return Ok(Step::Node(n));
            }
            Event::SequenceEnd | Event::MappingEnd | Event::DocumentEnd | Event::StreamEnd => {
                return Ok(Step::End(end));
            }
            Event::Nothing | Event::StreamStart | Event::DocumentStart(_) => return self.step(),
        };
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(Step::Node(node))
    }

    fn mapping(&mut self, start: usize, anchor: usize) -> Result<(Node, usize), Error> {
        let mut entries: Vec<(Node, Node)> = vec![];
        let end = loop {
            let key = match self.step()? {
                Step::Node(n) => n,
                Step::End(e) => break e,
            };
            let Step::Node(value) = self.step()? else {
                return Err(Error {
                    offset: Some(key.start),
                    message: "a key without a value".into(),
                });
            };
            if let Value::Scalar { text, .. } = &key.value
                && entries
                    .iter()
                    .any(|(k, _)| matches!(&k.value, Value::Scalar { text: t, .. } if t == text))
            {
                return Err(Error {
                    offset: Some(key.start),
                    message: format!("duplicate key `{text}`"),
                });
            }
            entries.push((key, value));
        };
        let value = Value::Map(entries);
        Ok((Node { value, start, end }, anchor))
    }
}

/// Every document of a YAML stream (`---` separated), as nodes.
pub fn documents(text: &str) -> Result<Vec<Node>, Error> {
    let mut b = Builder {
        parser: Parser::new_from_str(text),
        offsets: Offsets::new(text),
        anchors: HashMap::new(),
    };
    let mut docs = vec![];
    loop {
        let (ev, (start, end)) = b.next()?;
        match ev {
            Event::StreamEnd => return Ok(docs),
            Event::DocumentStart(_) => {
                let doc = match b.step()? {
                    Step::Node(n) => {
                        // The document's end.
                        while !matches!(b.next()?.0, Event::DocumentEnd | Event::StreamEnd) {}
                        n
                    }
                    Step::End(_) => Node {
                        value: Value::Scalar {
                            text: String::new(),
                            plain: true,
                        },
                        start,
                        end,
                    },
                };
                docs.push(doc);
            }
            _ => {}
        }
    }
}

/// Deserialize the single document of `text`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let docs = documents(text)?;
    match docs.as_slice() {
        [doc] => T::deserialize(NodeDe(doc)),
        [] => T::deserialize(NodeDe(&Node {
            value: Value::Map(vec![]),
            start: 0,
            end: 0,
        })),
        [_, second, ..] => Err(Error {
            offset: Some(second.start),
            message: "more than one YAML document; the configuration is one".into(),
        }),
    }
}

/// Deserialize one node.
pub fn from_node<T: DeserializeOwned>(node: &Node) -> Result<T, Error> {
    T::deserialize(NodeDe(node))
}

/// A deserializer over one node.
#[derive(Clone, Copy)]
struct NodeDe<'n>(&'n Node);

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn parse_int(text: &str) -> Option<i128> {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let v = if let Some(h) = digits.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()?
    } else if let Some(o) = digits.strip_prefix("0o") {
        i128::from_str_radix(o, 8).ok()?
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()?
    } else {
        return None;
    };
    Some(if neg { -v } else { v })
}

fn parse_float(text: &str) -> Option<f64> {
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => Some(f64::NAN),
        _ if text.bytes().any(|b| b.is_ascii_digit())
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) =>
        {
            text.parse().ok()
        }
        _ => None,
    }
}

impl<'n> NodeDe<'n> {
    fn scalar(&self) -> Option<(&'n str, bool)> {
        match &self.0.value {
            Value::Scalar { text, plain } => Some((text.as_str(), *plain)),
            _ => None,
        }
    }

    fn unexpected(&self) -> de::Unexpected<'n> {
        match &self.0.value {
            Value::Scalar { text, .. } => de::Unexpected::Str(text),
            Value::Seq(_) => de::Unexpected::Seq,
            Value::Map(_) => de::Unexpected::Map,
        }
    }

    fn located<T>(&self, r: Result<T, Error>) -> Result<T, Error> {
        r.map_err(|e| e.at(self.0.start))
    }

    fn int<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match self.scalar() {
            Some((t, true)) => match parse_int(t) {
                Some(v) if v >= 0 => u64::try_from(v)
                    .map_err(|_| de::Error::custom(format!("{t} is out of range")))
                    .and_then(|v| visitor.visit_u64(v)),
                Some(v) => i64::try_from(v)
                    .map_err(|_| de::Error::custom(format!("{t} is out of range")))
                    .and_then(|v| visitor.visit_i64(v)),
                None => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
            },
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }
}

impl<'de, 'n> de::Deserializer<'de> for NodeDe<'n> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match &self.0.value {
            Value::Scalar { text, plain: true } => {
                if is_null(text) {
                    visitor.visit_unit()
                } else if let Some(b) = parse_bool(text) {
                    visitor.visit_bool(b)
                } else if parse_int(text).is_some() {
                    return self.int(visitor);
                } else if let Some(f) = parse_float(text) {
                    visitor.visit_f64(f)
                } else {
                    visitor.visit_str(text)
                }
            }
            Value::Scalar { text, .. } => visitor.visit_str(text),
            Value::Seq(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Map(entries) => visitor.visit_map(Map {
                entries: entries.iter(),
                value: None,
            }),
        };
        self.located(r)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match self.scalar() {
            Some((t, true)) if parse_bool(t).is_some() => {
                visitor.visit_bool(parse_bool(t) == Some(true))
            }
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_i8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.int(v)
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match self.scalar() {
            Some((t, true)) => match parse_float(t) {
                Some(f) => visitor.visit_f64(f),
                None => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
            },
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match self.scalar() {
            Some((t, _)) => visitor.visit_str(t),
            None => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.scalar() {
            Some((t, true)) if is_null(t) => self.located(visitor.visit_none()),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match self.scalar() {
            Some((t, true)) if is_null(t) => visitor.visit_unit(),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match &self.0.value {
            Value::Seq(items) => visitor.visit_seq(Seq(items.iter())),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let r = match &self.0.value {
            Value::Map(entries) => visitor.visit_map(Map {
                entries: entries.iter(),
                value: None,
            }),
            _ => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if serde_spanned::de::is_spanned(name) {
            let span = self.0.start..self.0.end;
            return visitor.visit_map(serde_spanned::de::SpannedDeserializer::new(self, span));
        }
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let r = match self.scalar() {
            Some((t, _)) => visitor.visit_enum(de::value::StrDeserializer::<Error>::new(t)),
            None => Err(de::Error::invalid_type(self.unexpected(), &visitor)),
        };
        self.located(r)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

impl<'de, 'n> IntoDeserializer<'de, Error> for NodeDe<'n> {
    type Deserializer = NodeDe<'n>;

    fn into_deserializer(self) -> NodeDe<'n> {
        self
    }
}

struct Seq<'n>(std::slice::Iter<'n, Node>);

impl<'de> SeqAccess<'de> for Seq<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|n| seed.deserialize(NodeDe(n)))
            .transpose()
    }
}

struct Map<'n> {
    entries: std::slice::Iter<'n, (Node, Node)>,
    value: Option<&'n Node>,
}

impl<'de> MapAccess<'de> for Map<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((k, v)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(v);
        seed.deserialize(NodeDe(k))
            .map(Some)
            .map_err(|e| e.at(k.start))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let v = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value without a key"))?;
        seed.deserialize(NodeDe(v)).map_err(|e| e.at(v.start))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_spanned::Spanned;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        name: Spanned<String>,
        port: Option<u16>,
        ratio: f64,
        on: bool,
        list: Vec<Spanned<u32>>,
        #[serde(default)]
        nothing: Option<String>,
    }

    #[test]
    fn spans_point_into_the_text() {
        let text = "name: \"héllo\"\nport: 0x50\nratio: 1\non: true\nlist:\n  - 1\n  - &a 2\n  - *a\nnothing: ~\n";
        let d: Doc = from_str(text).unwrap();
        assert_eq!(d.name.get_ref(), "héllo");
        assert_eq!(&text[d.name.span()], "\"héllo\"");
        assert_eq!(d.port, Some(80));
        assert_eq!(d.ratio, 1.0);
        assert!(d.on);
        assert_eq!(
            d.list.iter().map(|v| *v.get_ref()).collect::<Vec<_>>(),
            [1, 2, 2]
        );
        assert_eq!(&text[d.list[1].span()], "2");
        assert_eq!(d.nothing, None);
    }

    #[test]
    fn errors_are_located() {
        let text = "name: a\nport: 70000\nratio: 1\non: true\nlist: []\n";
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!(&text[e.offset.unwrap()..][..5], "70000", "{e}");

        let text = "name: a\nratio: 1\non: true\nlist: []\ncolour: red\n";
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!(&text[e.offset.unwrap()..][..6], "colour", "{e}");
        assert!(e.message.contains("unknown field `colour`"), "{e}");

        let text = "name: a\nname: b\n";
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!(e.offset, Some(8), "{e}");
        assert!(e.message.contains("duplicate key"), "{e}");

        let text = "name: a\nlist: [1, 2\n";
        let e = from_str::<Doc>(text).unwrap_err();
        assert!(e.message.starts_with("YAML syntax"), "{e}");
        assert!(e.offset.is_some());

        let text = "name: a\nratio: yes\non: true\nlist: []\n";
        let e = from_str::<Doc>(text).unwrap_err();
        assert_eq!(&text[e.offset.unwrap()..][..3], "yes", "{e}");
    }

    #[test]
    fn several_documents() {
        let docs = documents("a: 1\n---\nb: 2\n---\n").unwrap();
        assert_eq!(docs.len(), 3);
        assert!(from_str::<Doc>("a: 1\n---\nb: 2\n").is_err());
    }
}
