//! Running a resolved command line: render, check, then write.

use std::io::{self, Read, Write};
use std::path::Path;

use pop_common::exit::WritingOutput;
use pop_common::input::InputError;
use pop_common::pins::Pins;
use pop_common::records::{PlatformInputs, PublishedImages};
use serde_json::{Value, json};

use crate::profile::{self, Kind, PLAN_FILE};
use crate::{
    ClusterConfig, Config, Error, PINS, STATUS_FILE, Target, etcd_backup, host_firewall, onprem,
    plan, rendered, secrets, stale_rules,
};

/// Prints one component's rendered layer, writes every one and the plan into `--out-dir`, or
/// (`--secrets`) turns the decrypted SOPS document on `input` into Secrets on `output`.
pub fn run(config: &Config, input: impl Read, output: impl Write) -> Result<(), Error> {
    run_with(config, &PINS, input, output)
}

/// [`run`] with the given pins. Everything is checked and rendered before the first write.
pub fn run_with(
    config: &Config,
    pins: &Pins,
    input: impl Read,
    mut output: impl Write,
) -> Result<(), Error> {
    let (profile, config_path, target, inputs_path, published, expected) = match config {
        Config::FillSecrets { template } => {
            let template: secrets::SecretsTemplate = pop_common::input::read_json(template)?;
            return Ok(secrets::fill(&template, input, output)?);
        }
        Config::EnvironmentSecret(secret) => {
            if let Some(object) = &secret.0 {
                output.write_all(json_text(object)?.as_bytes()).output()?;
            }
            return Ok(output.flush().output()?);
        }
        Config::StaleRules { patch } => {
            let node: Value =
                pop_common::input::read_json_from(Path::new(stale_rules::STDIN), input)?;
            let text = std::fs::read_to_string(patch).map_err(|source| InputError::Read {
                path: patch.clone(),
                source,
            })?;
            let names = stale_rules::stale(&node, patch, &text)?;
            for name in &names {
                pop_common::info!("the node's rule {name} is no longer rendered: deleted");
            }
            return output
                .write_all(stale_rules::delete_documents(&names).as_bytes())
                .map_err(|e| Error::Write(e.into()));
        }
        Config::Render {
            profile,
            config,
            target,
            inputs,
            published,
            cluster,
        } => (*profile, config, target, inputs, published, cluster),
    };
    profile::check(profile.name(), profile.components())?;
    let cluster = ClusterConfig::load(profile, config_path)?;
    if let (Some(name), ClusterConfig::Onprem(onprem)) = (expected, &cluster) {
        onprem::check_is_cluster(onprem, name)
            .map_err(|(field, why)| InputError::field(config_path, field, why))?;
    }
    let render = || {
        render_all(
            &cluster,
            config_path,
            inputs_path.as_deref(),
            published.as_deref(),
            pins,
        )
    };
    match target {
        Target::Dir(dir) => {
            let rendering = render()?;
            write_all(dir, &rendering)
        }
        Target::Names => {
            let rendering = render()?;
            let (_, names) = rendering
                .files
                .iter()
                .find(|(name, _)| name == STATUS_FILE)
                .ok_or(Error::NoNames(profile.name()))?;
            output.write_all(names.as_bytes()).output()?;
            Ok(output.flush().output()?)
        }
        Target::Stdout(name) => {
            let value = render_one(&cluster, config_path, name, pins)?;
            output.write_all(json_text(&value)?.as_bytes()).output()?;
            Ok(output.flush().output()?)
        }
    }
}

/// What `--out-dir` holds: each file's name and text, and the plan, written last.
struct Rendering {
    files: Vec<(String, String)>,
    plan: String,
}

