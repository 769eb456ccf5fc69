//! The part of RFC 8941 (Structured Field Values) that HTTP Message Signatures needs:
//! dictionaries (section 3.2) whose members are items or inner lists (3.1.1) with parameters
//! (3.1.2), bare items of every type but decimals parsed by the algorithms of section 4.2, and
//! their canonical serialization (section 4.1), which the signature base is made of.
//!
//! Bounded: at most [`MAX_MEMBERS`] members, [`MAX_ITEMS`] items in an inner list and
//! [`MAX_PARAMS`] parameters on anything; the input is at most what the caller let through.
//! A repeated dictionary key or parameter key is refused, not overwritten as RFC 8941 says:
//! two readings of one header are a way to show the signer one thing and the verifier another.
//! Decimals are refused too: no signature parameter or component this module reads is one.

use std::borrow::Cow;
use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// The most members read from a dictionary (Signature-Input, Signature, Signature-Agent).
pub const MAX_MEMBERS: usize = 8;
/// The most items read from an inner list (the covered components of one signature).
pub const MAX_ITEMS: usize = 16;
/// The most parameters read on one item or inner list.
pub const MAX_PARAMS: usize = 8;

/// RFC 8941 section 4.2.7: parsers should accept a byte sequence without its `=` padding or
/// with non-zero pad bits. Serialization (section 4.1.8) writes the padded form.
const SF_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Why a field does not parse (the caller only needs to know that it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// A bare item (RFC 8941 section 3.3), decimals excepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bare<'a> {
    Integer(i64),
    /// The string's characters, escapes undone.
    String(Cow<'a, str>),
    Token(&'a str),
    /// The decoded bytes.
    Bytes(Vec<u8>),
    Boolean(bool),
}

/// Parameters in their order (RFC 8941 section 3.1.2), keys unique.
pub type Params<'a> = Vec<(&'a str, Bare<'a>)>;

/// An item with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item<'a> {
    pub bare: Bare<'a>,
    pub params: Params<'a>,
}

/// A dictionary member's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member<'a> {
    Item(Item<'a>),
    InnerList(Vec<Item<'a>>, Params<'a>),
}

/// A dictionary: members in order, keys unique.
pub type Dictionary<'a> = Vec<(&'a str, Member<'a>)>;

/// The value of parameter `key`, if present.
pub fn param<'p, 'a>(params: &'p Params<'a>, key: &str) -> Option<&'p Bare<'a>> {
    params.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// The value of member `key`, if present.
pub fn member<'d, 'a>(dict: &'d Dictionary<'a>, key: &str) -> Option<&'d Member<'a>> {
    dict.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// Parses a field value as a dictionary (RFC 8941 section 4.2, with `field_type` dictionary).
pub fn parse_dictionary(input: &str) -> Result<Dictionary<'_>, Invalid> {
    let mut p = Parser::new(input);
    p.skip_sp();
    let mut dict: Dictionary<'_> = Vec::new();
    while !p.at_end() {
        let key = p.key()?;
        let value = if p.eat(b'=') {
            p.item_or_inner_list()?
        } else {
            Member::Item(Item {
                bare: Bare::Boolean(true),
                params: p.params()?,
            })
        };
        if dict.len() == MAX_MEMBERS || dict.iter().any(|(k, _)| *k == key) {
            return Err(Invalid);
        }
        dict.push((key, value));
        p.skip_ows();
        if p.at_end() {
            break;
        }
        if !p.eat(b',') {
            return Err(Invalid);
        }
        p.skip_ows();
        if p.at_end() {
            // A trailing comma.
            return Err(Invalid);
        }
    }
    Ok(dict)
}

/// Parses a field value as one item (RFC 8941 section 4.2, with `field_type` item).
pub fn parse_item(input: &str) -> Result<Item<'_>, Invalid> {
    let mut p = Parser::new(input);
    p.skip_sp();
    let item = p.item()?;
    p.skip_sp();
    if p.at_end() { Ok(item) } else { Err(Invalid) }
}

struct Parser<'a> {
    input: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser { input, at: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.input.as_bytes().get(self.at).copied()
    }

    fn at_end(&self) -> bool {
        self.at >= self.input.len()
    }

    fn bump(&mut self) {
        self.at = self.at.saturating_add(1);
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.bump();
        }
        found
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.bump();
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.bump();
        }
    }

    /// The input from `start` to the cursor. Every byte the parsers step over is ASCII, so
    /// this is always a char boundary; `get` keeps it from ever panicking anyway.
    fn since(&self, start: usize) -> Result<&'a str, Invalid> {
        self.input.get(start..self.at).ok_or(Invalid)
    }

    /// Section 4.2.3.3: `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
    fn key(&mut self) -> Result<&'a str, Invalid> {
        let start = self.at;
        match self.peek() {
            Some(b'a'..=b'z' | b'*') => self.bump(),
            _ => return Err(Invalid),
        }
        while let Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*') = self.peek() {
            self.bump();
        }
        self.since(start)
    }

    fn item_or_inner_list(&mut self) -> Result<Member<'a>, Invalid> {
        if self.peek() != Some(b'(') {
            return Ok(Member::Item(self.item()?));
        }
        self.bump();
        let mut items = Vec::new();
        loop {
            self.skip_sp();
            if self.eat(b')') {
                let params = self.params()?;
                return Ok(Member::InnerList(items, params));
            }
            if items.len() == MAX_ITEMS {
                return Err(Invalid);
            }
            items.push(self.item()?);
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return Err(Invalid);
            }
        }
    }

    fn item(&mut self) -> Result<Item<'a>, Invalid> {
        let bare = self.bare()?;
        let params = self.params()?;
        Ok(Item { bare, params })
    }

    fn params(&mut self) -> Result<Params<'a>, Invalid> {
        let mut params: Params<'a> = Vec::new();
        while self.eat(b';') {
            self.skip_sp();
            let key = self.key()?;
            let value = if self.eat(b'=') {
                self.bare()?
            } else {
                Bare::Boolean(true)
            };
            if params.len() == MAX_PARAMS || params.iter().any(|(k, _)| *k == key) {
                return Err(Invalid);
            }
            params.push((key, value));
        }
        Ok(params)
    }

    fn bare(&mut self) -> Result<Bare<'a>, Invalid> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.integer(),
            Some(b'"') => self.string(),
            Some(b'*' | b'a'..=b'z' | b'A'..=b'Z') => self.token(),
            Some(b':') => self.bytes(),
            Some(b'?') => self.boolean(),
            _ => Err(Invalid),
        }
    }

    /// Section 4.2.4, integers only: at most 15 digits.
    fn integer(&mut self) -> Result<Bare<'a>, Invalid> {
        let negative = self.eat(b'-');
        let mut value: i64 = 0;
        let mut digits = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            if digits == 15 {
                return Err(Invalid);
            }
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(i64::from(d - b'0')))
                .ok_or(Invalid)?;
            digits += 1;
            self.bump();
        }
        if digits == 0 || self.peek() == Some(b'.') {
            return Err(Invalid);
        }
        Ok(Bare::Integer(if negative { -value } else { value }))
    }

    /// Section 4.2.5: printable ASCII, `\"` and `\\` the only escapes.
    fn string(&mut self) -> Result<Bare<'a>, Invalid> {
        self.bump();
        let start = self.at;
        let mut owned: Option<String> = None;
        loop {
            match self.peek() {
                None => return Err(Invalid),
                Some(b'"') => {
                    let text = match owned {
                        Some(s) => Cow::Owned(s),
                        None => Cow::Borrowed(self.since(start)?),
                    };
                    self.bump();
                    return Ok(Bare::String(text));
                }
                Some(b'\\') => {
                    let so_far = self.since(start)?;
                    self.bump();
                    let escaped = match self.peek() {
                        Some(c @ (b'"' | b'\\')) => char::from(c),
                        _ => return Err(Invalid),
                    };
                    owned.get_or_insert_with(|| so_far.to_owned()).push(escaped);
                    self.bump();
                }
                Some(c @ 0x20..=0x7e) => {
                    if let Some(s) = owned.as_mut() {
                        s.push(char::from(c));
                    }
                    self.bump();
                }
                Some(_) => return Err(Invalid),
            }
        }
    }

    /// Section 4.2.6: `( ALPHA / "*" ) *( tchar / ":" / "/" )`.
    fn token(&mut self) -> Result<Bare<'a>, Invalid> {
        let start = self.at;
        self.bump();
        while self
            .peek()
            .is_some_and(|c| is_tchar(c) || c == b':' || c == b'/')
        {
            self.bump();
        }
        Ok(Bare::Token(self.since(start)?))
    }

    /// Section 4.2.7.
    fn bytes(&mut self) -> Result<Bare<'a>, Invalid> {
        self.bump();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
        {
            self.bump();
        }
        let text = self.since(start)?;
        if !self.eat(b':') {
            return Err(Invalid);
        }
        SF_BASE64.decode(text).map(Bare::Bytes).map_err(|_| Invalid)
    }

    /// Section 4.2.8.
    fn boolean(&mut self) -> Result<Bare<'a>, Invalid> {
        self.bump();
        let value = match self.peek() {
            Some(b'0') => false,
            Some(b'1') => true,
            _ => return Err(Invalid),
        };
        self.bump();
        Ok(Bare::Boolean(value))
    }
}

