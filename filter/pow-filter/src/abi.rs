//! The Proxy-Wasm ABI v0.2.1 hostcalls this filter makes, called directly.
//!
//! Why not `proxy_wasm::hostcalls`: the SDK panics on any status it did not expect (an
//! INTERNAL_FAILURE from `proxy_get_header_map_pairs`, for one), and a panic aborts the VM:
//! every request after it would meet a dead filter. Here every status becomes a `Result`, so
//! the filter can fail open and count it. This module holds every `unsafe` block of the crate:
//! raw imports, and taking ownership of the buffers the host allocated through the SDK's
//! exported `proxy_on_memory_allocate` (a boxed `[u8]` of exactly the returned size). The one
//! other place the `unsafe_code` lint is allowed is `entry` in lib.rs, where the SDK's `main!`
//! exports `_initialize` with `#[no_mangle]` (no `unsafe` block of ours).
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::ptr::{null, null_mut};

/// A status other than OK (the raw ABI value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub u32);

pub const NOT_FOUND: u32 = 1;
pub const CAS_MISMATCH: u32 = 8;

pub const MAP_HTTP_REQUEST_HEADERS: u32 = 0;
pub const BUFFER_PLUGIN_CONFIGURATION: u32 = 7;
pub const METRIC_COUNTER: u32 = 0;
pub const METRIC_GAUGE: u32 = 1;
pub const METRIC_HISTOGRAM: u32 = 2;

/// Log levels.
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
pub enum Level {
    Info = 2,
    Warn = 3,
    Error = 4,
    Critical = 5,
}

mod raw {
    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        pub fn proxy_log(level: u32, data: *const u8, size: usize) -> u32;
        pub fn proxy_get_current_time_nanoseconds(ret: *mut u64) -> u32;
        pub fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
        pub fn proxy_get_buffer_bytes(
            kind: u32,
            start: usize,
            max: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
        ) -> u32;
        pub fn proxy_get_header_map_pairs(
            kind: u32,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
        ) -> u32;
        pub fn proxy_get_property(
            path: *const u8,
            path_size: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
        ) -> u32;
        pub fn proxy_send_local_response(
            status: u32,
            details: *const u8,
            details_size: usize,
            body: *const u8,
            body_size: usize,
            headers: *const u8,
            headers_size: usize,
            grpc_status: i32,
        ) -> u32;
        pub fn proxy_get_shared_data(
            key: *const u8,
            key_size: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
            ret_cas: *mut u32,
        ) -> u32;
        pub fn proxy_set_shared_data(
            key: *const u8,
            key_size: usize,
            value: *const u8,
            value_size: usize,
            cas: u32,
        ) -> u32;
        pub fn proxy_define_metric(
            kind: u32,
            name: *const u8,
            name_size: usize,
            ret_id: *mut u32,
        ) -> u32;
        pub fn proxy_increment_metric(id: u32, offset: i64) -> u32;
        pub fn proxy_record_metric(id: u32, value: u64) -> u32;
        pub fn proxy_remove_header_map_value(kind: u32, key: *const u8, key_size: usize) -> u32;
        pub fn proxy_replace_header_map_value(
            kind: u32,
            key: *const u8,
            key_size: usize,
            value: *const u8,
            value_size: usize,
        ) -> u32;
    }

    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    unsafe extern "C" {
        /// WASI preview1: fills `len` bytes at `buf` from the host's random source; errno.
        pub fn random_get(buf: *mut u8, len: usize) -> i32;
    }
}

fn ok(status: u32) -> Result<(), Status> {
    if status == 0 {
        Ok(())
    } else {
        Err(Status(status))
    }
}

/// Takes a buffer the host wrote into guest memory (allocated by `proxy_on_memory_allocate`).
fn take(ptr: *mut u8, size: usize) -> Option<Vec<u8>> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the host allocated `size` bytes at `ptr` through the SDK's exported allocator
    // (a boxed slice of exactly `size` bytes) and hands ownership to us, as the ABI says.
    Some(unsafe { Vec::from_raw_parts(ptr, size, size) })
}

pub fn log(level: Level, message: &str) -> Result<(), Status> {
    // SAFETY: a pointer and length of a live &str.
    ok(unsafe { raw::proxy_log(level as u32, message.as_ptr(), message.len()) })
}

