//! The policy lists' records (tagged as every record is, see `pop_common::records`):
//! [`ListSources`], what the refresh job regenerates and from where, and [`PolicyList`], one
//! generated list. They live here rather than in pop-common because they carry the filter's
//! list-name rule (pow-core's), which the tools that never touch a list should not compile.

mod agent_source;
mod list_sources;
mod policy_list;

pub use agent_source::{
    AgentSource, KeyDirectory, MAX_AGENTS, directory_url_problem, keys_problem, url_host,
};
pub use list_sources::{
    DEFAULT_MAX_SHRINK_PERCENT, DEFAULT_TIMEOUT_SECONDS, LIST_NAME_RULE, LIST_SOURCES_VERSION,
    ListGenerator, ListSource, ListSources, MAX_LISTS, MAX_TOKENS, TOKEN_RULE, token_problem,
    valid_list_name, valid_token,
};
pub use policy_list::{ListCounts, POLICY_LIST_VERSION, PolicyList};
