//! The house rules a reader relies on, checked on the tree itself: no source file under
//! `crates/`, `tools/` or `filter/` longer than a reader can hold.

use std::fs;
use std::path::{Path, PathBuf};

/// The most lines of code a source file may hold before its tests.
const MAX_LINES: usize = 700;

/// The folders whose Rust sources are held to [`MAX_LINES`].
const ROOTS: [&str; 3] = ["crates", "tools", "filter"];

/// Whether a file is test or measurement code rather than what a reader of the program must
/// hold: integration tests (`tests/` folders), test modules beside their file (`tests.rs`),
/// benches, and the fuzz targets (their own workspace under `filter/fuzz`). Each is read one test
/// or one target at a time, and a long table of cases is clearer whole than split.
fn exempt(relative: &Path) -> bool {
    let in_folder = |name: &str| relative.components().any(|c| c.as_os_str() == name);
    in_folder("tests")
        || in_folder("benches")
        || relative.starts_with("filter/fuzz")
        || relative.file_name().is_some_and(|f| f == "tests.rs")
}

/// Every `.rs` file under `dir`, relative to the workspace root; build output is skipped.
fn rust_files(root: &Path, dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "node_modules")
            {
                continue;
            }
            rust_files(root, &path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The lines of a file up to (not counting) its first `#[cfg(test)]` line: the code a reader
/// holds; a test module at the end of the file is test code.
fn code_lines(text: &str) -> usize {
    text.lines()
        .position(|line| line.trim_start().starts_with("#[cfg(test)]"))
        .unwrap_or_else(|| text.lines().count())
}

#[test]
fn no_source_file_is_over_700_lines_before_its_tests() {
    let root = testkit::workspace::root().canonicalize().unwrap();
    let mut files = Vec::new();
    for dir in ROOTS {
        rust_files(&root, &root.join(dir), &mut files);
    }
    let checked: Vec<_> = files.iter().filter(|f| !exempt(f)).collect();
    // The walk found the sources: a wrong root would pass with nothing checked.
    assert!(
        checked.len() > 50,
        "only {} source files found under {ROOTS:?} of {}",
        checked.len(),
        root.display()
    );
    let mut over: Vec<(usize, &PathBuf)> = checked
        .into_iter()
        .filter_map(|file| {
            let text = fs::read_to_string(root.join(file)).unwrap();
            let lines = code_lines(&text);
            (lines > MAX_LINES).then_some((lines, file))
        })
        .collect();
    over.sort_by(|a, b| b.cmp(a));
    let listing: String = over
        .iter()
        .map(|(lines, file)| format!("\n  {}: {lines} lines", file.display()))
        .collect();
    assert!(
        over.is_empty(),
        "{} source files are over {MAX_LINES} lines before their first #[cfg(test)] \
         (split them along their seams):{listing}",
        over.len()
    );
}

#[test]
fn lines_are_counted_up_to_the_first_test_module() {
    assert_eq!(code_lines("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(code_lines("a\n    #[cfg(test)]\n"), 1);
    assert_eq!(code_lines("a\nb\nc"), 3);
    assert!(exempt(Path::new("tools/scw-infra/tests/standin.rs")));
    assert!(exempt(Path::new("crates/scaleway/src/client/tests.rs")));
    assert!(exempt(Path::new("filter/pow-demo/benches/filter/main.rs")));
    assert!(exempt(Path::new("filter/fuzz/checks.rs")));
    assert!(!exempt(Path::new("tools/scw-infra/src/destroy.rs")));
    assert!(!exempt(Path::new("tools/scw-infra/src/tests_support.rs")));
}
