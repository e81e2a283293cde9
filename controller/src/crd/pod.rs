//! What the DHCP, DNS and proxy sections share: one part of a derived
//! server's spec ([`ServerPod`]: the VLAN leg, the image, resources,
//! placement, availability) and one part of an Infra's component section
//! ([`ComponentPod`]: image, resources, placement). Each kind flattens the
//! part into its own section, so the wire form and the schema stay those of
//! plain fields; what a field's description says of one kind (which program
//! the image runs, its built-in resources) comes from [`ComponentKind`].
//! A field every component's pods take is added here once.

use std::fmt::Debug;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::ResourceRequirements;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::components::{PodPlacement, ServerAvailability, VlanInterface};

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

/// The DHCP server (oooi-dhcp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DhcpKind;

impl ComponentKind for DhcpKind {
    const VLAN: &'static str = "The VLAN leg; its address is the server address.";
    const IMAGE: &'static str = "Container image of oooi-dhcp.";
    const INFRA_IMAGE: &'static str = "Container image of oooi-dhcp. Default: the controller's\n(`--dhcp-image`; the chart sets it from `images.dhcp`).";
    const INFRA_RESOURCES: &'static str = "Compute resources. Default: the controller's default for the kind\n(`--component-resources`, the chart's `components.resources`), else\nrequests 10m CPU / 32Mi, limit 128Mi.";
}

/// The DNS server (oooi-dns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DnsKind;

impl ComponentKind for DnsKind {
    const VLAN: &'static str = "The VLAN leg; the VLAN view listens on its address.";
    const IMAGE: &'static str = "Container image of oooi-dns.";
    const INFRA_IMAGE: &'static str = "Container image of oooi-dns. Default: the controller's\n(`--dns-image`; the chart sets it from `images.dns`).";
    const INFRA_RESOURCES: &'static str = "Compute resources. Default: the controller's default for the kind\n(`--component-resources`, the chart's `components.resources`), else\nrequests 10m CPU / 32Mi, limit 256Mi.";
}

/// The proxy (Envoy with `oooi-envoy-gate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyKind;

impl ComponentKind for ProxyKind {
    const VLAN: &'static str = "The VLAN leg; the TLS listeners accept on it.";
    const IMAGE: &'static str = "Container image of the proxy: Envoy 1.40 (V8 wasm runtime) with\n`oooi-envoy-gate` on its PATH, as the oooi-proxy image carries them.";
    const INFRA_IMAGE: &'static str = "Container image of the proxy: Envoy 1.40 (V8 wasm runtime) with\n`oooi-envoy-gate` on its PATH, as the oooi-proxy image carries them.\nDefault:\nthe controller's (`--proxy-image`; the chart sets it from\n`images.proxy`).";
    const INFRA_RESOURCES: &'static str = "Compute resources. Default: the controller's default for the kind\n(`--component-resources`, the chart's `components.resources`), else\nrequests 50m CPU / 128Mi, limit 512Mi.";
}

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