pub fn now_nanos() -> Result<u64, Status> {
    let mut t = 0u64;
    // SAFETY: a valid pointer to a u64 on our stack.
    ok(unsafe { raw::proxy_get_current_time_nanoseconds(&mut t) })?;
    Ok(t)
}

pub fn set_tick_period_ms(ms: u32) -> Result<(), Status> {
    // SAFETY: no pointer.
    ok(unsafe { raw::proxy_set_tick_period_milliseconds(ms) })
}

pub fn get_buffer(kind: u32, max: usize) -> Result<Option<Vec<u8>>, Status> {
    let (mut p, mut n) = (null_mut(), 0usize);
    // SAFETY: valid out-pointers on our stack.
    match unsafe { raw::proxy_get_buffer_bytes(kind, 0, max, &mut p, &mut n) } {
        0 => Ok(take(p, n)),
        NOT_FOUND => Ok(None),
        s => Err(Status(s)),
    }
}

/// Random bytes from the host (WASI `random_get`; Envoy: the system's random source).
pub fn random_bytes<const N: usize>() -> Result<[u8; N], Status> {
    let mut out = [0u8; N];
    // SAFETY: a valid buffer of N bytes on our stack.
    match unsafe { raw::random_get(out.as_mut_ptr(), N) } {
        0 => Ok(out),
        errno => Err(Status(errno.unsigned_abs())),
    }
}

/// Removes a request header (every value of it).
pub fn remove_request_header(name: &str) -> Result<(), Status> {
    // SAFETY: a pointer and length of a live &str.
    ok(unsafe {
        raw::proxy_remove_header_map_value(MAP_HTTP_REQUEST_HEADERS, name.as_ptr(), name.len())
    })
}

/// Sets a request header (`:path` included), replacing every value it had.
pub fn replace_request_header(name: &str, value: &str) -> Result<(), Status> {
    // SAFETY: pointers and lengths of live &strs.
    ok(unsafe {
        raw::proxy_replace_header_map_value(
            MAP_HTTP_REQUEST_HEADERS,
            name.as_ptr(),
            name.len(),
            value.as_ptr(),
            value.len(),
        )
    })
}

/// The request's header map as the host serialised it (pseudo-headers included), to be read
/// with [`deserialize_map_with`].
pub fn get_request_header_map() -> Result<Vec<u8>, Status> {
    let (mut p, mut n) = (null_mut(), 0usize);
    // SAFETY: valid out-pointers on our stack.
    ok(unsafe { raw::proxy_get_header_map_pairs(MAP_HTTP_REQUEST_HEADERS, &mut p, &mut n) })?;
    Ok(take(p, n).unwrap_or_default())
}

/// Decodes a serialised map (u32 count, (key_len, value_len) pairs, then NUL-terminated keys
/// and values), bounds-checked: `None` if it is malformed.
#[cfg(test)]
pub fn deserialize_map(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let pairs = deserialize_map_with(bytes, |_, v| Some(String::from_utf8_lossy(v)))?;
    Some(
        pairs
            .into_iter()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    )
}

