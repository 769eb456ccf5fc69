//! The filter's configuration: the WasmPlugin's `pluginConfig`, which arrives as JSON in the
//! proxy-wasm `PLUGIN_CONFIGURATION` buffer at every `on_configure`.
//!
//! # The contract (snake_case; every field optional, unknown fields refused)
//!
//! ```json
//! {
//!   "mode": "listed",
//!   "difficulty": 16,
//!   "list_difficulty": {"tor": 20, "hosting": 16},
//!   "bypass_paths": ["/healthz"],
//!   "nat64_prefixes": ["64:ff9b:1::/48"],
//!   "challenge_ttl_secs": 300,
//!   "clearance_ttl_secs": 86400,
//!   "cookie_name": "pow_clearance",
//!   "secret_env": "POW_HMAC_SECRET",
//!   "previous_secret_env": "POW_HMAC_SECRET_PREVIOUS",
//!   "demo_secret": null,
//!   "lists": {
//!     "version": "2026-11-29T17:17:00Z",
//!     "generated_at": "2026-11-29T17:17:00Z",
//!     "sets": {"tor": "185.220.101.1/32\n2a0b:f4c2::/40", "googlebot": "66.249.64.0/19"},
//!     "packed": {"hosting": "AXjaY2Tg4AIAACIAFA=="},
//!     "tokens": {"googlebot": ["Googlebot"]}
//!   },
//!   "agents": {"examplebot": {"keys": {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "..."}]}}},
//!   "signature_max_age_secs": 300
//! }
//! ```
//!
//! | field | default | meaning |
//! | --- | --- | --- |
//! | `mode` | `"listed"` | `off`: never challenge; `listed`: challenge addresses found in `lists`; `all`: challenge every visitor without a clearance cookie |
//! | `difficulty` | 16 | leading zero bits of SHA-256 asked in mode `all` and for lists without their own (1 to 32) |
//! | `list_difficulty` | `{}` | bits per list name (1 to 32); an address in several lists gets the hardest |
//! | `acme_bypass` | `true` | GET and HEAD of ACME's HTTP-01 token path (`/.well-known/acme-challenge/<token>`) pass unchallenged, before any rule, so that certificates renew whatever the policy; `false` where HTTP-01 never reaches the filter (the edge runs it on its HTTPS listener only, and HTTP-01 arrives on port 80), where the path would only be an unchallenged way to the origin |
//! | `bypass_paths` | `["/robots.txt", "/favicon.ico"]` | paths that pass GET and HEAD requests unchallenged, besides the built-in ACME token path: an entry is that path exactly, or, ending with `/`, every plain path below it; each a plain path (see [`crate::bypass`]); setting it replaces the default |
//! | `nat64_prefixes` | `[]` | NAT64 prefixes (RFC 6052: /32, /40, /48, /56, /64 or /96) besides the well-known `64:ff9b::/96`, whose embedded IPv4 address is the client's (see [`crate::net`]) |
//! | `trusted_hops` | 0 | only 0: the filter reads the client address Envoy computed (`source.address`); proxies in front of the gateway are declared to Istio (`numTrustedProxies`), never here, so that they cannot count twice |
//! | `challenge_ttl_secs` | 300 | how long a challenge can be solved (10 s to 1 day) |
//! | `clearance_ttl_secs` | 86400 | how long the clearance cookie lasts (60 s to 30 days) |
//! | `cookie_name` | `"pow_clearance"` | the clearance cookie's name (an RFC 6265 token); set over https it gets the `__Host-` prefix, so no other host can set or shadow it |
//! | `secret_env` | `"POW_HMAC_SECRET"` | the VM environment variable with the current HMAC secret (at least 32 bytes) |
//! | `previous_secret_env` | `"POW_HMAC_SECRET_PREVIOUS"` | the variable with the previous secret, still accepted during a rotation |
//! | `demo_secret` | `null` | demo only: a secret inline in the config (logged as a warning; never in production) |
//! | `lists` | none | the policy lists, written by the hourly refresh: `version`, `generated_at` (RFC 3339), `sets` (name to CIDRs separated by whitespace, IPv4 and IPv6 mixed; `#` starts a comment to the end of the line) and `packed` (name to the same set packed: sorted, delta-encoded, zlib, base64, about a tenth of the text; see [`crate::packed`]); a list is in `sets` or in `packed`, not both |
//! | `lists.tokens` | `{}` | for a verified-crawler list (a name in `sets` or `packed`): the User-Agent tokens its operator documents, 1 to 16 of them, each 1 to 64 bytes of visible ASCII without `;` or `,` ([`TOKEN_RULE`]), each once |
//! | `rules` | `[]` | the ordered rules: the first that matches decides, the short form (`bypass_paths`, the lists' difficulties, `mode`) decides the rest (see [`crate::policy`]) |
//! | `refresh_delay_secs` | 5 | how long a `refresh` challenge waits before it may be answered (1 to 60, under `challenge_ttl_secs`) |
//! | `agents` | `{}` | Web Bot Auth: agent name (a list name) to its key directory as served at `/.well-known/http-message-signatures-directory` (`{"keys": [JWK, ...]}`); its Ed25519 keys (`kty` `OKP`, `crv` `Ed25519`) verify the agent's signatures, other keys are skipped, and an agent with none is refused (see [`crate::web_bot_auth`]) |
//! | `signature_max_age_secs` | 300 | the longest `expires - created` of an agent's signature accepted (1 s to 1 day, the drafts' recommended ceiling): the filter keeps no nonces, so this is how long a seen signature can be replayed |
//!
//! [`PluginConfig::from_json`] decodes and checks it; its errors name the field.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Smallest and largest difficulty accepted, in bits.
pub const MIN_DIFFICULTY: u8 = 1;
/// 32 bits is about 4 billion hashes on average: minutes for a fast machine, already hostile.
pub const MAX_DIFFICULTY: u8 = 32;
/// At most this many named lists (each has its own metrics).
pub const MAX_LISTS: usize = 16;
/// Minimum length of an HMAC secret, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// Who is asked to pay a proof of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Never challenge (cookies are still honoured, the verify endpoint still answers).
    Off,
    /// Challenge addresses found in the policy lists.
    #[default]
    Listed,
    /// Challenge every visitor without a valid clearance cookie.
    All,
}

