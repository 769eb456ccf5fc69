//! Certificates for tests, made with the openssl command.

use std::path::Path;
use std::process::Command;

/// `openssl req` in `dir` with a new P-256 key written to `key`, for `subject`, writing `out`: a
/// self-signed certificate (`-x509`) or a signing request (`-new`); `extra` options after (`-days`,
/// `-addext`, `-CA`). Panics with openssl's own words when it fails.
pub fn request(dir: &Path, key: &str, subject: &str, kind: &str, out: &str, extra: &[&str]) {
    let mut args = vec![
        "req",
        kind,
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-noenc",
        "-keyout",
        key,
        "-out",
        out,
        "-subj",
        subject,
    ];
    args.extend_from_slice(extra);
    crate::process::stdout_of(Command::new("openssl").args(&args).current_dir(dir));
}
