//! render-edge's integration tests, one module per concern, in one test binary:
//! - `cli`: the binary as a user runs it, against the golden files in `fixtures/`;
//! - `objects`: what the rendered objects must say for the edge to work, field by field;
//! - `schemas`: every rendered object against the upstream JSON Schemas;
//! - `admission`: the ValidatingAdmissionPolicy's CEL on allowed and refused changes.

mod admission;
mod cli;
mod objects;
mod schemas;
