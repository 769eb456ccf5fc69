//! A Scaleway API client another crate can depend on: credentials resolved as Scaleway's tools
//! do, a narrow transport, retries, pagination, typed endpoints.

pub mod client;
pub mod creds;
pub mod endpoints;
pub mod http;
pub mod types;
