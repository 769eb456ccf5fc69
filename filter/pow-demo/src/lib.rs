//! `make demo`: the real filter module in this host, as a local HTTP edge in front of a small
//! demo origin, both on loopback.
//!
//! The edge runs every request through the module; only when the module lets it through
//! (Continue) is it forwarded to the origin, with the module's header changes, and the origin's
//! answer (after the module's response callbacks) goes back to the browser. The filter runs in
//! mode `all`; its HMAC secret is generated at start and reaches the VM through its environment
//! (`POW_HMAC_SECRET`), never through argv, stdout or the logs.
//!
//! With a certificate (`--tls-cert`, `--tls-key`), the edge terminates TLS as the gateway does:
//! the filter then sees `:scheme` https, sets its cookie `Secure` and `__Host-` prefixed, which
//! the browser proofs of cookie tossing need.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use http1::{HOP_BY_HOP, HttpRequest, text as text_response};

use pop_common::tool::Env;
use proxy_wasm_host::{Host, HostConfig, HostError, Request, Response, Served};

/// The VM environment variable the filter reads its secret from (its `secret_env` default).
pub const SECRET_ENV: &str = "POW_HMAC_SECRET";

/// `pow-demo`'s arguments.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "pow-demo",
    about = "The proof-of-work edge on loopback, in front of a demo origin"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Port of the edge on 127.0.0.1 (0: any free port)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Port on 127.0.0.1 of the metrics (`/stats/prometheus`, as the gateway's pod serves
    /// them) and of their live page (`/`); 0: any free port
    #[arg(long, default_value_t = pow_core::filter::metric::METRICS_PORT)]
    pub metrics_port: u16,
    /// The filter module [default: <target dir>/wasm32-wasip1/wasm-release/pow_filter.wasm,
    /// the target dir being $CARGO_TARGET_DIR or the workspace's target/]
    #[arg(long)]
    pub wasm: Option<PathBuf>,
    /// Leading zero bits asked of the browser (the filter's default when absent)
    #[arg(long)]
    pub difficulty: Option<u8>,
    /// Serve https with this certificate chain (PEM), as the gateway terminates TLS
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM)
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// What else `pow-demo` does than serve the demo.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Decide requests described as JSON lines on stdin with the real module and an edge
    /// config, one JSON line out per request (rule, action, difficulty, kind)
    Explain {
        /// The edge config whose pow.plugin_config and list sources are tried
        #[arg(long)]
        config: PathBuf,
        /// The folder of generated lists, `<name>.txt` (what `make lists` writes), where an
        /// agent's key directory is looked for too, as `<name>.directory.json`
        #[arg(long)]
        lists: PathBuf,
        /// A trusted agent's key directory file (the JSON its
        /// /.well-known/http-message-signatures-directory serves), for an agent of pow.agents;
        /// repeatable
        #[arg(long = "agent-directory", value_name = "NAME=FILE")]
        agent_directories: Vec<String>,
    },
}

/// What `pow-demo` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Job {
    Demo(DemoConfig),
    Explain(explain::ExplainConfig),
}

/// A certificate chain and its key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What the demo runs, resolved from the arguments and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoConfig {
    pub edge: SocketAddr,
    /// Where the metrics and their live page are served.
    pub metrics: SocketAddr,
    /// Envoy's `xff_num_trusted_hops` (Istio's `numTrustedProxies`): 0, the edge's topology;
    /// a test sets 1 to send visitors from addresses of its choosing.
    pub trusted_hops: u32,
    pub wasm: PathBuf,
    /// The pluginConfig JSON given to the filter.
    pub plugin_config: String,
    /// When set, the edge serves https.
    pub tls: Option<TlsFiles>,
}

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the filter module {0} does not exist: build it with `make filter`")]
    NoModule(PathBuf),
    #[error("cannot load the filter: {0}")]
    Host(#[from] HostError),
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: String, reason: String },
    #[error("cannot generate the demo secret: {0}")]
    Random(String),
    #[error(transparent)]
    Explain(#[from] explain::ExplainError),
    #[error("cannot use the TLS certificate or key {path}: {reason}")]
    Tls { path: PathBuf, reason: String },
}

