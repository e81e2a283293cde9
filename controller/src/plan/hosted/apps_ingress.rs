//! Apps ingress in the hosted cluster (no I/O): MetalLB and the apps
//! LoadBalancer Service, in the order the reconciler walks it:
//!
//! 1. [`gate`]: is apps ingress enabled, is the attachment accepted by its
//!    Infra, are its pool ranges valid (the Infra planner checks them: inside
//!    the CIDR, outside the DHCP pool and the infra addresses, disjoint from
//!    other attachments)? A conflict stops here: it is reported, not applied.
//! 2. [`install_objects`]: in `Managed` mode, the OLM Namespace,
//!    OperatorGroup and Subscription, and the `MetalLB` CR once its CRD exists.
//! 3. [`crds_missing`]: without the MetalLB CRDs there is nothing to put the
//!    pool in: `Managed` waits (Pending), `External` is Degraded.
//! 4. [`pool_objects`]: the `IPAddressPool` (not auto-assigned, so only the
//!    apps Service draws from it), its `L2Advertisement`, and the
//!    LoadBalancer Service in front of the IngressController's router pods.
//! 5. [`status`]: Ready once the Service has a VIP; otherwise why not.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::crd::{AppsIngressStatus, InfraClusterAttachment, MetalLbMode};
use crate::plan::hosted::hosted_objects::{
    ADVERTISEMENTS_CRD, HostedObject, POOLS_CRD, attachment_key, hosted_labels, ip_address_pools,
    l2_advertisements, metallbs, namespaces, object, operator_groups, services, subscriptions,
};
use crate::plan::hosted::public_dns::EXTERNAL_DNS_HOSTNAME;
use crate::plan::infra::attachments::AttachmentOutcome;

/// MetalLB's annotation choosing the pool of a LoadBalancer Service.
pub const POOL_ANNOTATION: &str = oooi_vocabulary::labels::METALLB_ADDRESS_POOL;
/// Label of an IngressController's router pods.
pub const ROUTER_LABEL: &str =
    "ingresscontroller.operator.openshift.io/deployment-ingresscontroller";
/// `status.appsIngress.phase` values.
pub mod phase {
    /// Progressing normally (waiting for something that should come).
    pub const PENDING: &str = "Pending";
    /// The Service has a VIP.
    pub const READY: &str = "Ready";
    /// Something needs a fix.
    pub const DEGRADED: &str = "Degraded";
}

/// `status.appsIngress.reason` values.
pub mod reason {
    /// The attachment is not accepted by its Infra (or the Infra is missing).
    pub const NOT_ACCEPTED: &str = "NotAccepted";
    /// `metallb.addresses` is empty.
    pub const NO_ADDRESSES: &str = "NoAddresses";
    /// A pool range is invalid or overlaps (details in the message).
    pub const POOL_CONFLICT: &str = "PoolConflict";
    /// The HostedCluster is not in the management cluster (or its API is not served).
    pub const HOSTED_CLUSTER_NOT_FOUND: &str = "HostedClusterNotFound";
    /// The HostedCluster has no admin kubeconfig yet.
    pub const KUBECONFIG_NOT_READY: &str = "KubeconfigNotReady";
    /// The admin kubeconfig cannot make a client.
    pub const KUBECONFIG_INVALID: &str = "KubeconfigInvalid";
    /// A request to the hosted API got no answer.
    pub const HOSTED_API_UNREACHABLE: &str = "HostedAPIUnreachable";
    /// The hosted API refused a request (e.g. a webhook or validation).
    pub const HOSTED_API_REJECTED: &str = "HostedAPIRejected";
    /// The MetalLB CRDs are not in the hosted cluster.
    pub const CRDS_MISSING: &str = "MetalLBCRDsMissing";
    /// No hosted node is Ready, so none can announce the VIP.
    pub const NO_READY_NODE: &str = "NoReadyNode";
    /// The Service exists; MetalLB has not assigned a VIP yet.
    pub const WAITING_FOR_VIP: &str = "WaitingForVIP";
    /// The Service has a VIP.
    pub const VIP_ASSIGNED: &str = "VIPAssigned";
}

