//! The clearance pairs of a request's Cookie headers, found without decoding or copying.

use std::borrow::Cow;

use super::{HOST_PREFIX, MAX_COOKIES_CHECKED};

/// The clearance pairs of a request's Cookie headers, in the order they are checked, found
/// lazily: over https each pair named `__Host-<name>` as the scan meets it (a browser holds one:
/// it is host-only with `Path=/`, and no sibling subdomain can set one), then, once the scan is
/// over, the first [`MAX_COOKIES_CHECKED`] named `<name>` (the name without the prefix, the
/// previous version's); over plain http, where no browser sends a `__Host-` cookie, only the
/// first `<name>` ones. A sibling can set any number of `<name>` cookies for the parent domain,
/// which browsers send first when their path is longer: they never hide ours. Several Cookie
/// headers (HTTP/2 may split them) are one list.
///
/// The checker takes [`MAX_COOKIES_CHECKED`] pairs at most and stops at the first valid one,
/// so the scan goes no further than the clearance cookie that passes: a valid `__Host-` cookie
/// at the front of 60 KiB of others costs one pair's scan.
///
/// A pair's name is compared byte for byte, after stripping only spaces and tabs around it
/// (RFC 6265, section 5.4's cookie-string, and RFC 9110's OWS): a browser stores a name that
/// starts with U+00A0 or U+2000 as an ordinary cookie, which a sibling may set with `Domain=`,
/// so a name that only looks like `__Host-<name>` once Unicode whitespace is trimmed is not
/// ours. Nothing is decoded or copied: pairs are byte slices of the headers.
#[derive(Debug)]
pub struct ClearancePairs<'h, I> {
    headers: I,
    current: &'h [u8],
    at: usize,
    name: &'h [u8],
    secure: bool,
    prefixed_seen: usize,
    plain: [&'h [u8]; MAX_COOKIES_CHECKED],
    plain_kept: usize,
    plain_given: usize,
    scanning: bool,
}

impl<'h, I: Iterator<Item = &'h [u8]>> ClearancePairs<'h, I> {
    pub fn new(headers: I, name: &'h str, secure: bool) -> Self {
        ClearancePairs {
            headers,
            current: &[],
            at: 0,
            name: name.as_bytes(),
            secure,
            prefixed_seen: 0,
            plain: [&[]; MAX_COOKIES_CHECKED],
            plain_kept: 0,
            plain_given: 0,
            scanning: true,
        }
    }

    /// Whether the scan has found all it could give: the checker takes no more than
    /// [`MAX_COOKIES_CHECKED`] pairs.
    fn scan_is_done(&self) -> bool {
        if self.secure {
            self.prefixed_seen == MAX_COOKIES_CHECKED
        } else {
            self.plain_kept == MAX_COOKIES_CHECKED
        }
    }
}

impl<'h, I: Iterator<Item = &'h [u8]>> Iterator for ClearancePairs<'h, I> {
    /// A `name=value` pair, without the spaces and tabs around it.
    type Item = &'h [u8];

    fn next(&mut self) -> Option<&'h [u8]> {
        while self.scanning {
            if self.scan_is_done() {
                self.scanning = false;
                break;
            }
            if self.at >= self.current.len() {
                match self.headers.next() {
                    Some(header) => {
                        self.current = header;
                        self.at = 0;
                        continue;
                    }
                    None => {
                        self.scanning = false;
                        break;
                    }
                }
            }
            let rest = self.current.get(self.at..).unwrap_or_default();
            let end = find_byte(rest, b';').unwrap_or(rest.len());
            let pair = rest.get(..end).unwrap_or_default();
            self.at += end + 1;
            match pair_name(pair, self.name) {
                Some(PairName::Prefixed) if self.secure => {
                    self.prefixed_seen += 1;
                    return Some(trim_ows(pair));
                }
                Some(PairName::Plain) => {
                    if let Some(slot) = self.plain.get_mut(self.plain_kept) {
                        *slot = trim_ows(pair);
                        self.plain_kept += 1;
                    }
                }
                _ => {}
            }
        }
        let pair = self.plain.get(self.plain_given..self.plain_kept)?.first()?;
        self.plain_given += 1;
        Some(pair)
    }
}

