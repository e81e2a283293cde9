//! Children of the derived kinds: Deployments (Multus, probes, resources,
//! least privilege), ConfigMaps holding the configs, Services, PVC, and the
//! Envoy config rendered by oooi-envoy. Plus the statuses.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::plan_support;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::{Container, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use oooi_controller::crd::{ProxyServer, condition};
use oooi_controller::plan::{self, Observed, PlannedCondition, merge_conditions, plan_infra};
use plan_support::*;
use serde_json::Value;

const TOKEN: &str = "0123456789abcdef-token";

fn desired() -> plan::DesiredComponents {
    let i = infra("oooi", "vlan");
    let atts = [attachment("oooi", "c1", "vlan", "c1")];
    plan_infra(&i, &atts, &observed(&[("c1", &["192.0.2.101"])]))
        .desired
        .unwrap()
}

fn container(d: &Deployment) -> &Container {
    &pod_spec(d).containers[0]
}

fn caps(d: &Deployment) -> (Vec<String>, Vec<String>, i64) {
    let sc = container(d).security_context.as_ref().unwrap();
    let c = sc.capabilities.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.privileged, Some(false));
    (
        c.add.clone().unwrap_or_default(),
        c.drop.clone().unwrap_or_default(),
        sc.run_as_user.unwrap(),
    )
}

fn multus(d: &Deployment) -> Value {
    let ann = pod_annotations(d);
    serde_json::from_str(&ann["k8s.v1.cni.cncf.io/networks"]).unwrap()
}

#[test]
fn dhcp_children_carry_config_pvc_and_raw_socket_capability() {
    let d = desired();
    let mut server = d.dhcp.into_iter().next().unwrap();
    server.metadata.uid = Some("uid-dhcp".into());
    let c = plan::dhcp::children(&server).unwrap();
    let dep = &c.deployment;
    assert_eq!(dep.metadata.name.as_deref(), Some("vlan-dhcp"));
    assert_eq!(
        multus(dep),
        serde_json::json!([{"name": "vlan", "namespace": "oooi", "interface": "net1", "ips": ["192.0.2.2/24"]}])
    );
    let (add, drop, uid) = caps(dep);
    assert!(add.is_empty(), "no capability: replies go by broadcast");
    assert_eq!(drop, ["ALL"]);
    assert_eq!(uid, 65532);
    let psc = pod_spec(dep).security_context.as_ref().unwrap();
    let sysctls: Vec<(&str, &str)> = psc
        .sysctls
        .iter()
        .flatten()
        .map(|s| (s.name.as_str(), s.value.as_str()))
        .collect();
    assert_eq!(
        sysctls,
        [
            ("net.ipv4.ip_unprivileged_port_start", "0"),
            ("net.ipv4.ping_group_range", "0 2147483647")
        ],
        "port 67 and ICMP echo without a capability"
    );
    let spec = dep.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("Recreate")
    );
    let ctr = container(dep);
    // The oooi-dhcp command line (`oooi-dhcp serve --help`).
    assert_eq!(
        ctr.args.clone().unwrap(),
        [
            "serve",
            "--config",
            "/etc/oooi-dhcp/config.yaml",
            "--data-dir",
            "/var/lib/oooi-dhcp",
            "--metrics-addr",
            "$(POD_IP):9067",
            "--health-addr",
            "$(POD_IP):9070",
            "--inventory-listen",
            "$(POD_IP):9069,127.0.0.1:9069",
            "--inventory-token-file",
            "/etc/oooi-dhcp-inventory/token"
        ]
    );
    // The probes ask the health listener, whose connections nothing sent
    // to the metrics port can take.
    assert_probes_on_the_pod_address(ctr, "--health-addr");
    let liveness = ctr.liveness_probe.as_ref().unwrap().http_get.as_ref();
    assert_eq!(
        liveness.map(|g| (g.path.as_deref(), g.port.clone())),
        Some((
            Some("/healthz"),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(plan::dhcp::HEALTH_PORT)
        ))
    );
    let tcp: Vec<(&str, i32)> = ctr
        .ports
        .iter()
        .flatten()
        .filter(|p| p.protocol.as_deref() == Some("TCP"))
        .map(|p| (p.name.as_deref().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        tcp,
        [
            ("http", plan::dhcp::HTTP_PORT),
            ("health", plan::dhcp::HEALTH_PORT),
            ("inventory", 9069)
        ]
    );
    // The lease inventory: on the pod address (the controller's poll) and
    // the pod's loopback (port-forward), its token mounted read-only from
    // the Infra's inventory token Secret.
    let inventory = ctr
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("inventory"))
        .unwrap();
    assert_eq!(
        (inventory.container_port, inventory.protocol.as_deref()),
        (9069, Some("TCP"))
    );
    let m = ctr
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "inventory-token")
        .unwrap();
    assert_eq!(
        (m.mount_path.as_str(), m.read_only),
        ("/etc/oooi-dhcp-inventory", Some(true))
    );
    let vol = pod_spec(dep)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "inventory-token")
        .unwrap();
    assert_eq!(
        vol.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("vlan-dhcp-inventory-token")
    );
    assert!(ctr.readiness_probe.as_ref().unwrap().http_get.is_some());
    assert!(ctr.liveness_probe.is_some());
    assert!(ctr.resources.as_ref().unwrap().requests.is_some());
    // The ConfigMap holds exactly the config oooi-dhcp accepts.
    let text = &c.config_map.as_ref().unwrap().data.as_ref().unwrap()["config.yaml"];
    let cfg = oooi_dhcp_config::Config::from_yaml(text).expect("oooi-dhcp loads the ConfigMap");
    assert_eq!(cfg.interface.as_deref(), Some("net1"));
    let pvc = c.pvc.as_ref().unwrap();
    assert_eq!(pvc.metadata.name.as_deref(), Some("vlan-dhcp-leases"));
    assert_eq!(
        pvc.spec
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "1Gi"
    );
    assert!(c.services.is_empty(), "DHCP is reached on the VLAN only");
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.service_account_name.as_deref(), Some("vlan-dhcp"));
    let owner = &dep.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("DHCPServer", "vlan-dhcp", Some(true))
    );
}

