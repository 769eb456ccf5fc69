//! libFuzzer entry for `checks::key_directory` (see `../checks.rs` for what it checks).
#![no_main]

#[allow(dead_code)] // each target calls one of the checks
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::key_directory(data));