/// Every component's rendered layer, the files of the profile (the names `make cluster-status`
/// reads, the edge's host firewall) and the plan, in memory: nothing is written if anything fails.
fn render_all(
    cluster: &ClusterConfig,
    config_path: &Path,
    inputs_path: Option<&Path>,
    published: Option<&Path>,
    pins: &Pins,
) -> Result<Rendering, Error> {
    let components = &cluster.components();
    let mut files = Vec::new();
    let mut templates = Vec::new();
    for component in components {
        let Some(value) = rendered(cluster, config_path, component, pins)? else {
            continue;
        };
        if let Kind::Secrets = component.kind {
            let template: secrets::SecretsTemplate = serde_json::from_value(value.clone())
                .map_err(|e| Error::Write(io::Error::other(e).into()))?;
            templates.push((component.name, template));
        }
        files.push((format!("{}.json", component.name), json_text(&value)?));
    }
    let template_refs: Vec<(&str, &secrets::SecretsTemplate)> =
        templates.iter().map(|(n, t)| (*n, t)).collect();
    let plan = profile::plan_text(&plan(components, pins, &template_refs)?);
    match cluster {
        ClusterConfig::Onprem(onprem) => {
            let names = onprem::status_names(onprem, config_path)?;
            files.push((STATUS_FILE.to_owned(), names));
        }
        ClusterConfig::Edge(platform) => {
            let path = inputs_path.ok_or(Error::Inputs)?;
            let inputs: PlatformInputs = pop_common::input::read_json(path)?;
            files.push((STATUS_FILE.to_owned(), crate::edge::status_names()));
            for (name, text) in host_firewall::firewall_files(platform, &inputs, path)? {
                files.push((name.to_owned(), text));
            }
            if let Some(backup) = &platform.etcd_backup {
                let image = backup_image(published)?;
                let items = etcd_backup::objects(backup, &inputs.cluster_name, &image);
                let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
                files.push((format!("{}.json", etcd_backup::NAME), json_text(&list)?));
            }
        }
    }
    Ok(Rendering { files, plan })
}

/// The etcd backup's image, pinned by digest, from the PublishedImages record.
fn backup_image(published: Option<&Path>) -> Result<String, Error> {
    let path = published.ok_or(Error::PublishedImages)?;
    let record: PublishedImages = pop_common::input::read_json(path)?;
    record
        .check_repositories()
        .map_err(|(field, why)| InputError::field(path, field, why))?;
    let image = record.etcd_backup.ok_or_else(|| {
        InputError::field(
            path,
            "etcd_backup",
            "missing: the config sets etcd_backup, whose image this record does not pin yet \
             (make publish-images pushes it and writes it here)",
        )
    })?;
    Ok(image.pinned())
}

fn write_all(dir: &Path, rendering: &Rendering) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::WriteFile {
        path: dir.to_path_buf(),
        source,
    })?;
    for (name, text) in &rendering.files {
        write_file(dir, name, text)?;
    }
    // Last: its date says that every file beside it is as fresh.
    write_file(dir, PLAN_FILE, &rendering.plan)
}

/// One component's rendered layer; an unknown one is refused naming those that have one.
fn render_one(
    cluster: &ClusterConfig,
    config_path: &Path,
    name: &str,
    pins: &Pins,
) -> Result<Value, Error> {
    let profile = cluster.profile();
    let components = &cluster.components();
    let unknown = || Error::UnknownComponent {
        profile: profile.name(),
        name: name.to_owned(),
        known: components
            .iter()
            .filter(|c| matches!(rendered(cluster, config_path, c, pins), Ok(Some(_))))
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", "),
    };
    let component = components
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(unknown)?;
    rendered(cluster, config_path, component, pins)?.ok_or_else(unknown)
}

/// A rendered layer as pretty JSON, ending with a newline.
fn json_text(value: &Value) -> Result<String, Error> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|err| Error::Write(io::Error::other(err).into()))?;
    text.push('\n');
    Ok(text)
}

/// Writes `dir/name` through a temporary file renamed into place.
fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), Error> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| Error::WriteFile { path, source })
}
