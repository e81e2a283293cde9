//! Address takeover: the DNS and proxy pods of an Infra with several
//! replicas carry the address agent as a native sidecar with NET_ADMIN and
//! NET_RAW alone and no API credentials (no token, no Role: it makes no
//! API request); the programs that parse VLAN traffic keep no capability.
//! Without takeover (or with one replica) the pods are as before.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support::{component_infra, pod_annotations, pod_spec};

use k8s_openapi::api::core::v1::{Container, PodSpec};
use oooi_controller::crd::Infra;
use oooi_controller::plan::workload::pod_security::{Level, level};
use oooi_controller::plan::workload::scc;
use oooi_controller::plan::workload::{AGENT_COMMAND, AGENT_CONTAINER, AGENT_HEALTH_PORT};
use oooi_controller::plan::{Children, Observed, dns, plan_infra, proxy};
use serde_json::json;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// The VLAN's network as the tests name it: a NetworkAttachmentDefinition,
/// or a ClusterUserDefinedNetwork the controller manages.
const NAD: &str = "networkAttachmentDefinition: vlan";
const CUDN: &str = "clusterUserDefinedNetwork: {name: vlan}";

/// Two DNS and two proxy replicas on `network` with `failover`.
fn infra(failover: &str, network: &str) -> Infra {
    let b = component_infra()
        .dns_servers(&["192.0.2.3", "192.0.2.6"])
        .proxy_servers(&["192.0.2.4", "192.0.2.7"])
        .failover(failover);
    match network {
        NAD => b,
        CUDN => b.cudn(json!({"name": "vlan"})),
        other => panic!("no network {other}"),
    }
    .build()
}

/// The children of every DNS and proxy server of `infra`.
fn children(i: &Infra) -> Vec<Children> {
    let mut d = plan_infra(i, &[], &Observed::default())
        .desired
        .expect("valid");
    let mut out = Vec::new();
    for s in &mut d.dns {
        s.metadata.uid = Some(format!("uid-{}", s.metadata.name.clone().unwrap()));
        out.push(dns::children(s).unwrap());
    }
    for s in &mut d.proxy {
        s.metadata.uid = Some(format!("uid-{}", s.metadata.name.clone().unwrap()));
        out.push(proxy::children(s, TOKEN).unwrap());
    }
    out
}

fn pod(c: &Children) -> &PodSpec {
    pod_spec(&c.deployment)
}

fn agent(c: &Children) -> Option<&Container> {
    pod(c)
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == AGENT_CONTAINER)
}

fn arg<'a>(c: &'a Container, flag: &str) -> &'a str {
    let args = c.args.as_ref().unwrap();
    let i = args.iter().position(|a| a == flag).unwrap();
    &args[i + 1]
}

