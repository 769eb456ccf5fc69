//! The attacks the filter must withstand (spending at scale, a failing store, cookies cleared
//! for one scope used in another, floods of fake cookies, a new TTL), run natively where that is
//! clearer than through the module (the same attacks run against the real `.wasm` in
//! `filter/proxy-wasm-host/tests/attacks.rs`).

#![allow(clippy::unwrap_used)] // a failed unwrap in a test is a test failure

use crate::common::*;

const ALL_AT_1: &str = r#"{"mode": "all", "difficulty": 1}"#;

/// A challenge for `from`, solved and verified from `from`.
fn spend(w: &mut World, from: &str) -> Action {
    let page = w.send(&req("/", from));
    let q = solve(&page_data(&page));
    w.send(&req(&verify_path(&q), from))
}

/// Item 3 at scale: attackers spending their own cheap solutions as fast as they can, from one
/// /24 and from thousands of /64s, never keep a victim's valid solution out, and the seen-set
/// stays within its bound all along.
#[test]
fn spending_at_scale_locks_nobody_out_and_memory_stays_bounded() {
    let mut w = World::new(ALL_AT_1);
    let bound = (pow_core::seen::SHARDS as usize)
        * (pow_core::seen::SHARD_CAPACITY * pow_core::seen::RECORD_LEN + "pow.seen.00".len());
    let rounds = 40;
    let per_round = 500;
    for round in 0..rounds {
        for i in 0..per_round {
            // Half from one /24, half from a fresh /64 each (an IPv6 attacker has plenty).
            let from = if i % 2 == 0 {
                format!("198.51.100.{}:4000", i % 250)
            } else {
                format!("[2001:db8:{round:x}:{i:x}::1]:4000")
            };
            assert_eq!(spend(&mut w, &from).status(), Some(303), "{from}");
        }
        // Every round, the victims still pass: one elsewhere, one in the attacker's /24.
        for victim in ["192.0.2.7:5000", "198.51.100.251:5000"] {
            let v = spend(&mut w, victim);
            assert_eq!(
                v.status(),
                Some(303),
                "{victim} locked out: {:?}",
                v.header("pow-verify")
            );
        }
        assert!(w.store.bytes() <= bound, "{} > {bound}", w.store.bytes());
        // Time goes on: old records expire and are dropped.
        w.now += 20;
    }
    let spent = (rounds * (per_round + 2)) as u64;
    assert_eq!(w.metrics.get(metric::CHALLENGES_SOLVED), spent);
    assert!(w.metrics.get(metric::SEEN_EVICTED) > 0);
}

/// Item 3: a failing or busy store lets a valid solution through, counted.
#[test]
fn a_failing_store_never_denies_a_valid_solution() {
    let mut w = World::new(ALL_AT_1);
    w.store.broken = true;
    let v = spend(&mut w, "192.0.2.7:5000");
    assert_eq!(v.status(), Some(303), "{:?}", v.header("pow-verify"));
    assert_eq!(w.metrics.get(metric::SEEN_UNRECORDED), 1);
    w.store.broken = false;
    w.store.conflicts = 1_000;
    assert_eq!(spend(&mut w, "192.0.2.7:5000").status(), Some(303));
    assert_eq!(w.metrics.get(metric::SEEN_UNRECORDED), 2);
}

/// Item 4: the cookie records the difficulty paid.
#[test]
fn a_cookie_clears_only_where_no_more_is_asked() {
    let json = r#"{"mode": "all", "difficulty": 4, "list_difficulty": {"hard": 12},
        "lists": {"version": "v1", "sets": {"hard": "192.0.2.66/32"}}}"#;
    let mut w = World::new(json);
    let page = w.send(&req("/", "192.0.2.10:4000"));
    let q = solve(&page_data(&page));
    assert_eq!(q.difficulty, 4);
    let v = w.send(&req(&verify_path(&q), "192.0.2.66:4000"));
    let cookie = cookie_of(&v);
    let hard = w.send(&with_header(req("/", "192.0.2.66:4000"), "cookie", &cookie));
    assert_eq!(page_data(&hard)["d"], 12);
    let cheap = w.send(&with_header(req("/", "192.0.2.10:4000"), "cookie", &cookie));
    assert!(cheap.is_continue());
    // The hard neighbour pays 12 bits; its cookie clears both.
    let q = solve(&page_data(&hard));
    let cookie = cookie_of(&w.send(&req(&verify_path(&q), "192.0.2.66:4000")));
    for from in ["192.0.2.66:4000", "192.0.2.10:4000"] {
        let a = w.send(&with_header(req("/", from), "cookie", &cookie));
        assert!(a.is_continue(), "{from}");
    }
}

