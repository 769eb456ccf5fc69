//! The packed form of a prefix set: what `pluginConfig.lists.packed` carries, about a tenth of
//! the text form (`lists.sets`), so that a few hundred thousand prefixes fit in the WasmPlugin
//! object (etcd's 1.5 MiB request limit). The filter decodes it at configure time into the same
//! [`Net`]s as [`crate::lists::parse_set`] gives for the text, and both go through the same table
//! build. The encoder is here too, beside its decoder, for `lists-refresh`; the filter never
//! calls it, so the link leaves it out of the module.
//!
//! # Format 1
//!
//! The value is a JSON string: standard base64 (RFC 4648 section 4, `+` `/`, `=` padding, no
//! whitespace, no line breaks) of
//!
//! | bytes | what |
//! | --- | --- |
//! | 1 | the format, `0x01` (outside the compression, so a later format may change that too) |
//! | rest | a zlib stream (RFC 1950: DEFLATE, RFC 1951, with its Adler-32 check) of the body |
//!
//! The body:
//!
//! | field | what |
//! | --- | --- |
//! | `n4` | varint: the number of IPv4 prefixes |
//! | `n6` | varint: the number of IPv6 prefixes |
//! | `n4` IPv4 entries, then `n6` IPv6 entries | each: `len`, one byte (0 to 32, or 0 to 128), then `d`, a varint |
//!
//! A varint is unsigned LEB128: 7 bits a byte, least significant group first, the high bit set
//! on every byte but the last; the shortest encoding only (no trailing `0x00` group), and no
//! bit past the family's width (32 or 128).
//!
//! Within a family (width `W`: 32 or 128) the prefixes are sorted by (start, length), without
//! duplicates, and each start is the previous start plus `d << (W - max(previous len, len))`;
//! the family's first entry has the previous start 0 and the previous length 0. That shift is
//! exact: both starts are multiples of `2^(W - max(lengths))`, as their host bits are zero.
//! So a /24 after a /24 counts in /24s and an IPv6 /48 after a /48 counts in /48s, and the
//! usual delta fits in one or two bytes whatever the family (a plain delta on `u128` is a
//! dozen bytes for IPv6).
//!
//! Refused: another format byte, bad base64, a zlib stream that does not check or inflates
//! past [`MAX_BODY_BYTES`], more prefixes than the caller allows (at most [`MAX_PREFIXES`]),
//! a count the body cannot hold (each entry takes at least two bytes: checked before anything
//! is allocated for the prefixes), a length past the family's width, a start past the family's
//! width, host bits set, an entry not after the previous one, and bytes left after the last
//! entry. The decoder never panics: every read is checked, every sum is checked.
//!
//! Measured on lists built from a real ASN dataset (ip-location-db, 2026-06), per prefix: the
//! text is 16.3 bytes, zlib of the text 3.1, this body 2.1 and its zlib 1.0, so 1.3 bytes of
//! base64. A plain `u128` delta (not shifted) gave 1.2 bytes of zlib, and a columnar body
//! (every length, then every delta) gained 1 % at 250k prefixes and lost 15 % at 730k.

use base64::Engine as _;

use crate::lists::Net;

/// The format byte this filter reads and the encoder writes.
pub const FORMAT: u8 = 1;
/// The most prefixes a configuration's packed lists hold together (a million prefixes make a
/// table of 5 to 17 MB; the filter holds two while streams drain).
pub const MAX_PREFIXES: usize = 2_000_000;
/// The largest body inflated: a decompression bomb stops here. Real lists take about two bytes
/// a prefix, so [`MAX_PREFIXES`] of them fit eight times over.
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// zlib's best compression; miniz_oxide's level 10 gave nothing more on real lists.
const LEVEL: u8 = 9;

/// Encodes a set of prefixes: sorted, duplicates dropped, IPv4 then IPv6. Refuses a prefix
/// with host bits set or a length past its family's width (what [`decode`] would refuse), and
/// more than [`MAX_PREFIXES`].
pub fn encode(nets: &[Net]) -> Result<String, String> {
    Ok(base64::engine::general_purpose::STANDARD.encode(encode_bytes(nets)?))
}

