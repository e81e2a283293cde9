//! The lease inventory from the controller's side, against the mocked API
//! and loopback servers that answer with the inventory contract's types:
//! the `leases` command's table, JSON and `why` output (the join with VMIs,
//! Machines and hosted clusters through the API), and the status poll
//! (pool figures written once, then only on change).
//!
//! The mocked API cannot port-forward, so the command's way to a pod is a
//! loopback [`Reach`] here; the real port-forward (kube's `portforward`) is
//! not exercised by these tests.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::routing::get;
use hyper::body::Bytes;
use oooi_controller::inventory::command::{LeasesArgs, run_with};
use oooi_controller::inventory::poll::poll_once;
use oooi_controller::inventory::reach::{PodTarget, Reach, get_over};
use oooi_controller::observe::{Discovered, Observations};
use oooi_controller::plan::{Observed, plan_infra};
use oooi_controller::reconcile::{Context, Settings};
use oooi_dhcp_inventory::{
    LeasePage, LeaseQuery, LeaseRow, LeaseState, PoolFigures, PoolReport, RefusalEvent,
    RefusalReason, ServerInfo, ServerRole, Why, canonical_mac,
};
use serde_json::{Value, json};

use crate::mock_api::{MockApi, assert_rbac};
use crate::reconcile_support::{Caches, NS, attachment_json, context, infra_json};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
/// The servers' clock.
const NOW: u64 = 1_796_630_400; // 2026-12-07T08:00:00Z

/// What one fake DHCP server holds.
#[derive(Clone)]
struct Fake {
    role: ServerRole,
    rows: Vec<LeaseRow>,
    pools: Vec<PoolFigures>,
    refusals: BTreeMap<RefusalReason, u64>,
    events: BTreeMap<String, Vec<RefusalEvent>>,
}

fn info(f: &Fake) -> ServerInfo {
    ServerInfo {
        role: f.role,
        pair_state: None,
        now_unix: NOW,
    }
}

fn json_answer(v: impl serde::Serialize) -> (StatusCode, HeaderMap, String) {
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    (StatusCode::OK, h, serde_json::to_string(&v).unwrap())
}

fn authorized(h: &HeaderMap) -> bool {
    h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"))
}

