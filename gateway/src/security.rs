//! The listener's security: TLS (rustls, certificate and key from PEM files,
//! optional client-certificate authentication) and SASL ([`crate::sasl`]).
//!
//! With SASL on, a connection is answered only ApiVersions, SaslHandshake
//! (v1) and SaslAuthenticate until it authenticates, as Kafka's
//! `SaslServerAuthenticator` does: anything else closes it, and a failed
//! authentication is answered with SASL_AUTHENTICATION_FAILED, then closed.
//! Nothing a client sends before it authenticates reaches the log.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::reply::{Reply, encode};
use crate::sasl::{Credentials, Exchange, Mechanism, Step};

/// TLS and SASL settings of a listener.
#[derive(Clone, Default)]
pub struct Security {
    /// TLS, when configured.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// SASL credentials, when SASL is required.
    pub sasl: Option<Arc<Credentials>>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|c| c.mechanisms()))
            .finish()
    }
}

/// A TLS acceptor for the certificate chain and key in `cert` and `key`
/// (PEM); with `client_ca`, clients must present a certificate it signed.
pub fn tls_acceptor(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "certificate {}: no certificate in it",
            cert.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .map_err(|e| format!("client CA {}: {e}", ca.display()))?
            {
                let c = c.map_err(|e| format!("client CA {}: {e}", ca.display()))?;
                roots
                    .add(c)
                    .map_err(|e| format!("client CA {}: {e}", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| format!("client CA {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("certificate {} and its key: {e}", cert.display()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Where a connection is in its authentication.
#[derive(Debug)]
pub(crate) struct Auth {
    required: bool,
    exchange: Option<Exchange>,
    user: Option<String>,
}

/// What [`Auth::gate`] decided for a request.
pub(crate) enum Gate {
    /// Authenticated (or no SASL): dispatch it.
    Pass(Bytes),
    /// Answered here.
    Answer(Reply),
}

impl Auth {
    /// A connection's state; `required` when the listener has SASL.
    pub(crate) fn new(required: bool) -> Auth {
        Auth {
            required,
            exchange: None,
            user: None,
        }
    }

    /// Lets a request through, or answers it (SASL steps, refusals).
    pub(crate) fn gate(
        &mut self,
        security: &Security,
        key: ApiKey,
        header: &RequestHeader,
        mut body: Bytes,
    ) -> Gate {
        let Some(credentials) = security.sasl.as_deref() else {
            return Gate::Pass(body);
        };
        if !self.required || self.user.is_some() || key == ApiKey::ApiVersions {
            return Gate::Pass(body);
        }
        let version = header.request_api_version;
        match key {
            ApiKey::SaslHandshake => {
                if !(0..=1).contains(&version) {
                    return Gate::Answer(Reply::Close(format!(
                        "SaslHandshake v{version} is not supported"
                    )));
                }
                let Ok(request) = SaslHandshakeRequest::decode(&mut body, version) else {
                    return Gate::Answer(Reply::Close("malformed SaslHandshake".into()));
                };
                let offered = credentials.mechanisms();
                let names: Vec<StrBytes> = offered
                    .iter()
                    .map(|m| StrBytes::from_static_str(m.name()))
                    .collect();
                let chosen = Mechanism::from_name(request.mechanism.as_str())
                    .filter(|m| offered.contains(m));
                let response = SaslHandshakeResponse::default().with_mechanisms(names);
                match chosen {
                    Some(m) => {
                        self.exchange = Some(Exchange::new(m));
                        Gate::Answer(encode(&response, version))
                    }
                    None => Gate::Answer(encode(
                        &response.with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
                        version,
                    )),
                }
            }
            ApiKey::SaslAuthenticate => {
                let Ok(request) = SaslAuthenticateRequest::decode(&mut body, version) else {
                    return Gate::Answer(Reply::Close("malformed SaslAuthenticate".into()));
                };
                let Some(exchange) = self.exchange.as_mut() else {
                    return Gate::Answer(Reply::Close(
                        "SaslAuthenticate before SaslHandshake".into(),
                    ));
                };
                match exchange.step(credentials, &request.auth_bytes) {
                    Step::Continue(bytes) => Gate::Answer(encode(
                        &SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes)),
                        version,
                    )),
                    Step::Done(user, bytes) => {
                        tracing::info!(%user, "authenticated");
                        self.user = Some(user);
                        self.exchange = None;
                        Gate::Answer(encode(
                            &SaslAuthenticateResponse::default()
                                .with_auth_bytes(Bytes::from(bytes)),
                            version,
                        ))
                    }
                    Step::Failed(message) => {
                        tracing::warn!(reason = %message, "SASL authentication failed");
                        let response = SaslAuthenticateResponse::default()
                            .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                            .with_error_message(Some(StrBytes::from_string(message.clone())));
                        match encode(&response, version) {
                            Reply::Body(b) => Gate::Answer(Reply::FailedAuthentication(b, message)),
                            other => Gate::Answer(other),
                        }
                    }
                }
            }
            other => Gate::Answer(Reply::Close(format!(
                "{other:?} before SASL authentication (closing, as Kafka does)"
            ))),
        }
    }
}
