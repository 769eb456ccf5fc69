//! Reading rendered objects and records in tests.

use serde_json::Value;

/// The first element of `array` whose value at `pointer` (a JSON pointer: `/kind`,
/// `/metadata/name`) is `value`. Panics naming what it looked for, and in what, when `array` is
/// not an array or holds no such element.
#[allow(clippy::panic)] // an assertion helper for tests: failing is its job
pub fn element<'a>(array: &'a Value, pointer: &str, value: impl Into<Value>) -> &'a Value {
    let value = value.into();
    let Some(elements) = array.as_array() else {
        panic!("looking for {pointer} = {value}: not an array: {array}");
    };
    elements
        .iter()
        .find(|element| element.pointer(pointer) == Some(&value))
        .unwrap_or_else(|| panic!("no element with {pointer} = {value} in {array}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_element_with_the_value_is_found() {
        let items = json!([
            {"kind": "Service", "metadata": {"name": "a"}},
            {"kind": "CronJob", "metadata": {"name": "b"}},
            {"kind": "CronJob", "metadata": {"name": "c"}},
        ]);
        assert_eq!(element(&items, "/kind", "CronJob")["metadata"]["name"], "b");
        assert_eq!(element(&items, "/metadata/name", "c")["kind"], "CronJob");
    }

    #[test]
    #[should_panic(expected = "no element with /kind = \"Job\"")]
    fn a_missing_element_is_named() {
        element(&json!([{"kind": "CronJob"}]), "/kind", "Job");
    }

    #[test]
    #[should_panic(expected = "not an array")]
    fn a_value_that_is_no_array_is_named() {
        element(&json!({"kind": "CronJob"}), "/kind", "CronJob");
    }
}
