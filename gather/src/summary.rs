//! `summary.txt`: what a support engineer reads first.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use oooi_vocabulary::labels as keys;
use serde_json::Value;

use crate::components;

/// One answer of a component endpoint: status and body, or why none came.
#[derive(Debug, Clone)]
pub struct EndpointAnswer {
    /// Port.
    pub port: u16,
    /// Path.
    pub path: String,
    /// (HTTP status, body) or the failure.
    pub answer: Result<(u16, String), String>,
}

/// What the summary is made from.
#[derive(Debug, Default)]
pub struct Gathered {
    /// The API server's `gitVersion`.
    pub api_server: Option<String>,
    /// Infras.
    pub infras: Vec<Value>,
    /// InfraClusterAttachments.
    pub attachments: Vec<Value>,
    /// DHCPServers.
    pub dhcp: Vec<Value>,
    /// DNSServers.
    pub dns: Vec<Value>,
    /// ProxyServers.
    pub proxy: Vec<Value>,
    /// oooi's pods.
    pub pods: Vec<Value>,
    /// Endpoint answers per (namespace, pod).
    pub endpoints: BTreeMap<(String, String), Vec<EndpointAnswer>>,
    /// Optional APIs (CRD name, served version or none).
    pub optional_apis: Vec<(String, Option<String>)>,
}

fn key(o: &Value) -> String {
    format!(
        "{}/{}",
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// `Type=Status(Reason)` of each condition, then the message of the first
/// condition that is not as it should be.
fn conditions(o: &Value) -> String {
    let Some(conds) = o["status"]["conditions"].as_array() else {
        return "no status".to_string();
    };
    let mut parts: Vec<String> = conds
        .iter()
        .map(|c| {
            let reason = c["reason"].as_str().unwrap_or("");
            format!(
                "{}={}{}",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                if reason.is_empty() {
                    String::new()
                } else {
                    format!("({reason})")
                }
            )
        })
        .collect();
    let bad = conds.iter().find(|c| {
        let t = c["type"].as_str().unwrap_or("");
        let s = c["status"].as_str().unwrap_or("");
        let negative = matches!(t, "Degraded" | "FilterRejected" | "Progressing");
        (negative && s == "True") || (!negative && s == "False")
    });
    if let Some(m) = bad
        .and_then(|c| c["message"].as_str())
        .filter(|m| !m.is_empty())
    {
        parts.push(format!("- {m}"));
    }
    if let (Some(g), Some(og)) = (
        o["metadata"]["generation"].as_i64(),
        o["status"]["observedGeneration"].as_i64(),
    ) && og < g
    {
        parts.push(format!(
            "(status is of generation {og}, the spec is at {g})"
        ));
    }
    parts.join(" ")
}

fn answer<'a>(answers: &'a [EndpointAnswer], path: &str) -> Option<&'a str> {
    answers
        .iter()
        .find(|a| a.path == path)
        .and_then(|a| a.answer.as_ref().ok())
        .filter(|(code, _)| *code == 200 || (path == "/ready" && *code == 503))
        .map(|(_, body)| body.as_str())
}

fn failures(answers: &[EndpointAnswer]) -> Vec<String> {
    answers
        .iter()
        .filter_map(|a| match &a.answer {
            Ok((code, _)) if (200..300).contains(code) => None,
            Ok((503, _)) if a.path == "/ready" => None,
            Ok((code, _)) => Some(format!("{}:{} HTTP {code}", a.port, a.path)),
            Err(e) => Some(format!("{}:{} {e}", a.port, a.path)),
        })
        .collect()
}

/// The pods of a derived server: those labelled with its name, else (one
/// server per component) those of its component and instance.
fn pods_of<'a>(g: &'a Gathered, server: &Value, component: &str) -> Vec<&'a Value> {
    let name = server["metadata"]["name"].as_str().unwrap_or("");
    let ns = server["metadata"]["namespace"].as_str();
    let in_ns = |p: &&Value| p["metadata"]["namespace"].as_str() == ns;
    let by_server: Vec<&Value> = g
        .pods
        .iter()
        .filter(in_ns)
        .filter(|p| p["metadata"]["labels"][keys::SERVER] == name)
        .collect();
    if !by_server.is_empty() {
        return by_server;
    }
    let instance = server["metadata"]["labels"][keys::INFRA]
        .as_str()
        .unwrap_or(name);
    g.pods
        .iter()
        .filter(in_ns)
        .filter(|p| {
            let l = &p["metadata"]["labels"];
            l[keys::APP_COMPONENT] == component && l[keys::APP_INSTANCE] == instance
        })
        .collect()
}

