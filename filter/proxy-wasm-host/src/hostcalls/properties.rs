//! Hostcalls: Properties.

use wasmtime::Linker;

use super::{Names, Result, property, read, return_bytes};
use crate::abi::{self, status};
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_get_property(caller, path_ptr: i32, path_len: i32, ret_ptr: i32, ret_len: i32) {
            let path = read_or_fault!(read(&mut caller, path_ptr, path_len));
            match property(caller.data(), &abi::property_name(&path)) {
                Some(value) => return_bytes(&mut caller, &value, ret_ptr, ret_len),
                None => Ok(status::NOT_FOUND),
            }
        }
        fn proxy_set_property(caller, path_ptr: i32, path_len: i32, val_ptr: i32, val_len: i32) {
            let (Some(path), Some(value)) = (
                read(&mut caller, path_ptr, path_len),
                read(&mut caller, val_ptr, val_len),
            ) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            caller
                .data_mut()
                .set_properties
                .insert(abi::property_name(&path), value);
            Ok(status::OK)
        }
    }
    Ok(())
}
