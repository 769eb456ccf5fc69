//! libFuzzer entry for `checks::signature_input` (see `../checks.rs` for what it checks).
#![no_main]

#[allow(dead_code)] // each target calls one of the checks
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::signature_input(data));
