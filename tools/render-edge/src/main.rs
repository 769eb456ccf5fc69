use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    pop_common::log::init("render-edge");
    let cli = render_edge::Cli::parse();
    let stdout = std::io::stdout();
    pop_common::exit::finish(render_edge::run(&cli, &mut stdout.lock()))
}
