//! render-edge: the edge layer's Kubernetes objects, from the platform inputs and the edge
//! config.
//!
//! ```text
//! render-edge --inputs talos/_out/platform-inputs.json --config config/edge.json > edge.yaml
//! render-edge --inputs ... --config ... -o json | manifest-check
//! render-edge --inputs ... --config ... --names > edge-names.env
//! ```
//!
//! The output is a YAML stream (default) or a JSON `List`; it is a pure function of the two
//! files and the pins compiled in, so rendering twice gives identical bytes. Nothing is written
//! when an input or a pin is missing or bad.
//!
//! `--names` prints instead the names the edge scripts share with the objects (the namespace,
//! the HMAC Secret, the ApplySet parent...), one `KEY=value` line each, so that no script reads
//! them back out of the YAML or types them again.

pub mod config;
pub mod render;
mod versions;

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::{InputError, read_json};
use pop_common::pins::Pins;
use pop_common::records::PlatformInputs;
use pop_common::tool::Env;
use serde_json::{Value, json};

use crate::config::{EdgeConfig, Plan};
use crate::render::EncodeError;

/// Render the edge layer's Kubernetes objects (YAML stream on stdout).
#[derive(Debug, Parser)]
#[command(name = "render-edge", version, about)]
pub struct Cli {
    /// The infra layer's output: talos/_out/platform-inputs.json (a PlatformInputs record).
    #[arg(long, value_name = "FILE")]
    pub inputs: PathBuf,
    /// The edge config (see config/edge.example.json).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
    /// Print the names the edge scripts need (`KEY=value` lines) instead of the objects.
    #[arg(long, conflicts_with = "format")]
    pub names: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A YAML stream, one document per object (what kubectl apply -f - reads).
    Yaml,
    /// One JSON `List` object.
    Json,
}

/// Why rendering stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) => Exit::Usage,
            Error::Encode(_) | Error::Output(_) => Exit::Failure,
        }
    }
}

/// Nothing to resolve: both files are read by [`plan`], where every check happens.
pub type Config = Cli;

/// The arguments as they are; the environment plays no part.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, Error> {
    Ok(cli)
}

/// Reads both files and resolves them into a plan with the pins compiled in: every check
/// happens here, before any output.
pub fn plan(config: &Config) -> Result<Plan, Error> {
    plan_with(config, &versions::PINS)
}

/// [`plan`] with the given pins.
pub fn plan_with(config: &Config, pins: &Pins) -> Result<Plan, Error> {
    let inputs: PlatformInputs = read_json(&config.inputs)?;
    let edge: EdgeConfig = read_json(&config.config)?;
    let origin_image = versions::demo_origin_image(pins)?;
    Ok(config::resolve(
        &inputs,
        &config.inputs,
        edge,
        &config.config,
        origin_image,
    )?)
}

/// Encodes the objects in the chosen format, entirely in memory, so a failure writes nothing.
pub fn encode(objects: &[Value], format: Format) -> Result<Vec<u8>, EncodeError> {
    match format {
        Format::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
            let mut text = serde_json::to_vec_pretty(&list)
                .map_err(|e| render::EncodeError::new("the JSON List", e.to_string()))?;
            text.push(b'\n');
            Ok(text)
        }
        Format::Yaml => {
            let mut text = String::new();
            for object in objects {
                text.push_str("---\n");
                text.push_str(&render::to_yaml(object, "an object")?);
            }
            Ok(text.into_bytes())
        }
    }
}

/// The `KEY=value` lines of `--names`.
pub fn encode_names(plan: &Plan) -> Vec<u8> {
    render::names(plan)
        .into_iter()
        .map(|(key, value)| format!("{key}={value}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Renders the edge objects (or their names) described by `config` onto `output`; nothing is
/// read from `input`.
pub fn run(config: &Config, _input: impl Read, output: impl Write) -> Result<(), Error> {
    render_with(config, &versions::PINS, output)
}

/// [`run`] with the given pins: everything is checked and encoded before the first byte out.
pub fn render_with(config: &Config, pins: &Pins, mut output: impl Write) -> Result<(), Error> {
    let plan = plan_with(config, pins)?;
    let bytes = if config.names {
        encode_names(&plan)
    } else {
        encode(&render::objects(&plan)?, config.format)?
    };
    output.write_all(&bytes).output()?;
    Ok(output.flush().output()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(names: bool) -> Config {
        let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        Config {
            inputs: config.join("platform-inputs.example.json"),
            config: config.join("edge.example.json"),
            format: Format::Yaml,
            names,
        }
    }

    #[test]
    fn a_missing_pin_is_refused_naming_the_pin_and_the_file_and_nothing_is_written() {
        let pins = Pins::new("# the origin's pin is gone\nTALOS_VERSION=v1.13.11\n");
        for names in [false, true] {
            let mut out = Vec::new();
            let err = render_with(&example(names), &pins, &mut out).unwrap_err();
            assert_eq!(err.exit(), Exit::Usage, "{err}");
            assert_eq!(
                err.to_string(),
                "k8s/versions.env: field `DEMO_ORIGIN_IMAGE`: not pinned: the tools compile \
                 this file in; add the pin, with a comment saying where it comes from, and rebuild"
            );
            assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        }
        // The same config with the pins compiled in renders the pinned image.
        let mut out = Vec::new();
        render_with(&example(false), &versions::PINS, &mut out).unwrap();
        let image = versions::PINS.get("DEMO_ORIGIN_IMAGE").unwrap();
        assert!(
            String::from_utf8(out)
                .unwrap()
                .contains(&format!("image: {image}\n"))
        );
    }
}
