//! Plugin configuration, parsed once per root context.

use serde::Deserialize;

/// Default bound on a plain-HTTP request head.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 8192;
/// Default time a plain-HTTP client has to send its request head.
pub const DEFAULT_HEAD_TIMEOUT_MS: u64 = 5000;

/// The plugin configuration (Envoy's `configuration` StringValue, JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The per-connection router on a TLS listener.
    Network {
        /// The listener port, which selects the routes that apply.
        port: u16,
    },
    /// The per-connection router on a plain-HTTP listener: decides by the
    /// Host header of the first request.
    Http {
        /// The listener port, which selects the routes that apply.
        port: u16,
        /// Longest request head accepted.
        max_head_bytes: usize,
        /// Time allowed for the head to arrive.
        head_timeout_ms: u64,
    },
    /// The refusing half of a TLS listener: Envoy runs it on the filter
    /// chain of connections whose transport protocol is not `tls` (plain
    /// bytes, plain HTTP, SSLv2, or nothing sent within the listener's
    /// timeout). Every connection is closed and counted as `not_tls`.
    NotTls {
        /// The listener port, for the log line.
        port: u16,
    },
    /// The readiness listener: `GET /ready` alone, answered from the
    /// request head.
    Ready,
    /// The table API.
    Api {
        /// The bearer token a push must carry.
        push_token: String,
        /// The static clusters of this proxy: a pushed route may name only
        /// these as a `cluster` upstream.
        clusters: Vec<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    role: String,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    push_token: Option<String>,
    #[serde(default)]
    max_head_bytes: Option<usize>,
    #[serde(default)]
    head_timeout_ms: Option<u64>,
    #[serde(default)]
    clusters: Option<Vec<String>>,
}

impl PluginConfig {
    pub fn parse(raw: &[u8]) -> Result<PluginConfig, String> {
        let raw: Raw = serde_json::from_slice(raw)
            .map_err(|e| format!("configuration is not valid JSON: {e}"))?;
        let port = |role: &str| match raw.port {
            Some(port) if port > 0 => Ok(port),
            _ => Err(format!("role {role} needs `port` (1-65535)")),
        };
        if raw.role != "http" && (raw.max_head_bytes.is_some() || raw.head_timeout_ms.is_some()) {
            return Err("`max_head_bytes` and `head_timeout_ms` apply to role http only".into());
        }
        if raw.role != "api" && raw.clusters.is_some() {
            return Err("`clusters` applies to role api only".into());
        }
        let role = match raw.role.as_str() {
            "network" => Role::Network {
                port: port("network")?,
            },
            "http" => {
                let max_head_bytes = raw.max_head_bytes.unwrap_or(DEFAULT_MAX_HEAD_BYTES);
                if !(256..=65536).contains(&max_head_bytes) {
                    return Err(format!(
                        "`max_head_bytes` {max_head_bytes}: expected 256-65536"
                    ));
                }
                let head_timeout_ms = raw.head_timeout_ms.unwrap_or(DEFAULT_HEAD_TIMEOUT_MS);
                if !(100..=300_000).contains(&head_timeout_ms) {
                    return Err(format!(
                        "`head_timeout_ms` {head_timeout_ms}: expected 100-300000"
                    ));
                }
                Role::Http {
                    port: port("http")?,
                    max_head_bytes,
                    head_timeout_ms,
                }
            }
            "not_tls" => Role::NotTls {
                port: port("not_tls")?,
            },
            "ready" => {
                if raw.port.is_some() || raw.push_token.is_some() {
                    return Err("role ready takes no `port` or `push_token`".into());
                }
                Role::Ready
            }
            "api" => match raw.push_token {
                Some(t) if t.len() >= 16 => Role::Api {
                    push_token: t,
                    clusters: raw.clusters.unwrap_or_default(),
                },
                Some(_) => return Err("`push_token` must be at least 16 characters".into()),
                None => return Err("role api needs `push_token`".into()),
            },
            other => {
                return Err(format!(
                    "unknown role {other:?} (expected network, not_tls, http, ready or api)"
                ));
            }
        };
        Ok(PluginConfig { role })
    }

    pub fn describe(&self) -> String {
        match &self.role {
            Role::Network { port } => format!("role=network port={port}"),
            Role::Http {
                port,
                max_head_bytes,
                head_timeout_ms,
            } => format!(
                "role=http port={port} max_head_bytes={max_head_bytes} head_timeout_ms={head_timeout_ms}"
            ),
            Role::NotTls { port } => format!("role=not_tls port={port}"),
            Role::Ready => "role=ready".to_string(),
            Role::Api { clusters, .. } => format!("role=api clusters={}", clusters.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_with_defaults_and_bounds() {
        assert_eq!(
            PluginConfig::parse(br#"{"role":"network","port":443}"#)
                .unwrap()
                .role,
            Role::Network { port: 443 }
        );
        assert_eq!(
            PluginConfig::parse(br#"{"role":"http","port":80}"#)
                .unwrap()
                .role,
            Role::Http {
                port: 80,
                max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
                head_timeout_ms: DEFAULT_HEAD_TIMEOUT_MS
            }
        );
        assert_eq!(
            PluginConfig::parse(br#"{"role":"not_tls","port":6443}"#)
                .unwrap()
                .role,
            Role::NotTls { port: 6443 }
        );
        assert_eq!(
            PluginConfig::parse(br#"{"role":"ready"}"#).unwrap().role,
            Role::Ready
        );
        assert_eq!(
            PluginConfig::parse(
                br#"{"role":"api","push_token":"0123456789abcdef","clusters":["c1_api"]}"#
            )
            .unwrap()
            .role,
            Role::Api {
                push_token: "0123456789abcdef".into(),
                clusters: vec!["c1_api".into()]
            }
        );
        assert_eq!(
            PluginConfig::parse(
                br#"{"role":"http","port":80,"max_head_bytes":1024,"head_timeout_ms":500}"#
            )
            .unwrap()
            .role,
            Role::Http {
                port: 80,
                max_head_bytes: 1024,
                head_timeout_ms: 500
            }
        );
    }

    #[test]
    fn bad_configurations_name_the_field() {
        for (raw, field) in [
            (r#"{"role":"http"}"#, "port"),
            (
                r#"{"role":"http","port":80,"max_head_bytes":10}"#,
                "max_head_bytes",
            ),
            (
                r#"{"role":"http","port":80,"head_timeout_ms":0}"#,
                "head_timeout_ms",
            ),
            (
                r#"{"role":"network","port":443,"max_head_bytes":1024}"#,
                "max_head_bytes",
            ),
            (r#"{"role":"api","push_token":"short"}"#, "push_token"),
            (r#"{"role":"tcp","port":1}"#, "role"),
            (r#"{"role":"not_tls"}"#, "port"),
            (r#"{"role":"network","port":443,"clusters":[]}"#, "clusters"),
            (
                r#"{"role":"ready","push_token":"0123456789abcdef"}"#,
                "push_token",
            ),
            (r#"{"role":"http","port":80,"extra":1}"#, "extra"),
        ] {
            let e = PluginConfig::parse(raw.as_bytes()).unwrap_err();
            assert!(e.contains(field), "{raw}: {e}");
        }
    }
}
