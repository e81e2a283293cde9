//! The ClusterServiceVersion: the controller Deployment, its permissions,
//! the owned CRDs with their console descriptors, `alm-examples`, install
//! modes and the OpenShift feature annotations.
//!
//! Pure: (version, images, upgrade edge) → one JSON object. The Deployment
//! mirrors the chart's (`charts/oooi/templates/deployment.yaml` with
//! `controller.openshiftSCC=true`); `charts/tests/test_olm.py` renders both
//! and compares them field by field.

use serde_json::{Value, json};

use super::images::{BundleImage, BundleImages};
use crate::rbac::{InstallMode, Rule, Scope};

/// The OLM package name.
pub const PACKAGE: &str = "oooi";
/// The channel every bundle is published to (`maturity` says why).
pub const CHANNEL: &str = "alpha";
/// Name of the controller Deployment and its ServiceAccount.
pub const CONTROLLER: &str = "oooi-controller";
/// The filter ConfigMap the bundle ships (the rollout source, as the chart's).
pub const FILTER_CONFIG_MAP: &str = "oooi-sni-router";
/// Its key.
pub const FILTER_KEY: &str = "oooi_sni_router.wasm";
/// Oldest Kubernetes the bundle is offered to: OpenShift 4.16's, as the
/// chart's.
pub const MIN_KUBE_VERSION: &str = "1.29.0";
/// Oldest OpenShift (Kubernetes 1.29) the bundle is offered to.
pub const OPENSHIFT_VERSIONS: &str = "v4.16";
/// Console capability level: the operator installs its operands and, when
/// it is upgraded, rolls every component that takes its image from the
/// operator's defaults to the new images (no backup, no autoscaling).
pub const CAPABILITIES: &str = "Seamless Upgrades";
const GROUP: &str = "hostedcluster.densityops.com";
const SOURCE: &str = "https://example.invalid/oooi";

/// The upgrade edge of one bundle (see docs/installation.md, OLM).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradeEdge {
    /// The version this bundle replaces (the previous release in the channel).
    pub replaces: Option<String>,
    /// Versions OLM may upgrade from in one step; default `<VERSION`.
    pub skip_range: Option<String>,
}

/// `oooi.v<version>`: the CSV's and the catalog entry's name.
pub fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

impl UpgradeEdge {
    /// The skip range this bundle declares.
    pub fn skip_range_for(&self, version: &str) -> String {
        self.skip_range
            .clone()
            .unwrap_or_else(|| format!("<{version}"))
    }
}

/// The ClusterServiceVersion of `version`.
pub fn csv(
    version: &str,
    images: &BundleImages,
    edge: &UpgradeEdge,
    rules: &[Rule],
) -> anyhow::Result<Value> {
    // `permissions`: the component namespace's rules and the controller's
    // own (the leader Lease, the filter's source ConfigMap). OLM makes a Role
    // of them in the operator's namespace and copies it into the target
    // namespace (OwnNamespace, SingleNamespace), or makes a ClusterRole of
    // them (AllNamespaces). The rest is `clusterPermissions`.
    let (namespaced, cluster): (Vec<Rule>, Vec<Rule>) = rules
        .iter()
        .cloned()
        .partition(|r| matches!(r.scope, Scope::Watched | Scope::Release));
    let mut spec = json!({
        "displayName": "oooi",
        "description": DESCRIPTION,
        "version": version,
        "minKubeVersion": MIN_KUBE_VERSION,
        "maturity": CHANNEL,
        "provider": {"name": "oooi", "url": SOURCE},
        "maintainers": [{"name": "oooi maintainers", "email": "oooi-maintainers@example.invalid"}],
        "links": [
            {"name": "Documentation", "url": format!("{SOURCE}/docs/installation.md")},
            {"name": "Source", "url": SOURCE},
        ],
        "keywords": ["hypershift", "hosted control planes", "kubevirt", "vlan", "dhcp", "dns", "envoy"],
        "icon": [{"base64data": icon_base64(), "mediatype": "image/svg+xml"}],
        "installModes": install_modes(),
        "customresourcedefinitions": {"owned": owned_crds()},
        "install": {
            "strategy": "deployment",
            "spec": {
                "permissions": [{"serviceAccountName": CONTROLLER, "rules": namespaced}],
                "clusterPermissions": [{"serviceAccountName": CONTROLLER, "rules": cluster}],
                "deployments": [{
                    "name": CONTROLLER,
                    "label": selector_labels(),
                    "spec": deployment_spec(images),
                }],
            },
        },
        "relatedImages": images.iter().map(|(i, r)| json!({"name": i.name(), "image": r})).collect::<Vec<_>>(),
    });
    if let Some(replaces) = &edge.replaces {
        spec["replaces"] = json!(csv_name(replaces));
    }
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": csv_name(version),
            "namespace": "placeholder",
            "annotations": annotations(version, images, edge)?,
        },
        "spec": spec,
    }))
}

