//! The lists job's `ListSources` record, from `pow.lists` and `pow.agents` (the Web Bot Auth
//! agents the edge trusts), checked against the filter's settings. render-edge renders the
//! agents into that record, never into the WasmPlugin's pluginConfig: the job owns
//! `pluginConfig.agents` as it owns `pluginConfig.lists`, so that a re-apply of the edge layer
//! never reverts the keys it fetched.

use std::path::Path;

use lists_core::records::{AgentSource, ListSources};
use pop_common::input::InputError;
use pop_common::records::{Kind, Version};

use super::ListsConfig;

/// The record, refusing a setting that names a list or an agent the job never writes, and
/// whatever the record's own rules refuse, each under its path in the edge config.
pub(super) fn record(
    lists: ListsConfig,
    agents: Vec<AgentSource>,
    decoded: &pow_core::config::PluginConfig,
    config_path: &Path,
) -> Result<ListSources, InputError> {
    let known = |name: &str| lists.sources.iter().any(|list| list.name == name);
    for name in decoded.list_difficulty.keys() {
        if !known(name) {
            return Err(InputError::field(
                config_path,
                format!("pow.plugin_config.list_difficulty.{name}"),
                format!("no list named `{name}` in pow.lists.sources"),
            ));
        }
    }
    // A rule naming a list the refresh never writes would never match: a typo, said here.
    for (i, rule) in decoded.rules.iter().enumerate() {
        let crawlers = rule.crawler.as_ref().and_then(|c| c.names()).unwrap_or(&[]);
        for (field, names) in [("lists", &rule.lists[..]), ("crawler", crawlers)] {
            if let Some((j, name)) = names.iter().enumerate().find(|(_, n)| !known(n)) {
                return Err(InputError::field(
                    config_path,
                    format!("pow.plugin_config.rules[{i}].{field}[{j}]"),
                    format!("no list named `{name}` in pow.lists.sources"),
                ));
            }
        }
    }
    check_agents(&agents, decoded, config_path)?;
    let record = ListSources {
        kind: Kind::new(),
        version: Version,
        max_shrink_percent: lists.max_shrink_percent,
        timeout_seconds: lists.timeout_seconds,
        lists: lists.sources,
        agents,
    };
    if let Some(problem) = record.problems().into_iter().next() {
        // ListSources names its fields from its own root, where the lists are `lists`; the
        // config nests them under pow.lists and calls them `sources` (`lists[i]` as well as the
        // whole `lists`, whose count the filter limits). The agents are pow.agents.
        let field = match problem.field.strip_prefix("lists") {
            Some(rest) => format!("lists.sources{rest}"),
            None if problem.field.starts_with("agents") => problem.field,
            None => format!("lists.{}", problem.field),
        };
        return Err(InputError::field(
            config_path,
            format!("pow.{field}"),
            problem.message,
        ));
    }
    Ok(record)
}

/// The agents' directories are fetched over https only (the record takes loopback http for a
/// test's stand-in, never the edge), and a rule naming an agent not trusted would never match.
/// The record's own rules (names, one source each, inline keys) are checked with the rest of it.
fn check_agents(
    agents: &[AgentSource],
    decoded: &pow_core::config::PluginConfig,
    config_path: &Path,
) -> Result<(), InputError> {
    for (i, agent) in agents.iter().enumerate() {
        if let Some(url) = &agent.directory
            && !url.starts_with("https://")
        {
            return Err(InputError::field(
                config_path,
                format!("pow.agents[{i}].directory"),
                format!(
                    "`{url}`: an https:// URL (the keys are as trustworthy as the channel they \
                     come over)"
                ),
            ));
        }
    }
    for (i, rule) in decoded.rules.iter().enumerate() {
        let names = rule
            .signed_agent
            .as_ref()
            .and_then(|c| c.names())
            .unwrap_or(&[]);
        if let Some((j, name)) = names
            .iter()
            .enumerate()
            .find(|(_, n)| !agents.iter().any(|a| &a.name == *n))
        {
            return Err(InputError::field(
                config_path,
                format!("pow.plugin_config.rules[{i}].signed_agent[{j}]"),
                format!("no agent named `{name}` in pow.agents"),
            ));
        }
    }
    Ok(())
}
