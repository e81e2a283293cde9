//! What a health check connects to, parsed once by serde: [`HostPort`] for
//! `tcp` checks, [`HttpUrl`] for `http` checks.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// `host:port`, the host an IP address (`[v6]` with a port) or a DNS name,
/// the port within 1..=65535.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// IP address (without brackets) or DNS name.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// `http://host[:port][/path]`: plain HTTP, no credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpUrl {
    /// IP address (without brackets) or DNS name.
    pub host: String,
    /// The port, when written (80 otherwise).
    pub port: Option<u16>,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl HttpUrl {
    /// The port connected to.
    pub fn port_or_default(&self) -> u16 {
        self.port.unwrap_or(80)
    }
}

/// `host`, bracketed when it is an IPv6 address.
pub(crate) fn bracketed(host: &str) -> Cow<'_, str> {
    match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => Cow::Owned(format!("[{host}]")),
        Err(_) => Cow::Borrowed(host),
    }
}

/// Splits `host[:port]`; `s` is the whole value, quoted in errors. The
/// port may be left out only when `port_optional`.
fn host_port(s: &str, text: &str, port_optional: bool) -> Result<(String, Option<u16>), String> {
    let bad = |why: &str| format!("`{s}` is not a `host:port`: {why}");
    if let Ok(a) = SocketAddr::from_str(text) {
        if a.port() == 0 {
            return Err(bad("port 0"));
        }
        return Ok((a.ip().to_string(), Some(a.port())));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => {
            let port = p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("the port must be within 1..=65535"))?;
            (h, Some(port))
        }
        _ if port_optional => (text, None),
        _ => return Err(bad("no port")),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if IpAddr::from_str(host).is_ok() {
        return Ok((host.to_string(), port));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let trimmed = host.strip_suffix('.').unwrap_or(host);
    if trimmed.is_empty() || trimmed.len() > 253 || !trimmed.split('.').all(label_ok) {
        return Err(bad("the host is neither an IP address nor a DNS name"));
    }
    Ok((host.to_string(), port))
}

impl FromStr for HostPort {
    type Err = String;
    fn from_str(s: &str) -> Result<HostPort, String> {
        match host_port(s, s.trim(), false)? {
            (host, Some(port)) => Ok(HostPort { host, port }),
            (_, None) => Err(format!("`{s}` is not a `host:port`: no port")),
        }
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", bracketed(&self.host), self.port)
    }
}

impl FromStr for HttpUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<HttpUrl, String> {
        let Some(rest) = s.trim().strip_prefix("http://") else {
            return Err(format!(
                "`{s}` is not an `http://host[:port]/path` URL (only plain http is checked)"
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err(format!("`{s}`: credentials are not allowed"));
        }
        if path
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b == b'#')
        {
            return Err(format!("`{s}`: the path has a bad character"));
        }
        let (host, port) = host_port(s, authority, true)?;
        Ok(HttpUrl {
            host,
            port,
            path: path.to_string(),
        })
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", bracketed(&self.host))?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        f.write_str(&self.path)
    }
}

text_serde!(
    HostPort,
    "HostPort",
    "`host:port`: an IP address (`[v6]:port`) or a DNS name, and a port."
);
text_serde!(
    HttpUrl,
    "HttpUrl",
    "`http://host[:port]/path` (plain HTTP, no credentials)."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_written_back_as_read() {
        for text in [
            "10.128.0.7:8443",
            "[fd00::7]:80",
            "oooi-proxy-2.oooi.svc:9901",
        ] {
            let t: HostPort = text.parse().expect(text);
            assert_eq!(t.to_string(), text);
        }
        for text in [
            "http://oooi-proxy-2.oooi.svc:9901/ready?x=1",
            "http://[fd00::7]/ready",
            "http://h/",
        ] {
            let t: HttpUrl = text.parse().expect(text);
            assert_eq!(t.to_string(), text);
        }
        let t: HttpUrl = "http://[fd00::7]/ready".parse().expect("v6");
        assert_eq!((t.host.as_str(), t.port_or_default()), ("fd00::7", 80));
    }
}
