use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use pow_demo::{self as demo, Cli, Demo};

fn main() -> ExitCode {
    pop_common::log::init("pow-demo");
    let cli = Cli::parse();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = demo::resolve(
        &cli,
        std::env::var("CARGO_TARGET_DIR").ok().as_deref(),
        &workspace,
    );
    pop_common::exit::finish(Demo::start(&config).map(|running| {
        pop_common::info!(
            "open {} (the origin is behind it; Ctrl-C stops both)",
            running.url()
        );
        running.wait();
    }))
}
