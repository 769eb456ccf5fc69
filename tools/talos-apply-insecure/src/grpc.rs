//! The real [`NodeApi`]: tonic over TLS connectors of our own (without a client certificate,
//! trusting a pinned SPKI or the first one seen; or mutual TLS with our talosconfig), one
//! connection per call so that each probe sees the node as it is now.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Endpoint, Uri};
use tonic_prost::ProstCodec;

use crate::proto::{
    self, ApplyConfigurationRequest, ApplyConfigurationResponse, Empty, VersionResponse,
};
use crate::talosconfig::Trust;
use crate::tls::{self, Seen};
use crate::{Applied, CallError, NodeApi, Probe, Proof};

/// Talos's API over the network, for real.
#[derive(Debug)]
pub struct GrpcApi {
    runtime: tokio::runtime::Runtime,
    trust: Trust,
    timeout: Duration,
}

impl GrpcApi {
    pub fn new(trust: Trust, timeout: Duration) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(GrpcApi {
            runtime,
            trust,
            timeout,
        })
    }

    /// One unary call on a fresh TLS connection made with `tls`; what its verifier saw comes
    /// back with the answer.
    fn call<Req, Resp>(
        &self,
        address: SocketAddr,
        path: &'static str,
        request: Req,
        tls: (rustls::ClientConfig, Arc<Mutex<Seen>>),
    ) -> (Result<Resp, tonic::Status>, Seen)
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let (config, seen) = tls;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let timeout = self.timeout;
        let result = self.runtime.block_on(async move {
            let connect = tower::service_fn(move |_: Uri| {
                let connector = connector.clone();
                async move {
                    let tcp = tokio::time::timeout(timeout, TcpStream::connect(address)).await??;
                    let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
                    let tls = connector.connect(name, tcp).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(tls))
                }
            });
            // The scheme is only for the HTTP/2 request; TLS is the connector's.
            let channel = Endpoint::from_shared(format!("http://{address}"))
                .map_err(|e| tonic::Status::internal(e.to_string()))?
                .connect_timeout(timeout)
                .timeout(timeout)
                .connect_with_connector(connect)
                .await
                .map_err(|e| transport_status(&e))?;
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.map_err(|e| transport_status(&e))?;
            grpc.unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                ProstCodec::<Req, Resp>::default(),
            )
            .await
            .map(tonic::Response::into_inner)
        });
        (result, take(&seen))
    }
}

fn take(seen: &Mutex<Seen>) -> Seen {
    seen.lock().map(|s| s.clone()).unwrap_or_default()
}

