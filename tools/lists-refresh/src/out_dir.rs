//! `--out-dir` (what `make lists` runs): each list into `DIR/<name>.txt`, each trusted agent's
//! keys into `DIR/<name>.directory.json` (what `pow-demo explain` reads), no cluster. The
//! previous file of a list is its shrink check's baseline; a list or an agent that fails keeps
//! its file when it has one. Nothing is created, not even `DIR`, when nothing is written.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use lists_core::records::{KeyDirectory, ListSources};
use pop_common::exit::WritingOutput;

use crate::error::{Failure, RefreshError};
use crate::generate::generate;
use crate::plan::{agent_key_of, key_of};
use crate::{Config, directory};

/// Writes what it can, then fails naming what it could not.
pub(crate) fn write_dir(
    config: &Config,
    dir: &Path,
    sources: &ListSources,
    mut output: impl Write,
) -> Result<(), RefreshError> {
    let (mut written, mut kept, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for list in &sources.lists {
        let file = dir.join(key_of(&list.name));
        let previous = std::fs::metadata(&file)
            .is_ok_and(|m| m.len() > 0)
            .then_some(file.as_path());
        match generate(config, sources, list, previous) {
            Ok(text) => {
                write_file(dir, &file, text.as_bytes())?;
                pop_common::info!(
                    "list {}: {} ({} prefixes)",
                    list.name,
                    file.display(),
                    text.lines().count()
                );
                written.push(list.name.clone());
            }
            Err(why) => {
                let failure = Failure::list(&list.name, why, previous.is_some());
                failure.warn();
                if previous.is_some() {
                    kept.push(list.name.clone());
                }
                failures.push(failure);
            }
        }
    }
    let agents = directory::refresh(
        &sources.agents,
        &previous_agents(dir, sources),
        sources.timeout_seconds,
        pop_common::time::now_secs(),
    );
    for name in &agents.refreshed {
        let Some(keys) = agents.keys.get(name) else {
            continue;
        };
        let mut text = serde_json::to_string_pretty(keys).unwrap_or_default();
        text.push('\n');
        write_file(dir, &dir.join(agent_key_of(name)), text.as_bytes())?;
    }
    let failed: Vec<String> = failures
        .iter()
        .chain(&agents.failures)
        .filter(|f| !f.kept)
        .map(Failure::name)
        .collect();
    let mut summary = serde_json::json!({"out_dir": dir, "regenerated": written, "kept": kept,
                                         "failed": failed});
    if !sources.agents.is_empty() {
        summary["agents"] = serde_json::json!({"refreshed": agents.refreshed, "kept": agents.kept});
    }
    writeln!(output, "{summary}").output()?;
    let nothing_written = written.is_empty() && agents.refreshed.is_empty();
    failures.extend(agents.failures);
    match (nothing_written, failures.is_empty()) {
        (_, true) => Ok(()),
        (true, false) => Err(RefreshError::AllFailed(failures)),
        (false, false) => Err(RefreshError::SomeFailed(failures)),
    }
}

/// The agents' previous files: the baseline a failing directory keeps.
fn previous_agents(dir: &Path, sources: &ListSources) -> BTreeMap<String, KeyDirectory> {
    sources
        .agents
        .iter()
        .filter_map(|agent| {
            let text = std::fs::read(dir.join(agent_key_of(&agent.name))).ok()?;
            let keys = KeyDirectory::from_json(&text).ok()?;
            Some((agent.name.clone(), keys))
        })
        .collect()
}

/// Writes `file` whole or not at all (a temporary beside it, renamed), creating `dir` first.
fn write_file(dir: &Path, file: &Path, bytes: &[u8]) -> Result<(), RefreshError> {
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{}.tmp", name.unwrap_or_default()));
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|source| RefreshError::WriteFile {
            path: file.to_path_buf(),
            source,
        })
}