/// A loopback inventory server answering as the contract says (paging by
/// the contract's own `LeaseQuery::page`).
async fn serve(fake: Fake) -> SocketAddr {
    let f = Arc::new(fake);
    let (f1, f2, f3) = (f.clone(), f.clone(), f.clone());
    let app = Router::new()
        .route(
            "/inventory/v1/leases",
            get(move |h: HeaderMap, uri: Uri| {
                let f = f1.clone();
                async move {
                    if !authorized(&h) {
                        return (StatusCode::UNAUTHORIZED, HeaderMap::new(), String::new());
                    }
                    let q: LeaseQuery =
                        serde_urlencoded::from_str(uri.query().unwrap_or("")).unwrap();
                    let (leases, next) = q.page(&f.rows);
                    json_answer(LeasePage {
                        server: info(&f),
                        leases,
                        next,
                    })
                }
            }),
        )
        .route(
            "/inventory/v1/pools",
            get(move |h: HeaderMap| {
                let f = f2.clone();
                async move {
                    if !authorized(&h) {
                        return (StatusCode::UNAUTHORIZED, HeaderMap::new(), String::new());
                    }
                    json_answer(PoolReport {
                        server: info(&f),
                        pools: f.pools.clone(),
                        refusals: f.refusals.clone(),
                    })
                }
            }),
        )
        .route(
            "/inventory/v1/why",
            get(move |h: HeaderMap, uri: Uri| {
                let f = f3.clone();
                async move {
                    if !authorized(&h) {
                        return (StatusCode::UNAUTHORIZED, HeaderMap::new(), String::new());
                    }
                    let q: BTreeMap<String, String> =
                        serde_urlencoded::from_str(uri.query().unwrap_or("")).unwrap();
                    let mac = canonical_mac(&q["mac"]).unwrap();
                    json_answer(Why {
                        server: info(&f),
                        lease: f
                            .rows
                            .iter()
                            .find(|r| r.mac.as_ref() == Some(&mac))
                            .cloned(),
                        events: f.events.get(&mac).cloned().unwrap_or_default(),
                        mac,
                    })
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// Pods reached on loopback by name (standing in for the port-forward).
struct Loopback(BTreeMap<String, SocketAddr>);

impl Reach for Loopback {
    async fn get(
        &self,
        pod: &PodTarget,
        path_and_query: &str,
        token: &str,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let addr = self
            .0
            .get(&pod.name)
            .ok_or_else(|| anyhow::anyhow!("pod {} does not answer", pod.name))?;
        let io = tokio::net::TcpStream::connect(addr).await?;
        get_over(io, path_and_query, token).await
    }
}

fn row(ip: &str, mac: &str, host: &str, state: LeaseState, cltt_ago: u64) -> LeaseRow {
    LeaseRow {
        address: ip.parse().unwrap(),
        mac: Some(mac.into()),
        client_id: Some(format!("01{}", mac.replace(':', ""))),
        iaid: None,
        hostname: Some(host.into()),
        state,
        reserved: false,
        cltt_unix: Some(NOW - cltt_ago),
        expires_unix: NOW - cltt_ago + 3600,
        answered_by: Some(ServerRole::Single),
    }
}

fn fake() -> Fake {
    let mut rows = vec![
        row(
            "198.51.100.100",
            "52:54:00:aa:00:01",
            "c1-workers-abc12",
            LeaseState::Active,
            300,
        ),
        row(
            "198.51.100.101",
            "52:54:00:aa:00:02",
            "c1-workers-def34",
            LeaseState::Active,
            600,
        ),
        row(
            "198.51.100.102",
            "52:54:00:ee:00:09",
            "stray",
            LeaseState::Expired,
            7200,
        ),
    ];
    // A quarantined address: a probe found it in use.
    rows.push(LeaseRow {
        address: "198.51.100.103".parse().unwrap(),
        mac: None,
        client_id: None,
        iaid: None,
        hostname: None,
        state: LeaseState::Declined,
        reserved: false,
        cltt_unix: None,
        expires_unix: NOW + 600,
        answered_by: None,
    });
    Fake {
        role: ServerRole::Single,
        rows,
        pools: vec![PoolFigures {
            range: "198.51.100.100-198.51.100.179".into(),
            total: 80,
            assigned: 2,
            offered: 0,
            quarantined: 1,
            held_back: 0,
            reserved: 0,
            free: 77,
        }],
        refusals: BTreeMap::from([(RefusalReason::ProbeConflict, 1)]),
        events: BTreeMap::from([(
            "52:54:00:ee:00:09".to_string(),
            vec![
                RefusalEvent {
                    at_unix: NOW - 120,
                    reason: RefusalReason::ProbeConflict,
                    message: "DISCOVER".into(),
                    address: Some("198.51.100.103".parse().unwrap()),
                    detail: Some("198.51.100.103 answered an ARP probe".into()),
                },
                RefusalEvent {
                    at_unix: NOW - 60,
                    reason: RefusalReason::UnknownClientIgnored,
                    message: "DISCOVER".into(),
                    address: None,
                    detail: None,
                },
            ],
        )]),
    }
}

/// The controller's context on `mock` (caches filled) and a way to the
/// DHCP pod, which `fake` answers on loopback (the controller reaches the
/// pod on its address).
async fn polled(mock: &MockApi, fake: Fake) -> (Arc<Context>, Caches, Loopback) {
    let addr = serve(fake).await;
    let reach = Loopback(BTreeMap::from([(
        "vlan200-dhcp-6d5f-x7k2p".to_string(),
        addr,
    )]));
    let (ctx, mut caches) = context(
        mock,
        Settings::default(),
        Discovered::default(),
        Observations::default(),
    );
    caches.sync(mock);
    (ctx, caches, reach)
}

/// The cluster: the Infra's DHCPServer as the controller plans it, its
/// token Secret, its pod, an attachment of `clusters/c1`, and in
/// `clusters-c1` two VMIs (one VM-owned) and their Machines.
fn cluster(mock: &MockApi) {
    let infra: oooi_controller::crd::Infra = serde_json::from_value(infra_json(1)).unwrap();
    let plan = plan_infra(&infra, &[], &Observed::default());
    let mut server = serde_json::to_value(&plan.desired.unwrap().dhcp[0]).unwrap();
    server["metadata"]["uid"] = json!("uid-dhcp");
    let g = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi";
    mock.insert(&format!("{g}/dhcpservers/vlan200-dhcp"), server);
    mock.insert(&format!("{g}/infras/vlan200"), infra_json(1));
    mock.insert(
        &format!("{g}/infraclusterattachments/c1"),
        attachment_json("c1"),
    );
    mock.insert(
        "/api/v1/namespaces/oooi/secrets/vlan200-dhcp-inventory-token",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "vlan200-dhcp-inventory-token", "namespace": NS,
                   "labels": {"app.kubernetes.io/managed-by": "oooi-controller",
                              "hostedcluster.densityops.com/infra": "vlan200"}},
               "data": {"token": crate::reconcile_support::base64_encode(TOKEN.as_bytes())}}),
    );
    mock.insert(
        "/api/v1/namespaces/oooi/pods/vlan200-dhcp-6d5f-x7k2p",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vlan200-dhcp-6d5f-x7k2p", "namespace": NS, "labels": {
                   "app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "dhcp",
                   "app.kubernetes.io/instance": "vlan200",
                   "app.kubernetes.io/managed-by": "oooi-controller"}},
               "spec": {"containers": [{"name": "dhcp", "image": "x"}]},
               "status": {"phase": "Running", "podIP": "10.128.2.15",
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    for (plural, group, kind) in [
        (
            "virtualmachineinstances",
            "kubevirt.io",
            "VirtualMachineInstance",
        ),
        ("machines", "cluster.x-k8s.io", "Machine"),
    ] {
        let version = if group == "kubevirt.io" {
            "v1"
        } else {
            "v1beta1"
        };
        mock.insert(
            &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{group}"),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": format!("{plural}.{group}")},
                   "spec": {"group": group, "scope": "Namespaced",
                       "names": {"plural": plural, "kind": kind},
                       "versions": [{"name": version, "served": true, "storage": true}]}}),
        );
    }
    for (vmi, mac, ip, machine) in [
        (
            "c1-workers-abc12",
            "52:54:00:aa:00:01",
            "198.51.100.100",
            "c1-workers-7f9c-abc12",
        ),
        (
            "c1-workers-def34",
            "52:54:00:aa:00:02",
            "198.51.100.101",
            "c1-workers-7f9c-def34",
        ),
    ] {
        mock.insert(
            &format!("/apis/kubevirt.io/v1/namespaces/clusters-c1/virtualmachineinstances/{vmi}"),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                   "metadata": {"name": vmi, "namespace": "clusters-c1",
                       "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                            "name": vmi, "uid": format!("uid-vm-{vmi}")}]},
                   "spec": {"domain": {"devices": {"interfaces": [
                       {"name": "vlan", "bridge": {}, "macAddress": mac}]}}},
                   "status": {"interfaces": [{"name": "vlan", "mac": mac, "ipAddress": ip}]}}),
        );
        mock.insert(
            &format!("/apis/cluster.x-k8s.io/v1beta1/namespaces/clusters-c1/machines/{machine}"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                   "metadata": {"name": machine, "namespace": "clusters-c1",
                       "labels": {"cluster.x-k8s.io/cluster-name": "c1-4xk2m",
                                  "cluster.x-k8s.io/deployment-name": "c1-workers"},
                       "annotations": {"hypershift.openshift.io/nodePool": "clusters/c1-workers",
                                       "hypershift.openshift.io/cluster": "clusters/c1"}},
                   "spec": {"clusterName": "c1-4xk2m",
                            "infrastructureRef": {"kind": "KubevirtMachine", "name": vmi}},
                   "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
        );
    }
}