/// RFC 9110's tchar: the characters of a token, and of a field name.
pub fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Section 4.1.3.1 and following: the canonical text of a bare item.
pub fn write_bare(out: &mut String, bare: &Bare<'_>) {
    match bare {
        // Writing to a String cannot fail.
        Bare::Integer(i) => {
            let _ = write!(out, "{i}");
        }
        Bare::String(s) => write_string(out, s),
        Bare::Token(t) => out.push_str(t),
        Bare::Bytes(b) => {
            out.push(':');
            base64::engine::general_purpose::STANDARD.encode_string(b, out);
            out.push(':');
        }
        Bare::Boolean(b) => out.push_str(if *b { "?1" } else { "?0" }),
    }
}

/// Section 4.1.6: a string, `"` and `\` escaped.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// Section 4.1.1.2: `;key` for a true boolean, `;key=value` otherwise.
pub fn write_params(out: &mut String, params: &Params<'_>) {
    for (key, value) in params {
        out.push(';');
        out.push_str(key);
        if *value != Bare::Boolean(true) {
            out.push('=');
            write_bare(out, value);
        }
    }
}

pub fn write_item(out: &mut String, item: &Item<'_>) {
    write_bare(out, &item.bare);
    write_params(out, &item.params);
}

/// Section 4.1.1.1: `(` items separated by one space `)` then the list's parameters.
pub fn write_inner_list(out: &mut String, items: &[Item<'_>], params: &Params<'_>) {
    out.push('(');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_item(out, item);
    }
    out.push(')');
    write_params(out, params);
}

