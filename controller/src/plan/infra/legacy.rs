//! Fields of the older single-cluster Infra API. Some are ignored (the
//! attachment carries what they said), and reported so they are not silently
//! dropped; the rest are refused, naming what to write instead.

use oooi_vocabulary::FieldError;

use crate::crd::Infra;

/// The set fields oooi ignores, each with where its meaning lives now, for
/// the Infra's `LegacyFieldsIgnored` condition.
pub fn ignored(infra: &Infra) -> Vec<String> {
    let c = &infra.spec.infra_components;
    [
        (
            "spec.infraComponents.dns.clusterName",
            c.dns.cluster_name.is_some(),
            "each InfraClusterAttachment's spec.dns.clusterName",
        ),
        (
            "spec.infraComponents.dns.baseDomain",
            c.dns.base_domain.is_some(),
            "each InfraClusterAttachment's spec.dns.baseDomain",
        ),
        (
            "spec.infraComponents.proxy.controlPlaneNamespace",
            c.proxy.control_plane_namespace.is_some(),
            "each InfraClusterAttachment's spec.controlPlaneNamespace",
        ),
        (
            "spec.infraComponents.proxy.apiServerService",
            c.proxy.api_server_service.is_some(),
            "each InfraClusterAttachment's spec.services",
        ),
        (
            "spec.infraComponents.proxy.managerImage",
            c.proxy.manager_image.is_some(),
            "nothing: the controller pushes routes to Envoy itself",
        ),
    ]
    .into_iter()
    .filter(|(_, set, _)| *set)
    .map(|(field, _, instead)| format!("{field} (see {instead})"))
    .collect()
}

/// The set fields oooi refuses: the Infra is invalid until they are removed.
pub fn refused(infra: &Infra) -> Vec<FieldError> {
    let mut out = Vec::new();
    if infra.spec.apps_ingress.is_some() {
        out.push(FieldError::new(
            "spec.appsIngress",
            "apps ingress is per hosted cluster: move it to the spec.appsIngress of that cluster's InfraClusterAttachment",
        ));
    }
    if let Some(image) = &infra.spec.infra_components.proxy.proxy_image {
        out.push(FieldError::new(
            "spec.infraComponents.proxy.proxyImage",
            format!(
                "`{image}`: not supported, since the proxy needs Envoy 1.40 with the V8 wasm runtime: remove proxyImage, and write spec.infraComponents.proxy.image (the oooi-proxy image: Envoy 1.40 and oooi-envoy-gate) or leave it unset for the chart's"
            ),
        ));
    }
    out
}