fn pod_state(p: &Value) -> String {
    let restarts: u64 = p["status"]["containerStatuses"]
        .as_array()
        .map(|s| s.iter().filter_map(|c| c["restartCount"].as_u64()).sum())
        .unwrap_or(0);
    let ready = p["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("?");
    format!(
        "{} ready={ready} restarts={restarts} node={} ip={}",
        p["status"]["phase"].as_str().unwrap_or("?"),
        p["spec"]["nodeName"].as_str().unwrap_or("-"),
        p["status"]["podIP"].as_str().unwrap_or("-"),
    )
}

/// The text of `summary.txt`.
pub fn render(g: &Gathered, errors: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "oooi must-gather {} (API server {})",
        env!("CARGO_PKG_VERSION"),
        g.api_server.as_deref().unwrap_or("unknown")
    );
    let _ = writeln!(
        s,
        "Layout: namespaces/<ns>/<resource>/<name>.yaml, namespaces/<ns>/logs/<pod>/<container>[.previous].log,\n\
         namespaces/<ns>/endpoints/<pod>/<port>-<path>.txt, namespaces/<ns>/events.yaml, cluster-scoped/, errors.txt.\n\
         Secrets are written as name, type and keys only; tokens and credential values are redacted.\n"
    );

    let _ = writeln!(s, "Infras ({}):", g.infras.len());
    for i in &g.infras {
        let _ = writeln!(s, "  {}  {}", key(i), conditions(i));
        if let Some(c) = i["status"]["components"].as_object() {
            for (name, comp) in c {
                let msg = comp["message"].as_str().unwrap_or("");
                let _ = writeln!(
                    s,
                    "    {name}: ready={}{}",
                    comp["ready"],
                    if msg.is_empty() {
                        String::new()
                    } else {
                        format!(" - {msg}")
                    }
                );
            }
        }
    }
    let _ = writeln!(s, "\nInfraClusterAttachments ({}):", g.attachments.len());
    for a in &g.attachments {
        let spec = &a["spec"];
        let workers: Vec<&str> = a["status"]["workerAddresses"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  {}  infra={} hostedCluster={}/{} workers=[{}]  {}",
            key(a),
            spec["infraRef"]["name"].as_str().unwrap_or("?"),
            spec["hostedClusterRef"]["namespace"]
                .as_str()
                .unwrap_or("clusters"),
            spec["hostedClusterRef"]["name"].as_str().unwrap_or("?"),
            workers.join(" "),
            conditions(a)
        );
    }

    let _ = writeln!(s, "\nDHCPServers ({}):", g.dhcp.len());
    for d in &g.dhcp {
        let _ = writeln!(s, "  {}  {}", key(d), conditions(d));
        if let Some(line) = pools_line(&d["status"]["pools"]) {
            let _ = writeln!(s, "    {line}");
        }
        for p in pods_of(g, d, "dhcp") {
            let _ = writeln!(s, "    pod {}  {}", key(p), endpoint_line(g, p, "dhcp"));
        }
    }
    let _ = writeln!(s, "\nDNSServers ({}):", g.dns.len());
    for d in &g.dns {
        let _ = writeln!(s, "  {}  {}", key(d), conditions(d));
        for p in pods_of(g, d, "dns") {
            let _ = writeln!(s, "    pod {}  {}", key(p), endpoint_line(g, p, "dns"));
        }
    }
    let _ = writeln!(s, "\nProxyServers ({}):", g.proxy.len());
    for d in &g.proxy {
        let st = &d["status"];
        let _ = writeln!(
            s,
            "  {}  routesGeneration={} routesDigest={}  {}",
            key(d),
            st["routesGeneration"],
            st["routesDigest"].as_str().unwrap_or("?"),
            conditions(d)
        );
        for p in pods_of(g, d, "proxy") {
            let _ = writeln!(s, "    pod {}  {}", key(p), endpoint_line(g, p, "proxy"));
        }
    }

    let _ = writeln!(s, "\nPods ({}):", g.pods.len());
    for p in &g.pods {
        let _ = writeln!(s, "  {}  {}", key(p), pod_state(p));
    }

    let _ = writeln!(s, "\nOptional APIs:");
    for (name, version) in &g.optional_apis {
        let _ = writeln!(
            s,
            "  {name}: {}",
            version
                .as_deref()
                .map_or("not served".to_string(), |v| format!("served, {v}"))
        );
    }

    let _ = writeln!(
        s,
        "\nErrors: {}{}",
        errors.len(),
        if errors.is_empty() {
            ""
        } else {
            " (see errors.txt)"
        }
    );
    s
}

