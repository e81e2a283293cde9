//! One derived object the controller cannot decode among good ones, through
//! the real watches and wiring ([`oooi_controller::controllers::run`])
//! against the mocked API: the lists of DHCPServers, DNSServers and
//! ProxyServers each hold two good objects and two bad ones (a misspelt
//! field, a wrong type). Each bad one gets `InvalidSpec` naming the field in
//! its own status and no children; the good ones get their children and
//! status as usual.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::mock_api;

use std::time::{Duration, Instant};

use crate::reconcile_support::infra_builder;
use mock_api::MockApi;
use oooi_controller::metrics::Metrics;
use oooi_controller::plan::{Observed, plan_infra};
use oooi_controller::reconcile::Settings;
use serde_json::{Value, json};

const G: &str = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/oooi/deployments";
/// The images of the Infras here.
const IMAGES: [Option<&str>; 3] = [Some("oooi-dhcp:1"), Some("oooi-dns:1"), Some("envoy:1")];

/// A valid derived object of `kind` (`dhcp`, `dns` or `proxy`) as the Infra
/// planner derives it, renamed `name`.
fn derived(kind: &str, name: &str) -> Value {
    let infra = infra_builder()
        .images(IMAGES[0], IMAGES[1], IMAGES[2])
        .build();
    let plan = plan_infra(&infra, &[], &Observed::default());
    let d = plan.desired.unwrap();
    let mut v = match kind {
        "dhcp" => serde_json::to_value(d.dhcp.first().unwrap()).unwrap(),
        "dns" => serde_json::to_value(d.dns.into_iter().next().unwrap()).unwrap(),
        "proxy" => serde_json::to_value(d.proxy.into_iter().next().unwrap()).unwrap(),
        other => panic!("no derived kind {other}"),
    };
    v["metadata"] = json!({"name": name, "namespace": "oooi", "uid": format!("uid-{name}")});
    v
}

fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn until(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The real watches and wiring ([`oooi_controller::controllers::run`])
/// against the mocked API, until [`Controllers::stop`].
struct Controllers {
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Controllers {
    fn start(mock: &MockApi) -> Controllers {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(oooi_controller::controllers::run(
            mock.client.clone(),
            Settings::default(),
            Metrics::new(),
            async move {
                let _ = stopped.await;
            },
        ));
        Controllers { stop, run }
    }

    /// Shuts them down; fails when they do not stop within 30 s or end in
    /// an error.
    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.run)
            .await
            .expect("the controllers stop")
            .unwrap()
            .unwrap();
    }
}

/// A route the routing table accepts.
fn good_route() -> Value {
    json!({
        "port": 6443,
        "sni": "api.c1.example.com",
        "upstream": {"address": {"host": "kube-apiserver.clusters-c1.svc.cluster.local", "port": 6443}},
    })
}

/// One kind's bad objects: how each is broken and the field its message
/// must name.
struct Kind {
    /// `dhcp`, `dns` or `proxy`: the object names' prefix.
    short: &'static str,
    kind: &'static str,
    plural: &'static str,
    misspelt: fn(&mut Value),
    misspelt_field: &'static str,
    misspelt_name: &'static str,
    wrong_type: fn(&mut Value),
    wrong_type_field: &'static str,
}

const KINDS: [Kind; 3] = [
    Kind {
        short: "dhcp",
        kind: "DHCPServer",
        plural: "dhcpservers",
        misspelt: |o| o["spec"]["config"]["lease_secs"] = json!(600),
        misspelt_field: "spec.config",
        misspelt_name: "lease_secs",
        wrong_type: |o| o["spec"]["config"]["lease_seconds"] = json!("an hour"),
        wrong_type_field: "spec.config.lease_seconds",
    },
    Kind {
        short: "dns",
        kind: "DNSServer",
        plural: "dnsservers",
        misspelt: |o| o["spec"]["config"]["views"][0]["nmae"] = json!("vlan"),
        misspelt_field: "spec.config.views[0]",
        misspelt_name: "nmae",
        wrong_type: |o| o["spec"]["config"]["ttl"] = json!("thirty"),
        wrong_type_field: "spec.config.ttl",
    },
    Kind {
        short: "proxy",
        kind: "ProxyServer",
        plural: "proxyservers",
        misspelt: |o| {
            let mut route = good_route();
            route["snii"] = json!("api.c1.example.com");
            o["spec"]["routes"] = json!([route]);
        },
        misspelt_field: "spec.routes[0]",
        misspelt_name: "snii",
        wrong_type: |o| {
            let mut route = good_route();
            route["port"] = json!("6443");
            o["spec"]["routes"] = json!([route]);
        },
        wrong_type_field: "spec.routes[0].port",
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_object_gets_invalid_spec_and_the_others_reconcile() {
    let mock = MockApi::start();
    for k in &KINDS {
        let name = |what: &str| format!("{}-{what}", k.short);
        let mut misspelt = derived(k.short, &name("misspelt"));
        (k.misspelt)(&mut misspelt);
        let mut wrong_type = derived(k.short, &name("wrong-type"));
        (k.wrong_type)(&mut wrong_type);
        // Listed in this order: the bad ones between and after the good ones.
        for (name, obj) in [
            (name("a"), derived(k.short, &name("a"))),
            (name("misspelt"), misspelt),
            (name("b"), derived(k.short, &name("b"))),
            (name("wrong-type"), wrong_type),
        ] {
            mock.insert(&format!("{G}/{}/{name}", k.plural), obj);
        }
    }
    // The push token the ProxyServers name (the Infra reconciler creates
    // it): `push-token-for-the-decode-scenario`.
    let proxy = derived("proxy", "proxy-a");
    let token_secret = proxy["spec"]["pushTokenSecret"]["name"].as_str().unwrap();
    mock.insert(
        &format!("/api/v1/namespaces/oooi/secrets/{token_secret}"),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": token_secret, "namespace": "oooi", "uid": "uid-token"},
            "data": {"token": "cHVzaC10b2tlbi1mb3ItdGhlLWRlY29kZS1zY2VuYXJpbw=="}
        }),
    );
    let controllers = Controllers::start(&mock);

    for k in &KINDS {
        for good in [format!("{}-a", k.short), format!("{}-b", k.short)] {
            until(30, &format!("{good}'s Deployment"), || {
                mock.get(&format!("{DEPLOYMENTS}/{good}")).is_some()
            })
            .await;
            until(30, &format!("{good}'s status"), || {
                mock.get(&format!("{G}/{}/{good}", k.plural))
                    .and_then(|o| condition(&o, "Ready"))
                    .is_some_and(|c| c["reason"] == "DeploymentNotReady")
            })
            .await;
        }
        for (bad, field) in [
            (format!("{}-misspelt", k.short), k.misspelt_field),
            (format!("{}-wrong-type", k.short), k.wrong_type_field),
        ] {
            let path = format!("{G}/{}/{bad}", k.plural);
            until(30, &format!("{bad}'s InvalidSpec"), || {
                mock.get(&path)
                    .and_then(|o| condition(&o, "Ready"))
                    .is_some_and(|c| c["reason"] == "InvalidSpec")
            })
            .await;
            let obj = mock.get(&path).unwrap();
            let degraded = condition(&obj, "Degraded").unwrap();
            assert_eq!(degraded["status"], "True");
            let message = degraded["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!("{} {field}", k.kind)),
                "{bad}: the message names the field: {message}"
            );
            assert!(
                mock.get(&format!("{DEPLOYMENTS}/{bad}")).is_none(),
                "{bad} gets no children"
            );
        }
        let misspelt = mock
            .get(&format!("{G}/{}/{}-misspelt", k.plural, k.short))
            .unwrap();
        let message = condition(&misspelt, "Degraded").unwrap()["message"].clone();
        assert!(
            message
                .as_str()
                .unwrap()
                .contains(&format!("unknown field `{}`", k.misspelt_name)),
            "the misspelt field is named: {message}"
        );
    }

    controllers.stop().await;
}

