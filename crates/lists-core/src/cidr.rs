//! Exact aggregation of address ranges into the minimal set of CIDR prefixes.
//!
//! The ranges are merged (overlapping or adjacent ones join), then each merged range is cut
//! greedily into the largest aligned blocks it holds. The minimal prefix set covering a set of
//! addresses is unique, and this is it: the same set Python's `ipaddress.collapse_addresses`
//! returns over `summarize_address_range` of the same ranges (the tests check it against
//! Python). Ranges that are not CIDR-aligned are split exactly, never rounded.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// Inclusive address ranges of both families, in any order, overlapping or not.
#[derive(Debug, Default, Clone)]
pub struct Ranges {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Ranges {
    pub fn new() -> Self {
        Ranges::default()
    }

    /// Adds `first..=last` (callers ensure `first <= last`).
    pub fn add_v4(&mut self, first: Ipv4Addr, last: Ipv4Addr) {
        self.v4.push((first.into(), last.into()));
    }

    pub fn add_v6(&mut self, first: Ipv6Addr, last: Ipv6Addr) {
        self.v6.push((first.into(), last.into()));
    }

    pub fn add_net_v4(&mut self, net: Ipv4Net) {
        self.add_v4(net.network(), net.broadcast());
    }

    pub fn add_net_v6(&mut self, net: Ipv6Net) {
        self.add_v6(net.network(), net.broadcast());
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The minimal aggregated prefixes of each family, sorted by address.
    pub fn collapse(self) -> (Vec<Ipv4Net>, Vec<Ipv6Net>) {
        let wide: Vec<(u128, u128)> = self
            .v4
            .into_iter()
            .map(|(a, b)| (u128::from(a), u128::from(b)))
            .collect();
        let v4 = split(merge(wide), 32)
            .into_iter()
            .filter_map(|(addr, len)| {
                let addr = u32::try_from(addr).ok()?;
                Ipv4Net::new(Ipv4Addr::from(addr), len).ok()
            })
            .collect();
        let v6 = split(merge(self.v6), 128)
            .into_iter()
            .filter_map(|(addr, len)| Ipv6Net::new(Ipv6Addr::from(addr), len).ok())
            .collect();
        (v4, v6)
    }
}

/// Sorts and joins overlapping or adjacent ranges.
fn merge(mut ranges: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match merged.last_mut() {
            Some((_, end)) if first <= end.saturating_add(1) => *end = (*end).max(last),
            _ => merged.push((first, last)),
        }
    }
    merged
}

/// Cuts each range into the largest aligned blocks, for addresses `width` bits wide.
fn split(ranges: Vec<(u128, u128)>, width: u8) -> Vec<(u128, u8)> {
    let mut nets = Vec::with_capacity(ranges.len());
    for (mut first, last) in ranges {
        loop {
            // The largest block aligned at `first`...
            let align = if first == 0 {
                u32::from(width)
            } else {
                first.trailing_zeros().min(u32::from(width))
            };
            // ...that does not run past `last`: log2 of the range's size, rounded down.
            let span = last - first; // size - 1
            let fit = if span == u128::MAX {
                128
            } else {
                127 - (span + 1).leading_zeros()
            };
            let bits = align.min(fit);
            nets.push((first, width - bits as u8));
            if bits >= 128 {
                break;
            }
            let next = first.checked_add(1u128 << bits);
            match next {
                Some(next) if next <= last => first = next,
                _ => break,
            }
        }
    }
    nets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(ranges: &[(&str, &str)]) -> Vec<String> {
        let mut r = Ranges::new();
        for (a, b) in ranges {
            r.add_v4(a.parse().unwrap(), b.parse().unwrap());
        }
        r.collapse().0.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn an_unaligned_range_is_split_exactly() {
        // python3 -c "import ipaddress as i; print(list(i.summarize_address_range(
        //   i.ip_address('10.0.0.1'), i.ip_address('10.0.0.10'))))"
        assert_eq!(
            v4(&[("10.0.0.1", "10.0.0.10")]),
            [
                "10.0.0.1/32",
                "10.0.0.2/31",
                "10.0.0.4/30",
                "10.0.0.8/31",
                "10.0.0.10/32"
            ]
        );
    }

    #[test]
    fn adjacent_and_overlapping_ranges_merge_into_the_fewest_prefixes() {
        assert_eq!(
            v4(&[
                ("192.0.2.128", "192.0.2.255"),
                ("192.0.2.0", "192.0.2.127"),
                ("192.0.2.10", "192.0.2.20"),
                ("198.51.100.0", "198.51.100.0"),
            ]),
            ["192.0.2.0/24", "198.51.100.0/32"]
        );
    }

    #[test]
    fn the_whole_space_of_each_family_is_one_prefix() {
        assert_eq!(v4(&[("0.0.0.0", "255.255.255.255")]), ["0.0.0.0/0"]);
        let mut r = Ranges::new();
        r.add_v6(Ipv6Addr::UNSPECIFIED, Ipv6Addr::from(u128::MAX));
        r.add_v6("::1".parse().unwrap(), "::2".parse().unwrap());
        assert_eq!(r.collapse().1, vec!["::/0".parse::<Ipv6Net>().unwrap()]);
        assert_eq!(
            v4(&[("255.255.255.254", "255.255.255.255")]),
            ["255.255.255.254/31"]
        );
    }

    #[test]
    fn ipv6_ranges_split_like_ipv4() {
        let mut r = Ranges::new();
        r.add_v6(
            "2001:db8::".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        );
        let nets: Vec<String> = r.collapse().1.iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["2001:db8::/127", "2001:db8::2/128"]);
    }
}
