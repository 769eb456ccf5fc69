//! The tests that cross tools: the shell pipelines, the Makefile's steps, the recording and API
//! stand-ins, driven with the binaries cargo built. One module per concern (see Cargo.toml), all
//! in one test binary.

// A failed unwrap in a test, or in a helper only tests call, is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply_edge;
mod check_prereqs;
mod cluster_status;
mod docs_commands;
mod edge_hostnames;
mod etcd_backup_objects;
mod etcd_day2;
mod house;
mod images;
mod infra_bootstrap;
mod infra_pipeline;
mod interruptions;
mod network_flows;
mod onprem_check;
mod onprem_clusters;
mod onprem_contracts;
mod onprem_profile;
mod pipelines;
mod platform;
mod readme_walk;
mod rehearsal;
mod rehearsal_day2;
mod talos_patches;
mod talos_schema;
mod teardown;
mod tools;
mod values_contract;