impl pop_common::exit::Report for DemoError {
    fn exit(&self) -> pop_common::exit::Exit {
        match self {
            DemoError::NoModule(_) | DemoError::Explain(_) => pop_common::exit::Exit::Usage,
            _ => pop_common::exit::Exit::Failure,
        }
    }
}

/// The module's default place: `<target dir>/wasm32-wasip1/wasm-release/pow_filter.wasm`, the
/// target dir being `cargo_target_dir` when set (and not empty), else `<workspace>/target`.
pub fn default_wasm(cargo_target_dir: Option<&str>, workspace: &Path) -> PathBuf {
    let target = match cargo_target_dir {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace.join("target"),
    };
    target.join("wasm32-wasip1/wasm-release/pow_filter.wasm")
}

/// Resolves the arguments and the environment (`CARGO_TARGET_DIR`, where `make filter` put the
/// module) into what runs.
pub fn resolve(cli: Cli, env: &Env) -> Result<Job, DemoError> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let demo = resolve_in(&cli, env.non_empty("CARGO_TARGET_DIR"), &workspace);
    match cli.command {
        None => Ok(Job::Demo(demo)),
        Some(Command::Explain {
            config,
            lists,
            agent_directories,
        }) => Ok(Job::Explain(explain::resolve(
            &config,
            &lists,
            &agent_directories,
            demo.wasm,
        )?)),
    }
}

/// Runs the demo until Ctrl-C (the URL to open is said on stderr; nothing is read or written on
/// the standard streams), or explains the requests of `input` on `output`.
pub fn run(job: &Job, input: impl Read, output: impl Write) -> Result<(), DemoError> {
    let config = match job {
        Job::Demo(config) => config,
        Job::Explain(config) => {
            return explain::run(config, std::io::BufReader::new(input), output);
        }
    };
    let running = Demo::start(config)?;
    pop_common::info!(
        "open {} (the origin is behind it; Ctrl-C stops both)",
        running.url()
    );
    pop_common::info!(
        "metrics: {} (as the gateway's pod serves them); live page: {}",
        running.metrics_url(),
        running.live_url()
    );
    running.wait();
    Ok(())
}

/// [`resolve`] with the target directory and the workspace given: pure, so it is unit-tested.
pub fn resolve_in(cli: &Cli, cargo_target_dir: Option<&str>, workspace: &Path) -> DemoConfig {
    let mut config = serde_json::json!({ "mode": "all", "secret_env": SECRET_ENV });
    if let Some(bits) = cli.difficulty {
        config["difficulty"] = bits.into();
    }
    DemoConfig {
        edge: SocketAddr::from(([127, 0, 0, 1], cli.port)),
        metrics: SocketAddr::from(([127, 0, 0, 1], cli.metrics_port)),
        trusted_hops: 0,
        wasm: cli
            .wasm
            .clone()
            .unwrap_or_else(|| default_wasm(cargo_target_dir, workspace)),
        plugin_config: config.to_string(),
        tls: cli
            .tls_cert
            .clone()
            .zip(cli.tls_key.clone())
            .map(|(cert, key)| TlsFiles { cert, key }),
    }
}

