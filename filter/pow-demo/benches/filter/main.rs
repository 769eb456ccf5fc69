//! `make bench`: what the filter costs per request in this host, against a floor measured in the
//! same run, and how fast the challenge page solves in headless Chromium, against native SHA-256
//! and a re-implementation of Anubis's solver algorithm, also in the same run.
//!
//! Per-request cost: the median over rounds of the mean time of a batch of requests. Every round
//! measures every scenario one after the other, so a busy machine slows them all alike. The
//! floor is a proxy-wasm module on the same SDK that reads the cookie and computes one
//! HMAC-SHA256 over it (`filter/bench-floor`). Lists hold 1k, 100k and 1M synthetic prefixes
//! (IPv4 and IPv6 mixed, deterministic). The header-size rows put 58 KiB in each header the
//! filter reads (with two keys configured, the worst case for forged cookies): what the filter
//! does with them is the time above the same 58 KiB in a header it ignores (which the host
//! copies into the VM all the same), and must stay within two challenges. Each ratio is
//! printed with its goal and whether this run met it.
//!
//! The Web Bot Auth row is one verification in the module (a signed request above the same
//! request unsigned) against the same crate's verification natively, a batch of which runs in
//! every round beside the module's scenarios; its ratio is the median of the rounds' ratios.
//!
//! The table goes to stdout and to `<target dir>/bench/filter.txt`. Arguments after `--` name
//! the groups to run (`lists`, `header-sizes`, `policy`, `web-bot-auth`, `refresh`,
//! `hash-rate`), the floor always: `cargo bench -p pow-demo --bench filter -- policy`. None:
//! every group, as `make bench` runs it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use proxy_wasm_host::{Host, HostConfig, Outcome, Request};

mod hashrate;
mod lists;
mod report;
mod requests;
mod scenarios;
mod wba;

use lists::{listed_config, prefixes};
use requests::{clearance_cookie, forged, request};

const ROUNDS: usize = 15;
const BATCH: usize = 200;
const LISTED: &str = "198.51.100.7:40000";
const UNLISTED: &str = "203.0.113.7:40000";
const UA: &str = "Mozilla/5.0 (X11; Linux x86_64) edgepop-bench";
const SECRET: &str = "bench-secret-bench-secret-bench-secret-0123";
const PREVIOUS_SECRET: &str = "bench-previous-secret-bench-previous-0123";
/// Bytes put in one header by the header-size rows (Envoy's default limit is 60 KiB in all).
const BIG: usize = 58 * 1024;
const HASHRATE_SECONDS: u32 = 5;
/// The groups of rows one can run alone.
const GROUPS: [&str; 6] = [
    "lists",
    "header-sizes",
    "policy",
    "web-bot-auth",
    "refresh",
    "hash-rate",
];

/// The groups asked for: all when none is named.
struct Groups(Vec<String>);

impl Groups {
    fn runs(&self, group: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|g| g == group)
    }

    /// Whether some groups are left out (then ratios without their rows are skipped).
    fn partial(&self) -> bool {
        !self.0.is_empty()
    }
}

fn main() -> ExitCode {
    // `cargo test --all-targets` runs benches once as tests, without `--bench`: nothing to
    // measure then (the tests cover the behaviour); `cargo bench` passes `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("bench: not measuring outside `cargo bench` (make bench)");
        return ExitCode::SUCCESS;
    }
    let groups: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if let Some(unknown) = groups.iter().find(|g| !GROUPS.contains(&g.as_str())) {
        eprintln!(
            "bench: error: no group {unknown} (groups: {})",
            GROUPS.join(", ")
        );
        return ExitCode::FAILURE;
    }
    match run(&Groups(groups)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn target_dir() -> PathBuf {
    match std::env::var("CARGO_TARGET_DIR") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}

pub fn module(name: &str) -> Result<PathBuf, String> {
    let path = target_dir().join("wasm32-wasip1/wasm-release").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: run `make bench` (it builds the filter and the floor)",
            path.display()
        ))
    }
}

#[derive(Debug)]
pub struct Scenario {
    pub label: String,
    pub host_index: usize,
    /// Sent in turn, one a request.
    pub requests: Vec<Request>,
    pub expect_local: bool,
    pub samples: Vec<f64>,
}

/// The VMs and the rows measured on them, as each group adds its own (a row names its VM by
/// index), with what every group's VMs load: the filter module and its environment.
#[derive(Debug)]
pub struct Rows<'a> {
    pub filter: &'a Path,
    pub env: &'a [(String, Vec<u8>)],
    pub hosts: Vec<Host>,
    pub scenarios: Vec<Scenario>,
}