/// [`encode`] without the base64: the format byte and the zlib stream.
pub fn encode_bytes(nets: &[Net]) -> Result<Vec<u8>, String> {
    let (v4, v6) = families(nets)?;
    if v4.len() + v6.len() > MAX_PREFIXES {
        return Err(format!(
            "{} prefixes, over the {MAX_PREFIXES} the filter takes",
            v4.len() + v6.len()
        ));
    }
    let mut body = Vec::with_capacity(2 * (v4.len() + v6.len()) + 10);
    put_varint(&mut body, v4.len() as u128);
    put_varint(&mut body, v6.len() as u128);
    for (family, width) in [(&v4, 32u32), (&v6, 128)] {
        let (mut prev_start, mut prev_len) = (0u128, 0u8);
        for &(start, len) in family {
            let shift = width - u32::from(prev_len.max(len));
            // Sorted: start >= prev_start; both multiples of 2^shift (see the module doc).
            let delta = start.wrapping_sub(prev_start);
            body.push(len);
            put_varint(&mut body, delta.checked_shr(shift).unwrap_or(0));
            (prev_start, prev_len) = (start, len);
        }
    }
    let mut out = vec![FORMAT];
    out.extend(miniz_oxide::deflate::compress_to_vec_zlib(&body, LEVEL));
    Ok(out)
}

/// Each family's prefixes as (start, len) on `u128`, checked, sorted and deduplicated.
type Families = (Vec<(u128, u8)>, Vec<(u128, u8)>);

fn families(nets: &[Net]) -> Result<Families, String> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for net in nets {
        let (start, len, width, family) = match *net {
            Net::V4(a, l) => (u128::from(a), l, 32, &mut v4),
            Net::V6(a, l) => (a, l, 128, &mut v6),
        };
        if u32::from(len) > width || start & !mask(len, width) != 0 {
            return Err(format!("{net:?}: not a prefix (length or host bits)"));
        }
        family.push((start, len));
    }
    for family in [&mut v4, &mut v6] {
        family.sort_unstable();
        family.dedup();
    }
    Ok((v4, v6))
}

/// The bits of a `len`-bit prefix in a `width`-bit address, on `u128`.
fn mask(len: u8, width: u32) -> u128 {
    let all = u128::MAX >> (128 - width.min(128));
    let host = width.saturating_sub(u32::from(len));
    all & all.checked_shl(host).unwrap_or(0)
}

fn put_varint(out: &mut Vec<u8>, mut value: u128) {
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// Decodes a packed set (the base64 text) into at most `max_prefixes` prefixes (capped at
/// [`MAX_PREFIXES`]), in the encoder's order. The error says what is wrong and where.
pub fn decode(text: &str, max_prefixes: usize) -> Result<Vec<Net>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("not standard padded base64: {e}"))?;
    decode_bytes(&bytes, max_prefixes)
}

/// [`decode`] of the bytes under the base64.
pub fn decode_bytes(bytes: &[u8], max_prefixes: usize) -> Result<Vec<Net>, String> {
    let Some((&format, stream)) = bytes.split_first() else {
        return Err("empty: no format byte".to_owned());
    };
    if format != FORMAT {
        return Err(format!(
            "format {format} is unknown: this filter reads format {FORMAT}"
        ));
    }
    let body = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(stream, MAX_BODY_BYTES)
        .map_err(|e| match e.status {
            miniz_oxide::inflate::TINFLStatus::HasMoreOutput => {
                format!("inflates past {MAX_BODY_BYTES} bytes")
            }
            status => format!("not a valid zlib stream ({status:?})"),
        })?;
    decode_body(&body, max_prefixes.min(MAX_PREFIXES))
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = self
            .bytes
            .get(self.pos)
            .copied()
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    /// A shortest-form LEB128 varint of at most `width` bits.
    fn varint(&mut self, width: u32) -> Result<u128, String> {
        let at = self.pos;
        let mut value = 0u128;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            let group = u128::from(b & 0x7f);
            let bits_left = width.saturating_sub(shift);
            if bits_left == 0 || (bits_left < 7 && group >> bits_left != 0) {
                return Err(format!("varint at byte {at}: over {width} bits"));
            }
            value |= group << shift;
            if b & 0x80 == 0 {
                if b == 0 && shift > 0 {
                    return Err(format!("varint at byte {at}: not in its shortest form"));
                }
                return Ok(value);
            }
            shift += 7;
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }
}

