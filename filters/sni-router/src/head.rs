//! The plain-HTTP role's reading of a request head: pure, no host calls.
//!
//! A connection on a plain-HTTP listener (port 80, `*.apps` by Host) is
//! decided by the `Host` header of its first request. The filter hands every
//! chunk of downstream data it has so far to [`read`], which answers whether
//! the head is still incomplete, which host to route by, or why the
//! connection must be refused. The bytes are never changed or consumed: once
//! the decision is made, tcp_proxy forwards them as they came (pipelined
//! requests behind the first one included).

use std::fmt;

/// The most header lines a head may carry; more is refused as malformed.
const MAX_HEADERS: usize = 96;

/// Longest host name accepted (DNS limit).
const MAX_HOST_LEN: usize = 253;

/// Why a head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadRefusal {
    /// The head is longer than the configured limit (or never ends within it).
    Oversized,
    /// Not HTTP/1.x, a syntax error, more than one Host, or an
    /// absolute-form target naming another host than Host.
    Malformed,
    /// The request carries no Host header.
    NoHost,
    /// The Host value is not a host name (bad characters, empty, too long).
    BadHost,
    /// The client closed before the head was complete.
    Incomplete,
    /// The head did not arrive within the configured time.
    Timeout,
}

impl HeadRefusal {
    /// A short label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            HeadRefusal::Oversized => "oversized_head",
            HeadRefusal::Malformed => "malformed_head",
            HeadRefusal::NoHost => "no_host",
            HeadRefusal::BadHost => "bad_host",
            HeadRefusal::Incomplete => "incomplete_head",
            HeadRefusal::Timeout => "head_timeout",
        }
    }
}

impl fmt::Display for HeadRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the bytes received so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// The head is not complete yet: wait for more data.
    Partial,
    /// Route by this host: lower case, without port or trailing dot.
    Host(String),
    /// Refuse the connection.
    Refuse(HeadRefusal),
}

/// Reads the first request head out of `buf` (everything received so far),
/// allowing at most `max_head` bytes of head. `closed` is true when the
/// client has finished sending.
pub fn read(buf: &[u8], max_head: usize, closed: bool) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len > max_head => {
            Head::Refuse(HeadRefusal::Oversized)
        }
        Ok(httparse::Status::Complete(_)) => host_of(&req),
        Ok(httparse::Status::Partial) if buf.len() >= max_head => {
            Head::Refuse(HeadRefusal::Oversized)
        }
        Ok(httparse::Status::Partial) if closed => Head::Refuse(HeadRefusal::Incomplete),
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(httparse::Error::TooManyHeaders) => Head::Refuse(HeadRefusal::Oversized),
        Err(_) => Head::Refuse(HeadRefusal::Malformed),
    }
}

fn host_of(req: &httparse::Request<'_, '_>) -> Head {
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let Some(host) = hosts.next() else {
        return Head::Refuse(HeadRefusal::NoHost);
    };
    if hosts.next().is_some() {
        // RFC 9112 §3.2: more than one Host is a bad request.
        return Head::Refuse(HeadRefusal::Malformed);
    }
    let Some(name) = normalize_host(host.value) else {
        return Head::Refuse(HeadRefusal::BadHost);
    };
    // An absolute-form target names the host too (RFC 9112 §3.2.2); the
    // upstream may prefer it over Host, so the two must agree.
    if let Some(rest) = req.path.and_then(absolute_form_authority) {
        match normalize_host(rest.as_bytes()) {
            Some(authority) if authority == name => {}
            _ => return Head::Refuse(HeadRefusal::Malformed),
        }
    }
    Head::Host(name)
}

/// `http://authority/...` → `authority` (with any userinfo left in, which
/// then fails host validation).
fn absolute_form_authority(target: &str) -> Option<&str> {
    let (scheme, rest) = target.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    Some(rest.split(['/', '?', '#']).next().unwrap_or(""))
}

