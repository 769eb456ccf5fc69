//! `PublishedImages`: the two images the edge runs, as `oci-image publish` pushed them, each
//! pinned by its manifest digest. `render-edge --images` reads it: the WasmPlugin's `url` and
//! `sha256` and the CronJob's `image` come from here, never from a tag.
//!
//! ```json
//! {
//!   "kind": "PublishedImages",
//!   "version": 1,
//!   "registry": "rg.fr-par.scw.cloud/edgepop",
//!   "filter": {
//!     "repository": "rg.fr-par.scw.cloud/edgepop/pow-filter",
//!     "tag": "0.1.0",
//!     "digest": "sha256:6c3f…"
//!   },
//!   "lists_refresh": {
//!     "repository": "rg.fr-par.scw.cloud/edgepop/lists-refresh",
//!     "tag": "0.1.0",
//!     "digest": "sha256:9b1e…"
//!   }
//! }
//! ```

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest as _, Sha256};

pub const PUBLISHED_IMAGES_VERSION: u32 = 1;

crate::record! {
    /// Both images of the edge, pushed to one registry.
    pub struct PublishedImages, version PUBLISHED_IMAGES_VERSION {
        /// The registry and namespace pushed to (the edge config's `images.registry`), such as
        /// `rg.fr-par.scw.cloud/edgepop`.
        pub registry: String,
        /// The proof-of-work filter, a Wasm image in Istio's "compat" layout (`plugin.wasm`).
        pub filter: PublishedImage,
        /// The lists-refresh CronJob's image (with lists-gen-asn, lists-gen-tor and
        /// lists-gen-crawlers).
        pub lists_refresh: PublishedImage,
        /// The scheduled etcd backup's image (etcd-backup with talosctl and age), which the
        /// platform layer runs when its config sets `etcd_backup`; absent from records that
        /// predate it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub etcd_backup: Option<PublishedImage>,
    }
}

impl PublishedImages {
    /// Every image's repository is under the record's registry; `Err((field, why))` names the
    /// first that is not (`filter.repository`, ...).
    pub fn check_repositories(&self) -> Result<(), (String, String)> {
        let images = [
            ("filter", Some(&self.filter)),
            ("lists_refresh", Some(&self.lists_refresh)),
            ("etcd_backup", self.etcd_backup.as_ref()),
        ];
        for (field, image) in images {
            let Some(image) = image else { continue };
            if !image.repository.starts_with(&format!("{}/", self.registry)) {
                return Err((
                    format!("{field}.repository"),
                    format!("`{}` is outside `{}`", image.repository, self.registry),
                ));
            }
        }
        Ok(())
    }
}

/// One image as pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedImage {
    /// The repository, registry host included, without tag or digest.
    pub repository: String,
    /// The tag pushed with it: for people browsing the registry; nothing pulls by it.
    pub tag: String,
    /// The manifest digest: what a runtime pulls, and what Istio checks the WasmPlugin's
    /// `sha256` against.
    pub digest: Digest,
}

impl PublishedImage {
    /// `repository@sha256:<hex>`: the only form render-edge writes.
    pub fn pinned(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
    }
}

/// A `sha256:<64 lowercase hex>` content digest; any other text is refused when read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct Digest(String);

impl Digest {
    /// `sha256:` followed by exactly 64 lowercase hexadecimal characters.
    pub fn parse(text: &str) -> Result<Digest, String> {
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("`{text}` is not a digest: it must start with `sha256:`"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "`{text}` is not a digest: `sha256:` must be followed by 64 lowercase hexadecimal characters"
            ));
        }
        Ok(Digest(text.to_string()))
    }

    /// The SHA-256 digest of `bytes`.
    pub fn sha256(bytes: &[u8]) -> Digest {
        Digest::from_sha256(Sha256::digest(bytes).into())
    }

    /// The digest of a SHA-256 computed elsewhere (a hasher fed as a file streams by).
    pub fn from_sha256(hash: [u8; 32]) -> Digest {
        Digest(format!("sha256:{}", crate::hex::encode(&hash)))
    }

    /// The 64 hexadecimal characters after `sha256:`.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> String {
        digest.0
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Digest::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_the_prefixed_lower_case_hex_of_the_hash() {
        // FIPS 180-2's "abc" vector.
        let digest = Digest::sha256(b"abc");
        assert_eq!(
            digest.as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(digest.as_str()), Ok(digest));
    }

    const HEX_A: &str = "6c3f4e5a8b9d0c1e2f3a4b5c6d7e8f901a2b3c4d5e6f708192a3b4c5d6e7f809";
    const HEX_B: &str = "9b1e0d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100";

    fn example() -> String {
        format!(
            r#"{{
            "kind": "PublishedImages", "version": 1,
            "registry": "rg.fr-par.scw.cloud/edgepop",
            "filter": {{"repository": "rg.fr-par.scw.cloud/edgepop/pow-filter",
                        "tag": "0.1.0", "digest": "sha256:{HEX_A}"}},
            "lists_refresh": {{"repository": "rg.fr-par.scw.cloud/edgepop/lists-refresh",
                               "tag": "0.1.0", "digest": "sha256:{HEX_B}"}}
        }}"#
        )
    }

    #[test]
    fn reads_the_example_and_writes_it_back_the_same() {
        let record: PublishedImages = serde_json::from_str(&example()).unwrap();
        assert_eq!(record.filter.digest.hex(), HEX_A);
        assert_eq!(
            record.lists_refresh.pinned(),
            format!("rg.fr-par.scw.cloud/edgepop/lists-refresh@sha256:{HEX_B}")
        );
        let again: PublishedImages =
            serde_json::from_value(serde_json::to_value(&record).unwrap()).unwrap();
        assert_eq!(again, record);
        let text = serde_json::to_string(&record).unwrap();
        assert!(
            text.starts_with(r#"{"kind":"PublishedImages","version":1,"#),
            "{text}"
        );
    }

    #[test]
    fn refuses_another_kind_version_or_an_unknown_field() {
        let base: serde_json::Value = serde_json::from_str(&example()).unwrap();
        for (pointer, value) in [
            ("/kind", serde_json::json!("NodeInventory")),
            ("/version", serde_json::json!(2)),
        ] {
            let mut bad = base.clone();
            *bad.pointer_mut(pointer).unwrap() = value;
            assert!(
                serde_json::from_value::<PublishedImages>(bad).is_err(),
                "{pointer}"
            );
        }
        let mut bad = base.clone();
        bad["filter"]["url"] = serde_json::json!("oci://x");
        let err = serde_json::from_value::<PublishedImages>(bad).unwrap_err();
        assert!(err.to_string().contains("unknown field `url`"), "{err}");
        let mut bad = base;
        bad["mirror"] = serde_json::json!("x");
        assert!(serde_json::from_value::<PublishedImages>(bad).is_err());
    }

    #[test]
    fn a_digest_is_sha256_and_64_lowercase_hex_digits() {
        assert!(Digest::parse(&format!("sha256:{HEX_A}")).is_ok());
        for bad in [
            HEX_A.to_string(),
            format!("sha512:{HEX_A}"),
            format!("sha256:{}", HEX_A.to_uppercase()),
            format!("sha256:{}", &HEX_A[1..]),
            format!("sha256:{HEX_A}0"),
            "sha256:".to_string(),
            "0.1.0".to_string(),
        ] {
            let err = Digest::parse(&bad).unwrap_err();
            assert!(err.contains("is not a digest"), "{bad}: {err}");
        }
        let json = format!(r#""sha256:{}""#, HEX_A.to_uppercase());
        assert!(serde_json::from_str::<Digest>(&json).is_err());
    }
}
