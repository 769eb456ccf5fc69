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
    lookups(sizes, full);
    crypto_costs(full);
    configure_cost(full);
    packed_lists(full);
    fake_cookies(full);
}

/// ns per lookup of mixed IPv4/IPv6 probes, and the table's heap, for each size.
fn lookups(sizes: &[usize], full: bool) {
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
}

/// A challenge's HMAC, a cookie check and a proof-of-work check.
fn crypto_costs(full: bool) {
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
}

/// What an on_configure costs with big lists: decode, check and build the table.
fn configure_cost(full: bool) {
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
}

/// A realistic list of about `n` prefixes, deterministic: hosting-like allocations (runs of
/// IPv4 /19 to /24 and IPv6 /29 to /48 close together, as ASN lists are), crawler ranges (IPv4
/// /27 and /28, IPv6 /64) and Tor-like single addresses (/32, /128), three IPv4 for one IPv6,
/// as in lists built from a real ASN dataset.
fn realistic(n: usize) -> Vec<Net> {
    let mut s = 0x2545_F491_4F6C_DD1Du64 ^ n as u64;
    let mut nets = Vec::with_capacity(n + 64);
    while nets.len() < n {
        let r = xorshift(&mut s);
        let run = 1 + (xorshift(&mut s) % 40) as usize;
        match r % 100 {
            // Hosting, IPv4: a run of prefixes within one /12 or so.
            0..=69 => {
                let mut a = ((r >> 32) as u32 | 0x0100_0000) & 0xfff0_0000;
                for _ in 0..run {
                    let len = 19 + (xorshift(&mut s) % 6) as u8;
                    a = a.wrapping_add((1 + (xorshift(&mut s) % 8) as u32) << (32 - len));
                    nets.push(Net::V4(a & (u32::MAX << (32 - len)), len));
                }
            }
            // Hosting, IPv6: a run within one /24 of 2000::/4.
            70..=89 => {
                let mut a = (0x2000u128 | u128::from((r >> 40) as u16 & 0x0fff)) << 112;
                for _ in 0..run {
                    let len = [29u8, 32, 36, 40, 44, 48][(xorshift(&mut s) % 6) as usize];
                    a = a.wrapping_add(u128::from(1 + xorshift(&mut s) % 4) << (128 - len));
                    nets.push(Net::V6(a & (u128::MAX << (128 - len)), len));
                }
            }
            // Crawlers: /27 and /28 runs, and /64s.
            90..=95 => {
                let a = (r >> 32) as u32 & 0xffff_ff00;
                for i in 0..run.min(8) as u32 {
                    nets.push(Net::V4(a + i * 32, 27 + (i % 2) as u8));
                }
                let b = (0x2001_4860u128 << 96) | (u128::from(r as u16) << 64);
                nets.push(Net::V6(b, 64));
            }
            // Tor-like single addresses.
            _ => {
                nets.push(Net::V4((r >> 32) as u32, 32));
                if r.is_multiple_of(7) {
                    nets.push(Net::V6(u128::from(r) << 64 | u128::from(r >> 17), 128));
                }
            }
        }
    }
    nets.truncate(n);
    nets
}

/// The worst case for packing: prefixes spread uniformly (80 % IPv4 /16 to /32, 20 % IPv6 /32
/// to /64 anywhere in 2a00::/8), as the host bench's synthetic lists are.
fn uniform(n: usize) -> Vec<Net> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    (0..n)
        .map(|_| {
            let r = xorshift(&mut s);
            if r.is_multiple_of(5) {
                let len = 32 + ((r >> 8) % 33) as u8;
                let a = (0x2au128 << 120) | (u128::from(xorshift(&mut s)) << 56);
                Net::V6(a & (u128::MAX << (128 - len)), len)
            } else {
                let len = 16 + ((r >> 8) % 17) as u8;
                Net::V4(
                    (xorshift(&mut s) >> 32) as u32 & (u32::MAX << (32 - len)),
                    len,
                )
            }
        })
        .collect()
}

