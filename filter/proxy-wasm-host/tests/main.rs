//! The host's integration tests, one module per concern, in one test binary:
//! - `abi`: the host's ABI conformance, on a small module written in WAT;
//! - `filter_pow`: the real release `pow_filter.wasm`, flow by flow;
//! - `attacks`: the first adversarial review's attacks, replayed against the real module;
//! - `hardening`: the second review's (return path, tossed cookies, header sizes, client
//!   address, bypass width, salts, replay, unusable peer address);
//! - `policy`: the ordered rules, the short form deciding the rest, the refresh tier, the
//!   decision the origin is told;
//! - `prometheus`: the metrics as an Istio gateway serves them, and the decision log lines;
//! - `signed_fields`: Web Bot Auth signatures covering header fields besides their own;
//! - `third_review`: the third review's (lookalike cookie names, queries on bypassed paths,
//!   headers naming another site, overlong hosts, a lowered TTL, Teredo, IPv6 forms in lists).

mod abi;
mod attacks;
mod common;
mod filter_pow;
mod hardening;
mod policy;
mod prometheus;
mod signed_fields;
mod third_review;
