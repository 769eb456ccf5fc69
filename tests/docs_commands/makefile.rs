//! What the Makefile offers: its targets and the variables it reads, from make's own database
//! (`make -pRrq`, which parses the Makefile and its includes and runs nothing) and the
//! Makefile's text.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

#[derive(Debug)]
pub struct Makefile {
    pub targets: BTreeSet<String>,
    pub variables: BTreeSet<String>,
}

impl Makefile {
    pub fn read(root: &Path) -> Makefile {
        let out = Command::new("make")
            .args(["-pRrq", "-f", "Makefile"])
            .current_dir(root)
            // A make or a shell above this test must not change what the Makefile parses.
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("MAKELEVEL")
            .env_remove("PROFILE")
            .output()
            .unwrap_or_else(|e| panic!("cannot run make -pRrq in {}: {e}", root.display()));
        let database = String::from_utf8_lossy(&out.stdout);
        let mut makefile = Makefile::from_database(&database);
        assert!(
            makefile.targets.contains("help"),
            "make -pRrq printed no target help: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for file in ["Makefile", "k8s/versions.env"] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            makefile.variables.extend(referenced_variables(&text));
        }
        makefile
    }

    /// The targets (not the files make only knows as prerequisites) and the variables defined
    /// by a makefile.
    pub fn from_database(database: &str) -> Makefile {
        let mut targets = BTreeSet::new();
        let mut variables = BTreeSet::new();
        let mut previous = "";
        for line in database.lines() {
            if previous.starts_with("# makefile") || previous.starts_with("# override") {
                let definition = line.strip_prefix("define ").unwrap_or(line);
                let definition = definition.strip_prefix("override ").unwrap_or(definition);
                if let Some(name) = definition.split([' ', '=']).next()
                    && is_variable_name(name)
                {
                    variables.insert(name.to_owned());
                }
            } else if previous != "# Not a target:"
                && !line.starts_with(['#', '\t', ' ', '.'])
                && let Some((name, rest)) = line.split_once(':')
                && !rest.starts_with('=')
                && !name.is_empty()
                && !name.contains(['%', ' ', '$'])
            {
                targets.insert(name.to_owned());
            }
            previous = line;
        }
        Makefile { targets, variables }
    }
}

/// The variables a makefile's text reads even when it never defines them: `$(NAME)`,
/// `${NAME}`, `$(origin NAME)`, `$(flavor NAME)`, `ifdef NAME`, `ifndef NAME`.
pub fn referenced_variables(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut add = |candidate: &str| {
        let name: String = candidate
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `$(NAME)`, `$(NAME:a=b)`: a function call (`$(filter a,b)`) goes on with a space.
        let after = &candidate[name.len()..];
        let closed = after.is_empty() || after.starts_with([')', '}', ':']);
        if closed && is_variable_name(&name) {
            names.insert(name);
        }
    };
    for opener in ["$(", "${", "$(origin ", "$(flavor "] {
        for (at, _) in text.match_indices(opener) {
            add(&text[at + opener.len()..]);
        }
    }
    for line in text.lines() {
        let line = line.trim_start();
        for keyword in ["ifdef ", "ifndef "] {
            if let Some(rest) = line.strip_prefix(keyword) {
                add(rest.trim());
            }
        }
    }
    names
}

/// A name a shell or make takes as a variable: letters, digits, `_`, not starting with a digit.
pub fn is_variable_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[test]
fn targets_and_variables_from_the_database_and_the_text() {
    let database = "# makefile (from 'Makefile', line 3)\nOUT ?= talos/_out\n\
                    # makefile (from 'Makefile', line 9)\ndefine RECIPE\n\
                    # Not a target:\nCargo.toml:\n\napply: talos/_out/x\n\
                    .PHONY: apply\nBIN := x\nhelp:\n";
    let makefile = Makefile::from_database(database);
    assert_eq!(
        makefile.targets,
        ["apply", "help"].map(str::to_owned).into()
    );
    assert_eq!(
        makefile.variables,
        ["OUT", "RECIPE"].map(str::to_owned).into()
    );
    let read = referenced_variables(
        "X := $(or $(if $(filter undefined,$(origin CARGO_TARGET_DIR)),,y))\nifdef V\n",
    );
    assert!(
        read.contains("CARGO_TARGET_DIR") && read.contains("V"),
        "{read:?}"
    );
    assert!(!read.contains("or") && !read.contains("filter"), "{read:?}");
}
