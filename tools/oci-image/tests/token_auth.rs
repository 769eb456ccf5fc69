//! `oci-image publish` against a registry that wants a bearer token, as Scaleway's and most
//! hosted registries do (distribution docs/spec/auth/token.md): every /v2/ request without the
//! token gets `401` with `WWW-Authenticate: Bearer realm=...,service=...,scope=...`; the client
//! asks the realm for a token with `scope=repository:<name>:pull,push` and `service`, sending
//! its credentials as HTTP Basic; the token service answers `{"token": ...}`; the client
//! repeats the request with `Authorization: Bearer <token>`. The stand-in on loopback enforces
//! that contract and the push contract (distribution-spec: blob upload POST then PUT with
//! `?digest=`, the digest checked against the bytes; manifest PUT answered with its digest), and
//! records every request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use testkit::http::{Request, read_request};

const TOKEN: &str = "stand-in-token-7f3a";
const USER: &str = "nologin";
const PASSWORD: &str = "scw-secret-key-for-the-test";

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    authorization: Option<String>,
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The registry's side of one exchange: status, extra header lines, body.
struct Answer {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

impl Answer {
    fn new(status: u16, body: &[u8]) -> Answer {
        Answer {
            status,
            headers: String::new(),
            body: body.to_vec(),
        }
    }

    fn with_header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push_str(&format!("{name}: {value}\r\n"));
        self
    }
}

/// The registry and its token service: the blobs it holds and where it sends for a token.
struct Registry {
    realm: String,
    blobs: BTreeMap<String, Vec<u8>>,
}

