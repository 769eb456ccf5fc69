//! The client's address and the network a challenge or cookie is bound to.
//!
//! The address is `source.address` as Envoy computed it (`ip:port`, `[v6]:port` or a bare
//! address): when the mesh trusts proxies in front of the gateway (Istio's `numTrustedProxies`,
//! Envoy's `xff_num_trusted_hops`), Envoy has already taken the client from `X-Forwarded-For`
//! and put it there, so the filter never reads `X-Forwarded-For` itself (reading it again would
//! count the trusted hops twice).
//!
//! An IPv6 address that carries an IPv4 one is read as that IPv4 address, for the lists and for
//! the binding: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), 6to4
//! (`2002:AABB:CCDD::/48`, RFC 3056), Teredo (`2001::/32`, RFC 4380: the client's address,
//! inverted, in the last 32 bits), NAT64's well-known prefix `64:ff9b::/96` and the
//! configured NAT64 prefixes (RFC 6052: /32, /40, /48, /56, /64 or /96). Behind a NAT64 or SIIT
//! front (or one Teredo server) every IPv4 client would otherwise share one /64, and a listed
//! IPv4 address would escape the lists. List entries written in these forms are read the same
//! way ([`ipv4_of_prefix`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// NAT64's well-known prefix (RFC 6052, section 2.1): always recognised.
pub const NAT64_WELL_KNOWN: Nat64Prefix = Nat64Prefix {
    bits: 0x0064_ff9b_u128 << 96,
    len: 96,
};

/// A NAT64 prefix (RFC 6052, section 2.2): where the IPv4 address sits depends on its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nat64Prefix {
    bits: u128,
    len: u8,
}

impl Nat64Prefix {
    /// Parses `2001:db8:64::/96`: an IPv6 prefix of length 32, 40, 48, 56, 64 or 96, with no
    /// bit set past its length.
    pub fn parse(text: &str) -> Result<Nat64Prefix, String> {
        let (addr, len) = text
            .split_once('/')
            .ok_or("an IPv6 prefix with its length, such as 64:ff9b:1::/48")?;
        let addr: Ipv6Addr = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IPv6 address"))?;
        let len: u8 = match len.parse() {
            Ok(l @ (32 | 40 | 48 | 56 | 64 | 96)) => l,
            _ => return Err("the length must be 32, 40, 48, 56, 64 or 96 (RFC 6052)".to_owned()),
        };
        let bits = u128::from(addr);
        if bits & !mask(len) != 0 {
            return Err(format!("`{text}` has bits set past /{len}"));
        }
        Ok(Nat64Prefix { bits, len })
    }

    /// Where this prefix carries the IPv4 address: RFC 6052, figure 1, around bits 64-71 (the
    /// "u" octet, which must be zero).
    const fn embedding(&self) -> Embedding {
        let segments: &'static [(u8, u8)] = match self.len {
            32 => &[(32, 64)],
            40 => &[(40, 64), (72, 80)],
            48 => &[(48, 64), (72, 88)],
            56 => &[(56, 64), (72, 96)],
            64 => &[(72, 104)],
            _ => &[(96, 128)],
        };
        Embedding {
            bits: self.bits,
            len: self.len,
            segments,
            inverted: false,
            u_octet: self.len != 96,
        }
    }
}

/// An IPv6 range whose addresses carry an IPv4 address, and where.
#[derive(Debug, Clone, Copy)]
struct Embedding {
    bits: u128,
    len: u8,
    /// The bit ranges (`start..end`, bit 0 the most significant) holding the IPv4 address, in
    /// order.
    segments: &'static [(u8, u8)],
    /// Teredo carries the client's address with every bit flipped (RFC 4380, section 4).
    inverted: bool,
    /// NAT64 prefixes shorter than /96 keep bits 64-71 zero (RFC 6052, section 2.2).
    u_octet: bool,
}

/// The ranges every address is read through, besides the configured NAT64 prefixes:
/// IPv4-mapped (`::ffff:0:0/96`), 6to4 (`2002::/16`, RFC 3056), Teredo (`2001::/32`, RFC 4380:
/// the client's address, inverted, in the last 32 bits) and NAT64's well-known prefix.
/// IPv4-compatible addresses (`::/96`) are read in [`canonical`] itself, `::` and `::1` aside.
const EMBEDDINGS: [Embedding; 4] = [
    Embedding::plain(0xffff_u128 << 32, 96, &[(96, 128)]),
    Embedding::plain(0x2002_u128 << 112, 16, &[(16, 48)]),
    Embedding {
        inverted: true,
        ..Embedding::plain(0x2001_0000_u128 << 96, 32, &[(96, 128)])
    },
    NAT64_WELL_KNOWN.embedding(),
];

