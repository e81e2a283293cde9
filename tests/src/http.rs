//! A tiny blocking HTTP/1.1 client for the table API and Envoy's admin.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Result, anyhow};

/// A minimal blocking HTTP/1.1 client (one request per connection).
pub fn http_blocking(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    // Read up to the end of the body named by content-length rather than to
    // EOF: Envoy delays its close by up to delayed_close_timeout.
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let (head_len, body_len) = loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break (out.len(), None);
        }
        out.extend_from_slice(&buf[..n]);
        if let Some(pos) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..pos]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            break (pos + 4, len);
        }
    };
    if let Some(len) = body_len {
        while out.len() < head_len + len {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
    } else {
        s.read_to_end(&mut out)?;
    }
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("bad HTTP response: {text:?}"))?;
    let body = text
        .get(head_len.min(text.len())..)
        .unwrap_or("")
        .to_string();
    Ok((status, body))
}
