//! What the native tests of the filter share: a world (filter, store, counters, clock), a
//! browser-like request, reading the challenge page and solving it.

// Each test file uses its own subset of these.
#![allow(dead_code, unused_imports, clippy::unwrap_used)]

pub use std::collections::HashMap;

pub use pow_core::crypto::{self, Keys};
pub use pow_core::filter::{VERIFY_PATH, VerifyQuery, metric, percent_encode_component};
pub use pow_core::seen::MemoryStore;
pub use pow_core::{Action, Filter, Metrics, Now, PluginConfig, Request};

pub const KEY_A: &[u8] = b"an-hmac-secret-of-32-bytes-or-more-A";
pub const KEY_B: &[u8] = b"an-hmac-secret-of-32-bytes-or-more-B";
pub const T0: u64 = 1_800_000_000;
/// The challenge salts' seed (the glue draws it from the VM's random source).
pub const SEED: [u8; 32] = [7; 32];
pub const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) Chrome/140";
pub const HTML: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

/// The counters by name, and every decision line the filter handed over (none left out: the
/// limiter is the glue's).
#[derive(Default)]
pub struct Counters(pub HashMap<String, u64>, pub Vec<serde_json::Value>);

impl Metrics for Counters {
    fn increment(&mut self, name: &str) {
        *self.0.entry(name.to_owned()).or_default() += 1;
    }
    fn decision<'e>(&mut self, event: &dyn Fn() -> pow_core::decision_log::DecisionEvent<'e>) {
        self.1
            .push(serde_json::from_str(&event().to_json(0)).unwrap());
    }
}

impl Counters {
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

pub struct World {
    pub filter: Filter,
    pub store: MemoryStore,
    pub metrics: Counters,
    pub now: u64,
}

pub fn config(json: &str) -> PluginConfig {
    PluginConfig::from_json(json.as_bytes()).unwrap()
}

pub fn keys(current: &[u8], previous: Option<&[u8]>) -> Keys {
    Keys::new(Some(current), previous).unwrap().0
}

pub const LISTED: &str = r#"{
  "mode": "listed", "difficulty": 6, "list_difficulty": {"tor": 9, "hosting": 7},
  "bypass_paths": ["/healthz"],
  "lists": {"version": "2026-11-29T17:17:00Z", "generated_at": "2026-11-29T17:17:00Z",
            "sets": {"tor": "185.220.101.0/24\n2a0b:f4c2::/40\n203.0.113.5", "hosting": "203.0.113.0/24 198.51.100.0/24"}}
}"#;

impl World {
    pub fn new(json: &str) -> World {
        World::with_keys(json, Some(keys(KEY_A, None)))
    }

    /// The filter as the glue starts it: the seen-set started at configure time.
    pub fn with_keys(json: &str, keys: Option<Keys>) -> World {
        let mut store = MemoryStore::default();
        pow_core::seen::start(&mut store, T0);
        World {
            filter: Filter::new(config(json), keys, SEED).unwrap(),
            store,
            metrics: Counters::default(),
            now: T0,
        }
    }

    pub fn send(&mut self, req: &Request) -> Action {
        let now = Now { secs: self.now };
        self.filter
            .on_request(req, now, &mut self.store, &mut self.metrics)
    }
}

pub fn req(path: &str, source: &str) -> Request<'static> {
    Request {
        headers: vec![
            (":method".into(), "GET".into()),
            (":path".into(), path.to_owned().into()),
            (":authority".into(), "edge.example.org".into()),
            (":scheme".into(), "https".into()),
            ("user-agent".into(), BROWSER.into()),
            ("accept".into(), HTML.into()),
        ],
        cookies: Vec::new(),
        source_address: Some(source.to_owned().into()),
    }
}

pub fn with_header(mut r: Request<'static>, name: &str, value: &str) -> Request<'static> {
    r.headers.retain(|(n, _)| n != name);
    r.headers
        .push((name.to_owned().into(), value.to_owned().into()));
    r
}

pub fn body(a: &Action) -> String {
    match a {
        Action::Respond { body, .. } => String::from_utf8(body.clone()).unwrap(),
        Action::Continue(_) => String::new(),
    }
}

/// The page's data block.
pub fn page_data(a: &Action) -> serde_json::Value {
    let html = body(a);
    let start = html
        .find(r#"<script id="pow-data" type="application/json">"#)
        .unwrap();
    let rest = &html[start..];
    let json = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(json).unwrap()
}

/// Solves like the page does (worker 0: high word 0, low word counting up).
pub fn solve(data: &serde_json::Value) -> VerifyQuery {
    let challenge = crypto::unhex::<32>(data["c"].as_str().unwrap()).unwrap();
    let d = data["d"].as_u64().unwrap() as u8;
    let nonce = (0..1u64 << 24)
        .find(|&n| crypto::check_work(&challenge, n, d))
        .unwrap();
    VerifyQuery {
        challenge,
        issued: data["i"].as_u64().unwrap(),
        expiry: data["e"].as_u64().unwrap(),
        difficulty: d,
        salt: u64::from_str_radix(data["s"].as_str().unwrap(), 16).unwrap(),
        nonce,
        return_to: data["r"].as_str().unwrap().to_owned(),
    }
}

pub fn verify_path(q: &VerifyQuery) -> String {
    format!("{VERIFY_PATH}?{}", q.to_query())
}

pub fn cookie_of(a: &Action) -> String {
    let set = a.header("set-cookie").unwrap();
    set.split(';').next().unwrap().to_owned()
}
