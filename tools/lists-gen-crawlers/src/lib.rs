//! `lists-gen-crawlers`: a verified-crawler list, from the address ranges the crawler's operator
//! publishes, with the User-Agent tokens its requests carry.
//!
//! ```sh
//! lists-gen-crawlers --list-name googlebot --token Googlebot \
//!   https://developers.google.com/static/crawling/ipranges/common-crawlers.json
//! lists-gen-crawlers --list-name google-fetchers --token FeedFetcher-Google -o text \
//!   user-triggered-fetchers.json user-triggered-fetchers-google.json
//! ```
//!
//! The input is the operators' one format (Google's googlebot.json / common-crawlers.json,
//! special-crawlers.json, user-triggered-fetchers*.json; Bing's bingbot.json; OpenAI's
//! gptbot.json, searchbot.json, chatgpt-user.json), plain or gzip, from files, URLs or stdin:
//!
//! ```json
//! {"creationTime": "2025-09-11T14:46:44.000000",
//!  "prefixes": [{"ipv4Prefix": "66.249.64.0/27"}, {"ipv6Prefix": "2001:4860:4801:10::/64"}]}
//! ```
//!
//! `creationTime` (a string, logged) and `prefixes` (a non-empty array) are required; each entry
//! holds exactly one of `ipv4Prefix` and `ipv6Prefix`, a prefix of that family. Other keys are
//! ignored, so that a key an operator adds (Google's other range files carry `syncToken`,
//! `service`, `scope`) does not stop the list. Anything else refuses the source, naming it and
//! the field (`prefixes[3].ipv4Prefix`): these files are small and exact, so one prefix that does
//! not parse is a file that is wrong, not a row to skip (`--max-bad-rows` does not apply). A
//! prefix with host bits set is cleared (`66.249.64.1/27` is `66.249.64.0/27`), as lists-gen-asn
//! does, with a warning.
//!
//! The sources' prefixes are merged into the minimal aggregated set (sorted, canonical, never
//! overlapping; the same addresses), checked as every generator checks its list (empty,
//! `--previous` and `--max-shrink-percent`), and written as a `PolicyList` record carrying the
//! `--token`s, or with `-o text` one CIDR per line (the prefixes only).

use std::io::{Read, Write};

use clap::Parser;
use ipnet::{Ipv4Net, Ipv6Net};
use lists_core::args::{Common, CommonArgs};
use lists_core::cidr::Ranges;
use lists_core::list::{self, ListMeta};
use lists_core::records::{ListGenerator, token_problem};
use lists_core::source::{self, SourceName};
use pop_common::tool::Env;
use serde_json::Value;

pub use lists_core::ListError;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "lists-gen-crawlers",
    version,
    about = "A verified crawler's published address ranges and User-Agent tokens"
)]
pub struct Cli {
    /// A User-Agent token of the crawler (`Googlebot`); repeat for each, at least one.
    #[arg(long = "token", value_name = "TOKEN")]
    pub tokens: Vec<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// In the order given, never empty, each by the filter's token rule.
    pub tokens: Vec<String>,
    pub common: Common,
}

/// Checks the arguments and builds the configuration.
pub fn resolve(cli: Cli, _env: &Env) -> Result<Config, ListError> {
    if cli.tokens.is_empty() {
        return Err(ListError::Usage(
            "no User-Agent token given: use --token TOKEN (repeatable), e.g. --token Googlebot"
                .into(),
        ));
    }
    if let Some(problem) = token_problem(&cli.tokens) {
        return Err(ListError::Usage(match problem.index {
            Some(_) => format!("--token {}", problem.message),
            None => format!("--token: {}", problem.message),
        }));
    }
    Ok(Config {
        tokens: cli.tokens,
        common: lists_core::args::resolve(&cli.common, "crawlers")?,
    })
}

