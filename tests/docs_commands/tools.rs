//! The workspace's own programs as a document invokes them: each tool's flags and subcommands
//! as its `--help` lists them (the built binary, run), and cargo's `-p`, `--bin`, `--test` and
//! `--bench` as `cargo metadata` knows the workspace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The workspace's packages and their targets, by kind (`bin`, `test`, `bench`, ...).
#[derive(Debug)]
pub struct Workspace {
    pub packages: BTreeMap<String, Vec<(String, String)>>,
    /// The binaries of `tools/*` and `filter/pow-demo`: what a document shows a reader running.
    pub tools: BTreeSet<String>,
}

impl Workspace {
    pub fn read(root: &Path) -> Workspace {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = testkit::process::stdout_of(
            Command::new(cargo)
                .args([
                    "metadata",
                    "--no-deps",
                    "--format-version",
                    "1",
                    "--offline",
                ])
                .current_dir(root),
        );
        let metadata: serde_json::Value = serde_json::from_str(&out).unwrap();
        let root = root.canonicalize().unwrap();
        let mut packages = BTreeMap::new();
        let mut tools = BTreeSet::new();
        for package in metadata["packages"].as_array().unwrap() {
            let manifest = Path::new(package["manifest_path"].as_str().unwrap());
            let dir = manifest
                .parent()
                .unwrap()
                .strip_prefix(&root)
                .unwrap_or(manifest);
            let is_tool = dir.starts_with("tools") || dir == Path::new("filter/pow-demo");
            let mut targets = Vec::new();
            for target in package["targets"].as_array().unwrap() {
                let name = target["name"].as_str().unwrap().to_owned();
                for kind in target["kind"].as_array().unwrap() {
                    let kind = kind.as_str().unwrap().to_owned();
                    if is_tool && kind == "bin" {
                        tools.insert(name.clone());
                    }
                    targets.push((kind, name.clone()));
                }
            }
            packages.insert(package["name"].as_str().unwrap().to_owned(), targets);
        }
        Workspace { packages, tools }
    }

    /// What is wrong with a `cargo` command's packages and targets (empty when nothing is), and
    /// for `cargo run` the tool and the words after `--`.
    pub fn check_cargo<'a>(
        &self,
        args: &'a [String],
    ) -> (Vec<String>, Option<(String, &'a [String])>) {
        let mut problems = Vec::new();
        let (args, after) = match args.iter().position(|a| a == "--") {
            Some(at) => (&args[..at], Some(&args[at + 1..])),
            None => (args, None),
        };
        let value = |i: usize| args.get(i + 1).map(String::as_str).unwrap_or("");
        let packages: Vec<&str> = (0..args.len())
            .filter(|&i| args[i] == "-p" || args[i] == "--package")
            .map(value)
            .collect();
        for package in &packages {
            if !self.packages.contains_key(*package) {
                problems.push(format!(
                    "cargo -p {package}: no such package in the workspace"
                ));
            }
        }
        let mut run_bin = None;
        for (flag, kind) in [("--bin", "bin"), ("--test", "test"), ("--bench", "bench")] {
            for i in (0..args.len()).filter(|&i| args[i] == flag) {
                let name = value(i);
                let found = self.packages.iter().any(|(package, targets)| {
                    (packages.is_empty() || packages.contains(&package.as_str()))
                        && targets.iter().any(|(k, n)| k == kind && n == name)
                });
                if !found {
                    let within = if packages.is_empty() {
                        "the workspace".to_owned()
                    } else {
                        packages.join(", ")
                    };
                    problems.push(format!(
                        "cargo {flag} {name}: no {kind} target {name} in {within}"
                    ));
                }
                if kind == "bin" {
                    run_bin = Some(name.to_owned());
                }
            }
        }
        let run = match (args.first().map(String::as_str), after) {
            (Some("run"), Some(after)) => run_bin
                .or_else(|| packages.first().map(|p| (*p).to_owned()))
                .map(|bin| (bin, after)),
            _ => None,
        };
        (problems, run.filter(|(bin, _)| self.tools.contains(bin)))
    }
}

/// What one level of a tool (the tool, or one of its subcommands) accepts, from its `--help`.
#[derive(Debug, Default, PartialEq)]
pub struct Help {
    /// Long flags (`--config`), short ones (`-o`), each with whether it takes a value.
    pub flags: BTreeMap<String, bool>,
    pub subcommands: BTreeSet<String>,
    /// Whether it takes positional arguments (an `Arguments:` section).
    pub positionals: bool,
}

