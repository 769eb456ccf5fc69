//! `cargo bench -p pow-core --bench filter`: the filter's costs, natively (no assertion on time:
//! figures to read). Lookup cost from 1k to 1M prefixes (flat is the goal), the table's memory,
//! and the cost of the decisions a request meets (cookie check, challenge issue, verify).
#![allow(clippy::print_stdout, clippy::unwrap_used)] // a bench prints its figures; a failed unwrap is a bench bug

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use pow_core::crypto::{self, Binding, ChallengeParams, Keys};
use pow_core::lists::{ListTable, Net};
use pow_core::net::binding_net;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn table(n: usize) -> ListTable {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut nets = Vec::with_capacity(n);
    for i in 0..n {
        let r = xorshift(&mut s);
        if i % 4 == 3 {
            nets.push(Net::V6(u128::from(r & !0xffff) << 64, 48));
        } else {
            nets.push(Net::V4((r as u32) & 0xffff_ff00, 24));
        }
    }
    ListTable::from_nets(&[("hosting", &nets)])
}

fn main() {
    // `cargo test --all-targets` runs this binary without `--bench`: a quick smoke run only.
    let full = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if full {
        &[1_000, 10_000, 100_000, 1_000_000]
    } else {
        &[1_000]
    };
    println!("lookup: ns per lookup (mixed IPv4/IPv6 probes), table heap");
    for &n in sizes {
        let t = table(n);
        let mut s = 42u64;
        let probes: Vec<IpAddr> = (0..4096)
            .map(|i| {
                let r = xorshift(&mut s);
                if i % 4 == 3 {
                    IpAddr::V6(Ipv6Addr::from(u128::from(r) << 64 | 1))
                } else {
                    IpAddr::V4(Ipv4Addr::from(r as u32))
                }
            })
            .collect();
        let rounds = if full { 500 } else { 2 };
        let start = Instant::now();
        let mut hits = 0u32;
        for _ in 0..rounds {
            for p in &probes {
                hits = hits.wrapping_add(black_box(t.lookup(*p)));
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(rounds * 4096);
        println!(
            "  {n:>9} prefixes: {ns:6.1} ns/lookup, {:>6.2} MiB ({} kept, {hits} hits)",
            t.heap_bytes() as f64 / f64::from(1 << 20),
            t.prefix_count()
        );
    }

    let keys = Keys::new(Some(b"bench-secret-of-at-least-32-bytes!!"), None)
        .unwrap()
        .0;
    let b = Binding::new(
        binding_net([192, 0, 2, 1].into()),
        "Mozilla/5.0",
        "example.org",
    )
    .unwrap();
    let n = if full { 100_000u32 } else { 100 };
    let start = Instant::now();
    for i in 0..n {
        let p = ChallengeParams {
            issued: 0,
            expiry: u64::from(i),
            difficulty: 16,
            salt: 1,
        };
        black_box(crypto::issue_challenge(&keys, &b, &p));
    }
    println!(
        "challenge HMAC: {:.0} ns",
        start.elapsed().as_nanos() as f64 / f64::from(n)
    );
    let cookie = crypto::issue_cookie(&keys, &b, 2_000_000_000, 16);
    let start = Instant::now();
    for _ in 0..n {
        black_box(
            crypto::check_cookie(
                &keys,
                &b,
                black_box(&cookie),
                1_900_000_000,
                86_400 * 30 * 100,
            )
            .is_ok(),
        );
    }
    println!(
        "cookie check: {:.0} ns",
        start.elapsed().as_nanos() as f64 / f64::from(n)
    );
    let start = Instant::now();
    for i in 0..n {
        black_box(crypto::work_bits(&[7; 32], u64::from(i)));
    }
    println!(
        "proof-of-work check (one SHA-256): {:.0} ns",
        start.elapsed().as_nanos() as f64 / f64::from(n)
    );

    // What an on_configure costs with big lists: decode, check and build the table.
    let count = if full { 100_000 } else { 1_000 };
    let mut s = 7u64;
    let text: String = (0..count)
        .map(|_| {
            let r = xorshift(&mut s);
            format!("{}/24\\n", Ipv4Addr::from((r as u32) & 0xffff_ff00))
        })
        .collect();
    let json = format!(r#"{{"lists": {{"version": "v", "sets": {{"hosting": "{text}"}}}}}}"#);
    let start = Instant::now();
    let config = pow_core::PluginConfig::from_json(json.as_bytes()).unwrap();
    let filter = pow_core::Filter::new(config, None, [0; 32]).unwrap();
    println!(
        "configure with {count} prefixes ({} KiB of JSON): {:.1} ms",
        json.len() / 1024,
        start.elapsed().as_secs_f64() * 1000.0
    );
    black_box(filter);

    fake_cookies(full);
}

struct Nothing;

impl pow_core::Metrics for Nothing {
    fn increment(&mut self, _: &str) {}
}

/// What 675 forged clearance cookies in one 60 KiB header cost a request,
/// against a plain cookie pass (the filter checks at most the first few).
fn fake_cookies(full: bool) {
    use pow_core::{Filter, Now, PluginConfig, Request};
    let keys = Keys::new(Some(b"bench-secret-of-at-least-32-bytes!!"), None)
        .unwrap()
        .0;
    let config = PluginConfig::from_json(br#"{"mode": "all", "difficulty": 16}"#).unwrap();
    let filter = Filter::new(config, Some(keys.clone()), [7; 32]).unwrap();
    let now = 1_800_000_000u64;
    let b = Binding::new(
        binding_net([192, 0, 2, 1].into()),
        "Mozilla/5.0",
        "example.org",
    )
    .unwrap();
    let cookie = format!(
        "pow_clearance={}",
        crypto::issue_cookie(&keys, &b, now + 3600, 16)
    );
    let mut fake = cookie.clone();
    let last = fake.pop().unwrap();
    fake.push(if last == '0' { '1' } else { '0' });
    let fakes = vec![fake.as_str(); 675].join("; ");
    let request = |cookie: &str| -> Request<'static> {
        Request {
            headers: vec![
                (":method".into(), "GET".into()),
                (":path".into(), "/articles/42".into()),
                (":authority".into(), "example.org".into()),
                ("user-agent".into(), "Mozilla/5.0".into()),
                ("accept".into(), "text/html".into()),
                ("cookie".into(), cookie.to_owned().into()),
            ],
            cookies: Vec::new(),
            source_address: Some("192.0.2.1:4000".into()),
        }
    };
    let n = if full { 20_000u32 } else { 10 };
    let time = |label: &str, req: &Request<'_>| {
        let mut store = pow_core::seen::MemoryStore::default();
        let start = Instant::now();
        for _ in 0..n {
            let at = Now { secs: now };
            black_box(filter.on_request(black_box(req), at, &mut store, &mut Nothing));
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
        println!("request, {label}: {ns:.0} ns");
        ns
    };
    let pass = time("plain cookie pass", &request(&cookie));
    let fake_pass = time(
        "valid cookie then 675 forged (60 KiB)",
        &request(&format!("{cookie}; {fakes}")),
    );
    let fake_challenge = time(
        "675 forged (60 KiB) then the valid one: challenged",
        &request(&format!("{fakes}; {cookie}")),
    );
    let challenge = time("no cookie: challenged", &request("a=b"));
    println!(
        "forged cookies: {:.2}x a plain cookie pass (valid first), {:.2}x a plain challenge (forged first)",
        fake_pass / pass,
        fake_challenge / challenge
    );
}