/// The WasmPlugin's `pluginConfig`. See the [module documentation](self) for the contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginConfig {
    pub mode: Mode,
    pub difficulty: u8,
    pub list_difficulty: BTreeMap<String, u8>,
    /// Whether ACME's HTTP-01 token path passes unchallenged (see the module's table).
    pub acme_bypass: bool,
    pub bypass_paths: Vec<String>,
    pub nat64_prefixes: Vec<String>,
    pub trusted_hops: u8,
    pub challenge_ttl_secs: u64,
    pub clearance_ttl_secs: u64,
    pub cookie_name: String,
    pub secret_env: String,
    pub previous_secret_env: String,
    pub demo_secret: Option<String>,
    pub lists: Option<Lists>,
    /// The ordered rules (see [`crate::policy`]); what none matches, the short form decides.
    pub rules: Vec<crate::policy::Rule>,
    /// How long a `refresh` challenge page waits before it goes on to the verify endpoint.
    pub refresh_delay_secs: u64,
    pub agents: BTreeMap<String, Agent>,
    pub signature_max_age_secs: u64,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            mode: Mode::Listed,
            difficulty: 16,
            list_difficulty: BTreeMap::new(),
            acme_bypass: true,
            bypass_paths: vec!["/robots.txt".to_owned(), "/favicon.ico".to_owned()],
            nat64_prefixes: Vec::new(),
            trusted_hops: 0,
            challenge_ttl_secs: 300,
            clearance_ttl_secs: 86_400,
            cookie_name: "pow_clearance".to_owned(),
            secret_env: "POW_HMAC_SECRET".to_owned(),
            previous_secret_env: "POW_HMAC_SECRET_PREVIOUS".to_owned(),
            demo_secret: None,
            lists: None,
            rules: Vec::new(),
            refresh_delay_secs: 5,
            agents: BTreeMap::new(),
            signature_max_age_secs: crate::web_bot_auth::DEFAULT_MAX_AGE_SECS,
        }
    }
}