/// A Host value as a routable name: optional `:port` removed, lower case,
/// one trailing dot removed. `None` unless what is left is a host name of
/// letters, digits, `-`, `_` and `.`. An IP literal is returned as it is
/// (no route names one, so it is refused as unknown).
pub fn normalize_host(value: &[u8]) -> Option<String> {
    let value = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    let host = if let Some(v6) = value.strip_prefix('[') {
        let (literal, after) = v6.split_once(']')?;
        if !(after.is_empty() || valid_port(after.strip_prefix(':')?)) {
            return None;
        }
        if literal.is_empty()
            || !literal
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        return Some(format!("[{}]", literal.to_ascii_lowercase()));
    } else {
        match value.split_once(':') {
            Some((h, port)) if valid_port(port) => h,
            Some(_) => return None,
            None => value,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
    if host.is_empty()
        || host.len() > MAX_HOST_LEN
        || !host.bytes().all(ok)
        || host.starts_with('.')
        || host.contains("..")
    {
        return None;
    }
    Some(host.to_ascii_lowercase())
}

fn valid_port(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 5
        && p.bytes().all(|b| b.is_ascii_digit())
        && p.parse::<u16>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 8192;

    fn host(h: &str) -> Head {
        Head::Host(h.to_owned())
    }

    #[test]
    fn host_is_taken_from_a_complete_head() {
        let req =
            b"GET / HTTP/1.1\r\nHost: Console.Apps.C1.example.com:80\r\nUser-Agent: t\r\n\r\n";
        assert_eq!(read(req, MAX, false), host("console.apps.c1.example.com"));
        let req = b"GET /x HTTP/1.0\r\nhost: a.example.com.\r\n\r\nbody";
        assert_eq!(read(req, MAX, false), host("a.example.com"));
    }

    #[test]
    fn a_head_arriving_in_pieces_waits_until_complete() {
        let req: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example.com\r\nAccept: */*\r\n\r\nGET /2 HTTP/1.1\r\nHost: b\r\n\r\n";
        for cut in 1..req.len() {
            let got = read(&req[..cut], MAX, false);
            let head_end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            if cut < head_end {
                assert_eq!(got, Head::Partial, "cut at {cut}");
            } else {
                assert_eq!(got, host("a.example.com"), "cut at {cut}");
            }
        }
        assert_eq!(
            read(b"GET / HTTP/1.1\r\nHo", MAX, true),
            Head::Refuse(HeadRefusal::Incomplete)
        );
    }

    #[test]
    fn missing_duplicate_and_bad_hosts_are_refused() {
        assert_eq!(
            read(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", MAX, false),
            Head::Refuse(HeadRefusal::NoHost)
        );
        assert_eq!(
            read(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", MAX, false),
            Head::Refuse(HeadRefusal::Malformed)
        );
        for bad in [
            "",
            "a b",
            "a:xx",
            "a:99999",
            "a/b",
            "..a",
            "a@b",
            "caf\u{e9}.example",
        ] {
            let req = format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n");
            assert!(
                matches!(
                    read(req.as_bytes(), MAX, false),
                    Head::Refuse(HeadRefusal::BadHost | HeadRefusal::Malformed)
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            read(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", MAX, false),
            host("[::1]")
        );
    }

    #[test]
    fn absolute_form_must_agree_with_host() {
        assert_eq!(
            read(
                b"GET http://a.example.com/x HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
                MAX,
                false
            ),
            host("a.example.com")
        );
        assert_eq!(
            read(
                b"GET http://b.example.com/x HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
                MAX,
                false
            ),
            Head::Refuse(HeadRefusal::Malformed)
        );
    }

    #[test]
    fn oversized_and_non_http_input_is_refused() {
        let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ".to_vec();
        big.resize(MAX + 10, b'a');
        assert_eq!(read(&big, MAX, false), Head::Refuse(HeadRefusal::Oversized));
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(read(&big, MAX, false), Head::Refuse(HeadRefusal::Oversized));
        let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
        let req = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert_eq!(
            read(req.as_bytes(), 1 << 20, false),
            Head::Refuse(HeadRefusal::Oversized)
        );
        // A TLS ClientHello on the HTTP port.
        assert_eq!(
            read(&[0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00], MAX, false),
            Head::Refuse(HeadRefusal::Malformed)
        );
        assert_eq!(
            read(b"\0\0\0\0", MAX, false),
            Head::Refuse(HeadRefusal::Malformed)
        );
    }
}
