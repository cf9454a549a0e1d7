//! rustls client configuration (the `ring` provider): verification against the Mozilla roots
//! compiled in (webpki-roots) plus `--cacert` files, or no verification at all (`--insecure`).
//!
//! A `--cacert` file may hold the server's own self-signed certificate, as curl's `--cacert`
//! allows: `openssl req -x509` makes it a CA certificate (basicConstraints CA:TRUE), which
//! webpki refuses as a server's (`CaUsedAsEndEntity`). [`Verifier`] accepts such a certificate
//! when it is byte for byte one of the `--cacert` certificates, after the checks webpki made
//! before refusing it and the name check. A refused certificate's error is made a
//! [`CertIssue`], which says what is wrong and what to do about it.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme,
};

pub use crate::cert::CertIssue;
use crate::cert::is_ca_used_as_end_entity;
use crate::error::HttpError;

/// How HTTPS checks the server's certificate: the options of every command that speaks TLS
/// (`http`, `diagnose`), as the user gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Do not verify the server's certificate (`--insecure`).
    pub insecure: bool,
    /// Also trust the certificates in these PEM files (`--cacert`).
    pub ca_files: Vec<std::path::PathBuf>,
}

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
    let verifier: Arc<dyn ServerCertVerifier> = if insecure {
        Arc::new(NoVerify {
            algs: provider.signature_verification_algorithms,
        })
    } else {
        let mut extra = Vec::new();
        for path in ca_files {
            extra.extend(read_ca_file(path)?);
        }
        Arc::new(Verifier::new(extra, provider)?)
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of one `--cacert` PEM file (at least one).
fn read_ca_file(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| HttpError::Tls(format!("cannot read --cacert {}: {e}", path.display())))?;
    let certs = certs
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| HttpError::Tls(format!("bad certificate in {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(HttpError::Tls(format!(
            "no PEM certificate in --cacert {} (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The SNI / verification name for `host`.
pub fn server_name(host: &str) -> Result<ServerName<'static>, HttpError> {
    ServerName::try_from(host.to_string())
        .map_err(|e| HttpError::Tls(format!("'{host}' is not a valid TLS server name: {e}")))
}

/// Verification against the Mozilla roots and the `--cacert` certificates, which also accepts a
/// `--cacert` certificate presented as the server's own (see the module's documentation).
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// Every `--cacert` certificate, to recognise one presented by the server.
    given: Vec<CertificateDer<'static>>,
}

impl Verifier {
    fn new(
        given: Vec<CertificateDer<'static>>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Verifier, HttpError> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in &given {
            roots
                .add(cert.clone())
                .map_err(|e| HttpError::Tls(format!("unusable --cacert certificate: {e}")))?;
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| HttpError::Tls(e.to_string()))?;
        Ok(Verifier { webpki, given })
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(e) => e,
        };
        // webpki checks a certificate's validity period (and its distrust list) before its
        // basicConstraints (rustls-webpki's check_issuer_independent_properties): refused as a
        // CA, the certificate is in its validity period; the name is left to check.
        if is_ca_used_as_end_entity(&refused)
            && self.given.iter().any(|c| c.as_ref() == end_entity.as_ref())
        {
            let parsed = ParsedCertificate::try_from(end_entity)?;
            return match rustls::client::verify_server_name(&parsed, server_name) {
                Ok(()) => Ok(ServerCertVerified::assertion()),
                Err(e) => Err(issue_error(&e, end_entity, server_name)),
            };
        }
        Err(issue_error(&refused, end_entity, server_name))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// rustls' refusal `e`, as the [`CertIssue`] it means (carried as an `Other` certificate error:
/// the alert rustls sends the server is then certificate_unknown).
fn issue_error(
    e: &rustls::Error,
    cert: &CertificateDer<'_>,
    name: &ServerName<'_>,
) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
        CertIssue::of(e, cert, name),
    ))))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `openssl req -x509 -newkey rsa:2048 -nodes -days 36500 -subj /CN=localhost -addext
    /// subjectAltName=DNS:localhost`: a self-signed CA certificate (basicConstraints CA:TRUE),
    /// valid from 2026-12-02 to 2126.
    const SELF_SIGNED: &[u8] = include_bytes!("../testdata/self-signed-localhost.pem");

    fn cert() -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(SELF_SIGNED).expect("a PEM certificate")
    }

    fn verifier(given: Vec<CertificateDer<'static>>) -> Verifier {
        Verifier::new(given, Arc::new(rustls::crypto::ring::default_provider())).unwrap()
    }

    /// The issue `verifier` finds with the certificate for `host` at `unix_s`, or None if it is
    /// accepted.
    fn check(v: &Verifier, host: &str, unix_s: u64) -> Option<CertIssue> {
        let name = server_name(host).unwrap();
        let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(unix_s));
        match v.verify_server_cert(&cert(), &[], &name, &[], now) {
            Ok(_) => None,
            Err(e) => Some(CertIssue::carried_by(&e).cloned().expect("a CertIssue")),
        }
    }

    const NOV_2027: u64 = 1_827_000_000;

    #[test]
    fn a_given_self_signed_certificate_is_the_servers_own_trust_anchor() {
        let given = verifier(vec![cert()]);
        assert_eq!(
            check(&given, "localhost", NOV_2027),
            None,
            "curl accepts it"
        );
        // Still checked: the name and the validity period.
        assert!(matches!(
            check(&given, "example.com", NOV_2027),
            Some(CertIssue::WrongName { expected, presented })
                if expected == "example.com" && presented == ["localhost"]
        ));
        assert!(matches!(
            check(&given, "localhost", 5_000_000_000),
            Some(CertIssue::Expired(Some(_)))
        ));
        assert!(matches!(
            check(&given, "localhost", 1_000_000_000),
            Some(CertIssue::NotYetValid(Some(_)))
        ));
        // Not given: refused, and said to be self-signed with the remedy.
        let issue = check(&verifier(vec![]), "localhost", NOV_2027).unwrap();
        assert_eq!(issue, CertIssue::SelfSigned);
        let text = issue.to_string();
        assert!(
            text.contains("self-signed")
                && text.contains("--cacert FILE")
                && text.contains("--insecure"),
            "{text}"
        );
        assert!(!text.contains("Other("), "{text}");
    }

    #[test]
    fn issues_are_worded_with_a_remedy() {
        let expired = CertIssue::Expired(Some(1_700_000_000)).to_string();
        assert!(expired.contains("expired on 2023-11-14"), "{expired}");
        let name = CertIssue::WrongName {
            expected: "10.0.0.1".into(),
            presented: vec!["a.example".into(), "b.example".into()],
        }
        .to_string();
        assert!(
            name.starts_with("the server's certificate is for a.example, b.example, not 10.0.0.1"),
            "{name}"
        );
        let empty = std::env::temp_dir().join(format!("latscope-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(false, std::slice::from_ref(&empty), b"http/1.1").unwrap_err();
        let _ = std::fs::remove_file(&empty);
        assert!(
            e.to_string().contains("no PEM certificate in --cacert"),
            "{e}"
        );
        assert!(e.is_usage());
    }
}
