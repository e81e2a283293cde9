//! The components' own HTTP endpoints and what a gather reads from them.
//!
//! Each is reached through the API server's pod proxy
//! (`pods/<name>:<port>/proxy/<path>`), so the gather pod needs no network
//! path to the component pods; the ports are found by name in the pod spec:
//!
//! | component | port (name) | paths |
//! | --- | --- | --- |
//! | `oooi-dhcp` | 9067 (`http`) | `/healthz` (the pair's state and why), `/metrics` (lease gauges, pair state, clock skew) |
//! | `oooi-dns` | 9153 (`http`) | `/healthz`, `/metrics` (queries per view, upstream and health-check state) |
//! | Envoy + filter | 9445 (`push`) | `/ready`, `/v1/routes` (the table's generation, digest, size, filter build) |
//! | Envoy + filter | 9102 (`http`) | `/metrics` (the filter's counters, `oooi_sni_router_table_generation`) |
//!
//! Reading needs no token; nothing here writes to a component.

use std::collections::BTreeMap;

use serde_json::Value;

/// One endpoint of a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The container port's name in the pod spec.
    pub port_name: &'static str,
    /// The port when the pod spec names none (the controller's default).
    pub default_port: u16,
    /// Path, query included.
    pub path: &'static str,
}

const fn ep(port_name: &'static str, default_port: u16, path: &'static str) -> Endpoint {
    Endpoint {
        port_name,
        default_port,
        path,
    }
}

const DHCP: [Endpoint; 2] = [ep("http", 9067, "/healthz"), ep("http", 9067, "/metrics")];
const DNS: [Endpoint; 2] = [ep("http", 9153, "/healthz"), ep("http", 9153, "/metrics")];
const PROXY: [Endpoint; 3] = [
    ep("push", 9445, "/ready"),
    ep("push", 9445, "/v1/routes"),
    ep("http", 9102, "/metrics"),
];

/// The endpoints of a pod of `component` (`app.kubernetes.io/component`).
pub fn endpoints(component: &str) -> &'static [Endpoint] {
    match component {
        "dhcp" => &DHCP,
        "dns" => &DNS,
        "proxy" => &PROXY,
        _ => &[],
    }
}

/// The `app.kubernetes.io/component` label of an object.
pub fn component_of(object: &Value) -> Option<&str> {
    object["metadata"]["labels"][oooi_vocabulary::labels::APP_COMPONENT].as_str()
}

/// The number of the container port named `name` in a pod.
pub fn port_of(pod: &Value, name: &str) -> Option<u16> {
    pod["spec"]["containers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
}

/// The pod proxy path of `path` on `port` of a pod.
pub fn proxy_path(namespace: &str, pod: &str, port: u16, path: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy{path}")
}

/// One sample of a Prometheus text exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// The samples of a Prometheus text exposition (comments and lines that do
/// not parse are skipped).
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_sample)
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (head, rest) = match line.find('{') {
        Some(open) => {
            let close = line[open..].rfind('}')? + open;
            (&line[..close + 1], &line[close + 1..])
        }
        None => line.split_once(' ')?,
    };
    let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
        None => (head, BTreeMap::new()),
    };
    Some(Sample {
        name: name.trim().to_string(),
        labels,
        value,
    })
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((k, v)) = rest.split_once("=\"") {
        let mut end = 0;
        let bytes = v.as_bytes();
        while end < bytes.len() && !(bytes[end] == b'"' && (end == 0 || bytes[end - 1] != b'\\')) {
            end += 1;
        }
        out.insert(
            k.trim_start_matches(',').trim().to_string(),
            v[..end].to_string(),
        );
        rest = v.get(end + 1..).unwrap_or("");
    }
    out
}

/// The value of the first sample whose name ends with `suffix` (Envoy
/// prefixes the filter's metrics).
fn value(samples: &[Sample], suffix: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name.ends_with(suffix))
        .map(|s| s.value)
}

/// The name of an `oooi_dhcp_pair_state` value.
pub fn pair_state_name(v: f64) -> &'static str {
    match v as i64 {
        0 => "syncing",
        1 => "load balancing",
        2 => "partner down",
        3 => "communication recovery",
        4 => "unauthorized",
        _ => "unknown",
    }
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

