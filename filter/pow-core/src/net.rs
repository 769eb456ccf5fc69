//! The client's address: `source.address` (`ip:port`, `[v6]:port` or a bare address), or the
//! `X-Forwarded-For` chain when a number of trusted hops is configured; and the network a
//! challenge or cookie is bound to (/24 for IPv4, /64 for IPv6).

use std::net::{IpAddr, SocketAddr};

use crate::lists::canonical;

/// Parses `1.2.3.4:5678`, `[2001:db8::1]:443`, `1.2.3.4` or `2001:db8::1`.
pub fn parse_address(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(canonical(sa.ip()));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    // `[v6]` without a port.
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<IpAddr>().ok().map(canonical)
}

/// The client address, as Envoy's `xff_num_trusted_hops` defines it. With `trusted_hops` = 0
/// it is the peer, `source.address`, and X-Forwarded-For is never read. With N > 0, N proxies
/// in front of the gateway each appended the address they saw to X-Forwarded-For, and Envoy
/// (with `use_remote_address`, as Istio's gateways run) appended the peer after them: the client
/// is the entry N places left of that peer. The peer is added to the chain when Envoy did not
/// append it, so both deliveries read the same. A chain too short for N, or an entry there that
/// is not an address, gives the peer, as Envoy falls back to it. Entries left of the client's
/// are whatever the client wrote, and are never read.
pub fn client_ip(source: Option<&str>, xff: Option<&str>, trusted_hops: u8) -> Option<IpAddr> {
    let peer = source.and_then(parse_address);
    if trusted_hops == 0 {
        return peer;
    }
    let Some(xff) = xff else { return peer };
    let mut entries: Vec<&str> = xff.split(',').map(str::trim).collect();
    // Without the peer at the end, the chain starts one place earlier.
    let appended = match (entries.last().and_then(|e| parse_address(e)), peer) {
        (Some(last), Some(p)) => last == p,
        _ => false,
    };
    if !appended {
        entries.push("");
    }
    let n = usize::from(trusted_hops);
    entries
        .len()
        .checked_sub(n + 1)
        .and_then(|i| entries.get(i))
        .and_then(|e| parse_address(e))
        .or(peer)
}

/// The bytes a challenge or a cookie is bound to: a family tag, then the /24 (IPv4) or the
/// /64 (IPv6), zero-padded to 17 bytes.
pub fn binding_net(ip: IpAddr) -> [u8; 17] {
    let mut out = [0u8; 17];
    match canonical(ip) {
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
        assert_eq!(parse_address("[::ffff:1.2.3.4]:80"), Some(ip("1.2.3.4")));
        for bad in [
            "",
            "1.2.3.4:",
            "1.2.3.4:99999",
            "[1.2.3.4]:80x",
            "host:80",
            "[::1",
        ] {
            assert_eq!(parse_address(bad), None, "{bad}");
        }
    }

    #[test]
    fn forwarded_for_counts_as_envoy_counts() {
        let src = Some("10.0.0.1:999");
        // As Envoy delivers it: the peer appended last.
        let xff = Some("6.6.6.6, 203.0.113.9, 198.51.100.7, 10.0.0.1");
        assert_eq!(client_ip(src, xff, 0), Some(ip("10.0.0.1")));
        assert_eq!(client_ip(src, xff, 1), Some(ip("198.51.100.7")));
        assert_eq!(client_ip(src, xff, 2), Some(ip("203.0.113.9")));
        assert_eq!(client_ip(src, xff, 3), Some(ip("6.6.6.6")));
        // Without the peer appended, the same entries are found.
        let bare = Some("6.6.6.6, 203.0.113.9, 198.51.100.7");
        assert_eq!(client_ip(src, bare, 1), Some(ip("198.51.100.7")));
        assert_eq!(client_ip(src, bare, 3), Some(ip("6.6.6.6")));
        // Shorter than the trusted hops, missing or garbage: the peer.
        assert_eq!(client_ip(src, xff, 4), Some(ip("10.0.0.1")));
        assert_eq!(client_ip(src, bare, 4), Some(ip("10.0.0.1")));
        assert_eq!(client_ip(src, None, 1), Some(ip("10.0.0.1")));
        assert_eq!(client_ip(src, Some("junk"), 1), Some(ip("10.0.0.1")));
        assert_eq!(
            client_ip(src, Some("junk, 10.0.0.1"), 1),
            Some(ip("10.0.0.1"))
        );
        assert_eq!(client_ip(src, Some(""), 1), Some(ip("10.0.0.1")));
        // No peer: the chain is read as delivered without it.
        assert_eq!(
            client_ip(None, Some("[2001:db8::5]:1"), 1),
            Some(ip("2001:db8::5"))
        );
        assert_eq!(client_ip(None, None, 0), None);
    }

    #[test]
    fn binding_is_the_24_or_the_64() {
        assert_eq!(binding_net(ip("192.0.2.1")), binding_net(ip("192.0.2.254")));
        assert_ne!(binding_net(ip("192.0.2.1")), binding_net(ip("192.0.3.1")));
        assert_eq!(
            binding_net(ip("::ffff:192.0.2.1")),
            binding_net(ip("192.0.2.9"))
        );
        assert_eq!(
            binding_net(ip("2001:db8:1:2::1")),
            binding_net(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            binding_net(ip("2001:db8:1:2::1")),
            binding_net(ip("2001:db8:1:3::1"))
        );
        // An IPv4 /24 never equals an IPv6 /64 that happens to share bytes.
        assert_ne!(binding_net(ip("192.0.2.1")), binding_net(ip("c000:0200::")));
    }
}