#[test]
fn dns_children_serve_the_pod_view_through_a_cluster_ip() {
    let d = desired();
    let c = plan::dns::children(d.dns.first().unwrap()).unwrap();
    let (add, _, uid) = caps(&c.deployment);
    assert!(add.is_empty(), "port 53 through the pod sysctl");
    assert_eq!(uid, 65532);
    let svc: &Service = &c.services[0];
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let ports: Vec<(i32, String, String)> = spec
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| {
            let target = serde_json::to_value(p.target_port.as_ref().unwrap())
                .unwrap()
                .to_string();
            (p.port, p.protocol.clone().unwrap(), target)
        })
        .collect();
    assert_eq!(
        ports,
        [
            (53, "UDP".into(), "5353".into()),
            (53, "TCP".into(), "5353".into())
        ]
    );
    let text = &c.config_map.as_ref().unwrap().data.as_ref().unwrap()["config.yaml"];
    let cfg = oooi_dns_config::Config::parse(text).expect("oooi-dns loads the ConfigMap");
    assert_eq!(
        cfg.http, None,
        "the shared ConfigMap names no metrics address"
    );
    let ctr = container(&c.deployment);
    assert_eq!(
        ctr.args.clone().unwrap(),
        [
            "serve",
            "--config",
            "/etc/oooi-dns/config.yaml",
            "--metrics-addr",
            "$(POD_IP):9153",
            "--health-addr",
            "$(POD_IP):9154"
        ]
    );
    // The probes ask the health listener, whose connections nothing sent
    // to the metrics port can take.
    assert_probes_on_the_pod_address(ctr, "--health-addr");
    assert_eq!(
        ctr.liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .port,
        ctr.readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .port
    );
    let ports: Vec<(&str, i32)> = ctr
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .filter(|p| p.protocol.as_deref() == Some("TCP"))
        .map(|p| (p.name.as_deref().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        ports,
        [
            ("dns-tcp", 53),
            ("pod-dns-tcp", 5353),
            ("http", plan::dns::HTTP_PORT),
            ("health", plan::dns::HEALTH_PORT)
        ]
    );
}