/// A DHCP server's lease summary and pair state, from its `/metrics` and
/// `/healthz` answers.
pub fn dhcp_line(metrics: &str, healthz: Option<&str>) -> String {
    let s = samples(metrics);
    let mut parts = Vec::new();
    let leases: Vec<String> = ["active", "free", "offered", "declined"]
        .iter()
        .filter_map(|k| {
            value(&s, &format!("oooi_dhcp_leases_{k}")).map(|v| format!("{k}={}", num(v)))
        })
        .collect();
    if !leases.is_empty() {
        parts.push(format!("leases {}", leases.join(" ")));
    }
    if let Some(u) = value(&s, "oooi_dhcp_pool_utilisation_ratio") {
        parts.push(format!("pool used {:.0}%", u * 100.0));
    }
    match healthz.and_then(|h| h.lines().find_map(|l| l.strip_prefix("pair: "))) {
        Some(pair) => parts.push(format!("pair {pair}")),
        None => {
            if let Some(p) = value(&s, "oooi_dhcp_pair_state") {
                parts.push(format!("pair state {} ({})", num(p), pair_state_name(p)));
            }
        }
    }
    if let Some(skew) = value(&s, "oooi_dhcp_pair_clock_skew_seconds") {
        parts.push(format!("clock skew {} s", num(skew)));
    }
    if parts.is_empty() {
        "no oooi_dhcp metrics in the answer".to_string()
    } else {
        parts.join(", ")
    }
}