/// The policy lists, as the hourly refresh writes them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Lists {
    /// An opaque version (the refresh writes an RFC 3339 time); reported in logs and metrics.
    pub version: String,
    /// When the lists were generated (RFC 3339); the filter reports their age.
    pub generated_at: Option<String>,
    /// List name to CIDRs separated by whitespace.
    pub sets: BTreeMap<String, String>,
    /// List name (one of `sets`) to the User-Agent tokens of the crawler whose published ranges
    /// that list holds. Left out when empty, so a config without crawler lists reads as before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, Vec<String>>,
    /// List name to its prefixes in the packed form ([`crate::packed`]): what fits when the
    /// text would not. Left out when empty, so a text-only config serialises as before.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub packed: BTreeMap<String, String>,
}

/// An agent whose Web Bot Auth signatures are trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// Its key directory, as the agent serves it.
    pub keys: crate::web_bot_auth::KeyDirectory,
}

/// A configuration that cannot be used. `field` is a path such as `lists.sets.tor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() || self.field == "." {
            write!(f, "pluginConfig: {}", self.message)
        } else {
            write!(f, "pluginConfig field `{}`: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

impl PluginConfig {
    /// Decodes and checks the JSON `pluginConfig`, the lists' prefixes included. An empty
    /// buffer means every default.
    pub fn from_json(bytes: &[u8]) -> Result<PluginConfig, ConfigError> {
        let config = PluginConfig::from_json_lists_unread(bytes)?;
        config.check_list_contents()?;
        Ok(config)
    }

    /// [`PluginConfig::from_json`] but for the lists' prefixes, which [`crate::Filter::new`]
    /// decodes into its table and refuses with the same error: the module then decodes each
    /// list once at configure time, where decoding them twice cost a quarter of
    /// `on_configure` at 1M prefixes.
    pub fn from_json_lists_unread(bytes: &[u8]) -> Result<PluginConfig, ConfigError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(PluginConfig::default());
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let config: PluginConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let field = e.path().to_string();
            err(field, e.into_inner().to_string())
        })?;
        de.end().map_err(|e| err("", e.to_string()))?;
        config.check_fields()?;
        Ok(config)
    }

    /// That each list decodes (a prefix a line, or the packed form within its budget).
    fn check_list_contents(&self) -> Result<(), ConfigError> {
        match &self.lists {
            Some(lists) => crate::lists::decode_each(lists, |_, _| ()).map_err(|(f, e)| err(f, e)),
            None => Ok(()),
        }
    }

    /// Checks the values that decoded (ranges, names, CIDRs) but the lists' prefixes.
    fn check_fields(&self) -> Result<(), ConfigError> {
        check_difficulty("difficulty", self.difficulty)?;
        for (name, bits) in &self.list_difficulty {
            check_list_name(&format!("list_difficulty.{name}"), name)?;
            check_difficulty(&format!("list_difficulty.{name}"), *bits)?;
        }
        for (i, p) in self.bypass_paths.iter().enumerate() {
            // A path that is not plain would never match: say so rather than ignore it.
            if !crate::bypass::is_plain(p) || p == "/" {
                return Err(err(
                    format!("bypass_paths[{i}]"),
                    "must be a plain path other than `/`: `/` then segments of letters, digits, \
                     `-`, `.`, `_`, `~` (no `;`, `%`, `//`, `.` or `..` segment)",
                ));
            }
        }
        for (i, p) in self.nat64_prefixes.iter().enumerate() {
            crate::net::Nat64Prefix::parse(p)
                .map_err(|e| err(format!("nat64_prefixes[{i}]"), e))?;
        }
        if self.trusted_hops != 0 {
            return Err(err(
                "trusted_hops",
                "only 0: the filter reads the client address Envoy derived from \
                 X-Forwarded-For (source.address); declare the proxies in front of the gateway \
                 to Istio instead (numTrustedProxies in the gateway's proxy.istio.io/config \
                 gatewayTopology), or they would be counted twice",
            ));
        }
        self.check_ttls_and_names()?;
        crate::policy::check(self)?;
        if let Some(lists) = &self.lists {
            check_lists(lists)?;
        }
        if !(1..=crate::web_bot_auth::MAX_MAX_AGE_SECS).contains(&self.signature_max_age_secs) {
            return Err(err("signature_max_age_secs", "between 1 and 86400 (a day)"));
        }
        for name in self.agents.keys() {
            check_list_name(&format!("agents.{name}"), name)?;
        }
        crate::web_bot_auth::TrustedAgents::from_config(self)?;
        Ok(())
    }

    /// The TTLs, the cookie's name, the secrets' variables and the refresh delay.
    fn check_ttls_and_names(&self) -> Result<(), ConfigError> {
        if !(10..=86_400).contains(&self.challenge_ttl_secs) {
            return Err(err("challenge_ttl_secs", "between 10 and 86400"));
        }
        if !(60..=30 * 86_400).contains(&self.clearance_ttl_secs) {
            return Err(err(
                "clearance_ttl_secs",
                "between 60 and 2592000 (30 days)",
            ));
        }
        if self.cookie_name.is_empty()
            || self.cookie_name.len() > 64
            || !self
                .cookie_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err(err(
                "cookie_name",
                "1 to 64 characters of an RFC 6265 cookie-name token",
            ));
        }
        let lower = self.cookie_name.to_ascii_lowercase();
        if lower.starts_with("__host-") || lower.starts_with("__secure-") {
            return Err(err(
                "cookie_name",
                "without a `__Host-` or `__Secure-` prefix: the filter adds `__Host-` itself \
                 whenever the cookie is Secure",
            ));
        }
        for (field, v) in [
            ("secret_env", &self.secret_env),
            ("previous_secret_env", &self.previous_secret_env),
        ] {
            if v.is_empty() || v.contains('=') || v.contains('\0') {
                return Err(err(field, "an environment variable name"));
            }
        }
        if !(1..=60).contains(&self.refresh_delay_secs) {
            return Err(err("refresh_delay_secs", "between 1 and 60"));
        }
        if self.refresh_delay_secs >= self.challenge_ttl_secs {
            return Err(err(
                "refresh_delay_secs",
                "shorter than challenge_ttl_secs, or a refresh challenge expires before it may be answered",
            ));
        }
        Ok(())
    }

    /// The difficulty asked of an address found in `list`.
    pub fn difficulty_for(&self, list: &str) -> u8 {
        self.list_difficulty
            .get(list)
            .copied()
            .unwrap_or(self.difficulty)
    }
}

