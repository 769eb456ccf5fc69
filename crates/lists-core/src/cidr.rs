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
        let v4 = split(merge(self.v4), |addr, len| {
            Ipv4Net::new(Ipv4Addr::from(addr), len).ok()
        });
        let v6 = split(merge(self.v6), |addr, len| {
            Ipv6Net::new(Ipv6Addr::from(addr), len).ok()
        });
        (v4, v6)
    }
}

/// An address of one family as an unsigned integer of its width (`u32`, `u128`), so that each
/// family is aggregated in its own width.
trait Address: Copy + Ord {
    const WIDTH: u32;
    const ZERO: Self;
    const ONE: Self;
    const MAX: Self;
    fn trailing_zeros(self) -> u32;
    fn leading_zeros(self) -> u32;
    fn wrapping_sub(self, other: Self) -> Self;
    fn checked_add(self, other: Self) -> Option<Self>;
    /// `2^bits`, for `bits` below the width.
    fn power_of_two(bits: u32) -> Self;
}

macro_rules! address {
    ($int:ty) => {
        impl Address for $int {
            const WIDTH: u32 = <$int>::BITS;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MAX: Self = <$int>::MAX;
            fn trailing_zeros(self) -> u32 {
                <$int>::trailing_zeros(self)
            }
            fn leading_zeros(self) -> u32 {
                <$int>::leading_zeros(self)
            }
            fn wrapping_sub(self, other: Self) -> Self {
                <$int>::wrapping_sub(self, other)
            }
            fn checked_add(self, other: Self) -> Option<Self> {
                <$int>::checked_add(self, other)
            }
            fn power_of_two(bits: u32) -> Self {
                1 << bits
            }
        }
    };
}

address!(u32);
address!(u128);

/// Sorts and joins overlapping or adjacent ranges.
fn merge<A: Address>(mut ranges: Vec<(A, A)>) -> Vec<(A, A)> {
    ranges.sort_unstable();
    let mut merged: Vec<(A, A)> = Vec::with_capacity(ranges.len());
    for (first, last) in ranges {
        match merged.last_mut() {
            Some((_, end)) if first <= end.checked_add(A::ONE).unwrap_or(A::MAX) => {
                *end = (*end).max(last)
            }
            _ => merged.push((first, last)),
        }
    }
    merged
}

/// Cuts each range into the largest aligned blocks, made into prefixes by `net` (from an
/// address and a prefix length).
fn split<A: Address, N>(ranges: Vec<(A, A)>, net: impl Fn(A, u8) -> Option<N>) -> Vec<N> {
    let mut nets = Vec::with_capacity(ranges.len());
    for (mut first, last) in ranges {
        loop {
            // The largest block aligned at `first`...
            let align = if first == A::ZERO {
                A::WIDTH
            } else {
                first.trailing_zeros()
            };
            // ...that does not run past `last`: log2 of the range's size, rounded down.
            let span = last.wrapping_sub(first); // size - 1
            let fit = match span.checked_add(A::ONE) {
                Some(size) => A::WIDTH - 1 - size.leading_zeros(),
                None => A::WIDTH,
            };
            let bits = align.min(fit);
            // A prefix length is at most 128: it fits a u8.
            nets.extend(net(first, (A::WIDTH - bits) as u8));
            if bits >= A::WIDTH {
                break;
            }
            match first.checked_add(A::power_of_two(bits)) {
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

    /// Random ranges in a window of 4096 addresses, at the bottom and at the top of the IPv4
    /// space: the prefixes cover exactly their union, do not overlap, are sorted, and no two
    /// neighbours could be one prefix.
    #[test]
    fn random_ranges_collapse_to_their_exact_union_in_the_fewest_prefixes() {
        const WINDOW: u32 = 4096;
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut random = |below: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % u64::from(below)) as u32
        };
        for base in [0, u32::MAX - (WINDOW - 1)] {
            for _ in 0..300 {
                let mut ranges = Ranges::new();
                let mut covered = vec![false; WINDOW as usize];
                for _ in 0..=random(8) {
                    let first = random(WINDOW);
                    let last = first + random(WINDOW - first);
                    ranges.add_v4(Ipv4Addr::from(base + first), Ipv4Addr::from(base + last));
                    covered[first as usize..=last as usize].fill(true);
                }
                let nets = ranges.collapse().0;
                let mut by_nets = vec![false; WINDOW as usize];
                for net in &nets {
                    let first = u32::from(net.network()) - base;
                    let last = u32::from(net.broadcast()) - base;
                    let block = &mut by_nets[first as usize..=last as usize];
                    assert!(block.iter().all(|b| !b), "{net} overlaps another prefix");
                    block.fill(true);
                }
                assert!(by_nets == covered, "{nets:?}");
                for pair in nets.windows(2) {
                    assert!(pair[0].network() < pair[1].network(), "{pair:?}");
                    let siblings = pair[0].prefix_len() == pair[1].prefix_len()
                        && pair[0].supernet() == pair[1].supernet();
                    assert!(!siblings, "{pair:?} make one prefix");
                }
            }
        }
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
