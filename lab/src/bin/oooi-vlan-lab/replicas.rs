//! Two DNS replicas and two proxy replicas on the VLAN, each at its own
//! address, as the Infra's replicas run: DHCP hands out every DNS address
//! (option 6, in order), the VLAN view answers the control-plane names and
//! aliases with every proxy address (in order), and each DNS replica's VLAN
//! view listens on every DNS address (freebind), as floating addresses need.
//!
//! `oooi-controller render` gives the replicas' addresses from the Infra's
//! `serverIPs` (the lab's Infra lists two of each). Given a manifest with
//! one DNS and one proxy address (`serverIP`), the lab adds a second replica
//! of each at [`SECOND_DNS`] and [`SECOND_PROXY`] and writes the list forms
//! of the configs render writes for two (`dns_servers: [..]`, `proxy: [..]`).

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// The second DNS replica's VLAN address when render gives one.
pub const SECOND_DNS: &str = "192.0.2.13";
/// The second proxy replica's VLAN address when render gives one.
pub const SECOND_PROXY: &str = "192.0.2.14";

/// The replicas' VLAN addresses, in the order clients get them.
#[derive(Clone, Debug)]
pub struct Replicas {
    pub dns: Vec<String>,
    pub proxy: Vec<String>,
}

impl Replicas {
    /// The addresses of the rendered DHCP and DNS configs, with a second
    /// replica of each added when render names only one.
    pub fn of(dhcp_text: &str, dns_text: &str) -> Result<Replicas> {
        let dhcp: Value = serde_saphyr::from_str(dhcp_text).context("rendered DHCP config")?;
        let dns: Value = serde_saphyr::from_str(dns_text).context("rendered DNS config")?;
        let mut dns_ips = strings(&dhcp["dns_servers"]);
        let mut proxy_ips: Vec<String> = Vec::new();
        for c in dns["clusters"].as_array().into_iter().flatten() {
            for a in strings(&c["proxy"]) {
                if !proxy_ips.contains(&a) {
                    proxy_ips.push(a);
                }
            }
        }
        if dns_ips.is_empty() || proxy_ips.is_empty() {
            bail!("render gave no DNS server or no proxy address");
        }
        if dns_ips.len() == 1 {
            dns_ips.push(SECOND_DNS.to_string());
        }
        if proxy_ips.len() == 1 {
            proxy_ips.push(SECOND_PROXY.to_string());
        }
        Ok(Replicas {
            dns: dns_ips,
            proxy: proxy_ips,
        })
    }

    /// The DHCP config with every DNS replica in option 6 (in order) and
    /// the replicas' addresses kept out of the pool.
    pub fn dhcp_config(&self, text: &str) -> Result<String> {
        let mut doc: Value = serde_saphyr::from_str(text).context("DHCP config")?;
        doc["dns_servers"] = self.dns.iter().cloned().map(Value::String).collect();
        let excluded = doc
            .as_object_mut()
            .ok_or_else(|| anyhow!("DHCP config is not a map"))?
            .entry("excluded")
            .or_insert_with(|| Value::Array(Vec::new()));
        let list = excluded
            .as_array_mut()
            .ok_or_else(|| anyhow!("DHCP config: excluded is not a list"))?;
        for a in self.dns.iter().chain(&self.proxy) {
            if !list.iter().any(|v| v == a.as_str()) {
                list.push(Value::String(a.clone()));
            }
        }
        Ok(serde_saphyr::to_string(&doc)?)
    }

    /// The DNS config of replica `i`: every cluster's proxy is the list of
    /// proxy replicas, and the VLAN view listens on every DNS replica's
    /// address with `freebind` (an address the address agent moves here is
    /// answered at once). Replica `i` only checks that `i` exists: every
    /// replica runs the same config.
    pub fn dns_config(&self, text: &str, i: usize) -> Result<String> {
        let mut doc: Value = serde_saphyr::from_str(text).context("DNS config")?;
        if i >= self.dns.len() {
            bail!("no DNS replica {i}");
        }
        let proxies: Value = self.proxy.iter().cloned().map(Value::String).collect();
        for c in doc["clusters"].as_array_mut().into_iter().flatten() {
            c["proxy"] = proxies.clone();
        }
        for v in doc["views"].as_array_mut().into_iter().flatten() {
            if v["kind"] == "vlan" {
                v["listen"] = self
                    .dns
                    .iter()
                    .map(|a| Value::String(format!("{a}:53")))
                    .collect();
                v["freebind"] = Value::Bool(true);
            }
        }
        Ok(serde_saphyr::to_string(&doc)?)
    }
}

/// A string or a list of strings.
fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}
