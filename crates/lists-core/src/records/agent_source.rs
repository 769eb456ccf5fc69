//! `ListSources.agents`: the Web Bot Auth agents the edge trusts, and where their keys come from.
//!
//! ```json
//! "agents": [
//!   {"name": "examplebot",
//!    "directory": "https://bot.example.com/.well-known/http-message-signatures-directory"},
//!   {"name": "testbot", "keys": {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "..."}]}}
//! ]
//! ```
//!
//! - `name` names the agent in the filter's `pluginConfig.agents` and in the rules'
//!   `signed_agent`: the filter's list-name rule, unique, at most `MAX_AGENTS` agents.
//! - `directory`: the agent's key directory (draft-meunier-http-message-signatures-directory-05,
//!   section 3: a JWK Set served as `application/http-message-signatures-directory+json`),
//!   which `lists-refresh` fetches every run. An `https://` URL; `http://` only to a loopback
//!   host (a test's stand-in): the keys are as trustworthy as the channel they come over.
//! - `keys`: the directory itself, inline (tests, an offline edge, an agent that publishes none).
//!
//! Exactly one of `directory` and `keys`. Inline keys are checked with the filter's own
//! parser: what the filter would refuse is refused here.

use serde::{Deserialize, Serialize};

use pop_common::records::Problem;
pub use pow_core::web_bot_auth::{KeyDirectory, MAX_AGENTS};

use super::list_sources::{LIST_NAME_RULE, valid_list_name};

/// One trusted agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSource {
    pub name: String,
    /// Where its key directory is fetched from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Its key directory, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<KeyDirectory>,
}

/// The host of an `http(s)://` URL (without port, user info, path), `None` when there is none.
pub fn url_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let host = if host_port.starts_with('[') {
        host_port.split_inclusive(']').next()?
    } else {
        host_port.split(':').next()?
    };
    (!host.is_empty()).then_some(host)
}

/// Why `url` cannot be an agent's directory, `None` when it can.
pub fn directory_url_problem(url: &str) -> Option<String> {
    let Some(host) = url_host(url) else {
        return Some(format!("`{url}` is not an https:// URL with a host"));
    };
    if url.starts_with("http://") && !pop_common::url::is_loopback_host(host) {
        return Some(format!(
            "`{url}`: https only (http:// only to a loopback stand-in): the keys are as \
             trustworthy as the channel they come over"
        ));
    }
    if url.contains(['@', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "`{url}`: no user info, fragment, space or control character"
        ));
    }
    None
}

/// The problems of the `agents` of a record (paths `agents[i].<field>`).
pub(crate) fn agent_problems(agents: &[AgentSource]) -> Vec<Problem> {
    let mut problems = Vec::new();
    if agents.len() > MAX_AGENTS {
        problems.push(Problem::new(
            "agents",
            format!(
                "{} agents, the filter trusts at most {MAX_AGENTS}",
                agents.len()
            ),
        ));
    }
    for (i, agent) in agents.iter().enumerate() {
        let at = |field: &str| format!("agents[{i}].{field}");
        if !valid_list_name(&agent.name) {
            problems.push(Problem::new(
                at("name"),
                format!("`{}`: {LIST_NAME_RULE}", agent.name),
            ));
        } else if agents[..i].iter().any(|a| a.name == agent.name) {
            problems.push(Problem::new(
                at("name"),
                format!("`{}` appears twice", agent.name),
            ));
        }
        match (&agent.directory, &agent.keys) {
            (Some(url), None) => {
                if let Some(why) = directory_url_problem(url) {
                    problems.push(Problem::new(at("directory"), why));
                }
            }
            (None, Some(keys)) => {
                if let Some(why) = keys_problem(keys) {
                    problems.push(Problem::new(format!("{}{}", at("keys"), why.0), why.1));
                }
            }
            _ => problems.push(Problem::new(
                format!("agents[{i}]"),
                "give either `directory` (its URL) or `keys` (the directory inline)",
            )),
        }
    }
    problems
}

/// Why the filter would refuse `keys` as an agent's directory: the member inside it (`.keys[1].x`,
/// or empty for the whole) and a sentence. `None` when it takes them.
pub fn keys_problem(keys: &KeyDirectory) -> Option<(String, String)> {
    match keys.ed25519_keys() {
        Err(e) => Some((format!(".{}", e.member), e.message.to_owned())),
        Ok((found, skipped)) if found.is_empty() => Some((
            String::new(),
            format!(
                "no Ed25519 key (kty OKP, crv Ed25519, use sig or none); {skipped} other key(s)"
            ),
        )),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(json: &str) -> Vec<AgentSource> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn directory_urls_are_https_or_loopback_http() {
        for ok in [
            "https://bot.example.com/.well-known/http-message-signatures-directory",
            "https://bot.example.com:8443/keys",
            "http://127.0.0.1:4000/.well-known/http-message-signatures-directory",
            "http://[::1]:4000/d",
            "http://localhost/d",
        ] {
            assert_eq!(directory_url_problem(ok), None, "{ok}");
        }
        for bad in [
            "http://bot.example.com/.well-known/http-message-signatures-directory",
            "ftp://bot.example.com/d",
            "https:///d",
            "https://user@bot.example.com/d",
            "https://bot.example.com/d#x",
            "bot.example.com",
            "/etc/keys.json",
        ] {
            assert!(directory_url_problem(bad).is_some(), "{bad}");
        }
        assert!(
            directory_url_problem("http://bot.example.com/d")
                .unwrap()
                .contains("https only")
        );
    }

    #[test]
    fn each_broken_agent_is_named_with_its_field() {
        let list = agents(
            r#"[
            {"name": "Bot", "directory": "https://bot.example.com/d"},
            {"name": "bot", "directory": "http://bot.example.com/d"},
            {"name": "bot", "keys": {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}]}},
            {"name": "none"},
            {"name": "both", "directory": "https://b.example/d",
             "keys": {"keys": []}},
            {"name": "rsa", "keys": {"keys": [{"kty": "RSA"}]}},
            {"name": "good", "keys": {"keys": [{"kty": "OKP", "crv": "Ed25519",
             "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}}
        ]"#,
        );
        let problems = agent_problems(&list);
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "agents[0].name",
                "agents[1].directory",
                "agents[2].name",
                "agents[2].keys.keys[0].x",
                "agents[3]",
                "agents[4]",
                "agents[5].keys",
            ]
        );
        let text = pop_common::records::join_problems(&problems);
        for expected in [
            "agents[2].name: `bot` appears twice",
            "agents[5].keys: no Ed25519 key",
            "agents[3]: give either `directory`",
        ] {
            assert!(text.contains(expected), "{expected} not in {text}");
        }
    }

    #[test]
    fn more_agents_than_the_filter_trusts_are_a_problem() {
        let many: Vec<AgentSource> = (0..=MAX_AGENTS)
            .map(|i| AgentSource {
                name: format!("a{i}"),
                directory: Some(format!("https://a{i}.example/d")),
                keys: None,
            })
            .collect();
        let problems = agent_problems(&many);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].field, "agents");
    }
}
