//! render-edge's integration tests, one module per concern, in one test binary:
//! - `cli`: the binary as a user runs it, against the golden files in `fixtures/`;
//! - `objects`: what the rendered objects must say for the edge to work, field by field;
//! - `schemas`: every rendered object against the upstream JSON Schemas;
//! - `api_server`: every rendered object taken by the real API server, up to the config's limits;
//! - `monitoring`: the metrics' way to Prometheus, the PodMonitor and the alerts (API server,
//!   promtool);
//! - `admission`: the ValidatingAdmissionPolicy, evaluated by the real API server on allowed and
//!   refused changes of the lists job;
//! - `placement`: the gateway's pods on the edge nodes, scheduled, rolled out and drained by a
//!   real control plane.

mod admission;
mod api_server;
mod cli;
mod monitoring;
mod objects;
mod placement;
mod schemas;
