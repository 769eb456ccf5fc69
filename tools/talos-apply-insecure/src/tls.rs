//! TLS as `talosctl --insecure` does it: a node in maintenance mode presents a certificate signed
//! by its own throwaway CA, so there is no chain to verify. The certificate is trusted on first
//! use (its SPKI fingerprint is logged), or checked against pinned SPKI fingerprints, the ones the
//! node's console prints (`--cert-fingerprint`, base64 of the SHA-256 of the
//! SubjectPublicKeyInfo). The handshake signature is still verified, so the peer holds the key.
//!
//! A configured node is ours only through [`mutual_config`]: our talosconfig's client certificate
//! offered, the node's certificate verified as a chain to our machine CA naming the node's
//! address (Talos puts the node's addresses in its API certificate: api_cert_sans.go).

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rustls::client::WantsClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, ConfigBuilder, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// The SPKI fingerprint of a DER certificate, as Talos prints it: base64(sha256(SPKI DER)).
/// The certificate is parsed by rustls's own X.509 parser, the one the handshake uses.
pub fn spki_fingerprint(certificate: &[u8]) -> Option<String> {
    let der = CertificateDer::from(certificate);
    let spki = ParsedCertificate::try_from(&der)
        .ok()?
        .subject_public_key_info();
    Some(base64::engine::general_purpose::STANDARD.encode(Sha256::digest(spki)))
}

/// What the verifier saw, for the caller's log and error.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The SPKI fingerprint of the certificate the node presented.
    pub fingerprint: Option<String>,
    /// The certificate was refused because its fingerprint is not pinned.
    pub pin_mismatch: bool,
    /// The server asked for a client certificate (a TLS CertificateRequest): a configured
    /// node's apid requires mutual TLS, a node in maintenance mode never asks.
    pub client_certificate_requested: bool,
    /// (Mutual TLS) the node presented the maintenance certificate pinned earlier: it has not
    /// left maintenance mode yet.
    pub maintenance: bool,
    /// (Mutual TLS) why the node's certificate is not one of our cluster's.
    pub foreign: Option<String>,
}

/// What a node's certificate is checked against.
#[derive(Debug)]
enum CertificatePolicy {
    /// Trust on first use, or only the pinned SPKI fingerprints when there are some.
    Maintenance { pins: Vec<String> },
    /// Our cluster's nodes only: a certificate that chains to our machine CA and names the
    /// node's address. The maintenance certificate pinned before (the same node, not configured
    /// yet) is told apart, so that waiting for a node to leave maintenance never trusts anything
    /// else.
    OurNode {
        chain: Arc<WebPkiServerVerifier>,
        maintenance_pin: Option<String>,
    },
}

/// Checks the node's certificate as its [`CertificatePolicy`] says, and the handshake signature
/// with the provider's algorithms (the peer holds the certificate's key) whatever the policy.
#[derive(Debug)]
pub struct NodeVerifier {
    policy: CertificatePolicy,
    algorithms: WebPkiSupportedAlgorithms,
    seen: Arc<Mutex<Seen>>,
}

impl NodeVerifier {
    fn new(policy: CertificatePolicy, provider: &CryptoProvider) -> (Self, Arc<Mutex<Seen>>) {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let verifier = NodeVerifier {
            policy,
            algorithms: provider.signature_verification_algorithms,
            seen: Arc::clone(&seen),
        };
        (verifier, seen)
    }

