//! Hostcalls: Logging, time, ticks.

use wasmtime::Linker;

use super::{Names, Result, read_string, write_u32, write_u64, written};
use crate::abi::status;
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_log(caller, level: i32, ptr: i32, len: i32) {
            let message = read_or_fault!(read_string(&mut caller, ptr, len));
            caller.data_mut().log(level as u32, message);
            Ok(status::OK)
        }
        fn proxy_get_log_level(caller, ret: i32) {
            let level = caller.data().config.log_level;
            Ok(written(write_u32(&mut caller, ret, level)))
        }
        fn proxy_get_current_time_nanoseconds(caller, ret: i32) {
            let now = caller.data().now_nanos();
            Ok(written(write_u64(&mut caller, ret, now)))
        }
        fn proxy_set_tick_period_milliseconds(caller, period: i32) {
            caller.data_mut().tick_period_ms = period as u32;
            Ok(status::OK)
        }
    }
    Ok(())
}