/// Reads every source, merges and aggregates their prefixes, checks, and writes the list.
pub fn run(config: &Config, mut stdin: impl Read, output: impl Write) -> Result<(), ListError> {
    let mut ranges = Ranges::new();
    let mut shown = Vec::new();
    for src in &config.common.sources {
        let file = read_source(src, &mut stdin)?;
        pop_common::info!(
            "source {}: created {}, {} IPv4 and {} IPv6 prefixes",
            src.shown,
            file.creation_time.escape_debug(),
            file.ipv4.len(),
            file.ipv6.len()
        );
        if let Some((count, first)) = &file.host_bits {
            pop_common::warn!(
                "source {}: {count} prefix(es) with host bits set, cleared (first: {first})",
                src.shown
            );
        }
        file.ipv4.into_iter().for_each(|n| ranges.add_net_v4(n));
        file.ipv6.into_iter().for_each(|n| ranges.add_net_v6(n));
        shown.push(src.shown.clone());
    }
    let (ipv4, ipv6) = ranges.collapse();
    let result = list::checked(
        &config.common,
        ListMeta {
            tokens: config.tokens.clone(),
            ..ListMeta::new(&config.common, ListGenerator::Crawlers, shown)
        },
        ipv4,
        ipv6,
    )?;
    pop_common::info!(
        "list {}: {} IPv4 and {} IPv6 prefixes once aggregated, tokens {}",
        result.name,
        result.counts.ipv4,
        result.counts.ipv6,
        result.tokens.join(", ")
    );
    list::write(&result, config.common.output, output)
}

/// A published range file is small (Google's largest is 63 KB): far more is not one, and is not
/// held in memory.
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The format, in words, for the errors.
const SHAPE: &str =
    r#"{"creationTime": "...", "prefixes": [{"ipv4Prefix": "..."} | {"ipv6Prefix": "..."}]}"#;

fn read_source(src: &SourceName, stdin: &mut dyn Read) -> Result<RangeFile, ListError> {
    let reader = source::open(src, stdin)?;
    let mut bytes = Vec::new();
    reader
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| src.read_error(e))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(src.format_error(format!(
            "is over {} MiB: not a published IP range file",
            MAX_BYTES >> 20
        )));
    }
    parse(&bytes).map_err(|refusal| match refusal {
        Refusal::Format(message) => src.format_error(message),
        Refusal::Truncated(detail) => ListError::Truncated {
            name: src.shown.clone(),
            detail,
        },
    })
}

/// What one source gave.
#[derive(Debug, Default, PartialEq, Eq)]
struct RangeFile {
    creation_time: String,
    ipv4: Vec<Ipv4Net>,
    ipv6: Vec<Ipv6Net>,
    /// How many prefixes had host bits set (cleared), and the first of them as written.
    host_bits: Option<(usize, String)>,
}

/// Why a source is refused: its data is not the format, or it stops before its end.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    Format(String),
    Truncated(String),
}

/// Reads one range file; every refusal names the field (`prefixes[3].ipv4Prefix`).
fn parse(bytes: &[u8]) -> Result<RangeFile, Refusal> {
    let format = |message: String| Refusal::Format(message);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(format("is empty".into()));
    }
    let document: Value = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_eof() {
            Refusal::Truncated(e.to_string())
        } else {
            format(format!("not a published IP range file ({SHAPE}): {e}"))
        }
    })?;
    let Value::Object(document) = document else {
        return Err(format(format!(
            "not a published IP range file ({SHAPE}): the document is {}, not an object",
            kind(&document)
        )));
    };
    let field = |name: &str| {
        document.get(name).ok_or_else(|| {
            format(format!(
                "`{name}` is missing: not a published IP range file ({SHAPE})"
            ))
        })
    };
    let creation_time = match field("creationTime")? {
        Value::String(at) => at.clone(),
        other => {
            return Err(format(format!(
                "`creationTime` is {}, not a string",
                kind(other)
            )));
        }
    };
    let Value::Array(prefixes) = field("prefixes")? else {
        return Err(format(format!(
            "`prefixes` is {}, not an array",
            kind(field("prefixes")?)
        )));
    };
    if prefixes.is_empty() {
        return Err(format("holds no prefix: `prefixes` is empty".into()));
    }
    let mut file = RangeFile {
        creation_time,
        ..RangeFile::default()
    };
    for (i, entry) in prefixes.iter().enumerate() {
        add_entry(&mut file, &format!("prefixes[{i}]"), entry)?;
    }
    Ok(file)
}