impl Rows<'_> {
    /// Adds a VM; its index, for its rows.
    pub fn add_host(&mut self, host: Host) -> usize {
        self.hosts.push(host);
        self.hosts.len() - 1
    }

    /// Adds a row: `requests` sent in turn to the VM at `host_index`, each answered by the
    /// module itself (`expect_local`: a challenge or a refusal) or let through.
    pub fn add(
        &mut self,
        label: impl Into<String>,
        host_index: usize,
        requests: Vec<Request>,
        expect_local: bool,
    ) {
        self.scenarios.push(Scenario {
            label: label.into(),
            host_index,
            requests,
            expect_local,
            samples: Vec::new(),
        });
    }
}

/// The settings of every filter VM the bench loads: this pluginConfig and environment, and the
/// module logging warnings and up only, so that no debug line is measured with the requests.
pub fn vm_config(plugin_config: Vec<u8>, env: Vec<(String, Vec<u8>)>) -> HostConfig {
    HostConfig {
        plugin_config,
        env,
        log_level: 3,
        ..HostConfig::default()
    }
}

/// A Markdown table under its heading: the heading, a blank line, the column names and their
/// alignment row.
pub fn table(heading: &str, columns: &str, alignment: &str) -> String {
    format!("{heading}\n\n{columns}\n{alignment}\n")
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn run(groups: &Groups) -> Result<(), String> {
    let filter = module("pow_filter.wasm")?;
    let floor = module("bench_floor.wasm")?;
    let env = vec![("POW_HMAC_SECRET".to_owned(), SECRET.as_bytes().to_vec())];
    let started = Instant::now();

    let mut rows = Rows {
        filter: &filter,
        env: &env,
        hosts: Vec::new(),
        scenarios: Vec::new(),
    };
    let floor =
        rows.add_host(Host::load(&floor, HostConfig::default()).map_err(|e| e.to_string())?);
    rows.add(
        "floor: no-op module + 1 HMAC-SHA256 over the cookie",
        floor,
        vec![request(
            LISTED,
            Some(
                "pow_clearance=1790000000.0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ),
        )],
        false,
    );
    let mut loads = Vec::new();
    if groups.runs("lists") {
        loads = list_scenarios(&mut rows)?;
    }
    if groups.runs("header-sizes") {
        scenarios::header_size_scenarios(&mut rows)?;
    }
    if groups.runs("policy") {
        scenarios::policy_scenarios(&mut rows)?;
    }
    let native = if groups.runs("web-bot-auth") {
        wba::scenarios(&mut rows)?;
        Some(wba::NativeVerify::new()?)
    } else {
        None
    };
    let Rows {
        mut hosts,
        mut scenarios,
        ..
    } = rows;
    let native_verify = measure(&mut hosts, &mut scenarios, native.as_ref())?;

    let mut out = cost_table(&mut scenarios, native_verify.as_deref(), groups.partial())?;
    if native_verify.is_some() {
        let _ = writeln!(out, "{}\n", wba::backends());
    }
    if !loads.is_empty() {
        out.push_str(&load_table(&loads));
    }
    drop(hosts);
    if groups.runs("refresh") {
        out.push_str(&lists::packed_configures(&filter, &env)?);
    }
    if groups.runs("hash-rate") {
        out.push('\n');
        out.push_str(&hashrate::hash_rates()?);
    }
    let _ = writeln!(
        out,
        "\n(bench ran in {:.0} s)",
        started.elapsed().as_secs_f64()
    );

    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(|e| e.to_string())?;
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("filter.txt"), &out).map_err(|e| e.to_string())?;
    eprintln!("bench: saved {}", dir.join("filter.txt").display());
    Ok(())
}

/// Each list's pluginConfig size and load time.
fn load_table(loads: &[(&str, usize, Duration)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| prefixes | pluginConfig | load: on_configure (1k: also compiling the module) |"
    );
    let _ = writeln!(out, "| ---: | ---: | ---: |");
    for (name, bytes, took) in loads {
        let _ = writeln!(
            out,
            "| {name} | {:.1} MB | {:.2} s |",
            *bytes as f64 / 1e6,
            took.as_secs_f64()
        );
    }
    out
}

/// Every round measures every scenario once, one after the other, so a busy machine slows them
/// all alike; each outcome is checked. With `native`, each round also measures one batch of
/// native verifications, whose samples are returned (round by round, as the scenarios' are).
fn measure(
    hosts: &mut [Host],
    scenarios: &mut [Scenario],
    native: Option<&wba::NativeVerify>,
) -> Result<Option<Vec<f64>>, String> {
    let mut native_samples = native.map(|_| Vec::new());
    for round in 0..=ROUNDS {
        for s in scenarios.iter_mut() {
            let host = &mut hosts[s.host_index];
            let t = Instant::now();
            for i in 0..BATCH {
                let outcome = host
                    .request_ref(&s.requests[i % s.requests.len()])
                    .map_err(|e| format!("{}: {e}", s.label))?;
                if matches!(outcome, Outcome::Local { .. }) != s.expect_local {
                    return Err(format!("{}: unexpected outcome {outcome:?}", s.label));
                }
            }
            // Round 0 warms up (JIT caches, allocator), and is not counted.
            if round > 0 {
                s.samples.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
            }
        }
        if let (Some(native), Some(samples)) = (native, native_samples.as_mut()) {
            let ns = native.batch()?;
            if round > 0 {
                samples.push(ns);
            }
        }
    }
    Ok(native_samples)
}

/// The cost of every scenario against the floor, then the ratios with goals (`partial`: only
/// those whose rows ran).
fn cost_table(
    scenarios: &mut [Scenario],
    native_verify: Option<&[f64]>,
    partial: bool,
) -> Result<String, String> {
    let floor_ns = median(&mut scenarios[0].samples.clone());
    let mut out = table(
        &format!(
            "## Filter cost per request in the proxy-wasm host (median of {ROUNDS} rounds x {BATCH} requests)"
        ),
        "| scenario | us/request | x floor |",
        "| --- | ---: | ---: |",
    );
    for s in scenarios.iter_mut() {
        // On a copy: the ratios pair some scenarios' samples round by round.
        let m = median(&mut s.samples.clone());
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.2} |",
            s.label,
            m / 1000.0,
            m / floor_ns
        );
    }
    out.push_str(&report::ratios(
        scenarios,
        floor_ns,
        native_verify,
        partial,
    )?);
    Ok(out)
}