/// [`deserialize_map`], keeping the pairs `select(name, value)` gives a value for, with that
/// value, so the caller decodes only what it reads (the whole map is still bounds-checked).
/// Names and values borrow from `bytes` where they are UTF-8 (others are replaced): no
/// allocation per header.
pub fn deserialize_map_with<'b>(
    bytes: &'b [u8],
    mut select: impl FnMut(&'b [u8], &'b [u8]) -> Option<Cow<'b, str>>,
) -> Option<Vec<(Cow<'b, str>, Cow<'b, str>)>> {
    if bytes.len() <= 1 {
        return Some(Vec::new());
    }
    let u32_at = |at: usize| -> Option<usize> {
        let b = bytes.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let count = u32_at(0)?;
    let mut data = 4usize.checked_add(count.checked_mul(8)?)?;
    if data > bytes.len() {
        return None;
    }
    let mut out = Vec::with_capacity(count.min(16));
    for i in 0..count {
        let k_len = u32_at(4 + i * 8)?;
        let v_len = u32_at(8 + i * 8)?;
        let key = bytes.get(data..data.checked_add(k_len)?)?;
        data = data.checked_add(k_len)?.checked_add(1)?;
        let value = bytes.get(data..data.checked_add(v_len)?)?;
        data = data.checked_add(v_len)?.checked_add(1)?;
        if let Some(value) = select(key, value) {
            out.push((pow_core::filter::utf8_lossy(key), value));
        }
    }
    Some(out)
}

/// Serialises headers for `proxy_send_local_response`.
pub fn serialize_map(map: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(map.len() as u32).to_le_bytes());
    for (k, v) in map {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in map {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// A property, by its path with the segments NUL-separated (`b"source\0address"`).
pub fn get_property(path: &[u8]) -> Result<Option<Vec<u8>>, Status> {
    let (mut p, mut n) = (null_mut(), 0usize);
    // SAFETY: a live buffer and valid out-pointers.
    match unsafe { raw::proxy_get_property(path.as_ptr(), path.len(), &mut p, &mut n) } {
        0 => Ok(take(p, n)),
        NOT_FOUND => Ok(None),
        s => Err(Status(s)),
    }
}

pub fn send_local_response(
    status: u32,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(), Status> {
    let h = serialize_map(headers);
    let details = b"pow_filter";
    // SAFETY: pointers and lengths of live buffers.
    ok(unsafe {
        raw::proxy_send_local_response(
            status,
            details.as_ptr(),
            details.len(),
            if body.is_empty() {
                null()
            } else {
                body.as_ptr()
            },
            body.len(),
            h.as_ptr(),
            h.len(),
            -1,
        )
    })
}

/// The value and CAS token of a shared-data key; `None` when it does not exist.
pub fn get_shared_data(key: &str) -> Result<Option<(Vec<u8>, u32)>, Status> {
    let (mut p, mut n, mut cas) = (null_mut(), 0usize, 0u32);
    // SAFETY: a live key and valid out-pointers.
    match unsafe { raw::proxy_get_shared_data(key.as_ptr(), key.len(), &mut p, &mut n, &mut cas) } {
        0 => Ok(Some((take(p, n).unwrap_or_default(), cas))),
        NOT_FOUND => Ok(None),
        s => Err(Status(s)),
    }
}

pub fn set_shared_data(key: &str, value: &[u8], cas: u32) -> Result<(), Status> {
    // SAFETY: live buffers.
    ok(unsafe {
        raw::proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas)
    })
}

pub fn define_metric(kind: u32, name: &str) -> Result<u32, Status> {
    let mut id = 0u32;
    // SAFETY: a live name and a valid out-pointer.
    ok(unsafe { raw::proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

pub fn increment_metric(id: u32, by: i64) -> Result<(), Status> {
    // SAFETY: no pointer.
    ok(unsafe { raw::proxy_increment_metric(id, by) })
}

pub fn record_metric(id: u32, value: u64) -> Result<(), Status> {
    // SAFETY: no pointer.
    ok(unsafe { raw::proxy_record_metric(id, value) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_roundtrip_and_malformed() {
        let m = vec![
            (":path".to_owned(), "/x".to_owned()),
            ("user-agent".to_owned(), "".to_owned()),
        ];
        assert_eq!(deserialize_map(&serialize_map(&m)), Some(m.clone()));
        assert_eq!(deserialize_map(&[]), Some(vec![]));
        assert_eq!(deserialize_map(&[0]), Some(vec![]));
        assert_eq!(deserialize_map(&[1, 0, 0, 0, 5, 0, 0, 0]), None);
        assert_eq!(deserialize_map(&[255, 255, 255, 255, 0, 0]), None);
        let mut bad = serialize_map(&[("k".to_owned(), "v".to_owned())]);
        bad.truncate(bad.len() - 2);
        assert_eq!(deserialize_map(&bad), None);
        let bytes = serialize_map(&m);
        let only = deserialize_map_with(&bytes, |k, v| {
            (k == b":path").then(|| Cow::Owned(format!("{}!", String::from_utf8_lossy(v))))
        });
        assert_eq!(only, Some(vec![(":path".into(), "/x!".into())]));
    }
}