fn check_difficulty(field: &str, bits: u8) -> Result<(), ConfigError> {
    if (MIN_DIFFICULTY..=MAX_DIFFICULTY).contains(&bits) {
        Ok(())
    } else {
        Err(err(
            field,
            format!("difficulty must be {MIN_DIFFICULTY} to {MAX_DIFFICULTY} bits"),
        ))
    }
}

/// The longest list name.
pub const MAX_LIST_NAME_LEN: usize = 32;
/// The list-name rule, in words: every tool that takes a list name refuses what the filter
/// refuses, with this sentence.
pub const LIST_NAME_RULE: &str =
    "a list name is 1 to 32 of [a-z0-9_-] (it becomes part of a metric name)";

/// Whether the filter accepts `name` as a list name. List names become metric names:
/// lowercase letters, digits, `_` and `-`, 1 to [`MAX_LIST_NAME_LEN`] of them. The one rule:
/// the tools that write list names (render-edge, lists-refresh, the generators) call this.
pub fn valid_list_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LIST_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// At most this many User-Agent tokens per list.
pub const MAX_TOKENS: usize = 16;
/// The longest User-Agent token, in bytes.
pub const MAX_TOKEN_LEN: usize = 64;
/// The token rule, in words: every tool that takes a User-Agent token refuses what the filter
/// refuses, with this sentence.
pub const TOKEN_RULE: &str = "a User-Agent token is 1 to 64 bytes of visible ASCII (no space, \
     `;` or `,`), as a product name in a User-Agent header (`Googlebot`, `AdsBot-Google`)";

/// Whether the filter accepts `token` as a crawler's User-Agent token. Visible ASCII: a token
/// is looked for in the bytes of a User-Agent header, where a product name has no space; no `;`
/// or `,`: they separate the items around a product name (`(compatible; Googlebot/2.1; +http://
/// www.google.com/bot.html)`), so a token holding one would straddle two.
pub fn valid_token(token: &str) -> bool {
    (1..=MAX_TOKEN_LEN).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
}

/// What is wrong with a list's tokens: the index of the token at fault (`None`: the whole
/// list) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenProblem {
    pub index: Option<usize>,
    pub message: String,
}