fn annotations(version: &str, images: &BundleImages, edge: &UpgradeEdge) -> anyhow::Result<Value> {
    Ok(json!({
        "alm-examples": serde_json::to_string_pretty(&alm_examples()?)?,
        "capabilities": CAPABILITIES,
        "categories": "Networking",
        "containerImage": images.get(BundleImage::Controller),
        "description": SHORT_DESCRIPTION,
        "repository": SOURCE,
        "support": "oooi maintainers",
        "olm.skipRange": edge.skip_range_for(version),
        "operatorframework.io/suggested-namespace": "oooi-system",
        "operators.openshift.io/must-gather-image": images.get(BundleImage::MustGather),
        // The derived kinds are written by the controller from an Infra;
        // the console lists them but offers no form to create one.
        "operators.operatorframework.io/internal-objects": serde_json::to_string(&internal_objects())?,
        // Every image by digest in relatedImages; the controller takes its
        // component images from RELATED_IMAGE_* (mirrored by digest).
        "features.operators.openshift.io/disconnected": "true",
        // Neither the musl/ring TLS of the controller nor the Envoy build is
        // FIPS validated.
        "features.operators.openshift.io/fips-compliant": "false",
        // The controller talks only to the in-cluster API server and its own
        // pods; it reads no cluster-wide proxy settings.
        "features.operators.openshift.io/proxy-aware": "false",
        // The controller's metrics endpoint is plain HTTP; it does not follow
        // the cluster's TLS security profile.
        "features.operators.openshift.io/tls-profiles": "false",
        "features.operators.openshift.io/token-auth-aws": "false",
        "features.operators.openshift.io/token-auth-azure": "false",
        "features.operators.openshift.io/token-auth-gcp": "false",
        // It serves DHCP/DNS/proxy on a VLAN but is no CNI, CSI or CNF.
        "features.operators.openshift.io/cnf": "false",
        "features.operators.openshift.io/cni": "false",
        "features.operators.openshift.io/csi": "false",
    }))
}

/// The install modes: the ones [`InstallMode`] names; MultiNamespace is not
/// offered (the controller watches one namespace or all).
fn install_modes() -> Value {
    let mut modes: Vec<Value> = InstallMode::ALL
        .iter()
        .map(|m| json!({"type": m.as_str(), "supported": true}))
        .collect();
    modes.insert(2, json!({"type": "MultiNamespace", "supported": false}));
    json!(modes)
}

