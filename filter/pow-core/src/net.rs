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
//! (`2002:AABB:CCDD::/48`, RFC 3056), NAT64's well-known prefix `64:ff9b::/96` and the
//! configured NAT64 prefixes (RFC 6052: /32, /40, /48, /56, /64 or /96). Behind a NAT64 or SIIT
//! front every IPv4 client would otherwise share one /64, and a listed IPv4 address would
//! escape the lists.

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

    /// The IPv4 address embedded in `a`, if `a` is in this prefix.
    fn extract(&self, a: Ipv6Addr) -> Option<Ipv4Addr> {
        if u128::from(a) & mask(self.len) != self.bits {
            return None;
        }
        let o = a.octets();
        // RFC 6052, figure 1: the IPv4 octets around bits 64-71 (the "u" octet, always zero).
        let v4 = match self.len {
            32 => [o[4], o[5], o[6], o[7]],
            40 => [o[5], o[6], o[7], o[9]],
            48 => [o[6], o[7], o[9], o[10]],
            56 => [o[7], o[9], o[10], o[11]],
            64 => [o[9], o[10], o[11], o[12]],
            _ => [o[12], o[13], o[14], o[15]],
        };
        (self.len == 96 || o[8] == 0).then(|| Ipv4Addr::from(v4))
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
    let o = a.octets();
    let bits = u128::from(a);
    if let Some(v4) = a.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    // IPv4-compatible: ::a.b.c.d, but not :: and ::1.
    if bits >> 32 == 0 && bits > 1 {
        return IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if o[0] == 0x20 && o[1] == 0x02 {
        return IpAddr::V4(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    std::iter::once(&NAT64_WELL_KNOWN)
        .chain(nat64)
        .find_map(|p| p.extract(a))
        .map_or(ip, IpAddr::V4)
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
