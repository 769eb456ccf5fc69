//! The pins of `k8s/versions.env`, compiled in: the one place versions are declared.

use pop_common::input::InputError;
use pop_common::pins::Pins;

/// `k8s/versions.env` as it was when this binary was built.
pub const PINS: Pins<'static> = Pins::new(include_str!("../../../k8s/versions.env"));

/// The key of the demo origin's image.
pub const DEMO_ORIGIN_IMAGE: &str = "DEMO_ORIGIN_IMAGE";

/// The image of the demo origin, or an error naming the pin and the file.
pub fn demo_origin_image<'a>(pins: &Pins<'a>) -> Result<&'a str, InputError> {
    pins.require(DEMO_ORIGIN_IMAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_image_render_edge_needs_is_pinned_by_a_tag() {
        let value = demo_origin_image(&PINS).unwrap();
        assert!(
            value.contains(':'),
            "{DEMO_ORIGIN_IMAGE}={value} has no tag"
        );
        assert!(
            !value.ends_with(":latest"),
            "{DEMO_ORIGIN_IMAGE}={value} is not a pin"
        );
    }
}
