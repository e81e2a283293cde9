//! What the DHCP, DNS and proxy sections share: one part of a derived
//! server's spec ([`ServerPod`]: the VLAN leg, the image, resources,
//! placement, availability) and one part of an Infra's component section
//! ([`ComponentPod`]: image, resources, placement). Each kind flattens the
//! part into its own section, so the wire form and the schema stay those of
//! plain fields; what a field's description says of one kind (which program
//! the image runs, its built-in resources) comes from [`ComponentKind`].
//! A field every component's pods take is added here once. The types those
//! parts are made of live here too: the VLAN leg ([`VlanInterface`]),
//! placement ([`PodPlacement`]) and availability ([`ServerAvailability`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use oooi_vocabulary::InterfaceAddress;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;

/// The words the shared parts say of one component kind (their schema
/// descriptions).
pub trait ComponentKind: Debug + Clone + PartialEq + Eq + Default + 'static {
    /// A derived server's `spec.vlan`.
    const VLAN: &'static str;
    /// A derived server's `spec.image`.
    const IMAGE: &'static str;
    /// An Infra's `spec.infraComponents.<kind>.image`.
    const INFRA_IMAGE: &'static str;
    /// An Infra's `spec.infraComponents.<kind>.resources`.
    const INFRA_RESOURCES: &'static str;
}

/// A marker type of one component kind and what its parts say of it;
/// `requests` completes the built-in resources in the description of an
/// Infra's `resources`.
macro_rules! component_kind {
    ($(#[$doc:meta])* $kind:ident {
        vlan: $vlan:literal,
        image: $image:literal,
        infra_image: $infra_image:literal,
        requests: $requests:literal $(,)?
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $kind;

        impl ComponentKind for $kind {
            const VLAN: &'static str = $vlan;
            const IMAGE: &'static str = $image;
            const INFRA_IMAGE: &'static str = $infra_image;
            const INFRA_RESOURCES: &'static str = concat!(
                "Compute resources. Default: the controller's default for the kind\n",
                "(`--component-resources`, the chart's `components.resources`), else\n",
                "requests ",
                $requests,
                "."
            );
        }
    };
}

component_kind!(
    /// The DHCP server (oooi-dhcp).
    DhcpKind {
        vlan: "The VLAN leg; its address is the server address.",
        image: "Container image of oooi-dhcp.",
        infra_image: "Container image of oooi-dhcp. Default: the controller's\n(`--dhcp-image`; the chart sets it from `images.dhcp`).",
        requests: "10m CPU / 32Mi, limit 128Mi",
    }
);

component_kind!(
    /// The DNS server (oooi-dns).
    DnsKind {
        vlan: "The VLAN leg; the VLAN view listens on its address.",
        image: "Container image of oooi-dns.",
        infra_image: "Container image of oooi-dns. Default: the controller's\n(`--dns-image`; the chart sets it from `images.dns`).",
        requests: "10m CPU / 32Mi, limit 256Mi",
    }
);

component_kind!(
    /// The proxy (Envoy with `oooi-envoy-gate`).
    ProxyKind {
        vlan: "The VLAN leg; the TLS listeners accept on it.",
        image: "Container image of the proxy: Envoy 1.40 (V8 wasm runtime) with\n`oooi-envoy-gate` on its PATH, as the oooi-proxy image carries them.",
        infra_image: "Container image of the proxy: Envoy 1.40 (V8 wasm runtime) with\n`oooi-envoy-gate` on its PATH, as the oooi-proxy image carries them.\nDefault:\nthe controller's (`--proxy-image`; the chart sets it from\n`images.proxy`).",
        requests: "50m CPU / 128Mi, limit 512Mi",
    }
);

/// The part of a DHCPServer, DNSServer or ProxyServer spec every server's
/// pod is planned from the same way (flattened into the spec).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", bound = "")]
#[schemars(bound = "K: ComponentKind")]
pub struct ServerPod<K: ComponentKind> {
    /// The VLAN leg ([`ComponentKind::VLAN`]).
    #[schemars(description = K::VLAN)]
    pub vlan: VlanInterface,
    /// Container image ([`ComponentKind::IMAGE`]).
    #[schemars(length(min = 1), description = K::IMAGE)]
    pub image: String,
    /// Compute resources. Default: the controller's default for the kind
    /// (`--component-resources`, the chart's `components.resources`), else
    /// the built-in requests and limits of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Where the pods run and how their images are pulled.
    #[serde(default, skip_serializing_if = "PodPlacement::is_empty")]
    pub placement: PodPlacement,
    /// How this server's pods ride out a lost node.
    #[serde(default)]
    pub availability: ServerAvailability,
    #[serde(skip)]
    #[schemars(skip)]
    kind: PhantomData<K>,
}

impl<K: ComponentKind> ServerPod<K> {
    /// The part of a server's spec with these values.
    pub fn new(
        vlan: VlanInterface,
        image: String,
        resources: Option<ResourceRequirements>,
        placement: PodPlacement,
        availability: ServerAvailability,
    ) -> Self {
        ServerPod {
            vlan,
            image,
            resources,
            placement,
            availability,
            kind: PhantomData,
        }
    }
}

