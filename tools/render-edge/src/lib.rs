//! render-edge: the edge layer's Kubernetes objects, from the platform inputs and the edge
//! config.
//!
//! ```text
//! render-edge --inputs talos/_out/platform-inputs.json --config config/edge.json > edge.yaml
//! render-edge --inputs ... --config ... -o json | manifest-check
//! ```
//!
//! The output is a YAML stream (default) or a JSON `List`; it is a pure function of the two
//! files, so rendering twice gives identical bytes. Nothing is written when an input is bad.

pub mod config;
pub mod render;
mod versions;

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::{InputError, read_json};
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

/// Reads both files and resolves them into a plan: every check happens here, before any output.
pub fn plan(config: &Config) -> Result<Plan, Error> {
    let inputs: PlatformInputs = read_json(&config.inputs)?;
    let edge: EdgeConfig = read_json(&config.config)?;
    Ok(config::resolve(
        &inputs,
        &config.inputs,
        edge,
        &config.config,
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

/// Renders the edge objects described by `config` onto `output`; nothing is read from `input`.
pub fn run(config: &Config, _input: impl Read, mut output: impl Write) -> Result<(), Error> {
    let plan = plan(config)?;
    let objects = render::objects(&plan)?;
    let bytes = encode(&objects, config.format)?;
    output.write_all(&bytes).output()?;
    Ok(output.flush().output()?)
}
