//! The traffic Scaleway's own CLI and SDK recorded against the live API
//! (`../shared/scaleway-cassettes`, go-vcr v1 and v2), as the tests read it: method, path, status
//! and response body of every interaction. The client's tests decode these bodies; the Scaleway
//! stand-in's answers are compared with their shape.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Deserialize)]
struct Cassette {
    interactions: Vec<Interaction>,
}

#[derive(Deserialize)]
struct Interaction {
    request: Req,
    response: Resp,
}

#[derive(Deserialize)]
struct Req {
    url: String,
    method: String,
}

#[derive(Deserialize)]
struct Resp {
    body: String,
    code: u16,
}

/// One recorded exchange.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub file: String,
    pub method: String,
    pub path: String,
    pub code: u16,
    pub body: String,
}

pub fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    path.split('?').next().unwrap_or(path)
}

/// Whether `path` fits `template`, where `*` is one segment.
pub fn matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| *t == "*" || t == p)
}

#[allow(clippy::unwrap_used)] // a test helper: an unreadable fixture folder fails the test
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for product in std::fs::read_dir(dir).unwrap() {
        let product = product.unwrap().path();
        if product.is_dir() {
            for file in std::fs::read_dir(&product).unwrap() {
                let file = file.unwrap().path();
                if file.to_string_lossy().ends_with(".cassette.yaml") {
                    out.push(file);
                }
            }
        }
    }
    out.sort();
    out
}

/// Every interaction of every cassette under `dir`; an unreadable cassette fails the test.
#[allow(clippy::unwrap_used, clippy::panic)] // a test helper: unreadable fixtures fail the test
pub fn load(dir: &Path) -> Vec<Recorded> {
    let mut out = Vec::new();
    for file in files(dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let cassette: Cassette =
            serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for i in cassette.interactions {
            out.push(Recorded {
                file: name.clone(),
                method: i.request.method,
                path: path_of(&i.request.url).to_owned(),
                code: i.response.code,
                body: i.response.body,
            });
        }
    }
    out
}
