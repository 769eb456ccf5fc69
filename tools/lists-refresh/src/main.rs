use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    pop_common::log::init("lists-refresh");
    let cli = lists_refresh::Cli::parse();
    let env = |name: &str| std::env::var(name).ok();
    let result = lists_refresh::resolve(&cli, &env).and_then(|config| lists_refresh::run(&config));
    pop_common::exit::finish(result)
}
