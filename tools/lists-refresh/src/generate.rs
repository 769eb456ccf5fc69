//! Each list's generator, run in its own process: what it fetches and parses is its own
//! (lists-gen-asn, lists-gen-tor, lists-gen-crawlers); what comes back is a `PolicyList`
//! record, checked before it is used.

use std::path::Path;
use std::process::{Command, Stdio};

use lists_core::records::{ListSource, ListSources, PolicyList};

use crate::Config;
use crate::error::GenerateError;

/// Runs one generator in its own process, with `previous` (a file) as the baseline of its shrink
/// check; its stderr goes to ours (the job's log). Returns the list as text, or why it failed.
pub(crate) fn generate(
    config: &Config,
    sources: &ListSources,
    list: &ListSource,
    previous: Option<&Path>,
) -> Result<String, GenerateError> {
    let generator = list.generator.command();
    let program = config.generators_dir.join(generator);
    let mut command = Command::new(&program);
    command
        .arg(format!("--list-name={}", list.name))
        .arg(format!(
            "--max-shrink-percent={}",
            sources.max_shrink_percent
        ))
        .arg(format!("--timeout={}", sources.timeout_seconds))
        .args(list.asns.iter().map(|a| format!("--asn={a}")))
        .args(list.tokens.iter().map(|t| format!("--token={t}")));
    if let Some(format) = &list.format {
        command.arg(format!("--format={format}"));
    }
    if let Some(previous) = previous {
        command.arg(format!("--previous={}", previous.display()));
    }
    if config.force {
        command.arg("--force");
    }
    command.arg("--").args(&list.sources);
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| GenerateError::Spawn {
            program: program.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(match output.status.code() {
            Some(code) => GenerateError::Exited { generator, code },
            None => GenerateError::Killed { generator },
        });
    }
    let record: PolicyList =
        serde_json::from_slice(&output.stdout).map_err(|e| GenerateError::NoRecord {
            generator,
            detail: e.to_string(),
        })?;
    let problems = record.problems();
    if !problems.is_empty() || record.name != list.name || record.tokens != list.tokens {
        return Err(GenerateError::Unsound {
            generator,
            name: record.name,
            problems,
        });
    }
    Ok(record.to_text())
}
