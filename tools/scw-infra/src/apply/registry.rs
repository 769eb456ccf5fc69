//! The public Container Registry namespace the edge's images are pushed to (kept by `destroy`:
//! it holds the images, and has no tags to prove it is ours).

use scaleway::registry::CreateNamespace;
use serde::Serialize;

use super::ApplyStep;
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::Steps;

/// Creating the namespace, public.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Create {
    pub region: String,
    pub name: String,
}

/// The namespace: found by its name (a private one is only warned about), or created.
pub fn plan(cluster: &Cluster<'_>, steps: &mut Steps<ApplyStep>) -> R<()> {
    let region = cluster.config.region();
    let name = &cluster.config.registry_namespace;
    let found = cluster.api.registry().namespaces(region, name)?;
    match found.first() {
        Some(ns) if !ns.is_public => pop_common::warn!(
            "the registry namespace {name} is private: nodes need credentials to pull from {}",
            ns.endpoint
        ),
        Some(_) => {}
        None => steps.push(ApplyStep::CreateRegistryNamespace(Create {
            region: region.to_owned(),
            name: name.clone(),
        })),
    }
    Ok(())
}

impl Create {
    pub fn execute(&self, cluster: &Cluster<'_>) -> R<()> {
        pop_common::info!("creating the public registry namespace {}", self.name);
        let ns = cluster
            .api
            .registry()
            .create_namespace(
                &self.region,
                &CreateNamespace {
                    name: self.name.clone(),
                    project_id: cluster.project.to_owned(),
                    is_public: true,
                },
            )
            .map_err(|error| match error.status() {
                // This project has no namespace of the name (the plan looked): another one has.
                Some(409) => InfraError::RegistryNameTaken {
                    name: self.name.clone(),
                },
                _ => error.into(),
            })?;
        pop_common::info!("registry: {}", ns.endpoint);
        Ok(())
    }
}
