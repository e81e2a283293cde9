//! One derived object the controller cannot decode among good ones, through
//! the real watches and wiring ([`oooi_controller::controllers::run`])
//! against the mocked API: the list of DNSServers holds two good objects
//! and two bad ones (a misspelt field, a wrong type). Each bad one gets
//! `InvalidSpec` naming the field in its own status and no children; the
//! good ones get their children and status as usual.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

mod mock_api;

use std::time::{Duration, Instant};

use mock_api::MockApi;
use oooi_controller::metrics::Metrics;
use oooi_controller::plan::{Observed, plan_infra};
use oooi_controller::reconcile::Settings;
use serde_json::{Value, json};

const G: &str = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/oooi/deployments";

/// A valid DNSServer as the Infra planner derives it, renamed `name`.
fn dns_server(name: &str) -> Value {
    let infra = serde_json::from_value(json!({
        "apiVersion": "hostedcluster.densityops.com/v1alpha1", "kind": "Infra",
        "metadata": {"name": "vlan200", "namespace": "oooi", "uid": "uid-infra"},
        "spec": {
            "networkConfig": {"cidr": "198.51.100.0/24", "gateway": "198.51.100.1",
                              "networkAttachmentDefinition": "vlan200"},
            "infraComponents": {
                "dhcp": {"serverIP": "198.51.100.2", "rangeStart": "198.51.100.100",
                         "rangeEnd": "198.51.100.179", "image": "oooi-dhcp:1"},
                "dns": {"serverIP": "198.51.100.3", "image": "oooi-dns:1"},
                "proxy": {"serverIP": "198.51.100.4", "image": "envoy:1"}
            }
        }
    }))
    .unwrap();
    let plan = plan_infra(&infra, &[], &Observed::default());
    let dns = plan.desired.unwrap().dns.unwrap();
    let mut v = serde_json::to_value(dns).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_object_gets_invalid_spec_and_the_others_reconcile() {
    let mock = MockApi::start();
    let mut misspelt = dns_server("dns-misspelt");
    misspelt["spec"]["config"]["views"][0]["nmae"] = json!("vlan");
    let mut wrong_type = dns_server("dns-wrong-type");
    wrong_type["spec"]["config"]["ttl"] = json!("thirty");
    // Listed in this order: the bad ones between and after the good ones.
    for (name, obj) in [
        ("dns-a", dns_server("dns-a")),
        ("dns-misspelt", misspelt),
        ("dns-b", dns_server("dns-b")),
        ("dns-wrong-type", wrong_type),
    ] {
        mock.insert(&format!("{G}/dnsservers/{name}"), obj);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(oooi_controller::controllers::run(
        mock.client.clone(),
        Settings::default(),
        Metrics::new(),
        async move {
            let _ = stopped.await;
        },
    ));

    for good in ["dns-a", "dns-b"] {
        until(30, &format!("{good}'s Deployment"), || {
            mock.get(&format!("{DEPLOYMENTS}/{good}")).is_some()
        })
        .await;
        until(30, &format!("{good}'s status"), || {
            mock.get(&format!("{G}/dnsservers/{good}"))
                .and_then(|o| condition(&o, "Ready"))
                .is_some_and(|c| c["reason"] == "DeploymentNotReady")
        })
        .await;
    }
    for (bad, field) in [
        ("dns-misspelt", "spec.config.views[0]"),
        ("dns-wrong-type", "spec.config.ttl"),
    ] {
        until(30, &format!("{bad}'s InvalidSpec"), || {
            mock.get(&format!("{G}/dnsservers/{bad}"))
                .and_then(|o| condition(&o, "Ready"))
                .is_some_and(|c| c["reason"] == "InvalidSpec")
        })
        .await;
        let obj = mock.get(&format!("{G}/dnsservers/{bad}")).unwrap();
        let degraded = condition(&obj, "Degraded").unwrap();
        assert_eq!(degraded["status"], "True");
        let message = degraded["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("DNSServer {field}")),
            "{bad}: the message names the field: {message}"
        );
        assert!(
            mock.get(&format!("{DEPLOYMENTS}/{bad}")).is_none(),
            "{bad} gets no children"
        );
    }
    let misspelt = mock.get(&format!("{G}/dnsservers/dns-misspelt")).unwrap();
    let message = condition(&misspelt, "Degraded").unwrap()["message"].clone();
    assert!(
        message.as_str().unwrap().contains("unknown field `nmae`"),
        "the misspelt field is named: {message}"
    );

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the controllers stop")
        .unwrap()
        .unwrap();
}
