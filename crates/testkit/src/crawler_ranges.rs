//! The crawler operators' published range files captured in `../shared/fixtures/bots/`
//! (`{"creationTime": ..., "prefixes": [{"ipv4Prefix": ...} | {"ipv6Prefix": ...}]}`), read as
//! the text of a generated list.

use std::path::Path;

/// The prefixes of a published range file, one a line; panics (a failed test) on a file that is
/// not one.
#[allow(clippy::panic)]
pub fn as_list(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let prefixes = doc["prefixes"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no `prefixes`", file.display()));
    prefixes
        .iter()
        .filter_map(|p| p["ipv4Prefix"].as_str().or(p["ipv6Prefix"].as_str()))
        .map(|p| format!("{p}\n"))
        .collect()
}
