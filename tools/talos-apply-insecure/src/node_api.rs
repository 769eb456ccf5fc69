//! The calls this tool makes to a node, as a trait ([`NodeApi`], the real one is
//! [`crate::grpc::GrpcApi`]) and what they find.

use std::net::SocketAddr;

/// What a probe without a client certificate found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Maintenance mode: a client without a certificate was served. `fingerprint` is the SPKI
    /// fingerprint of the node's certificate.
    Maintenance { fingerprint: String },
    /// The node requires a client certificate: it is configured.
    Configured,
    /// The node's certificate is not one of the pinned ones.
    PinMismatch { fingerprint: String },
    /// No answer (refused, timed out, rebooting).
    Unreachable(String),
}

/// What mutual TLS with our talosconfig found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The node took our client certificate and its own chains to our machine CA.
    Ours,
    /// It still presents the maintenance certificate pinned before.
    Maintenance,
    /// Its certificate is not one of our CA, or it refused our client certificate.
    Foreign {
        fingerprint: Option<String>,
        why: String,
    },
    /// No answer (refused, timed out, rebooting).
    Unreachable(String),
}

/// What a node said when it took a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The mode the node chose (`NO_REBOOT`, `REBOOT`, ...).
    pub mode: String,
    pub details: String,
    pub warnings: Vec<String>,
}

/// Why a call to a node failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("certificate SPKI fingerprint {0} is not the pinned one")]
    NotPinned(String),
    /// The node answered, with an error in the answer's metadata.
    #[error("the node refused the config: {0}")]
    Refused(String),
    #[error("ApplyConfiguration failed: {code:?}: {message}")]
    Failed { code: tonic::Code, message: String },
}

/// The calls this tool makes to a node (the real one is [`grpc::GrpcApi`]), handed in as
/// `&dyn NodeApi`, as every outside dependency of the tools is.
pub trait NodeApi {
    /// A connection without a client certificate, as `talosctl --insecure`, accepting only a
    /// certificate of `pins` when there are some.
    fn probe(&self, address: SocketAddr, pins: &[String]) -> Probe;
    /// `ApplyConfiguration`, over a connection that accepts only the certificate of `pin`.
    fn apply(&self, address: SocketAddr, pin: &str, config: &[u8]) -> Result<Applied, CallError>;
    /// A call over mutual TLS with our talosconfig; `maintenance_pin` is the maintenance
    /// certificate the node had (told apart from a foreign one).
    fn prove(&self, address: SocketAddr, maintenance_pin: Option<&str>) -> Proof;
}