fn decode_body(body: &[u8], max_prefixes: usize) -> Result<Vec<Net>, String> {
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    let count = |v: u128| usize::try_from(v).unwrap_or(usize::MAX);
    let n4 = count(r.varint(64)?);
    let n6 = count(r.varint(64)?);
    let total = n4.saturating_add(n6);
    if total > max_prefixes {
        return Err(format!(
            "{n4} IPv4 and {n6} IPv6 prefixes: more than the {max_prefixes} allowed"
        ));
    }
    // Each entry is a length byte and at least one varint byte.
    if total > r.remaining() / 2 {
        return Err(format!(
            "declares {total} prefixes, but {} bytes hold at most {}",
            r.remaining(),
            r.remaining() / 2
        ));
    }
    let mut nets = Vec::with_capacity(total);
    for (n, width, family) in [(n4, 32u32, "IPv4"), (n6, 128, "IPv6")] {
        let (mut prev_start, mut prev_len) = (0u128, 0u8);
        for i in 0..n {
            let at = r.pos;
            let bad = |what: &str| format!("{family} prefix {i} (byte {at}): {what}");
            let len = r.byte()?;
            if u32::from(len) > width {
                return Err(bad(&format!("length {len} over {width}")));
            }
            let d = r.varint(width)?;
            let shift = width - u32::from(prev_len.max(len));
            let delta = match d {
                0 => 0,
                d => d
                    .checked_shl(shift)
                    .filter(|delta| delta >> shift == d)
                    .ok_or_else(|| bad("start past the address width"))?,
            };
            let start = prev_start
                .checked_add(delta)
                .filter(|&s| s & !mask(width as u8, width) == 0)
                .ok_or_else(|| bad("start past the address width"))?;
            if start & !mask(len, width) != 0 {
                return Err(bad("host bits set"));
            }
            if i > 0 && delta == 0 && len <= prev_len {
                return Err(bad("not after the previous prefix (sorted, no duplicates)"));
            }
            nets.push(if width == 32 {
                Net::V4(
                    u32::try_from(start).map_err(|_| bad("start past 32 bits"))?,
                    len,
                )
            } else {
                Net::V6(start, len)
            });
            (prev_start, prev_len) = (start, len);
        }
    }
    if r.remaining() != 0 {
        return Err(format!("{} bytes after the last prefix", r.remaining()));
    }
    Ok(nets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::parse_set;

    fn round_trip(text: &str) -> Vec<Net> {
        let nets = parse_set(text).unwrap();
        let packed = encode(&nets).unwrap();
        decode(&packed, MAX_PREFIXES).unwrap()
    }

    /// The body of a set, for tests that craft bad ones.
    fn packed_body(body: &[u8]) -> Vec<u8> {
        let mut out = vec![FORMAT];
        out.extend(miniz_oxide::deflate::compress_to_vec_zlib(body, 6));
        out
    }

    #[test]
    fn a_set_round_trips_sorted_and_without_duplicates() {
        let text = "2a0b:f4c2::/40 10.0.0.0/8 185.220.101.1/32 10.0.0.0/8 0.0.0.0/0 \
                    10.0.0.0/16 ::/0 ::1 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 255.255.255.255 \
                    2001:db8::/32 2001:db8::/48 64:ff9b::c000:201/128";
        let mut expected = parse_set(text).unwrap();
        expected.sort_by_key(|n| match *n {
            Net::V4(a, l) => (0, u128::from(a), l),
            Net::V6(a, l) => (1, a, l),
        });
        expected.dedup();
        assert_eq!(round_trip(text), expected);
        assert_eq!(round_trip(""), vec![]);
    }

    #[test]
    fn the_body_is_the_documented_one() {
        // 10.0.0.0/24 (d = 10.0.0 in /24s = 0x0a0000), 10.0.1.0/24 (d = 1), 10.0.1.0/32
        // (delta 0, longer), then 2001:db8::/32 (d = 0x20010db8 in /32s).
        let nets = parse_set("10.0.0.0/24 10.0.1.0/24 10.0.1.0/32 2001:db8::/32").unwrap();
        let bytes = encode_bytes(&nets).unwrap();
        assert_eq!(bytes[0], 1);
        let body = miniz_oxide::inflate::decompress_to_vec_zlib(&bytes[1..]).unwrap();
        assert_eq!(
            body,
            [
                3, 1, // counts
                24, 0x80, 0x80, 0x28, // 0x0a0000 in LEB128
                24, 1, //
                32, 0, //
                32, 0xb8, 0x9b, 0x84, 0x80, 0x02 // 0x20010db8
            ]
        );
        assert_eq!(decode_body(&body, 10).unwrap(), nets);
    }

    #[test]
    fn bad_values_are_refused_with_what_is_wrong() {
        let cases: &[(&[u8], &str)] = &[
            (&[], "empty"),
            (&[2, 0], "format 2 is unknown"),
            (&[1, 0, 1, 2], "not a valid zlib stream"),
        ];
        for (bytes, wanted) in cases {
            let e = decode_bytes(bytes, MAX_PREFIXES).unwrap_err();
            assert!(e.contains(wanted), "{bytes:?}: {e}");
        }
        let bodies: &[(&[u8], &str)] = &[
            (&[], "truncated"),
            (&[1, 0], "declares 1 prefixes"),
            (&[1, 0, 33, 0], "length 33 over 32"),
            (&[0, 1, 129, 0], "length 129 over 128"),
            (
                &[1, 0, 24, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
                "over 32 bits",
            ),
            (&[1, 0, 32, 0x80, 0x00], "shortest form"),
            (&[1, 0, 8, 0x80, 0x02], "start past the address width"),
            (
                &[1, 0, 24, 0x80, 0x80, 0x80, 0x08],
                "start past the address width",
            ),
            (&[2, 0, 24, 1, 16, 0], "host bits set"),
            (&[2, 0, 24, 1, 24, 0], "not after the previous prefix"),
            (&[2, 0, 24, 1, 16, 0], "IPv4 prefix 1"),
            (&[1, 0, 24, 1, 7], "1 bytes after the last prefix"),
            (
                &[
                    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
                ],
                "over 64 bits",
            ),
        ];
        for (body, wanted) in bodies {
            let e = decode_bytes(&packed_body(body), MAX_PREFIXES).unwrap_err();
            assert!(e.contains(wanted), "{body:?}: {e}");
        }
        for text in ["AQ", "AQ==\n", "A Q==", "*"] {
            let e = decode(text, MAX_PREFIXES).unwrap_err();
            assert!(e.contains("base64"), "{text:?}: {e}");
        }
        assert!(encode(&[Net::V4(1, 24)]).unwrap_err().contains("host bits"));
        assert!(encode(&[Net::V6(0, 129)]).is_err());
    }

    #[test]
    fn the_bounds_hold_before_anything_large_is_allocated() {
        // A declared count over the caller's budget, and one the bytes cannot hold.
        let nets = parse_set("192.0.2.0/24 198.51.100.0/24 203.0.113.0/24").unwrap();
        let packed = encode(&nets).unwrap();
        assert_eq!(decode(&packed, 3).unwrap().len(), 3);
        assert!(
            decode(&packed, 2)
                .unwrap_err()
                .contains("more than the 2 allowed")
        );
        let e = decode_bytes(&packed_body(&[0xff, 0xff, 0x3f, 0]), MAX_PREFIXES).unwrap_err();
        assert!(e.contains("declares 1048575 prefixes"), "{e}");
        let e = decode_bytes(&packed_body(&[0xff, 0xff, 0xff, 0x7f, 0]), MAX_PREFIXES).unwrap_err();
        assert!(e.contains("more than the 2000000 allowed"), "{e}");
        // A bomb: 17 MiB of zeros deflate to a few KB, and stop at the limit.
        let zeros = vec![0u8; MAX_BODY_BYTES + (1 << 20)];
        let bomb = packed_body(&zeros);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        let e = decode_bytes(&bomb, MAX_PREFIXES).unwrap_err();
        assert!(e.contains("inflates past 16777216 bytes"), "{e}");
    }
}
