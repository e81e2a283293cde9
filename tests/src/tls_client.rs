//! TLS clients that connect through the proxy with a chosen SNI from a
//! chosen source address, and read which backend answered.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// Accepts any server certificate: the backends are self-signed test servers,
/// and the test identifies them by what they send, not by trust.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    Arc::new(cfg)
}

async fn connect_from(source: Option<IpAddr>, target: SocketAddr) -> Result<TcpStream> {
    let sock = if target.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(src) = source {
        sock.bind(SocketAddr::new(src, 0))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(5), sock.connect(target)).await??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Opens a TLS connection through the proxy with the given SNI (None sends no
/// SNI) from `source`, and returns the name of the backend that answered.
/// An error means the connection was refused or reset.
pub async fn tls_probe(
    target: SocketAddr,
    sni: Option<&str>,
    source: Option<IpAddr>,
) -> Result<String> {
    let (name, _) = tls_open(target, sni, source).await?;
    Ok(name)
}

/// Like [`tls_probe`] but keeps the connection open for further use.
pub async fn tls_open(
    target: SocketAddr,
    sni: Option<&str>,
    source: Option<IpAddr>,
) -> Result<(String, tokio_rustls::client::TlsStream<TcpStream>)> {
    let tcp = connect_from(source, target).await?;
    tls_over(tcp, sni).await
}

/// TLS over a connected `tcp` with the given SNI (None sends no SNI): the
/// name of the backend that answered, and the connection. A client that
/// dials itself (its own address order and retries) connects first, then
/// calls this.
pub async fn tls_over(
    tcp: TcpStream,
    sni: Option<&str>,
) -> Result<(String, tokio_rustls::client::TlsStream<TcpStream>)> {
    let target = tcp.peer_addr()?;
    let mut cfg = (*client_config()).clone();
    let server_name = match sni {
        Some(s) => rustls::pki_types::ServerName::try_from(s.to_string())?,
        None => {
            // An IP server name makes rustls send no SNI at all.
            cfg.enable_sni = false;
            rustls::pki_types::ServerName::IpAddress(target.ip().into())
        }
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(server_name, tcp))
        .await
        .map_err(|_| anyhow!("TLS handshake timed out"))??;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while tokio::time::timeout(Duration::from_secs(5), tls.read(&mut b)).await?? == 1 {
        if b[0] == b'\n' {
            break;
        }
        line.push(b[0]);
    }
    let line = String::from_utf8(line)?;
    let name = line
        .strip_prefix("backend=")
        .ok_or_else(|| anyhow!("unexpected banner {line:?}"))?
        .to_string();
    Ok((name, tls))
}
