//! Any request to the verify endpoint (path and query, headers): never a panic, never a 5xx,
//! and never a clearance (303) for what nobody solved.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_core::crypto::Keys;
use pow_core::filter::VERIFY_PATH;
use pow_core::seen::MemoryStore;
use pow_core::{Action, Filter, Metrics, Now, PluginConfig, Request};

struct Nothing;
impl Metrics for Nothing {
    fn increment(&mut self, _: &str) {}
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(4, '\n');
    let query = parts.next().unwrap_or("");
    let ua = parts.next().unwrap_or("");
    let source = parts.next().unwrap_or("");
    let cookie = parts.next().unwrap_or("");
    let Ok((keys, _)) = Keys::new(Some(b"fuzzing-secret-of-at-least-32-bytes!"), None) else {
        return;
    };
    let Ok(config) = PluginConfig::from_json(br#"{"mode": "all", "difficulty": 1}"#) else {
        return;
    };
    let Ok(filter) = Filter::new(config, Some(keys)) else {
        return;
    };
    for path in [format!("{VERIFY_PATH}?{query}"), format!("/{query}")] {
        let req = Request {
            headers: vec![
                (":method".into(), "GET".into()),
                (":path".into(), path),
                (":authority".into(), "example.org".into()),
                ("user-agent".into(), ua.into()),
                ("cookie".into(), cookie.into()),
                ("accept".into(), "text/html".into()),
            ],
            source_address: Some(source.into()),
        };
        let now = Now {
            secs: 1_800_000_000,
            nanos: 1,
        };
        let action = filter.on_request(&req, now, &mut MemoryStore::default(), &mut Nothing);
        if let Action::Respond { status, .. } = action {
            assert!(status == 403, "status {status} for {:?}", req.headers);
        }
    }
});
