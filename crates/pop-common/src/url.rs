//! What the tools ask of a URL's host.

/// Whether `host` (as a URL writes it, IPv6 in brackets) is this machine: `localhost` or a
/// loopback address (127.0.0.0/8, ::1), the only hosts the tools reach over plain http, since
/// nothing sent there leaves the machine.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_localhost_127_slash_8_and_ipv6_one() {
        for host in [
            "localhost",
            "LocalHost",
            "127.0.0.1",
            "127.1.2.3",
            "[::1]",
            "::1",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "example.com",
            "10.0.0.1",
            "[::2]",
            "localhost.example.com",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
