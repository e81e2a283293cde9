//! Compute resources of the component pods: a server's own `resources`
//! (copied from its Infra's component, or written on a standalone
//! DHCPServer, DNSServer or ProxyServer), else the controller's default for
//! its kind (`run --component-resources`, which the chart sets from its
//! `components.resources` values; `render` takes the same flag), else the
//! component's built-in requests and limits ([`crate::plan::workload::resources`]).

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::Deserialize;

use crate::crd::{DHCPServer, DNSServer, ProxyServer};

/// The requests and limits of each kind's pods whose server leaves them
/// unset.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentResources {
    /// The DHCP pods'.
    #[serde(default)]
    pub dhcp: Option<ResourceRequirements>,
    /// The DNS pods'.
    #[serde(default)]
    pub dns: Option<ResourceRequirements>,
    /// The proxy pods'.
    #[serde(default)]
    pub proxy: Option<ResourceRequirements>,
}

/// The resources the controller gives component pods whose server leaves
/// them unset.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct DefaultResources {
    /// Default requests and limits of the DHCP, DNS and proxy pods, per
    /// kind, as JSON or YAML: '{"proxy": {"requests": {"cpu": "200m",
    /// "memory": "256Mi"}, "limits": {"memory": "1Gi"}}}'. A server's own
    /// `resources` (or its Infra component's) replaces its kind's default
    /// whole; a kind left out keeps the built-in default.
    #[arg(
        long = "component-resources",
        env = "OOOI_COMPONENT_RESOURCES",
        value_parser = parse_resources,
        value_name = "JSON"
    )]
    pub resources: Option<ComponentResources>,
}

/// Reads the per-kind defaults; the error names the kind, the field and
/// the bad quantity.
pub fn parse_resources(text: &str) -> Result<ComponentResources, String> {
    let r: ComponentResources = serde_saphyr::from_str(text)
        .map_err(|e| format!("not component resources (keys dhcp, dns, proxy): {e}"))?;
    for (kind, req) in [("dhcp", &r.dhcp), ("dns", &r.dns), ("proxy", &r.proxy)] {
        let Some(req) = req else { continue };
        for (part, map) in [("requests", &req.requests), ("limits", &req.limits)] {
            for (name, q) in map.iter().flatten() {
                if !is_quantity(&q.0) {
                    return Err(format!(
                        "{kind}.{part}.{name}: `{}` is not a quantity (e.g. 100m, 0.5, 128Mi, 1G)",
                        q.0
                    ));
                }
            }
        }
    }
    Ok(r)
}

/// A Kubernetes resource quantity: a decimal number with an optional
/// binary (Ki..Ei), decimal (n, u, m, k, M..E) or exponent suffix.
fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let mut parts = number.split('.');
    let (int, frac) = (parts.next().unwrap_or(""), parts.next());
    let number_ok = parts.next().is_none()
        && (!int.is_empty() || frac.is_some_and(|f| !f.is_empty()))
        && int.chars().all(|c| c.is_ascii_digit());
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()));
    number_ok && suffix_ok
}

impl DefaultResources {
    fn default_for(
        &self,
        kind: fn(&ComponentResources) -> &Option<ResourceRequirements>,
    ) -> Option<ResourceRequirements> {
        self.resources.as_ref().and_then(|r| kind(r).clone())
    }

    /// `server` with its kind's default where it leaves `resources` unset.
    pub fn dhcp(&self, server: &DHCPServer) -> DHCPServer {
        let mut s = server.clone();
        if s.spec.pod.resources.is_none() {
            s.spec.pod.resources = self.default_for(|r| &r.dhcp);
        }
        s
    }

    /// `server` with its kind's default where it leaves `resources` unset.
    pub fn dns(&self, server: &DNSServer) -> DNSServer {
        let mut s = server.clone();
        if s.spec.pod.resources.is_none() {
            s.spec.pod.resources = self.default_for(|r| &r.dns);
        }
        s
    }

    /// `server` with its kind's default where it leaves `resources` unset.
    pub fn proxy(&self, server: &ProxyServer) -> ProxyServer {
        let mut s = server.clone();
        if s.spec.pod.resources.is_none() {
            s.spec.pod.resources = self.default_for(|r| &r.proxy);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_checked_by_the_kubernetes_grammar() {
        for ok in [
            "100m", "0.5", ".5", "1", "128Mi", "1G", "2e3", "1E+2", "+1Ki",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "lots", "1.2.3", "12MB", "Mi", "1e", "m"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    /// The main container's resources of each component's Deployment, as
    /// render plans them for `infra` with `defaults`.
    fn rendered(
        infra: crate::crd::Infra,
        defaults: &str,
    ) -> std::collections::BTreeMap<String, serde_json::Value> {
        let input = crate::render::RenderInput {
            infras: vec![infra],
            resources: DefaultResources {
                resources: Some(parse_resources(defaults).unwrap()),
            },
            ..crate::render::RenderInput::default()
        };
        let out = crate::render::render(&input, "a-push-token-of-the-test").unwrap();
        out.objects
            .iter()
            .filter(|o| o["kind"] == "Deployment")
            .map(|d| {
                let c = d["metadata"]["labels"]["app.kubernetes.io/component"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let main = d["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["name"] == c.as_str())
                    .unwrap()["resources"]
                    .clone();
                (c, main)
            })
            .collect()
    }

    #[test]
    fn a_kinds_default_fills_what_a_server_leaves_unset_and_its_own_wins() {
        let mut infra = crate::plan::fixtures::infra();
        infra.spec.infra_components.dns.pod.resources =
            Some(serde_json::from_value(serde_json::json!({"requests": {"cpu": "5m"}})).unwrap());
        let got = rendered(
            infra,
            r#"{"dhcp": {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}},
                "dns": {"requests": {"cpu": "30m"}}}"#,
        );
        assert_eq!(
            got["dhcp"],
            serde_json::json!({"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}})
        );
        // The Infra's own, whole.
        assert_eq!(got["dns"], serde_json::json!({"requests": {"cpu": "5m"}}));
        // No default for the kind: the built-in one.
        assert_eq!(
            got["proxy"],
            serde_json::json!({"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}})
        );
    }

    #[test]
    fn a_bad_default_names_the_kind_field_and_value() {
        let e = parse_resources(r#"{"proxy": {"requests": {"memory": "lots"}}}"#).unwrap_err();
        assert!(
            e.contains("proxy.requests.memory") && e.contains("lots"),
            "{e}"
        );
        let e = parse_resources(r#"{"envoy": {}}"#).unwrap_err();
        assert!(e.contains("envoy"), "{e}");
    }
}