/// The running demo: an edge and an origin, each on its own thread.
#[derive(Debug)]
pub struct Demo {
    edge: SocketAddr,
    metrics: SocketAddr,
    https: bool,
    origin: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Demo {
    /// Loads the filter, then starts the origin and the edge on loopback.
    pub fn start(config: &DemoConfig) -> Result<Demo, DemoError> {
        if !config.wasm.is_file() {
            return Err(DemoError::NoModule(config.wasm.clone()));
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| DemoError::Random(e.to_string()))?;
        let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let host = Host::load(
            &config.wasm,
            HostConfig {
                plugin_config: config.plugin_config.clone().into_bytes(),
                env: vec![(SECRET_ENV.to_owned(), secret.into_bytes())],
                log_level: proxy_wasm_host::abi::log_level::INFO,
                echo_logs: true,
                root_id: "pow-filter".to_owned(),
                xff_num_trusted_hops: config.trusted_hops,
                ..HostConfig::default()
            },
        )?;
        let tls = config.tls.as_ref().map(tls::server_config).transpose()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (origin_server, origin) = http1::Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        // With TLS, the HTTP edge listens on a loopback port of its own, behind the TLS front.
        let http_addr = if tls.is_some() {
            SocketAddr::from(([127, 0, 0, 1], 0))
        } else {
            config.edge
        };
        let (edge_server, http_edge) = http1::Server::bind(http_addr)?;
        // One filter VM, as one Envoy worker has: requests reach it one at a time.
        let edge = Arc::new(Mutex::new(Edge {
            host,
            origin,
            agent: origin_agent(),
            scheme: if tls.is_some() { "https" } else { "http" },
        }));
        let (metrics_server, metrics) = http1::Server::bind(config.metrics)?;
        let stats = observe::gateway_stats().ok_or_else(|| DemoError::Listen {
            addr: config.metrics.to_string(),
            reason: "the gateway's stats tags do not compile".to_owned(),
        })?;
        let observed = Arc::clone(&edge);
        let mut threads = vec![
            origin_server.spawn(stop.clone(), serve_origin),
            edge_server.spawn(stop.clone(), move |req| match edge.lock() {
                Ok(mut edge) => edge.serve(req),
                Err(_) => text_response(502, "the filter failed earlier\n"),
            }),
            metrics_server.spawn(stop.clone(), move |req| {
                observe::serve(&observed, &stats, &req)
            }),
        ];
        let edge = match tls {
            Some(tls) => {
                let (front, addr) = tls::Front::bind(config.edge, tls, http_edge)?;
                threads.push(front.spawn(stop.clone()));
                addr
            }
            None => http_edge,
        };
        Ok(Demo {
            edge,
            metrics,
            https: config.tls.is_some(),
            origin,
            stop,
            threads,
        })
    }

    /// The edge's URL, what a person opens.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}/", self.edge)
    }

    /// Where the metrics are served, as the gateway's pod serves them.
    pub fn metrics_url(&self) -> String {
        format!(
            "http://{}{}",
            self.metrics,
            pow_core::filter::metric::METRICS_PATH
        )
    }

    /// The live page of the same numbers.
    pub fn live_url(&self) -> String {
        format!("http://{}/", self.metrics)
    }

    /// The origin's address (on loopback; the edge is the way in).
    pub fn origin(&self) -> SocketAddr {
        self.origin
    }

    /// Runs until the process is stopped (Ctrl-C ends the process, threads included).
    pub fn wait(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }

    /// Stops both servers and waits for their threads.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wait();
    }
}

pub mod explain;
mod http1;
pub mod observe;
mod tls;

fn origin_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// The edge: the filter in front, the origin behind.
struct Edge {
    host: Host,
    origin: SocketAddr,
    agent: ureq::Agent,
    /// `https` behind the TLS front.
    scheme: &'static str,
}

impl Edge {
    fn serve(&mut self, req: HttpRequest) -> Response {
        let authority = req
            .headers
            .iter()
            .find(|(k, _)| k == "host")
            .map_or_else(|| "localhost".to_owned(), |(_, v)| v.clone());
        let request = Request {
            method: req.method,
            path: req.target,
            authority,
            scheme: self.scheme.to_owned(),
            headers: req
                .headers
                .into_iter()
                .filter(|(k, _)| k != "host")
                .collect(),
            source_address: req.peer.to_string(),
            body: (!req.body.is_empty()).then_some(req.body),
        };
        let (origin, agent) = (self.origin, self.agent.clone());
        match self.host.exchange(request, |headers, body| {
            forward(&agent, origin, headers, body)
        }) {
            Ok(Served::Local(response)) | Ok(Served::Upstream { response, .. }) => response,
            Err(e) => {
                // The WasmPlugin is fail-open: a broken filter lets traffic through. Here the
                // VM is gone, so say it plainly rather than pretend.
                pop_common::warn!("filter error: {e}");
                text_response(502, &format!("the filter failed: {e}\n"))
            }
        }
    }
}