/// The endpoint the probes ask (named by its flag, `listener`) binds the
/// pod-network address (the downward API's `status.podIP`), never 0.0.0.0,
/// which would include the VLAN interface; the readiness probe uses its
/// port.
fn assert_probes_on_the_pod_address(ctr: &k8s_openapi::api::core::v1::Container, listener: &str) {
    let env = ctr.env.as_ref().unwrap();
    let pod_ip = env.iter().find(|e| e.name == "POD_IP").expect("POD_IP env");
    let field = pod_ip
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(field.field_path, "status.podIP");
    let args = ctr.args.as_ref().unwrap();
    let at = args.iter().position(|a| a == listener).unwrap();
    let port = args[at + 1]
        .strip_prefix("$(POD_IP):")
        .expect("pod address");
    assert!(!args.iter().any(|a| a.contains("0.0.0.0")), "{args:?}");
    let probe = ctr
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(serde_json::to_value(&probe.port).unwrap().to_string(), port);
}

#[test]
fn proxy_children_render_envoy_through_oooi_envoy_with_the_token() {
    let d = desired();
    let proxy = d.proxy.into_iter().next().unwrap();
    let c = plan::proxy::children(&proxy, TOKEN).unwrap();
    let (add, _, uid) = caps(&c.deployment);
    assert!(add.is_empty(), "443 through the pod sysctl, no capability");
    assert_eq!(uid, 65532);
    let secret = c.secret.as_ref().unwrap();
    let files = secret.data.as_ref().unwrap();
    let lds: Value = serde_json::from_slice(&files["lds.json"].0).unwrap();
    let expected = oooi_envoy::render(
        &plan::proxy::envoy_config(&proxy.spec, TOKEN),
        std::path::Path::new("/etc/oooi-envoy"),
    );
    assert_eq!(lds, expected.listeners);
    let boot: Value = serde_json::from_slice(&files["envoy.json"].0).unwrap();
    // Envoy reads its listeners from the gate's directory; the rendered LDS
    // in the Secret is what the gate reads.
    assert_eq!(
        boot["dynamic_resources"]["lds_config"]["path_config_source"]["path"],
        "/run/oooi-envoy/lds.json"
    );
    assert_eq!(
        boot["dynamic_resources"]["cds_config"]["path_config_source"]["path"],
        "/etc/oooi-envoy/cds.json"
    );
    let pod = pod_spec(&c.deployment);
    let envoy = &pod.containers[0];
    assert_eq!(
        envoy.command.as_deref(),
        Some(&["oooi-envoy-gate".to_string()][..])
    );
    let args = envoy.args.as_ref().unwrap();
    let dash = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(
        args[..dash],
        [
            "--listeners",
            "/etc/oooi-envoy/lds.json",
            "--out",
            "/run/oooi-envoy",
            "--ready",
            &format!(
                "http://127.0.0.1:{}/ready",
                oooi_controller::plan::proxy::READY_PORT
            ),
        ]
    );
    assert_eq!(args[dash + 1..dash + 3], ["envoy", "-c"]);
    // Readiness and liveness ask the readiness listener, never the push port.
    let ready = i32::from(oooi_controller::plan::proxy::READY_PORT);
    let probe = envoy.readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.http_get.as_ref().unwrap().path.as_deref(),
        Some("/ready")
    );
    assert_eq!(
        probe.http_get.as_ref().unwrap().port,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(ready)
    );
    assert_eq!(
        envoy
            .liveness_probe
            .as_ref()
            .unwrap()
            .tcp_socket
            .as_ref()
            .unwrap()
            .port,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(ready)
    );
    assert!(
        envoy
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .any(|p| p.name.as_deref() == Some("ready") && p.container_port == ready)
    );
    assert_eq!(args[dash + 3], "/etc/oooi-envoy/envoy.json");
    let run = envoy
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == "/run/oooi-envoy")
        .expect("the gate's directory is mounted");
    assert_ne!(run.read_only, Some(true));
    let volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == run.name)
        .unwrap();
    assert_eq!(
        volume.empty_dir.as_ref().and_then(|e| e.medium.as_deref()),
        Some("Memory")
    );
    let names: Vec<&str> = lds["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["tls_443", "tls_6443", "table_api", "ready", "metrics"]
    );
    // The token reaches Envoy only through the Secret (it is in the table
    // API filter's configuration).
    assert!(
        files
            .values()
            .any(|f| String::from_utf8_lossy(&f.0).contains(TOKEN))
    );
    let expected_files: Vec<String> = oooi_envoy::files(
        &plan::proxy::envoy_config(&proxy.spec, TOKEN),
        std::path::Path::new("/etc/oooi-envoy"),
    )
    .unwrap()
    .into_iter()
    .map(|(n, _)| n)
    .collect();
    assert_eq!(
        files
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        expected_files.into_iter().collect()
    );
    // The module is loaded through `..data` of the config mount (one atomic swap).
    assert!(files.values().any(|f| {
        String::from_utf8_lossy(&f.0).contains("/etc/oooi-envoy/..data/oooi_sni_router.wasm")
    }));

    let internal = &c.services[0];
    assert_eq!(internal.metadata.name.as_deref(), Some("vlan-proxy"));
    let ports: Vec<i32> = internal
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [443, 6443]);
    let push = c.services[1].spec.as_ref().unwrap();
    assert_eq!(push.cluster_ip.as_deref(), Some("None"));
    assert_eq!(push.publish_not_ready_addresses, Some(true));
    let ctr = container(&c.deployment);
    let ready = ctr
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(ready.path.as_deref(), Some("/ready"));
    assert_eq!(multus(&c.deployment)[0]["ips"][0], "192.0.2.4/24");
}

