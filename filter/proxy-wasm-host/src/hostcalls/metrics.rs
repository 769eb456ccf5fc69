//! Hostcalls: Metrics.

use wasmtime::Linker;

use super::{Names, Result, read_string, write_u32, write_u64, written};
use crate::abi::{self, status};
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_define_metric(caller, kind: i32, name_ptr: i32, name_len: i32, ret: i32) {
            let name = read_or_fault!(read_string(&mut caller, name_ptr, name_len));
            let Some(id) = caller.data_mut().define_metric(kind, name) else {
                return Ok(status::BAD_ARGUMENT);
            };
            Ok(written(write_u32(&mut caller, ret, id)))
        }
        fn proxy_increment_metric(caller, id: i32, offset: i64) {
            match caller.data_mut().metrics.get_mut(id as u32 as usize) {
                Some(m) if m.kind != abi::metric::HISTOGRAM => {
                    m.value = m.value.saturating_add(offset);
                    Ok(status::OK)
                }
                Some(_) => Ok(status::BAD_ARGUMENT),
                None => Ok(status::NOT_FOUND),
            }
        }
        fn proxy_record_metric(caller, id: i32, value: i64) {
            match caller.data_mut().metrics.get_mut(id as u32 as usize) {
                // A histogram records a sample (Envoy's `recordValue`), a gauge is set.
                Some(m) => {
                    match &mut m.histogram {
                        Some(histogram) => histogram.record(value as u64),
                        None => m.value = value,
                    }
                    Ok(status::OK)
                }
                None => Ok(status::NOT_FOUND),
            }
        }
        fn proxy_get_metric(caller, id: i32, ret: i32) {
            let Some(value) = caller
                .data()
                .metrics
                .get(id as u32 as usize)
                .map(|m| m.value)
            else {
                return Ok(status::NOT_FOUND);
            };
            Ok(written(write_u64(&mut caller, ret, value as u64)))
        }
    }
    Ok(())
}
