//! The API kinds oooi writes in a hosted cluster, and how everything it
//! writes there is labelled (so cleanup finds it even after a rename).

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject};
use oooi_vocabulary::labels as keys;
use serde_json::Value;

use crate::crd::InfraClusterAttachment;
use crate::plan::labels::{APP_NAME, MANAGED_BY};

/// Label naming the attachment an object in the hosted cluster (or a
/// management-side public Service) belongs to.
pub const ATTACHMENT_LABEL: &str = keys::ATTACHMENT;
/// Label naming that attachment's namespace.
pub const ATTACHMENT_NAMESPACE_LABEL: &str = keys::ATTACHMENT_NAMESPACE;

/// (namespace, name) of an attachment: what the objects made for it in its
/// hosted cluster are labelled with.
pub fn attachment_key(att: &InfraClusterAttachment) -> (String, String) {
    (
        att.metadata.namespace.clone().unwrap_or_default(),
        att.metadata.name.clone().unwrap_or_default(),
    )
}

/// CRD of MetalLB's address pools.
pub const POOLS_CRD: &str = "ipaddresspools.metallb.io";
/// CRD of MetalLB's L2 advertisements.
pub const ADVERTISEMENTS_CRD: &str = "l2advertisements.metallb.io";
/// CRD of the MetalLB operator's `MetalLB` kind.
pub const OPERATOR_CRD: &str = "metallbs.metallb.io";

/// An object to apply in the hosted cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct HostedObject {
    /// Its API resource.
    pub resource: ApiResource,
    /// The object (namespaced when `metadata.namespace` is set).
    pub object: DynamicObject,
}

impl HostedObject {
    /// `Kind namespace/name`, for logs and messages.
    pub fn describe(&self) -> String {
        format!(
            "{} {}/{}",
            self.resource.kind,
            self.object.metadata.namespace.as_deref().unwrap_or(""),
            self.object.metadata.name.as_deref().unwrap_or("")
        )
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `v1 Namespace`.
pub fn namespaces() -> ApiResource {
    resource("", "v1", "Namespace", "namespaces")
}
/// `v1 Service`.
pub fn services() -> ApiResource {
    resource("", "v1", "Service", "services")
}
/// OLM OperatorGroups.
pub fn operator_groups() -> ApiResource {
    resource(
        "operators.coreos.com",
        "v1",
        "OperatorGroup",
        "operatorgroups",
    )
}
/// OLM Subscriptions.
pub fn subscriptions() -> ApiResource {
    resource(
        "operators.coreos.com",
        "v1alpha1",
        "Subscription",
        "subscriptions",
    )
}
/// The MetalLB operator's `MetalLB` kind.
pub fn metallbs() -> ApiResource {
    resource("metallb.io", "v1beta1", "MetalLB", "metallbs")
}
/// MetalLB IPAddressPools.
pub fn ip_address_pools() -> ApiResource {
    resource("metallb.io", "v1beta1", "IPAddressPool", "ipaddresspools")
}
/// MetalLB L2Advertisements.
pub fn l2_advertisements() -> ApiResource {
    resource(
        "metallb.io",
        "v1beta1",
        "L2Advertisement",
        "l2advertisements",
    )
}

/// Labels of everything oooi creates in the hosted cluster for one attachment.
pub fn hosted_labels(attachment: &(String, String)) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::APP_NAME.to_string(), APP_NAME.to_string()),
        (keys::APP_COMPONENT.to_string(), "apps-ingress".to_string()),
        (keys::APP_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (ATTACHMENT_LABEL.to_string(), attachment.1.clone()),
        (ATTACHMENT_NAMESPACE_LABEL.to_string(), attachment.0.clone()),
    ])
}

/// Label selector of [`hosted_labels`] (what cleanup lists by).
pub fn hosted_selector(attachment: &(String, String)) -> String {
    format!(
        "{}={MANAGED_BY},{ATTACHMENT_LABEL}={},{ATTACHMENT_NAMESPACE_LABEL}={}",
        keys::APP_MANAGED_BY,
        attachment.1,
        attachment.0
    )
}

/// One object of kind `ar` with `labels` and `body` (its fields besides
/// `metadata`).
pub fn object(
    ar: ApiResource,
    namespace: Option<&str>,
    name: &str,
    labels: BTreeMap<String, String>,
    body: Value,
) -> HostedObject {
    let mut o = DynamicObject::new(name, &ar).data(body);
    o.metadata.namespace = namespace.map(str::to_string);
    o.metadata.labels = Some(labels);
    HostedObject {
        resource: ar,
        object: o,
    }
}
