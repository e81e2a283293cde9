//! Inputs the tests share: one builder of the `Infra` every test plans,
//! reconciles or renders.
//!
//! Built for this crate's own tests and, with the `testing` feature, for the
//! integration tests, examples and benchmarks of this crate and the tests of
//! other crates (their dev-dependency asks for the feature); never part of
//! the controller a cluster runs.
//!
//! The builder holds the Infra in its wire form (the JSON the API server
//! stores), so a test says what differs in the words of the manifest, serde
//! defaults apply exactly as they do in the cluster, and a change of the Rust
//! types behind a field leaves every test's Infra as it was.

use serde_json::{Map, Value, json};

use crate::crd::Infra;

/// The Infra a test starts from, changed by what the test varies.
///
/// [`InfraBuilder::new`] is Infra `vlan` in namespace `oooi` (uid `uid-vlan`,
/// generation 3) on 192.0.2.0/24: gateway .1, NetworkAttachmentDefinition
/// `vlan`, upstream resolvers `10.0.0.10` and `10.0.0.11:5353`; DHCP at .2
/// with the pool .100-.199 (image `dhcp:1`), DNS at .3 (`dns:1`), the proxy
/// at .4 (`envoy:1`).
#[derive(Clone, Debug)]
pub struct InfraBuilder {
    doc: Value,
}

impl Default for InfraBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl InfraBuilder {
    /// The standard Infra (see [`InfraBuilder`]).
    pub fn new() -> Self {
        Self {
            doc: json!({
                "apiVersion": "hostedcluster.densityops.com/v1alpha1",
                "kind": "Infra",
                "metadata": {"name": "vlan", "namespace": "oooi", "uid": "uid-vlan", "generation": 3},
                "spec": {
                    "networkConfig": {
                        "cidr": "192.0.2.0/24",
                        "gateway": "192.0.2.1",
                        "networkAttachmentDefinition": "vlan",
                        "dnsServers": ["10.0.0.10", "10.0.0.11:5353"],
                    },
                    "infraComponents": {
                        "dhcp": {"serverIP": "192.0.2.2", "rangeStart": "192.0.2.100", "rangeEnd": "192.0.2.199", "image": "dhcp:1"},
                        "dns": {"serverIP": "192.0.2.3", "image": "dns:1"},
                        "proxy": {"serverIP": "192.0.2.4", "image": "envoy:1"},
                    },
                },
            }),
        }
    }

    /// Named `name` in namespace `ns`, uid `uid-<name>`.
    pub fn named(self, ns: &str, name: &str) -> Self {
        self.set("/metadata/namespace", ns)
            .set("/metadata/name", name)
            .set("/metadata/uid", format!("uid-{name}"))
    }

    /// With uid `uid`.
    pub fn uid(self, uid: &str) -> Self {
        self.set("/metadata/uid", uid)
    }

    /// At `metadata.generation` `generation`.
    pub fn generation(self, generation: i64) -> Self {
        self.set("/metadata/generation", generation)
    }

    /// On the VLAN `cidr` (`networkConfig.cidr`).
    pub fn cidr(self, cidr: &str) -> Self {
        self.set("/spec/networkConfig/cidr", cidr)
    }

    /// With gateway `gateway`.
    pub fn gateway(self, gateway: &str) -> Self {
        self.set("/spec/networkConfig/gateway", gateway)
    }

    /// Every address of the standard Infra moved from 192.0.2.0/24 into
    /// `<prefix>.0/24` (`"198.51.100"`): the CIDR, the gateway and the
    /// components' addresses and pool, with whatever was set before this call.
    pub fn subnet(mut self, prefix: &str) -> Self {
        fn moved(v: &mut Value, prefix: &str) {
            match v {
                Value::String(s) if s.starts_with("192.0.2.") => {
                    *s = format!("{prefix}.{}", &s["192.0.2.".len()..]);
                }
                Value::Array(items) => items.iter_mut().for_each(|i| moved(i, prefix)),
                Value::Object(fields) => fields.values_mut().for_each(|f| moved(f, prefix)),
                _ => {}
            }
        }
        moved(&mut self.doc["spec"], prefix);
        self
    }

    /// With the upstream resolvers `servers` (`networkConfig.dnsServers`).
    pub fn upstreams(self, servers: &[&str]) -> Self {
        self.set("/spec/networkConfig/dnsServers", json!(servers))
    }