pub fn write_member(out: &mut String, member: &Member<'_>) {
    match member {
        Member::Item(item) => write_item(out, item),
        Member::InnerList(items, params) => write_inner_list(out, items, params),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn reserialized(input: &str) -> Option<String> {
        let dict = parse_dictionary(input).ok()?;
        let mut out = String::new();
        for (i, (key, value)) in dict.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(key);
            if *value
                == Member::Item(Item {
                    bare: Bare::Boolean(true),
                    params: Vec::new(),
                })
            {
                continue;
            }
            out.push('=');
            write_member(&mut out, value);
        }
        Some(out)
    }

    #[test]
    fn dictionaries_parse_and_serialize_canonically() {
        for (input, canonical) in [
            (
                r#"sig1=("@authority" "signature-agent";key="a");created=1;keyid="k""#,
                r#"sig1=("@authority" "signature-agent";key="a");created=1;keyid="k""#,
            ),
            (
                r#"  a=(  "x"   "y" );p , b=:AAE=:,	c"#,
                r#"a=("x" "y");p, b=:AAE=:, c"#,
            ),
            // No padding, accepted; written padded.
            ("b=:AAE:", "b=:AAE=:"),
            (r#"s="a\"b\\c""#, r#"s="a\"b\\c""#),
            ("t=tok/en:x;q=?0, n=-12", "t=tok/en:x;q=?0, n=-12"),
            ("e=()", "e=()"),
            ("", ""),
        ] {
            assert_eq!(reserialized(input).as_deref(), Some(canonical), "{input:?}");
        }
    }

    #[test]
    fn what_rfc_8941_refuses_or_we_refuse_is_refused() {
        for input in [
            "a=1,",
            "a=1,,b=2",
            "A=1",
            "a=1.5",
            "a=1234567890123456",
            r#"a="\x""#,
            "a=\"caf\u{e9}\"",
            "a=\"open",
            "a=:AA",
            "a=:A*A=:",
            "a=(\"x\"\"y\")",
            "a=(\"x\"",
            "a=?2",
            "a=1;b=2;b=3",
            "a=1, a=2",
            "a=1 b=2",
            "a=1;",
            "a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9",
            "a=(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17)",
            "a=1;a;b;c;d;e;f;g;h;i",
            "\ta=1",
        ] {
            assert!(parse_dictionary(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let dict = parse_dictionary(r#"a="plain", b="esc\"aped""#).unwrap();
        let Some(Member::Item(Item {
            bare: Bare::String(a),
            ..
        })) = member(&dict, "a")
        else {
            panic!("{dict:?}");
        };
        assert!(matches!(a, Cow::Borrowed("plain")));
        let Some(Member::Item(Item {
            bare: Bare::String(b),
            ..
        })) = member(&dict, "b")
        else {
            panic!("{dict:?}");
        };
        assert_eq!(b, "esc\"aped");
    }

    #[test]
    fn an_item_field_is_one_item() {
        assert_eq!(
            parse_item(r#" "https://signature-agent.test" "#).unwrap(),
            Item {
                bare: Bare::String(Cow::Borrowed("https://signature-agent.test")),
                params: Vec::new()
            }
        );
        assert!(parse_item(r#""a", "b""#).is_err());
        assert!(parse_item("").is_err());
    }
}
