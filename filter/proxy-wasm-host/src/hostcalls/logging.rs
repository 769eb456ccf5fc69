//! Hostcalls: Logging, time, ticks.

use wasmtime::Linker;

use super::{Names, Result, read_string, write_u32, write_u64};
use crate::abi::status;
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_log",
        |caller, level: i32, ptr: i32, len: i32| {
            let Some(message) = read_string(&mut caller, ptr, len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            caller.data_mut().log(level as u32, message);
            Ok(status::OK)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_log_level",
        |caller, ret: i32| {
            let level = caller.data().config.log_level;
            Ok(if write_u32(&mut caller, ret, level) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_current_time_nanoseconds",
        |caller, ret: i32| {
            let now = caller.data().now_nanos();
            Ok(if write_u64(&mut caller, ret, now) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_tick_period_milliseconds",
        |caller, period: i32| {
            caller.data_mut().tick_period_ms = period as u32;
            Ok(status::OK)
        }
    );
    Ok(())
}
