//! The pins of `k8s/versions.env`, compiled in: the one place versions are declared.

const VERSIONS_ENV: &str = include_str!("../../../k8s/versions.env");

/// Looks up `key` in `k8s/versions.env`.
pub fn pin(key: &str) -> Option<&'static str> {
    pin_in(VERSIONS_ENV, key)
}

/// Looks up `key` in a `KEY=value` text; a line that starts with `#` is a comment, even when it
/// holds an `=` (a pin commented out is not a pin).
fn pin_in<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.trim().split_once('=')?;
        (!k.starts_with('#') && k == key).then_some(v.trim())
    })
}

/// The image of the demo origin.
pub fn demo_origin_image() -> &'static str {
    pin("DEMO_ORIGIN_IMAGE").unwrap_or("missing-DEMO_ORIGIN_IMAGE-in-k8s-versions.env")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_image_render_edge_needs_is_pinned() {
        let key = "DEMO_ORIGIN_IMAGE";
        let value = pin(key).unwrap_or_else(|| panic!("{key} missing from k8s/versions.env"));
        assert!(value.contains(':'), "{key}={value} has no tag");
        assert!(!value.ends_with(":latest"), "{key}={value} is not a pin");
    }

    #[test]
    fn comments_and_unknown_keys_are_not_pins() {
        assert_eq!(pin("NO_SUCH_KEY"), None);
        // Each commented line holds an `=`, so only the comment guard keeps it from being read
        // as a pin (the first commented line would otherwise win).
        let text = "#DEMO_ORIGIN_IMAGE=old.example/echo:0.1\n\
                    # Bumped from 0.1: DEMO_ORIGIN_IMAGE=x\n\
                    DEMO_ORIGIN_IMAGE=docker.io/hashicorp/http-echo:1.0.0\n";
        assert_eq!(pin_in(text, "#DEMO_ORIGIN_IMAGE"), None);
        assert_eq!(pin_in(text, "# Bumped from 0.1: DEMO_ORIGIN_IMAGE"), None);
        assert_eq!(
            pin_in(text, "DEMO_ORIGIN_IMAGE"),
            Some("docker.io/hashicorp/http-echo:1.0.0")
        );
    }
}