/// Item 5: no more than [`MAX_COOKIES_CHECKED`] clearance cookies are looked at.
#[test]
fn fake_cookies_beyond_the_first_few_are_not_checked() {
    let mut w = World::new(ALL_AT_1);
    let from = "192.0.2.10:4000";
    // Over plain http the cookie has no prefix: the first few of its name are checked.
    let http = |cookie: &str| {
        with_header(
            with_header(req("/", from), ":scheme", "http"),
            "cookie",
            cookie,
        )
    };
    let prefixed = cookie_of(&spend(&mut w, from));
    let good = prefixed.replacen(pow_core::filter::HOST_PREFIX, "", 1);
    let fake = format!("{}0", &good[..good.len() - 1]);
    let fake = if fake == good {
        format!("{}1", &good[..good.len() - 1])
    } else {
        fake
    };
    let n = pow_core::filter::MAX_COOKIES_CHECKED;
    let hidden = format!("{}; {good}", vec![fake.as_str(); n].join("; "));
    assert_eq!(w.send(&http(&hidden)).status(), Some(403));
    let found = format!("{}; {good}", vec![fake.as_str(); n - 1].join("; "));
    assert!(w.send(&http(&found)).is_continue());
    // Other cookies in between do not count.
    let others = format!(
        "{}; a=1; b=2; c=3; {good}",
        vec![fake.as_str(); n - 1].join("; ")
    );
    assert!(w.send(&http(&others)).is_continue());
    // Over https the `__Host-` cookies are checked first (a browser holds one), wherever they
    // stand, the first few of them: forged ones before it hide it only past the bound.
    let forged_prefixed = format!("{}{fake}", pow_core::filter::HOST_PREFIX);
    let https = |cookie: &str| with_header(req("/", from), "cookie", cookie);
    let behind = format!("{}; {prefixed}", [fake.as_str(); 10].join("; "));
    assert!(w.send(&https(&behind)).is_continue());
    let second = format!("{forged_prefixed}; {prefixed}");
    assert!(w.send(&https(&second)).is_continue());
    let past_the_bound = format!(
        "{}; {prefixed}",
        vec![forged_prefixed.as_str(); n].join("; ")
    );
    assert_eq!(w.send(&https(&past_the_bound)).status(), Some(403));
}

/// Item 5, on the bytes the glue hands the core: the clearance pairs are found in the order
/// they are checked, no more than [`MAX_COOKIES_CHECKED`], and the scan stops early on a header
/// stuffed with them.
#[test]
fn the_clearance_pairs_are_found_in_order_and_no_more_than_are_checked() {
    use pow_core::filter::ClearancePairs;
    let n = pow_core::filter::MAX_COOKIES_CHECKED;
    let found = |header: &[u8], name: &'static str, secure: bool| -> Vec<String> {
        ClearancePairs::new(std::iter::once(header), name, secure)
            .take(n)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    };
    // Over https the `__Host-` pairs first, wherever they stand, then the others.
    assert_eq!(
        found(
            b"pow=1; a=b; __Host-pow=2;\t__Host-pow=3 ; pow=4",
            "pow",
            true
        ),
        ["__Host-pow=2", "__Host-pow=3", "pow=1"]
    );
    // Over http no browser sends a `__Host-` cookie: the first pairs of the name.
    let stuffed = vec!["pow=f"; 675].join("; ");
    assert_eq!(
        found(format!("pow=g; {stuffed}").as_bytes(), "pow", false),
        ["pow=g", "pow=f", "pow=f"]
    );
    // Names are compared byte for byte, only spaces and tabs stripped: a name behind U+00A0 is
    // another cookie's. Bytes that are not UTF-8 never make a pair match.
    assert_eq!(
        found(
            b"x=1; \xc2\xa0pow=z;\t pow=a\xffb ;pow\xff=c; =d; pow",
            "pow",
            false
        ),
        ["pow=a\u{fffd}b"]
    );
    assert!(found(b"", "pow", true).is_empty());
    // Several Cookie headers are one list, the `__Host-` pairs of all of them first.
    let headers: [&[u8]; 2] = [b"pow=1", b"__Host-pow=2"];
    let all: Vec<&[u8]> = ClearancePairs::new(headers.into_iter(), "pow", true).collect();
    assert_eq!(all, [&b"__Host-pow=2"[..], b"pow=1"]);
}

/// A valid `__Host-` cookie at the front of 675 others is the first pair found, and passes: the
/// checker stops there (what that saves is in `make bench`, "valid cookie then 675 forged").
#[test]
fn a_valid_cookie_in_front_is_found_first() {
    let mut w = World::new(ALL_AT_1);
    let from = "192.0.2.10:4000";
    let good = cookie_of(&spend(&mut w, from));
    let header = format!("{good}; {}", vec!["pow_clearance=x"; 675].join("; "));
    let mut pairs = pow_core::filter::ClearancePairs::new(
        std::iter::once(header.as_bytes()),
        "pow_clearance",
        true,
    );
    assert_eq!(pairs.next(), Some(good.as_bytes()));
    assert!(
        w.send(&with_header(req("/", from), "cookie", &header))
            .is_continue()
    );
}

/// Item 8: the seen-set's key does not depend on the challenge TTL.
#[test]
fn a_new_ttl_keeps_spent_solutions_spent() {
    let mut w = World::new(r#"{"mode": "all", "difficulty": 1, "challenge_ttl_secs": 300}"#);
    let page = w.send(&req("/", "192.0.2.7:4000"));
    let path = verify_path(&solve(&page_data(&page)));
    assert_eq!(w.send(&req(&path, "192.0.2.7:4000")).status(), Some(303));
    for ttl in [600, 3_600, 86_400] {
        w.filter = pow_core::Filter::new(
            config(&format!(
                r#"{{"mode": "all", "difficulty": 1, "challenge_ttl_secs": {ttl}}}"#
            )),
            Some(keys(KEY_A, None)),
            SEED,
        )
        .unwrap();
        let again = w.send(&req(&path, "192.0.2.7:4000"));
        assert_eq!(again.header("pow-verify"), Some("replay"), "ttl {ttl}");
    }
}