/// The labels that select the controller pods.
fn selector_labels() -> Value {
    json!({"app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "controller"})
}

/// The controller Deployment's spec: the chart's with
/// `controller.openshiftSCC=true` and default values, the component images
/// in `RELATED_IMAGE_*` instead of `OOOI_*_IMAGE`.
pub fn deployment_spec(images: &BundleImages) -> Value {
    let mut labels = selector_labels();
    labels["app.kubernetes.io/part-of"] = json!("oooi");
    let mut env = vec![
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        // The OperatorGroup's target namespace (`run --watch-namespace`;
        // empty in AllNamespaces mode: every namespace).
        json!({"name": "OOOI_WATCH_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}}}),
        json!({"name": "RUST_LOG", "value": "info"}),
        json!({"name": "OOOI_FILTER_CONFIG_MAP", "value": FILTER_CONFIG_MAP}),
        json!({"name": "OOOI_FILTER_KEY", "value": FILTER_KEY}),
    ];
    env.extend(
        images
            .iter()
            .map(|(i, r)| json!({"name": i.env(), "value": r})),
    );
    json!({
        "replicas": 2,
        "revisionHistoryLimit": 5,
        "selector": {"matchLabels": selector_labels()},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "serviceAccountName": CONTROLLER,
                "automountServiceAccountToken": true,
                "terminationGracePeriodSeconds": 30,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "controller",
                    "image": images.get(BundleImage::Controller),
                    "imagePullPolicy": "IfNotPresent",
                    "args": [
                        "run",
                        "--http-addr=0.0.0.0:8080",
                        "--health-addr=0.0.0.0:8081",
                        "--leader-election=true",
                        format!("--lease-name={}", oooi_vocabulary::labels::LEADER_LEASE),
                        "--openshift-scc=true",
                        "--log-format=json",
                    ],
                    "env": env,
                    // The probes ask a listener of their own, whose
                    // connections nothing sent to the http port can take.
                    "ports": [
                        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"name": "health", "containerPort": 8081, "protocol": "TCP"},
                    ],
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", "port": "health"},
                        "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3,
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/readyz", "port": "health"},
                        "initialDelaySeconds": 2, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3,
                    },
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "privileged": false,
                        "readOnlyRootFilesystem": true,
                        "runAsNonRoot": true,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }],
                // The root filesystem is read-only; /tmp is the only writable path.
                "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}],
                // The chart's default `podAntiAffinity: soft`: the two
                // replicas on different nodes where the cluster has them.
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": selector_labels()},
                    },
                }]}},
            },
        },
    })
}

/// The derived kinds, created by the controller.
fn internal_objects() -> Vec<String> {
    ["dhcpservers", "dnsservers", "proxyservers"]
        .iter()
        .map(|p| format!("{p}.{GROUP}"))
        .collect()
}

/// The examples the console offers (an Infra and an attachment from
/// `examples/single-cluster.yaml`, the file `render` checks), without a
/// namespace (the console's) and without component images, so that the
/// operator's digests apply.
pub fn alm_examples() -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(EXAMPLE)?;
    Ok(docs
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|mut d| {
            if let Some(meta) = d.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            if let Some(components) = d
                .pointer_mut("/spec/infraComponents")
                .and_then(Value::as_object_mut)
            {
                for c in components.values_mut() {
                    if let Some(c) = c.as_object_mut() {
                        c.remove("image");
                    }
                }
            }
            d
        })
        .collect())
}

/// The example file the console's examples come from.
pub const EXAMPLE: &str = include_str!("../../../examples/single-cluster.yaml");

/// One descriptor: (path, display name, description, x-descriptors).
type Descriptor = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

const CONDITIONS: Descriptor = (
    "conditions",
    "Conditions",
    "Ready, Progressing, Degraded and the component conditions.",
    &["urn:alm:descriptor:io.kubernetes.conditions"],
);

const TEXT: &[&str] = &["urn:alm:descriptor:com.tectonic.ui:text"];
const SWITCH: &[&str] = &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"];

/// One owned CRD: (kind, plural, display name, description, spec
/// descriptors, status descriptors).
type Owned = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [Descriptor],
    &'static [Descriptor],
);

