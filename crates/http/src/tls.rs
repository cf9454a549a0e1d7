//! rustls client configuration (the `ring` provider): verification against the Mozilla roots
//! compiled in (webpki-roots) plus `--cacert` files, or no verification at all (`--insecure`).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::HttpError;

/// Build the client configuration once per run; connections share it (and its session cache).
pub fn client_config(
    insecure: bool,
    ca_files: &[std::path::PathBuf],
    alpn: &[u8],
) -> Result<Arc<ClientConfig>, HttpError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::Tls(e.to_string()))?;
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify {
                algs: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for path in ca_files {
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
                HttpError::Tls(format!("cannot read CA file {}: {e}", path.display()))
            })?;
            let mut n = 0;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    HttpError::Tls(format!("bad certificate in {}: {e}", path.display()))
                })?;
                roots.add(cert).map_err(|e| {
                    HttpError::Tls(format!("unusable CA in {}: {e}", path.display()))
                })?;
                n += 1;
            }
            if n == 0 {
                return Err(HttpError::Tls(format!(
                    "no PEM certificate in {}",
                    path.display()
                )));
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// The SNI / verification name for `host`.
pub fn server_name(host: &str) -> Result<ServerName<'static>, HttpError> {
    ServerName::try_from(host.to_string())
        .map_err(|e| HttpError::Tls(format!("'{host}' is not a valid TLS server name: {e}")))
}

/// `--insecure`: accept any certificate, but still check handshake signatures so the TLS
/// session itself is sound (only the identity of the peer is unchecked).
#[derive(Debug)]
struct NoVerify {
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
