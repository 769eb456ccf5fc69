//! The demo's HTTP/1.1 server, for the edge and the origin alike: requests parsed by httparse,
//! each connection on a thread of its own, kept alive until the client closes it, stays idle
//! for [`IDLE`], or asks to close.
//!
//! Header values are bytes, and may hold bytes 0x80 to 0xFF (RFC 9110 section 5.5's obs-text):
//! Chromium and Firefox send a cookie whose name starts with U+2000 as its raw UTF-8, and Envoy
//! hands such a value to its filters unchanged, so the demo edge must too (a server that refuses
//! the line, as tiny_http does, would hide from the browser proofs the very cookies a sibling
//! subdomain can set). They reach the filter as text, decoded as UTF-8 (a browser's cookie
//! string is UTF-8; other bytes are replaced).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use proxy_wasm_host::Response;

use crate::DemoError;

/// How long a connection may stay idle between requests before it is closed.
const IDLE: Duration = Duration::from_secs(30);
/// The largest request head read: Envoy's default `max_request_headers_kb` is 60 KiB.
const MAX_HEAD: usize = 64 * 1024;
/// The most header lines a request may have (Envoy's default `max_headers_count` is 100).
const MAX_HEADERS: usize = 100;
/// The largest request body read.
const MAX_BODY: usize = 1 << 20;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: String,
    /// The request target as sent: the path and its query.
    pub target: String,
    /// Names lowercase, values as UTF-8 text.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

/// A non-blocking listener on `addr` (the accept loops poll it with their stop flag), and the
/// address it got.
pub fn listen(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), DemoError> {
    let err = |reason: std::io::Error| DemoError::Listen {
        addr: addr.to_string(),
        reason: reason.to_string(),
    };
    let listener = TcpListener::bind(addr).map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    listener.set_nonblocking(true).map_err(err)?;
    Ok((listener, bound))
}

/// A listening server.
pub struct Server {
    listener: TcpListener,
}

impl Server {
    /// Listens on `addr`; the address it got (a port 0 is any free port).
    pub fn bind(addr: SocketAddr) -> Result<(Server, SocketAddr), DemoError> {
        let (listener, bound) = listen(addr)?;
        Ok((Server { listener }, bound))
    }

    /// Accepts until `stop` is set (checked every 100 ms), each connection served on a thread
    /// of its own by `handle`.
    pub fn spawn<F>(self, stop: Arc<AtomicBool>, handle: F) -> JoinHandle<()>
    where
        F: Fn(HttpRequest) -> Response + Send + Sync + 'static,
    {
        let handle = Arc::new(handle);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match self.listener.accept() {
                    Ok((stream, peer)) => {
                        let (handle, stop) = (handle.clone(), stop.clone());
                        std::thread::spawn(move || serve(stream, peer, &*handle, &stop));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => {
                        pop_common::warn!("accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
    }
}

/// What reading one request gave.
enum Read1 {
    Request(HttpRequest, bool),
    /// The client closed, went idle, or sent what cannot be answered.
    Closed,
    /// A malformed request: answered with this status, then the connection closed.
    Refused(u32, &'static str),
}

/// Serves the requests of one connection in turn.
fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    handle: &dyn Fn(HttpRequest) -> Response,
    stop: &AtomicBool,
) {
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(IDLE)).is_err() {
        return;
    }
    let mut buffer = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let (response, keep_alive) = match read_request(&mut stream, &mut buffer, peer) {
            Read1::Request(request, keep_alive) => (handle(request), keep_alive),
            Read1::Closed => return,
            Read1::Refused(status, why) => (text(status, why), false),
        };
        if write_response(&mut stream, &response, keep_alive).is_err() || !keep_alive {
            return;
        }
    }
}

/// Reads one request from `stream`; `buffer` keeps what was read past it (a pipelined request).
fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>, peer: SocketAddr) -> Read1 {
    let mut chunk = [0u8; 8192];
    let (head, head_len) = loop {
        match parse_head(buffer) {
            Ok(Some(parsed)) => break parsed,
            Ok(None) => {}
            Err((status, why)) => return Read1::Refused(status, why),
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Read1::Closed,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let get = |name: &str| {
        head.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.trim())
    };
    if get("transfer-encoding").is_some() {
        return Read1::Refused(501, "chunked request bodies are not served here\n");
    }
    let length = match get("content-length").map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) if n <= MAX_BODY => n,
        Some(_) => return Read1::Refused(413, "request body too large or its length unreadable\n"),
    };
    let keep_alive = !get("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
    while buffer.len() < head_len + length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Read1::Closed,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buffer[head_len..head_len + length].to_vec();
    buffer.drain(..head_len + length);
    let request = HttpRequest {
        method: head.method,
        target: head.target,
        headers: head.headers,
        body,
        peer,
    };
    Read1::Request(request, keep_alive && head.http11)
}

/// A request's head, owned.
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    /// HTTP/1.1 (kept alive by default), not 1.0.
    http11: bool,
}

/// The head at the start of `buffer` and its length; `None` while incomplete; the status to
/// refuse it with.
fn parse_head(buffer: &[u8]) -> Result<Option<(Head, usize)>, (u32, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(buffer) {
        Ok(httparse::Status::Complete(head_len)) => {
            let head = Head {
                method: parsed.method.unwrap_or("GET").to_owned(),
                target: parsed.path.unwrap_or("/").to_owned(),
                headers: parsed
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
                http11: parsed.version == Some(1),
            };
            Ok(Some((head, head_len)))
        }
        Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => Ok(None),
        Ok(httparse::Status::Partial) => Err((431, "request head too large\n")),
        Err(httparse::Error::TooManyHeaders) => Err((431, "too many header lines\n")),
        Err(_) => Err((400, "malformed request\n")),
    }
}

/// Hop-by-hop headers: never forwarded nor repeated (RFC 9110 section 7.6.1), plus the length,
/// which the writer sets.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

fn write_response(
    stream: &mut TcpStream,
    response: &Response,
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason(response.status)
    );
    for (name, value) in &response.headers {
        let clean = |s: &str| !s.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0));
        if !HOP_BY_HOP.contains(&name.to_ascii_lowercase().as_str()) && clean(name) && clean(value)
        {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str(&format!("content-length: {}\r\n", response.body.len()));
    head.push_str(if keep_alive {
        "connection: keep-alive\r\n\r\n"
    } else {
        "connection: close\r\n\r\n"
    });
    stream.write_all(head.as_bytes())?;
    stream.write_all(&response.body)?;
    stream.flush()
}

fn reason(status: u32) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        403 => "Forbidden",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        _ => "",
    }
}

/// A plain-text response.
pub fn text(status: u32, text: &str) -> Response {
    Response {
        status,
        headers: vec![(
            "content-type".to_owned(),
            "text/plain; charset=utf-8".to_owned(),
        )],
        body: text.as_bytes().to_vec(),
    }
}
