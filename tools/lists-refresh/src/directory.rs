//! The trusted agents' key directories: fetched, checked with the filter's own parser, their
//! response signatures verified, and the keys delivered with the lists.
//!
//! What a directory is and how it is served is draft-meunier-http-message-signatures-directory-05:
//! a JWK Set (section 3, "Configuration") served with the media type
//! `application/http-message-signatures-directory+json` (section 3: MUST), which each of its
//! keys signs (section 4.2, "Binding keys to the directory authority": the server is
//! RECOMMENDED to sign the response once per key, and clients SHOULD ignore a key without a
//! valid signature; see [`crate::signature`]). We follow the SHOULD: a key the response does not
//! sign is not delivered, so a directory that signs nothing keeps the agent's last good keys.
//!
//! The keys delivered are the directory's own entries, as the filter reads them (`kty`, `crv`,
//! `x`, `use`): the filter computes their thumbprints itself. A directory the filter would
//! refuse (an Ed25519 entry whose `x` is no key), or one left with no Ed25519 key, is refused
//! here, naming the agent, so the previous keys stay; it is never published blank.

use std::collections::BTreeMap;
use std::time::Duration;

use lists_core::records::{AgentSource, KeyDirectory};
use pow_core::web_bot_auth::{Jwk, decode_x, thumbprint};

use crate::error::Failure;
use crate::signature;

/// The media type a directory is served with (directory-05, section 3).
pub const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The most bytes read of a directory: 16 keys (the most the filter reads) with certificate
/// chains are a few KiB.
pub const MAX_DIRECTORY_BYTES: u64 = 64 * 1024;

/// Why an agent's directory gave no keys.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    #[error("key directory {url}: unreachable: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("key directory {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error(
        "key directory {url}: redirected to `{location}`, which is not followed: trust the URL it moved to"
    )]
    Redirect { url: String, location: String },
    #[error(
        "key directory {url}: served as `{content_type}`, not {MEDIA_TYPE} (directory-05, section 3)"
    )]
    MediaType { url: String, content_type: String },
    #[error("key directory {url}: over {MAX_DIRECTORY_BYTES} bytes")]
    TooLarge { url: String },
    #[error("key directory {url}: the filter would refuse it: {detail}")]
    Invalid { url: String, detail: String },
    #[error("key directory {url}: no Ed25519 key (kty OKP, crv Ed25519); {skipped} other key(s)")]
    Empty { url: String, skipped: usize },
    #[error(
        "key directory {url}: no key signs the response, so none is trusted (directory-05, section 4.2): {detail}"
    )]
    Unsigned { url: String, detail: String },
}

/// What one run delivers of the agents: each agent's keys (fetched, inline, or its previous ones
/// kept), which were refreshed (fetched, or inline), and which failed.
#[derive(Debug, Default)]
pub struct Agents {
    pub keys: BTreeMap<String, KeyDirectory>,
    pub refreshed: Vec<String>,
    pub kept: Vec<String>,
    pub failures: Vec<Failure>,
}

/// Gets every agent's keys: inline ones as they are (the record's check took them), fetched
/// ones from their directory; a failing directory keeps the agent's `previous` keys, if any.
pub fn refresh(
    agents: &[AgentSource],
    previous: &BTreeMap<String, KeyDirectory>,
    timeout_seconds: u32,
    now: u64,
) -> Agents {
    let client = Client::new(timeout_seconds);
    let mut out = Agents::default();
    for agent in agents {
        let fetched = match (&agent.keys, &agent.directory) {
            (Some(keys), _) => Ok(keys.clone()),
            (None, Some(url)) => client.fetch(url, now),
            // The record's check refuses an agent with neither.
            (None, None) => continue,
        };
        match fetched {
            Ok(keys) => {
                pop_common::info!(
                    "agent {}: {} key(s){}",
                    agent.name,
                    keys.keys.len(),
                    agent
                        .directory
                        .as_deref()
                        .map(|url| format!(" from {url}"))
                        .unwrap_or_default()
                );
                out.keys.insert(agent.name.clone(), keys);
                out.refreshed.push(agent.name.clone());
            }
            Err(why) => {
                let old = previous.get(&agent.name);
                let failure = Failure::agent(&agent.name, why, old.is_some());
                failure.warn();
                if let Some(old) = old {
                    out.keys.insert(agent.name.clone(), old.clone());
                    out.kept.push(agent.name.clone());
                }
                out.failures.push(failure);
            }
        }
    }
    out
}

/// The HTTPS client of the directories (rustls with the webpki roots, as the list sources).
struct Client {
    agent: ureq::Agent,
}