fn endpoint_line(g: &Gathered, pod: &Value, component: &str) -> String {
    let k = (
        pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
    );
    let state = pod_state(pod);
    let Some(answers) = g.endpoints.get(&k) else {
        return format!("{state}; endpoints not read (pod not running)");
    };
    let line = match component {
        "dhcp" => answer(answers, "/metrics")
            .map(|m| components::dhcp_line(m, answer(answers, "/healthz")))
            .unwrap_or_else(|| "no metrics".to_string()),
        "dns" => answer(answers, "/metrics")
            .map(components::dns_line)
            .unwrap_or_else(|| "no metrics".to_string()),
        "proxy" => {
            let server = g.proxy.iter().find(|s| {
                s["metadata"]["namespace"] == pod["metadata"]["namespace"]
                    && pods_of(g, s, "proxy")
                        .iter()
                        .any(|p| p["metadata"]["name"] == pod["metadata"]["name"])
            });
            components::proxy_line(
                answer(answers, "/v1/routes"),
                answer(answers, "/ready"),
                answer(answers, "/metrics"),
                server.map_or(&Value::Null, |s| &s["status"]),
            )
        }
        _ => String::new(),
    };
    let failed = failures(answers);
    if failed.is_empty() {
        format!("{state}; {line}")
    } else {
        format!("{state}; {line}; unanswered: {}", failed.join(", "))
    }
}

/// A DHCPServer's pool figures (its `status.pools`, from the server's lease
/// inventory), on one line: totals, use, the fullest pool, the refusals.
pub fn pools_line(p: &Value) -> Option<String> {
    p.as_object()?;
    let n = |k: &str| p[k].as_i64().unwrap_or(0);
    let mut line = format!(
        "pools: total={} assigned={} offered={} free={} quarantined={} reserved={} heldBack={} used={}%",
        n("total"),
        n("assigned"),
        n("offered"),
        n("free"),
        n("quarantined"),
        n("reserved"),
        n("heldBack"),
        n("utilisationPercent"),
    );
    if let Some(first) = p["pools"].as_array().and_then(|a| a.first()) {
        let _ = write!(
            line,
            "; fullest {} {}/{} free",
            first["range"].as_str().unwrap_or("?"),
            first["free"],
            first["total"]
        );
    }
    if n("morePools") > 0 {
        let _ = write!(line, " (+{} pools)", n("morePools"));
    }
    if let Some(r) = p["refusals"].as_object().filter(|r| !r.is_empty()) {
        let parts: Vec<String> = r.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = write!(line, "; refusals {}", parts.join(" "));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_dhcp_servers_pool_figures_fit_one_line() {
        let p = json!({
            "total": 80, "assigned": 79, "offered": 0, "free": 0, "quarantined": 1,
            "reserved": 0, "heldBack": 0, "utilisationPercent": 100,
            "pools": [{"range": "192.0.2.100-192.0.2.179", "total": 80, "assigned": 79,
                       "free": 0, "quarantined": 1, "reserved": 0, "utilisationPercent": 100}],
            "morePools": 2,
            "refusals": {"pool_exhausted": 12, "probe_conflict": 1}
        });
        assert_eq!(
            pools_line(&p).unwrap(),
            "pools: total=80 assigned=79 offered=0 free=0 quarantined=1 reserved=0 heldBack=0 used=100%; \
             fullest 192.0.2.100-192.0.2.179 0/80 free (+2 pools); refusals pool_exhausted=12 probe_conflict=1"
        );
        assert_eq!(pools_line(&Value::Null), None);
    }

    #[test]
    fn conditions_show_the_message_of_the_one_at_fault() {
        let o = json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2, "conditions": [
            {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "spec.networkConfig.gateway: 10.0.0.1 is outside 192.0.2.0/24"},
            {"type": "Degraded", "status": "True", "reason": "InvalidSpec"},
        ]}});
        let line = conditions(&o);
        assert!(
            line.starts_with(
                "Ready=False(InvalidSpec) Degraded=True(InvalidSpec) - spec.networkConfig.gateway"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("(status is of generation 2, the spec is at 3)"),
            "{line}"
        );
    }
}
