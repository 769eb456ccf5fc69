//! Any cookie value: never a panic, and accepted only if it is exactly what the key issues for
//! its expiry (no forgery, no alternative spelling).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_core::crypto::{Binding, Keys, check_cookie, issue_cookie};
use pow_core::net::binding_net;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((keys, _)) = Keys::new(Some(b"fuzzing-secret-of-at-least-32-bytes!"), None) else {
        return;
    };
    let binding = Binding::new(binding_net([192, 0, 2, 1].into()), "UA", "example.org");
    let now = 1_800_000_000;
    if check_cookie(&keys, &binding, value, now, 86_400).is_ok() {
        let expiry: u64 = value.split('.').next().unwrap_or("").parse().unwrap_or(0);
        assert_eq!(
            value,
            issue_cookie(&keys, &binding, expiry),
            "accepted a non-canonical cookie"
        );
    }
});