#[test]
fn the_agent_is_a_native_sidecar_with_two_capabilities_and_no_token() {
    for c in children(&infra("Auto", NAD)) {
        let name = c.deployment.metadata.name.clone().unwrap();
        let a = agent(&c).unwrap_or_else(|| panic!("{name}: no agent"));
        assert_eq!(a.restart_policy.as_deref(), Some("Always"), "{name}");
        assert_eq!(a.command.as_ref().unwrap(), &[AGENT_COMMAND]);
        let sc = a.security_context.as_ref().unwrap();
        let caps = sc.capabilities.as_ref().unwrap();
        assert_eq!(caps.drop.as_ref().unwrap(), &["ALL"]);
        assert_eq!(caps.add.as_ref().unwrap(), &["NET_ADMIN", "NET_RAW"]);
        assert_eq!(sc.run_as_user, Some(0));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        // No container has a token: none is mounted and no volume
        // projects one.
        let p = pod(&c);
        assert_eq!(p.automount_service_account_token, Some(false));
        assert_eq!(a.volume_mounts, None, "{name}");
        for v in p.volumes.iter().flatten() {
            let sources = v.projected.as_ref().and_then(|pr| pr.sources.clone());
            assert!(
                sources
                    .iter()
                    .flatten()
                    .all(|s| s.service_account_token.is_none()),
                "{name}: volume {} projects a token",
                v.name
            );
        }
        for main in &p.containers {
            let msc = main.security_context.as_ref().unwrap();
            assert_eq!(msc.capabilities.as_ref().unwrap().add, None, "{name}");
            assert_eq!(msc.run_as_non_root, Some(true), "{name}");
            assert!(
                main.volume_mounts
                    .iter()
                    .flatten()
                    .all(|m| !m.mount_path.starts_with("/var/run/secrets/kubernetes.io")),
                "{name}: the component has no token"
            );
        }
        // Only flags the agent has: its group, not the old Lease names;
        // its name and namespace (for logs) come from the environment.
        let args = a.args.as_ref().unwrap();
        for gone in ["--lease-prefix", "--identity", "--namespace"] {
            assert!(!args.iter().any(|x| x == gone), "{name}: {gone}");
        }
        assert_eq!(arg(a, "--interface"), "net1");
        // Metrics for the scrapers; the liveness probe asks a listener of
        // its own, whose connections nothing sent to the metrics port can
        // take. Both on the pod address, never the VLAN.
        assert_eq!(arg(a, "--metrics-addr"), "$(POD_IP):9466");
        assert_eq!(arg(a, "--health-addr"), "$(POD_IP):9467");
        let live = a
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(
            (live.path.as_deref(), &live.port),
            (
                Some("/healthz"),
                &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(AGENT_HEALTH_PORT)
            ),
            "{name}"
        );
        let ports: Vec<(&str, i32)> = a
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.as_deref().unwrap(), p.container_port))
            .collect();
        assert_eq!(ports, [("agent-metrics", 9466), ("agent-health", 9467)]);
        let ready = arg(a, "--ready-url");
        if name.contains("dns") {
            assert_eq!(arg(a, "--group"), "vlan-dns");
            assert_eq!(arg(a, "--address"), "192.0.2.3/24,192.0.2.6/24");
            assert_eq!(ready, "http://$(POD_IP):9154/healthz");
        } else {
            assert_eq!(arg(a, "--group"), "vlan-proxy");
            assert_eq!(arg(a, "--address"), "192.0.2.4/24,192.0.2.7/24");
            assert_eq!(ready, "http://127.0.0.1:9446/ready");
        }
        let home = pod_annotations(&c.deployment)["k8s.v1.cni.cncf.io/networks"].clone();
        assert!(
            home.contains(&format!("{}/24", arg(a, "--home"))),
            "{name}: home is the pod's static address"
        );
        let env: Vec<&str> = a.env.iter().flatten().map(|e| e.name.as_str()).collect();
        for want in ["POD_NAME", "POD_NAMESPACE", "POD_IP"] {
            assert!(env.contains(&want), "{name}: {want}");
        }
    }
}

#[test]
fn the_agent_gets_no_role_and_no_rbac_object_is_rendered() {
    for c in children(&infra("AddressTakeover", NAD)) {
        let name = c.deployment.metadata.name.clone().unwrap();
        assert!(agent(&c).is_some(), "{name}: no agent");
        let kinds: Vec<String> = c
            .to_values()
            .iter()
            .map(|v| v["kind"].as_str().unwrap().to_string())
            .collect();
        for k in ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"] {
            assert!(!kinds.iter().any(|x| x == k), "{name}: {k} in {kinds:?}");
        }
        assert_eq!(
            c.service_account.automount_service_account_token,
            Some(false),
            "{name}"
        );
    }
}

#[test]
fn agent_pods_take_the_agent_scc_on_openshift_and_need_the_privileged_level() {
    for c in children(&infra("Auto", NAD)) {
        let mut d = c.deployment.clone();
        scc::for_openshift(&mut d);
        assert_eq!(scc::choose(&d).unwrap().name, "oooi-address-agent");
        let p = pod_spec(&d);
        // The agent keeps UID 0; the component's UID is left to the SCC.
        let a = p.init_containers.as_ref().unwrap();
        assert_eq!(a[0].security_context.as_ref().unwrap().run_as_user, Some(0));
        assert_eq!(
            p.containers[0]
                .security_context
                .as_ref()
                .unwrap()
                .run_as_user,
            None
        );
        // NET_ADMIN and NET_RAW are beyond the baseline profile.
        assert_eq!(level(pod(&c)), Level::Privileged);
    }
}

#[test]
fn without_takeover_the_pods_have_no_agent_no_role_and_stay_restricted() {
    for (failover, network) in [("Off", NAD), ("Auto", CUDN)] {
        for c in children(&infra(failover, network)) {
            let name = c.deployment.metadata.name.clone().unwrap();
            assert!(agent(&c).is_none(), "{failover} {network}: {name}");
            assert_eq!(level(pod(&c)), Level::Restricted);
            let mut d = c.deployment.clone();
            scc::for_openshift(&mut d);
            assert_eq!(scc::choose(&d).unwrap().name, "restricted-v2");
        }
    }
}
