//! The pins of `k8s/versions.env`, compiled in: the one place versions are declared.

const VERSIONS_ENV: &str = include_str!("../../../k8s/versions.env");

/// Looks up `key` in `k8s/versions.env`.
pub fn pin(key: &str) -> Option<&'static str> {
    VERSIONS_ENV.lines().find_map(|line| {
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
        assert_eq!(
            pin(
                "# Talos: seed 004 pins v1.13.11 (the talos provider 0.12.0 breaks on 1.14, see seed 000)."
            ),
            None
        );
    }
}
