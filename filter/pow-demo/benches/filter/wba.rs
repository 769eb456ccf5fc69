//! One Web Bot Auth verification in the module against the same crate natively. The module's is
//! the time of a signed request through a `signed_agent` rule above the same request unsigned
//! (both let through, on one VM); the native one is `TrustedAgents::verify` of pow-core, on the
//! same fields, in this process. Same crate, same key, same signature, same work: parse, base,
//! `verify_strict`.

use std::borrow::Cow;
use std::hint::black_box;
use std::time::Instant;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use pow_core::web_bot_auth::{SignedRequest, TrustedAgents};
use proxy_wasm_host::{Host, HostConfig, Outcome, Request};

use crate::requests::request;
use crate::{Rows, UNLISTED, vm_config};

/// The signature's window, and the clock of the VM and of the native check inside it.
const CREATED: u64 = 1_900_000_000;
const EXPIRES: u64 = CREATED + 300;
const NOW: u64 = CREATED + 10;
/// Verifications per native sample.
const NATIVE_BATCH: u32 = 200;

pub const SIGNED: &str = "web bot auth: signed request, one verification (pass)";
pub const UNSIGNED: &str = "web bot auth: the same request unsigned (pass)";

/// The agent's key (fixed: the bench is deterministic), its JWK and its configuration.
fn agent() -> (SigningKey, serde_json::Value) {
    let key = SigningKey::from_bytes(&[0x5a; 32]);
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    let config = serde_json::json!({
        "mode": "off",
        "agents": {"benchbot": {"keys": {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x}]}}},
        "rules": [{"name": "signed", "signed_agent": ["benchbot"], "action": "allow"}],
    });
    (key, config)
}

/// The bench's request, signed over `@authority` and `Signature-Agent` as arch-05's examples
/// are, with the key's thumbprint as its keyid.
fn signed_request(key: &SigningKey) -> Request {
    let keyid = pow_core::web_bot_auth::thumbprint(&key.verifying_key());
    let unsigned = request(UNLISTED, None);
    let agent = "\"https://signature-agent.test\"";
    let params = format!(
        "(\"@authority\" \"signature-agent\");created={CREATED};expires={EXPIRES};\
         keyid=\"{keyid}\";alg=\"ed25519\";tag=\"web-bot-auth\""
    );
    let base = format!(
        "\"@authority\": {}\n\"signature-agent\": {agent}\n\"@signature-params\": {params}",
        unsigned.authority
    );
    let signature =
        base64::engine::general_purpose::STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    unsigned
        .header("signature-agent", agent)
        .header("signature-input", &format!("sig1={params}"))
        .header("signature", &format!("sig1=:{signature}:"))
}

/// The two rows on one VM, each checked to be decided as it should: the signed request by the
/// `signed` rule, the unsigned one by the mode.
pub fn scenarios(rows: &mut Rows) -> Result<(), String> {
    let (key, config) = agent();
    let mut host = Host::load(
        rows.filter,
        HostConfig {
            time_nanos: Some(NOW * 1_000_000_000),
            ..vm_config(config.to_string().into_bytes(), rows.env.to_vec())
        },
    )
    .map_err(|e| format!("web bot auth: {e}"))?;
    let signed = signed_request(&key);
    let unsigned = request(UNLISTED, None);
    for (label, req, rule) in [
        (SIGNED, &signed, "signed"),
        (UNSIGNED, &unsigned, "default"),
    ] {
        let decision = match host.request_ref(req).map_err(|e| e.to_string())? {
            Outcome::Continue { headers } => headers
                .into_iter()
                .find(|(n, _)| n == "pow-decision")
                .map(|(_, v)| v),
            Outcome::Local { status, .. } => return Err(format!("{label}: answered {status}")),
        };
        let expected = format!("rule={rule}; action=allowed");
        if decision.as_deref() != Some(expected.as_str()) {
            return Err(format!("{label}: decided {decision:?}, not {expected}"));
        }
    }
    let index = rows.add_host(host);
    for (label, request) in [(SIGNED, signed), (UNSIGNED, unsigned)] {
        rows.add(label, index, vec![request], false);
    }
    Ok(())
}

/// The native verification of the same signed request, `TrustedAgents::verify` of pow-core.
/// The request is as the module gets it (pseudo-headers first, names lowercase).
pub struct NativeVerify {
    agents: TrustedAgents,
    request: pow_core::Request<'static>,
}

impl NativeVerify {
    pub fn new() -> Result<NativeVerify, String> {
        let (key, config) = agent();
        let config = pow_core::PluginConfig::from_json(config.to_string().as_bytes())
            .map_err(|e| e.to_string())?;
        let agents = TrustedAgents::from_config(&config).map_err(|e| e.to_string())?;
        let signed = signed_request(&key);
        let mut headers: Vec<(Cow<'static, str>, Cow<'static, str>)> = vec![
            (":method".into(), signed.method.clone().into()),
            (":path".into(), signed.path.clone().into()),
            (":authority".into(), signed.authority.clone().into()),
            (":scheme".into(), signed.scheme.clone().into()),
        ];
        headers.extend(
            signed
                .headers
                .iter()
                .map(|(n, v)| (Cow::from(n.clone()), Cow::from(v.clone()))),
        );
        let request = pow_core::Request {
            headers,
            ..pow_core::Request::default()
        };
        Ok(NativeVerify { agents, request })
    }

    /// One batch of verifications, each checked: ns per verification.
    pub fn batch(&self) -> Result<f64, String> {
        let t = Instant::now();
        for _ in 0..NATIVE_BATCH {
            let view = SignedRequest::from_request(black_box(&self.request));
            match self.agents.verify(&view, NOW) {
                Ok("benchbot") => {}
                other => return Err(format!("native verification: {other:?}")),
            }
        }
        Ok(t.elapsed().as_nanos() as f64 / f64::from(NATIVE_BATCH))
    }
}

/// Which curve25519-dalek backend each side runs: chosen by its build script from the target,
/// and natively among the SIMD ones at run time (`curve25519-dalek/build.rs` and
/// `src/backend/mod.rs`, `get_selected_backend`, at curve25519-4.1.3).
pub fn backends() -> String {
    format!(
        "Web Bot Auth backends: native {}; wasm32 (the module) the serial backend with 32-bit \
         limbs (wasm32 has 32-bit pointers; no SIMD).",
        native_backend()
    )
}

#[cfg(target_arch = "x86_64")]
fn native_backend() -> &'static str {
    if std::arch::is_x86_feature_detected!("avx512ifma")
        && std::arch::is_x86_feature_detected!("avx512vl")
    {
        "simd backend, AVX-512 IFMA (detected at run time)"
    } else if std::arch::is_x86_feature_detected!("avx2") {
        "simd backend, AVX2 (detected at run time)"
    } else {
        "simd backend falling back to serial u64 (no AVX2 on this CPU)"
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn native_backend() -> &'static str {
    "serial backend"
}