impl Client {
    fn new(timeout_seconds: u32) -> Client {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(u64::from(timeout_seconds))))
            .http_status_as_error(false)
            // The response is signed for the authority asked: a redirect elsewhere is refused
            // (with 0, ureq returns the 3xx as it is).
            .max_redirects(0)
            .user_agent(concat!("edgepop-lists-refresh/", env!("CARGO_PKG_VERSION")));
        Client {
            agent: config.build().into(),
        }
    }

    /// GETs one directory, asking for its media type (directory-05, appendix A's exchange).
    fn fetch(&self, url: &str, now: u64) -> Result<KeyDirectory, DirectoryError> {
        let response = self
            .agent
            .get(url)
            .header("Accept", MEDIA_TYPE)
            .call()
            .map_err(|e| DirectoryError::Unreachable {
                url: url.to_owned(),
                detail: e.to_string(),
            })?;
        let status = response.status().as_u16();
        let header = |name: &str| -> Option<String> {
            let lines: Vec<&str> = response
                .headers()
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            (!lines.is_empty()).then(|| lines.join(", "))
        };
        if (300..400).contains(&status) {
            return Err(DirectoryError::Redirect {
                url: url.to_owned(),
                location: header("location").unwrap_or_default(),
            });
        }
        if status != 200 {
            return Err(DirectoryError::Status {
                url: url.to_owned(),
                status,
            });
        }
        let content_type = header("content-type").unwrap_or_default();
        let media = content_type.split(';').next().unwrap_or("").trim();
        if !media.eq_ignore_ascii_case(MEDIA_TYPE) {
            return Err(DirectoryError::MediaType {
                url: url.to_owned(),
                content_type,
            });
        }
        let (input, signature) = (header("signature-input"), header("signature"));
        let body = response
            .into_body()
            .with_config()
            .limit(MAX_DIRECTORY_BYTES)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => DirectoryError::TooLarge {
                    url: url.to_owned(),
                },
                e => DirectoryError::Unreachable {
                    url: url.to_owned(),
                    detail: e.to_string(),
                },
            })?;
        let signed = signature::Signed {
            authority: &authority_of(url),
            input: input.as_deref(),
            signature: signature.as_deref(),
            now,
        };
        check(url, &body, &signed)
    }
}

/// The keys of a directory response that the filter takes and the response signs, as the filter
/// reads them.
pub fn check(
    url: &str,
    body: &[u8],
    signed: &signature::Signed<'_>,
) -> Result<KeyDirectory, DirectoryError> {
    let invalid = |detail: String| DirectoryError::Invalid {
        url: url.to_owned(),
        detail,
    };
    let directory = KeyDirectory::from_json(body).map_err(invalid)?;
    // The filter's own parser: what it would refuse is refused here.
    let (keys, skipped) = directory
        .ed25519_keys()
        .map_err(|e| invalid(format!("`{}`: {}", e.member, e.message)))?;
    if keys.is_empty() {
        return Err(DirectoryError::Empty {
            url: url.to_owned(),
            skipped,
        });
    }
    let trusted = signed
        .signing_keys(&keys)
        .map_err(|detail| DirectoryError::Unsigned {
            url: url.to_owned(),
            detail,
        })?;
    let mut delivered: Vec<Jwk> = Vec::new();
    for jwk in &directory.keys {
        let Some(key) = jwk.x.as_deref().and_then(|x| decode_x(x).ok()) else {
            continue;
        };
        let is_ed25519 = jwk.kty == "OKP" && jwk.crv.as_deref() == Some("Ed25519");
        let signing = jwk.use_.as_deref().is_none_or(|u| u == "sig");
        let fresh = !delivered.iter().any(|d| d.x == jwk.x);
        if is_ed25519 && signing && fresh && trusted.contains(&thumbprint(&key)) {
            delivered.push(jwk.clone());
        }
    }
    Ok(KeyDirectory { keys: delivered })
}

/// The `@authority` of the directory's request (RFC 9421 section 2.2.3): the URL's host and
/// port, lowercase, without the scheme's default port.
pub fn authority_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let default = if scheme.eq_ignore_ascii_case("http") {
        ":80"
    } else {
        ":443"
    };
    authority
        .strip_suffix(default)
        .unwrap_or(authority)
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_drops_the_default_port_and_case() {
        for (url, authority) in [
            (
                "https://Bot.Example.com/.well-known/http-message-signatures-directory",
                "bot.example.com",
            ),
            ("https://bot.example.com:443/d", "bot.example.com"),
            ("https://bot.example.com:8443/d", "bot.example.com:8443"),
            ("http://127.0.0.1:80/d", "127.0.0.1"),
            ("http://[::1]:4000/d", "[::1]:4000"),
        ] {
            assert_eq!(authority_of(url), authority, "{url}");
        }
    }

    /// The drafts' own directories: the directory draft's (a JWK Set) is taken when signed
    /// and refused unsigned; the architecture draft's example, whose `keys` is an object and not
    /// a JWK Set's array, is refused as the filter would refuse it.
    #[test]
    fn the_drafts_directories_are_checked_as_the_filter_reads_them() {
        let test = "the_drafts_directories_are_checked_as_the_filter_reads_them";
        let Some(shared) = testkit::workspace::shared_dir(test) else {
            return;
        };
        let drafts = shared.join("fixtures/bots/web-bot-auth-drafts");
        let unsigned = signature::Signed {
            authority: "example.com",
            input: None,
            signature: None,
            now: 1_800_000_000,
        };
        let dir05 = std::fs::read(drafts.join("dir05-key-directory.json")).unwrap();
        let err = check("https://example.com/d", &dir05, &unsigned).unwrap_err();
        assert!(matches!(err, DirectoryError::Unsigned { .. }), "{err}");
        let arch05 = std::fs::read(drafts.join("arch05-key-directory-example.json")).unwrap();
        let err = check("https://example.com/d", &arch05, &unsigned).unwrap_err();
        assert!(matches!(err, DirectoryError::Invalid { .. }), "{err}");
        assert!(
            err.to_string().contains("the filter would refuse it"),
            "{err}"
        );
    }
}