    fn record(&self, note: impl FnOnce(&mut Seen)) {
        if let Ok(mut seen) = self.seen.lock() {
            note(&mut seen);
        }
    }
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fingerprint = spki_fingerprint(end_entity);
        match &self.policy {
            CertificatePolicy::Maintenance { pins } => {
                let remember = |pin_mismatch: bool| {
                    self.record(|seen| {
                        seen.fingerprint = fingerprint.clone();
                        seen.pin_mismatch = pin_mismatch;
                    })
                };
                let Some(found) = &fingerprint else {
                    return Err(rustls::Error::InvalidCertificate(
                        rustls::CertificateError::BadEncoding,
                    ));
                };
                if !pins.is_empty() && !pins.contains(found) {
                    remember(true);
                    return Err(rustls::Error::General(format!(
                        "certificate SPKI fingerprint {found} is not one of the pinned ones"
                    )));
                }
                remember(false);
                Ok(ServerCertVerified::assertion())
            }
            CertificatePolicy::OurNode {
                chain,
                maintenance_pin,
            } => {
                let remember = |maintenance: bool, foreign: Option<String>| {
                    self.record(|seen| {
                        seen.fingerprint = fingerprint.clone();
                        seen.maintenance = maintenance;
                        seen.foreign = foreign;
                    })
                };
                if fingerprint.is_some() && fingerprint == *maintenance_pin {
                    remember(true, None);
                    return Err(rustls::Error::General(
                        "still the maintenance certificate".into(),
                    ));
                }
                let verified = chain.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                );
                remember(false, verified.as_ref().err().map(ToString::to_string));
                verified
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A client config for one mutual-TLS connection to a node: our talosconfig's client
/// certificate, the node's certificate checked by [`NodeVerifier`] against our machine CA.
pub fn mutual_config(
    trust: &crate::talosconfig::Trust,
    maintenance_pin: Option<&str>,
) -> Result<(rustls::ClientConfig, Arc<Mutex<Seen>>), rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in &trust.ca {
        roots.add(ca.clone())?;
    }
    let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
        .build()
        .map_err(|e| rustls::Error::General(format!("our machine CA: {e}")))?;
    let policy = CertificatePolicy::OurNode {
        chain,
        maintenance_pin: maintenance_pin.map(str::to_owned),
    };
    let (verifier, seen) = NodeVerifier::new(policy, &provider);
    let config = grpc_config(provider, Arc::new(verifier), |builder| {
        builder.with_client_auth_cert(trust.chain.clone(), trust.key.clone_key())
    })?;
    Ok((config, seen))
}

/// A client config for a node's gRPC API: the node's certificate checked by `verifier`, ours
/// (or none) given by `client_auth`, HTTP/2 by ALPN (gRPC servers require it).
fn grpc_config(
    provider: Arc<CryptoProvider>,
    verifier: Arc<dyn ServerCertVerifier>,
    client_auth: impl FnOnce(
        ConfigBuilder<ClientConfig, WantsClientCert>,
    ) -> Result<ClientConfig, rustls::Error>,
) -> Result<ClientConfig, rustls::Error> {
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = client_auth(builder)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Has no certificate to give, and records that the server asked for one.
#[derive(Debug)]
struct NoCertificate {
    seen: Arc<Mutex<Seen>>,
}

impl rustls::client::ResolvesClientCert for NoCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.client_certificate_requested = true;
        }
        None
    }

    fn has_certs(&self) -> bool {
        // Say yes, so that rustls asks `resolve` (and we learn the server wanted one).
        true
    }
}

/// A client config for one connection: no client certificate (that is what tells a node in
/// maintenance mode apart from a configured one).
pub fn client_config(
    pins: &[String],
) -> Result<(rustls::ClientConfig, Arc<Mutex<Seen>>), rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let policy = CertificatePolicy::Maintenance {
        pins: pins.to_vec(),
    };
    let (verifier, seen) = NodeVerifier::new(policy, &provider);
    let no_certificate = Arc::new(NoCertificate {
        seen: Arc::clone(&seen),
    });
    let config = grpc_config(provider, Arc::new(verifier), |builder| {
        Ok(builder.with_client_cert_resolver(no_certificate))
    })?;
    Ok((config, seen))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn not_a_certificate_has_no_fingerprint() {
        assert!(spki_fingerprint(b"not a certificate").is_none());
    }
}