fn text_of(nets: &[Net]) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    for net in nets {
        let _ = match *net {
            Net::V4(a, l) => writeln!(text, "{}/{l}", Ipv4Addr::from(a)),
            Net::V6(a, l) => writeln!(text, "{}/{l}", Ipv6Addr::from(a)),
        };
    }
    text
}

/// A WasmPlugin as the edge renders it, with `lists` as lists-refresh writes them: its JSON
/// size is what etcd's 1.5 MiB bounds.
fn wasmplugin(lists: serde_json::Value) -> usize {
    serde_json::json!({
        "apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "pow-filter", "namespace": "edge",
                     "labels": {"app.kubernetes.io/managed-by": "render-edge"}},
        "spec": {
            "url": "oci://rg.fr-par.scw.cloud/edgepop/pow-filter:0.1.0",
            "sha256": "0".repeat(64), "phase": "AUTHN", "failStrategy": "FAIL_OPEN",
            "selector": {"matchLabels": {"istio": "ingressgateway"}},
            "pluginConfig": {"mode": "listed", "difficulty": 16, "lists": lists},
        },
    })
    .to_string()
    .len()
}

/// The packed lists: the WasmPlugin's size with the lists as text and packed, and what a
/// configure costs with each (decode and check, then the table build), natively.
fn packed_lists(full: bool) {
    use pow_core::packed;
    const LIMIT: usize = 1536 * 1024;
    let sizes: &[usize] = if full {
        &[100_000, 250_000, 1_000_000]
    } else {
        &[1_000]
    };
    println!(
        "packed lists: WasmPlugin object bytes (limit {LIMIT}), text vs packed, and configure \
         time as the module configures (from_json_lists_unread + Filter::new)"
    );
    for (mix, make) in [
        ("realistic", realistic as fn(usize) -> Vec<Net>),
        ("uniform", uniform),
    ] {
        for &n in sizes {
            let nets = make(n);
            let text = text_of(&nets);
            let value = packed::encode(&nets).unwrap();
            let meta = serde_json::json!({"version": "2026-11-29T17:17:00Z",
                                          "generated_at": "2026-11-29T17:17:00Z"});
            let mut as_text = meta.clone();
            as_text["sets"] = serde_json::json!({"hosting": text});
            let mut as_packed = meta;
            as_packed["packed"] = serde_json::json!({"hosting": value});
            let (text_size, packed_size) =
                (wasmplugin(as_text.clone()), wasmplugin(as_packed.clone()));
            let fits = |size: usize| if size <= LIMIT { "fits" } else { "over" };
            let start = Instant::now();
            let decoded = packed::decode(&value, packed::MAX_PREFIXES).unwrap();
            let decode_ms = start.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(decoded.len(), {
                let mut v = nets.clone();
                v.sort_by_key(|n| match *n {
                    Net::V4(a, l) => (0, u128::from(a), l),
                    Net::V6(a, l) => (1, a, l),
                });
                v.dedup();
                v.len()
            });
            let configure = |lists: &serde_json::Value| {
                let json = serde_json::json!({"lists": lists}).to_string();
                let start = Instant::now();
                let config =
                    pow_core::PluginConfig::from_json_lists_unread(json.as_bytes()).unwrap();
                let filter = pow_core::Filter::new(config, None, [0; 32]).unwrap();
                let ms = start.elapsed().as_secs_f64() * 1000.0;
                black_box(filter);
                ms
            };
            let (text_ms, packed_ms) = (configure(&as_text), configure(&as_packed));
            println!(
                "  {mix:>9} {n:>9} prefixes: text {text_size:>9} B ({:5.2} B/prefix, {}), \
                 packed {packed_size:>8} B ({:4.2} B/prefix, {}); configure text {text_ms:6.1} ms, \
                 packed {packed_ms:6.1} ms (one decode {decode_ms:5.1} ms)",
                text_size as f64 / n as f64,
                fits(text_size),
                packed_size as f64 / n as f64,
                fits(packed_size),
            );
        }
    }
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
