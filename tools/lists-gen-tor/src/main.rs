use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    pop_common::log::init("lists-gen-tor");
    let cli = lists_gen_tor::Cli::parse();
    let result = lists_gen_tor::resolve(&cli).and_then(|config| {
        lists_gen_tor::run(&config, std::io::stdin().lock(), std::io::stdout().lock())
    });
    pop_common::exit::finish(result)
}