    /// On the NetworkAttachmentDefinition `name` (in the Infra's namespace).
    pub fn nad(self, name: &str) -> Self {
        self.set("/spec/networkConfig/networkAttachmentDefinition", name)
    }

    /// On a ClusterUserDefinedNetwork the controller manages (`cudn` is
    /// `networkConfig.clusterUserDefinedNetwork`), in place of a
    /// NetworkAttachmentDefinition.
    pub fn cudn(self, cudn: Value) -> Self {
        self.remove("/spec/networkConfig/networkAttachmentDefinition")
            .remove("/spec/networkConfig/networkAttachmentNamespace")
            .set("/spec/networkConfig/clusterUserDefinedNetwork", cudn)
    }

    /// `fields` merged into `infraComponents.dhcp`.
    pub fn dhcp(self, fields: Value) -> Self {
        self.merge_at("/spec/infraComponents/dhcp", fields)
    }

    /// `fields` merged into `infraComponents.dns`.
    pub fn dns(self, fields: Value) -> Self {
        self.merge_at("/spec/infraComponents/dns", fields)
    }

    /// `fields` merged into `infraComponents.proxy`.
    pub fn proxy(self, fields: Value) -> Self {
        self.merge_at("/spec/infraComponents/proxy", fields)
    }

    /// The DHCP servers at `addresses` (`serverIPs`; two make a pair).
    pub fn dhcp_servers(self, addresses: &[&str]) -> Self {
        self.servers("dhcp", addresses)
    }

    /// One DNS replica per address (`serverIPs`).
    pub fn dns_servers(self, addresses: &[&str]) -> Self {
        self.servers("dns", addresses)
    }

    /// One proxy replica per address (`serverIPs`).
    pub fn proxy_servers(self, addresses: &[&str]) -> Self {
        self.servers("proxy", addresses)
    }

    fn servers(self, component: &str, addresses: &[&str]) -> Self {
        self.remove(&format!("/spec/infraComponents/{component}/serverIP"))
            .set(
                &format!("/spec/infraComponents/{component}/serverIPs"),
                json!(addresses),
            )
    }

    /// The DHCP pool from `start` to `end`.
    pub fn dhcp_range(self, start: &str, end: &str) -> Self {
        self.dhcp(json!({"rangeStart": start, "rangeEnd": end}))
    }

    /// The components' images; `None` leaves a component's unset (the
    /// controller's default applies).
    pub fn images(self, dhcp: Option<&str>, dns: Option<&str>, proxy: Option<&str>) -> Self {
        [("dhcp", dhcp), ("dns", dns), ("proxy", proxy)]
            .into_iter()
            .fold(self, |b, (component, image)| {
                let at = format!("/spec/infraComponents/{component}/image");
                match image {
                    Some(image) => b.set(&at, image),
                    None => b.remove(&at),
                }
            })
    }

    /// With `spec.availability.failover` `failover` (`Auto`, `None`).
    pub fn failover(self, failover: &str) -> Self {
        self.set("/spec/availability/failover", failover)
    }

    /// `value` at the JSON pointer `at` (`/spec/networkConfig/mtu`), the
    /// objects on the way created when missing.
    pub fn set(mut self, at: &str, value: impl Into<Value>) -> Self {
        let (parent, key) = split(at);
        let mut node = &mut self.doc;
        for step in parent {
            node = object(node)
                .entry(step)
                .or_insert_with(|| Value::Object(Map::new()));
        }
        object(node).insert(key, value.into());
        self
    }

    /// Without the field at the JSON pointer `at` (a missing one is no error).
    pub fn remove(mut self, at: &str) -> Self {
        let (parent, key) = split(at);
        let pointer: String = parent.iter().map(|s| format!("/{s}")).collect();
        if let Some(Value::Object(fields)) = self.doc.pointer_mut(&pointer) {
            fields.remove(&key);
        }
        self
    }

    /// `patch` merged into the whole document as a JSON merge patch would
    /// (objects merged field by field, `null` removes a field, anything else
    /// replaces): metadata, status, or fields the schema does not know.
    pub fn merge(mut self, patch: Value) -> Self {
        merge(&mut self.doc, patch);
        self
    }

    fn merge_at(self, at: &str, fields: Value) -> Self {
        let mut patch = fields;
        for step in split_all(at).into_iter().rev() {
            patch = Value::Object(Map::from_iter([(step, patch)]));
        }
        self.merge(patch)
    }

    /// The Infra as the API server returns it (JSON).
    pub fn json(&self) -> Value {
        self.doc.clone()
    }

