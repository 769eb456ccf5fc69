//! What a document shows: its fenced code blocks of shell commands, its relative links, and the
//! anchors its headings make.

use std::collections::BTreeSet;

/// The info strings of a fenced block whose lines are shell commands: `sh`, `bash`, `shell`,
/// `console` (where only the lines after a `$ ` prompt are commands) and a block with none.
/// `text` blocks are pictures and listings, `yaml` and `json` are files: not commands.
const SHELL_LANGUAGES: [&str; 5] = ["", "sh", "bash", "shell", "console"];

/// One command line of a fenced block: its 1-based line in the document (the first line of a
/// command continued with `\`), and the text, continuations joined.
#[derive(Debug, PartialEq)]
pub struct CommandLine {
    pub line: usize,
    pub text: String,
}

/// The command lines of every shell block of `doc`. A fence may be indented (a block inside a
/// list item); it closes on a fence of the same character at least as long.
pub fn shell_commands(doc: &str) -> Vec<CommandLine> {
    let mut commands = Vec::new();
    let mut open: Option<(String, bool)> = None; // the closing fence, and whether it is shell
    let mut console = false;
    let mut pending: Option<CommandLine> = None;
    for (index, raw) in doc.lines().enumerate() {
        let line = raw.trim_start();
        if let Some((fence, _)) = &open {
            if line.starts_with(fence.as_str()) && line.trim_end().trim_matches('`').is_empty() {
                open = None;
                commands.extend(pending.take());
                continue;
            }
        } else if let Some(fence) = fence_of(line) {
            let language = line[fence.len()..].trim().to_ascii_lowercase();
            let language = language.split([' ', ',', '{']).next().unwrap_or("");
            console = language == "console";
            open = Some((fence, SHELL_LANGUAGES.contains(&language)));
            continue;
        }
        let Some((_, true)) = &open else { continue };
        let text = if let Some(previous) = pending.as_mut() {
            previous.text.push(' ');
            previous.text.push_str(line);
            None
        } else if console {
            line.strip_prefix("$ ").map(str::to_owned)
        } else {
            Some(line.to_owned())
        };
        if let Some(text) = text {
            pending = Some(CommandLine {
                line: index + 1,
                text,
            });
        }
        // A line ending in a backslash goes on with the next one.
        let continued = pending.as_ref().is_some_and(|p| p.text.ends_with('\\'));
        if continued {
            if let Some(p) = pending.as_mut() {
                p.text.pop();
            }
        } else {
            commands.extend(pending.take());
        }
    }
    commands.retain(|c| !c.text.trim().is_empty());
    commands
}

/// The fence a line opens (three or more backticks or tildes), if it opens one.
fn fence_of(line: &str) -> Option<String> {
    let first = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let fence: String = line.chars().take_while(|c| *c == first).collect();
    (fence.len() >= 3).then_some(fence)
}

/// A link of a document: its line and its target as written.
#[derive(Debug, PartialEq)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

/// The relative links of `doc`, outside code blocks and inline code spans: `[text](target)` and
/// reference definitions `[name]: target`. Links with a scheme (`https:`, `mailto:`) are not
/// ours to check.
pub fn relative_links(doc: &str) -> Vec<Link> {
    let mut links = Vec::new();
    let mut fence: Option<String> = None;
    for (index, raw) in doc.lines().enumerate() {
        let line = raw.trim_start();
        if let Some(open) = &fence {
            if line.starts_with(open.as_str())
                && line.trim_end().trim_matches(['`', '~']).is_empty()
            {
                fence = None;
            }
            continue;
        }
        if let Some(open) = fence_of(line) {
            fence = Some(open);
            continue;
        }
        let prose = without_code_spans(raw);
        let mut targets = inline_link_targets(&prose);
        if let Some(rest) = prose.trim_start().strip_prefix('[')
            && let Some((_, target)) = rest.split_once("]:")
            && let Some(target) = target.split_whitespace().next()
        {
            targets.push(target.to_owned());
        }
        for target in targets {
            let target = target.trim_start_matches('<').trim_end_matches('>');
            let has_scheme = target
                .split_once(':')
                .is_some_and(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()));
            if !target.is_empty() && !has_scheme {
                links.push(Link {
                    line: index + 1,
                    target: target.to_owned(),
                });
            }
        }
    }
    links
}

/// `line` with every inline code span blanked: a link written in backticks is an example.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else {
            out.push(if in_code { ' ' } else { c });
        }
    }
    out
}

/// The targets of the `[text](target "title")` links of one line.
fn inline_link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        if let Some(target) = after[..end].split_whitespace().next() {
            targets.push(target.to_owned());
        }
        rest = &after[end..];
    }
    targets
}

/// The anchors the headings of `doc` make, as GitHub makes them: lowercased, every character
/// but letters, digits, spaces, `-` and `_` dropped, spaces made `-`; a repeated heading gets
/// `-1`, `-2`, ...
pub fn anchors(doc: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut fence: Option<String> = None;
    for raw in doc.lines() {
        let line = raw.trim_start();
        if let Some(open) = &fence {
            if line.starts_with(open.as_str()) {
                fence = None;
            }
            continue;
        }
        if let Some(open) = fence_of(line) {
            fence = Some(open);
            continue;
        }
        let Some(title) = raw.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while found.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        found.insert(unique);
    }
    found
}

#[test]
fn shell_blocks_give_their_commands_with_their_lines() {
    let doc = "intro\n```sh\nmake a   # why\ncargo build \\\n  --release\n```\n\
               ```text\nmake not-a-command\n```\n```console\n$ make b\noutput\n```\n\
               - item\n\n  ```\n  make c\n  ```\n";
    let lines: Vec<_> = shell_commands(doc)
        .into_iter()
        .map(|c| (c.line, c.text))
        .collect();
    assert_eq!(
        lines,
        [
            (3, "make a   # why".to_owned()),
            (4, "cargo build  --release".to_owned()),
            (11, "make b".to_owned()),
            (17, "make c".to_owned()),
        ]
    );
}

#[test]
fn links_outside_code_and_anchors_as_github_makes_them() {
    let doc = "# Title\nSee [a](docs/a.md#x-y), [web](https://e.invalid), `[no](nope.md)`.\n\
               ```\n[no](in-code.md)\n```\n[ref]: ../b.md\n## Layer 1: `make apply-infra`\n## Title\n";
    let links: Vec<_> = relative_links(doc)
        .into_iter()
        .map(|l| (l.line, l.target))
        .collect();
    assert_eq!(
        links,
        [(2, "docs/a.md#x-y".to_owned()), (6, "../b.md".to_owned())]
    );
    let anchors = anchors(doc);
    assert!(
        anchors.contains("title") && anchors.contains("title-1"),
        "{anchors:?}"
    );
    assert!(anchors.contains("layer-1-make-apply-infra"), "{anchors:?}");
}