/// Forwards the request the filter let through to the origin.
fn forward(
    agent: &ureq::Agent,
    origin: SocketAddr,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let method = get(":method").unwrap_or("GET");
    let uri = format!("http://{origin}{}", get(":path").unwrap_or("/"));
    let mut builder = ureq::http::Request::builder().method(method).uri(&uri);
    for (k, v) in headers {
        if !k.starts_with(':') && !HOP_BY_HOP.contains(&k.as_str()) {
            // As bytes: a value may hold obs-text (a cookie name behind U+2000), which Envoy
            // forwards as it came.
            match ureq::http::HeaderValue::from_bytes(v.as_bytes()) {
                Ok(value) => builder = builder.header(k.as_str(), value),
                Err(_) => pop_common::warn!("header {k} not forwarded: not a header value"),
            }
        }
    }
    if let Some(authority) = get(":authority") {
        builder = builder.header("host", authority);
    }
    let result = builder
        .body(body.to_vec())
        .map_err(|e| e.to_string())
        .and_then(|request| agent.run(request).map_err(|e| e.to_string()));
    match result {
        Ok(mut response) => {
            let status = u32::from(response.status().as_u16());
            let headers = response
                .headers()
                .iter()
                .filter(|(k, _)| !HOP_BY_HOP.contains(&k.as_str()))
                .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                .collect();
            let body = response.body_mut().read_to_vec().unwrap_or_default();
            Response {
                status,
                headers,
                body,
            }
        }
        Err(e) => {
            pop_common::warn!("origin unreachable: {e}");
            text_response(502, "the origin did not answer\n")
        }
    }
}

