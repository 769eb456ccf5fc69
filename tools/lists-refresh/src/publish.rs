//! Publishing to the cluster: read the ConfigMap (the previous lists and keys), regenerate the
//! lists and fetch the agents' directories, check every size and what the filter would refuse,
//! then server-side-apply the ConfigMap, then the WasmPlugin.

use std::collections::BTreeMap;
use std::io::{self, Write};

use lists_core::records::ListSources;
use pop_common::exit::WritingOutput;
use serde_json::Value;

use crate::error::{Failure, RefreshError};
use crate::generate::generate;
use crate::plan::{Layout, Plan, key_of, previous_agents, previous_of};
use crate::{Cluster, Config, FIELD_MANAGER, Kube, directory};

/// The WasmPlugin as read: its API path, name and object.
struct WasmPlugin {
    path: String,
    name: String,
    object: Value,
}

/// Publishes to the cluster: the ConfigMap, then the WasmPlugin.
pub(crate) fn publish(
    config: &Config,
    cluster: &Cluster,
    sources: &ListSources,
    output: impl Write,
) -> Result<(), RefreshError> {
    let kube = Kube::new(
        &cluster.api_server,
        &cluster.ca_file,
        &cluster.token_file,
        concat!("edgepop-lists-refresh/", env!("CARGO_PKG_VERSION")),
    )?;
    let cm_path = format!(
        "/api/v1/namespaces/{}/configmaps/{}",
        cluster.namespace, cluster.configmap
    );
    let current = kube.get(&cm_path)?;
    let old_data = previous_of(current.as_ref())?;
    let (fresh, mut failures) = generate_all(config, sources, &old_data)?;
    if fresh.is_empty() {
        return Err(RefreshError::AllFailed(failures));
    }
    let agents = directory::refresh(
        &sources.agents,
        &previous_agents(&old_data),
        sources.timeout_seconds,
        pop_common::time::now_secs(),
    );
    failures.extend(agents.failures);

    let mut plan = Plan::new(sources, &old_data, &fresh, &cluster.now)?;
    plan.add_agents(agents.keys, &old_data);
    // Measured before anything else is read, so that what cannot fit is refused first.
    let mut layout = plan.configmap_layout(current.as_ref())?;
    let wasm = wasmplugin(&kube, cluster)?;
    if let Some(wasm) = &wasm {
        if plan.compare_wasmplugin(&wasm.object) {
            // A new version stamp: the ConfigMap's data carries it.
            layout = plan.configmap_layout(current.as_ref())?;
        }
        plan.check_wasmplugin_size(&wasm.object)?;
    }
    let wasm_current = wasm.as_ref().is_some_and(|w| {
        w.object
            .pointer("/spec/pluginConfig/lists/version")
            .and_then(Value::as_str)
            == old_data.get("version").map(String::as_str)
    });
    if !plan.changed && wasm.as_ref().is_none_or(|_| wasm_current) {
        pop_common::info!(
            "lists unchanged since version {}: nothing written",
            plan.old_version()
        );
    } else {
        apply(
            &kube,
            cluster,
            &cm_path,
            current.as_ref(),
            &plan,
            &layout,
            wasm.as_ref(),
        )?;
    }
    write_summary(output, &plan, &agents.refreshed, &agents.kept).output()?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(RefreshError::SomeFailed(failures))
    }
}

/// Runs every list's generator with its previous text (from the ConfigMap) as the baseline.
fn generate_all(
    config: &Config,
    sources: &ListSources,
    old_data: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, Vec<Failure>), RefreshError> {
    let work = tempfile::tempdir().map_err(RefreshError::TempDir)?;
    let mut fresh: BTreeMap<String, String> = BTreeMap::new();
    let mut failures = Vec::new();
    for list in &sources.lists {
        let previous = match old_data.get(&key_of(&list.name)) {
            Some(text) => {
                let file = work.path().join(key_of(&list.name));
                std::fs::write(&file, text).map_err(|source| RefreshError::WriteFile {
                    path: file.clone(),
                    source,
                })?;
                Some(file)
            }
            None => None,
        };
        match generate(config, sources, list, previous.as_deref()) {
            Ok(text) => {
                fresh.insert(list.name.clone(), text);
            }
            Err(why) => {
                let failure = Failure::list(&list.name, why, previous.is_some());
                failure.warn();
                failures.push(failure);
            }
        }
    }
    Ok((fresh, failures))
}

/// The WasmPlugin, when one is named and exists.
fn wasmplugin(kube: &Kube, cluster: &Cluster) -> Result<Option<WasmPlugin>, RefreshError> {
    let Some(name) = &cluster.wasmplugin else {
        return Ok(None);
    };
    let path = format!(
        "/apis/extensions.istio.io/v1alpha1/namespaces/{}/wasmplugins/{name}",
        cluster.namespace
    );
    let object = kube.get(&path)?;
    if object.is_none() {
        pop_common::warn!(
            "WasmPlugin {}/{name} not found (filter disabled?): lists go to the ConfigMap only",
            cluster.namespace
        );
    }
    Ok(object.map(|object| WasmPlugin {
        path,
        name: name.clone(),
        object,
    }))
}

/// Checks what the filter would refuse, then applies the ConfigMap and the WasmPlugin.
fn apply(
    kube: &Kube,
    cluster: &Cluster,
    cm_path: &str,
    current: Option<&Value>,
    plan: &Plan,
    layout: &Layout,
    wasm: Option<&WasmPlugin>,
) -> Result<(), RefreshError> {
    if let Some(wasm) = wasm {
        plan.check_wasmplugin_config(
            &wasm.object,
            &format!("{}/{}", cluster.namespace, wasm.name),
        )?;
    }
    let cm = plan.configmap(cluster, current, layout);
    kube.apply(cm_path, &cm, FIELD_MANAGER)?;
    let packed: Vec<&str> = layout.binary_data.keys().map(String::as_str).collect();
    pop_common::info!(
        "ConfigMap {}/{}: applied version {} ({}){}",
        cluster.namespace,
        cluster.configmap,
        plan.version,
        plan.summary(),
        if packed.is_empty() {
            String::new()
        } else {
            format!(
                "; packed, as text would not fit: binaryData {}",
                packed.join(", ")
            )
        }
    );
    if let Some(wasm) = wasm {
        kube.apply(
            &wasm.path,
            &plan.wasmplugin(cluster, &wasm.name),
            FIELD_MANAGER,
        )?;
        pop_common::info!(
            "WasmPlugin {}/{}: pluginConfig.lists at version {}{}",
            cluster.namespace,
            wasm.name,
            plan.version,
            if plan.agents.is_empty() {
                String::new()
            } else {
                format!(
                    ", pluginConfig.agents: {}",
                    plan.agents.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            }
        );
    }
    Ok(())
}

/// The run's result for whoever reads stdout (the job's log): which version is live, which lists
/// were regenerated and which kept their previous content; the same of the agents, if any.
fn write_summary(
    mut output: impl Write,
    plan: &Plan,
    agents_refreshed: &[String],
    agents_kept: &[String],
) -> io::Result<()> {
    let mut summary = serde_json::json!({
        "version": plan.version,
        "changed": plan.changed,
        "regenerated": plan.fresh,
        "kept": plan.kept,
    });
    if !agents_refreshed.is_empty() || !agents_kept.is_empty() {
        summary["agents"] = serde_json::json!({"refreshed": agents_refreshed, "kept": agents_kept});
    }
    writeln!(output, "{summary}")
}