impl Registry {
    /// `served` numbers the upload locations it hands out.
    fn answer(&mut self, request: &Request, served: usize) -> Answer {
        let (path, query) = request
            .target
            .split_once('?')
            .unwrap_or((&request.target, ""));
        let query = query
            .replace("%3A", ":")
            .replace("%2F", "/")
            .replace("%2C", ",");
        let authorization = request.header("authorization");
        let method = request.method.as_str();
        if path == "/token" {
            token(authorization, &query)
        } else if authorization != Some(format!("Bearer {TOKEN}").as_str()) {
            let challenge = format!(
                "Bearer realm=\"{}\",service=\"stand-in\",scope=\"repository:x:pull\"",
                self.realm
            );
            Answer::new(401, br#"{"errors":[{"code":"UNAUTHORIZED"}]}"#)
                .with_header("WWW-Authenticate", &challenge)
        } else if method == "HEAD" && path.contains("/blobs/sha256:") {
            let digest = path.rsplit('/').next().unwrap();
            Answer::new(
                if self.blobs.contains_key(digest) {
                    200
                } else {
                    404
                },
                b"",
            )
        } else if method == "POST" && path.ends_with("/blobs/uploads/") {
            Answer::new(202, b"")
                .with_header("Location", &format!("{path}upload-{served}?_state=opaque"))
        } else if method == "PUT" && path.contains("/blobs/uploads/upload-") {
            self.put_blob(&query, &request.body)
        } else if method == "PUT" && path.contains("/manifests/") {
            self.put_manifest(request)
        } else {
            Answer::new(404, b"")
        }
    }

    /// The upload's last step: kept only when `?digest=` is the digest of the bytes.
    fn put_blob(&mut self, query: &str, body: &[u8]) -> Answer {
        let digest = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("digest="))
            .unwrap_or_default()
            .replace("%3A", ":");
        if query.contains("_state=opaque") && digest == format!("sha256:{}", hex(body)) {
            self.blobs.insert(digest, body.to_vec());
            Answer::new(201, b"")
        } else {
            Answer::new(400, br#"{"errors":[{"code":"DIGEST_INVALID"}]}"#)
        }
    }

    /// A manifest is taken once every blob it names is held, with the OCI media type.
    fn put_manifest(&self, request: &Request) -> Answer {
        let manifest: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let complete = manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(std::iter::once(&manifest["config"]))
            .all(|d| self.blobs.contains_key(d["digest"].as_str().unwrap()));
        if complete
            && request.header("content-type") == Some("application/vnd.oci.image.manifest.v1+json")
        {
            Answer::new(201, b"").with_header(
                "Docker-Content-Digest",
                &format!("sha256:{}", hex(&request.body)),
            )
        } else {
            Answer::new(400, br#"{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN"}]}"#)
        }
    }
}

/// The token service: a token for the right Basic credentials asking push and pull on one of
/// our repositories, for this service.
fn token(authorization: Option<&str>, query: &str) -> Answer {
    let expected = format!("Basic {}", base64_basic(USER, PASSWORD));
    if authorization == Some(expected.as_str())
        && query.contains("scope=repository:edgepop/")
        && query.contains(":pull,push")
        && query.contains("service=stand-in")
    {
        Answer::new(
            200,
            format!(r#"{{"token": "{TOKEN}", "expires_in": 300}}"#).as_bytes(),
        )
    } else {
        Answer::new(401, b"{}")
    }
}

/// The registry and its token service on one loopback port; serves until `answers` answers
/// have been given (bounded), then stops by itself.
fn start(answers: usize) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let mut registry = Registry {
        realm: format!("http://{base}/token"),
        blobs: BTreeMap::new(),
    };
    std::thread::spawn(move || {
        let mut served = 0;
        while served < answers {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut out = stream;
            // A kept-alive connection carries request after request.
            while let Ok(Some(request)) = read_request(&mut reader) {
                served += 1;
                log.lock().unwrap().push(Seen {
                    method: request.method.clone(),
                    target: request.target.clone(),
                    authorization: request.header("authorization").map(str::to_owned),
                });
                let answer = registry.answer(&request, served);
                let head = format!(
                    "HTTP/1.1 {} X\r\nContent-Length: {}\r\n{}\r\n",
                    answer.status,
                    answer.body.len(),
                    answer.headers
                );
                if out.write_all(head.as_bytes()).is_err() {
                    break;
                }
                if request.method != "HEAD" && out.write_all(&answer.body).is_err() {
                    break;
                }
                if served >= answers {
                    break;
                }
            }
        }
    });
    (base, seen)
}

fn base64_basic(user: &str, password: &str) -> String {
    // The test's own encoder, independent of the tool's base64 crate.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `oci-image publish` of two tiny layouts to the stand-in at `host`, with `env`.
fn publish(host: &str, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let oci_image = || Command::new(env!("CARGO_BIN_EXE_oci-image"));
    testkit::oci_image::tiny_layouts(oci_image, dir.path(), &format!("{host}/edgepop"));
    testkit::oci_image::publish(oci_image(), dir.path(), env)
}

/// The registry credentials as the environment gives them: our user, with `password`.
fn credentials(password: &str) -> [(&str, &str); 2] {
    [
        ("EDGEPOP_REGISTRY_USERNAME", USER),
        ("EDGEPOP_REGISTRY_PASSWORD", password),
    ]
}

#[test]
fn the_bearer_token_flow_is_followed_and_the_password_never_printed() {
    let (host, seen) = start(64);
    let out = publish(&host, &credentials(PASSWORD));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(PASSWORD) && !String::from_utf8_lossy(&out.stdout).contains(PASSWORD));
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        record["filter"]["repository"],
        format!("{host}/edgepop/pow-filter")
    );
    let seen = seen.lock().unwrap().clone();
    let tokens: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.target.starts_with("/token"))
        .collect();
    // One token per repository, then every registry request carries it.
    assert_eq!(tokens.len(), 2, "{seen:#?}");
    assert!(
        tokens[0]
            .target
            .contains("scope=repository%3Aedgepop%2Fpow-filter%3Apull%2Cpush")
    );
    assert!(
        tokens[1]
            .target
            .contains("scope=repository%3Aedgepop%2Flists-refresh%3Apull%2Cpush")
    );
    let manifests: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.method == "PUT" && s.target.contains("/manifests/"))
        .collect();
    assert_eq!(manifests.len(), 2);
    for m in manifests {
        assert_eq!(
            m.authorization.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(
            m.target
                .ends_with(&format!("/manifests/{}", env!("CARGO_PKG_VERSION"))),
            "{}",
            m.target
        );
    }
}

#[test]
fn without_credentials_the_failure_says_which_variables_to_set() {
    let (host, _) = start(8);
    let out = publish(&host, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("EDGEPOP_REGISTRY_USERNAME"), "{stderr}");
}

#[test]
fn refused_credentials_fail_without_showing_them() {
    let (host, _) = start(8);
    let out = publish(&host, &credentials("wrong-password"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    assert!(!stderr.contains("wrong-password"), "{stderr}");
}