/// The first broken rule of a list's User-Agent tokens, `None` when they are usable: 1 to
/// [`MAX_TOKENS`] of them, each [`valid_token`], none twice. The one rule: the list records
/// (lists-core) and the generator call this too.
pub fn token_problem(tokens: &[String]) -> Option<TokenProblem> {
    let whole = |message: String| {
        Some(TokenProblem {
            index: None,
            message,
        })
    };
    if tokens.is_empty() {
        return whole("at least one User-Agent token is needed".to_owned());
    }
    if tokens.len() > MAX_TOKENS {
        return whole(format!("{} tokens, at most {MAX_TOKENS}", tokens.len()));
    }
    for (i, token) in tokens.iter().enumerate() {
        let at = |message: String| {
            Some(TokenProblem {
                index: Some(i),
                message,
            })
        };
        if !valid_token(token) {
            return at(format!("`{}`: {TOKEN_RULE}", token.escape_debug()));
        }
        if tokens[..i].contains(token) {
            return at(format!("`{token}` appears twice"));
        }
    }
    None
}

/// The lists: how many, their names, version and date, their tokens (their prefixes are
/// checked by [`PluginConfig::check_list_contents`]).
fn check_lists(lists: &Lists) -> Result<(), ConfigError> {
    if lists.sets.len() + lists.packed.len() > MAX_LISTS {
        let field = if lists.packed.is_empty() {
            "lists.sets"
        } else {
            "lists.packed"
        };
        return Err(err(field, format!("at most {MAX_LISTS} lists")));
    }
    if lists.version.len() > 128 {
        return Err(err("lists.version", "at most 128 characters"));
    }
    if let Some(at) = &lists.generated_at
        && crate::time::parse_rfc3339(at).is_none()
    {
        return Err(err("lists.generated_at", "not an RFC 3339 date-time"));
    }
    for name in lists.sets.keys() {
        check_list_name(&format!("lists.sets.{name}"), name)?;
    }
    for (name, tokens) in &lists.tokens {
        let field = format!("lists.tokens.{name}");
        if !lists.sets.contains_key(name) && !lists.packed.contains_key(name) {
            return Err(err(
                field,
                format!("no list named `{name}` in lists.sets or lists.packed"),
            ));
        }
        if let Some(problem) = token_problem(tokens) {
            let field = match problem.index {
                Some(i) => format!("{field}[{i}]"),
                None => field,
            };
            return Err(err(field, problem.message));
        }
    }
    for name in lists.packed.keys() {
        check_list_name(&format!("lists.packed.{name}"), name)?;
    }
    Ok(())
}