/// The lists' rows: a cookie pass, a challenge and a pass under 1k, 100k and 1M prefixes, and
/// forged cookies under 1k. Returns each list's size and load time.
fn list_scenarios(rows: &mut Rows) -> Result<Vec<(&'static str, usize, Duration)>, String> {
    let mut loads = Vec::new();
    for (count, name) in [(1_000, "1k"), (100_000, "100k"), (1_000_000, "1M")] {
        let set = prefixes(count);
        let t = Instant::now();
        let mut host = Host::load(
            rows.filter,
            vm_config(listed_config(&set), rows.env.to_vec()),
        )
        .map_err(|e| format!("{name} prefixes: {e}"))?;
        loads.push((name, set.len(), t.elapsed()));
        let cookie = clearance_cookie(&mut host)?;
        let index = rows.add_host(host);
        let mut cases = vec![
            (
                "cookie pass (listed address, valid cookie)",
                request(LISTED, Some(&cookie)),
                false,
            ),
            (
                "listed address: challenge page",
                request(LISTED, None),
                true,
            ),
            ("unlisted address: pass", request(UNLISTED, None), false),
        ];
        if count == 1_000 {
            cases.extend(forged_cookie_cases(&cookie));
        }
        for (label, req, expect_local) in cases {
            rows.add(
                format!("{label}, {name} prefixes"),
                index,
                vec![req],
                expect_local,
            );
        }
    }
    Ok(loads)
}

/// 675 well-formed, fresh, forged clearance cookies in one 60 KiB header (each would cost a
/// MAC if the filter checked them all), alone and after the valid `cookie`; and the same
/// header size with no forged clearance cookie in it: what carrying 60 KiB of cookies costs
/// whatever they are (the host copies the header map into the VM).
fn forged_cookie_cases(cookie: &str) -> Vec<(&'static str, Request, bool)> {
    let fake = forged(cookie);
    let fakes = vec![fake.as_str(); 675].join("; ");
    let other = format!(
        "other_cookie={}",
        "x".repeat(fake.len() - "other_cookie=".len())
    );
    let others = vec![other.as_str(); 675].join("; ");
    vec![
        (
            "fake cookies: 675 forged in 60 KiB, listed address (challenge page)",
            request(LISTED, Some(&fakes)),
            true,
        ),
        (
            "fake cookies: valid cookie then 675 forged in 60 KiB (pass)",
            request(LISTED, Some(&format!("{cookie}; {fakes}"))),
            false,
        ),
        (
            "60 KiB of other cookies: valid cookie then 675 others (pass)",
            request(LISTED, Some(&format!("{cookie}; {others}"))),
            false,
        ),
    ]
}