/// One entry of `prefixes` (named `at` in the errors): its prefix, host bits cleared.
fn add_entry(file: &mut RangeFile, at: &str, entry: &Value) -> Result<(), Refusal> {
    let format = |message: String| Refusal::Format(message);
    let Value::Object(entry) = entry else {
        return Err(format(format!("{at} is {}, not an object", kind(entry))));
    };
    let (key, text) = match (entry.get("ipv4Prefix"), entry.get("ipv6Prefix")) {
        (Some(v4), None) => ("ipv4Prefix", v4),
        (None, Some(v6)) => ("ipv6Prefix", v6),
        (Some(_), Some(_)) => {
            return Err(format(format!(
                "{at} has both `ipv4Prefix` and `ipv6Prefix`: one prefix per entry"
            )));
        }
        (None, None) => {
            return Err(format(format!(
                "{at} has neither `ipv4Prefix` nor `ipv6Prefix`"
            )));
        }
    };
    let Value::String(text) = text else {
        return Err(format(format!(
            "{at}.{key} is {}, not a string",
            kind(text)
        )));
    };
    let refused = |family: &str| {
        format(format!(
            "{at}.{key}: `{}` is not an {family} prefix (address/length)",
            text.chars().take(80).collect::<String>().escape_debug()
        ))
    };
    let mut note_host_bits = |cleared: bool| {
        if cleared {
            let (count, _) = file.host_bits.get_or_insert_with(|| (0, text.clone()));
            *count += 1;
        }
    };
    if key == "ipv4Prefix" {
        let net: Ipv4Net = text.parse().map_err(|_| refused("IPv4"))?;
        note_host_bits(net.trunc() != net);
        file.ipv4.push(net.trunc());
    } else {
        let net: Ipv6Net = text.parse().map_err(|_| refused("IPv6"))?;
        note_host_bits(net.trunc() != net);
        file.ipv6.push(net.trunc());
    }
    Ok(())
}

