//! Any pluginConfig: never a panic; what is accepted builds a filter and survives a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pow_core::{Filter, PluginConfig};

fuzz_target!(|data: &[u8]| {
    if let Ok(config) = PluginConfig::from_json(data) {
        let json = serde_json::to_vec(&config).unwrap_or_default();
        let again = PluginConfig::from_json(&json);
        assert_eq!(again.as_ref(), Ok(&config));
        assert!(Filter::new(config, None).is_ok());
    }
});
