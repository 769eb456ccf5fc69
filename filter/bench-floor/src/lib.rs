//! The floor the filter's per-request cost is measured against (`make bench`): the same SDK,
//! the same host, and the least work any cookie check must do: read the `cookie` header and
//! compute one HMAC-SHA256 over it. Built with the filter's profile (`wasm-release`).

use hmac::{Hmac, Mac};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use sha2::Sha256;

/// A fixed key: the floor measures the work, not key handling.
const KEY: &[u8; 32] = b"edgepop-bench-floor-fixed-key-32";

#[allow(unsafe_code)] // the SDK's macro exports `_initialize` with `#[no_mangle]`
mod entry {
    proxy_wasm::main! {{
        proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Warn);
        proxy_wasm::set_root_context(|_| Box::new(crate::Root));
    }}
}

struct Root;

impl Context for Root {}

impl RootContext for Root {
    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Floor))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Floor;

impl Context for Floor {}

impl HttpContext for Floor {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        if let Some(cookie) = self.get_http_request_header("cookie")
            && let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(KEY)
        {
            mac.update(cookie.as_bytes());
            // Use the tag, so the HMAC cannot be optimised away.
            if mac.finalize().into_bytes()[0] == 0 {
                let _ = proxy_wasm::hostcalls::log(LogLevel::Trace, "floor: tag starts with 0");
            }
        }
        Action::Continue
    }
}
