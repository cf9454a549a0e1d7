//! The target URL and the request bytes, serialised once before the run.

use crate::error::HttpError;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `http://`: plain TCP, port 80 by default.
    Http,
    /// `https://`: TLS, port 443 by default.
    Https,
}

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Host name or IP literal, without brackets.
    pub host: String,
    /// Port (the scheme's default when the URL has none).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// Parse `http[s]://host[:port][/path][?query]`. Fragments are dropped (never sent).
    pub fn parse(s: &str) -> Result<Url, HttpError> {
        let bad = |why: &str| HttpError::Url(format!("'{s}': {why}"));
        let (scheme, rest) = if let Some(r) = s.strip_prefix("http://") {
            (Scheme::Http, r)
        } else if let Some(r) = s.strip_prefix("https://") {
            (Scheme::Https, r)
        } else if s.contains("://") {
            return Err(bad("only http:// and https:// are supported"));
        } else {
            (Scheme::Http, s)
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad(
                "the path contains spaces or control characters (percent-encode them)",
            ));
        }
        if authority.contains('@') {
            return Err(bad(
                "user information in URLs is not supported (use -H 'Authorization: ...')",
            ));
        }
        let default_port = if scheme == Scheme::Https { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("unclosed '[' in IPv6 address"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad("invalid port"))?,
                None if after.is_empty() => default_port,
                None => return Err(bad("unexpected text after the IPv6 address")),
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad("invalid port"))?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Url {
            scheme,
            host,
            port,
            path,
        })
    }

    /// Where a redirect's `Location` points from this URL (RFC 9110 §10.2.2, RFC 3986 §5.2):
    /// an absolute http(s) URL, a scheme-relative `//host/path`, an absolute path, or a path
    /// relative to this URL's directory (dot segments are left to the server).
    pub fn join(&self, location: &str) -> Result<Url, HttpError> {
        let location = location.trim();
        // A scheme (letters up to a colon before any '/', '?' or '#'): an absolute URI, which
        // `parse` takes or refuses (only http and https).
        let first = location.find(['/', '?', '#', ':']);
        if first.is_some_and(|i| i > 0 && location.as_bytes()[i] == b':') {
            return Url::parse(location);
        }
        let scheme = match self.scheme {
            Scheme::Http => "http:",
            Scheme::Https => "https:",
        };
        if location.starts_with("//") {
            return Url::parse(&format!("{scheme}{location}"));
        }
        let origin = format!("{scheme}//{}", self.host_header());
        if location.starts_with('/') {
            return Url::parse(&format!("{origin}{location}"));
        }
        let path = self.path.split('?').next().unwrap_or("/");
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        Url::parse(&format!("{origin}{dir}{location}"))
    }

    /// Same scheme, host and port: a client asks both on one connection.
    pub fn same_origin(&self, other: &Url) -> bool {
        self.scheme == other.scheme
            && self.host.eq_ignore_ascii_case(&other.host)
            && self.port == other.port
    }

    /// The URL as text, e.g. `https://example.org:8443/a?b`.
    pub fn text(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        format!("{scheme}://{}{}", self.host_header(), self.path)
    }

    /// The `Host` header value: the port only when it is not the scheme's default.
    pub fn host_header(&self) -> String {
        let default_port = if self.scheme == Scheme::Https {
            443
        } else {
            80
        };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Check a `-H 'Name: value'` header and split it.
pub fn parse_header(h: &str) -> Result<(String, String), HttpError> {
    let bad = |why: &str| HttpError::Header(format!("'{h}': {why}"));
    let (name, value) = h
        .split_once(':')
        .ok_or_else(|| bad("expected 'Name: value'"))?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(bad("invalid header name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(bad("the value contains a line break"));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

/// Serialise the request once: `METHOD path HTTP/1.1`, `Host`, user headers, then the body
/// with its `Content-Length`.
pub fn build_request(
    method: &str,
    url: &Url,
    host_override: Option<&str>,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let mut r = Vec::with_capacity(256 + body.len());
    r.extend_from_slice(method.as_bytes());
    r.push(b' ');
    r.extend_from_slice(url.path.as_bytes());
    r.extend_from_slice(b" HTTP/1.1\r\n");
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        r.extend_from_slice(b"Host: ");
        match host_override {
            Some(h) => r.extend_from_slice(h.as_bytes()),
            None => r.extend_from_slice(url.host_header().as_bytes()),
        }
        r.extend_from_slice(b"\r\n");
    }
    if !has("user-agent") {
        r.extend_from_slice(
            concat!("User-Agent: latscope/", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes(),
        );
    }
    for (k, v) in headers {
        r.extend_from_slice(k.as_bytes());
        r.extend_from_slice(b": ");
        r.extend_from_slice(v.as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    let needs_length = !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH");
    if needs_length && !has("content-length") {
        r.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(body);
    r
}

/// Check an HTTP method token.
pub fn check_method(m: &str) -> Result<(), HttpError> {
    if m.is_empty()
        || !m
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
    {
        return Err(HttpError::Method(m.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_resolved_against_the_url_it_answers() {
        let base = Url::parse("http://example.org:8080/a/b.html?q=1").unwrap();
        let j = |l: &str| base.join(l).unwrap().text();
        assert_eq!(j("https://example.org/x"), "https://example.org/x");
        assert_eq!(j("//cdn.example.net/y"), "http://cdn.example.net/y");
        assert_eq!(j("/sub/"), "http://example.org:8080/sub/");
        assert_eq!(j("c.html"), "http://example.org:8080/a/c.html");
        assert!(base.join("ftp://example.org/").is_err());
        let to = base.join("/elsewhere").unwrap();
        assert!(base.same_origin(&to));
        assert!(!base.same_origin(&base.join("https://example.org:8080/").unwrap()));
        let v6 = Url::parse("http://[::1]:81/x").unwrap();
        assert_eq!(v6.join("/y").unwrap().text(), "http://[::1]:81/y");
    }

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8080/index.html?x=1#frag").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/index.html?x=1")
        );
        assert_eq!(u.host_header(), "127.0.0.1:8080");
        let u = Url::parse("https://example.com").unwrap();
        assert_eq!(
            (u.scheme, u.port, u.path.as_str(), u.host_header().as_str()),
            (Scheme::Https, 443, "/", "example.com")
        );
        let u = Url::parse("http://[::1]:81?q").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 81, "/?q")
        );
        assert_eq!(u.host_header(), "[::1]:81");
        assert_eq!(Url::parse("localhost").unwrap().port, 80);
        for bad in [
            "ftp://x/",
            "http://",
            "http://h:99999/",
            "http://u@h/",
            "http://h/a b",
            "http://[::1/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_bytes() {
        let u = Url::parse("http://h:81/p").unwrap();
        let r = build_request("GET", &u, None, &[], b"");
        assert_eq!(
            r,
            format!(
                "GET /p HTTP/1.1\r\nHost: h:81\r\nUser-Agent: latscope/{}\r\n\r\n",
                env!("CARGO_PKG_VERSION")
            )
            .into_bytes()
        );
        let h = vec![
            parse_header("X-A:  1 ").unwrap(),
            parse_header("user-agent: me").unwrap(),
        ];
        let r = String::from_utf8(build_request("POST", &u, Some("v"), &h, b"abc")).unwrap();
        assert_eq!(
            r,
            "POST /p HTTP/1.1\r\nHost: v\r\nX-A: 1\r\nuser-agent: me\r\nContent-Length: 3\r\n\r\nabc"
        );
        assert!(parse_header("nocolon").is_err());
        assert!(parse_header("A B: x").is_err());
        assert!(check_method("get").is_err());
        assert!(check_method("PURGE").is_ok());
    }
}