#[test]
fn a_proxy_on_high_ports_runs_non_root_without_capabilities() {
    let d = desired();
    let mut proxy: ProxyServer = d.proxy.into_iter().next().unwrap();
    proxy.spec.tls_ports = vec![6443, 8443];
    proxy.spec.routes.0.retain(|r| r.port == 6443);
    let c = plan::proxy::children(&proxy, TOKEN).unwrap();
    let (add, drop, uid) = caps(&c.deployment);
    assert!(add.is_empty());
    assert_eq!(drop, ["ALL"]);
    assert_eq!(uid, plan::workload::NON_ROOT_UID);
    let sc = container(&c.deployment).security_context.clone().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
}

#[test]
fn a_short_token_or_a_bad_table_is_refused() {
    let d = desired();
    let proxy = d.proxy.into_iter().next().unwrap();
    let e = plan::proxy::children(&proxy, "short").unwrap_err();
    assert!(e.to_string().contains("push token"));
    let mut bad = proxy.clone();
    let dup = bad.spec.routes.0[0].clone();
    bad.spec.routes.0.push(dup);
    let e = plan::proxy::children(&bad, TOKEN).unwrap_err();
    assert!(e.to_string().starts_with("spec.routes["), "{e}");
}

#[test]
fn a_standalone_server_is_its_own_instance() {
    let d = desired();
    let mut dns = d.dns.into_iter().next().unwrap();
    dns.metadata.labels = None;
    dns.metadata.name = Some("lab-dns".into());
    let c = plan::dns::children(&dns).unwrap();
    let sel = c
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .selector
        .match_labels
        .clone()
        .unwrap();
    assert_eq!(sel["app.kubernetes.io/instance"], "lab-dns");
    assert_eq!(sel["app.kubernetes.io/component"], "dns");
}

#[test]
fn every_child_carries_the_contract_labels() {
    let d = desired();
    let mut all = plan::dhcp::children(d.dhcp.first().unwrap())
        .unwrap()
        .to_values();
    all.extend(
        plan::dns::children(d.dns.first().unwrap())
            .unwrap()
            .to_values(),
    );
    all.extend(
        plan::proxy::children(d.proxy.first().unwrap(), TOKEN)
            .unwrap()
            .to_values(),
    );
    assert_eq!(all.len(), 4 + 4 + 5);
    for o in &all {
        let l = &o["metadata"]["labels"];
        assert_eq!(l["app.kubernetes.io/name"], "oooi", "{o}");
        assert_eq!(l["app.kubernetes.io/instance"], "vlan");
        assert_eq!(l["app.kubernetes.io/managed-by"], "oooi-controller");
        assert_eq!(l["hostedcluster.densityops.com/infra"], "vlan");
        assert!(
            ["dhcp", "dns", "proxy"].contains(&l["app.kubernetes.io/component"].as_str().unwrap())
        );
        assert_eq!(o["metadata"]["namespace"], "oooi");
        assert!(o["apiVersion"].is_string() && o["kind"].is_string());
    }
}