fn args(argv: &[&str]) -> LeasesArgs {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        leases: LeasesArgs,
    }
    let mut all = vec!["leases"];
    all.extend(argv);
    Cli::try_parse_from(all).unwrap().leases
}

async fn setup() -> (MockApi, Loopback) {
    let mock = MockApi::start();
    cluster(&mock);
    let addr = serve(fake()).await;
    let reach = Loopback(BTreeMap::from([(
        "vlan200-dhcp-6d5f-x7k2p".to_string(),
        addr,
    )]));
    (mock, reach)
}

#[tokio::test]
async fn leases_prints_the_table_joined_with_vmis_machines_and_clusters() {
    let (mock, reach) = setup().await;
    let out = run_with(&mock.client, &reach, &args(&[])).await.unwrap();
    let want = "\
INFRA          ADDRESS          MAC                 HOSTNAME           STATE      EXPIRES   VMI                            CLUSTER
oooi/vlan200   198.51.100.100   52:54:00:aa:00:01   c1-workers-abc12   active     in 55m    clusters-c1/c1-workers-abc12   clusters/c1
oooi/vlan200   198.51.100.101   52:54:00:aa:00:02   c1-workers-def34   active     in 50m    clusters-c1/c1-workers-def34   clusters/c1
oooi/vlan200   198.51.100.102   52:54:00:ee:00:09   stray              expired    1h ago    -                              -
oooi/vlan200   198.51.100.103   -                   -                  declined   in 10m    -                              -
";
    assert_eq!(out, want, "\n{out}");
    // Every request the command made, in the namespaces it needs.
    let lines: Vec<String> = mock.log().iter().map(|r| r.line()).collect();
    assert!(
        lines.contains(
            &"GET /api/v1/namespaces/oooi/secrets/vlan200-dhcp-inventory-token".to_string()
        ),
        "{lines:?}"
    );
    assert!(
        lines.contains(
            &"GET /apis/kubevirt.io/v1/namespaces/clusters-c1/virtualmachineinstances".to_string()
        ),
        "{lines:?}"
    );
    assert!(
        mock.log().iter().all(|r| !r.is_write()),
        "the command writes nothing"
    );
    // Exactly the permissions docs/operations.md lists for the command (the
    // port-forward, `create pods/portforward`, goes to loopback here).
    let used: std::collections::BTreeSet<(String, String, String)> = mock
        .log()
        .iter()
        .filter_map(|r| oooi_controller::rbac::request_attributes(&r.method, &r.uri))
        .collect();
    let want: std::collections::BTreeSet<(String, String, String)> = [
        ("hostedcluster.densityops.com", "dhcpservers", "list"),
        (
            "hostedcluster.densityops.com",
            "infraclusterattachments",
            "list",
        ),
        ("", "secrets", "get"),
        ("", "pods", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
        ("kubevirt.io", "virtualmachineinstances", "list"),
        ("cluster.x-k8s.io", "machines", "list"),
    ]
    .into_iter()
    .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
    .collect();
    assert_eq!(used, want);
}

#[tokio::test]
async fn leases_filters_by_cluster_mac_and_state_and_prints_json() {
    let (mock, reach) = setup().await;
    let out = run_with(
        &mock.client,
        &reach,
        &args(&["--cluster", "c1", "--state", "active", "-o", "json"]),
    )
    .await
    .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    let leases = v["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2, "{out}");
    assert_eq!(
        leases[0],
        json!({
            "infra": "oooi/vlan200",
            "servers": ["vlan200-dhcp"],
            "lease": {
                "address": "198.51.100.100", "mac": "52:54:00:aa:00:01",
                "client_id": "01525400aa0001", "hostname": "c1-workers-abc12",
                "state": "active", "reserved": false, "cltt_unix": NOW - 300,
                "expires_unix": NOW + 3300, "answered_by": "single"
            },
            "namespace": "clusters-c1",
            "vmi": "c1-workers-abc12",
            "vm": "c1-workers-abc12",
            "machine": "c1-workers-7f9c-abc12",
            "nodePool": "c1-workers",
            "hostedCluster": "clusters/c1"
        })
    );
    // The MAC filter goes to the server, in any spelling.
    let out = run_with(
        &mock.client,
        &reach,
        &args(&["--mac", "52-54-00-AA-00-02", "-o", "wide"]),
    )
    .await
    .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("INFRA ") && lines[0].contains("NODEPOOL"),
        "{out}"
    );
    for cell in [
        "198.51.100.101",
        "c1-workers-7f9c-def34",
        "c1-workers",
        "clusters/c1",
        "10m ago",
        "single",
    ] {
        assert!(lines[1].contains(cell), "{cell} in {out}");
    }
    let asked: Vec<String> = mock
        .log()
        .iter()
        .filter(|r| r.path() == "/api/v1/namespaces/oooi/pods")
        .map(|r| r.query("labelSelector").unwrap())
        .collect();
    assert!(
        asked
            .iter()
            .all(|s| s == "app.kubernetes.io/name=oooi,app.kubernetes.io/component=dhcp")
    );
}

#[tokio::test]
async fn leases_why_prints_the_lease_and_the_last_refusals() {
    let (mock, reach) = setup().await;
    let out = run_with(&mock.client, &reach, &args(&["why", "52:54:00:EE:00:09"]))
        .await
        .unwrap();
    let want = "\
oooi/vlan200 vlan200-dhcp (single) about 52:54:00:ee:00:09:
  lease: 198.51.100.102 expired, expires 1h ago, host name stray
  refusals, oldest first:
    AT                                MESSAGE    REASON                   ADDRESS          DETAIL
    2026-12-07T07:58:00Z   (2m ago)   DISCOVER   probe_conflict           198.51.100.103   198.51.100.103 answered an ARP probe
    2026-12-07T07:59:00Z   (1m ago)   DISCOVER   unknown_client_ignored   -
";
    assert_eq!(out, want, "\n{out}");
    let out = run_with(
        &mock.client,
        &reach,
        &args(&["why", "52:54:00:ee:00:09", "-o", "json"]),
    )
    .await
    .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["servers"][0]["dhcpServer"], "vlan200-dhcp");
    assert_eq!(v["servers"][0]["server"]["role"], "single");
    assert_eq!(v["servers"][0]["events"][0]["reason"], "probe_conflict");
    assert_eq!(v["servers"][0]["lease"]["address"], "198.51.100.102");
    assert!(
        run_with(&mock.client, &reach, &args(&["why", "not-a-mac"]))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_server_that_refuses_the_token_or_does_not_answer_is_a_note() {
    let (mock, _) = setup().await;
    mock.update(
        "/api/v1/namespaces/oooi/secrets/vlan200-dhcp-inventory-token",
        |s| s["data"]["token"] = crate::reconcile_support::base64_encode(b"wrong-token"),
    );
    let addr = serve(fake()).await;
    let reach = Loopback(BTreeMap::from([(
        "vlan200-dhcp-6d5f-x7k2p".to_string(),
        addr,
    )]));
    let out = run_with(&mock.client, &reach, &args(&[])).await.unwrap();
    assert!(
        out.contains("note: oooi/vlan200: vlan200-dhcp not reached"),
        "{out}"
    );
    assert!(out.contains("401 Unauthorized"), "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let out = run_with(
        &mock.client,
        &Loopback(BTreeMap::new()),
        &args(&["-o", "json"]),
    )
    .await
    .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["leases"], json!([]));
    assert!(
        v["notes"][0].as_str().unwrap().contains("does not answer"),
        "{out}"
    );
}

#[tokio::test]
async fn the_poll_writes_pool_figures_once_and_then_only_when_they_change() {
    let mock = MockApi::start();
    cluster(&mock);
    let mut f = fake();
    let (ctx, mut caches, reach) = polled(&mock, f.clone()).await;
    let round = poll_once(&ctx, &reach).await;
    assert_eq!((round.answered, round.written, round.failed), (1, 1, 0));
    let path =
        "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi/dhcpservers/vlan200-dhcp";
    let st = mock.get(path).unwrap()["status"].clone();
    assert_eq!(
        st["pools"],
        json!({
            "total": 80, "assigned": 2, "offered": 0, "free": 77, "quarantined": 1,
            "reserved": 0, "heldBack": 0, "utilisationPercent": 3,
            "pools": [{"range": "198.51.100.100-198.51.100.179", "total": 80, "assigned": 2,
                       "free": 77, "quarantined": 1, "reserved": 0, "utilisationPercent": 3}],
            "refusals": {"probe_conflict": 1}
        })
    );
    let cond = |st: &Value, t: &str| {
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["status"].clone())
    };
    assert_eq!(cond(&st, "PoolNearlyExhausted"), Some(json!("False")));
    assert_eq!(cond(&st, "PoolExhausted"), Some(json!("False")));
    assert_rbac(&mock.log());
    // Nothing changed: no write.
    caches.sync(&mock);
    mock.take();
    let round = poll_once(&ctx, &reach).await;
    assert_eq!((round.answered, round.written), (1, 0));
    assert!(mock.take().iter().all(|r| !r.is_write()));
    // The pool fills up: the conditions flip.
    f.pools[0].assigned = 80;
    f.pools[0].quarantined = 0;
    f.pools[0].free = 0;
    let full = serve(f).await;
    let reach = Loopback(BTreeMap::from([(
        "vlan200-dhcp-6d5f-x7k2p".to_string(),
        full,
    )]));
    let round = poll_once(&ctx, &reach).await;
    assert_eq!(round.written, 1);
    let st = mock.get(path).unwrap()["status"].clone();
    assert_eq!(st["pools"]["utilisationPercent"], 100);
    assert_eq!(cond(&st, "PoolExhausted"), Some(json!("True")));
    assert_eq!(cond(&st, "PoolNearlyExhausted"), Some(json!("True")));
    // A server that stops answering keeps its figures.
    caches.sync(&mock);
    let round = poll_once(&ctx, &Loopback(BTreeMap::new())).await;
    assert_eq!((round.answered, round.failed), (0, 1));
    assert_eq!(mock.get(path).unwrap()["status"]["pools"]["free"], 0);
}

