//! A Web Bot Auth agent as the tests meet it: its key directory served as the agent serves it,
//! and the requests it signs, with the RFC 9421 test key (appendix B.1.4, the shared fixture
//! `fixtures/bots/rfc9421/test-key-ed25519.jwk.json`) or another key of the test's.
//!
//! The directory response is draft-meunier-http-message-signatures-directory-05's:
//! - section 3 "Configuration": a JWK Set, served with the media type
//!   `application/http-message-signatures-directory+json` (MUST);
//! - appendix A "Key Directory on example.com": `Cache-Control: max-age=86400`;
//! - section 4.2 "Binding keys to the directory authority": one signature per key, covering
//!   `"@authority";req`, `tag` `http-message-signatures-directory`, `keyid` the key's RFC 7638
//!   thumbprint, `created` and `expires`. Labels and parameter order are those of Cloudflare's
//!   reference directory server (cloudflare/web-bot-auth, `packages/web-bot-auth/src/directory.ts`
//!   at b90e7021: labels `binding<i>`, parameters created, keyid, alg, expires, tag).
//!
//! Requests are signed as draft-meunier-web-bot-auth-architecture-05's "Generating HTTP Message
//! Signature" asks: `@authority` covered, `created` and `expires`, `keyid` the thumbprint, `alg`
//! `ed25519`, `tag` `web-bot-auth`.
//!
//! The signature bases are written out here as RFC 9421 section 2.5 prints them, not built by the
//! code under test, so that a mistake there cannot agree with itself.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signer as _, SigningKey};

use crate::http::Reply;

/// The directory's media type (directory-05, section 3).
pub const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The RFC 7638 thumbprint of the RFC 9421 test key (the keyid of the architecture draft's own
/// test vectors; `fixtures/bots/web-bot-auth-drafts/EXPECTED-OUTCOMES.txt`).
pub const TEST_KEY_THUMBPRINT: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
/// The tag of a directory's response signatures (directory-05, section 4.2).
pub const DIRECTORY_TAG: &str = "http-message-signatures-directory";

/// One signing key of an agent.
#[derive(Debug, Clone)]
pub struct AgentKey {
    key: SigningKey,
    /// Its RFC 7638 thumbprint, the keyid its signatures carry.
    pub keyid: String,
}

impl AgentKey {
    /// The RFC 9421 test key, from the shared fixtures (`None`, the test skipped, without them).
    pub fn rfc9421(test: &str) -> Option<AgentKey> {
        let shared = crate::workspace::shared_dir(test)?;
        let path = shared.join("fixtures/bots/rfc9421/test-key-ed25519.jwk.json");
        let text = std::fs::read_to_string(&path).ok()?;
        let jwk: serde_json::Value = serde_json::from_str(&text).ok()?;
        let d = URL_SAFE_NO_PAD.decode(jwk["d"].as_str()?).ok()?;
        Some(AgentKey {
            key: SigningKey::from_bytes(&d.try_into().ok()?),
            keyid: TEST_KEY_THUMBPRINT.to_owned(),
        })
    }

    /// A key from a seed, with its thumbprint as the caller computed it (pow-core's).
    pub fn from_seed(seed: [u8; 32], keyid: &str) -> AgentKey {
        AgentKey {
            key: SigningKey::from_bytes(&seed),
            keyid: keyid.to_owned(),
        }
    }

    /// The public key, as a JWK's `x` (base64url without padding).
    pub fn x(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.key.verifying_key().as_bytes())
    }

    /// The key as a directory lists it: with a `kid` that is not its thumbprint and `use`,
    /// as the draft's own example does.
    pub fn jwk(&self) -> serde_json::Value {
        serde_json::json!({"kty": "OKP", "crv": "Ed25519", "kid": "NFcWBst6DXG-N35nHdzMrioWntdzNZghQSkjHNMMSjw",
                           "x": self.x(), "use": "sig"})
    }

    fn sign(&self, base: &str) -> String {
        STANDARD.encode(self.key.sign(base.as_bytes()).to_bytes())
    }

    /// The `Signature-Input` and `Signature` of a request to `authority` signed as an agent
    /// signs it, valid from `created` for `lifetime` seconds.
    pub fn sign_request(
        &self,
        authority: &str,
        created: u64,
        lifetime: u64,
    ) -> [(String, String); 2] {
        let params = format!(
            r#"("@authority");created={created};expires={};keyid="{}";alg="ed25519";tag="web-bot-auth""#,
            created + lifetime,
            self.keyid
        );
        let base = format!("\"@authority\": {authority}\n\"@signature-params\": {params}");
        [
            ("signature-input".to_owned(), format!("sig1={params}")),
            (
                "signature".to_owned(),
                format!("sig1=:{}:", self.sign(&base)),
            ),
        ]
    }
}

/// What a directory server answers: its body and who signs the response.
#[derive(Debug, Clone)]
pub struct Directory {
    /// The JWK Set served.
    pub body: String,
    /// The keys that sign the response, each once (`binding<i>`), with the keyid each claims.
    pub signers: Vec<(AgentKey, String)>,
}

impl Directory {
    /// A directory of `keys`, each signing the response with its own keyid, as directory-05
    /// section 4.2 recommends.
    pub fn of(keys: &[&AgentKey]) -> Directory {
        let jwks: Vec<serde_json::Value> = keys.iter().map(|k| k.jwk()).collect();
        Directory {
            body: serde_json::to_string_pretty(&serde_json::json!({"keys": jwks}))
                .unwrap_or_default(),
            signers: keys
                .iter()
                .map(|k| ((*k).clone(), k.keyid.clone()))
                .collect(),
        }
    }

    /// The reply to a GET on `authority` (as the request named it: host, and port when not the
    /// scheme's default), signed valid from `created` for an hour.
    pub fn reply(&self, authority: &str, created: u64) -> Reply {
        let expires = created + 3600;
        let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
        for (i, (key, keyid)) in self.signers.iter().enumerate() {
            let params = format!(
                r#"("@authority";req);created={created};keyid="{keyid}";alg="ed25519";expires={expires};tag="{DIRECTORY_TAG}""#
            );
            let base = format!("\"@authority\";req: {authority}\n\"@signature-params\": {params}");
            inputs.push(format!("binding{i}={params}"));
            signatures.push(format!("binding{i}=:{}:", key.sign(&base)));
        }
        let mut headers = vec![
            ("Content-Type".to_owned(), MEDIA_TYPE.to_owned()),
            ("Cache-Control".to_owned(), "max-age=86400".to_owned()),
        ];
        if !inputs.is_empty() {
            headers.push(("Signature-Input".to_owned(), inputs.join(", ")));
            headers.push(("Signature".to_owned(), signatures.join(", ")));
        }
        Reply::Headers {
            status: 200,
            headers,
            body: self.body.clone().into_bytes(),
        }
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
