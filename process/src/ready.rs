//! The readiness GET one oooi program sends another: the address agent asks
//! its component (DNS `/healthz`, the proxy's `/ready`) whether the replica
//! may hold VLAN addresses, and the proxy's gate asks the same `/ready`
//! before it opens Envoy's routing listeners. One request, one status line:
//! a plain-HTTP GET on loopback or the pod's own address, blocking, bounded
//! by a timeout (an async caller runs it on a blocking thread).

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// A readiness endpoint: a plain-HTTP URL with an IP address or
/// `localhost` as host, e.g. `http://127.0.0.1:9446/ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyUrl {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The request path.
    pub path: String,
}

impl std::str::FromStr for ReadyUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("{s:?}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() => (h, p),
            _ => return Err(format!("{s:?}: the URL needs host:port")),
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: bad port {port:?}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = if host == "localhost" {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            host.parse()
                .map_err(|_| format!("{s:?}: the host must be an IP address or localhost"))?
        };
        Ok(ReadyUrl {
            addr: SocketAddr::new(ip, port),
            path,
        })
    }
}

impl std::fmt::Display for ReadyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.addr, self.path)
    }
}

/// `GET url` once: the HTTP status code. Each of the connect, the write and
/// every read waits at most `timeout`; a refused connect, a timeout or an
/// answer that is not HTTP is an error (the caller counts it as not ready).
pub fn probe(url: &ReadyUrl, timeout: Duration) -> io::Result<u16> {
    let mut stream = TcpStream::connect_timeout(&url.addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    // One write: `write!` on the socket would send each piece on its own.
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        url.path, url.addr
    );
    stream.write_all(request.as_bytes())?;
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    status_of(&head)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an HTTP response"))
}

/// The status code of an HTTP/1.x status line.
fn status_of(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::net::TcpListener;
    use std::time::Instant;

    #[test]
    fn ready_urls() {
        let u: ReadyUrl = "http://127.0.0.1:9445/ready".parse().unwrap();
        assert_eq!(u.addr, "127.0.0.1:9445".parse().unwrap());
        assert_eq!(u.path, "/ready");
        assert_eq!(u.to_string(), "http://127.0.0.1:9445/ready");
        let u: ReadyUrl = "http://localhost:80".parse().unwrap();
        assert_eq!((u.addr.port(), u.path.as_str()), (80, "/"));
        let u: ReadyUrl = "http://[::1]:9445/ready".parse().unwrap();
        assert_eq!(u.addr, "[::1]:9445".parse().unwrap());
        assert_eq!(u.to_string(), "http://[::1]:9445/ready");
        for bad in [
            "https://127.0.0.1:1/ready",
            "http://127.0.0.1/ready",
            "http://proxy:9445/ready",
            "http://127.0.0.1:99999/",
            "http://:80/",
        ] {
            assert!(bad.parse::<ReadyUrl>().is_err(), "{bad}");
        }
    }

    /// A listener answering each connection with one of `answers` (raw
    /// bytes, written after the whole request head arrived), then closing.
    fn answering(answers: Vec<&'static [u8]>) -> (ReadyUrl, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = ReadyUrl {
            addr: listener.local_addr().unwrap(),
            path: "/ready".into(),
        };
        let server = std::thread::spawn(move || {
            for answer in answers {
                let (mut s, _) = listener.accept().unwrap();
                // The whole request head, however the reads split it.
                let mut req = Vec::new();
                let mut buf = [0u8; 512];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "request cut short: {req:?}");
                    req.extend_from_slice(&buf[..n]);
                }
                let req = String::from_utf8(req).unwrap();
                assert!(req.starts_with("GET /ready HTTP/1.1\r\n"), "{req}");
                assert!(req.contains("\r\nConnection: close\r\n"), "{req}");
                s.write_all(answer).unwrap();
            }
        });
        (url, server)
    }

    #[test]
    fn the_status_of_ready_and_not_ready_answers() {
        let (url, server) = answering(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\n\r\ndraining",
            // The status line in two pieces.
            b"HTTP/1.0 204",
        ]);
        let wait = Duration::from_secs(5);
        assert_eq!(probe(&url, wait).unwrap(), 200);
        assert_eq!(probe(&url, wait).unwrap(), 500);
        assert_eq!(probe(&url, wait).unwrap(), 503);
        assert_eq!(probe(&url, wait).unwrap(), 204);
        server.join().unwrap();
    }

    #[test]
    fn an_answer_that_is_not_http_is_an_error() {
        let (url, server) = answering(vec![b"SSH-2.0-OpenSSH\r\n", b""]);
        for _ in 0..2 {
            let e = probe(&url, Duration::from_secs(5)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        }
        server.join().unwrap();
        assert_eq!(status_of(b"garbage\r\n"), None);
        assert_eq!(status_of(b"HTTP/2 200\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 abc\r\n"), None);
    }

    #[test]
    fn a_silent_server_times_out() {
        // Accepted by the kernel (the backlog), never answered.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = ReadyUrl {
            addr: listener.local_addr().unwrap(),
            path: "/ready".into(),
        };
        let started = Instant::now();
        let e = probe(&url, Duration::from_millis(200)).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        );
        // It waited for the answer rather than failing at once.
        assert!(started.elapsed() >= Duration::from_millis(200));
        drop(listener);
    }

    #[test]
    fn a_closed_port_is_refused() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // The listener is gone: nothing listens on the port.
        let url = ReadyUrl {
            addr,
            path: "/ready".into(),
        };
        let e = probe(&url, Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }
}
