//! Replays the committed fuzz corpus (`filter/fuzz/corpus/<target>/*`) through the fuzz targets'
//! own checks (`filter/fuzz/checks.rs`), under plain `cargo test`: CI replays every input that
//! once found new coverage without libFuzzer or a nightly toolchain.

#![allow(clippy::unwrap_used, clippy::panic)] // a failure here is a failed test

use std::path::PathBuf;

use crate::checks;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn every_target_has_a_committed_corpus_and_it_replays_clean() {
    for (target, check) in checks::TARGETS {
        let dir = corpus_dir(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (commit the corpus)", dir.display()));
        let mut count = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            // A panic names the input: replay it with `cargo fuzz run <target> <file>`.
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails", path.display());
            count += 1;
        }
        assert!(count > 0, "{}: empty corpus", dir.display());
    }
}
