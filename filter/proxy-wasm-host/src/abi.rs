//! Proxy-Wasm ABI v0.2.1 constants and the wire format of header maps and property paths.
//!
//! Facts from the spec (`proxy-wasm/spec`, `abi-versions/v0.2.1/README.md`): every integer is
//! little-endian, pointers and sizes are `i32`, every hostcall returns a `proxy_status_t`.

/// `proxy_status_t` values.
pub mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const SERIALIZATION_FAILURE: i32 = 3;
    pub const INVALID_MEMORY_ACCESS: i32 = 6;
    pub const EMPTY: i32 = 7;
    pub const CAS_MISMATCH: i32 = 8;
    pub const INTERNAL_FAILURE: i32 = 10;
}

/// `proxy_log_level_t`.
pub mod log_level {
    pub const TRACE: u32 = 0;
    pub const DEBUG: u32 = 1;
    pub const INFO: u32 = 2;
    pub const WARN: u32 = 3;
    pub const ERROR: u32 = 4;
    pub const CRITICAL: u32 = 5;
}

/// `proxy_action_t`.
pub mod action {
    pub const CONTINUE: i32 = 0;
    pub const PAUSE: i32 = 1;
}

/// `proxy_buffer_type_t` values this host serves.
pub mod buffer {
    pub const HTTP_REQUEST_BODY: i32 = 0;
    pub const HTTP_RESPONSE_BODY: i32 = 1;
    pub const VM_CONFIGURATION: i32 = 6;
    pub const PLUGIN_CONFIGURATION: i32 = 7;
}

/// `proxy_map_type_t` values this host serves.
pub mod map {
    pub const HTTP_REQUEST_HEADERS: i32 = 0;
    pub const HTTP_REQUEST_TRAILERS: i32 = 1;
    pub const HTTP_RESPONSE_HEADERS: i32 = 2;
    pub const HTTP_RESPONSE_TRAILERS: i32 = 3;
}

/// `proxy_metric_type_t`.
pub mod metric {
    pub const COUNTER: i32 = 0;
    pub const GAUGE: i32 = 1;
    pub const HISTOGRAM: i32 = 2;
}

/// `proxy_stream_type_t`.
pub mod stream {
    pub const HTTP_REQUEST: i32 = 0;
    pub const HTTP_RESPONSE: i32 = 1;
}

/// The marker export a v0.2.1 module carries.
pub const ABI_MARKER: &str = "proxy_abi_version_0_2_1";

/// Serialises a header map: a u32 count, then a (key length, value length) u32 pair per entry,
/// then each key and each value followed by a NUL byte.
pub fn serialize_map(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = vec![0; serialized_map_size(pairs)];
    serialize_map_into(pairs, &mut out);
    out
}

/// The length of [`serialize_map`]'s output.
pub fn serialized_map_size(pairs: &[(String, String)]) -> usize {
    let data: usize = pairs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    4 + pairs.len() * 8 + data
}

/// [`serialize_map`] into `out`, which holds [`serialized_map_size`] bytes (a shorter one gets
/// what fits).
pub fn serialize_map_into(pairs: &[(String, String)], out: &mut [u8]) {
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        let end = (at + bytes.len()).min(out.len());
        if let Some(dst) = out.get_mut(at..end) {
            dst.copy_from_slice(&bytes[..end - at]);
        }
        at = end;
    };
    put(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        put(&(k.len() as u32).to_le_bytes());
        put(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        put(k.as_bytes());
        put(&[0]);
        put(v.as_bytes());
        put(&[0]);
    }
}

/// Decodes a header map in the format of [`serialize_map`]. An empty input (or a lone NUL byte)
/// is the empty map. `None` when the bytes do not follow the format or are not UTF-8.
pub fn deserialize_map(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    if bytes.is_empty() || bytes == [0] {
        return Some(Vec::new());
    }
    let u32_at = |at: usize| -> Option<usize> {
        let raw: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(raw) as usize)
    };
    let count = u32_at(0)?;
    let mut sizes = Vec::with_capacity(count.min(bytes.len() / 8));
    for i in 0..count {
        sizes.push((u32_at(4 + i * 8)?, u32_at(8 + i * 8)?));
    }
    let mut at = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut take = |len: usize| -> Option<String> {
        let text = bytes.get(at..at.checked_add(len)?)?;
        if bytes.get(at + len) != Some(&0) {
            return None;
        }
        at += len + 1;
        String::from_utf8(text.to_vec()).ok()
    };
    let mut pairs = Vec::with_capacity(sizes.len());
    for (klen, vlen) in sizes {
        let key = take(klen)?;
        let value = take(vlen)?;
        pairs.push((key, value));
    }
    Some(pairs)
}

/// Turns a property path as the SDK sends it (segments joined by NUL, maybe NUL-terminated)
/// into the dotted name used by Envoy's attribute docs: `source\0address` -> `source.address`.
pub fn property_name(path: &[u8]) -> String {
    let trimmed = path.strip_suffix(&[0]).unwrap_or(path);
    String::from_utf8_lossy(trimmed).replace('\0', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_round_trip_in_the_spec_layout() {
        let pairs = vec![
            (":path".to_owned(), "/".to_owned()),
            ("cookie".to_owned(), String::new()),
        ];
        let bytes = serialize_map(&pairs);
        // count, two (klen, vlen) pairs, then "key\0value\0" twice.
        assert_eq!(&bytes[..4], &2u32.to_le_bytes());
        assert_eq!(&bytes[4..8], &5u32.to_le_bytes());
        assert_eq!(&bytes[8..12], &1u32.to_le_bytes());
        assert_eq!(&bytes[20..], b":path\0/\0cookie\0\0");
        assert_eq!(deserialize_map(&bytes), Some(pairs));
    }

    #[test]
    fn empty_and_broken_maps() {
        assert_eq!(deserialize_map(&[]), Some(vec![]));
        assert_eq!(deserialize_map(&[0]), Some(vec![]));
        assert_eq!(serialize_map(&[]), 0u32.to_le_bytes().to_vec());
        // A count that promises more than the bytes hold, and a missing NUL.
        assert_eq!(deserialize_map(&9u32.to_le_bytes()), None);
        let mut bytes = serialize_map(&[("a".into(), "b".into())]);
        let last = bytes.len() - 1;
        bytes[last] = b'x';
        assert_eq!(deserialize_map(&bytes), None);
        // Serialising into a buffer too short for the map fills what fits.
        let mut short = [9u8; 6];
        serialize_map_into(&[("a".into(), "b".into())], &mut short);
        assert_eq!(short, [1, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn property_paths_become_dotted_names() {
        assert_eq!(property_name(b"source\0address"), "source.address");
        assert_eq!(property_name(b"request\0path\0"), "request.path");
        assert_eq!(property_name(b"plugin_root_id"), "plugin_root_id");
    }
}
