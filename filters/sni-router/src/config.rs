//! Plugin configuration, parsed once per root context.

use serde::Deserialize;

/// The plugin configuration (Envoy's `configuration` StringValue, JSON).
#[derive(Debug, Clone)]
pub struct PluginConfig {
    pub role: Role,
}

#[derive(Debug, Clone)]
pub enum Role {
    /// The per-connection router on a TLS listener.
    Network {
        /// The listener port, which selects the routes that apply.
        port: u16,
    },
    /// The table API.
    Api {
        /// The bearer token a push must carry.
        push_token: String,
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
}

impl PluginConfig {
    pub fn parse(raw: &[u8]) -> Result<PluginConfig, String> {
        let raw: Raw = serde_json::from_slice(raw)
            .map_err(|e| format!("configuration is not valid JSON: {e}"))?;
        let role = match raw.role.as_str() {
            "network" => match raw.port {
                Some(port) if port > 0 => Role::Network { port },
                _ => return Err("role network needs `port` (1-65535)".into()),
            },
            "api" => match raw.push_token {
                Some(t) if t.len() >= 16 => Role::Api { push_token: t },
                Some(_) => return Err("`push_token` must be at least 16 characters".into()),
                None => return Err("role api needs `push_token`".into()),
            },
            other => return Err(format!("unknown role {other:?} (expected network or api)")),
        };
        Ok(PluginConfig { role })
    }

    pub fn describe(&self) -> String {
        match &self.role {
            Role::Network { port } => format!("role=network port={port}"),
            Role::Api { .. } => "role=api".to_string(),
        }
    }
}
