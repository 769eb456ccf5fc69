//! The policy lists inside the filter: per list, sorted disjoint prefixes searched by binary
//! search.
//!
//! Each list keeps three struct-of-arrays tables: IPv4 (`u32` start + prefix length, 5 bytes a
//! prefix), IPv6 prefixes of /64 or shorter (`u64` start of the upper half + length, 9 bytes) and
//! longer IPv6 prefixes (`u128` + length, 17 bytes). A prefix contained in another of the same
//! list is dropped at build time, so the prefixes left are disjoint and a lookup is one
//! `partition_point` per table: O(log n), flat from a thousand to a million prefixes. A million
//! prefixes take at most 17 MB in the worst case (all IPv6 longer than /64) and 5 to 9 MB in
//! the usual mixes; [`ListTable::heap_bytes`] tells.

use std::net::IpAddr;

use crate::config::Lists;
use crate::net::{self, ListedAs, Nat64Prefix};

/// One parsed CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    V4(u32, u8),
    V6(u128, u8),
}

/// Parses a set: CIDRs (or bare addresses) separated by whitespace; `#` comments to the end of
/// the line. Host bits are cleared. The error names the line and the token.
pub fn parse_set(text: &str) -> Result<Vec<Net>, String> {
    let mut out = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for token in line.split_ascii_whitespace() {
            out.push(
                parse_net(token)
                    .ok_or_else(|| format!("line {}: `{token}` is not a CIDR", lineno + 1))?,
            );
        }
    }
    Ok(out)
}

/// Parses one CIDR (`192.0.2.0/24`, `2001:db8::/32`) or one address (a /32 or /128).
pub fn parse_net(token: &str) -> Option<Net> {
    let (addr, len) = match token.split_once('/') {
        Some((a, l)) => {
            if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (a, Some(l.parse::<u8>().ok()?))
        }
        None => (token, None),
    };
    match addr.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return None;
            }
            Some(Net::V4(u32::from(a) & mask32(len), len))
        }
        IpAddr::V6(a) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return None;
            }
            Some(Net::V6(u128::from(a) & mask128(len), len))
        }
    }
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// Decodes every list of `lists`, text (`sets`) and packed alike, in name order, one at a time
/// (only one list's prefixes are held at once), and hands each to `each`: the one path from
/// either form to the table, so both give the same. The packed lists share one budget of
/// [`crate::packed::MAX_PREFIXES`]. The error is the field (`lists.sets.<name>` or
/// `lists.packed.<name>`) and what is wrong with it.
pub fn decode_each(
    lists: &Lists,
    mut each: impl FnMut(&str, Vec<Net>),
) -> Result<(), (String, String)> {
    let names: std::collections::BTreeSet<&String> =
        lists.sets.keys().chain(lists.packed.keys()).collect();
    let mut budget = crate::packed::MAX_PREFIXES;
    for name in names {
        let nets = match (lists.sets.get(name), lists.packed.get(name)) {
            (Some(_), Some(_)) => {
                return Err((
                    format!("lists.packed.{name}"),
                    "also in lists.sets: a list is either text or packed, not both".to_owned(),
                ));
            }
            (Some(text), None) => parse_set(text).map_err(|e| (format!("lists.sets.{name}"), e))?,
            (None, Some(packed)) => {
                let nets = crate::packed::decode(packed, budget).map_err(|e| {
                    let e = if budget < crate::packed::MAX_PREFIXES {
                        format!(
                            "{e} ({budget} left of the packed lists' {} prefixes)",
                            crate::packed::MAX_PREFIXES
                        )
                    } else {
                        e
                    };
                    (format!("lists.packed.{name}"), e)
                })?;
                budget = budget.saturating_sub(nets.len());
                nets
            }
            (None, None) => continue,
        };
        each(name, nets);
    }
    Ok(())
}

