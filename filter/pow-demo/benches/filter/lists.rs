//! The bench's policy lists: synthetic prefixes, in text and packed, and what a refresh costs.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use proxy_wasm_host::{Host, Outcome};

use crate::requests::request;
use crate::{LISTED, median, table, vm_config};

/// Deterministic synthetic prefixes: 80 % IPv4 (/16 to /32), 20 % IPv6 (/32 to /64), none of
/// them covering the unlisted address; the listed address's /24 comes first.
pub fn prefixes(count: usize) -> String {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15 ^ count as u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = String::with_capacity(count * 20);
    out.push_str("198.51.100.0/24\n");
    let mut made = 1;
    while made < count {
        let r = next();
        if r % 5 == 0 {
            let len = 32 + (r >> 8) % 33;
            let words = next();
            let _ = writeln!(
                out,
                "2a{:02x}:{:x}:{:x}:{:x}::/{len}",
                (words >> 56) as u8,
                (words >> 32) as u16,
                (words >> 16) as u16,
                words as u16
            );
        } else {
            let len = 16 + (r >> 8) % 17;
            let addr = (next() >> 32) as u32;
            let masked = addr & (u32::MAX << (32 - len));
            let [a, b, c, d] = masked.to_be_bytes();
            // Keep the unlisted address (203.0.113.7) unlisted.
            if a == 203 && (len <= 8 || b == 0 && (len <= 16 || c == 113)) {
                continue;
            }
            let _ = writeln!(out, "{a}.{b}.{c}.{d}/{len}");
        }
        made += 1;
    }
    out
}

pub fn listed_config(prefixes: &str) -> Vec<u8> {
    serde_json::json!({
        "mode": "listed",
        "difficulty": 6,
        "lists": {
            "version": "bench",
            "generated_at": "2026-11-29T00:00:00Z",
            "sets": { "hosting": prefixes },
        },
    })
    .to_string()
    .into_bytes()
}

/// The same lists packed (`pluginConfig.lists.packed`), as lists-refresh writes them.
fn packed_config(prefixes: &str) -> Result<(Vec<u8>, usize), String> {
    let nets = pow_core::lists::parse_set(prefixes)?;
    let packed = pow_core::packed::encode(&nets)?;
    let config = serde_json::json!({
        "mode": "listed",
        "difficulty": 6,
        "lists": {
            "version": "bench",
            "generated_at": "2026-11-29T00:00:00Z",
            "packed": { "hosting": packed },
        },
    });
    Ok((config.to_string().into_bytes(), packed.len()))
}

/// What a list refresh costs the running module, text against packed: `on_configure` on one
/// VM (`reconfigure`, so the module's compile is not counted), median of three, then a listed
/// address must be challenged.
pub fn packed_configures(filter: &Path, env: &[(String, Vec<u8>)]) -> Result<String, String> {
    let mut host = Host::load(
        filter,
        vm_config(listed_config(&prefixes(1_000)), env.to_vec()),
    )
    .map_err(|e| e.to_string())?;
    let mut out = table(
        "\n## A list refresh in the module: on_configure, text against packed (median of 3)",
        "| prefixes | pluginConfig text | packed | on_configure text | on_configure packed |",
        "| ---: | ---: | ---: | ---: | ---: |",
    );
    for (count, name) in [(100_000, "100k"), (250_000, "250k"), (1_000_000, "1M")] {
        let text = prefixes(count);
        let text_config = listed_config(&text);
        let (packed, _) = packed_config(&text)?;
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..3 {
            for (config, samples) in [&text_config, &packed].into_iter().zip(times.iter_mut()) {
                let t = Instant::now();
                let accepted = host
                    .reconfigure(config.clone())
                    .map_err(|e| e.to_string())?;
                samples.push(t.elapsed().as_secs_f64() * 1000.0);
                if !accepted {
                    return Err(format!("{name} prefixes: the module refused the lists"));
                }
            }
        }
        match host
            .request(request(LISTED, None))
            .map_err(|e| e.to_string())?
        {
            Outcome::Local { status: 403, .. } => {}
            other => return Err(format!("{name} packed: {LISTED} not challenged: {other:?}")),
        }
        let [text_ms, packed_ms] = &mut times;
        let _ = writeln!(
            out,
            "| {name} | {:.2} MB | {:.2} MB | {:.0} ms | {:.0} ms |",
            text_config.len() as f64 / 1e6,
            packed.len() as f64 / 1e6,
            median(text_ms),
            median(packed_ms)
        );
    }
    Ok(out)
}