fn check_list_name(field: &str, name: &str) -> Result<(), ConfigError> {
    if !valid_list_name(name) {
        return Err(err(field, LIST_NAME_RULE));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_means_defaults() {
        assert_eq!(
            PluginConfig::from_json(b"").unwrap(),
            PluginConfig::default()
        );
        assert_eq!(
            PluginConfig::from_json(b"{}").unwrap(),
            PluginConfig::default()
        );
        assert_eq!(PluginConfig::default().mode, Mode::Listed);
    }

    #[test]
    fn the_documented_example_decodes() {
        let json = br#"{
          "mode": "listed", "difficulty": 16, "list_difficulty": {"tor": 20, "hosting": 16},
          "bypass_paths": ["/healthz"], "nat64_prefixes": ["64:ff9b:1::/48"],
          "trusted_hops": 0, "challenge_ttl_secs": 300,
          "clearance_ttl_secs": 86400, "cookie_name": "pow_clearance",
          "secret_env": "POW_HMAC_SECRET", "previous_secret_env": "POW_HMAC_SECRET_PREVIOUS",
          "demo_secret": null,
          "lists": {"version": "2026-11-29T17:17:00Z", "generated_at": "2026-11-29T17:17:00Z",
                    "sets": {"tor": "185.220.101.1/32\n2a0b:f4c2::/40", "googlebot": "66.249.64.0/19"},
                    "tokens": {"googlebot": ["Googlebot"]},
                    "packed": {"hosting": "AXjaY2Tg4AIAACIAFA=="}}
        }"#;
        let c = PluginConfig::from_json(json).unwrap();
        let lists = c.lists.as_ref().unwrap();
        let table = crate::lists::ListTable::build(Some(lists), &[]).unwrap();
        assert_eq!(table.lists_of("10.1.2.3".parse().unwrap()), ["hosting"]);
        assert_eq!(c.difficulty_for("tor"), 20);
        assert_eq!(c.difficulty_for("other"), 16);
        assert_eq!(c.bypass_paths, vec!["/healthz".to_owned()]);
        let lists = c.lists.unwrap();
        assert_eq!(lists.tokens["googlebot"], ["Googlebot"]);
        // No token: the key is left out, as a config without crawler lists always was.
        let plain = Lists {
            tokens: BTreeMap::new(),
            ..lists
        };
        assert!(!serde_json::to_string(&plain).unwrap().contains("tokens"));
    }

    #[test]
    fn lists_left_unread_are_refused_by_the_filter_in_the_same_words() {
        let config =
            |lists: &str| format!(r#"{{"lists": {{"version": "v", {lists}}}}}"#).into_bytes();
        for lists in [
            r#""sets": {"tor": "185.220.101.0/24\n185.220.101.0/33"}"#,
            r#""sets": {"tor": "185.220.101.0/24"}, "packed": {"tor": "AXjaY2Tg4AIAACIAFA=="}"#,
            r#""packed": {"hosting": "not base64!"}"#,
        ] {
            let bytes = config(lists);
            let refused = PluginConfig::from_json(&bytes).unwrap_err();
            assert!(refused.field.starts_with("lists."), "{refused}");
            let unread = PluginConfig::from_json_lists_unread(&bytes).unwrap();
            let built = crate::Filter::new(unread, None, [0; 32]).unwrap_err();
            assert_eq!(built, refused.to_string());
        }
        // Everything else is still checked before the lists are read.
        let bad_mode = br#"{"mode": "sometimes", "lists": {"version": "v", "sets": {"tor": "x"}}}"#;
        assert_eq!(
            PluginConfig::from_json_lists_unread(bad_mode)
                .unwrap_err()
                .field,
            "mode"
        );
    }

    #[test]
    fn tokens_follow_the_token_rule() {
        for good in [
            "Googlebot",
            "AdsBot-Google",
            "OAI-SearchBot",
            "bingbot",
            "a",
            &"x".repeat(64),
        ] {
            assert!(valid_token(good), "{good}");
        }
        for bad in [
            "",
            "Google bot",
            "Googlebot;",
            "a,b",
            "Googlebot\t",
            "é",
            &"x".repeat(65),
        ] {
            assert!(!valid_token(bad), "{bad:?}");
        }
        let tokens = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(token_problem(&tokens(&["Googlebot", "GoogleOther"])), None);
        assert_eq!(token_problem(&[]).unwrap().index, None);
        let many: Vec<String> = (0..=MAX_TOKENS).map(|i| format!("Bot{i}")).collect();
        assert_eq!(
            token_problem(&many).unwrap().message,
            "17 tokens, at most 16"
        );
        let twice = token_problem(&tokens(&["a", "b", "a"])).unwrap();
        assert_eq!(
            (twice.index, twice.message.as_str()),
            (Some(2), "`a` appears twice")
        );
        let bad = token_problem(&tokens(&["ok", "not ok"])).unwrap();
        assert_eq!(bad.index, Some(1));
        assert!(
            bad.message.starts_with("`not ok`: a User-Agent token is"),
            "{}",
            bad.message
        );
    }

    /// Bad configurations, each with the field its error names.
    const BAD_FIELDS: &[(&[u8], &str)] = &[
        (br#"{"mode": "some"}"#, "mode"),
        (br#"{"difficulty": 0}"#, "difficulty"),
        (br#"{"difficulty": 33}"#, "difficulty"),
        (br#"{"difficulty": 300}"#, "difficulty"),
        (
            br#"{"list_difficulty": {"tor": 40}}"#,
            "list_difficulty.tor",
        ),
        (br#"{"bypass_paths": ["healthz"]}"#, "bypass_paths[0]"),
        (br#"{"bypass_paths": ["/ok", "/a;b"]}"#, "bypass_paths[1]"),
        (br#"{"bypass_paths": ["/a/../b"]}"#, "bypass_paths[0]"),
        (br#"{"bypass_paths": ["/"]}"#, "bypass_paths[0]"),
        (br#"{"challenge_ttl_secs": 1}"#, "challenge_ttl_secs"),
        (br#"{"clearance_ttl_secs": 1}"#, "clearance_ttl_secs"),
        (br#"{"cookie_name": "a b"}"#, "cookie_name"),
        (br#"{"cookie_name": ""}"#, "cookie_name"),
        (br#"{"cookie_name": "__Host-pow"}"#, "cookie_name"),
        (br#"{"cookie_name": "__secure-pow"}"#, "cookie_name"),
        (br#"{"trusted_hops": 1}"#, "trusted_hops"),
        (
            br#"{"nat64_prefixes": ["64:ff9b::/33"]}"#,
            "nat64_prefixes[0]",
        ),
        (br#"{"secret_env": ""}"#, "secret_env"),
        (
            br#"{"lists": {"sets": {"tor": "1.2.3.4/33"}}}"#,
            "lists.sets.tor",
        ),
        (
            br#"{"lists": {"sets": {"Tor": "1.2.3.4"}}}"#,
            "lists.sets.Tor",
        ),
        (
            br#"{"lists": {"generated_at": "yesterday"}}"#,
            "lists.generated_at",
        ),
        (br#"{"lists": {"colour": 1}}"#, "lists.colour"),
        (
            br#"{"lists": {"sets": {"tor": "1.2.3.4"}, "tokens": {"gptbot": ["GPTBot"]}}}"#,
            "lists.tokens.gptbot",
        ),
        (
            br#"{"lists": {"sets": {"tor": "1.2.3.4"}, "tokens": {"tor": []}}}"#,
            "lists.tokens.tor",
        ),
        (
            br#"{"lists": {"sets": {"tor": "1.2.3.4"}, "tokens": {"tor": ["ok", "a b"]}}}"#,
            "lists.tokens.tor[1]",
        ),
        (
            br#"{"lists": {"sets": {"tor": "1.2.3.4"}, "tokens": {"tor": "GPTBot"}}}"#,
            "lists.tokens.tor",
        ),
        (
            br#"{"lists": {"packed": {"tor": "not base64"}}}"#,
            "lists.packed.tor",
        ),
        (
            br#"{"lists": {"packed": {"tor": "AQ=="}}}"#,
            "lists.packed.tor",
        ),
        (
            br#"{"lists": {"packed": {"Tor": "AXjaY2Tg4AIAACIAFA=="}}}"#,
            "lists.packed.Tor",
        ),
        (
            br#"{"lists": {"sets": {"tor": "10.0.0.0/8"},
                           "packed": {"tor": "AXjaY2Tg4AIAACIAFA=="}}}"#,
            "lists.packed.tor",
        ),
        (br#"{"lists": {"packed": {"tor": 1}}}"#, "lists.packed.tor"),
        (br#"{"unknown": 1}"#, "unknown"),
    ];

    #[test]
    fn errors_name_the_field() {
        for (json, field) in BAD_FIELDS {
            let e = PluginConfig::from_json(json).unwrap_err();
            assert_eq!(&e.field, field, "{}: {e}", String::from_utf8_lossy(json));
            assert!(e.to_string().contains(field) || *field == ".");
        }
        let both = br#"{"lists": {"sets": {"tor": "10.0.0.0/8"},
                                  "packed": {"tor": "AXjaY2Tg4AIAACIAFA=="}}}"#;
        let e = PluginConfig::from_json(both).unwrap_err();
        assert!(e.message.contains("also in lists.sets"), "{e}");
        // Text and packed lists count together against the limit.
        let sets: Vec<String> = (0..9).map(|i| format!(r#""t{i}": "10.0.0.0/8""#)).collect();
        let packed: Vec<String> = (0..8)
            .map(|i| format!(r#""p{i}": "AXjaY2Tg4AIAACIAFA==""#))
            .collect();
        let many = format!(
            r#"{{"lists": {{"sets": {{{}}}, "packed": {{{}}}}}}}"#,
            sets.join(","),
            packed.join(",")
        );
        let e = PluginConfig::from_json(many.as_bytes()).unwrap_err();
        assert_eq!(e.field, "lists.packed", "{e}");
        let e = PluginConfig::from_json(br#"{"trusted_hops": 2}"#).unwrap_err();
        assert!(e.message.contains("numTrustedProxies"), "{e}");
        let e = PluginConfig::from_json(br#"{"unknown": 1}"#).unwrap_err();
        assert!(e.message.contains("unknown"), "{e}");
        assert!(PluginConfig::from_json(b"{").is_err());
        assert!(PluginConfig::from_json(b"{} {}").is_err());
    }
}
