//! The real `gather` binary against the stateful mocked API, served over
//! HTTP on loopback and loaded with the lab's scenario
//! (`lab/two-clusters.yaml`, planned by the controller's own
//! `render`), the pods its Deployments would run, their logs, the hosted
//! clusters' objects, and the components' endpoints behind the mock's pod
//! proxy: the real `oooi-dns` and `oooi-dhcp` metrics and health servers,
//! and for each proxy replica a real Envoy with the filter (its table API;
//! needs `envoy` and the built filter module, as `tools/dev test` provides).

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use oooi_controller::render::{RenderInput, render};
use oooi_controller::testing::InfraBuilder;
use oooi_kube_mock::MockApi;
use oooi_tests::fixture::TwoClusters;
use serde_json::{Value, json};

/// The push token the proxies' Secrets hold.
const PUSH_TOKEN: &str = "push-token-3f9a1c7e5b2d4068";
/// The DHCP servers' inventory token.
const INVENTORY_TOKEN: &str = "inventory-token-6b1f0d9a2c";
/// A Secret value planted beside the controller's.
const PLANTED_SECRET: &str = "planted-secret-value-91c4e2";
/// A token written literally into a pod's env.
const ENV_TOKEN: &str = "env-literal-token-7d3b0a55";
/// A password in a VMI's cloud-init user data.
const VMI_PASSWORD: &str = "vmi-cloudinit-password-5e8f";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The API path of an object.
fn path_of(o: &Value) -> String {
    let api = o["apiVersion"].as_str().unwrap();
    let kind = o["kind"].as_str().unwrap();
    let plural = match kind {
        "NetworkPolicy" => "networkpolicies".to_string(),
        "NetworkAttachmentDefinition" => "network-attachment-definitions".to_string(),
        k => format!("{}s", k.to_ascii_lowercase()),
    };
    let base = if api.contains('/') {
        format!("/apis/{api}")
    } else {
        format!("/api/{api}")
    };
    let name = o["metadata"]["name"].as_str().unwrap();
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{base}/{plural}/{name}"),
    }
}

fn insert(mock: &MockApi, o: Value) {
    mock.insert(&path_of(&o), o);
}

fn condition(t: &str, s: &str, reason: &str) -> Value {
    json!({"type": t, "status": s, "reason": reason, "message": format!("{t} is {s}"),
           "lastTransitionTime": "2026-12-06T20:00:00Z"})
}

fn crd(group: &str, plural: &str, kind: &str, version: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": format!("{plural}.{group}")},
           "spec": {"group": group, "names": {"kind": kind, "plural": plural}, "scope": "Namespaced",
                    "versions": [{"name": version, "served": true, "storage": true}]}})
}

/// A loopback HTTP server answering `routes` for each path.
async fn serve(routes: Vec<(&'static str, u16, String)>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut app = axum::Router::new();
    for (path, code, body) in routes {
        app = app.route(
            path,
            axum::routing::get(move || {
                let body = body.clone();
                async move { (axum::http::StatusCode::from_u16(code).unwrap(), body) }
            }),
        );
    }
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn kubeconfig(dir: &Path, api: SocketAddr) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(&path, oooi_kube_mock::kubeconfig(api, "default", None)).unwrap();
    path
}

/// Runs the binary; returns its exit status and stderr.
async fn gather(
    kubeconfig: &Path,
    dest: &Path,
    extra: &[&str],
) -> (std::process::ExitStatus, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_gather"))
        .arg("--dest")
        .arg(dest)
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}; the tree has:\n{}", listing(root).join("\n")))
}

fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// The lab's scenario in the mock: returns the pods by component.
/// `want`: the table generation and digest the ProxyServers' status names.
async fn load_lab(mock: &MockApi, want: &(u64, String)) -> Vec<Value> {
    let mut input = RenderInput::default();
    input
        .add_file(&repo().join("lab/two-clusters.yaml"))
        .unwrap();
    let rendered = render(&input, PUSH_TOKEN).unwrap();

    // The user's resources, with the status the controller would write.
    for i in &input.infras {
        let mut o = serde_json::to_value(i).unwrap();
        o["status"] = json!({"observedGeneration": 1, "conditions": [
            condition("Ready", "True", "AllComponentsReady"),
            condition("Degraded", "False", "AsExpected")],
            "components": {"dns": {"ready": true}, "proxy": {"ready": false,
                "message": "lab-proxy-2: no table yet"}, "dhcp": {"ready": true}}});
        insert(mock, o);
    }
    for a in &input.attachments {
        let mut o = serde_json::to_value(a).unwrap();
        let name = o["metadata"]["name"].as_str().unwrap().to_string();
        let worker = if name == "a" {
            "192.0.2.51"
        } else {
            "192.0.2.61"
        };
        o["status"] = json!({"observedGeneration": 1, "workerAddresses": [worker],
            "conditions": [condition("Accepted", "True", "Accepted"), condition("Ready", "True", "Ready")]});
        insert(mock, o);
    }
    for crd_doc in oooi_controller::crd::crds() {
        insert(mock, serde_json::to_value(crd_doc).unwrap());
    }

    // Everything the controller would apply, derived servers with a status.
    let mut deployments = Vec::new();
    for mut o in rendered.objects.clone() {
        let kind = o["kind"].as_str().unwrap_or("").to_string();
        match kind.as_str() {
            "PlanSummary" => continue,
            "DHCPServer" | "DNSServer" => {
                o["status"] = json!({"conditions": [condition("Ready", "True", "Available")]});
            }
            "ProxyServer" => {
                o["status"] = json!({"routesGeneration": want.0, "routesDigest": want.1,
                    "conditions": [condition("Ready", "True", "Available"),
                                   condition("RoutesSynced", "True", "InSync")]});
            }
            "Secret" if o["data"].is_null() && o["stringData"].is_null() => {
                // The Envoy config Secret holds the push token in its listeners.
                o["stringData"] = json!({"listeners.json": format!(
                    "{{\"token\": \"Bearer {PUSH_TOKEN}\"}}")});
            }
            "Deployment" => deployments.push(o.clone()),
            _ => {}
        }
        insert(mock, o);
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    insert(
        mock,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "lab-proxy-push-token", "namespace": "oooi"},
               "data": {"token": b64.encode(PUSH_TOKEN)}}),
    );
    insert(
        mock,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "lab-dhcp-inventory-token", "namespace": "oooi"},
               "data": {"token": b64.encode(INVENTORY_TOKEN)}}),
    );
    insert(
        mock,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "site-credentials", "namespace": "oooi",
                            "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                format!("{{\"stringData\":{{\"password\":\"{PLANTED_SECRET}\"}}}}")}},
               "data": {"password": b64.encode(PLANTED_SECRET)}}),
    );

    // The pods the Deployments run; the first DNS replica restarted once.
    let mut pods = Vec::new();
    for d in &deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let template = &d["spec"]["template"];
        let mut spec = template["spec"].clone();
        let restarts = u64::from(name == "lab-dns");
        if name == "lab-proxy" {
            let env = &mut spec["containers"][0]["env"];
            if !env.is_array() {
                *env = json!([]);
            }
            env.as_array_mut()
                .unwrap()
                .push(json!({"name": "OOOI_PUSH_TOKEN", "value": ENV_TOKEN}));
        }
        let statuses: Vec<Value> = spec["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                json!({"name": c["name"], "ready": true, "restartCount": restarts,
                            "state": {"running": {}}})
            })
            .collect();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-5d8f7-x2k9q"), "namespace": "oooi",
                         "labels": template["metadata"]["labels"]},
            "spec": spec,
            "status": {"phase": "Running", "podIP": format!("10.128.0.{}", pods.len() + 10),
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": statuses},
        });
        insert(mock, pod.clone());
        pods.push(pod);
    }
    let controller_pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "oooi-controller-6c9d-abcde", "namespace": "oooi-system",
                     "labels": {"app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "controller"}},
        "spec": {"containers": [{"name": "controller"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "controller", "restartCount": 0}]},
    });
    insert(mock, controller_pod.clone());
    pods.push(controller_pod);

    for p in &pods {
        let ns = p["metadata"]["namespace"].as_str().unwrap();
        let name = p["metadata"]["name"].as_str().unwrap();
        for c in p["spec"]["containers"].as_array().unwrap() {
            let c = c["name"].as_str().unwrap();
            mock.set_pod_log(
                ns,
                name,
                c,
                false,
                &format!(
                    "{{\"level\":\"INFO\",\"message\":\"{c} started\"}}\n\
                 pushed table with Authorization: Bearer {PUSH_TOKEN}\n\
                 read {PLANTED_SECRET} from the site\n"
                ),
            );
            if name.starts_with("lab-dns-5d8f7") {
                mock.set_pod_log(
                    ns,
                    name,
                    c,
                    true,
                    &format!("{c} before the restart: exit 137\n"),
                );
            }
        }
    }

    // Leases, events, the VLAN's NAD.
    insert(
        mock,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "oooi-controller", "namespace": "oooi-system"},
        "spec": {"holderIdentity": "oooi-controller-6c9d-abcde"}}),
    );
    insert(
        mock,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "lab-dns-192-0-2-3", "namespace": "oooi",
                     "labels": {"app.kubernetes.io/managed-by": "oooi-addr-agent",
                                "hostedcluster.densityops.com/address": "192.0.2.3"}},
        "spec": {"holderIdentity": "lab-dns-5d8f7-x2k9q"}}),
    );
    insert(
        mock,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "somebody-elses", "namespace": "oooi"}, "spec": {}}),
    );
    insert(
        mock,
        json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "lab-dns.1", "namespace": "oooi"},
        "involvedObject": {"kind": "Pod", "name": "lab-dns-5d8f7-x2k9q"},
        "reason": "BackOff", "message": "Back-off restarting failed container dns",
        "lastTimestamp": "2026-12-06T20:01:00Z", "type": "Warning"}),
    );
    insert(
        mock,
        crd(
            "k8s.cni.cncf.io",
            "network-attachment-definitions",
            "NetworkAttachmentDefinition",
            "v1",
        ),
    );
    insert(
        mock,
        json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "lab-vlan", "namespace": "default"},
        "spec": {"config": "{\"cniVersion\":\"0.3.1\",\"type\":\"macvlan\"}"}}),
    );

    // The hosted clusters: HostedCluster, NodePool, Machines, VMIs.
    insert(
        mock,
        crd(
            "hypershift.openshift.io",
            "hostedclusters",
            "HostedCluster",
            "v1beta1",
        ),
    );
    insert(
        mock,
        crd(
            "hypershift.openshift.io",
            "nodepools",
            "NodePool",
            "v1beta1",
        ),
    );
    insert(
        mock,
        crd("cluster.x-k8s.io", "machines", "Machine", "v1beta1"),
    );
    insert(
        mock,
        crd(
            "kubevirt.io",
            "virtualmachineinstances",
            "VirtualMachineInstance",
            "v1",
        ),
    );
    for (c, addr, mac) in [
        ("a", "192.0.2.51", "02:00:0a:00:00:01"),
        ("b", "192.0.2.61", "02:00:0b:00:00:01"),
    ] {
        let cp = format!("clusters-{c}");
        insert(
            mock,
            json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
            "metadata": {"name": c, "namespace": "clusters"},
            "spec": {"platform": {"type": "KubeVirt"}, "pullSecret": {"name": "pull-secret"}},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}}),
        );
        insert(
            mock,
            json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "NodePool",
            "metadata": {"name": format!("{c}-workers"), "namespace": "clusters"},
            "spec": {"clusterName": c, "replicas": 1}}),
        );
        insert(
            mock,
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": format!("{c}-workers-1"), "namespace": cp},
            "spec": {"bootstrap": {"dataSecretName": "user-data"}},
            "status": {"phase": "Running", "addresses": [{"type": "InternalIP", "address": addr}]}}),
        );
        insert(
            mock,
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": format!("{c}-workers-1"), "namespace": cp},
            "spec": {"volumes": [{"name": "cloudinit", "cloudInitNoCloud": {
                "userData": format!("#cloud-config\npassword: {VMI_PASSWORD}\n")}}]},
            "status": {"phase": "Running", "interfaces": [
                {"name": "vlan", "mac": mac, "ipAddress": addr, "ipAddresses": [addr]}]}}),
        );
    }
    insert(
        mock,
        json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "NodePool",
        "metadata": {"name": "other-workers", "namespace": "clusters"},
        "spec": {"clusterName": "other"}}),
    );
    pods
}

