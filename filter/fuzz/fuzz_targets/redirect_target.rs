//! Any return target: what is accepted is a same-origin path, raw and decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_core::redirect::{check_target, percent_decode};

fuzz_target!(|data: &[u8]| {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ok) = check_target(target, "/.pow/verify") {
        assert_eq!(ok, target);
        let mut layer = ok.as_bytes().to_vec();
        for _ in 0..6 {
            assert!(layer.first() == Some(&b'/'), "{target:?}");
            assert!(!matches!(layer.get(1), Some(b'/' | b'\\')), "{target:?}");
            assert!(
                !layer.iter().any(|&c| c < 0x20 || c == 0x7f || c == b'\\'),
                "{target:?}"
            );
            layer = percent_decode(&layer);
        }
        assert!(ok.bytes().all(|c| (0x21..0x7f).contains(&c)), "{target:?}");
    }
});
