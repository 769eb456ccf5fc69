//! Every command the documents show is one that exists: the fenced shell blocks (`sh`, `bash`,
//! `shell`, `console` after its `$ ` prompts, and blocks with no language) of README.md,
//! docs/*.md and filter/README.md are read as the shell reads them, and
//!
//! - each `make TARGET` is a target of the Makefile, each `VAR=value` given to make (on its
//!   command line or before it) a variable the Makefile reads;
//! - each workspace tool (the binaries of tools/* and pow-demo, run bare, from `target/*/`, or by
//!   `cargo run --bin ... --`) is given only flags and subcommands its built `--help` lists;
//! - cargo's `-p`, `--bin`, `--test` and `--bench` name packages and targets of the workspace;
//! - each repository script run (`pipelines/upstream.sh paths`) exists, is executable, and
//!   handles its first word; each file `cp` copies from exists;
//!
//! and every relative link of those documents (outside code) points at a file that exists, and
//! at a heading of it when it names one. Inline code spans are out of scope: they name a flag or a
//! target in a sentence (`--dry-run`, `make down`) rather than show a command to copy, and read
//! alone they are too often fragments to check as commands. Other programs (kubectl, talosctl,
//! curl) are not ours to check.

mod makefile;
mod markdown;
mod shell;
mod tools;

use std::path::{Path, PathBuf};

use makefile::{Makefile, is_variable_name};
use tools::{Helps, Workspace};

/// Problems known and owned elsewhere, each the document and the words of its message: reported
/// on every run as an expected gap, not failed; a gap that no longer occurs fails, so the list
/// cannot outlive it.
const EXPECTED_GAPS: &[(&str, &str)] = &[];

/// The documents a reader is sent to, relative to the workspace root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| path.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    docs.push(PathBuf::from("filter/README.md"));
    docs
}

struct Checker {
    root: PathBuf,
    makefile: Makefile,
    workspace: Workspace,
    helps: Helps,
    /// How many commands and links were checked: a reader that found none checked nothing.
    commands: usize,
    links: usize,
}

impl Checker {
    fn new() -> Checker {
        let root = testkit::workspace::root().canonicalize().unwrap();
        Checker {
            makefile: Makefile::read(&root),
            workspace: Workspace::read(&root),
            helps: Helps::default(),
            root,
            commands: 0,
            links: 0,
        }
    }

    /// Every problem of the document `name` (relative to the root) whose text is `text`, as
    /// `name:line: what is wrong`.
    fn check_document(&mut self, name: &Path, text: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for command in markdown::shell_commands(text) {
            for words in shell::commands(&command.text) {
                self.commands += 1;
                for problem in self.check_command(&words) {
                    problems.push(format!("{}:{}: {problem}", name.display(), command.line));
                }
            }
        }
        for link in markdown::relative_links(text) {
            self.links += 1;
            if let Some(problem) = self.check_link(name, text, &link.target) {
                problems.push(format!("{}:{}: {problem}", name.display(), link.line));
            }
        }
        problems
    }

    fn check_command(&mut self, words: &[String]) -> Vec<String> {
        let mut at = 0;
        let mut env = Vec::new();
        while let Some((name, _)) = words.get(at).and_then(|w| w.split_once('=')) {
            if !is_variable_name(name) {
                break;
            }
            env.push(name.to_owned());
            at += 1;
        }
        // Programs that run the next word as the command.
        while words
            .get(at)
            .is_some_and(|w| ["env", "sudo", "time", "nohup"].contains(&w.as_str()))
        {
            at += 1;
        }
        let Some(program) = words.get(at) else {
            return Vec::new();
        };
        let args = &words[at + 1..];
        if program == "make" {
            return self.check_make(&env, args);
        }
        if program == "cargo" {
            let (mut problems, run) = self.workspace.check_cargo(args);
            if let Some((tool, args)) = run {
                problems.extend(self.helps.check(&tool, args));
            }
            return problems;
        }
        if let Some(tool) = self.tool_of(program) {
            return self.helps.check(&tool, args);
        }
        if program == "cp" {
            let files: Vec<_> = args.iter().filter(|a| !a.starts_with('-')).collect();
            let sources = &files[..files.len().saturating_sub(1)];
            return sources
                .iter()
                .filter(|f| is_literal(f) && !self.root.join(f).exists())
                .map(|f| format!("cp {f}: there is no file {f}"))
                .collect();
        }
        if program.contains('/') && is_literal(program) && !program.starts_with(['/', '~']) {
            return self.check_script(program, args).into_iter().collect();
        }
        Vec::new()
    }

    fn check_make(&self, env: &[String], args: &[String]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut variables: Vec<&str> = env.iter().map(String::as_str).collect();
        let mut skip_value = false;
        for arg in args {
            if std::mem::take(&mut skip_value) {
                continue;
            }
            if arg.starts_with('-') {
                skip_value = ["-C", "-f", "-I", "-o", "-W", "-j"].contains(&arg.as_str());
            } else if let Some((name, _)) = arg.split_once('=').filter(|(n, _)| is_variable_name(n))
            {
                variables.push(name);
            } else if is_literal(arg) && !self.makefile.targets.contains(arg.as_str()) {
                problems.push(format!("make {arg}: the Makefile has no target {arg}"));
            }
        }
        for name in variables {
            if !self.makefile.variables.contains(name) {
                problems.push(format!(
                    "make {name}=...: the Makefile reads no variable {name}"
                ));
            }
        }
        problems
    }

