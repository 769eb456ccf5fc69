//! Hostcalls: WASI preview1: what a wasm32-wasip1 Rust module imports.

use wasmtime::{Caller, Linker};

use super::{Names, Result, WASI, errno, read, wasi_written, write, write_u32, write_u64};
use crate::abi;
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    define_io_and_environment(linker, names)?;
    define_clock_random_and_exit(linker, names)
}

/// `fd_write` (to the log), the environment and the (empty) arguments.
fn define_io_and_environment(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let eio = errno::IO;
    hostcalls! { linker, names, WASI, eio;
        fn fd_write(caller, fd: i32, iovs: i32, iovs_len: i32, ret: i32) {
            if fd != 1 && fd != 2 {
                return Ok(errno::BADF);
            }
            let mut text = Vec::new();
            for i in 0..iovs_len.max(0) {
                let Some(iov) = read(&mut caller, iovs.wrapping_add(i * 8), 8) else {
                    return Ok(errno::FAULT);
                };
                let ptr = i32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
                let len = i32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
                let Some(chunk) = read(&mut caller, ptr, len) else {
                    return Ok(errno::FAULT);
                };
                text.extend_from_slice(&chunk);
            }
            let written = text.len() as u32;
            let message = String::from_utf8_lossy(&text).trim_end().to_owned();
            if !message.is_empty() {
                let level = if fd == 1 {
                    abi::log_level::INFO
                } else {
                    abi::log_level::ERROR
                };
                caller.data_mut().log(level, message);
            }
            Ok(wasi_written(write_u32(&mut caller, ret, written)))
        }
        fn environ_sizes_get(caller, ret_count: i32, ret_size: i32) {
            let env = &caller.data().config.env;
            let count = env.len() as u32;
            let size: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
            Ok(
                if write_u32(&mut caller, ret_count, count)
                    && write_u32(&mut caller, ret_size, size as u32)
                {
                    errno::SUCCESS
                } else {
                    errno::FAULT
                },
            )
        }
        fn environ_get(caller, ptrs: i32, buf: i32) {
            let env = caller.data().config.env.clone();
            let mut at = buf;
            for (i, (k, v)) in env.iter().enumerate() {
                let mut entry = Vec::with_capacity(k.len() + v.len() + 2);
                entry.extend_from_slice(k.as_bytes());
                entry.push(b'=');
                entry.extend_from_slice(v);
                entry.push(0);
                if !write_u32(&mut caller, ptrs.wrapping_add(i as i32 * 4), at as u32)
                    || !write(&mut caller, at, &entry)
                {
                    return Ok(errno::FAULT);
                }
                at = at.wrapping_add(entry.len() as i32);
            }
            Ok(errno::SUCCESS)
        }
        fn args_sizes_get(caller, ret_count: i32, ret_size: i32) {
            Ok(
                if write_u32(&mut caller, ret_count, 0) && write_u32(&mut caller, ret_size, 0) {
                    errno::SUCCESS
                } else {
                    errno::FAULT
                },
            )
        }
        fn args_get(caller, _ptrs: i32, _buf: i32) { Ok(errno::SUCCESS) }
    }
    Ok(())
}

/// The clock, the random source, `sched_yield` and `proc_exit` (a trap).
fn define_clock_random_and_exit(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let eio = errno::IO;
    hostcalls! { linker, names, WASI, eio;
        fn clock_time_get(caller, _id: i32, _precision: i64, ret: i32) {
            let now = caller.data().now_nanos();
            Ok(wasi_written(write_u64(&mut caller, ret, now)))
        }
        fn random_get(caller, buf: i32, len: i32) {
            let mut bytes = vec![0u8; len.max(0) as usize];
            if getrandom::fill(&mut bytes).is_err() {
                return Ok(errno::IO);
            }
            Ok(wasi_written(write(&mut caller, buf, &bytes)))
        }
        fn sched_yield(caller) {
            Ok(errno::SUCCESS)
        }
    }
    names.push((WASI, "proc_exit"));
    linker.func_wrap(
        WASI,
        "proc_exit",
        |_caller: Caller<'_, State>, code: i32| -> Result<()> {
            Err(wasmtime::Error::msg(format!(
                "the module called proc_exit({code})"
            )))
        },
    )?;
    Ok(())
}