/// Sorted disjoint prefixes of one address width, with an index by the top 16 bits when the
/// table is large: `index[k]` is the position of the first prefix whose start has top bits
/// `>= k`, so a lookup binary-searches one bucket (a few entries even at a million prefixes)
/// instead of the whole table, and its cost stays flat as the lists grow.
#[derive(Debug, Default, Clone)]
struct Table<T> {
    starts: Vec<T>,
    lens: Vec<u8>,
    index: Vec<u32>,
}

/// Below this many prefixes a plain binary search is as fast and the index is not built.
const INDEX_FROM: usize = 4096;

/// What a table needs of its key type.
trait Key: Copy + Ord + std::fmt::Debug {
    /// The top 16 bits.
    fn bucket(self) -> usize;
    /// The last address of the prefix `(self, len)`.
    fn last(self, len: u8) -> Self;
}

impl Key for u32 {
    fn bucket(self) -> usize {
        (self >> 16) as usize
    }
    fn last(self, len: u8) -> Self {
        self | !mask32(len)
    }
}

impl Key for u64 {
    fn bucket(self) -> usize {
        (self >> 48) as usize
    }
    fn last(self, len: u8) -> Self {
        if len == 0 {
            u64::MAX
        } else {
            self | !(u64::MAX << (64 - u32::from(len)))
        }
    }
}

impl Key for u128 {
    fn bucket(self) -> usize {
        (self >> 112) as usize
    }
    fn last(self, len: u8) -> Self {
        self | !mask128(len)
    }
}

impl<T: Key> Table<T> {
    fn build(mut prefixes: Vec<(T, u8)>) -> Self {
        // Shorter first for equal starts, so that a contained prefix always follows its container.
        prefixes.sort_unstable();
        let mut t = Table {
            starts: Vec::with_capacity(prefixes.len()),
            lens: Vec::with_capacity(prefixes.len()),
            index: Vec::new(),
        };
        let mut covered_to: Option<T> = None;
        for (start, len) in prefixes {
            if covered_to.is_some_and(|end| start <= end) {
                continue; // inside the previous kept prefix (CIDR prefixes nest or are disjoint)
            }
            t.starts.push(start);
            t.lens.push(len);
            covered_to = Some(start.last(len));
        }
        t.starts.shrink_to_fit();
        t.lens.shrink_to_fit();
        if t.starts.len() >= INDEX_FROM && t.starts.len() < u32::MAX as usize {
            let mut index = Vec::with_capacity(65_537);
            let mut pos = 0usize;
            for k in 0..=65_536usize {
                while t.starts.get(pos).is_some_and(|s| s.bucket() < k) {
                    pos += 1;
                }
                index.push(pos as u32);
            }
            t.index = index;
        }
        t
    }

    fn contains(&self, addr: T) -> bool {
        let k = addr.bucket();
        let i = match (self.index.get(k), self.index.get(k + 1)) {
            (Some(&lo), Some(&hi)) => {
                let (lo, hi) = (lo as usize, hi as usize);
                // Everything before `lo` starts in an earlier bucket (< addr); everything from
                // `hi` on starts in a later one (> addr): the global partition point is here.
                lo + self
                    .starts
                    .get(lo..hi)
                    .map_or(0, |b| b.partition_point(|&s| s <= addr))
            }
            _ => self.starts.partition_point(|&s| s <= addr),
        };
        if i == 0 {
            return false;
        }
        match (self.starts.get(i - 1), self.lens.get(i - 1)) {
            (Some(&start), Some(&len)) => addr <= start.last(len),
            _ => false,
        }
    }

    fn len(&self) -> usize {
        self.starts.len()
    }

    fn heap_bytes(&self) -> usize {
        self.starts.capacity() * std::mem::size_of::<T>()
            + self.lens.capacity()
            + self.index.capacity() * 4
    }
}

/// One named list.
#[derive(Debug, Default, Clone)]
struct PrefixSet {
    v4: Table<u32>,
    v6_short: Table<u64>,
    v6_long: Table<u128>,
}

