//! Scaleway Object Storage (the S3 API), signed with AWS Signature Version 4.

pub mod sigv4;
