//! pow-core's integration tests, one module per concern, in one test binary:
//! - `filter`: the filter's decisions end to end, natively;
//! - `attacks`: the adversarial reviews' attacks, natively;
//! - `fuzz_corpus`: the committed fuzz corpus replayed through the fuzz targets' checks;
//! - `web_bot_auth`: signed agents, against the RFC 9421 and Web Bot Auth draft vectors.

mod attacks;
#[path = "../../fuzz/checks.rs"]
mod checks;
mod common;
mod filter;
mod fuzz_corpus;
mod web_bot_auth;
