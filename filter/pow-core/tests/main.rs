//! pow-core's integration tests, one module per concern, in one test binary:
//! - `filter`: the filter's decisions end to end, natively;
//! - `attacks`: the adversarial reviews' attacks, natively;
//! - `fuzz_corpus`: the committed fuzz corpus replayed through the fuzz targets' checks.

mod attacks;
#[path = "../../fuzz/checks.rs"]
mod checks;
mod common;
mod filter;
mod fuzz_corpus;