/// An Infra stored under an older, looser schema (a network with host bits,
/// which the typed network refuses) beside a good one: the bad one gets
/// `InvalidSpec` naming the field, the good one its derived servers and
/// status, and the bad one's deletion completes: its finalizer is removed
/// (and no Lease is touched: the address agents make none the controller
/// would own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_infra_reports_invalid_spec_the_others_reconcile_and_its_deletion_completes()
{
    const INFRAS: &str = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi/infras";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/oooi/leases";
    let mock = MockApi::start();
    let infra = |name: &str, cidr: &str| {
        infra_builder()
            .named("oooi", name)
            .cidr(cidr)
            .dns_servers(&["198.51.100.3", "198.51.100.13"])
            .images(IMAGES[0], IMAGES[1], IMAGES[2])
            .merge(json!({"metadata": {"finalizers": ["hostedcluster.densityops.com/cleanup"]}}))
            .json()
    };
    mock.insert(&format!("{INFRAS}/good"), infra("good", "198.51.100.0/24"));
    mock.insert(&format!("{INFRAS}/old"), infra("old", "198.51.100.7/24"));
    let lease = |name: &str| {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "oooi", "uid": format!("uid-{name}")},
            "spec": {"holderIdentity": "old-dns-0-abc"}
        })
    };
    for name in [
        "old-dns-198-51-100-3",
        "old-dns-198-51-100-13",
        "good-dns-198-51-100-3",
    ] {
        mock.insert(&format!("{LEASES}/{name}"), lease(name));
    }
    let controllers = Controllers::start(&mock);

    until(30, "old's InvalidSpec", || {
        mock.get(&format!("{INFRAS}/old"))
            .and_then(|o| condition(&o, "Ready"))
            .is_some_and(|c| c["reason"] == "InvalidSpec")
    })
    .await;
    let old = mock.get(&format!("{INFRAS}/old")).unwrap();
    let message = condition(&old, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("spec.networkConfig.cidr"),
        "the message names the field: {message}"
    );
    until(30, "good's derived DNSServer and status", || {
        mock.get(&format!("{G}/dnsservers/good-dns-0")).is_some()
            || mock.get(&format!("{G}/dnsservers/good-dns")).is_some()
    })
    .await;
    until(30, "good's status", || {
        mock.get(&format!("{INFRAS}/good"))
            .and_then(|o| condition(&o, "Ready"))
            .is_some_and(|c| c["reason"] != "InvalidSpec")
    })
    .await;
    assert!(
        mock.paths(&format!("{G}/dnsservers/old")).is_empty(),
        "the undecodable Infra gets no derived servers"
    );

    // Its deletion: the API server sets the timestamp and waits for the
    // finalizer.
    mock.update(&format!("{INFRAS}/old"), |o| {
        o["metadata"]["deletionTimestamp"] = json!("2026-12-07T00:00:00Z");
    });
    until(30, "old's deletion", || {
        mock.get(&format!("{INFRAS}/old")).is_none()
    })
    .await;
    for name in [
        "old-dns-198-51-100-3",
        "old-dns-198-51-100-13",
        "good-dns-198-51-100-3",
    ] {
        assert!(
            mock.get(&format!("{LEASES}/{name}")).is_some(),
            "{name}: a Lease of an earlier agent is left to the upgrade's cleanup"
        );
    }
    assert!(mock.get(&format!("{INFRAS}/good")).is_some());

    controllers.stop().await;
}
