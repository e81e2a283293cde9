//! A kube client for a hosted cluster.
//!
//! HyperShift writes the admin kubeconfig of a hosted cluster into a Secret
//! (key `kubeconfig`) named by the HostedCluster's `status.kubeconfig`. Its
//! server is the public API name, which the management cluster may not
//! resolve or route to; the control-plane API Service
//! (`kube-apiserver.<control-plane namespace>.svc:6443`) is always reachable
//! from inside. So the client connects there, and verifies the server
//! certificate against the kubeconfig's original name (the kubeconfig's
//! `tls-server-name`, else its server's host), which the certificate carries.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Key of the kubeconfig in HyperShift's admin kubeconfig Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Port of the control-plane API Service.
pub const API_SERVICE_PORT: u16 = 6443;

/// Why a kubeconfig cannot make a client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClientError {
    /// Not UTF-8 or not a kubeconfig.
    #[error("kubeconfig: {0}")]
    Parse(String),
    /// The kubeconfig has no usable cluster, user or server.
    #[error("kubeconfig: {0}")]
    Invalid(String),
}

/// The API URL of a hosted cluster from inside the management cluster.
pub fn api_service_url(cp_namespace: &str) -> String {
    format!("https://kube-apiserver.{cp_namespace}.svc:{API_SERVICE_PORT}")
}

/// The client configuration for a hosted cluster: the admin kubeconfig's
/// credentials and CA, the control-plane API Service as URL, the original
/// server name for TLS. No I/O (the kubeconfig must embed its data, as
/// HyperShift's does).
pub async fn config_for(kubeconfig: &[u8], cp_namespace: &str) -> Result<Config, ClientError> {
    let text = std::str::from_utf8(kubeconfig)
        .map_err(|e| ClientError::Parse(format!("not UTF-8: {e}")))?;
    let kc = Kubeconfig::from_yaml(text).map_err(|e| ClientError::Parse(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    let original = config
        .cluster_url
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
        .ok_or_else(|| ClientError::Invalid("clusters[].cluster.server has no host".into()))?;
    if config.tls_server_name.is_none() {
        config.tls_server_name = Some(original);
    }
    config.cluster_url = api_service_url(cp_namespace).parse().map_err(|e| {
        ClientError::Invalid(format!("control-plane namespace {cp_namespace:?}: {e}"))
    })?;
    // A hosted API that is gone should fail a reconcile quickly.
    config.connect_timeout = Some(std::time::Duration::from_secs(5));
    Ok(config)
}

/// A client for the hosted cluster ([`config_for`], then the TLS stack).
pub async fn connect(kubeconfig: &[u8], cp_namespace: &str) -> Result<Client, String> {
    let config = config_for(kubeconfig, cp_namespace)
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| format!("hosted client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA certificate (PEM, base64), as HyperShift embeds one.
    const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJlRENDQVIrZ0F3SUJBZ0lVYjhpQjA2RTU0ZEVpd2lWc1hZM0xwNHZrTUI0d0NnWUlLb1pJemowRUF3SXcKRWpFUU1BNEdBMVVFQXd3SGRHVnpkQzFqWVRBZUZ3MHlOakV5TURNeE1ERTBOVFJhRncwek5qRXhNekF4TURFMApOVFJhTUJJeEVEQU9CZ05WQkFNTUIzUmxjM1F0WTJFd1dUQVRCZ2NxaGtqT1BRSUJCZ2dxaGtqT1BRTUJCd05DCkFBU09PcHpsUnd5eFhabUhNOUFSVnd4OEF5S0hOeWJNaER5Tk5ZNXA0QXhNcGlLNUNSTW12SHY0a1FRZ3U3RHoKSURJN3poVEp3QTZkTmY0ZHBlWGZSL0ZObzFNd1VUQWRCZ05WSFE0RUZnUVVteXdkb21UdnhtaUVvR0grVGhERgphU0pvOVdRd0h3WURWUjBqQkJnd0ZvQVVteXdkb21UdnhtaUVvR0grVGhERmFTSm85V1F3RHdZRFZSMFRBUUgvCkJBVXdBd0VCL3pBS0JnZ3Foa2pPUFFRREFnTkhBREJFQWlCcWhSbWpheVF3NHNTZEkzV1h0VCsrREJFZEJKclUKZjJKa013YUV6amZmWlFJZ0VzOWVZaFFudStIQ0Z6Ykt3Zi9BU1JxeHhCdXNieVhmUHpWRmoreFVkcmc9Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";

    fn kubeconfig(server: &str, extra_cluster: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster:
    server: {server}
    certificate-authority-data: {CA}
{extra_cluster}
contexts:
- name: admin
  context:
    cluster: c1
    user: admin
current-context: admin
users:
- name: admin
  user:
    token: secret-token
"
        )
    }

    #[tokio::test]
    async fn the_client_targets_the_api_service_with_the_original_server_name() {
        let kc = kubeconfig("https://api.c1.example.com:6443", "");
        let config = config_for(kc.as_bytes(), "clusters-c1").await.unwrap();
        assert_eq!(
            config.cluster_url.to_string(),
            "https://kube-apiserver.clusters-c1.svc:6443/"
        );
        assert_eq!(
            config.tls_server_name.as_deref(),
            Some("api.c1.example.com")
        );
        assert_eq!(
            config.root_cert.as_ref().map(|c| c.len()),
            Some(1),
            "CA kept"
        );
        assert!(!config.accept_invalid_certs);
        assert!(config.auth_info.token.is_some(), "credentials kept");
    }

    #[tokio::test]
    async fn an_explicit_tls_server_name_and_an_ip_server_are_kept() {
        let kc = kubeconfig(
            "https://192.0.2.10:6443",
            "    tls-server-name: api.c1.internal",
        );
        let config = config_for(kc.as_bytes(), "ns").await.unwrap();
        assert_eq!(config.tls_server_name.as_deref(), Some("api.c1.internal"));
        let kc = kubeconfig("https://192.0.2.10:6443", "");
        let config = config_for(kc.as_bytes(), "ns").await.unwrap();
        assert_eq!(config.tls_server_name.as_deref(), Some("192.0.2.10"));
        assert_eq!(
            config.cluster_url.to_string(),
            "https://kube-apiserver.ns.svc:6443/"
        );
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_is_an_error_not_a_panic() {
        assert!(matches!(
            config_for(b"\xff\xfe", "ns").await,
            Err(ClientError::Parse(_))
        ));
        assert!(matches!(
            config_for(b"clusters: [", "ns").await,
            Err(ClientError::Parse(_))
        ));
        let no_context = "apiVersion: v1\nkind: Config\nclusters: []\n";
        assert!(matches!(
            config_for(no_context.as_bytes(), "ns").await,
            Err(ClientError::Invalid(_))
        ));
    }
}