/// The apps ingress settings with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Attachment namespace and name (labels of everything created).
    pub attachment: (String, String),
    /// Cluster domain.
    pub domain: String,
    /// MetalLB mode.
    pub mode: MetalLbMode,
    /// Pool ranges.
    pub addresses: Vec<String>,
    /// IPAddressPool and L2Advertisement name.
    pub pool_name: String,
    /// MetalLB namespace.
    pub metallb_namespace: String,
    /// OLM channel.
    pub channel: String,
    /// OLM catalog source.
    pub catalog_source: String,
    /// IngressController name.
    pub ingress_controller: String,
    /// Apps Service name.
    pub service_name: String,
    /// Apps Service namespace.
    pub service_namespace: String,
    /// Apps Service ports: (name, port, target port).
    pub ports: Vec<(String, u16, u16)>,
    /// Extra labels.
    pub labels: BTreeMap<String, String>,
    /// Extra annotations.
    pub annotations: BTreeMap<String, String>,
    /// Annotate for ExternalDNS.
    pub external_dns_hostname: bool,
}

/// Default IPAddressPool name.
pub const DEFAULT_POOL: &str = "oooi-apps";
/// Default MetalLB namespace.
pub const DEFAULT_METALLB_NAMESPACE: &str = "metallb-system";
/// Default apps Service name.
pub const DEFAULT_SERVICE: &str = "oooi-apps-ingress";
/// Default apps Service namespace (the router pods').
pub const DEFAULT_SERVICE_NAMESPACE: &str = "openshift-ingress";
/// OLM OperatorGroup name.
pub const OPERATOR_GROUP: &str = "metallb-operator";
/// OLM Subscription name.
pub const SUBSCRIPTION: &str = "metallb-operator-sub";
/// The `MetalLB` CR name.
pub const METALLB_CR: &str = "metallb";

/// What the reconciler does with apps ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Not enabled: remove whatever oooi made in the hosted cluster.
    Disabled,
    /// Enabled but not to be applied now; this is the status.
    Blocked(AppsIngressStatus),
    /// Go ahead with these settings.
    Go(Box<Resolved>),
}

/// A status.
pub fn apps_status(
    phase: &str,
    reason: &str,
    message: impl Into<String>,
    vip: Option<IpAddr>,
) -> AppsIngressStatus {
    let message = message.into();
    AppsIngressStatus {
        phase: phase.to_string(),
        reason: Some(reason.to_string()),
        message: (!message.is_empty()).then_some(message),
        vip: vip.map(|v| v.to_string()),
    }
}

/// Fills in the defaults of an enabled `spec.appsIngress`.
pub fn resolve(att: &InfraClusterAttachment) -> Option<Resolved> {
    let apps = att.spec.apps_ingress.as_ref().filter(|a| a.enabled)?;
    let m = &apps.metallb;
    let ports = match &apps.service.ports {
        Some(p) if !p.is_empty() => p
            .iter()
            .map(|p| (p.name.clone(), p.port, p.target_port.unwrap_or(p.port)))
            .collect(),
        _ => vec![("http".into(), 80, 80), ("https".into(), 443, 443)],
    };
    Some(Resolved {
        attachment: attachment_key(att),
        domain: att.spec.domain(),
        mode: m.mode,
        addresses: m.addresses.iter().map(|a| a.trim().to_string()).collect(),
        pool_name: m.pool_name.clone().unwrap_or_else(|| DEFAULT_POOL.into()),
        metallb_namespace: m
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_METALLB_NAMESPACE.into()),
        channel: m.channel.clone().unwrap_or_else(|| "stable".into()),
        catalog_source: m
            .catalog_source
            .clone()
            .unwrap_or_else(|| "redhat-operators".into()),
        ingress_controller: apps.ingress_controller.clone(),
        service_name: apps
            .service
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_SERVICE.into()),
        service_namespace: apps
            .service
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_SERVICE_NAMESPACE.into()),
        ports,
        labels: apps.service.labels.clone(),
        annotations: apps.service.annotations.clone(),
        external_dns_hostname: apps.service.external_dns_hostname,
    })
}

