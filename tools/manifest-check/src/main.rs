use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Validate Kubernetes objects (a YAML stream, a JSON object or List) strictly against JSON
/// Schemas in kubeconform's layout. Exit 0 all valid, 1 some invalid, 2 bad input.
#[derive(Debug, Parser)]
#[command(name = "manifest-check", version)]
struct Args {
    /// Schema directory (kubeconform layout) [env: SCHEMAS_DIR; default: ../shared/schemas]
    #[arg(long, value_name = "DIR")]
    schemas: Option<PathBuf>,
    /// File to check; stdin when absent or `-`
    file: Option<PathBuf>,
}

fn main() -> ExitCode {
    pop_common::log::init("manifest-check");
    let args = Args::parse();
    let env = std::env::var_os(manifest_check::SCHEMAS_DIR_VAR);
    let config = manifest_check::resolve_config(args.schemas, env, args.file);
    let result = manifest_check::open_input(&config.input)
        .and_then(|mut input| manifest_check::run(&config, &mut input, &mut std::io::stdout()));
    pop_common::exit::finish(result)
}