/// The part of an Infra's DHCP, DNS or proxy section that the derived
/// servers' [`ServerPod`] takes (flattened into the section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", bound = "")]
#[schemars(bound = "K: ComponentKind")]
pub struct ComponentPod<K: ComponentKind> {
    /// Container image ([`ComponentKind::INFRA_IMAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), description = K::INFRA_IMAGE)]
    pub image: Option<String>,
    /// Compute resources ([`ComponentKind::INFRA_RESOURCES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(description = K::INFRA_RESOURCES)]
    pub resources: Option<ResourceRequirements>,
    /// Where the pods run and how their images are pulled; each field
    /// left unset takes the controller's default (the chart's
    /// `components.placement`).
    #[serde(default, skip_serializing_if = "PodPlacement::is_empty")]
    pub placement: PodPlacement,
    #[serde(skip)]
    #[schemars(skip)]
    kind: PhantomData<K>,
}

impl<K: ComponentKind> Default for ComponentPod<K> {
    fn default() -> Self {
        ComponentPod {
            image: None,
            resources: None,
            placement: PodPlacement::default(),
            kind: PhantomData,
        }
    }
}

/// The pod's leg on the VLAN (a Multus secondary interface with a static address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VlanInterface {
    /// NetworkAttachmentDefinition name.
    #[schemars(length(min = 1, max = 253), pattern(concat!("^", dns_subdomain_re!(), "$")))]
    pub network_attachment_definition: String,
    /// NetworkAttachmentDefinition namespace.
    #[schemars(length(min = 1, max = 63), pattern(concat!("^", dns_label_re!(), "$")))]
    pub network_attachment_namespace: String,
    /// Static address with the VLAN's prefix length, e.g. `192.0.2.2/24`.
    pub address: InterfaceAddress,
    /// Interface name inside the pod. Default `net1`.
    #[serde(default = "default_interface")]
    #[schemars(length(min = 1, max = 15))]
    pub interface: String,
}

fn default_interface() -> String {
    "net1".to_string()
}

/// Where a component's pods run and how their images are pulled: the
/// Infra's own, field by field, else the controller's defaults (the chart's
/// `components.placement` values).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodPlacement {
    /// Node labels the pods' nodes must carry, e.g. the nodes with the VLAN
    /// bridge (`pod.spec.nodeSelector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations added to the pods' own (those of a lost node, bounded by
    /// `availability.nodeLossTolerationSeconds`), e.g. of a taint that
    /// reserves the VLAN nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node affinity taken as written; pod affinity and anti-affinity terms
    /// added to the replicas' own (never two replicas of a component on
    /// one node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "affinity_schema")]
    pub affinity: Option<Affinity>,
    /// PriorityClass of the pods (e.g. one that keeps the VLAN services
    /// scheduled before workloads on a full cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Secrets (type `kubernetes.io/dockerconfigjson`, in the Infra's
    /// namespace) to pull the component image with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
}

/// A Kubernetes `Affinity`, kept as written by the API server (its full
/// schema would make every CRD carrying it several times larger; the
/// controller reads it with Kubernetes' own type and the API server checks
/// it again in the pod).
fn affinity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

impl PodPlacement {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == PodPlacement::default()
    }

    /// Every field left unset here taken from `defaults`.
    pub fn or(&self, defaults: &PodPlacement) -> PodPlacement {
        fn pick<T: Clone>(own: &T, default: &T, unset: bool) -> T {
            if unset { default } else { own }.clone()
        }
        PodPlacement {
            node_selector: pick(
                &self.node_selector,
                &defaults.node_selector,
                self.node_selector.is_empty(),
            ),
            tolerations: pick(
                &self.tolerations,
                &defaults.tolerations,
                self.tolerations.is_empty(),
            ),
            affinity: pick(&self.affinity, &defaults.affinity, self.affinity.is_none()),
            priority_class_name: pick(
                &self.priority_class_name,
                &defaults.priority_class_name,
                self.priority_class_name.is_none(),
            ),
            image_pull_secrets: pick(
                &self.image_pull_secrets,
                &defaults.image_pull_secrets,
                self.image_pull_secrets.is_empty(),
            ),
        }
    }
}

/// Default of [`ServerAvailability::node_loss_toleration_seconds`].
pub const DEFAULT_NODE_LOSS_TOLERATION_SECONDS: u32 = 15;

fn default_node_loss_toleration_seconds() -> u32 {
    DEFAULT_NODE_LOSS_TOLERATION_SECONDS
}

/// How a server's pods ride out a lost node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerAvailability {
    /// Seconds the pod stays bound to an unreachable or not-ready node
    /// before Kubernetes evicts and replaces it.
    #[serde(default = "default_node_loss_toleration_seconds")]
    #[schemars(range(max = 3600))]
    pub node_loss_toleration_seconds: u32,
    /// Set: an address agent in each pod moves the component's VLAN
    /// addresses between its ready replicas. Unset: each address stays with
    /// its own server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_takeover: Option<AddressTakeover>,
}

impl Default for ServerAvailability {
    fn default() -> Self {
        ServerAvailability {
            node_loss_toleration_seconds: DEFAULT_NODE_LOSS_TOLERATION_SECONDS,
            address_takeover: None,
        }
    }
}

/// The addresses the agent of a server may hold, and its group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressTakeover {
    /// The agents' group (`--group`): only adverts of the same group count,
    /// the same for every server of the component. Named for the Leases an
    /// earlier agent kept; no Lease is made.
    #[schemars(length(min = 1, max = 200), pattern(r"^[a-z0-9][-a-z0-9]*$"))]
    pub lease_prefix: String,
    /// Every VLAN address of the component as `ip/prefix`, the server's own
    /// (`vlan.address`) among them.
    #[schemars(length(min = 1))]
    pub addresses: Vec<InterfaceAddress>,
}
