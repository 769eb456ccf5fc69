//! The proof-of-work filter core: configuration, policy decision, challenge, clearance cookie,
//! redirect validation and page rendering, with no proxy-wasm dependency, tested natively. The
//! wasm32-wasip1 glue (`filter/pow-filter`, crate `pow-filter`) only moves bytes between the host
//! and [`filter::Filter`].

pub mod bypass;
pub mod config;
pub mod crawlers;
pub mod crypto;
pub mod decision_log;
pub mod filter;
pub mod fnv;
pub mod lists;
pub mod log_limit;
pub mod net;
pub mod packed;
pub mod page;
pub mod policy;
pub mod redirect;
pub mod secrets;
pub mod seen;
pub mod time;
pub mod web_bot_auth;

pub use config::{ConfigError, Mode, PluginConfig};
pub use filter::{Action, Filter, Metrics, Now, Request};