/// The components' endpoints behind the pod proxy: the real DNS and DHCP
/// metrics servers, and a real Envoy with the filter per proxy replica
/// (`proxies[0]` for the first, `[1]` for the second).
async fn serve_endpoints(
    mock: &MockApi,
    pods: &[Value],
    dns_config: &str,
    proxies: &[TwoClusters; 2],
) {
    let config = oooi_dns::config::Config::parse(dns_config).unwrap();
    oooi_dns::metrics::prime(&config);
    oooi_dns::metrics::set_health(oooi_dns::metrics::Health::Ready);
    let dns_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dns_addr = dns_listener.local_addr().unwrap();
    tokio::spawn(oooi_dns::metrics::serve_http(dns_listener));

    let m = oooi_dhcp::metrics::metrics();
    m.leases_active.set(2);
    m.leases_free.set(48);
    m.pool_utilisation.set(0.04);
    oooi_dhcp::metrics::set_pair_status("single", "no peer configured");
    oooi_dhcp::metrics::beat();
    let dhcp_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    tokio::spawn(oooi_dhcp::metrics::serve_http(dhcp_addr));

    for p in pods {
        let ns = p["metadata"]["namespace"].as_str().unwrap();
        let name = p["metadata"]["name"].as_str().unwrap();
        let port = |n: &str| oooi_gather::components::port_of(p, n).unwrap();
        match p["metadata"]["labels"]["app.kubernetes.io/component"].as_str() {
            Some("dns") => mock.set_pod_endpoint(ns, name, port("http"), dns_addr),
            Some("dhcp") => mock.set_pod_endpoint(ns, name, port("http"), dhcp_addr),
            Some("proxy") => {
                let envoy = if name.starts_with("lab-proxy-2") {
                    &proxies[1].envoy
                } else {
                    &proxies[0].envoy
                };
                // The pod's metrics port serves Envoy's /stats/prometheus as
                // /metrics; the harness's Envoy has it on its admin port.
                let admin = envoy.admin;
                let (code, stats) = tokio::task::spawn_blocking(move || {
                    oooi_tests::http_blocking(admin, "GET", "/stats/prometheus", &[], b"").unwrap()
                })
                .await
                .unwrap();
                assert_eq!(code, 200);
                let metrics = serve(vec![("/metrics", 200, stats)]).await;
                mock.set_pod_endpoint(ns, name, port("push"), envoy.api);
                mock.set_pod_endpoint(ns, name, port("http"), metrics);
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathers_the_lab_scenario_into_the_documented_tree_without_secret_bytes() {
    let mock = MockApi::start();
    // The proxy replicas are real Envoys with the filter: the first holds
    // its table, the second has just restarted and holds none yet.
    let held = TwoClusters::start(1).await.expect("Envoy with the filter");
    held.envoy.push_table(&held.table).unwrap();
    let fresh = TwoClusters::start(1).await.expect("Envoy with the filter");
    let want = (held.table.generation, held.table.digest());
    let routes = held.table.routes.len();
    let pods = load_lab(&mock, &want).await;
    let dns_cm = mock
        .get("/api/v1/namespaces/oooi/configmaps/lab-dns-config")
        .unwrap();
    let dns_config = dns_cm["data"]["config.yaml"].as_str().unwrap().to_string();
    let proxies = [held, fresh];
    serve_endpoints(&mock, &pods, &dns_config, &proxies).await;
    let api = mock.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), api);
    let dest = dir.path().join("must-gather");

    let (status, stderr) = gather(&kc, &dest, &[]).await;
    assert!(status.success(), "gather failed: {stderr}");
    // The must-gather convention's version file, beside the tree.
    let version = std::fs::read_to_string(dest.join("version")).unwrap();
    assert_eq!(
        version,
        format!("oooi-must-gather\n{}\n", env!("CARGO_PKG_VERSION"))
    );
    let root = dest.join("oooi");
    let files = listing(&root);

    // Every oooi resource, with its status.
    let infra = read(&root, "namespaces/oooi/infras/lab.yaml");
    assert!(infra.contains("AllComponentsReady"), "{infra}");
    for rel in [
        "namespaces/oooi/infraclusterattachments/a.yaml",
        "namespaces/oooi/infraclusterattachments/b.yaml",
        "namespaces/oooi/dhcpservers/lab-dhcp.yaml",
        "namespaces/oooi/dnsservers/lab-dns.yaml",
        "namespaces/oooi/dnsservers/lab-dns-2.yaml",
        "namespaces/oooi/proxyservers/lab-proxy-2.yaml",
    ] {
        assert!(
            read(&root, rel).contains("status:"),
            "{rel} without its status"
        );
    }
    assert!(
        read(&root, "namespaces/oooi/proxyservers/lab-proxy.yaml")
            .contains(&format!("routesGeneration: {}", want.0))
    );
    // Their children.
    for rel in [
        "namespaces/oooi/deployments/lab-dhcp.yaml",
        "namespaces/oooi/deployments/lab-proxy-2.yaml",
        "namespaces/oooi/configmaps/lab-dns-config.yaml",
        "namespaces/oooi/services/lab-proxy-push.yaml",
        "namespaces/oooi/serviceaccounts/lab-dns.yaml",
        "namespaces/oooi/persistentvolumeclaims/lab-dhcp-leases.yaml",
        "namespaces/oooi/poddisruptionbudgets/lab-dns-replicas.yaml",
        "namespaces/oooi/networkpolicies/lab-proxy-push.yaml",
        "namespaces/clusters-a/networkpolicies/oooi-proxy-oooi-lab.yaml",
        "namespaces/clusters-b/networkpolicies/oooi-proxy-oooi-lab.yaml",
        "namespaces/oooi/pods/lab-dns-5d8f7-x2k9q.yaml",
        "namespaces/oooi-system/pods/oooi-controller-6c9d-abcde.yaml",
        "namespaces/oooi/leases/lab-dns-192-0-2-3.yaml",
        "namespaces/oooi-system/leases/oooi-controller.yaml",
        "namespaces/default/network-attachment-definitions/lab-vlan.yaml",
        "cluster-scoped/customresourcedefinitions/infras.hostedcluster.densityops.com.yaml",
    ] {
        assert!(
            files.iter().any(|f| f == rel),
            "{rel} missing; the tree has:\n{}",
            files.join("\n")
        );
    }
    assert!(
        !files.iter().any(|f| f.contains("somebody-elses")),
        "a foreign Lease was gathered"
    );
    // Secrets: name, type and keys.
    let push = read(&root, "namespaces/oooi/secrets/lab-proxy-push-token.yaml");
    assert!(
        push.contains("- token") && push.contains("type: Opaque"),
        "{push}"
    );
    // Events.
    assert!(
        read(&root, "namespaces/oooi/events.yaml")
            .contains("Back-off restarting failed container dns")
    );
    // Logs, current and previous.
    assert!(
        read(&root, "namespaces/oooi/logs/lab-dns-5d8f7-x2k9q/dns.log").contains("dns started")
    );
    assert!(
        read(
            &root,
            "namespaces/oooi/logs/lab-dns-5d8f7-x2k9q/dns.previous.log"
        )
        .contains("exit 137")
    );
    assert!(
        read(
            &root,
            "namespaces/oooi-system/logs/oooi-controller-6c9d-abcde/controller.log"
        )
        .contains("controller started")
    );
    assert!(
        !files
            .iter()
            .any(|f| f.contains("lab-dhcp") && f.ends_with(".previous.log"))
    );
    for p in &pods {
        let ns = p["metadata"]["namespace"].as_str().unwrap();
        let name = p["metadata"]["name"].as_str().unwrap();
        for c in p["spec"]["containers"].as_array().unwrap() {
            let rel = format!(
                "namespaces/{ns}/logs/{name}/{}.log",
                c["name"].as_str().unwrap()
            );
            assert!(files.contains(&rel), "{rel} missing");
        }
    }
    // The hosted side.
    assert!(read(&root, "namespaces/clusters/hostedclusters/a.yaml").contains("KubeVirt"));
    assert!(files.contains(&"namespaces/clusters/nodepools/b-workers.yaml".to_string()));
    assert!(
        !files.iter().any(|f| f.contains("other-workers")),
        "a NodePool of no attachment was gathered"
    );
    let machine = read(&root, "namespaces/clusters-a/machines/a-workers-1.yaml");
    assert!(
        machine.contains("192.0.2.51") && !machine.contains("user-data"),
        "{machine}"
    );
    let vmi = read(
        &root,
        "namespaces/clusters-b/virtualmachineinstances/b-workers-1.yaml",
    );
    assert!(
        vmi.contains("02:00:0b:00:00:01") && !vmi.contains("cloud-config"),
        "{vmi}"
    );
    // The components' own state, through the pod proxy.
    let table = files
        .iter()
        .find(|f| {
            f.starts_with("namespaces/oooi/endpoints/lab-proxy-5d8f7")
                && f.ends_with("v1_routes.txt")
        })
        .unwrap_or_else(|| panic!("no table answer in:\n{}", files.join("\n")));
    assert!(read(&root, table).contains(&format!("\"generation\":{}", want.0)));
    let summary = read(&root, "summary.txt");
    for want in [
        "oooi/lab  Ready=True(AllComponentsReady) Degraded=False(AsExpected)",
        "proxy: ready=false - lab-proxy-2: no table yet",
        "oooi/a  infra=lab hostedCluster=clusters/a workers=[192.0.2.51]",
        "leases active=2 free=48",
        "pool used 4%",
        "pair single (no peer configured)",
        "oooi/lab-dns-5d8f7-x2k9q  Running ready=True restarts=1",
        "hostedclusters.hypershift.openshift.io: served, v1beta1",
        "clusteruserdefinednetworks.k8s.ovn.org: not served",
        // The lease inventory alone (below).
        "Errors: 1 (see errors.txt)",
    ] {
        assert!(summary.contains(want), "summary lacks {want:?}:\n{summary}");
    }
    let in_sync = format!(
        "table generation {} digest {}, {routes} routes, filter build ",
        want.0, want.1
    );
    let line = summary
        .lines()
        .find(|l| l.contains("pod oooi/lab-proxy-5d8f7"))
        .unwrap_or_default();
    assert!(
        line.contains(&in_sync) && line.ends_with("ready true, in sync with its ProxyServer"),
        "{line}"
    );
    let line = summary
        .lines()
        .find(|l| l.contains("pod oooi/lab-proxy-2-5d8f7"))
        .unwrap_or_default();
    assert!(
        line.contains("table generation 0 digest ?, 0 routes")
            && line.ends_with(&format!(
                "ready false, NOT in sync: its ProxyServer wants generation {} digest {}",
                want.0, want.1
            )),
        "{line}"
    );
    for view in config_views(&dns_config) {
        assert!(
            summary.contains(&format!("{view} (0 queries)")),
            "view {view} not in:\n{summary}"
        );
    }
    // Nothing failed but the DHCP lease inventory: the mocked API cannot
    // port-forward (gather::inventory's own tests ask loopback servers).
    let errors = read(&root, "errors.txt");
    assert!(!errors.is_empty(), "the inventory was not asked");
    for line in errors.lines() {
        assert!(
            line.starts_with("inventory of DHCPServer oooi/lab-dhcp")
                && line.contains("port-forward"),
            "{errors}"
        );
    }

    // No secret byte anywhere in the tree.
    let b64 = base64::engine::general_purpose::STANDARD;
    let forbidden = [
        PUSH_TOKEN.to_string(),
        b64.encode(PUSH_TOKEN),
        PLANTED_SECRET.to_string(),
        b64.encode(PLANTED_SECRET),
        INVENTORY_TOKEN.to_string(),
        b64.encode(INVENTORY_TOKEN),
        ENV_TOKEN.to_string(),
        VMI_PASSWORD.to_string(),
    ];
    let mut scanned = 0;
    for f in &files {
        let bytes = std::fs::read(root.join(f)).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for secret in &forbidden {
            assert!(
                !text.contains(secret.as_str()),
                "{f} holds {secret}:\n{text}"
            );
        }
        scanned += 1;
    }
    assert!(scanned > 60, "only {scanned} files");
    let pod = read(&root, "namespaces/oooi/pods/lab-proxy-5d8f7-x2k9q.yaml");
    assert!(
        pod.contains("OOOI_PUSH_TOKEN") && pod.contains("<redacted>"),
        "{pod}"
    );
    let log = read(&root, "namespaces/oooi/logs/lab-dns-5d8f7-x2k9q/dns.log");
    assert!(log.contains("Authorization: Bearer <redacted"), "{log}");
}

fn config_views(text: &str) -> Vec<String> {
    let config = oooi_dns::config::Config::parse(text).unwrap();
    config.views.iter().map(|v| v.name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_is_written_to_errors_and_the_gather_goes_on_within_its_deadline() {
    let mock = MockApi::start();
    insert(
        &mock,
        InfraBuilder::new()
            .named("oooi-infra", "vlan100")
            .remove("/metadata/uid")
            .remove("/metadata/generation")
            .json(),
    );
    let pod = |name: &str, port: u16| {
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "oooi-infra", "labels": {
            "app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "dns",
            "app.kubernetes.io/instance": "vlan100"}},
        "spec": {"containers": [{"name": "dns", "ports": [{"name": "http", "containerPort": port}]}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "dns", "restartCount": 3}]}})
    };
    insert(&mock, pod("vlan100-dns-silent", 9153));
    insert(&mock, pod("vlan100-dns-gone", 9153));
    // A pod that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    mock.set_pod_endpoint(
        "oooi-infra",
        "vlan100-dns-silent",
        9153,
        silent.local_addr().unwrap(),
    );
    let api = mock.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), api);
    let dest = dir.path().join("must-gather");

    let started = Instant::now();
    let (status, stderr) =
        gather(&kc, &dest, &["--request-timeout", "1", "--since", "1h0m0s"]).await;
    let took = started.elapsed();
    assert!(status.success(), "gather failed: {stderr}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let root = dest.join("oooi");
    assert!(read(&root, "namespaces/oooi-infra/infras/vlan100.yaml").contains("192.0.2.0/24"));
    let errors = read(&root, "errors.txt");
    for want in [
        "GET /healthz on oooi-infra/vlan100-dns-silent:9153 (pod proxy): no answer within 1 s",
        "GET /metrics on oooi-infra/vlan100-dns-gone:9153 (pod proxy): HTTP 503",
        "previous log of oooi-infra/vlan100-dns-gone container dns: HTTP 400: previous terminated container \"dns\" in pod \"vlan100-dns-gone\" not found",
        "get customresourcedefinition dhcpservers.hostedcluster.densityops.com: HTTP 404",
    ] {
        assert!(
            errors.contains(want),
            "errors.txt lacks {want:?}:\n{errors}"
        );
    }
    // `oc adm must-gather --since 1h` reaches every log request.
    let log_requests: Vec<_> = mock
        .log()
        .into_iter()
        .filter(|r| r.path().ends_with("/log"))
        .collect();
    assert_eq!(log_requests.len(), 4, "current and previous of two pods");
    for r in &log_requests {
        assert_eq!(
            r.query("sinceSeconds").as_deref(),
            Some("3600"),
            "{}",
            r.uri
        );
    }
    let summary = read(&root, "summary.txt");
    assert!(summary.contains("(see errors.txt)"), "{summary}");
    assert!(
        summary.contains("oooi-infra/vlan100  no status"),
        "{summary}"
    );
    drop(silent);
}

#[tokio::test]
async fn without_an_api_the_reason_is_written_to_errors() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("must-gather");
    let missing = dir.path().join("no-such-kubeconfig");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_gather"))
        .arg("--dest")
        .arg(&dest)
        .env("KUBECONFIG", &missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let errors = read(&dest.join("oooi"), "errors.txt");
    assert!(
        errors.starts_with("Kubernetes client (in-cluster or KUBECONFIG): ")
            && errors.contains("no-such-kubeconfig"),
        "{errors}"
    );
}

#[test]
fn help_explains_the_tree_the_pod_proxy_and_what_is_never_written() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gather"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for want in [
        "oc adm must-gather",
        "[default: /must-gather]",
        "summary.txt, errors.txt",
        "namespaces/<ns>/logs/<pod>/<container>[.previous].log",
        "pods/<name>:<port>/proxy/<path>",
        "Secrets are written as name, type and keys only",
        "--request-timeout",
        "--since",
    ] {
        assert!(help.contains(want), "--help lacks {want:?}:\n{help}");
    }
}