/// Step 1: decides from the spec and the Infra planner's verdict on the
/// attachment (`None` when the Infra is missing or invalid).
pub fn gate(att: &InfraClusterAttachment, outcome: Option<&AttachmentOutcome>) -> Gate {
    let Some(r) = resolve(att) else {
        return Gate::Disabled;
    };
    let outcome = match outcome {
        Some(o) if o.accepted() => o,
        Some(o) => {
            let why = o
                .exclusion
                .as_ref()
                .map(|e| e.message())
                .unwrap_or_default();
            return Gate::Blocked(apps_status(
                phase::PENDING,
                reason::NOT_ACCEPTED,
                format!("the attachment is not accepted by its Infra: {why}"),
                None,
            ));
        }
        None => {
            return Gate::Blocked(apps_status(
                phase::PENDING,
                reason::NOT_ACCEPTED,
                "the Infra is missing or its spec is invalid",
                None,
            ));
        }
    };
    if r.addresses.is_empty() {
        return Gate::Blocked(apps_status(
            phase::DEGRADED,
            reason::NO_ADDRESSES,
            "spec.appsIngress.metallb.addresses is empty: MetalLB has nothing to assign",
            None,
        ));
    }
    if !outcome.apps_ingress_errors.is_empty() {
        let msg: Vec<String> = outcome
            .apps_ingress_errors
            .iter()
            .map(|e| e.to_string())
            .collect();
        return Gate::Blocked(apps_status(
            phase::DEGRADED,
            reason::POOL_CONFLICT,
            format!("{}; the pool is not applied", msg.join("; ")),
            None,
        ));
    }
    Gate::Go(Box::new(r))
}

/// Step 2: the OLM install of MetalLB (`Managed` mode only); the `MetalLB`
/// CR only once its CRD exists (`operator_crd`).
pub fn install_objects(r: &Resolved, operator_crd: bool) -> Vec<HostedObject> {
    if r.mode != MetalLbMode::Managed {
        return Vec::new();
    }
    let ns = r.metallb_namespace.as_str();
    let labels = hosted_labels(&r.attachment);
    let mut out = vec![
        object(namespaces(), None, ns, labels.clone(), json!({})),
        object(
            operator_groups(),
            Some(ns),
            OPERATOR_GROUP,
            labels.clone(),
            json!({}),
        ),
        object(
            subscriptions(),
            Some(ns),
            SUBSCRIPTION,
            labels.clone(),
            json!({"spec": {
                "channel": r.channel,
                "name": "metallb-operator",
                "source": r.catalog_source,
                "sourceNamespace": "openshift-marketplace",
                "installPlanApproval": "Automatic",
            }}),
        ),
    ];
    if operator_crd {
        out.push(object(
            metallbs(),
            Some(ns),
            METALLB_CR,
            labels,
            json!({"spec": {}}),
        ));
    }
    out
}

/// Step 3: the status when the pool CRDs are missing (`pools_crd`: both
/// `IPAddressPool` and `L2Advertisement` are served).
pub fn crds_missing(r: &Resolved, pools_crd: bool) -> Option<AppsIngressStatus> {
    if pools_crd {
        return None;
    }
    Some(match r.mode {
        MetalLbMode::Managed => apps_status(
            phase::PENDING,
            reason::CRDS_MISSING,
            format!(
                "waiting for OLM to install MetalLB ({POOLS_CRD} and {ADVERTISEMENTS_CRD} are not served yet)"
            ),
            None,
        ),
        MetalLbMode::External => apps_status(
            phase::DEGRADED,
            reason::CRDS_MISSING,
            format!(
                "metallb.mode is External but {POOLS_CRD} and {ADVERTISEMENTS_CRD} are not served: install MetalLB or use mode Managed"
            ),
            None,
        ),
    })
}