/// The Infra carries its DHCP server's figures and pool conditions; the
/// server's own reconcile keeps them (it does not own them).
#[tokio::test]
async fn the_infra_shows_its_servers_figures_and_the_server_reconcile_keeps_them() {
    use oooi_controller::reconcile::{component, infra};
    let mock = MockApi::start();
    cluster(&mock);
    let g = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi";
    let infra_path = format!("{g}/infras/vlan200");
    let server_path = format!("{g}/dhcpservers/vlan200-dhcp");
    mock.insert(
        &infra_path,
        crate::reconcile_support::finalized(infra_json(1)),
    );
    let mut f = fake();
    f.pools[0].assigned = 70;
    f.pools[0].free = 9;
    let (ctx, mut caches, reach) = polled(&mock, f).await;
    assert_eq!(poll_once(&ctx, &reach).await.written, 1);
    crate::reconcile_support::reconcile_at(&mock, &mut caches, &ctx, &infra_path, infra::reconcile)
        .await;
    let st = mock.get(&infra_path).unwrap()["status"].clone();
    assert_eq!(st["dhcpPools"]["assigned"], 70);
    assert_eq!(st["dhcpPools"]["free"], 9);
    assert_eq!(st["dhcpPools"]["utilisationPercent"], 88);
    let cond = |st: &Value, t: &str| {
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap()
    };
    let nearly = cond(&st, "PoolNearlyExhausted");
    assert_eq!(nearly["status"], "True");
    assert!(
        nearly["message"]
            .as_str()
            .unwrap()
            .contains("pool 198.51.100.100-198.51.100.179: 9 of 80 free"),
        "{nearly}"
    );
    assert_eq!(cond(&st, "PoolExhausted")["status"], "False");
    // The DHCPServer's reconcile writes its rollout status and keeps the
    // figures and the pool conditions.
    crate::reconcile_support::reconcile_at(
        &mock,
        &mut caches,
        &ctx,
        &server_path,
        component::reconcile_dhcp,
    )
    .await;
    let st = mock.get(&server_path).unwrap()["status"].clone();
    assert_eq!(st["pools"]["free"], 9);
    assert_eq!(cond(&st, "PoolNearlyExhausted")["status"], "True");
    assert!(
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready")
    );
    // DHCP turned off: the Infra's figures and pool conditions go.
    mock.update(&infra_path, |i| {
        i["spec"]["infraComponents"]["dhcp"]["enabled"] = json!(false)
    });
    crate::reconcile_support::reconcile_at(&mock, &mut caches, &ctx, &infra_path, infra::reconcile)
        .await;
    let st = mock.get(&infra_path).unwrap()["status"].clone();
    assert!(st.get("dhcpPools").is_none(), "{st}");
    assert!(
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "PoolNearlyExhausted" && c["type"] != "PoolExhausted"),
        "{st}"
    );
}
