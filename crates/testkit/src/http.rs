//! A scripted HTTP/1.1 server on loopback, for tests: it serves the real captures, plays the
//! failures a source can have (error status, a stall, a cut body), and records every request so
//! a test can assert method, path, headers and body.
//!
//! Each connection gets the next reply of the script, then is closed; after the last one the
//! server thread ends by itself. Nothing here is timed: a stall lasts until the client gives up.
//! A routed server ([`Server::routes`]) answers by method and path instead, as often as asked,
//! until it is dropped.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// What the server answers to one connection.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response.
    Body {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// Reads the request, then sends nothing until the client hangs up.
    Stall,
    /// Declares `declared` bytes, sends `body` (shorter), and closes.
    Cut { declared: usize, body: Vec<u8> },
    /// A redirect (`status` 301, 302, 307 or 308) to `location`, as a server that moved answers.
    Redirect { status: u16, location: String },
    /// A complete response with these header fields (besides Content-Length and Connection).
    Headers {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

impl Reply {
    pub fn ok(body: impl Into<Vec<u8>>) -> Self {
        Reply::Body {
            status: 200,
            content_type: "application/octet-stream".into(),
            body: body.into(),
        }
    }

    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Reply::Body {
            status,
            content_type: "application/json".into(),
            body: body.into(),
        }
    }

    pub fn status(status: u16) -> Self {
        Reply::Body {
            status,
            content_type: "text/plain".into(),
            body: format!("status {status}\n").into_bytes(),
        }
    }
}

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// Path and query string, as sent.
    pub target: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A running scripted server.
#[derive(Debug)]
pub struct Server {
    /// `http://127.0.0.1:<port>`
    pub url: String,
    requests: mpsc::Receiver<Request>,
    /// Set when a routed server is dropped: its thread ends at its next connection.
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = &self.stop {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            // Wakes the accept so that the thread sees the flag.
            let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
        }
    }
}

impl Server {
    /// Listens on a free loopback port and plays `script`, one reply per connection.
    pub fn start(script: Vec<Reply>) -> io::Result<Server> {
        Server::start_for(|_| script)
    }

    /// Listens on a free loopback port and plays the script `script` makes for its URL
    /// (`http://127.0.0.1:<port>`): replies that name their own address, as signed ones do.
    pub fn start_for(script: impl FnOnce(&str) -> Vec<Reply>) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let script = script(&url);
        let (sender, requests) = mpsc::channel();
        thread::spawn(move || {
            for reply in script {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                if serve(stream, |_| reply, &sender).is_err() {
                    // The client went away; the next connection gets the next reply.
                }
            }
        });
        Ok(Server {
            url,
            requests,
            stop: None,
        })
    }

    /// Listens on a free loopback port and answers each connection with the reply of the route
    /// (`method`, `path` without the query) its request names, or a 404, as often as asked:
    /// a server whose clients come back, in whatever order.
    pub fn routes(routes: Vec<(&'static str, String, Reply)>) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let (sender, requests) = mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        thread::spawn(move || {
            while let Ok((stream, _)) = listener.accept() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let reply = |request: &Request| {
                    let path = request.target.split('?').next().unwrap_or_default();
                    routes
                        .iter()
                        .find(|(method, route, _)| *method == request.method && route == path)
                        .map_or_else(|| Reply::status(404), |(_, _, reply)| reply.clone())
                };
                if serve(stream, reply, &sender).is_err() {
                    // The client went away; the next connection is served all the same.
                }
            }
        });
        Ok(Server {
            url,
            requests,
            stop: Some(stop),
        })
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.try_iter().collect()
    }
}

/// A URL where nothing listens (a port just released).
pub fn closed_port_url() -> io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}"))
}

/// Reads one request from `stream` and sends it the reply `reply` chooses for it.
fn serve(
    stream: TcpStream,
    reply: impl FnOnce(&Request) -> Reply,
    sender: &mpsc::Sender<Request>,
) -> io::Result<()> {
    // A bound on how long a silent client can hold the thread; never reached in a passing test.
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some(request) = read_request(&mut reader)? else {
        return Ok(());
    };
    let reply = reply(&request);
    let _ = sender.send(request);
    let mut stream = stream;
    match reply {
        Reply::Body {
            status,
            content_type,
            body,
        } => {
            write!(
                stream,
                "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                reason(status),
                body.len()
            )?;
            stream.write_all(&body)?;
        }
        Reply::Headers {
            status,
            headers,
            body,
        } => {
            write!(stream, "HTTP/1.1 {status} {}\r\n", reason(status))?;
            for (name, value) in headers {
                write!(stream, "{name}: {value}\r\n")?;
            }
            write!(
                stream,
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            stream.write_all(&body)?;
        }
        Reply::Stall => {
            // Wait for the client to give up (read returns 0 or fails).
            let mut sink = [0u8; 1024];
            while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
        }
        Reply::Redirect { status, location } => {
            write!(
                stream,
                "HTTP/1.1 {status} {}\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                reason(status)
            )?;
        }
        Reply::Cut { declared, body } => {
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
            )?;
            stream.write_all(&body)?;
        }
    }
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Both)
}

/// Reads one HTTP/1.1 request (its body by Content-Length); `None` when the client closed the
/// connection before sending one, as a kept-alive client does once it is done.
pub fn read_request(reader: &mut impl BufRead) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_string();
            if name == "content-length" {
                length = value.parse().unwrap_or(0);
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(Some(Request {
        method,
        target,
        headers,
        body,
    }))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        404 => "Not Found",
        409 => "Conflict",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
