//! One cluster's resources on Scaleway, as one config and one project see them: what every plan
//! reads through and every step acts through.

use pop_common::wait::Sleeper;
use scaleway::Client;
use scaleway::s3::S3;

use crate::config::InfraConfig;
use crate::tags::Names;
use crate::wait::Waits;

#[derive(Debug)]
pub struct Cluster<'a> {
    pub api: &'a Client<'a>,
    /// Object Storage: the Talos image's bucket.
    pub s3: &'a S3<'a>,
    /// The clock of the waits (the client has its own for retries).
    pub sleeper: &'a dyn Sleeper,
    pub config: &'a InfraConfig,
    /// The project every resource is made in.
    pub project: &'a str,
    pub waits: Waits,
}

impl<'a> Cluster<'a> {
    pub fn zone(&self) -> &'a str {
        &self.config.zone
    }

    pub fn names(&self) -> Names<'a> {
        Names {
            config: self.config,
            project: self.project,
        }
    }
}