/// Which of the clearance cookie's names a pair has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PairName {
    /// `__Host-<name>`.
    Prefixed,
    /// `<name>`.
    Plain,
}

/// The name of a `name=value` pair, if it is the clearance cookie's: the bytes before the first
/// `=`, spaces and tabs around them stripped, exactly `__Host-<name>` or `<name>`. No decoding,
/// no allocation: most pairs of a big header are told apart by their first bytes.
fn pair_name(pair: &[u8], name: &[u8]) -> Option<PairName> {
    let eq = pair.iter().position(|b| *b == b'=')?;
    let found = trim_ows(&pair[..eq]);
    if found == name {
        return Some(PairName::Plain);
    }
    let rest = found.strip_prefix(HOST_PREFIX.as_bytes())?;
    (rest == name).then_some(PairName::Prefixed)
}

/// `bytes` without the spaces and tabs around it (RFC 9110's OWS): nothing else is whitespace
/// in a Cookie header.
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// [`trim_ows`] for text.
pub(super) fn trim_ows_str(text: &str) -> &str {
    text.trim_matches([' ', '\t'])
}

/// `String::from_utf8_lossy`, with the common case (valid UTF-8, mostly ASCII) checked first
/// by the fast validator: no copy, no per-character iteration.
pub fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The index of the first `needle` in `haystack`, eight bytes at a time: the filter runs as
/// wasm32 without SIMD, where a byte-at-a-time loop over a 60 KiB header costs several times
/// more. A word has a byte equal to `needle` exactly when `x = word ^ needle*0x01..01` has a
/// zero byte, which `(x - 0x01..01) & !x & 0x80..80` tells.
fn find_byte(haystack: &[u8], needle: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    let mut at = 0;
    for chunk in haystack.chunks_exact(8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let x = u64::from_le_bytes(bytes) ^ pattern;
        if x.wrapping_sub(LO) & !x & HI != 0 {
            break;
        }
        at += 8;
    }
    haystack[at..]
        .iter()
        .position(|b| *b == needle)
        .map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_byte_agrees_with_a_byte_loop() {
        let text: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        for start in 0..text.len() {
            for needle in [b';', 0, 0x80, 0xff, 59 ^ 0x80] {
                let hay = &text[start..];
                assert_eq!(
                    find_byte(hay, needle),
                    hay.iter().position(|b| *b == needle),
                    "{start} {needle}"
                );
            }
        }
        assert_eq!(find_byte(b"", b';'), None);
        assert_eq!(find_byte(b"aaaaaaaaaaaaaaa;", b';'), Some(15));
    }

    #[test]
    fn pair_names_are_compared_byte_for_byte_after_spaces_and_tabs() {
        for (pair, expected) in [
            (&b"pow=1"[..], Some(PairName::Plain)),
            (b" \tpow \t=1", Some(PairName::Plain)),
            (b"__Host-pow=1", Some(PairName::Prefixed)),
            (b" __Host-pow=a=b", Some(PairName::Prefixed)),
            // Unicode whitespace is part of the name, as browsers store it.
            (b"\xc2\xa0pow=1", None),
            (b"\xe2\x80\x80__Host-pow=1", None),
            (b"__Host-pow\xe3\x80\x80=1", None),
            (b"\x0bpow=1", None),
            (b"\rpow=1", None),
            (b"__HOST-pow=1", None),
            (b"__Host-__Host-pow=1", None),
            (b"pow", None),
            (b"=pow=1", None),
            (b"po=1", None),
            (b" other=pow", None),
            (b"  ", None),
        ] {
            assert_eq!(pair_name(pair, b"pow"), expected, "{pair:?}");
        }
    }
}
