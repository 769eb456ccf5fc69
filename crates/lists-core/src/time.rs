//! RFC 3339 timestamps in UTC: the workspace's one implementation lives in pop-common.

pub use pop_common::time::{now_rfc3339, rfc3339};