/// A DNS replica's views (with the queries each answered), upstreams that
/// count as down and proxy addresses failing their health check, from its
/// `/metrics` answer.
pub fn dns_line(metrics: &str) -> String {
    let s = samples(metrics);
    let mut views: BTreeMap<String, f64> = BTreeMap::new();
    for x in s.iter().filter(|x| x.name == "oooi_dns_queries_total") {
        if let Some(v) = x.labels.get("view") {
            *views.entry(v.clone()).or_default() += x.value;
        }
    }
    // `none`: queries that arrived on no configured listener.
    let none = views.remove("none");
    let mut parts = vec![if views.is_empty() {
        "no views".to_string()
    } else {
        format!(
            "views {}",
            views
                .iter()
                .map(|(v, n)| format!("{v} ({} queries)", num(*n)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }];
    if let Some(n) = none.filter(|n| *n > 0.0) {
        parts.push(format!("{} queries on no view", num(n)));
    }
    let down: Vec<String> = s
        .iter()
        .filter(|x| x.name == "oooi_dns_upstream_up" && x.value == 0.0)
        .filter_map(|x| x.labels.get("upstream").cloned())
        .collect();
    if !down.is_empty() {
        parts.push(format!("upstreams down: {}", down.join(" ")));
    }
    let failing: Vec<String> = s
        .iter()
        .filter(|x| x.name == "oooi_dns_health_up" && x.value == 0.0)
        .filter_map(|x| x.labels.get("address").cloned())
        .collect();
    if !failing.is_empty() {
        parts.push(format!("proxy addresses left out: {}", failing.join(" ")));
    }
    parts.join(", ")
}

/// A proxy replica's table generation and digest (from `/v1/routes`, else
/// `/ready`, else the generation gauge of `/metrics`), compared with what
/// its ProxyServer's status says it should hold.
pub fn proxy_line(
    routes: Option<&str>,
    ready: Option<&str>,
    metrics: Option<&str>,
    status: &Value,
) -> String {
    let doc: Option<Value> = routes
        .or(ready)
        .and_then(|t| serde_json::from_str(t).ok())
        .filter(|v: &Value| v.is_object());
    let (generation, digest) = match &doc {
        Some(d) => (
            d["generation"].as_u64(),
            d["digest"].as_str().map(str::to_string),
        ),
        None => (
            metrics
                .and_then(|m| value(&samples(m), "oooi_sni_router_table_generation"))
                .map(|g| g as u64),
            None,
        ),
    };
    let mut parts = vec![format!(
        "table generation {} digest {}",
        generation.map_or("?".to_string(), |g| g.to_string()),
        digest.as_deref().unwrap_or("?")
    )];
    if let Some(d) = &doc {
        if let Some(n) = d["routes"].as_u64() {
            parts.push(format!("{n} routes"));
        }
        if let Some(b) = d["build"].as_str() {
            parts.push(format!("filter build {b}"));
        }
        if let Some(r) = d["ready"].as_bool() {
            parts.push(format!("ready {r}"));
        }
    }
    let want_gen = status["routesGeneration"].as_u64();
    let want_digest = status["routesDigest"].as_str();
    match (want_gen, generation) {
        (Some(w), Some(g)) => {
            let digest_ok = match (want_digest, digest.as_deref()) {
                (Some(w), Some(d)) => w == d,
                _ => true,
            };
            if w == g && digest_ok {
                parts.push("in sync with its ProxyServer".to_string());
            } else {
                parts.push(format!(
                    "NOT in sync: its ProxyServer wants generation {w} digest {}",
                    want_digest.unwrap_or("?")
                ));
            }
        }
        (Some(w), None) => parts.push(format!("its ProxyServer wants generation {w}")),
        _ => {}
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ports_are_found_by_name_in_the_pod_spec() {
        let pod = json!({"spec": {"containers": [
            {"name": "agent"},
            {"name": "envoy", "ports": [{"name": "push", "containerPort": 9555}]},
        ]}});
        assert_eq!(port_of(&pod, "push"), Some(9555));
        assert_eq!(port_of(&pod, "http"), None);
        assert_eq!(
            proxy_path("oooi", "p-1", 9555, "/v1/routes"),
            "/api/v1/namespaces/oooi/pods/p-1:9555/proxy/v1/routes"
        );
    }

    #[test]
    fn dhcp_line_names_leases_and_pair_state() {
        let m = "# HELP x\noooi_dhcp_leases_active 3\noooi_dhcp_leases_free 47\n\
                 oooi_dhcp_pool_utilisation_ratio 0.06\noooi_dhcp_pair_state 2\n";
        let line = dhcp_line(m, None);
        assert!(line.contains("leases active=3 free=47"), "{line}");
        assert!(line.contains("pool used 6%"), "{line}");
        assert!(line.contains("pair state 2 (partner down)"), "{line}");
        let line = dhcp_line(m, Some("ok\npair: load-balancing (peer answers)\n"));
        assert!(
            line.contains("pair load-balancing (peer answers)"),
            "{line}"
        );
    }

    #[test]
    fn dns_line_lists_views_with_their_queries() {
        let m = "oooi_dns_queries_total{view=\"vlan-192.0.2.3\",qtype=\"A\",rcode=\"NOERROR\"} 5\n\
                 oooi_dns_queries_total{view=\"vlan-192.0.2.3\",qtype=\"AAAA\",rcode=\"NOERROR\"} 1\n\
                 oooi_dns_queries_total{view=\"pod\",qtype=\"A\",rcode=\"NOERROR\"} 0\n\
                 oooi_dns_queries_total{view=\"none\",qtype=\"A\",rcode=\"REFUSED\"} 2\n\
                 oooi_dns_upstream_up{upstream=\"192.0.2.1:53\"} 0\n";
        let line = dns_line(m);
        assert_eq!(
            line,
            "views pod (0 queries), vlan-192.0.2.3 (6 queries), 2 queries on no view, \
             upstreams down: 192.0.2.1:53"
        );
    }

    #[test]
    fn proxy_line_compares_the_replica_with_its_proxyserver() {
        let status = json!({"routesGeneration": 3, "routesDigest": "sha256:aa"});
        let routes = r#"{"generation":3,"digest":"sha256:aa","routes":12,"build":"dev"}"#;
        let line = proxy_line(Some(routes), None, None, &status);
        assert!(
            line.contains("table generation 3 digest sha256:aa"),
            "{line}"
        );
        assert!(line.contains("in sync with its ProxyServer"), "{line}");
        let stale = r#"{"generation":2,"digest":"sha256:bb"}"#;
        let line = proxy_line(Some(stale), None, None, &status);
        assert!(line.contains("NOT in sync"), "{line}");
        // The table API closed to the pod proxy: the generation from /metrics.
        let line = proxy_line(
            None,
            None,
            Some("envoy_oooi_sni_router_table_generation 3\n"),
            &status,
        );
        assert!(line.contains("table generation 3 digest ?"), "{line}");
        assert!(line.contains("in sync"), "{line}");
    }
}
