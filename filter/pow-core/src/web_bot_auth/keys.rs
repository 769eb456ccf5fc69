//! Key directories (draft-meunier-http-message-signatures-directory-05, section 3
//! "Configuration": a JWK Set, RFC 7517 section 5) and the keyid a Web Bot Auth signature names
//! its key by: the RFC 7638 JWK SHA-256 thumbprint, computed for Ed25519 as RFC 8037 appendix
//! A.3 does (draft-meunier-web-bot-auth-architecture-05, "Generating HTTP Message Signature").
//!
//! A directory's `kid` is never trusted: the drafts' own examples give a `kid` that is the
//! SHA-256 of the key's SubjectPublicKeyInfo, not its thumbprint. Each key's thumbprint is
//! computed here, from `x`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use crate::crypto::sha256;

/// The most entries read from one agent's directory, whatever their type.
pub const MAX_DIRECTORY_KEYS: usize = 16;

/// A key directory as served at `/.well-known/http-message-signatures-directory`: a JWK Set
/// whose `keys` is an array (a JWK Set's other members, if any, are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyDirectory {
    pub keys: Vec<Jwk>,
}

/// The members of a JWK this module reads; the others (`kid`, `alg`, `nbf`, `exp`, `x5c`, an EC
/// key's `y`, an RSA key's `n`, ...) are ignored. `kty`, `crv`, `x` and `use` are strings
/// wherever RFC 7517, 7518 and 8037 define them, so another type is refused, not skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    pub kty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
}

/// An Ed25519 public key from a directory, with its thumbprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ed25519Key {
    pub key: VerifyingKey,
    /// The RFC 7638 thumbprint: base64url without padding, 43 characters.
    pub thumbprint: String,
}

/// Why a directory entry that claims to be an Ed25519 key is not one: the member (as a path
/// inside the directory, `keys[1].x`) and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    pub member: String,
    pub message: &'static str,
}

impl KeyDirectory {
    /// Decodes a directory's JSON.
    pub fn from_json(bytes: &[u8]) -> Result<KeyDirectory, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// The directory's Ed25519 signing keys (`kty` `OKP`, `crv` `Ed25519`, no `use` or `use`
    /// `sig`), in order, and how many other entries were skipped (other key types and curves,
    /// encryption keys). An Ed25519 entry whose `x` is not a valid public key is an error:
    /// an agent's directory that carries one is broken, and saying so beats ignoring it.
    pub fn ed25519_keys(&self) -> Result<(Vec<Ed25519Key>, usize), KeyError> {
        if self.keys.len() > MAX_DIRECTORY_KEYS {
            return Err(KeyError {
                member: "keys".to_owned(),
                message: "too many keys (at most 16)",
            });
        }
        let mut keys: Vec<Ed25519Key> = Vec::new();
        let mut skipped = 0;
        for (i, jwk) in self.keys.iter().enumerate() {
            let is_ed25519 = jwk.kty == "OKP" && jwk.crv.as_deref() == Some("Ed25519");
            if !is_ed25519 || jwk.use_.as_deref().is_some_and(|u| u != "sig") {
                skipped += 1;
                continue;
            }
            let key = jwk
                .x
                .as_deref()
                .ok_or("an Ed25519 JWK needs `x`")
                .and_then(decode_x)
                .map_err(|message| KeyError {
                    member: format!("keys[{i}].x"),
                    message,
                })?;
            let thumbprint = thumbprint(&key);
            // The same key twice in one directory is one key.
            if !keys.iter().any(|k| k.thumbprint == thumbprint) {
                keys.push(Ed25519Key { key, thumbprint });
            }
        }
        Ok((keys, skipped))
    }
}

/// A JWK's `x`: base64url without padding (RFC 7515 section 2, as RFC 8037 section 2 uses it)
/// of 32 bytes that RFC 8032 section 5.1.3 decodes to a point (its `y` below p, so one text
/// per key), not of small order (a key any signature verifies under).
pub fn decode_x(x: &str) -> Result<VerifyingKey, &'static str> {
    const BAD: &str = "`x` must be 32 bytes in base64url without padding";
    // 32 bytes are 43 characters; longer cannot be one and is not decoded.
    if x.len() != 43 {
        return Err(BAD);
    }
    let bytes: [u8; 32] = URL_SAFE_NO_PAD
        .decode(x)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(BAD)?;
    let key = VerifyingKey::from_bytes(&bytes)
        .map_err(|_| "`x` is not an Ed25519 public key (not a point of the curve)")?;
    if key.to_edwards().compress().to_bytes() != bytes {
        return Err("`x` is not an Ed25519 public key (not canonically encoded)");
    }
    if key.is_weak() {
        return Err("`x` is a key of small order, under which anything verifies");
    }
    Ok(key)
}

/// The RFC 7638 thumbprint of an Ed25519 key: base64url (no padding) of SHA-256 over
/// `{"crv":"Ed25519","kty":"OKP","x":"<x>"}`, the required members in lexicographic order,
/// no whitespace (RFC 8037 appendix A.3).
pub fn thumbprint(key: &VerifyingKey) -> String {
    let x = URL_SAFE_NO_PAD.encode(key.as_bytes());
    let json = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(sha256(json.as_bytes()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// RFC 8037 appendix A.3's example key and thumbprint.
    #[test]
    fn rfc_8037_a3_thumbprint() {
        let key = decode_x("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo").unwrap();
        assert_eq!(
            thumbprint(&key),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }

    #[test]
    fn bad_x_is_refused_with_a_reason() {
        for x in [
            "",
            "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs=",
            "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0b",
            // Standard alphabet instead of base64url.
            "JrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs",
            // Non-zero trailing bits: another text of the same bytes.
            "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bt",
            // The identity point (small order), and y = 3 + p, which decodes to the point
            // whose y is 3 but is not its canonical text (both computed with Python).
            "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "8P_______________________________________38",
        ] {
            assert!(decode_x(x).is_err(), "{x:?}");
        }
        assert!(decode_x("JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs").is_ok());
    }

    #[test]
    fn other_keys_are_skipped_and_broken_ed25519_ones_named() {
        let dir = KeyDirectory::from_json(
            br#"{"keys": [
                {"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                 "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
                {"kty": "OKP", "crv": "X25519", "x": "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"},
                {"kty": "RSA", "n": "0vx7", "e": "AQAB"},
                {"kty": "OKP", "crv": "Ed25519", "use": "enc",
                 "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
                {"kty": "OKP", "crv": "Ed25519", "kid": "anything",
                 "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"},
                {"kty": "OKP", "crv": "Ed25519", "use": "sig",
                 "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}
            ], "other": 1}"#,
        )
        .unwrap();
        let (keys, skipped) = dir.ed25519_keys().unwrap();
        assert_eq!(skipped, 4);
        assert_eq!(keys.len(), 1);
        let dir = KeyDirectory::from_json(
            br#"{"keys": [{"kty": "RSA"}, {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}]}"#,
        )
        .unwrap();
        assert_eq!(dir.ed25519_keys().unwrap_err().member, "keys[1].x");
        let dir =
            KeyDirectory::from_json(br#"{"keys": [{"kty": "OKP", "crv": "Ed25519"}]}"#).unwrap();
        assert_eq!(dir.ed25519_keys().unwrap_err().member, "keys[0].x");
        assert!(KeyDirectory::from_json(br#"{"keys": [{"kty": "OKP", "x": 5}]}"#).is_err());
    }
}
