//! Replays the committed fuzz corpus (`filter/fuzz/corpus/<target>.hex`, one input per line in
//! hex) through the fuzz targets' own checks (`filter/fuzz/checks.rs`), under plain `cargo test`:
//! CI replays every input that once found new coverage without libFuzzer or a nightly toolchain.

#![allow(clippy::unwrap_used, clippy::panic)] // a failure here is a failed test

use std::path::PathBuf;

use crate::checks;

fn corpus_file(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(format!("{target}.hex"))
}

/// One line of a corpus file: an input in lowercase hex (`filter/fuzz/corpus.sh` writes them).
fn decode(line: &str) -> Option<Vec<u8>> {
    if !line.len().is_multiple_of(2) {
        return None;
    }
    (0..line.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(line.get(i..i + 2)?, 16).ok())
        .collect()
}

#[test]
fn every_target_has_a_committed_corpus_and_it_replays_clean() {
    for (target, check) in checks::TARGETS {
        let file = corpus_file(target);
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (commit the corpus)", file.display()));
        let mut count = 0;
        for (number, line) in text.lines().enumerate() {
            let data = decode(line)
                .unwrap_or_else(|| panic!("{}:{}: not hex", file.display(), number + 1));
            // A panic names the input: `corpus.sh unpack DIR` writes it as DIR/<target>/<sha1>,
            // to replay with `cargo fuzz run <target> <file>`.
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(
                outcome.is_ok(),
                "{target}: {}:{} fails",
                file.display(),
                number + 1
            );
            count += 1;
        }
        assert!(count > 0, "{}: empty corpus", file.display());
    }
}

#[test]
fn a_corpus_line_decodes_to_its_bytes() {
    assert_eq!(decode(""), Some(vec![]));
    assert_eq!(decode("000aff"), Some(vec![0x00, 0x0a, 0xff]));
    assert_eq!(decode("0"), None);
    assert_eq!(decode("zz"), None);
}
