//! Hostcalls: Header maps.

use wasmtime::{Caller, Linker};

use super::{
    Names, Result, header_map, read, read_string, return_bytes, return_with, write_u32, written,
};
use crate::abi::{self, status};
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    define_reads(linker, names)?;
    define_writes(linker, names)
}

/// Reading a map (and setting it whole).
fn define_reads(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_get_header_map_pairs(caller, kind: i32, ret_ptr: i32, ret_len: i32) {
            // As Envoy does: size the map, allocate that in the module, and serialise straight
            // into its memory (one copy of the headers, no intermediate buffer).
            let size = match header_map(caller.data_mut(), kind) {
                Ok(pairs) => abi::serialized_map_size(pairs),
                Err(code) => return Ok(code),
            };
            return_with(&mut caller, size, ret_ptr, ret_len, |state, dst| {
                if let Ok(pairs) = header_map(state, kind) {
                    abi::serialize_map_into(pairs, dst);
                }
            })
        }
        fn proxy_set_header_map_pairs(caller, kind: i32, ptr: i32, len: i32) {
            let bytes = read_or_fault!(read(&mut caller, ptr, len));
            let Some(pairs) = abi::deserialize_map(&bytes) else {
                return Ok(status::SERIALIZATION_FAILURE);
            };
            match header_map(caller.data_mut(), kind) {
                Ok(target) => *target = pairs,
                Err(code) => return Ok(code),
            }
            Ok(status::OK)
        }
        fn proxy_get_header_map_value(
            caller, kind: i32, key_ptr: i32, key_len: i32, ret_ptr: i32, ret_len: i32
        ) {
            let key = read_or_fault!(read_string(&mut caller, key_ptr, key_len));
            let value = match header_map(caller.data_mut(), kind) {
                Ok(pairs) => pairs
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(&key))
                    .map(|(_, v)| v.clone()),
                Err(code) => return Ok(code),
            };
            match value {
                Some(value) => return_bytes(&mut caller, value.as_bytes(), ret_ptr, ret_len),
                None => Ok(status::NOT_FOUND),
            }
        }
    }
    Ok(())
}

/// Adding, replacing and removing one value, and the map's size.
fn define_writes(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    for (name, replace) in [
        ("proxy_add_header_map_value", false),
        ("proxy_replace_header_map_value", true),
    ] {
        names.push(("env", name));
        linker.func_wrap(
            "env",
            name,
            move |mut caller: Caller<'_, State>,
                  kind: i32,
                  key_ptr: i32,
                  key_len: i32,
                  val_ptr: i32,
                  val_len: i32|
                  -> Result<i32> {
                if caller.data().faulty(name) {
                    return Ok(status::INTERNAL_FAILURE);
                }
                let (Some(key), Some(value)) = (
                    read_string(&mut caller, key_ptr, key_len),
                    read_string(&mut caller, val_ptr, val_len),
                ) else {
                    return Ok(status::INVALID_MEMORY_ACCESS);
                };
                match header_map(caller.data_mut(), kind) {
                    Ok(pairs) => {
                        if replace {
                            pairs.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
                        }
                        pairs.push((key.to_ascii_lowercase(), value));
                        Ok(status::OK)
                    }
                    Err(code) => Ok(code),
                }
            },
        )?;
    }
    hostcalls! { linker, names, "env", fail;
        fn proxy_remove_header_map_value(caller, kind: i32, key_ptr: i32, key_len: i32) {
            let key = read_or_fault!(read_string(&mut caller, key_ptr, key_len));
            match header_map(caller.data_mut(), kind) {
                Ok(pairs) => {
                    pairs.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
                    Ok(status::OK)
                }
                Err(code) => Ok(code),
            }
        }
        fn proxy_get_header_map_size(caller, kind: i32, ret: i32) {
            let size = match header_map(caller.data_mut(), kind) {
                Ok(pairs) => abi::serialized_map_size(pairs) as u32,
                Err(code) => return Ok(code),
            };
            Ok(written(write_u32(&mut caller, ret, size)))
        }
    }
    Ok(())
}
