//! The pair API's HTTP client (hyper's HTTP/1 connection API), for the
//! threads that talk to the other server: the heartbeat, the lease
//! exchange and the replication workers. Those are plain threads (the
//! decision loop and the sync workers never wait on a runtime), so each
//! client drives its own single-thread runtime and blocks on one request at
//! a time. The connection is kept alive between requests; one that the
//! other end closed while idle is replaced once.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

/// Most bytes of a response body read (a snapshot of the whole pool is far
/// less: 8 records of 28 bytes per address of a /16 pool is about 1.8 MB).
const RESPONSE_BODY_MAX: usize = 64 << 20;

/// An HTTP/1.1 client of the pair API, one request at a time.
pub struct Client {
    api: String,
    authorization: String,
    timeout: Duration,
    runtime: Runtime,
    conn: Mutex<Option<SendRequest<Full<Bytes>>>>,
}

/// Why a request failed before an answer.
#[derive(Debug)]
enum Failure {
    /// On a connection that served an earlier request: it may have been
    /// closed while idle, so one retry on a new connection is safe.
    Reused(std::io::Error),
    /// Anything else.
    Fatal(std::io::Error),
}

impl Client {
    /// A client of `api` (`host:port`) presenting `token`; `timeout` bounds
    /// the connect and then the exchange of each request.
    pub fn new(api: &str, token: &str, timeout: Duration) -> Client {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime for the pair client: {e}"));
        Client {
            api: api.to_string(),
            authorization: format!("Bearer {token}"),
            timeout,
            runtime,
            conn: Mutex::new(None),
        }
    }

    /// One request; the status and body.
    pub fn call(&self, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        self.send(method, path, &[], body)
    }

    /// One request with extra headers (`name`, `value`); the status and
    /// body.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|e| std::io::Error::other(format!("HTTP method {method:?}: {e}")))?;
        let body = Bytes::copy_from_slice(body);
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| std::io::Error::other("pair client lock poisoned"))?;
        let first = self.runtime.block_on(self.exchange(
            &mut conn,
            method.clone(),
            path,
            headers,
            body.clone(),
        ));
        match first {
            Ok(r) => Ok(r),
            Err(Failure::Reused(_)) => self
                .runtime
                .block_on(self.exchange(&mut conn, method, path, headers, body))
                .map_err(|f| match f {
                    Failure::Reused(e) | Failure::Fatal(e) => e,
                }),
            Err(Failure::Fatal(e)) => Err(e),
        }
    }

    async fn connect(&self) -> std::io::Result<SendRequest<Full<Bytes>>> {
        let addr: SocketAddr =
            self.api.to_socket_addrs()?.next().ok_or_else(|| {
                std::io::Error::other(format!("{} resolves to nothing", self.api))
            })?;
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        // Driven while this client's runtime runs (during each request);
        // ends when the connection closes or the sender is dropped.
        self.runtime.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "pair client connection ended");
            }
        });
        Ok(sender)
    }

    async fn exchange(
        &self,
        conn: &mut Option<SendRequest<Full<Bytes>>>,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<(u16, Vec<u8>), Failure> {
        let reused = conn.is_some();
        let mut sender = match conn.take() {
            Some(s) => s,
            None => self.connect().await.map_err(Failure::Fatal)?,
        };
        let fail = |e: std::io::Error| {
            if reused && e.kind() != std::io::ErrorKind::TimedOut {
                Failure::Reused(e)
            } else {
                Failure::Fatal(e)
            }
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, &self.api)
            .header(AUTHORIZATION, &self.authorization)
            .header(CONTENT_TYPE, "application/octet-stream");
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| Failure::Fatal(std::io::Error::other(e)))?;
        let answer = tokio::time::timeout(self.timeout, async {
            sender.ready().await.map_err(std::io::Error::other)?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(std::io::Error::other)?;
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), RESPONSE_BODY_MAX)
                .collect()
                .await
                .map_err(|e| std::io::Error::other(format!("response body: {e}")))?
                .to_bytes();
            Ok::<_, std::io::Error>((status, body.to_vec()))
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))
        .and_then(|r| r)
        .map_err(fail)?;
        // Kept for the next request unless the other end said it closes.
        if !sender.is_closed() {
            *conn = Some(sender);
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A loopback server answering each request on one connection with the
    /// given raw responses, in turn; returns its address.
    fn serve(responses: Vec<&'static [u8]>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            for r in responses {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                s.write_all(r).unwrap();
            }
        });
        addr
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let api = serve(vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        ]);
        let c = Client::new(&api, "t", Duration::from_secs(2));
        assert_eq!(c.call("GET", "/x", &[]).unwrap(), (200, b"abcde".to_vec()));
    }

    #[test]
    fn one_connection_carries_successive_requests() {
        let api = serve(vec![
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}",
        ]);
        let c = Client::new(&api, "t", Duration::from_secs(2));
        assert_eq!(c.call("POST", "/a", b"x").unwrap(), (204, Vec::new()));
        // The test server accepts one connection only.
        assert_eq!(c.call("POST", "/b", b"y").unwrap(), (409, b"{}".to_vec()));
    }

    #[test]
    fn a_connection_closed_while_idle_is_replaced_once() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let api = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).unwrap();
                // Answers, keeps the connection open, then closes it.
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let c = Client::new(&api, "t", Duration::from_secs(2));
        assert_eq!(c.call("GET", "/a", &[]).unwrap(), (200, b"ok".to_vec()));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(c.call("GET", "/b", &[]).unwrap(), (200, b"ok".to_vec()));
    }

    #[test]
    fn a_silent_server_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let api = l.local_addr().unwrap().to_string();
        let c = Client::new(&api, "t", Duration::from_millis(200));
        let started = std::time::Instant::now();
        let e = c.call("GET", "/a", &[]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(l);
    }
}
