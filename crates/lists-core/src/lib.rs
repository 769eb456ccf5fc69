//! The list records and what the list generators (`lists-gen-asn`, `lists-gen-tor`,
//! `lists-gen-crawlers`) share.
//!
//! - [`source`]: open a file, an http(s) URL or stdin, plain or gzip, as a stream of lines; every
//!   error names the source (URLs redacted of credentials).
//! - [`cidr`]: exact aggregation of address ranges into the minimal CIDR set, the same set
//!   Python's `ipaddress.collapse_addresses` gives.
//! - [`list`]: the `PolicyList` record, its text form, the shrink check against the previous
//!   list.
//! - [`args`]: the flags every generator shares; [`formats`]: the input formats of each.
//! - [`records`]: the `ListSources` and `PolicyList` records.

pub mod args;
pub mod cidr;
pub mod error;
pub mod formats;
mod gzip;
pub mod list;
pub mod records;
pub mod source;
pub mod time;

pub use error::ListError;