impl PrefixSet {
    /// The tables of `nets`, an IPv6 entry that denotes IPv4 addresses (as the filter reads
    /// addresses, through these NAT64 prefixes) taken as that IPv4 prefix
    /// ([`net::ipv4_of_prefix`]).
    fn build(nets: &[Net], nat64: &[Nat64Prefix]) -> Self {
        let (mut v4, mut short, mut long) = (Vec::new(), Vec::new(), Vec::new());
        for net in nets {
            let net = match *net {
                Net::V6(a, l) => match net::ipv4_of_prefix(a, l, nat64) {
                    ListedAs::V4(a, l) => Net::V4(a, l),
                    ListedAs::V6 => Net::V6(a, l),
                },
                v4 => v4,
            };
            match net {
                Net::V4(a, l) => v4.push((a, l)),
                Net::V6(a, l) if l <= 64 => short.push(((a >> 64) as u64, l)),
                Net::V6(a, l) => long.push((a, l)),
            }
        }
        PrefixSet {
            v4: Table::build(v4),
            v6_short: Table::build(short),
            v6_long: Table::build(long),
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(a) => self.v4.contains(u32::from(a)),
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6_short.contains((a >> 64) as u64) || self.v6_long.contains(a)
            }
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`) is its IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// All the lists of one configuration, with their version and generation time.
#[derive(Debug, Default, Clone)]
pub struct ListTable {
    names: Vec<String>,
    sets: Vec<PrefixSet>,
    /// `lists.version`, empty when there are no lists.
    pub version: String,
    /// `lists.generated_at` in Unix seconds.
    pub generated_at: Option<i64>,
}

impl ListTable {
    /// Builds the table from the configuration's lists (already checked by
    /// [`crate::config::PluginConfig::check`]; a set that fails to parse here is an error too),
    /// reading IPv6 forms of IPv4 through the configured NAT64 prefixes as the lookup does.
    pub fn build(lists: Option<&Lists>, nat64: &[Nat64Prefix]) -> Result<ListTable, String> {
        let Some(lists) = lists else {
            return Ok(ListTable::default());
        };
        let mut table = ListTable {
            version: lists.version.clone(),
            generated_at: lists
                .generated_at
                .as_deref()
                .and_then(crate::time::parse_rfc3339),
            ..ListTable::default()
        };
        decode_each(lists, |name, nets| {
            table.names.push(name.to_owned());
            table.sets.push(PrefixSet::build(&nets, nat64));
        })
        // Worded as `PluginConfig::from_json` words it, which the module leaves this to.
        .map_err(|(field, e)| crate::config::err(field, e).to_string())?;
        Ok(table)
    }

    /// Builds a table from already parsed prefixes (benchmarks and tests).
    pub fn from_nets(lists: &[(&str, &[Net])]) -> ListTable {
        ListTable {
            names: lists.iter().map(|(n, _)| (*n).to_owned()).collect(),
            sets: lists
                .iter()
                .map(|(_, nets)| PrefixSet::build(nets, &[]))
                .collect(),
            ..ListTable::default()
        }
    }

    /// The names of the lists, in the order of [`ListTable::lookup`]'s bits.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// A bit per list that holds `ip` (bit i for `names()[i]`).
    pub fn lookup(&self, ip: IpAddr) -> u32 {
        let mut bits = 0;
        for (i, set) in self.sets.iter().enumerate().take(32) {
            if set.contains(ip) {
                bits |= 1 << i;
            }
        }
        bits
    }

    /// Names of the lists that hold `ip`.
    pub fn lists_of(&self, ip: IpAddr) -> Vec<&str> {
        let bits = self.lookup(ip);
        self.names
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, n)| n.as_str())
            .collect()
    }

    /// Prefixes kept (after dropping contained ones), all lists together.
    pub fn prefix_count(&self) -> usize {
        self.prefix_counts().map(|(_, n)| n).sum()
    }

    /// Prefixes kept per list (after dropping contained ones), in the table's order.
    pub fn prefix_counts(&self) -> impl Iterator<Item = (&str, usize)> {
        self.names.iter().zip(&self.sets).map(|(name, s)| {
            (
                name.as_str(),
                s.v4.len() + s.v6_short.len() + s.v6_long.len(),
            )
        })
    }

    /// Heap bytes held by the prefix tables.
    pub fn heap_bytes(&self) -> usize {
        self.sets
            .iter()
            .map(|s| s.v4.heap_bytes() + s.v6_short.heap_bytes() + s.v6_long.heap_bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_errors() {
        let nets =
            parse_set("185.220.101.1/32\n2a0b:f4c2::/40 # tor\n  10.1.2.3/8\n\n192.0.2.7").unwrap();
        assert_eq!(
            nets,
            vec![
                Net::V4(0xB9DC_6501, 32),
                Net::V6(0x2a0b_f4c2 << 96, 40),
                Net::V4(0x0A00_0000, 8),
                Net::V4(0xC000_0207, 32),
            ]
        );
        for bad in [
            "1.2.3.4/33",
            "1.2.3.4/",
            "::/129",
            "1.2.3",
            "1.2.3.4/+8",
            "host",
            "1.2.3.4/08x",
        ] {
            let e = parse_set(&format!("10.0.0.0/8\n{bad}")).unwrap_err();
            assert!(e.starts_with("line 2:"), "{bad}: {e}");
        }
    }

    #[test]
    fn lookup_v4_v6_mapped_and_nesting() {
        let tor = parse_set("185.220.101.1/32 2a0b:f4c2::/40 2001:db8::1").unwrap();
        let hosting = parse_set("10.0.0.0/8 10.1.0.0/16 10.1.2.0/24 0.0.0.0/0").unwrap();
        let t = ListTable::from_nets(&[("tor", &tor), ("hosting", &hosting)]);
        assert_eq!(t.lists_of(ip("185.220.101.1")), vec!["tor", "hosting"]);
        assert_eq!(t.lookup(ip("185.220.101.2")), 0b10);
        assert_eq!(t.lookup(ip("::ffff:185.220.101.1")), 0b11);
        assert_eq!(t.lookup(ip("2a0b:f4c2:00ff:1::9")), 0b01);
        assert_eq!(t.lookup(ip("2a0b:f4c3::1")), 0);
        assert_eq!(t.lookup(ip("2001:db8::1")), 0b01);
        assert_eq!(t.lookup(ip("2001:db8::2")), 0);
        // 0.0.0.0/0 swallowed the three nested prefixes.
        assert_eq!(t.prefix_count(), 3 + 1);
        let empty = ListTable::default();
        assert_eq!(empty.lookup(ip("1.2.3.4")), 0);
    }

    #[test]
    fn edges_of_ranges() {
        let set = parse_set("192.0.2.0/24 198.51.100.0/31 ::/1 ffff::/16 8000::1/128").unwrap();
        let t = ListTable::from_nets(&[("x", &set)]);
        for (addr, hit) in [
            ("192.0.1.255", false),
            ("192.0.2.0", true),
            ("192.0.2.255", true),
            ("192.0.3.0", false),
            ("198.51.100.1", true),
            ("198.51.100.2", false),
            ("7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("8000::", false),
            ("8000::1", true),
            ("8000::2", false),
            ("fffe:ffff::", false),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
            ("0.0.0.0", false),
            ("255.255.255.255", false),
        ] {
            assert_eq!(t.lookup(ip(addr)) != 0, hit, "{addr}");
        }
    }

    /// Against a naive scan, on pseudo-random prefixes and probes.
    #[test]
    fn agrees_with_a_linear_scan() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut nets = Vec::new();
        for _ in 0..5000 {
            let r = next();
            // Mostly /18 to /32 (few nestings, so the bucket index is built), some shorter.
            let len = if r % 64 == 0 {
                12 + (r % 6) as u8
            } else {
                18 + (r % 15) as u8
            };
            nets.push(Net::V4((r >> 8) as u32 & mask32(len), len));
            let r2 = next();
            let len6 = (r2 % 129) as u8;
            let a = (u128::from(next()) << 64 | u128::from(next())) & mask128(len6.max(12));
            nets.push(Net::V6(a, len6.max(12)));
        }
        // Normalise: host bits cleared for the len actually used.
        let nets: Vec<Net> = nets
            .into_iter()
            .map(|n| match n {
                Net::V4(a, l) => Net::V4(a & mask32(l), l),
                Net::V6(a, l) => Net::V6(a & mask128(l), l),
            })
            .collect();
        let t = ListTable::from_nets(&[("x", &nets)]);
        assert!(
            !t.sets[0].v4.index.is_empty(),
            "the bucket index is exercised ({} IPv4 prefixes)",
            t.sets[0].v4.len()
        );
        for i in 0..6_000u32 {
            let probe: IpAddr = if i % 2 == 0 {
                let base = match nets[(next() % nets.len() as u64) as usize] {
                    Net::V4(a, _) => a,
                    Net::V6(..) => next() as u32,
                };
                IpAddr::V4(Ipv4Addr::from(base.wrapping_add((next() % 512) as u32)))
            } else {
                let base = match nets[(next() % nets.len() as u64) as usize] {
                    Net::V6(a, _) => a,
                    Net::V4(..) => u128::from(next()) << 64,
                };
                IpAddr::V6(Ipv6Addr::from(
                    base.wrapping_add(u128::from(next() % 4) << (next() % 100)),
                ))
            };
            let naive = nets.iter().any(|n| match (*n, probe) {
                (Net::V4(a, l), IpAddr::V4(p)) => u32::from(p) & mask32(l) == a,
                (Net::V6(a, l), IpAddr::V6(p)) => u128::from(p) & mask128(l) == a,
                _ => false,
            });
            assert_eq!(t.lookup(probe) != 0, naive, "{probe}");
        }
    }

    /// The budget: a million prefixes in at most 16 MiB (a mix of IPv4 and IPv6 /48s,
    /// as hosting-provider lists are), and the worst realistic IPv6 case too.
    #[test]
    fn a_million_prefixes_fit_in_16_mib() {
        let mut nets = Vec::with_capacity(1_000_000);
        for i in 0..700_000u32 {
            nets.push(Net::V4((i * 4096) & mask32(24), 24));
        }
        for i in 0..300_000u128 {
            nets.push(Net::V6((0x2a00u128 << 112) | (i << 80), 48));
        }
        let t = ListTable::from_nets(&[("hosting", &nets)]);
        assert_eq!(t.prefix_count(), 1_000_000);
        assert!(t.heap_bytes() <= 16 << 20, "{} bytes", t.heap_bytes());
        assert_eq!(t.lookup(ip("0.0.16.1")), 1);
        assert_eq!(t.lookup(ip("2a00:0:0002::1")), 1);

        let all_v6: Vec<Net> = (0..1_000_000u128)
            .map(|i| Net::V6((0x2a01u128 << 112) | (i << 72), 56))
            .collect();
        let t6 = ListTable::from_nets(&[("hosting", &all_v6)]);
        assert!(t6.heap_bytes() <= 16 << 20, "{} bytes", t6.heap_bytes());
    }

    /// The packed form of a set builds exactly the table its text does, the IPv6 forms of IPv4
    /// (NAT64, configured NAT64, 6to4, Teredo, mapped, compatible) included: both go through
    /// the same `PrefixSet::build`.
    #[test]
    fn packed_and_text_build_the_same_table() {
        let text = "185.220.101.1/32 10.0.0.0/8 10.1.0.0/16 0.0.0.0/1 2a0b:f4c2::/40 \
                    64:ff9b::c000:201/128 64:ff9b::c633:6400/120 64:ff9b:1:c000:2:100::/88 \
                    2002:cb00:7100::/40 2002::/16 2001:0:4136:e378:8000:63bf:3fff:fdd2/128 \
                    ::ffff:198.18.0.0/111 ::c000:205/128 ::1 :: 2001:db8::/32 2001:db8::/48 \
                    fe80::/10 2001:db8:1:2:3::/80 203.0.113.7 203.0.113.7";
        let nets = parse_set(text).unwrap();
        let nat64 = [Nat64Prefix::parse("64:ff9b:1::/48").unwrap()];
        let packed = crate::packed::encode(&nets).unwrap();
        let as_text = Lists {
            sets: [("x".to_owned(), text.to_owned())].into(),
            ..Lists::default()
        };
        let as_packed = Lists {
            packed: [("x".to_owned(), packed)].into(),
            ..Lists::default()
        };
        let t = ListTable::build(Some(&as_text), &nat64).unwrap();
        let p = ListTable::build(Some(&as_packed), &nat64).unwrap();
        assert_eq!(t.prefix_count(), p.prefix_count());
        let (a, b) = (&t.sets[0].v4, &p.sets[0].v4);
        assert_eq!((&a.starts, &a.lens), (&b.starts, &b.lens));
        assert_eq!(t.sets[0].v6_short.starts, p.sets[0].v6_short.starts);
        assert_eq!(t.sets[0].v6_short.lens, p.sets[0].v6_short.lens);
        assert_eq!(t.sets[0].v6_long.starts, p.sets[0].v6_long.starts);
        assert_eq!(t.sets[0].v6_long.lens, p.sets[0].v6_long.lens);
        // The IPv6 forms of IPv4 became IPv4 entries in both.
        assert!(t.sets[0].v4.starts.contains(&0xC000_0201));
        for probe in [
            "192.0.2.1",
            "198.51.100.9",
            "192.0.2.5",
            "203.0.113.9",
            "203.0.113.7",
            "127.0.0.1",
            "2a0b:f4c2:1::1",
            "2002::1",
            "::1",
            "2001:db8:1:2:3::9",
            "fe80::1",
        ] {
            let ip = ip(probe);
            assert_eq!(t.lookup(ip), p.lookup(ip), "{probe}");
        }
        assert_eq!(p.lookup(ip("192.0.2.1")), 1);
    }

    #[test]
    fn the_packed_lists_share_one_budget_and_name_the_list_past_it() {
        let one = crate::packed::encode(&parse_set("10.0.0.0/8").unwrap()).unwrap();
        let ok = Lists {
            packed: [("a".to_owned(), one.clone()), ("b".to_owned(), one.clone())].into(),
            ..Lists::default()
        };
        let mut seen = Vec::new();
        decode_each(&ok, |name, nets| seen.push((name.to_owned(), nets.len()))).unwrap();
        assert_eq!(seen, [("a".to_owned(), 1), ("b".to_owned(), 1)]);
        // The budget itself is crate::packed's; here, that a list past it is named.
        let bad = Lists {
            packed: [("a".to_owned(), one), ("b".to_owned(), "AQ==".to_owned())].into(),
            ..Lists::default()
        };
        let (field, e) = decode_each(&bad, |_, _| ()).unwrap_err();
        assert_eq!(field, "lists.packed.b", "{e}");
        assert!(
            ListTable::build(Some(&bad), &[])
                .unwrap_err()
                .starts_with("pluginConfig field `lists.packed.b`: ")
        );
    }

    #[test]
    fn build_from_config() {
        let lists = Lists {
            version: "v1".into(),
            generated_at: Some("2026-11-29T17:17:00Z".into()),
            sets: [("tor".to_owned(), "185.220.101.1/32".to_owned())].into(),
            ..Default::default()
        };
        let t = ListTable::build(Some(&lists), &[]).unwrap();
        assert_eq!(t.version, "v1");
        assert_eq!(t.generated_at, Some(1_795_972_620));
        assert_eq!(t.names(), ["tor".to_owned()]);
        let bad = Lists {
            sets: [("tor".to_owned(), "nope".to_owned())].into(),
            ..lists
        };
        assert!(
            ListTable::build(Some(&bad), &[])
                .unwrap_err()
                .contains("lists.sets.tor")
        );
    }
}