/// IPv4-compatible addresses: `::a.b.c.d` (RFC 4291, section 2.5.5.1).
const COMPATIBLE: Embedding = Embedding::plain(0, 96, &[(96, 128)]);

impl Embedding {
    /// The range `bits`/`len`, carrying the IPv4 address as it is at `segments`, with no "u"
    /// octet: every embedding but Teredo's and the longer NAT64 prefixes'.
    const fn plain(bits: u128, len: u8, segments: &'static [(u8, u8)]) -> Embedding {
        Embedding {
            bits,
            len,
            segments,
            inverted: false,
            u_octet: false,
        }
    }

    fn holds(&self, a: u128) -> bool {
        a & mask(self.len) == self.bits && !(self.u_octet && (a >> 56) & 0xff != 0)
    }

    /// The IPv4 bits at these segments of `a`, and how many of them lie before bit `upto`.
    fn ipv4_of(&self, a: u128, upto: u8) -> (u32, u8) {
        // A u64, so that a 32-bit segment shifts in without overflow; 32 bits in all.
        let (mut v4, mut known) = (0u64, 0u8);
        for &(start, end) in self.segments {
            let width = end - start;
            let chunk = (a >> (128 - u32::from(end))) & ((1u128 << width) - 1);
            v4 = (v4 << width) | chunk as u64;
            known += upto.clamp(start, end) - start;
        }
        let v4 = v4 as u32;
        (if self.inverted { !v4 } else { v4 }, known)
    }

    fn last_bit(&self) -> u8 {
        self.segments.last().map_or(self.len, |&(_, end)| end)
    }
}

fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        l => u128::MAX << (128 - u32::from(l)),
    }
}

/// The IPv4 address an IPv6 address carries (see the module documentation), or the address.
pub fn canonical(ip: IpAddr, nat64: &[Nat64Prefix]) -> IpAddr {
    let IpAddr::V6(a) = ip else {
        return ip;
    };
    let bits = u128::from(a);
    // IPv4-compatible: ::a.b.c.d, but not :: and ::1.
    if bits >> 32 == 0 && bits > 1 {
        return IpAddr::V4(Ipv4Addr::from(bits as u32));
    }
    let configured = nat64.iter().map(Nat64Prefix::embedding);
    EMBEDDINGS
        .into_iter()
        .chain(configured)
        .find(|e| e.holds(bits))
        .map_or(ip, |e| IpAddr::V4(Ipv4Addr::from(e.ipv4_of(bits, 128).0)))
}

/// How the filter reads a list entry given as an IPv6 prefix ([`ipv4_of_prefix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedAs {
    /// An IPv6 prefix as it is.
    V6,
    /// The IPv4 prefix (address, length) its addresses are read as.
    V4(u32, u8),
}

/// How a list entry written as an IPv6 prefix is matched, given that every address is read
/// through [`canonical`] before the lookup: an entry inside a range that carries IPv4 addresses
/// (`::ffff:198.51.100.0/120`, `2002:cb00:7100::/40`, `64:ff9b::c000:200/120`, Teredo, a
/// configured NAT64 prefix) would otherwise never match, so it is the IPv4 prefix it denotes;
/// one that pins bits past the IPv4 part (a 6to4 /56) is the whole IPv4 address, as every
/// address in it is read as that one. An entry that is the whole range, or that pins the
/// Teredo server but not the client, names no IPv4 address in particular: it stays IPv6
/// (reading `2002::/16` as `0.0.0.0/0` would list every IPv4 client).
pub fn ipv4_of_prefix(bits: u128, len: u8, nat64: &[Nat64Prefix]) -> ListedAs {
    // `::` and `::1` are read as themselves, not as IPv4-compatible addresses.
    if len == 128 && bits <= 1 {
        return ListedAs::V6;
    }
    let configured = nat64.iter().map(Nat64Prefix::embedding);
    let Some(e) = std::iter::once(COMPATIBLE)
        .chain(EMBEDDINGS)
        .chain(configured)
        .find(|e| len >= e.len && e.holds(bits))
    else {
        return ListedAs::V6;
    };
    let first_v4_bit = e.segments.first().map_or(e.len, |&(start, _)| start);
    if len <= first_v4_bit {
        return ListedAs::V6;
    }
    let (v4, known) = e.ipv4_of(bits, len);
    let known = if len > e.last_bit() { 32 } else { known };
    let v4_mask = u32::MAX.checked_shl(32 - u32::from(known)).unwrap_or(0);
    ListedAs::V4(v4 & v4_mask, known)
}

