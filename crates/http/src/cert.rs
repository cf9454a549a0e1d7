//! What is wrong with a server's certificate, worded for the person who runs latscope
//! ([`CertIssue`]), and the certificate facts it is read from. Apart from the verifier
//! (`tls.rs`) so that the handshake's failures (`handshake.rs`) and the crate's errors can name
//! an issue without depending on the TLS set-up that produces it.

use latscope_core::units::utc_time;
use rustls::CertificateError;
use rustls::pki_types::{CertificateDer, ServerName};

/// Whether rustls refused a certificate because it is a CA's (webpki's `CaUsedAsEndEntity`,
/// which rustls passes on as an `Other` certificate error).
pub(crate) fn is_ca_used_as_end_entity(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(CertificateError::Other(o))
            if matches!(o.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
    )
}

/// Whether a certificate names itself as its issuer (made by `openssl req -x509` and the like).
pub(crate) fn self_signed(cert: &CertificateDer<'_>) -> bool {
    webpki::EndEntityCert::try_from(cert).is_ok_and(|c| c.issuer() == c.subject())
}

/// The DNS names a certificate is issued for (its subjectAltName's; rustls' own list of them is
/// in its debugging notation).
pub(crate) fn dns_names(cert: &CertificateDer<'_>) -> Vec<String> {
    webpki::EndEntityCert::try_from(cert)
        .map(|c| c.valid_dns_names().map(str::to_string).collect())
        .unwrap_or_default()
}

/// What is wrong with the server's certificate, for the person who runs latscope: each says
/// what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertIssue {
    /// Self-signed, and not among the `--cacert` certificates.
    SelfSigned,
    /// Signed by a CA that is neither a Mozilla root nor in a `--cacert` file.
    UnknownIssuer,
    /// A CA's certificate (basicConstraints CA:TRUE) presented as the server's, signed by
    /// someone else.
    CaCertificate,
    /// Issued for other names.
    WrongName {
        /// The name checked (the URL's host, or `--host`).
        expected: String,
        /// The names in the certificate (subjectAltName), when known.
        presented: Vec<String>,
    },
    /// Past its validity period; when it ended, Unix seconds, if known.
    Expired(Option<u64>),
    /// Before its validity period; when it starts, Unix seconds, if known.
    NotYetValid(Option<u64>),
    /// Anything else, as rustls words it.
    Other(String),
}

impl std::fmt::Display for CertIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let when = |s: &Option<u64>| s.map(|s| format!(" on {}", utc_time(s * 1000)));
        match self {
            CertIssue::SelfSigned => f.write_str(
                "the server's certificate is self-signed and no --cacert file holds it: pass \
                 that certificate with --cacert FILE, or skip the check with --insecure",
            ),
            CertIssue::UnknownIssuer => f.write_str(
                "the server's certificate is signed by a CA this client does not trust: pass \
                 that CA's certificate with --cacert FILE, or skip the check with --insecure",
            ),
            CertIssue::CaCertificate => f.write_str(
                "the server presents a CA's certificate as its own: give it a server \
                 certificate, pass that very certificate with --cacert FILE, or skip the check \
                 with --insecure",
            ),
            CertIssue::WrongName {
                expected,
                presented,
            } => {
                let names = if presented.is_empty() {
                    "other names".to_string()
                } else {
                    presented.join(", ")
                };
                write!(
                    f,
                    "the server's certificate is for {names}, not {expected}: use a name it is \
                     issued for (in the URL, or with --host), or skip the check with --insecure"
                )
            }
            CertIssue::Expired(at) => write!(
                f,
                "the server's certificate expired{}: renew it, or skip the check with --insecure",
                when(at).unwrap_or_default()
            ),
            CertIssue::NotYetValid(at) => write!(
                f,
                "the server's certificate is not valid yet (it starts{}): check this host's \
                 clock, or skip the check with --insecure",
                when(at).unwrap_or_else(|| " later".into())
            ),
            CertIssue::Other(what) => write!(
                f,
                "the server's certificate is refused ({what}): pass its CA with --cacert FILE, \
                 or skip the check with --insecure"
            ),
        }
    }
}

impl std::error::Error for CertIssue {}

impl CertIssue {
    /// What rustls' refusal `e` of `cert` for `name` means.
    pub fn of(e: &rustls::Error, cert: &CertificateDer<'_>, name: &ServerName<'_>) -> CertIssue {
        use CertificateError as C;
        let rustls::Error::InvalidCertificate(c) = e else {
            return CertIssue::Other(e.to_string());
        };
        match c {
            C::UnknownIssuer if self_signed(cert) => CertIssue::SelfSigned,
            C::UnknownIssuer => CertIssue::UnknownIssuer,
            C::Other(_) if is_ca_used_as_end_entity(e) && self_signed(cert) => {
                CertIssue::SelfSigned
            }
            C::Other(_) if is_ca_used_as_end_entity(e) => CertIssue::CaCertificate,
            C::NotValidForNameContext { .. } | C::NotValidForName => CertIssue::WrongName {
                expected: name.to_str().into_owned(),
                presented: dns_names(cert),
            },
            C::ExpiredContext { not_after, .. } => CertIssue::Expired(Some(not_after.as_secs())),
            C::Expired => CertIssue::Expired(None),
            C::NotValidYetContext { not_before, .. } => {
                CertIssue::NotYetValid(Some(not_before.as_secs()))
            }
            C::NotValidYet => CertIssue::NotYetValid(None),
            other => CertIssue::Other(format!("{other:?}")),
        }
    }

    /// The issue carried by a handshake's error, if it is one of the verifier's (`tls.rs`).
    pub fn carried_by(e: &rustls::Error) -> Option<&CertIssue> {
        match e {
            rustls::Error::InvalidCertificate(CertificateError::Other(o)) => {
                o.0.downcast_ref::<CertIssue>()
            }
            _ => None,
        }
    }
}