/// A transport error as a status whose message keeps the whole cause chain (the TLS alert is
/// deep inside it).
fn transport_status(error: &(dyn std::error::Error + 'static)) -> tonic::Status {
    tonic::Status::unavailable(pop_common::exit::with_causes(error))
}

/// Whether a failed call failed on the way (connection, TLS, HTTP/2) rather than being answered
/// by the server: tonic keeps the cause of a transport failure as the status's source.
fn is_transport(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some() || status.code() == tonic::Code::Unavailable
}

/// A status's message with the whole cause chain.
fn describe(status: &tonic::Status) -> String {
    let mut text = status.message().to_owned();
    if let Some(source) = std::error::Error::source(status) {
        text.push_str(": ");
        text.push_str(&pop_common::exit::with_causes(source));
    }
    text
}

/// Whether a failed call means the server demanded a client certificate: a configured node's
/// apid requires mutual TLS, so a certificate-less client is refused with a TLS alert
/// (`certificate_required` in TLS 1.3, `bad_certificate`/`handshake_failure` in TLS 1.2).
fn client_certificate_required(status: &tonic::Status) -> bool {
    let text = describe(status);
    [
        "CertificateRequired",
        "BadCertificate",
        "HandshakeFailure",
        "UnknownCA",
        "DecryptError",
        "CertificateUnknown",
    ]
    .iter()
    .any(|alert| text.contains(alert))
}

impl NodeApi for GrpcApi {
    fn probe(&self, address: SocketAddr, pins: &[String]) -> Probe {
        let tls = match tls::client_config(pins) {
            Ok(tls) => tls,
            Err(error) => return Probe::Unreachable(format!("cannot set up TLS: {error}")),
        };
        match self.call::<Empty, VersionResponse>(address, proto::VERSION, Empty {}, tls) {
            (_, seen) if seen.pin_mismatch => Probe::PinMismatch {
                fingerprint: seen.fingerprint.unwrap_or_default(),
            },
            // Asked for a client certificate during the handshake: mutual TLS, configured. (The
            // refusal that follows is an alert or a closed connection depending on the server.)
            (_, seen) if seen.client_certificate_requested => Probe::Configured,
            // Any gRPC answer means the node took a client without a certificate: maintenance
            // mode. Talos v1.13 answers Version to that reader; older ones say Unimplemented.
            (Ok(_), seen) => Probe::Maintenance {
                fingerprint: seen.fingerprint.unwrap_or_default(),
            },
            (Err(status), seen) if !is_transport(&status) => Probe::Maintenance {
                fingerprint: seen.fingerprint.unwrap_or_default(),
            },
            (Err(status), _) if client_certificate_required(&status) => Probe::Configured,
            (Err(status), _) => Probe::Unreachable(describe(&status)),
        }
    }

    fn apply(&self, address: SocketAddr, pin: &str, config: &[u8]) -> Result<Applied, CallError> {
        let request = ApplyConfigurationRequest {
            data: config.to_vec(),
            mode: proto::Mode::Auto as i32,
            dry_run: false,
            try_mode_timeout: None,
        };
        let tls = tls::client_config(&[pin.to_owned()])?;
        match self.call::<_, ApplyConfigurationResponse>(
            address,
            proto::APPLY_CONFIGURATION,
            request,
            tls,
        ) {
            (_, seen) if seen.pin_mismatch => {
                Err(CallError::NotPinned(seen.fingerprint.unwrap_or_default()))
            }
            (Ok(response), _) => {
                let answer = response.messages.into_iter().next().unwrap_or_default();
                if !answer.metadata.as_ref().is_none_or(|m| m.error.is_empty()) {
                    let error = answer.metadata.map(|m| m.error).unwrap_or_default();
                    return Err(CallError::Refused(error));
                }
                Ok(Applied {
                    mode: answer.mode().name().to_owned(),
                    details: answer.mode_details,
                    warnings: answer.warnings,
                })
            }
            (Err(status), _) => Err(CallError::Failed {
                code: status.code(),
                message: describe(&status),
            }),
        }
    }

    fn prove(&self, address: SocketAddr, maintenance_pin: Option<&str>) -> Proof {
        let tls = match tls::mutual_config(&self.trust, maintenance_pin) {
            Ok(tls) => tls,
            Err(error) => return Proof::Unreachable(format!("cannot set up TLS: {error}")),
        };
        match self.call::<Empty, VersionResponse>(address, proto::VERSION, Empty {}, tls) {
            (_, seen) if seen.maintenance => Proof::Maintenance,
            (_, seen) if seen.foreign.is_some() => Proof::Foreign {
                why: format!(
                    "its certificate is not one of our machine CA's: {}",
                    seen.foreign.unwrap_or_default()
                ),
                fingerprint: seen.fingerprint,
            },
            // The handshake verified its chain to our CA and it took our client certificate:
            // any gRPC answer is from a node of ours.
            (Ok(_), _) => Proof::Ours,
            (Err(status), _) if !is_transport(&status) => Proof::Ours,
            (Err(status), seen) if client_certificate_required(&status) => Proof::Foreign {
                why: format!("it refused our client certificate: {}", describe(&status)),
                fingerprint: seen.fingerprint,
            },
            (Err(status), _) => Proof::Unreachable(describe(&status)),
        }
    }
}