/// What a JSON value is, for an error.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("lists-gen-crawlers").chain(args.iter().copied()))
            .unwrap()
    }

    fn resolve_cli(args: &[&str]) -> Result<Config, ListError> {
        resolve(cli(args), &Env::default())
    }

    #[test]
    fn tokens_are_kept_in_order_and_the_list_is_named_crawlers_by_default() {
        let config = resolve_cli(&[
            "--token",
            "AdsBot-Google",
            "--token=Mediapartners-Google",
            "/x.json",
        ])
        .unwrap();
        assert_eq!(config.tokens, ["AdsBot-Google", "Mediapartners-Google"]);
        assert_eq!(config.common.list_name, "crawlers");
        assert_eq!(config.common.sources[0].location, "/x.json");
        let named = resolve_cli(&["--token=Googlebot", "--list-name=googlebot", "-"]).unwrap();
        assert_eq!(named.common.list_name, "googlebot");
    }

    #[test]
    fn no_token_or_one_the_filter_would_refuse_is_a_usage_error() {
        let message = |args: &[&str]| resolve_cli(args).unwrap_err().to_string();
        assert!(message(&["/x.json"]).starts_with("no User-Agent token given"));
        assert!(
            message(&["--token", "Google bot"])
                .starts_with("--token `Google bot`: a User-Agent token is 1 to 64 bytes")
        );
        assert!(message(&["--token", "a;b"]).starts_with("--token `a;b`:"));
        assert!(message(&["--token", ""]).starts_with("--token ``:"));
        assert_eq!(
            message(&["--token=GPTBot", "--token=GPTBot"]),
            "--token `GPTBot` appears twice"
        );
        let many: Vec<String> = (0..17).map(|i| format!("--token=Bot{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(message(&many), "--token: 17 tokens, at most 16");
        // The common flags are checked as the other generators check them.
        assert!(message(&["--token=x", "--list-name=Google"]).starts_with("--list-name"));
        assert!(resolve_cli(&["--token=x", "-", "-"]).is_err());
    }

    fn parsed(json: &str) -> RangeFile {
        parse(json.as_bytes()).unwrap()
    }

    fn refused(json: &str) -> String {
        match parse(json.as_bytes()).unwrap_err() {
            Refusal::Format(message) => message,
            Refusal::Truncated(detail) => panic!("truncated: {detail}"),
        }
    }

    #[test]
    fn both_families_are_read_and_other_keys_are_ignored() {
        let file = parsed(
            r#"{"creationTime": "2025-09-11T14:46:44.000000", "syncToken": "1",
                "prefixes": [{"ipv6Prefix": "2001:4860:4801:10::/64"},
                             {"ipv4Prefix": "66.249.64.0/27", "service": "x"}]}"#,
        );
        assert_eq!(file.creation_time, "2025-09-11T14:46:44.000000");
        assert_eq!(file.ipv4, ["66.249.64.0/27".parse::<Ipv4Net>().unwrap()]);
        assert_eq!(
            file.ipv6,
            ["2001:4860:4801:10::/64".parse::<Ipv6Net>().unwrap()]
        );
        assert_eq!(file.host_bits, None);
    }

    #[test]
    fn host_bits_are_cleared_and_counted() {
        let file = parsed(
            r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "66.249.64.1/27"},
                {"ipv6Prefix": "2001:db8::1/64"}, {"ipv4Prefix": "66.249.65.0/27"}]}"#,
        );
        assert_eq!(
            file.ipv4,
            ["66.249.64.0/27", "66.249.65.0/27"].map(|n| n.parse::<Ipv4Net>().unwrap())
        );
        assert_eq!(file.ipv6, ["2001:db8::/64".parse::<Ipv6Net>().unwrap()]);
        assert_eq!(file.host_bits, Some((2, "66.249.64.1/27".to_string())));
    }

    #[test]
    fn each_departure_from_the_format_names_its_field() {
        let cases = [
            ("", "is empty"),
            ("  \n", "is empty"),
            (
                "<!DOCTYPE html><html>",
                "not a published IP range file ({\"creationTime\"",
            ),
            ("[1, 2]", "the document is an array, not an object"),
            (r#"{"prefixes": []}"#, "`creationTime` is missing"),
            (
                r#"{"creationTime": 5, "prefixes": []}"#,
                "`creationTime` is a number, not a string",
            ),
            (r#"{"creationTime": "t"}"#, "`prefixes` is missing"),
            (
                r#"{"creationTime": "t", "prefixes": {"ipv4Prefix": "1.2.3.0/24"}}"#,
                "`prefixes` is an object, not an array",
            ),
            (
                r#"{"creationTime": "t", "prefixes": []}"#,
                "holds no prefix: `prefixes` is empty",
            ),
            (
                r#"{"creationTime": "t", "prefixes": ["1.2.3.0/24"]}"#,
                "prefixes[0] is a string, not an object",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "1.2.3.0/24"}, {}]}"#,
                "prefixes[1] has neither `ipv4Prefix` nor `ipv6Prefix`",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "1.2.3.0/24", "ipv6Prefix": "::/0"}]}"#,
                "prefixes[0] has both",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": 16909056}]}"#,
                "prefixes[0].ipv4Prefix is a number, not a string",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "1.2.3.0/24"}, {"ipv4Prefix": "66.249.64.0/33"}]}"#,
                "prefixes[1].ipv4Prefix: `66.249.64.0/33` is not an IPv4 prefix",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "2001:db8::/32"}]}"#,
                "prefixes[0].ipv4Prefix: `2001:db8::/32` is not an IPv4 prefix",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv6Prefix": "66.249.64.0/27"}]}"#,
                "prefixes[0].ipv6Prefix: `66.249.64.0/27` is not an IPv6 prefix",
            ),
            (
                r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "66.249.64.1"}]}"#,
                "prefixes[0].ipv4Prefix: `66.249.64.1` is not an IPv4 prefix (address/length)",
            ),
        ];
        for (json, expected) in cases {
            let message = refused(json);
            assert!(message.contains(expected), "{json}: {message}");
        }
    }

    #[test]
    fn a_document_cut_short_is_truncated_not_a_format_error() {
        let cut = r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "1.2.3.0/24"}"#;
        assert!(matches!(parse(cut.as_bytes()), Err(Refusal::Truncated(_))));
    }
}