/// The page a visitor reaches once the filter lets them through.
pub const ORIGIN_PAGE: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>edgepop demo origin</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto; padding: 0 1rem; color: #1d2a33; }
  h1 { color: #1a7f37; }
  code { background: #eef2f5; padding: .1rem .3rem; border-radius: 3px; }
</style></head>
<body>
<h1 id="origin">You reached the origin</h1>
<p>The edge's proof-of-work filter checked your clearance cookie and let this request through
to the demo origin. Reload the page: the cookie keeps you through without a new challenge.</p>
<p>Path asked: <code id="path">{path}</code></p>
</body></html>
"#;

fn serve_origin(req: HttpRequest) -> Response {
    let path: String = req
        .target
        .chars()
        .map(|c| match c {
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '&' => "&amp;".to_owned(),
            '"' => "&quot;".to_owned(),
            c => c.to_string(),
        })
        .collect();
    let page = ORIGIN_PAGE.replace("{path}", &path);
    Response {
        status: 200,
        headers: vec![
            (
                "content-type".to_owned(),
                "text/html; charset=utf-8".to_owned(),
            ),
            ("cache-control".to_owned(), "no-store".to_owned()),
        ],
        body: page.into_bytes(),
    }
}

/// A client without a browser paying the proof of work: reads the challenge page's `pow-data`,
/// finds the nonce as the page's solver does (`SHA-256(challenge ‖ nonce as 8 bytes big-endian)`
/// with `d` leading zero bits) and returns the answer's path and query, what the page would
/// navigate to. `None` when the page carries no challenge or no nonce exists below `max_tries`.
pub fn answer_challenge(page: &str, max_tries: u64) -> Option<String> {
    use sha2::{Digest, Sha256};
    let start = page.find(r#"id="pow-data""#)?;
    let json_start = start + page[start..].find('>')? + 1;
    let json_end = json_start + page[json_start..].find("</script>")?;
    let data: serde_json::Value = serde_json::from_str(&page[json_start..json_end]).ok()?;
    let challenge_hex = data["c"].as_str()?;
    let bits = data["d"].as_u64()?;
    let challenge: Vec<u8> = (0..challenge_hex.len() / 2)
        .map(|i| u8::from_str_radix(challenge_hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let nonce = (0..max_tries).find(|n| {
        let digest = Sha256::new()
            .chain_update(&challenge)
            .chain_update(n.to_be_bytes())
            .finalize();
        leading_zero_bits(&digest) >= bits
    })?;
    let number = |v: &serde_json::Value| {
        v.as_u64()
            .map(|n| n.to_string())
            .or_else(|| v.as_str().map(str::to_owned))
    };
    Some(format!(
        "{}?c={challenge_hex}&i={}&e={}&d={bits}&s={}&n={nonce:016x}&r={}",
        data["v"].as_str()?,
        number(&data["i"])?,
        number(&data["e"])?,
        data["s"].as_str()?,
        percent_encode(data["r"].as_str()?),
    ))
}

fn leading_zero_bits(bytes: &[u8]) -> u64 {
    let mut bits = 0;
    for byte in bytes {
        bits += u64::from(byte.leading_zeros());
        if *byte != 0 {
            break;
        }
    }
    bits
}

/// `encodeURIComponent`: everything but `A-Z a-z 0-9 - _ . ! ~ * ' ( )` is percent-encoded.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'!'
            | b'~'
            | b'*'
            | b'\''
            | b'('
            | b')' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("pow-demo").chain(args.iter().copied()))
    }

    #[test]
    fn a_challenge_page_is_answered_as_the_page_would() {
        let page = r#"<p>x</p><script id="pow-data" type="application/json">{"c":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","s":"ab","i":1699999700,"e":1700000000,"d":8,"r":"/a b?x=1","v":"/.pow/verify","t":{}}</script>"#;
        let answer = answer_challenge(page, 1 << 20).unwrap();
        assert!(answer.starts_with("/.pow/verify?c=0011"), "{answer}");
        assert!(answer.ends_with("&r=%2Fa%20b%3Fx%3D1"), "{answer}");
        let nonce = answer
            .split("&n=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap();
        let nonce = u64::from_str_radix(nonce, 16).unwrap();
        use sha2::{Digest, Sha256};
        let challenge: Vec<u8> = (0..32)
            .map(|i| {
                u8::from_str_radix(
                    &"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
                        [2 * i..2 * i + 2],
                    16,
                )
                .unwrap()
            })
            .collect();
        let digest = Sha256::new()
            .chain_update(&challenge)
            .chain_update(nonce.to_be_bytes())
            .finalize();
        assert_eq!(digest[0], 0, "8 leading zero bits");
        assert_eq!(answer_challenge("<html>no challenge</html>", 10), None);
    }

    #[test]
    fn the_module_is_found_under_cargo_target_dir_else_the_workspace_target() {
        let ws = Path::new("/src/edgepop");
        assert_eq!(
            resolve_in(&cli(&[]), Some("/tmp/tgt"), ws).wasm,
            PathBuf::from("/tmp/tgt/wasm32-wasip1/wasm-release/pow_filter.wasm")
        );
        assert_eq!(
            resolve_in(&cli(&[]), None, ws).wasm,
            PathBuf::from("/src/edgepop/target/wasm32-wasip1/wasm-release/pow_filter.wasm")
        );
        assert_eq!(
            resolve_in(&cli(&[]), Some(""), ws).wasm,
            resolve_in(&cli(&[]), None, ws).wasm
        );
        assert_eq!(
            resolve_in(&cli(&["--wasm", "/x.wasm"]), Some("/t"), ws).wasm,
            PathBuf::from("/x.wasm")
        );
    }

    #[test]
    fn the_edge_listens_on_loopback_in_mode_all_with_no_secret_in_the_config() {
        let config = resolve_in(
            &cli(&["--port", "9090", "--difficulty", "12"]),
            None,
            Path::new("/w"),
        );
        assert_eq!(config.edge, SocketAddr::from(([127, 0, 0, 1], 9090)));
        assert_eq!(config.metrics, SocketAddr::from(([127, 0, 0, 1], 15020)));
        let json: serde_json::Value = serde_json::from_str(&config.plugin_config).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"mode": "all", "secret_env": "POW_HMAC_SECRET", "difficulty": 12})
        );
        let default = resolve_in(&cli(&[]), None, Path::new("/w"));
        assert_eq!(default.edge.port(), 8080);
        assert!(!default.plugin_config.contains("difficulty"));
    }
}
