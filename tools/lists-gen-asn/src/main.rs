use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    pop_common::log::init("lists-gen-asn");
    let cli = lists_gen_asn::Cli::parse();
    let result = lists_gen_asn::resolve(&cli).and_then(|config| {
        lists_gen_asn::run(&config, std::io::stdin().lock(), std::io::stdout().lock())
    });
    pop_common::exit::finish(result)
}
