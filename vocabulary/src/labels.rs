//! The label and annotation keys oooi writes on objects and selects them
//! by, and the values of the standard `app.kubernetes.io` labels. One list,
//! so the controller, the address agent and must-gather select the same
//! objects.

/// The API group of oooi's kinds; the prefix of its own keys.
pub const GROUP: &str = "hostedcluster.densityops.com";

/// The finalizer on every Infra and attachment.
pub const FINALIZER: &str = "hostedcluster.densityops.com/cleanup";

// Labels (oooi's own).

/// The Infra an object belongs to.
pub const INFRA: &str = "hostedcluster.densityops.com/infra";
/// The one server a pod runs, on components with one server per address.
pub const SERVER: &str = "hostedcluster.densityops.com/server";
/// The attachment an object (in the hosted cluster too) was made for.
pub const ATTACHMENT: &str = "hostedcluster.densityops.com/attachment";
/// The attachment's namespace, on objects in a hosted cluster.
pub const ATTACHMENT_NAMESPACE: &str = "hostedcluster.densityops.com/attachment-namespace";
/// The Infra's namespace, on objects the controller makes elsewhere.
pub const INFRA_NAMESPACE: &str = "hostedcluster.densityops.com/infra-namespace";
/// Marks a hosted cluster's Service published through public DNS.
pub const PUBLIC_DNS: &str = "hostedcluster.densityops.com/public-dns";

// Annotations (oooi's own).

/// The hash of what the controller last applied to an object.
pub const APPLIED_HASH: &str = "hostedcluster.densityops.com/applied-hash";
/// The pod template's hash, to tell a rollout from a no-op.
pub const TEMPLATE_HASH: &str = "hostedcluster.densityops.com/template-hash";
/// The digest of the filter module a proxy runs.
pub const FILTER_DIGEST: &str = "hostedcluster.densityops.com/filter-digest";
/// The digest of the module kept for rollback.
pub const FILTER_PREVIOUS_DIGEST: &str = "hostedcluster.densityops.com/filter-previous-digest";
/// The build id stamped in the filter module.
pub const FILTER_BUILD_ID: &str = "hostedcluster.densityops.com/filter-build-id";
/// The filter module's size in bytes.
pub const FILTER_BYTES: &str = "hostedcluster.densityops.com/filter-bytes";

// Other projects' keys oooi writes or reads.

/// Multus: the networks a pod joins.
pub const MULTUS_NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
/// CAPI: the MachineDeployment a Machine belongs to.
pub const CAPI_DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
/// MetalLB: the pool a Service takes its address from.
pub const METALLB_ADDRESS_POOL: &str = "metallb.universe.tf/address-pool";
/// external-dns: the names to publish for a Service.
pub const EXTERNAL_DNS_HOSTNAME: &str = "external-dns.alpha.kubernetes.io/hostname";

// The standard `app.kubernetes.io` labels and oooi's values.

/// `app.kubernetes.io/name`.
pub const APP_NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/instance`.
pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/component`.
pub const APP_COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/managed-by`.
pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `app.kubernetes.io/part-of`.
pub const APP_PART_OF: &str = "app.kubernetes.io/part-of";
/// oooi's value of [`APP_NAME`] and [`APP_PART_OF`].
pub const APP_NAME_VALUE: &str = "oooi";
/// oooi's value of [`APP_MANAGED_BY`] (also its field manager).
pub const MANAGED_BY_VALUE: &str = "oooi-controller";

// Leases (`coordination.k8s.io`).

/// The controller's leader-election Lease, in its own namespace, unless
/// `run --lease-name` names another (the chart's `leaderElection.leaseName`
/// defaults to the same); must-gather collects it by this name.
pub const LEADER_LEASE: &str = "oooi-controller";
/// [`APP_MANAGED_BY`] on the Leases an earlier address agent kept (one per
/// VLAN address). Today's agent makes none; must-gather still collects
/// those an upgrade left behind (docs/installation.md says how to delete
/// them).
pub const EARLIER_AGENT_LEASE_MANAGER: &str = "oooi-addr-agent";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_keys_sit_under_the_group() {
        for key in [
            FINALIZER,
            INFRA,
            SERVER,
            ATTACHMENT,
            ATTACHMENT_NAMESPACE,
            INFRA_NAMESPACE,
            PUBLIC_DNS,
            APPLIED_HASH,
            TEMPLATE_HASH,
            FILTER_DIGEST,
            FILTER_PREVIOUS_DIGEST,
            FILTER_BUILD_ID,
            FILTER_BYTES,
        ] {
            let (prefix, name) = key.split_once('/').unwrap();
            assert_eq!(prefix, GROUP, "{key}");
            // A label name: at most 63 characters of [a-z0-9-].
            assert!(name.len() <= 63 && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'));
        }
    }
}