impl Help {
    /// Parses clap's help text.
    pub fn parse(text: &str) -> Help {
        let mut help = Help::default();
        let mut section = "";
        for line in text.lines() {
            if !line.starts_with(' ') && line.ends_with(':') {
                section = line;
                continue;
            }
            let spec = line.trim_start();
            let indent = line.len() - spec.len();
            if section == "Commands:" && indent == 2 {
                if let Some(name) = spec.split([' ', ',']).next() {
                    help.subcommands.insert(name.to_owned());
                }
            } else if section == "Arguments:" && indent == 2 {
                help.positionals = true;
            } else if spec.starts_with('-') && indent <= 8 {
                // `-o, --output <FORMAT>`: every name of the flag takes the value the last shows.
                let mut names = Vec::new();
                let mut value = false;
                for flag in spec.split(", ") {
                    let name: String = flag
                        .chars()
                        .take_while(|c| !matches!(c, ' ' | '=' | '['))
                        .collect();
                    let rest = &flag[name.len()..];
                    if name.starts_with('-') && name.len() > 1 {
                        names.push(name);
                    }
                    if !rest.is_empty() {
                        value = rest.trim_start_matches([' ', '=', '[']).starts_with('<');
                        break;
                    }
                }
                for name in names {
                    help.flags.insert(name, value);
                }
            }
        }
        help
    }
}

/// Runs `tool [subcommands...] --help`, once for each level.
#[derive(Default)]
pub struct Helps {
    cache: BTreeMap<Vec<String>, Help>,
}

impl Helps {
    fn level(&mut self, tool: &str, path: &[String]) -> &Help {
        let key: Vec<String> = std::iter::once(tool.to_owned())
            .chain(path.iter().cloned())
            .collect();
        self.cache.entry(key).or_insert_with(|| {
            let out = testkit::process::stdout_of(
                Command::new(testkit::workspace::bin(tool))
                    .args(path)
                    .arg("--help"),
            );
            Help::parse(&out)
        })
    }

    /// What is wrong with `tool args...`, named by flag or subcommand, as `--help` lists them.
    pub fn check(&mut self, tool: &str, args: &[String]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut path: Vec<String> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let shown = if path.is_empty() {
                tool.to_owned()
            } else {
                format!("{tool} {}", path.join(" "))
            };
            let help = self.level(tool, &path);
            if arg == "--" {
                break;
            }
            let flag = if arg.starts_with("--") {
                Some(arg.split('=').next().unwrap_or(arg).to_owned())
            } else if arg.starts_with('-') && arg.len() > 1 {
                Some(arg[..2].to_owned())
            } else {
                None
            };
            match flag {
                Some(flag) => match help.flags.get(&flag) {
                    None => problems.push(format!(
                        "`{shown}` has no flag {flag} (see `{shown} --help`)"
                    )),
                    Some(true) if !arg.contains('=') && arg.len() == flag.len() => i += 1,
                    Some(_) => {}
                },
                None if !help.subcommands.is_empty() => {
                    if help.subcommands.contains(arg) {
                        path.push(arg.clone());
                    } else {
                        let known: Vec<_> = help.subcommands.iter().map(String::as_str).collect();
                        problems.push(format!(
                            "`{shown}` has no subcommand {arg} (it has {})",
                            known.join(", ")
                        ));
                        break;
                    }
                }
                None if !help.positionals => {
                    problems.push(format!(
                        "`{shown}` takes no argument {arg} (see `{shown} --help`)"
                    ));
                }
                None => {}
            }
            i += 1;
        }
        problems
    }
}

#[test]
fn clap_help_gives_flags_with_their_values_subcommands_and_arguments() {
    let help = Help::parse(
        "About\n\nUsage: t [OPTIONS] <COMMAND>\n\nCommands:\n  apply  Ensure\n  help   Print\n\n\
         Arguments:\n  [FILE]  A file\n\nOptions:\n      --config <FILE>\n          The config\n\
         \x20 -o, --output <FORMAT>  Output\n      --names  Print the names (`--x <y>`)\n\
         \x20     --set=<K=V>  A pair\n  -h, --help  Print help\n",
    );
    let flags: Vec<_> = help.flags.iter().map(|(f, v)| format!("{f}:{v}")).collect();
    assert_eq!(
        flags,
        [
            "--config:true",
            "--help:false",
            "--names:false",
            "--output:true",
            "--set:true",
            "-h:false",
            "-o:true"
        ]
    );
    assert_eq!(
        help.subcommands,
        ["apply", "help"].map(str::to_owned).into()
    );
    assert!(help.positionals);
}