/// Owned CRDs.
pub const OWNED: &[Owned] = &[
    (
        "Infra",
        "infras",
        "Infra",
        "One VLAN stack shared by hosted clusters: DHCP, split-horizon DNS and the SNI proxy to their control planes.",
        &[
            (
                "networkConfig.cidr",
                "VLAN CIDR",
                "The VLAN's IPv4 subnet.",
                TEXT,
            ),
            (
                "networkConfig.gateway",
                "Gateway",
                "The VLAN's default gateway.",
                TEXT,
            ),
            (
                "networkConfig.networkAttachmentDefinition",
                "NetworkAttachmentDefinition",
                "The NAD that attaches the component pods to the VLAN.",
                TEXT,
            ),
            (
                "networkConfig.dnsServers",
                "Upstream resolvers",
                "Where names outside the hosted clusters are forwarded.",
                &[],
            ),
            (
                "infraComponents.dhcp.enabled",
                "DHCP enabled",
                "Run oooi-dhcp on the VLAN.",
                SWITCH,
            ),
            (
                "infraComponents.dhcp.serverIP",
                "DHCP server address",
                "oooi-dhcp's address on the VLAN.",
                TEXT,
            ),
            (
                "infraComponents.dhcp.rangeStart",
                "DHCP range start",
                "First address leased to workers.",
                TEXT,
            ),
            (
                "infraComponents.dhcp.rangeEnd",
                "DHCP range end",
                "Last address leased to workers.",
                TEXT,
            ),
            (
                "infraComponents.dns.enabled",
                "DNS enabled",
                "Run oooi-dns on the VLAN.",
                SWITCH,
            ),
            (
                "infraComponents.dns.serverIP",
                "DNS server address",
                "oooi-dns's address on the VLAN.",
                TEXT,
            ),
            (
                "infraComponents.proxy.enabled",
                "Proxy enabled",
                "Run the SNI proxy on the VLAN.",
                SWITCH,
            ),
            (
                "infraComponents.proxy.serverIP",
                "Proxy address",
                "The proxy's address on the VLAN.",
                TEXT,
            ),
        ],
        &[
            CONDITIONS,
            (
                "observedGeneration",
                "Observed generation",
                "The generation the status describes.",
                &[],
            ),
        ],
    ),
    (
        "InfraClusterAttachment",
        "infraclusterattachments",
        "Infra cluster attachment",
        "Binds one HostedCluster to one Infra: its names in DNS, its routes through the proxy, its workers' leases.",
        &[
            (
                "infraRef.name",
                "Infra",
                "The Infra in this namespace.",
                &["urn:alm:descriptor:io.kubernetes:hostedcluster.densityops.com:v1alpha1:Infra"],
            ),
            (
                "hostedClusterRef.name",
                "HostedCluster",
                "The HostedCluster's name.",
                TEXT,
            ),
            (
                "hostedClusterRef.namespace",
                "HostedCluster namespace",
                "The HostedCluster's namespace.",
                TEXT,
            ),
            (
                "dns.clusterName",
                "Cluster name",
                "The hosted cluster's name in DNS.",
                TEXT,
            ),
            (
                "dns.baseDomain",
                "Base domain",
                "The hosted cluster's base domain.",
                TEXT,
            ),
        ],
        &[
            CONDITIONS,
            (
                "domain",
                "Domain",
                "The cluster's domain as DNS serves it.",
                &[],
            ),
            (
                "controlPlaneNamespace",
                "Control-plane namespace",
                "Where the hosted control plane runs.",
                &[],
            ),
        ],
    ),
    (
        "DHCPServer",
        "dhcpservers",
        "DHCP server",
        "oooi-dhcp on a VLAN (derived from an Infra).",
        &[("image", "Image", "The oooi-dhcp image.", TEXT)],
        &[
            CONDITIONS,
            (
                "readyReplicas",
                "Ready replicas",
                "Replicas serving.",
                &["urn:alm:descriptor:com.tectonic.ui:podCount"],
            ),
        ],
    ),
    (
        "DNSServer",
        "dnsservers",
        "DNS server",
        "oooi-dns on a VLAN (derived from an Infra, or on its own).",
        &[("image", "Image", "The oooi-dns image.", TEXT)],
        &[
            CONDITIONS,
            (
                "readyReplicas",
                "Ready replicas",
                "Replicas serving.",
                &["urn:alm:descriptor:com.tectonic.ui:podCount"],
            ),
        ],
    ),
    (
        "ProxyServer",
        "proxyservers",
        "Proxy server",
        "Envoy with the SNI-router filter on a VLAN (derived from an Infra).",
        &[("image", "Image", "The proxy image.", TEXT)],
        &[
            CONDITIONS,
            (
                "readyReplicas",
                "Ready replicas",
                "Replicas holding the current routing table.",
                &["urn:alm:descriptor:com.tectonic.ui:podCount"],
            ),
            (
                "routesGeneration",
                "Routing table generation",
                "The generation pushed to every replica.",
                &[],
            ),
        ],
    ),
];

