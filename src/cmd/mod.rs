//! One module per subcommand: arguments → engine → result → rendering.

pub mod agent;
pub mod analyze;
pub mod capture;
pub mod completions;
pub mod connect;
pub mod demo;
pub mod diagnose;
pub mod http;
pub mod ping;
pub mod report;
pub mod rr;
pub mod schema;
pub mod serve;
mod serve_log;
pub mod sockets;
pub mod stack;
pub mod stream;
pub mod trace;

use clap::Args;

/// TARGET (`HOST[:PORT]` or `unix:PATH`) with `-p/--port`: the port comes from TARGET, else
/// from `--port`, else `default`; TARGET and `--port` naming two different ports is refused.
pub fn parse_target(
    target: &str,
    port: Option<u16>,
    default: u16,
) -> anyhow::Result<latscope_net::sock::Target> {
    use latscope_net::sock::Target;
    let parsed = Target::parse(target, port.unwrap_or(default))?;
    if let (Some(want), Target::Inet { port: got, .. }) = (port, &parsed)
        && *got != want
    {
        return Err(crate::exit::coded(
            crate::exit::USAGE,
            format!("'{target}' names port {got} but --port says {want}: give the port once"),
        ));
    }
    Ok(parsed)
}

/// The measured target of `rr` and `stream`: TARGET (`HOST[:PORT]` or `unix:PATH`, the port
/// also from `-p/--port`) or `--unix PATH`, and the transport `--udp` picks.
pub fn target_and_transport(
    target: &Option<String>,
    port: Option<u16>,
    unix: &Option<std::path::PathBuf>,
    udp: bool,
) -> anyhow::Result<(
    latscope_net::sock::Target,
    latscope_core::model::rr::Transport,
)> {
    use latscope_core::model::rr::Transport;
    use latscope_net::sock::Target;
    match (unix, target) {
        (Some(p), _) => Ok((Target::Unix(p.clone()), Transport::Unix)),
        (None, Some(t)) => {
            let t = parse_target(t, port, latscope_net::proto::DEFAULT_PORT)?;
            let tr = match (&t, udp) {
                (Target::Unix(_), true) => {
                    return Err(crate::exit::coded(
                        crate::exit::USAGE,
                        "--udp cannot be used with a unix socket",
                    ));
                }
                (Target::Unix(_), false) => Transport::Unix,
                (_, true) => Transport::Udp,
                (_, false) => Transport::Tcp,
            };
            Ok((t, tr))
        }
        (None, None) => Err(crate::exit::coded(
            crate::exit::USAGE,
            "no target: give HOST[:PORT] or --unix PATH",
        )),
    }
}

/// The options of the clients of a `latscope serve` (connect, diagnose, rr, stream): the address
/// family and the key.
#[derive(Args, Debug, Clone, Default)]
pub struct ClientArgs {
    #[command(flatten)]
    pub family: FamilyArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// `-4` / `-6`: the address family flags every command that resolves a host name shares.
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct FamilyArgs {
    /// IPv4 only.
    #[arg(short = '4')]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
}

impl FamilyArgs {
    /// The family to resolve names in.
    pub fn family(&self) -> latscope_probe::Family {
        latscope_probe::Family::from_flags(self.ipv4, self.ipv6)
    }
}

/// `-k` / `--cacert`: how every command that speaks TLS (http, diagnose) checks the server's
/// certificate.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// HTTPS: do not verify the server's certificate (the output says so).
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// HTTPS: also trust the certificate(s) in this PEM file: a CA's, or the server's own
    /// self-signed one, as curl --cacert does (repeatable).
    #[arg(long, value_name = "FILE")]
    pub cacert: Vec<std::path::PathBuf>,
}

impl TlsArgs {
    /// The engines' TLS options.
    pub fn options(&self) -> latscope_http::tls::TlsOptions {
        latscope_http::tls::TlsOptions {
            insecure: self.insecure,
            ca_files: self.cacert.clone(),
        }
    }
}

/// `--auth-file`: the key clients of an authenticating `latscope serve` prove they hold.
#[derive(Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// Key file of a `latscope serve --auth-file` (the same file, or a copy of it; mode 600).
    /// The key never crosses the wire: the client answers the server's challenge with an
    /// HMAC-SHA256 of it.
    #[arg(long, value_name = "FILE", env = latscope_net::auth::AUTH_FILE_ENV)]
    pub auth_file: Option<std::path::PathBuf>,
}

impl AuthArgs {
    /// The key, read and checked (a missing, empty or world-readable file is a usage error).
    pub fn key(&self) -> anyhow::Result<Option<latscope_net::auth::AuthKey>> {
        self.auth_file
            .as_deref()
            .map(latscope_net::auth::AuthKey::from_file)
            .transpose()
            .map_err(anyhow::Error::from)
    }
}