#[test]
fn unchanged_conditions_keep_their_transition_time() {
    let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
    let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
    let planned = [PlannedCondition::yes(
        condition::READY,
        "AllComponentsReady",
        "",
    )];
    let first = merge_conditions(&[], &planned, Some(1), &t0);
    let again = merge_conditions(&first, &planned, Some(2), &t1);
    assert_eq!(again[0].last_transition_time, t0);
    assert_eq!(again[0].observed_generation, Some(2));
    let flipped = merge_conditions(
        &again,
        &[PlannedCondition::no(
            condition::READY,
            "ComponentsNotReady",
            "dns",
        )],
        Some(2),
        &t1,
    );
    assert_eq!(flipped[0].last_transition_time, t1);
}

#[test]
fn infra_status_reads_readiness_from_deployments() {
    let i = infra("oooi", "vlan");
    let p = plan_infra(
        &i,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &Observed::default(),
    );
    let ready = Deployment {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            generation: Some(2),
            ..Default::default()
        },
        spec: Some(Default::default()),
        status: Some(DeploymentStatus {
            observed_generation: Some(2),
            ready_replicas: Some(1),
            updated_replicas: Some(1),
            ..Default::default()
        }),
    };
    let mut stale = ready.clone();
    stale.status.as_mut().unwrap().observed_generation = Some(1);
    let comps = oooi_controller::crd::ComponentsStatus {
        dhcp: Some(plan::infra::component_status(true, Some(&ready))),
        dns: Some(plan::infra::component_status(true, Some(&stale))),
        proxy: Some(plan::infra::component_status(true, None)),
    };
    assert!(comps.dhcp.as_ref().unwrap().ready);
    assert!(!comps.dns.as_ref().unwrap().ready);
    let now = Time(k8s_openapi::jiff::Timestamp::from_second(5).unwrap());
    let st = plan::infra::infra_status(&i, &p, comps, &now);
    assert_eq!(st.observed_generation, Some(3));
    let r = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (r.status.as_str(), r.reason.as_str(), r.message.as_str()),
        ("False", "ComponentsNotReady", "not ready: dns, proxy")
    );
    assert_eq!(st.attachments.accepted, 1);
}

#[test]
fn attachments_and_workers_change_configs_but_never_restart_pods() {
    let i = infra("oooi", "vlan");
    let one = plan_infra(
        &i,
        &[attachment("oooi", "c1", "vlan", "c1")],
        &Observed::default(),
    )
    .desired
    .unwrap();
    let two = plan_infra(
        &i,
        &[
            attachment("oooi", "c1", "vlan", "c1"),
            attachment_yaml(
                "oooi",
                "c2",
                "vlan",
                "c2",
                "c2",
                "  services:\n    - {name: mcs, port: 22623, targetService: ignition-server-proxy, targetPort: 443}\n",
            ),
        ],
        &observed(&[("c1", &["192.0.2.101"]), ("c2", &["192.0.2.121"])]),
    )
    .desired
    .unwrap();
    let (p1, p2) = (
        plan::proxy::children(one.proxy.first().unwrap(), TOKEN).unwrap(),
        plan::proxy::children(two.proxy.first().unwrap(), TOKEN).unwrap(),
    );
    assert_ne!(
        p1.secret, p2.secret,
        "the new listener port reaches Envoy's files"
    );
    assert_eq!(
        p1.deployment, p2.deployment,
        "Envoy watches its files: no rollout"
    );
    let (d1, d2) = (
        plan::dns::children(one.dns.first().unwrap()).unwrap(),
        plan::dns::children(two.dns.first().unwrap()).unwrap(),
    );
    assert_ne!(d1.config_map, d2.config_map);
    assert_eq!(d1.deployment, d2.deployment, "oooi-dns reloads its file");
    let (h1, h2) = (
        plan::dhcp::children(one.dhcp.first().unwrap()).unwrap(),
        plan::dhcp::children(two.dhcp.first().unwrap()).unwrap(),
    );
    assert_eq!(h1.deployment, h2.deployment, "oooi-dhcp reloads its file");
}
