//! The data path against a real Envoy running the real filter, on loopback.

use std::net::{IpAddr, SocketAddr};

use oooi_routes::RouteMatch;
use oooi_tests::{PUSH_TOKEN, http_blocking, tls_probe};

use oooi_tests::fixture::{STRANGER, TwoClusters, WORKER_C1, WORKER_C2};

type Lab = TwoClusters;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

async fn lab(concurrency: u32) -> Lab {
    TwoClusters::start(concurrency).await.expect("lab starts")
}

trait Probe {
    async fn pushed(concurrency: u32) -> Lab;
    async fn who(&self, target: SocketAddr, sni: Option<&str>, source: &str) -> String;
}

impl Probe for Lab {
    async fn pushed(concurrency: u32) -> Lab {
        let lab = lab(concurrency).await;
        lab.envoy.push_table(&lab.table).expect("first push");
        lab
    }
    async fn who(&self, target: SocketAddr, sni: Option<&str>, source: &str) -> String {
        match tls_probe(target, sni, Some(ip(source))).await {
            Ok(name) => name,
            Err(e) => format!("refused ({e})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_false_until_the_first_push() {
    let lab = lab(1).await;
    let (status, body) = http_blocking(lab.envoy.api, "GET", "/ready", &[], b"").unwrap();
    assert_eq!(status, 503, "{body}");
    // Without a table every connection is refused.
    assert!(
        lab.who(lab.https, Some("oauth.c1.example.com"), "127.0.0.1")
            .await
            .starts_with("refused")
    );
    lab.envoy.push_table(&lab.table).unwrap();
    let (status, body) = http_blocking(lab.envoy.api, "GET", "/ready", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_blocking(lab.envoy.api, "GET", "/v1/routes", &[], b"").unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["generation"], 1);
    assert_eq!(v["digest"], lab.table.digest());
    assert_eq!(v["routes"], lab.table.routes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_sni_reaches_each_control_plane_service() {
    let lab = Lab::pushed(1).await;
    let cases = [
        (lab.kube, "api.c1.example.com", "c1-kube-apiserver"),
        (lab.kube, "API-INT.c1.example.com", "c1-kube-apiserver"),
        (lab.kube, "api.c2.example.com", "c2-kube-apiserver"),
        (lab.https, "oauth.c1.example.com", "c1-oauth"),
        (lab.https, "ignition.c1.example.com", "c1-ignition"),
        (lab.https, "konnectivity.c1.example.com", "c1-konnectivity"),
        (lab.https, "oauth.c2.example.com", "c2-oauth"),
    ];
    for (target, sni, want) in cases {
        assert_eq!(lab.who(target, Some(sni), STRANGER).await, want, "{sni}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_apps_routes_any_depth() {
    let lab = Lab::pushed(1).await;
    assert_eq!(
        lab.who(
            lab.https,
            Some("console-openshift-console.apps.c1.example.com"),
            STRANGER
        )
        .await,
        "c1-apps"
    );
    assert_eq!(
        lab.who(lab.https, Some("a.b.apps.c2.example.com"), STRANGER)
            .await,
        "c2-apps"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_and_plain_6443_route_by_worker_source() {
    let lab = Lab::pushed(1).await;
    for alias in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ] {
        assert_eq!(
            lab.who(lab.kube, Some(alias), WORKER_C1).await,
            "c1-kube-apiserver",
            "{alias}"
        );
        assert_eq!(
            lab.who(lab.kube, Some(alias), WORKER_C2).await,
            "c2-kube-apiserver",
            "{alias}"
        );
    }
    assert_eq!(
        lab.who(lab.kube, None, WORKER_C1).await,
        "c1-kube-apiserver"
    );
    assert_eq!(
        lab.who(lab.kube, None, WORKER_C2).await,
        "c2-kube-apiserver"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_sni_unknown_source_and_foreign_alias_are_refused() {
    let lab = Lab::pushed(1).await;
    assert!(
        lab.who(lab.https, Some("evil.example.org"), WORKER_C1)
            .await
            .starts_with("refused")
    );
    assert!(
        lab.who(lab.kube, Some("oauth.c1.example.com"), WORKER_C1)
            .await
            .starts_with("refused"),
        "SNI on the wrong port"
    );
    assert!(
        lab.who(lab.kube, None, STRANGER)
            .await
            .starts_with("refused")
    );
    assert!(
        lab.who(lab.kube, Some("kubernetes.default"), STRANGER)
            .await
            .starts_with("refused")
    );
    assert!(
        lab.who(lab.https, Some("kubernetes"), WORKER_C1)
            .await
            .starts_with("refused"),
        "aliases route on the kube port only"
    );
    let refused = lab
        .envoy
        .stat("wasmcustom.oooi_sni_router_refuse_unknown_sni")
        .unwrap_or(0);
    assert!(refused >= 2, "refusals are counted: {refused}");
    assert!(
        lab.envoy
            .stat("wasmcustom.oooi_sni_router_refuse_alias_from_unknown_source")
            .unwrap_or(0)
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_malformed_or_unauthorised_pushes_leave_routing_unchanged() {
    let lab = Lab::pushed(1).await;
    let mut other = lab.table.clone();
    // Point oauth.c1 at c2's oauth: it must never take effect.
    let c2_oauth = other
        .routes
        .iter()
        .find(|r| r.matches == RouteMatch::Sni("oauth.c2.example.com".into()))
        .unwrap()
        .upstream
        .clone();
    for r in other.routes.iter_mut() {
        if r.matches == RouteMatch::Sni("oauth.c1.example.com".into()) {
            r.upstream = c2_oauth.clone();
        }
    }
    // Same generation: refused.
    let (status, body) = lab.envoy.push(&other.to_json()).unwrap();
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("not newer"), "{body}");
    // Malformed and invalid documents.
    let (status, body) = lab.envoy.push(b"{not json").unwrap();
    assert_eq!(status, 400, "{body}");
    let (status, body) = lab.envoy.push(br#"{"generation":5,"routes":[{"port":443,"sni":"x.example.com","upstream":{"cluster":""}}]}"#).unwrap();
    assert_eq!(status, 400);
    assert!(body.contains("routes[0].upstream.cluster"), "{body}");
    // Credentials.
    other.generation = 7;
    let (status, _) =
        http_blocking(lab.envoy.api, "PUT", "/v1/routes", &[], &other.to_json()).unwrap();
    assert_eq!(status, 401);
    let (status, _) = http_blocking(
        lab.envoy.api,
        "PUT",
        "/v1/routes",
        &[("authorization", "Bearer wrong-token-wrong-token")],
        &other.to_json(),
    )
    .unwrap();
    assert_eq!(status, 403);
    assert_eq!(
        lab.who(lab.https, Some("oauth.c1.example.com"), STRANGER)
            .await,
        "c1-oauth"
    );
    // A proper newer push does take effect.
    let auth = format!("Bearer {PUSH_TOKEN}");
    let (status, body) = http_blocking(
        lab.envoy.api,
        "PUT",
        "/v1/routes",
        &[("authorization", &auth)],
        &other.to_json(),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        lab.who(lab.https, Some("oauth.c1.example.com"), STRANGER)
            .await,
        "c2-oauth"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_thread_sees_the_table() {
    let lab = Lab::pushed(2).await;
    // Many connections spread over both Envoy workers; each one must be routed.
    let mut tasks = Vec::new();
    for i in 0..40 {
        let target = lab.https;
        tasks.push(tokio::spawn(async move {
            let sni = if i % 2 == 0 {
                "oauth.c1.example.com"
            } else {
                "x.apps.c2.example.com"
            };
            (i, tls_probe(target, Some(sni), None).await)
        }));
    }
    for t in tasks {
        let (i, r) = t.await.unwrap();
        let want = if i % 2 == 0 { "c1-oauth" } else { "c2-apps" };
        assert_eq!(r.expect("routed"), want);
    }
    let envoy_log = lab.envoy.log_text();
    assert!(
        envoy_log
            .matches("routing table generation 1 loaded")
            .count()
            >= 2,
        "both workers loaded the table:\n{envoy_log}"
    );
}

#[test]
fn filter_module_fits_a_configmap() {
    let path = oooi_tests::filter_wasm().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size <= 512 * 1024,
        "{} is {size} bytes, over 512 KiB",
        path.display()
    );
}
