//! Names, labels and owner references shared by every planned object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use oooi_vocabulary::labels as keys;

/// Label with the Infra an object belongs to.
pub const INFRA_LABEL: &str = keys::INFRA;
/// Value of `app.kubernetes.io/name` on every child.
pub const APP_NAME: &str = keys::APP_NAME_VALUE;
/// Value of `app.kubernetes.io/managed-by` on every child.
pub const MANAGED_BY: &str = keys::MANAGED_BY_VALUE;

/// The three components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    /// oooi-dhcp.
    Dhcp,
    /// oooi-dns.
    Dns,
    /// Envoy with the SNI router.
    Proxy,
}

impl Component {
    /// The `app.kubernetes.io/component` value and the name suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Dhcp => "dhcp",
            Component::Dns => "dns",
            Component::Proxy => "proxy",
        }
    }

    /// Name of the derived object an Infra owns: `<infra>-<component>`.
    pub fn derived_name(self, infra: &str) -> String {
        format!("{infra}-{}", self.as_str())
    }

    /// Name of the derived object of the server on the `index`-th address
    /// (from 0) of a component that runs one server per address:
    /// `<infra>-<component>` for the first (the name of the one-server
    /// form, so a single server grows into several without being
    /// replaced), `<infra>-<component>-<index + 1>` for the others.
    pub fn replica_name(self, infra: &str, index: usize) -> String {
        match index {
            0 => self.derived_name(infra),
            i => format!("{}-{}", self.derived_name(infra), i + 1),
        }
    }
}

/// Label naming the one server a pod runs, on the pods of components with
/// one server per address (selects a server's own peer Service).
pub const SERVER_LABEL: &str = keys::SERVER;

/// Name of the Secret (key `token`) an Infra's DHCP servers take as the
/// bearer token of their lease inventory API (one for both servers of a
/// pair: the controller and `oooi-controller leases` ask either).
pub fn inventory_token_secret_name(infra: &str) -> String {
    format!("{infra}-dhcp-inventory-token")
}

/// Name of the push-token Secret of an Infra's proxy (key `token`).
pub fn push_token_secret_name(infra: &str) -> String {
    format!("{infra}-proxy-push-token")
}

/// The instance a component object belongs to: the Infra named by its
/// [`INFRA_LABEL`] label, or the object's own name when it stands alone.
/// Selectors use instance + component, so two Infras (or two standalone
/// servers) in one namespace never share pods or Services.
pub fn instance_of(meta: &ObjectMeta) -> String {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(INFRA_LABEL))
        .cloned()
        .or_else(|| meta.name.clone())
        .unwrap_or_default()
}

/// The labels every child carries.
pub fn labels(instance: &str, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::APP_NAME.to_string(), APP_NAME.to_string()),
        (
            keys::APP_COMPONENT.to_string(),
            component.as_str().to_string(),
        ),
        (keys::APP_INSTANCE.to_string(), instance.to_string()),
        (keys::APP_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (INFRA_LABEL.to_string(), instance.to_string()),
    ])
}

/// The pod selector of a component instance.
pub fn selector(instance: &str, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::APP_NAME.to_string(), APP_NAME.to_string()),
        (
            keys::APP_COMPONENT.to_string(),
            component.as_str().to_string(),
        ),
        (keys::APP_INSTANCE.to_string(), instance.to_string()),
    ])
}

/// A controller owner reference to `owner`, or none when the owner has no
/// uid yet (offline `render`): garbage collection needs the uid.
pub fn owner_refs<K>(owner: &K) -> Option<Vec<OwnerReference>>
where
    K: Resource<DynamicType = ()>,
{
    owner.controller_owner_ref(&()).map(|r| vec![r])
}

/// Metadata of a child: name, namespace, labels, owner.
pub fn child_meta<K>(owner: &K, name: String, instance: &str, component: Component) -> ObjectMeta
where
    K: Resource<DynamicType = ()>,
{
    ObjectMeta {
        name: Some(name),
        namespace: owner.meta().namespace.clone(),
        labels: Some(labels(instance, component)),
        owner_references: owner_refs(owner),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_server_keeps_the_one_server_name() {
        assert_eq!(Component::Dhcp.replica_name("vlan", 0), "vlan-dhcp");
        assert_eq!(Component::Dhcp.replica_name("vlan", 1), "vlan-dhcp-2");
        assert_eq!(Component::Dns.replica_name("vlan", 2), "vlan-dns-3");
    }
}