/// The apps Service in the hosted cluster, as a typed object.
pub fn apps_service(r: &Resolved) -> Service {
    let mut labels = r.labels.clone();
    labels.extend(hosted_labels(&r.attachment));
    let mut annotations = r.annotations.clone();
    // Managed keys win over the same keys in spec.appsIngress.service.annotations.
    annotations.insert(POOL_ANNOTATION.to_string(), r.pool_name.clone());
    if r.external_dns_hostname {
        annotations.insert(
            EXTERNAL_DNS_HOSTNAME.to_string(),
            format!("*.apps.{}", r.domain),
        );
    }
    Service {
        metadata: ObjectMeta {
            name: Some(r.service_name.clone()),
            namespace: Some(r.service_namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            selector: Some(BTreeMap::from([(
                ROUTER_LABEL.to_string(),
                r.ingress_controller.clone(),
            )])),
            ports: Some(
                r.ports
                    .iter()
                    .map(|(name, port, target)| ServicePort {
                        name: Some(name.clone()),
                        port: i32::from(*port),
                        target_port: Some(IntOrString::Int(i32::from(*target))),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Step 4: the pool, its L2 advertisement and the apps Service.
pub fn pool_objects(r: &Resolved) -> Vec<HostedObject> {
    let ns = r.metallb_namespace.as_str();
    let labels = hosted_labels(&r.attachment);
    let svc = apps_service(r);
    let svc_value = serde_json::to_value(&svc).unwrap_or(Value::Null);
    let svc_obj = object(
        services(),
        Some(&r.service_namespace),
        &r.service_name,
        svc.metadata.labels.clone().unwrap_or_default(),
        json!({"spec": svc_value["spec"]}),
    );
    let mut svc_obj = svc_obj;
    svc_obj.object.metadata.annotations = svc.metadata.annotations.clone();
    vec![
        object(
            ip_address_pools(),
            Some(ns),
            &r.pool_name,
            labels.clone(),
            json!({"spec": {"addresses": r.addresses, "autoAssign": false}}),
        ),
        object(
            l2_advertisements(),
            Some(ns),
            &r.pool_name,
            labels,
            json!({"spec": {"ipAddressPools": [r.pool_name]}}),
        ),
        svc_obj,
    ]
}

/// The first IPv4 `status.loadBalancer.ingress[].ip` of a Service (as JSON):
/// the VLAN is IPv4, so a dual-stack Service's IPv6 address is passed over.
pub fn vip_of(service: &Value) -> Option<IpAddr> {
    service["status"]["loadBalancer"]["ingress"]
        .as_array()?
        .iter()
        .find_map(|i| i["ip"].as_str()?.parse::<std::net::Ipv4Addr>().ok())
        .map(IpAddr::V4)
}

/// How many Nodes (JSON) have condition `Ready=True`.
pub fn ready_nodes(nodes: &[Value]) -> usize {
    nodes
        .iter()
        .filter(|n| {
            n["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count()
}

/// Step 5: Ready with a VIP; otherwise Pending, saying whether a node could
/// announce one at all.
pub fn status(r: &Resolved, vip: Option<IpAddr>, ready_nodes: usize) -> AppsIngressStatus {
    let svc = format!("{}/{}", r.service_namespace, r.service_name);
    match vip {
        Some(v) => apps_status(
            phase::READY,
            reason::VIP_ASSIGNED,
            format!("Service {svc} has VIP {v} from pool {}", r.pool_name),
            Some(v),
        ),
        None if ready_nodes == 0 => apps_status(
            phase::PENDING,
            reason::NO_READY_NODE,
            format!("the hosted cluster has no Ready node to announce the VIP of {svc}"),
            None,
        ),
        None => apps_status(
            phase::PENDING,
            reason::WAITING_FOR_VIP,
            format!(
                "waiting for MetalLB to assign Service {svc} an address from pool {}",
                r.pool_name
            ),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::hosted::hosted_objects::ATTACHMENT_LABEL;
    use crate::plan::infra::attachments::Exclusion;
    use crate::plan::labels::MANAGED_BY;
    use kube::ResourceExt;

    fn att(apps: Value) -> InfraClusterAttachment {
        serde_json::from_value(json!({
            "apiVersion": "hostedcluster.densityops.com/v1alpha1",
            "kind": "InfraClusterAttachment",
            "metadata": {"name": "c1", "namespace": "oooi"},
            "spec": {
                "infraRef": {"name": "vlan200"},
                "hostedClusterRef": {"name": "c1"},
                "dns": {"clusterName": "c1", "baseDomain": "example.com"},
                "appsIngress": apps
            }
        }))
        .unwrap()
    }

    fn enabled(mode: &str) -> InfraClusterAttachment {
        att(
            json!({"enabled": true, "metallb": {"mode": mode, "addresses": ["198.51.100.50-198.51.100.59"]}}),
        )
    }

    fn outcome(a: &InfraClusterAttachment) -> AttachmentOutcome {
        let o = AttachmentOutcome::from_spec(a);
        assert_eq!(
            (o.owner().as_str(), o.control_plane_namespace.as_str()),
            ("clusters/c1", "clusters-c1")
        );
        o
    }

    fn go(g: Gate) -> Resolved {
        match g {
            Gate::Go(r) => *r,
            other => panic!("expected Go, got {other:?}"),
        }
    }

    fn blocked(g: Gate) -> AppsIngressStatus {
        match g {
            Gate::Blocked(s) => s,
            other => panic!("expected Blocked, got {other:?}"),
        }
    }

    #[test]
    fn defaults_fill_every_setting() {
        let a = enabled("External");
        let r = go(gate(&a, Some(&outcome(&a))));
        assert_eq!(r.attachment, ("oooi".to_string(), "c1".to_string()));
        assert_eq!(r.pool_name, "oooi-apps");
        assert_eq!(r.metallb_namespace, "metallb-system");
        assert_eq!(r.service_name, "oooi-apps-ingress");
        assert_eq!(r.service_namespace, "openshift-ingress");
        assert_eq!(r.ingress_controller, "default");
        assert_eq!(r.channel, "stable");
        assert_eq!(r.catalog_source, "redhat-operators");
        assert_eq!(
            r.ports,
            vec![("http".into(), 80, 80), ("https".into(), 443, 443)]
        );
    }

    #[test]
    fn disabled_or_absent_apps_ingress_is_disabled() {
        let a = att(json!({"enabled": false, "metallb": {"addresses": ["198.51.100.50/32"]}}));
        assert_eq!(gate(&a, Some(&outcome(&a))), Gate::Disabled);
        let mut a = enabled("External");
        a.spec.apps_ingress = None;
        assert_eq!(gate(&a, None), Gate::Disabled);
    }

    #[test]
    fn an_attachment_not_accepted_waits() {
        let a = enabled("External");
        let s = blocked(gate(&a, None));
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            ("Pending", Some("NotAccepted"))
        );
        let mut o = outcome(&a);
        o.exclusion = Some(Exclusion::DuplicateDomain(vec!["c0".into()]));
        let s = blocked(gate(&a, Some(&o)));
        assert_eq!(s.reason.as_deref(), Some("NotAccepted"));
        assert!(
            s.message.unwrap().contains("c0"),
            "names the other attachment"
        );
    }

    #[test]
    fn a_pool_conflict_or_no_addresses_is_degraded_and_not_applied() {
        let a = enabled("External");
        let mut o = outcome(&a);
        o.apps_ingress_errors.push(oooi_vocabulary::FieldError::new(
            "spec.appsIngress.metallb.addresses[0]",
            "198.51.100.50-198.51.100.59 overlaps the DHCP pool",
        ));
        let s = blocked(gate(&a, Some(&o)));
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            ("Degraded", Some("PoolConflict"))
        );
        let m = s.message.unwrap();
        assert!(
            m.contains("addresses[0]") && m.contains("not applied"),
            "{m}"
        );
        let a = att(json!({"enabled": true}));
        let s = blocked(gate(&a, Some(&outcome(&a))));
        assert_eq!(s.reason.as_deref(), Some("NoAddresses"));
    }

    #[test]
    fn managed_mode_installs_through_olm_and_the_metallb_cr_waits_for_its_crd() {
        let a = att(json!({"enabled": true, "metallb": {"mode": "Managed",
            "addresses": ["198.51.100.50/31"], "channel": "4.18", "catalogSource": "my-catalog",
            "namespace": "lb"}}));
        let r = go(gate(&a, Some(&outcome(&a))));
        let kinds = |v: &[HostedObject]| v.iter().map(|o| o.describe()).collect::<Vec<_>>();
        assert_eq!(
            kinds(&install_objects(&r, false)),
            vec![
                "Namespace /lb",
                "OperatorGroup lb/metallb-operator",
                "Subscription lb/metallb-operator-sub"
            ]
        );
        let all = install_objects(&r, true);
        assert_eq!(all.last().unwrap().describe(), "MetalLB lb/metallb");
        let sub = &all[2].object.data["spec"];
        assert_eq!(sub["channel"], "4.18");
        assert_eq!(sub["source"], "my-catalog");
        assert_eq!(sub["name"], "metallb-operator");
        assert_eq!(sub["sourceNamespace"], "openshift-marketplace");
        for o in &all {
            assert_eq!(
                o.object.labels().get(ATTACHMENT_LABEL).map(String::as_str),
                Some("c1")
            );
        }
        let ext = go(gate(
            &enabled("External"),
            Some(&outcome(&enabled("External"))),
        ));
        assert!(
            install_objects(&ext, true).is_empty(),
            "External installs nothing"
        );
    }

    #[test]
    fn missing_crds_wait_in_managed_mode_and_degrade_in_external_mode() {
        let m = go(gate(
            &enabled("Managed"),
            Some(&outcome(&enabled("Managed"))),
        ));
        let s = crds_missing(&m, false).unwrap();
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            ("Pending", Some("MetalLBCRDsMissing"))
        );
        let e = go(gate(
            &enabled("External"),
            Some(&outcome(&enabled("External"))),
        ));
        let s = crds_missing(&e, false).unwrap();
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            ("Degraded", Some("MetalLBCRDsMissing"))
        );
        assert_eq!(crds_missing(&e, true), None);
    }

    #[test]
    fn the_pool_is_not_auto_assigned_and_advertised_in_l2() {
        let a = enabled("External");
        let r = go(gate(&a, Some(&outcome(&a))));
        let objs = pool_objects(&r);
        assert_eq!(objs[0].describe(), "IPAddressPool metallb-system/oooi-apps");
        assert_eq!(
            objs[0].object.data["spec"],
            json!({"addresses": ["198.51.100.50-198.51.100.59"], "autoAssign": false})
        );
        assert_eq!(
            objs[1].describe(),
            "L2Advertisement metallb-system/oooi-apps"
        );
        assert_eq!(
            objs[1].object.data["spec"],
            json!({"ipAddressPools": ["oooi-apps"]})
        );
        assert_eq!(
            objs[2].describe(),
            "Service openshift-ingress/oooi-apps-ingress"
        );
        assert_eq!(objs[2].resource.api_version, "v1");
    }

    #[test]
    fn the_apps_service_selects_the_router_and_manages_the_pool_annotation() {
        let a = att(json!({"enabled": true, "ingressController": "sharded",
            "metallb": {"addresses": ["198.51.100.50/32"], "poolName": "apps"},
            "service": {"name": "apps-lb", "namespace": "ingress", "externalDnsHostname": true,
                "ports": [{"name": "https", "port": 443, "targetPort": 8443}],
                "labels": {"team": "a", "app.kubernetes.io/managed-by": "someone"},
                "annotations": {"metallb.universe.tf/address-pool": "other", "x": "y"}}}));
        let r = go(gate(&a, Some(&outcome(&a))));
        let svc = apps_service(&r);
        let spec = svc.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(
            spec.selector.unwrap(),
            BTreeMap::from([(ROUTER_LABEL.to_string(), "sharded".to_string())])
        );
        let ports = spec.ports.unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].port, 443);
        assert_eq!(ports[0].target_port, Some(IntOrString::Int(8443)));
        let ann = svc.metadata.annotations.unwrap();
        assert_eq!(ann[POOL_ANNOTATION], "apps", "managed key wins");
        assert_eq!(ann["x"], "y");
        assert_eq!(ann[EXTERNAL_DNS_HOSTNAME], "*.apps.c1.example.com");
        let labels = svc.metadata.labels.unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["app.kubernetes.io/managed-by"], MANAGED_BY);
        assert_eq!(svc.metadata.name.as_deref(), Some("apps-lb"));
        assert_eq!(svc.metadata.namespace.as_deref(), Some("ingress"));
        let plain = go(gate(
            &enabled("External"),
            Some(&outcome(&enabled("External"))),
        ));
        assert!(
            !apps_service(&plain)
                .metadata
                .annotations
                .unwrap()
                .contains_key(EXTERNAL_DNS_HOSTNAME),
            "no ExternalDNS annotation unless asked"
        );
    }

    #[test]
    fn vip_nodes_and_status() {
        let svc = json!({"status": {"loadBalancer": {"ingress": [{"hostname": "x"}, {"ip": "198.51.100.50"}]}}});
        assert_eq!(vip_of(&svc), "198.51.100.50".parse().ok());
        assert_eq!(vip_of(&json!({"status": {}})), None);
        let nodes = [
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            json!({}),
        ];
        assert_eq!(ready_nodes(&nodes), 1);
        let a = enabled("External");
        let r = go(gate(&a, Some(&outcome(&a))));
        let s = status(&r, "198.51.100.50".parse().ok(), 0);
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            ("Ready", Some("VIPAssigned"))
        );
        assert_eq!(s.vip.as_deref(), Some("198.51.100.50"));
        let s = status(&r, None, 0);
        assert_eq!(s.reason.as_deref(), Some("NoReadyNode"));
        let s = status(&r, None, 2);
        assert_eq!(
            (s.phase.as_str(), s.reason.as_deref()),
            ("Pending", Some("WaitingForVIP"))
        );
    }
}
