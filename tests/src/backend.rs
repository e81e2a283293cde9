//! TLS backends standing in for hosted control-plane services.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A TLS server standing in for one control-plane service. After the
/// handshake it writes `backend=<name>\n`, so a client knows who answered;
/// its certificate's subject CN is the name as well.
pub struct Backend {
    /// The name it announces (and its certificate CN).
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    /// Starts a backend named `name` on `ip` (a free port), in the current
    /// tokio runtime; it stops when dropped.
    pub async fn start(name: &str, ip: IpAddr) -> Result<Backend> {
        Backend::start_on(name, SocketAddr::new(ip, 0)).await
    }

    /// Starts a backend named `name` on `addr` (port 0 picks a free one), in
    /// the current tokio runtime; it stops when dropped.
    pub async fn start_on(name: &str, addr: SocketAddr) -> Result<Backend> {
        let mut params = rcgen::CertificateParams::new(vec![format!("{name}.backend.test")])?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let certs = vec![cert.der().clone()];
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| anyhow!("{e}"))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("backend {name}: bind {addr}"))?;
        let addr = listener.local_addr()?;
        let banner = format!("backend={name}\n");
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                // Without it, Nagle and delayed ACKs add ~40 ms to the banner.
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let banner = banner.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = tls.write_all(banner.as_bytes()).await;
                        let _ = tls.flush().await;
                        // Echo until the client closes, for long-lived connections.
                        let mut buf = [0u8; 1024];
                        while let Ok(n) = tls.read(&mut buf).await {
                            if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        // Answer the proxy's close with a reset, so its
                        // upstream sockets end without TIME_WAIT (a benchmark
                        // would otherwise pile up tens of thousands).
                        let _ = tls.get_ref().0.set_zero_linger();
                    }
                });
            }
        });
        Ok(Backend {
            name: name.to_string(),
            addr,
            task,
        })
    }
}
