//! What every edgepop tool shares.
//!
//! - [`records`]: the typed records that cross pipes between tools, each tagged with a `kind` and
//!   a `version` so that a reader refuses what it does not understand instead of guessing.
//! - [`exit`]: the workspace's exit codes and the one place that turns a result into a process
//!   exit (closed downstream pipe included).
//! - [`log`]: logging to stderr with the tool's name as prefix; stdout carries data only.
//! - [`input`]: reading and decoding input files with errors that name the file and the field.
//! - [`tool`]: the one shape of a tool (`Cli`, `resolve`, `run`) and the [`main!`] that runs it.
//! - [`time`]: RFC 3339 UTC timestamps for the records, without a date-time dependency.
//! - [`hex`]: the lower-case hexadecimal encoder.
//! - [`pins`]: reading the version pins of `k8s/versions.env`.
//! - [`cron_job`]: how the CronJobs edgepop renders run (no overlap, no late start, one retry).
//! - [`url`]: what the tools ask of a URL's host (whether it is loopback).
//! - [`wait`]: the injected clock ([`wait::Sleeper`]) and the one bounded polling loop.

pub mod acme;
pub mod backup;
pub mod cron_job;
pub mod exit;
pub mod hex;
pub mod input;
pub mod log;
pub mod pins;
pub mod pod_security;
pub mod records;
pub mod time;
pub mod tool;
pub mod url;
pub mod wait;
