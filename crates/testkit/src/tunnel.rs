//! An HTTP CONNECT proxy on loopback that opens a tunnel to one address only: what stands for
//! the DNS and the routes to a cluster's API server whose name is not this machine's. Clients
//! given `HTTPS_PROXY=<url>` (kubectl through Go's `http.ProxyFromEnvironment`, kube-rs with its
//! `http-proxy` feature) reach `https://<host>:<port>` through it, and TLS still runs end to end:
//! the server's certificate is checked against the name the client asked for. A CONNECT to any
//! other address is answered 403 and recorded, so a test sees every attempt to leave loopback.

#![allow(clippy::unwrap_used)] // a test helper: a proxy that cannot listen fails the test

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// The running proxy; it stops accepting when dropped (tunnels already open end with their
/// peers).
#[derive(Debug)]
pub struct Tunnel {
    url: String,
    refused: Arc<Mutex<Vec<String>>>,
    opened: Arc<Mutex<usize>>,
    address: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Tunnel {
    /// Listens on a free loopback port; each `CONNECT <authority>` (e.g. `api.example.com:6443`)
    /// is tunnelled to `target` (e.g. `127.0.0.1:41234`), any other refused.
    pub fn start(authority: &str, target: &str) -> Tunnel {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let url = format!("http://localhost:{}", address.port());
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let opened = Arc::new(Mutex::new(0));
        let tunnel = Tunnel {
            url,
            refused: refused.clone(),
            opened: opened.clone(),
            address,
            stop: stop.clone(),
        };
        let (authority, target) = (authority.to_owned(), target.to_owned());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let (authority, target) = (authority.clone(), target.clone());
                let (refused, opened) = (refused.clone(), opened.clone());
                thread::spawn(move || serve(client, &authority, &target, &refused, &opened));
            }
        });
        tunnel
    }

    /// `http://localhost:<port>`, for `HTTPS_PROXY`. Named `localhost` rather than
    /// `127.0.0.1` so that `NO_PROXY=127.0.0.1`, which keeps the stand-ins' loopback URLs
    /// direct, does not also name the proxy: kube 5 (wait-ready) compares `NO_PROXY` with the
    /// proxy's own address, not the server's, and drops a proxy it lists
    /// (kube-client src/config/file_loader.rs, `proxy_url`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The request lines refused so far (anything but the one CONNECT).
    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }

    /// How many tunnels were opened so far.
    pub fn opened(&self) -> usize {
        *self.opened.lock().unwrap()
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        // Wakes the accepting thread, which sees the flag and ends (closing the port).
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.address);
    }
}

fn serve(
    client: TcpStream,
    authority: &str,
    target: &str,
    refused: &Mutex<Vec<String>>,
    opened: &Mutex<usize>,
) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).unwrap_or(0) == 0 {
        return;
    }
    // The headers, up to the empty line.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
    }
    let mut client = client;
    let request = request.trim().to_owned();
    if request != format!("CONNECT {authority} HTTP/1.1") {
        refused.lock().unwrap().push(request);
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        return;
    }
    let Ok(server) = TcpStream::connect(target) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    *opened.lock().unwrap() += 1;
    // The reader hands out first what it buffered past the headers (a TLS hello sent early).
    let mut to_server = server.try_clone().unwrap();
    let mut from_server = server;
    let mut to_client = client.try_clone().unwrap();
    let upstream = thread::spawn(move || {
        let _ = std::io::copy(&mut reader, &mut to_server);
        let _ = to_server.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut from_server, &mut to_client);
    let _ = to_client.shutdown(Shutdown::Write);
    let _ = upstream.join();
}