    /// The Infra as a manifest (YAML), as `render` reads it.
    pub fn yaml(&self) -> String {
        serde_saphyr::to_string(&self.doc).expect("a JSON value is YAML")
    }

    /// The Infra as the controller decodes it.
    pub fn build(&self) -> Infra {
        serde_json::from_value(self.json()).expect("the test's Infra decodes")
    }
}

/// The steps of a JSON pointer (`/a/b` is `a`, `b`; `~1` is `/`, `~0` is `~`).
fn split_all(at: &str) -> Vec<String> {
    at.split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

fn split(at: &str) -> (Vec<String>, String) {
    let mut steps = split_all(at);
    let key = steps.pop().expect("a JSON pointer names a field");
    (steps, key)
}

fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(fields) => fields,
        _ => unreachable!("made an object above"),
    }
}

fn merge(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(fields) => {
            let target = object(target);
            for (key, value) in fields {
                if value.is_null() {
                    target.remove(&key);
                } else {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_infra_plans_without_errors() {
        let i = InfraBuilder::new().build();
        assert_eq!(i.metadata.name.as_deref(), Some("vlan"));
        assert_eq!(i.metadata.generation, Some(3));
        let p = crate::plan::plan_infra(&i, &[], &crate::plan::Observed::default());
        assert!(p.errors.is_empty(), "{:?}", p.errors);
    }

    #[test]
    fn each_change_lands_on_its_field_in_wire_form() {
        let v = InfraBuilder::new()
            .named("ns", "v2")
            .generation(7)
            .subnet("198.51.100")
            .upstreams(&["10.0.0.10"])
            .dns_servers(&["198.51.100.3", "198.51.100.6"])
            .dhcp_range("198.51.100.100", "198.51.100.179")
            .images(Some("own/dhcp:1"), None, None)
            .failover("Auto")
            .dns(json!({"placement": {"priorityClassName": "p"}}))
            .json();
        assert_eq!(
            v["metadata"],
            json!({"name": "v2", "namespace": "ns", "uid": "uid-v2", "generation": 7})
        );
        let nc = &v["spec"]["networkConfig"];
        assert_eq!(nc["cidr"], "198.51.100.0/24");
        assert_eq!(nc["gateway"], "198.51.100.1");
        assert_eq!(nc["dnsServers"], json!(["10.0.0.10"]));
        let c = &v["spec"]["infraComponents"];
        assert_eq!(
            c["dhcp"],
            json!({"serverIP": "198.51.100.2", "rangeStart": "198.51.100.100", "rangeEnd": "198.51.100.179", "image": "own/dhcp:1"})
        );
        assert_eq!(
            c["dns"],
            json!({"serverIPs": ["198.51.100.3", "198.51.100.6"], "placement": {"priorityClassName": "p"}})
        );
        assert_eq!(c["proxy"], json!({"serverIP": "198.51.100.4"}));
        assert_eq!(v["spec"]["availability"], json!({"failover": "Auto"}));
    }

    #[test]
    fn a_managed_network_replaces_the_attachment_definition() {
        let v = InfraBuilder::new().cudn(json!({"name": "vlan200"})).json();
        let nc = &v["spec"]["networkConfig"];
        assert!(nc.get("networkAttachmentDefinition").is_none(), "{nc}");
        assert_eq!(nc["clusterUserDefinedNetwork"], json!({"name": "vlan200"}));
    }

    #[test]
    fn set_remove_and_merge_follow_json_pointers_and_merge_patches() {
        let v = InfraBuilder::new()
            .set("/spec/networkConfig/mtu", 1400)
            .set("/metadata/labels/a.example.com~1b", "c")
            .remove("/spec/networkConfig/gateway")
            .remove("/spec/no/such/field")
            .merge(json!({"metadata": {"uid": null}, "status": {"conditions": []}}))
            .json();
        assert_eq!(v["spec"]["networkConfig"]["mtu"], 1400);
        assert_eq!(v["metadata"]["labels"]["a.example.com/b"], "c");
        assert!(v["spec"]["networkConfig"].get("gateway").is_none());
        assert!(v["metadata"].get("uid").is_none());
        assert_eq!(v["status"], json!({"conditions": []}));
    }

    #[test]
    fn the_yaml_form_reads_back_as_the_same_infra() {
        let b = InfraBuilder::new().dhcp_servers(&["192.0.2.2", "192.0.2.5"]);
        let back: Infra = serde_saphyr::from_str(&b.yaml()).unwrap();
        assert_eq!(back, b.build());
    }
}
