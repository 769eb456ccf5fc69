//! The arguments every generator shares, and their resolution into a [`Common`] config.

use std::path::PathBuf;
use std::time::Duration;

use crate::records::{
    DEFAULT_MAX_SHRINK_PERCENT, DEFAULT_TIMEOUT_SECONDS, LIST_NAME_RULE, valid_list_name,
};

use crate::error::ListError;
use crate::list::OutputFormat;
use crate::source::SourceName;

/// Flags common to `lists-gen-asn`, `lists-gen-tor` and `lists-gen-crawlers`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Sources: files, http(s) URLs, or `-` for stdin; plain or gzip. The list is their union.
    #[arg(value_name = "SOURCE", default_value = "-")]
    pub sources: Vec<String>,
    /// Output: the typed PolicyList record, or one CIDR per line.
    #[arg(short = 'o', long = "output", value_enum, default_value = "json")]
    pub output: OutputFormat,
    /// The list's name, recorded in the output (ConfigMap key `<name>.txt`).
    #[arg(long)]
    pub list_name: Option<String>,
    /// The previous list (PolicyList JSON or one CIDR per line), for the shrink check.
    #[arg(long, value_name = "FILE")]
    pub previous: Option<PathBuf>,
    /// Refuse a list that lost more than this percentage of the previous one.
    #[arg(long, default_value_t = DEFAULT_MAX_SHRINK_PERCENT, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub max_shrink_percent: u8,
    /// Publish even a list that shrank beyond the threshold.
    #[arg(long)]
    pub force: bool,
    /// Seconds allowed to download one source, body included.
    #[arg(long, value_name = "SECONDS", default_value_t = u64::from(DEFAULT_TIMEOUT_SECONDS))]
    pub timeout: u64,
    /// Rows that fail to parse before a source is refused (each is reported with its line).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_bad_rows: u64,
}

/// The resolved common settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Common {
    pub sources: Vec<SourceName>,
    pub output: OutputFormat,
    pub list_name: String,
    pub previous: Option<PathBuf>,
    pub max_shrink_percent: u8,
    pub force: bool,
    pub max_bad_rows: u64,
}

/// Checks and resolves the common flags; `default_name` names the list when no `--list-name`.
pub fn resolve(args: &CommonArgs, default_name: &str) -> Result<Common, ListError> {
    if args.timeout == 0 {
        return Err(ListError::Usage(
            "--timeout must be at least 1 second".into(),
        ));
    }
    let list_name = args
        .list_name
        .clone()
        .unwrap_or_else(|| default_name.to_string());
    if !valid_list_name(&list_name) {
        return Err(ListError::Usage(format!(
            "--list-name `{list_name}`: {LIST_NAME_RULE}"
        )));
    }
    if args.sources.iter().filter(|s| *s == "-").count() > 1 {
        return Err(ListError::Usage("stdin (`-`) can be read only once".into()));
    }
    let timeout = Duration::from_secs(args.timeout);
    Ok(Common {
        sources: args
            .sources
            .iter()
            .map(|s| SourceName::new(s, timeout))
            .collect(),
        output: args.output,
        list_name,
        previous: args.previous.clone(),
        max_shrink_percent: args.max_shrink_percent,
        force: args.force,
        max_bad_rows: args.max_bad_rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn parse(args: &[&str]) -> Result<Common, ListError> {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        resolve(&cli.common, "tor")
    }

    #[test]
    fn defaults_read_stdin_as_json_with_the_default_name() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.sources.len(), 1);
        assert_eq!(c.sources[0].location, "-");
        assert_eq!(c.sources[0].timeout, Duration::from_secs(120));
        assert_eq!(
            (c.list_name.as_str(), c.output),
            ("tor", OutputFormat::Json)
        );
        assert_eq!(
            (c.max_shrink_percent, c.force, c.max_bad_rows),
            (50, false, 10)
        );
    }

    #[test]
    fn bad_names_twice_stdin_and_zero_timeout_are_usage_errors() {
        assert!(parse(&["--list-name", "Tor"]).is_err());
        assert!(parse(&["-", "-"]).is_err());
        assert!(parse(&["--timeout", "0"]).is_err());
        let c = parse(&[
            "-o",
            "text",
            "--list-name",
            "exits",
            "/a",
            "https://b/c?k=1",
        ])
        .unwrap();
        assert_eq!(c.output, OutputFormat::Text);
        assert_eq!(c.sources[1].shown, "https://b/c?***");
    }
}