/// Parses `1.2.3.4:5678`, `[2001:db8::1]:443`, `1.2.3.4` or `2001:db8::1` (not canonicalised).
pub fn parse_address(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    // `[v6]` without a port.
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<IpAddr>().ok()
}

/// The client address: `source.address`, canonicalised; `None` when it is missing or not an
/// address (a pipe, an internal listener).
pub fn client_ip(source: Option<&str>, nat64: &[Nat64Prefix]) -> Option<IpAddr> {
    source
        .and_then(parse_address)
        .map(|ip| canonical(ip, nat64))
}

/// The bytes of a client's network a challenge or a cookie is bound to ([`binding_net`]).
pub type Net = [u8; 9];

/// The binding of a client whose address is unusable: a family tag of its own, so that such
/// clients are challenged (and may pay) rather than let through.
pub const NO_ADDRESS: Net = [0; 9];

/// The bytes a challenge or a cookie is bound to: a family tag, then the /24 (IPv4) or the
/// /64 (IPv6), zero-padded to 9 bytes. `ip` is canonical ([`client_ip`]).
pub fn binding_net(ip: IpAddr) -> Net {
    let mut out = [0u8; 9];
    match ip {
        IpAddr::V4(a) => {
            out[0] = 4;
            out[1..4].copy_from_slice(&a.octets()[..3]);
        }
        IpAddr::V6(a) => {
            out[0] = 6;
            out[1..9].copy_from_slice(&a.octets()[..8]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn source_address_forms() {
        assert_eq!(parse_address("1.2.3.4:5678"), Some(ip("1.2.3.4")));
        assert_eq!(parse_address("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(parse_address("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_address("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(parse_address("1.2.3.4"), Some(ip("1.2.3.4")));
        assert_eq!(
            client_ip(Some("[::ffff:1.2.3.4]:80"), &[]),
            Some(ip("1.2.3.4"))
        );
        for bad in [
            "",
            "1.2.3.4:",
            "1.2.3.4:99999",
            "[1.2.3.4]:80x",
            "host:80",
            "[::1",
            "pipe:/run/x.sock",
        ] {
            assert_eq!(client_ip(Some(bad), &[]), None, "{bad}");
        }
        assert_eq!(client_ip(None, &[]), None);
    }

    #[test]
    fn embedded_ipv4_is_read_as_ipv4() {
        let v4 = ip("185.220.101.7");
        let custom = [
            Nat64Prefix::parse("2001:db8:64::/96").unwrap(),
            Nat64Prefix::parse("2001:db8:48::/48").unwrap(),
            Nat64Prefix::parse("2001:db8::/32").unwrap(),
            Nat64Prefix::parse("2001:db9:100::/40").unwrap(),
            Nat64Prefix::parse("2001:db9:0:5600::/56").unwrap(),
            Nat64Prefix::parse("2001:db9:0:64::/64").unwrap(),
        ];
        for embedded in [
            "::ffff:185.220.101.7",
            "::185.220.101.7",
            "2002:b9dc:6507::1",
            "2002:b9dc:6507:ffff::",
            "64:ff9b::b9dc:6507",
            "2001:db8:64::b9dc:6507",
            // RFC 6052 figure 1 layouts (bits 64-71 stay zero).
            "2001:db8:48:b9dc:65:700::",
            "2001:db8:b9dc:6507::",
            "2001:db9:1b9:dc65:7::",
            "2001:db9:0:56b9:dc:6507::",
            "2001:db9:0:64:b9:dc65:700::",
            // Teredo: server 65.54.227.120, the client inverted in the last 32 bits.
            "2001:0:4136:e378:8000:63bf:4623:9af8",
        ] {
            assert_eq!(canonical(ip(embedded), &custom), v4, "{embedded}");
        }
        for native in [
            "::",
            "::1",
            "2a01:4f8::1",
            "64:ff9b:1::b9dc:6507",
            // A configured /48 with the u octet set is not a NAT64 address.
            "2001:db8:48:b9dc:ff65:700::",
        ] {
            assert_eq!(canonical(ip(native), &custom), ip(native), "{native}");
        }
        // Without configuration only the well-known prefix is NAT64.
        assert_eq!(
            canonical(ip("2001:db8:64::b9dc:6507"), &[]),
            ip("2001:db8:64::b9dc:6507")
        );
    }

    #[test]
    fn list_entries_in_an_ipv6_form_of_ipv4_are_read_as_ipv4() {
        let custom = [Nat64Prefix::parse("2001:db8:48::/48").unwrap()];
        let listed = |entry: &str| {
            let (addr, len) = entry.split_once('/').unwrap();
            ipv4_of_prefix(
                u128::from(addr.parse::<Ipv6Addr>().unwrap()),
                len.parse().unwrap(),
                &custom,
            )
        };
        let v4 = |a: &str, len: u8| ListedAs::V4(u32::from(a.parse::<Ipv4Addr>().unwrap()), len);
        for (entry, expected) in [
            ("::ffff:198.51.100.0/120", v4("198.51.100.0", 24)),
            ("::ffff:198.51.100.7/128", v4("198.51.100.7", 32)),
            ("::198.51.100.0/120", v4("198.51.100.0", 24)),
            ("2002:cb00:7100::/40", v4("203.0.113.0", 24)),
            ("2002:cb00:7105::/48", v4("203.0.113.5", 32)),
            // Past the IPv4 part: every address in it is read as that one IPv4 address.
            ("2002:cb00:7105:100::/56", v4("203.0.113.5", 32)),
            ("64:ff9b::c000:200/120", v4("192.0.2.0", 24)),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fd00/120",
                v4("192.0.2.0", 24),
            ),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2/128",
                v4("192.0.2.45", 32),
            ),
            // A configured /48: the IPv4 address around the u octet.
            ("2001:db8:48:c000:2::/80", v4("192.0.2.0", 24)),
            ("2001:db8:48:c000::/64", v4("192.0.0.0", 16)),
            // Whole ranges, and Teredo servers, name no IPv4 address in particular.
            ("2002::/16", ListedAs::V6),
            ("2001::/32", ListedAs::V6),
            ("2001:0:4136:e378::/64", ListedAs::V6),
            ("::ffff:0:0/96", ListedAs::V6),
            ("64:ff9b::/96", ListedAs::V6),
            ("2001:db8:48::/48", ListedAs::V6),
            ("::/0", ListedAs::V6),
            ("::1/128", ListedAs::V6),
            ("2a0b:f4c2::/40", ListedAs::V6),
            ("2001:db8:48:c000:ff00::/72", ListedAs::V6),
        ] {
            assert_eq!(listed(entry), expected, "{entry}");
        }
    }

    #[test]
    fn nat64_prefixes_are_checked() {
        for bad in [
            "2001:db8::",
            "2001:db8::/33",
            "2001:db8::1/96",
            "1.2.3.0/24",
            "x/96",
            "2001:db8::/128",
        ] {
            assert!(Nat64Prefix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn binding_is_the_24_or_the_64() {
        let net = |s: &str| binding_net(canonical(ip(s), &[]));
        assert_eq!(net("192.0.2.1"), net("192.0.2.254"));
        assert_ne!(net("192.0.2.1"), net("192.0.3.1"));
        assert_eq!(net("::ffff:192.0.2.1"), net("192.0.2.9"));
        assert_eq!(net("64:ff9b::192.0.2.1"), net("192.0.2.9"));
        assert_ne!(net("64:ff9b::192.0.2.1"), net("64:ff9b::192.0.3.1"));
        assert_eq!(net("2001:db8:1:2::1"), net("2001:db8:1:2:ffff::9"));
        assert_ne!(net("2001:db8:1:2::1"), net("2001:db8:1:3::1"));
        // An IPv4 /24 never equals an IPv6 /64 that happens to share bytes, nor no address.
        assert_ne!(net("192.0.2.1"), net("c000:0200::"));
        assert_ne!(net("0.0.0.1"), NO_ADDRESS);
    }
}