fn owned_crds() -> Vec<Value> {
    let descriptors = |list: &[Descriptor]| -> Vec<Value> {
        list.iter()
            .map(|(path, name, description, x)| {
                let mut d = json!({"path": path, "displayName": name, "description": description});
                if !x.is_empty() {
                    d["x-descriptors"] = json!(x);
                }
                d
            })
            .collect()
    };
    OWNED
        .iter()
        .map(|(kind, plural, display, description, spec, status)| {
            let resources: Vec<Value> = match *kind {
                "Infra" => vec![
                    json!({"kind": "DHCPServer", "name": "", "version": "v1alpha1"}),
                    json!({"kind": "DNSServer", "name": "", "version": "v1alpha1"}),
                    json!({"kind": "ProxyServer", "name": "", "version": "v1alpha1"}),
                ],
                _ => vec![
                    json!({"kind": "Deployment", "name": "", "version": "v1"}),
                    json!({"kind": "ConfigMap", "name": "", "version": "v1"}),
                    json!({"kind": "Service", "name": "", "version": "v1"}),
                ],
            };
            json!({
                "name": format!("{plural}.{GROUP}"),
                "version": "v1alpha1",
                "kind": kind,
                "displayName": display,
                "description": description,
                "resources": resources,
                "specDescriptors": descriptors(spec),
                "statusDescriptors": descriptors(status),
            })
        })
        .collect()
}

const SHORT_DESCRIPTION: &str = "DHCP, split-horizon DNS and an SNI proxy for hosted clusters whose KubeVirt workers live on an isolated VLAN.";

const DESCRIPTION: &str = "\
HyperShift can run worker nodes as KubeVirt VMs on an isolated VLAN. Those VMs have no route to their \
hosted control plane and nothing on the VLAN hands out addresses or names. oooi puts the missing services \
on the VLAN:

- **oooi-dhcp** leases addresses to the workers;
- **oooi-dns** answers the hosted clusters' names per view and forwards the rest;
- **Envoy with the SNI-router filter** passes TLS through to each hosted control plane by SNI.

Create an **Infra** (the VLAN stack) and one **InfraClusterAttachment** per hosted cluster.

The component pods run non-root with every capability dropped (the built-in `restricted-v2` SCC admits \
them). The optional address agent (two or more DNS or proxy addresses) needs one SCC, \
`oooi-address-agent`, which an administrator creates (`oooi-controller rbac --sccs | oc apply -f -`): \
the operator only uses it and cannot create or change any SCC. Install it in OwnNamespace or \
SingleNamespace mode to keep its Secrets in the namespaces it manages. Every image is pinned by digest, \
so the bundle mirrors for disconnected clusters.";

const ICON_SVG: &str = include_str!("icon.svg");

fn icon_base64() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(ICON_SVG)
}