    /// The workspace tool a command word runs: its name alone, or a path under `target/`.
    fn tool_of(&self, program: &str) -> Option<String> {
        let name = program.rsplit('/').next()?;
        let as_tool =
            program == name || program.starts_with("target/") || program.starts_with("$(BIN)/");
        (as_tool && self.workspace.tools.contains(name)).then(|| name.to_owned())
    }

    fn check_script(&self, script: &str, args: &[String]) -> Option<String> {
        let path = self.root.join(script.trim_start_matches("./"));
        let Ok(metadata) = std::fs::metadata(&path) else {
            return Some(format!("{script}: there is no such file"));
        };
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o111 == 0 {
            return Some(format!("{script}: the file is not executable"));
        }
        let word = args
            .first()
            .filter(|w| is_literal(w) && !w.starts_with('-'))?;
        let text = std::fs::read_to_string(&path).ok()?;
        let handled = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .any(|w| w == word);
        (!handled).then(|| format!("{script} {word}: the script never mentions {word}"))
    }

    /// A link of the document `doc` (whose text is `text`, for its own anchors).
    fn check_link(&self, doc: &Path, text: &str, target: &str) -> Option<String> {
        let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
        let (file, text) = if path.is_empty() {
            (doc.to_path_buf(), text.to_owned())
        } else {
            let file = doc.parent()?.join(path);
            let full = self.root.join(&file);
            if !full.exists() {
                return Some(format!("link {target}: there is no {}", file.display()));
            }
            if anchor.is_empty() || full.extension().is_none_or(|e| e != "md") {
                return None;
            }
            (file, std::fs::read_to_string(&full).ok()?)
        };
        (!markdown::anchors(&text).contains(anchor))
            .then(|| format!("link {target}: {} has no heading #{anchor}", file.display()))
    }
}

/// A word as the reader copies it: no placeholder to fill in, no expansion.
fn is_literal(word: &str) -> bool {
    !word.contains(['<', '>', '$', '*', '{'])
}

#[test]
fn every_command_and_link_of_the_docs_exists() {
    let mut checker = Checker::new();
    let mut problems = Vec::new();
    for doc in documents(&checker.root) {
        let text = std::fs::read_to_string(checker.root.join(&doc)).unwrap();
        problems.extend(checker.check_document(&doc, &text));
    }
    assert!(
        checker.commands > 40 && checker.links > 20,
        "only {} commands and {} links found in the docs: the reader is broken",
        checker.commands,
        checker.links
    );
    let mut unmet: Vec<_> = EXPECTED_GAPS.to_vec();
    problems.retain(|problem| {
        let gap = EXPECTED_GAPS
            .iter()
            .find(|(doc, words)| problem.starts_with(doc) && problem.contains(words));
        if let Some(gap) = gap {
            // Straight to stderr, as testkit's SKIPPED lines: libtest captures eprintln! of a
            // passing test, and a known gap must be seen on every run.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "EXPECTED GAP (owned elsewhere, listed in EXPECTED_GAPS): {problem}"
            );
            unmet.retain(|g| g != gap);
        }
        gap.is_none()
    });
    assert!(
        problems.is_empty(),
        "the docs show what does not exist:\n  {}",
        problems.join("\n  ")
    );
    assert!(
        unmet.is_empty(),
        "EXPECTED_GAPS lists what no longer happens, remove it: {unmet:?}"
    );
}

#[test]
fn what_does_not_exist_is_named_with_its_line() {
    let mut checker = Checker::new();
    let doc = "# Top\n```sh\nmake no-such-target demo NO_SUCH_VAR=1 DEMO_PORT=9\n\
               target/release/scw-infra state --no-such-flag --config x.json\n\
               scw-infra no-such-command\nrender-edge --inputs a --config b --names -o json\n\
               pipelines/no-such.sh\npipelines/upstream.sh no-such-mode\n\
               cp config/no-such.example.json config/x.json\ncp config/infra.example.json x\n\
               cargo test -p no-such-crate\ncargo bench -p pow-demo --bench filter\n\
               cargo run -p pow-demo --bin pow-demo -- --no-such-demo-flag\n```\n\
               [gone](no-such.md), [ok](operations.md#before-the-first-apply), [x](#nope), [y](#top)\n";
    let problems = checker.check_document(Path::new("docs/synthetic.md"), doc);
    let expected = [
        "docs/synthetic.md:3: make no-such-target: the Makefile has no target no-such-target",
        "docs/synthetic.md:3: make NO_SUCH_VAR=...: the Makefile reads no variable NO_SUCH_VAR",
        "docs/synthetic.md:4: `scw-infra state` has no flag --no-such-flag (see `scw-infra state --help`)",
        "docs/synthetic.md:5: `scw-infra` has no subcommand no-such-command",
        "docs/synthetic.md:7: pipelines/no-such.sh: there is no such file",
        "docs/synthetic.md:8: pipelines/upstream.sh no-such-mode: the script never mentions no-such-mode",
        "docs/synthetic.md:9: cp config/no-such.example.json: there is no file config/no-such.example.json",
        "docs/synthetic.md:11: cargo -p no-such-crate: no such package in the workspace",
        "docs/synthetic.md:13: `pow-demo` has no flag --no-such-demo-flag",
        "docs/synthetic.md:15: link no-such.md: there is no docs/no-such.md",
        "docs/synthetic.md:15: link #nope: docs/synthetic.md has no heading #nope",
    ];
    for want in expected {
        assert!(
            problems.iter().any(|p| p.starts_with(want)),
            "not reported: {want}\nreported:\n  {}",
            problems.join("\n  ")
        );
    }
    assert_eq!(
        problems.len(),
        expected.len(),
        "reported more than expected:\n  {}",
        problems.join("\n  ")
    );
}
