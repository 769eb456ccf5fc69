//! The version pins of `k8s/versions.env`, the one file where the project declares a version.
//!
//! make includes the file, the pipelines source it, and the tools that render a pinned version
//! compile it in (`include_str!`), so a bump rebuilds them. The three readers agree only on the
//! file's plain form: `KEY=value` lines, no spaces around `=`, no quotes, `#` comments on lines
//! of their own (the test below holds the real file to it).

use std::path::Path;

use crate::input::InputError;

/// Where the pins live, relative to the workspace root (named in errors).
pub const FILE: &str = "k8s/versions.env";

/// The text of a versions file, read by key.
#[derive(Debug, Clone, Copy)]
pub struct Pins<'a> {
    text: &'a str,
}

impl<'a> Pins<'a> {
    pub const fn new(text: &'a str) -> Self {
        Pins { text }
    }

    /// The value of `key`. Keys match whole, so a longer key that starts with this one, or a
    /// comment that mentions it, is never read as its pin.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.text.lines().find_map(|line| {
            let (k, v) = line.trim().split_once('=')?;
            (k == key).then_some(v)
        })
    }

    /// The value of `key`, or an error naming the file and the key (exit 2: nothing rendered).
    pub fn require(&self, key: &str) -> Result<&'a str, InputError> {
        match self.get(key) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(InputError::field(
                Path::new(FILE),
                key,
                "not pinned: the tools compile this file in; add the pin, with a comment saying \
                 where it comes from, and rebuild",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_matches_whole_and_a_commented_pin_is_not_a_pin() {
        // Every line but the last holds `DEMO_IMAGE` before an `=`: only the live one is its pin.
        let text = "#DEMO_IMAGE=old.example/echo:0.1\n\
                    # DEMO_IMAGE=x was bumped\n\
                    DEMO_IMAGE_PREVIOUS=echo:0.9\n\
                    XDEMO_IMAGE=echo:0.8\n\
                    DEMO_IMAGE=docker.io/hashicorp/http-echo:1.0.0\n";
        let pins = Pins::new(text);
        assert_eq!(
            pins.get("DEMO_IMAGE"),
            Some("docker.io/hashicorp/http-echo:1.0.0")
        );
        let commented_only = Pins::new("#DEMO_IMAGE=old.example/echo:0.1\n");
        assert_eq!(commented_only.get("DEMO_IMAGE"), None);
    }

    #[test]
    fn a_missing_or_empty_pin_is_refused_naming_the_file_and_the_key() {
        for text in ["OTHER=1\n", "DEMO_IMAGE=\n"] {
            let err = Pins::new(text).require("DEMO_IMAGE").unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("k8s/versions.env: field `DEMO_IMAGE`: not pinned"),
                "{err}"
            );
        }
    }

    /// make, bash and the tools each read the file their own way: they agree only while every
    /// line is a comment, blank, or `KEY=value` with nothing make or bash would read otherwise.
    #[test]
    fn the_versions_file_keeps_the_form_every_reader_understands() {
        let text = include_str!("../../../k8s/versions.env");
        for (n, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("line {}: not KEY=value: {line}", n + 1));
            assert!(
                !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                "line {}: key `{key}` is not [A-Z0-9_]+",
                n + 1
            );
            assert!(
                !value.is_empty()
                    && !value
                        .chars()
                        .any(|c| c.is_whitespace() || "'\"#$`\\".contains(c)),
                "line {}: value `{value}` is empty or holds what make or bash would read \
                 otherwise (space, quote, #, $, backquote, backslash)",
                n + 1
            );
        }
    }
}
