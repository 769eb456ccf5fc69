//! The edge's TLS front: terminates TLS with rustls, as the gateway does, and relays each
//! connection's plaintext to the HTTP edge on its loopback port.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use crate::{DemoError, TlsFiles};

/// How long a relayed connection may stay idle before it is closed.
const IDLE: Duration = Duration::from_secs(30);
/// How long each side is waited for before the other is looked at.
const POLL: Duration = Duration::from_millis(5);

fn tls_error(path: &Path, reason: impl ToString) -> DemoError {
    DemoError::Tls {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// The rustls configuration for these files (ring, TLS 1.2 and 1.3, HTTP/1.1).
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, DemoError> {
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| tls_error(&files.cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(&files.cert, e))?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| tls_error(&files.key, e))?;
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(&files.cert, e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| tls_error(&files.key, e))?;
    Ok(Arc::new(config))
}

/// The listening front.
pub struct Front {
    listener: TcpListener,
    config: Arc<ServerConfig>,
    http: SocketAddr,
}

impl Front {
    /// Listens on `addr` (the edge's public address); relays to the HTTP edge at `http`.
    pub fn bind(
        addr: SocketAddr,
        config: Arc<ServerConfig>,
        http: SocketAddr,
    ) -> Result<(Front, SocketAddr), DemoError> {
        let (listener, bound) = crate::http1::listen(addr)?;
        Ok((
            Front {
                listener,
                config,
                http,
            },
            bound,
        ))
    }

    /// Accepts until `stop` is set (checked every 100 ms), each connection relayed on a thread
    /// of its own.
    pub fn spawn(self, stop: Arc<AtomicBool>) -> JoinHandle<()> {
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match self.listener.accept() {
                    Ok((stream, _)) => {
                        let (config, http) = (self.config.clone(), self.http);
                        std::thread::spawn(move || relay(stream, config, http));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => {
                        pop_common::warn!("TLS accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
    }
}

/// Relays one connection both ways until either side closes or it stays idle for [`IDLE`].
fn relay(stream: TcpStream, config: Arc<ServerConfig>, http: SocketAddr) {
    let Ok(connection) = ServerConnection::new(config) else {
        return;
    };
    let Ok(mut plain) = TcpStream::connect(http) else {
        return;
    };
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(POLL)).is_err()
        || plain.set_read_timeout(Some(POLL)).is_err()
    {
        return;
    }
    let mut tls = StreamOwned::new(connection, stream);
    let mut buf = vec![0u8; 16 * 1024];
    let mut last = Instant::now();
    while last.elapsed() < IDLE {
        match tls.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if plain.write_all(&buf[..n]).is_err() {
                    return;
                }
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        match plain.read(&mut buf) {
            Ok(0) => {
                tls.conn.send_close_notify();
                let _ = tls.flush();
                return;
            }
            Ok(n) => {
                if tls.write_all(&buf[..n]).and_then(|()| tls.flush()).is_err() {
                    return;
                }
                last = Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}
