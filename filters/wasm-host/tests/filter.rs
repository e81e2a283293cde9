//! The real oooi filter module, driven without Envoy. Set `OOOI_FILTER_WASM`
//! to the built module (`cargo build -p oooi-sni-router --target wasm32-wasip1 --profile wasm`).
//!
//! One [`FilterHost`] is one VM, like one Envoy worker thread: it carries the
//! table API plugin and a network plugin per TLS port. Two hosts built on the
//! same [`SharedData`] stand in for two workers sharing one table.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use oooi_routes::{
    Cidr, DYNAMIC_CLUSTER, MAX_DOCUMENT_BYTES, MAX_GENERATION, Route, RouteMatch, RouteTable,
    Upstream, build_id,
};
use oooi_wasm_host::{Action, ConnectionOutcome, FilterHost, LocalResponse, SharedData};

const TOKEN: &str = "TOKEN-0123456789abcdef";
const KUBE: u16 = 6443;
const HTTPS: u16 = 443;
const WORKER_C1: &str = "192.0.2.10";
const WORKER_C2: &str = "192.0.2.20";
const STRANGER: &str = "192.0.2.99";

fn filter_wasm() -> Vec<u8> {
    let Ok(path) = std::env::var("OOOI_FILTER_WASM") else {
        panic!(
            "OOOI_FILTER_WASM is not set: run `tools/dev test` (it builds the filter module and sets it)"
        );
    };
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read OOOI_FILTER_WASM={path}: {e}"))
}

/// The table API of a proxy whose static clusters are `c1_apps` and `c1_other`.
fn api_config() -> String {
    format!(r#"{{"role":"api","push_token":"{TOKEN}","clusters":["c1_apps","c1_other"]}}"#)
}

fn network_config(port: u16) -> String {
    format!(r#"{{"role":"network","port":{port}}}"#)
}

/// One VM with the table API and a network plugin on each port.
struct Worker {
    host: FilterHost,
    api: u32,
    kube: u32,
    https: u32,
}

impl Worker {
    fn new(shared: SharedData) -> Worker {
        Worker::with_module(&filter_wasm(), shared)
    }

    fn with_module(module: &[u8], shared: SharedData) -> Worker {
        let mut host = FilterHost::load(module, shared).expect("module loads");
        let api = host.start_plugin(&api_config()).expect("api plugin");
        let kube = host.start_plugin(&network_config(KUBE)).expect("6443");
        let https = host.start_plugin(&network_config(HTTPS)).expect("443");
        Worker {
            host,
            api,
            kube,
            https,
        }
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> LocalResponse {
        self.host
            .http_request(self.api, method, path, headers, body)
            .expect("no trap")
            .expect("the API answers every request itself")
    }

    fn push(&mut self, body: &[u8]) -> LocalResponse {
        let auth = format!("Bearer {TOKEN}");
        self.request("PUT", "/v1/routes", &[("authorization", &auth)], body)
    }

    fn routes(&mut self) -> serde_json::Value {
        let r = self.request("GET", "/v1/routes", &[], b"");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("JSON")
    }

    fn connect(&mut self, port: u16, sni: Option<&str>, source: &str) -> ConnectionOutcome {
        let root = if port == KUBE { self.kube } else { self.https };
        let source = SocketAddr::new(source.parse().unwrap(), 40000);
        let local: SocketAddr = format!("192.0.2.4:{port}").parse().unwrap();
        self.host
            .new_connection(root, sni, source, local)
            .expect("no trap")
    }

    fn counter(&self, name: &str) -> i64 {
        self.host.metrics().get(name).copied().unwrap_or(0)
    }
}

fn address(host: &str, port: u16) -> Upstream {
    Upstream::Address {
        host: host.into(),
        port,
    }
}

fn route(port: u16, matches: RouteMatch, upstream: Upstream) -> Route {
    Route {
        port,
        matches,
        upstream,
        owner: None,
    }
}

fn source(cidr: &str) -> RouteMatch {
    RouteMatch::Source(cidr.parse::<Cidr>().unwrap())
}

fn table(generation: u64) -> RouteTable {
    let c1_api = address("kube-apiserver.clusters-c1.svc", 6443);
    let c2_api = address("kube-apiserver.clusters-c2.svc", 6443);
    let t = RouteTable {
        generation,
        routes: vec![
            route(
                KUBE,
                RouteMatch::Sni("api.c1.example.com".into()),
                c1_api.clone(),
            ),
            route(
                KUBE,
                RouteMatch::Sni("api.c2.example.com".into()),
                c2_api.clone(),
            ),
            route(KUBE, source(WORKER_C1), c1_api),
            route(KUBE, source("192.0.2.16/28"), c2_api),
            route(
                HTTPS,
                RouteMatch::Sni("oauth.c1.example.com".into()),
                address("oauth.clusters-c1.svc", 6443),
            ),
            route(
                HTTPS,
                RouteMatch::Sni("*.apps.c1.example.com".into()),
                Upstream::Cluster("c1_apps".into()),
            ),
            route(
                HTTPS,
                RouteMatch::Sni("*.c1.example.com".into()),
                Upstream::Cluster("c1_other".into()),
            ),
        ],
    };
    t.validate().expect("valid table");
    t
}

/// The upstream a connection on `listener_port` was sent to, as Envoy would
/// see it: without `envoy.upstream.dynamic_port`, sni_dynamic_forward_proxy
/// takes the listener's port (its rendered `port_value`).
fn routed_to(listener_port: u16, o: &ConnectionOutcome) -> String {
    assert_eq!(o.action, Action::Continue, "{o:?}");
    assert!(!o.closed, "{o:?}");
    let cluster = o
        .filter_state
        .get("envoy.tcp_proxy.cluster")
        .expect("cluster set");
    let host = o
        .filter_state
        .get("envoy.upstream.dynamic_host")
        .cloned()
        .unwrap_or_default();
    if cluster == DYNAMIC_CLUSTER {
        let port = match o.filter_state.get("envoy.upstream.dynamic_port") {
            Some(p) => {
                assert_ne!(
                    p.parse::<u16>().expect("a port"),
                    listener_port,
                    "the listener's own port is left to the default: {o:?}"
                );
                p.clone()
            }
            None => listener_port.to_string(),
        };
        format!("{host}:{port}")
    } else {
        // An empty dynamic host keeps sni_dynamic_forward_proxy from resolving the SNI.
        assert_eq!(host, "", "{o:?}");
        format!("cluster {cluster}")
    }
}

fn assert_refused(o: &ConnectionOutcome) {
    assert!(o.closed, "{o:?}");
    assert_eq!(o.action, Action::Pause, "{o:?}");
    assert!(o.filter_state.is_empty(), "nothing routed: {o:?}");
}

#[test]
fn filter_loads_and_is_not_ready_without_a_table() {
    let mut host = FilterHost::load(&filter_wasm(), SharedData::default()).expect("load");
    assert!(
        host.abi_report()
            .abi_versions
            .contains(&"proxy_abi_version_0_2_1".to_owned())
    );
    let api = host.start_plugin(&api_config()).expect("api plugin");
    let ready = host
        .http_request(api, "GET", "/ready", &[], b"")
        .expect("request")
        .expect("answered");
    assert_eq!(ready.status, 503, "{}", ready.body_text());
}

#[test]
fn push_without_token_is_refused() {
    let mut host = FilterHost::load(&filter_wasm(), SharedData::default()).expect("load");
    let api = host.start_plugin(&api_config()).expect("api plugin");
    let response = host
        .http_request(
            api,
            "PUT",
            "/v1/routes",
            &[("authorization", "Bearer WRONG")],
            b"{}",
        )
        .expect("request")
        .expect("answered");
    assert!(matches!(response.status, 401 | 403), "{}", response.status);
}

#[test]
fn successful_push_is_read_back_and_makes_the_filter_ready() {
    let mut w = Worker::new(SharedData::default());
    let t = table(3);
    let r = w.push(&t.to_json());
    assert_eq!(r.status, 200, "{}", r.body_text());
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["generation"], 3);
    assert_eq!(body["digest"], t.digest());
    assert_eq!(body["routes"], t.routes.len());
    let v = w.routes();
    assert_eq!(
        (v["generation"].clone(), v["digest"].clone()),
        (body["generation"].clone(), body["digest"].clone())
    );
    assert_eq!(w.request("GET", "/ready", &[], b"").status, 200);
    assert_eq!(w.counter("oooi_sni_router_push_accepted"), 1);
}

#[test]
fn decisions_follow_the_pushed_table() {
    let mut w = Worker::new(SharedData::default());
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    let c1_api = "kube-apiserver.clusters-c1.svc:6443";
    let c2_api = "kube-apiserver.clusters-c2.svc:6443";
    // Exact SNI (case and a trailing dot do not matter).
    assert_eq!(
        routed_to(KUBE, &w.connect(KUBE, Some("api.c1.example.com"), STRANGER)),
        c1_api
    );
    assert_eq!(
        routed_to(
            KUBE,
            &w.connect(KUBE, Some("API.C2.example.com."), STRANGER)
        ),
        c2_api
    );
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth.clusters-c1.svc:6443"
    );
    // Wildcards: any depth, the longest suffix wins, exact beats wildcard.
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("console.apps.c1.example.com"), STRANGER)
        ),
        "cluster c1_apps"
    );
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("a.b.apps.c1.example.com"), STRANGER)
        ),
        "cluster c1_apps"
    );
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("grafana.c1.example.com"), STRANGER)
        ),
        "cluster c1_other"
    );
    // Kubernetes-service aliases and no SNI: by source (a /32 and a /28).
    for alias in oooi_routes::KUBERNETES_ALIASES {
        assert_eq!(
            routed_to(KUBE, &w.connect(KUBE, Some(alias), WORKER_C1)),
            c1_api,
            "{alias}"
        );
        assert_eq!(
            routed_to(KUBE, &w.connect(KUBE, Some(alias), WORKER_C2)),
            c2_api,
            "{alias}"
        );
    }
    assert_eq!(routed_to(KUBE, &w.connect(KUBE, None, WORKER_C1)), c1_api);
    assert_eq!(
        routed_to(KUBE, &w.connect(KUBE, None, "192.0.2.30")),
        c2_api
    );
    // Counted per outcome.
    assert_eq!(w.counter("oooi_sni_router_forward_exact_sni"), 3);
    assert_eq!(w.counter("oooi_sni_router_forward_wildcard_sni"), 3);
    assert_eq!(w.counter("oooi_sni_router_forward_source_alias"), 8);
    assert_eq!(w.counter("oooi_sni_router_forward_source_no_sni"), 2);
}

#[test]
fn unknown_sni_unknown_source_and_foreign_alias_are_refused() {
    let mut w = Worker::new(SharedData::default());
    // Before any push, everything is refused.
    assert_refused(&w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER));
    assert_eq!(w.counter("oooi_sni_router_refuse_no_table"), 1);
    assert_eq!(w.push(&table(1).to_json()).status, 200);

    assert_refused(&w.connect(HTTPS, Some("evil.example.org"), WORKER_C1));
    assert_refused(&w.connect(HTTPS, Some("c1.example.com"), WORKER_C1)); // a wildcard's own suffix
    assert_refused(&w.connect(KUBE, Some("oauth.c1.example.com"), WORKER_C1)); // wrong port
    assert_eq!(w.counter("oooi_sni_router_refuse_unknown_sni"), 3);
    assert_refused(&w.connect(KUBE, None, STRANGER));
    assert_eq!(w.counter("oooi_sni_router_refuse_unknown_source"), 1);
    assert_refused(&w.connect(KUBE, Some("kubernetes.default.svc"), STRANGER));
    assert_eq!(
        w.counter("oooi_sni_router_refuse_alias_from_unknown_source"),
        1
    );
    // Aliases are not routed by source on a port without source routes.
    assert_refused(&w.connect(HTTPS, Some("kubernetes"), WORKER_C1));
    let logs = w.host.logs();
    assert!(
        logs.iter()
            .any(|(_, m)| m.contains("refuse reason=alias_from_unknown_source")),
        "refusals are logged with their reason: {logs:?}"
    );
}

#[test]
fn stale_malformed_or_oversized_pushes_leave_the_table_unchanged() {
    let mut w = Worker::new(SharedData::default());
    let good = table(5);
    assert_eq!(w.push(&good.to_json()).status, 200);
    // oauth.c1 pointed elsewhere must never take effect.
    let mut other = good.clone();
    other.routes[4].upstream = address("elsewhere.example.com", 443);
    for generation in [5, 4, 1] {
        other.generation = generation;
        let r = w.push(&other.to_json());
        assert_eq!(r.status, 409, "{}", r.body_text());
        assert!(r.body_text().contains("not newer"), "{}", r.body_text());
    }
    let r = w.push(b"{not json");
    assert_eq!(r.status, 400);
    assert!(r.body_text().contains("error"), "{}", r.body_text());
    let r = w.push(br#"{"generation":9,"routes":[{"port":443,"sni":"x.example.com","upstream":{"cluster":""}}]}"#);
    assert_eq!(r.status, 400);
    assert!(
        r.body_text().contains("routes[0].upstream.cluster"),
        "{}",
        r.body_text()
    );
    let r = w.push(br#"{"generation":9,"routes":[{"port":443,"sni":"a.example.com","upstream":{"cluster":"x"}},{"port":443,"sni":"A.example.com","upstream":{"cluster":"y"}}]}"#);
    assert_eq!(r.status, 400);
    assert!(r.body_text().contains("routes[1]"), "{}", r.body_text());
    let auth = format!("Bearer {TOKEN}");
    let r = w.request(
        "PUT",
        "/v1/routes",
        &[("authorization", &auth), ("content-length", "9000000")],
        b"{}",
    );
    assert_eq!(r.status, 413, "{}", r.body_text());
    let r = w.request("PUT", "/v1/routes", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 400, "{}", r.body_text());

    let v = w.routes();
    assert_eq!(v["generation"], 5);
    assert_eq!(v["digest"], good.digest());
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth.clusters-c1.svc:6443"
    );
    assert_eq!(w.counter("oooi_sni_router_push_rejected"), 8);
    // A newer push does take effect.
    other.generation = 6;
    assert_eq!(w.push(&other.to_json()).status, 200);
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "elsewhere.example.com:443"
    );
}

#[test]
fn two_workers_share_one_table() {
    let shared = SharedData::default();
    let mut pusher = Worker::new(shared.clone());
    let mut other = Worker::new(shared.clone());
    assert_refused(&other.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER));
    assert_eq!(pusher.push(&table(1).to_json()).status, 200);
    // The other VM never saw the push; it reads the table from shared data.
    assert_eq!(
        routed_to(
            HTTPS,
            &other.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth.clusters-c1.svc:6443"
    );
    assert_eq!(other.routes()["generation"], 1);
    // A newer table reaches it on its tick, off the connection path.
    let mut next = table(2);
    next.routes[4].upstream = address("oauth-v2.clusters-c1.svc", 6443);
    assert_eq!(pusher.push(&next.to_json()).status, 200);
    let root = other.https;
    assert!(
        other.host.tick_period_ms(root).is_some(),
        "network plugins ask for a tick"
    );
    other.host.tick(root).expect("tick");
    assert!(
        other
            .host
            .logs()
            .iter()
            .any(|(_, m)| m.contains("routing table generation 2 loaded")),
        "{:?}",
        other.host.logs()
    );
    assert_eq!(
        routed_to(
            HTTPS,
            &other.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth-v2.clusters-c1.svc:6443"
    );
    // Either VM refuses a push the other already superseded.
    assert_eq!(other.push(&table(2).to_json()).status, 409);
    // A VM built later (a reload after a fault) finds the table at once.
    let mut reloaded = Worker::new(shared);
    assert_eq!(
        routed_to(
            HTTPS,
            &reloaded.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth-v2.clusters-c1.svc:6443"
    );
}

#[test]
fn hostile_input_never_traps_the_filter() {
    let mut w = Worker::new(SharedData::default());
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    let long = "a".repeat(70_000);
    let snis = [
        "",
        ".",
        "..",
        "*",
        "*.apps.c1.example.com",
        "*.",
        "a..b",
        "\u{0}",
        "é.example.com",
        "kubernetes.",
        long.as_str(),
        "api.c1.example.com\u{0}evil",
    ];
    for sni in snis {
        for port in [KUBE, HTTPS] {
            for src in [WORKER_C1, STRANGER, "::1"] {
                let o = w.connect(port, Some(sni), src);
                assert!(o.closed || o.action == Action::Continue, "{sni:?} {o:?}");
            }
        }
    }
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"{\"generation\":-1,\"routes\":[]}".to_vec(),
        b"{\"generation\":18446744073709551616,\"routes\":[]}".to_vec(),
        vec![0xff; 4096],
        table(2).to_json()[..40].to_vec(),
        b"{\"generation\":2,\"routes\":[{\"port\":0,\"sni\":\"x\",\"upstream\":{\"cluster\":\"c\"}}]}".to_vec(),
        b"{\"generation\":2,\"routes\":[{\"port\":443,\"source\":\"10.0.0.1/33\",\"upstream\":{\"cluster\":\"c\"}}]}".to_vec(),
    ];
    for body in &bodies {
        let r = w.push(body);
        assert!(
            (400..500).contains(&r.status),
            "{} for {:?}",
            r.status,
            String::from_utf8_lossy(body)
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("error bodies are JSON");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    for (method, path) in [
        ("DELETE", "/v1/routes"),
        ("GET", "/nope"),
        ("POST", "/ready"),
    ] {
        let r = w.request(method, path, &[], b"");
        assert!(
            matches!(r.status, 404 | 405),
            "{method} {path}: {}",
            r.status
        );
    }
    assert_eq!(w.routes()["generation"], 1);
}

#[test]
fn a_stamped_build_reports_its_id() {
    let module = build_id::stamp(&filter_wasm(), "release-7").expect("stamp");
    assert_eq!(build_id::read(&module).as_deref(), Some("release-7"));
    let mut w = Worker::with_module(&module, SharedData::default());
    assert_eq!(w.routes()["build"], "release-7");
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER);
    w.connect(HTTPS, Some("nobody.example.org"), STRANGER);
    assert_eq!(w.counter("oooi_sni_router_connections_build_release_7"), 2);
    // The unstamped module calls itself `dev`.
    let mut dev = Worker::new(SharedData::default());
    assert_eq!(dev.routes()["build"], build_id::DEFAULT);
}

#[test]
fn the_port_is_left_to_the_listener_default_only_when_it_is_the_same() {
    let mut w = Worker::new(SharedData::default());
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    // 6443 to kube-apiserver's 6443: cluster and host only.
    let same = w.connect(KUBE, Some("api.c1.example.com"), STRANGER);
    assert_eq!(
        same.filter_state.keys().collect::<Vec<_>>(),
        ["envoy.tcp_proxy.cluster", "envoy.upstream.dynamic_host"],
        "{same:?}"
    );
    assert_eq!(
        same.filter_state["envoy.upstream.dynamic_host"],
        "kube-apiserver.clusters-c1.svc"
    );
    // 443 to oauth's 6443: the port is named.
    let other = w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER);
    assert_eq!(other.filter_state["envoy.upstream.dynamic_port"], "6443");
    assert_eq!(
        other.filter_state["envoy.upstream.dynamic_host"],
        "oauth.clusters-c1.svc"
    );
}

/// Names no table entry could hold never reach the wildcard walk: without
/// the check, `a..apps.c1.example.com` would match `*.apps.c1.example.com`.
#[test]
fn invalid_sni_is_refused_never_matched_by_a_wildcard() {
    let mut w = Worker::new(SharedData::default());
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    let long_label = format!("{}.apps.c1.example.com", "a".repeat(64));
    let long_name = format!("{}.apps.c1.example.com", "abcdefghi.".repeat(24));
    assert!(long_name.len() > 253);
    let invalid = [
        "a..apps.c1.example.com",
        ".apps.c1.example.com",
        "x y.apps.c1.example.com",
        "x/y.apps.c1.example.com",
        "*.apps.c1.example.com",
        "é.apps.c1.example.com",
        "-x.apps.c1.example.com",
        "x\u{0}.apps.c1.example.com",
        long_label.as_str(),
        long_name.as_str(),
        ".",
    ];
    for sni in invalid {
        assert_refused(&w.connect(HTTPS, Some(sni), STRANGER));
    }
    assert_eq!(
        w.counter("oooi_sni_router_refuse_invalid_sni"),
        invalid.len() as i64
    );
    assert_eq!(w.counter("oooi_sni_router_forward_wildcard_sni"), 0);
    // A 63-byte label and upper case are valid and still match.
    let ok = format!("{}.APPS.c1.example.com", "a".repeat(63));
    assert_eq!(
        routed_to(HTTPS, &w.connect(HTTPS, Some(&ok), STRANGER)),
        "cluster c1_apps"
    );
    assert!(
        w.host
            .logs()
            .iter()
            .any(|(_, m)| m.contains("refuse reason=invalid_sni")),
        "{:?}",
        w.host.logs()
    );
}

#[test]
fn refusals_log_addresses_plainly() {
    let mut w = Worker::new(SharedData::default());
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    assert_refused(&w.connect(KUBE, None, STRANGER));
    let line = w
        .host
        .logs()
        .iter()
        .map(|(_, m)| m.as_str())
        .find(|m| m.contains("refuse reason=unknown_source"))
        .expect("refusal logged")
        .to_string();
    assert!(
        line.contains(&format!("source={STRANGER} port={KUBE}")),
        "{line}"
    );
    assert!(!line.contains("Some("), "{line}");
}

#[test]
fn the_not_tls_role_refuses_every_connection() {
    let mut host = FilterHost::load(&filter_wasm(), SharedData::default()).expect("load");
    let api = host.start_plugin(&api_config()).expect("api");
    let kube = host.start_plugin(&network_config(KUBE)).expect("6443");
    let not_tls = host
        .start_plugin(&format!(r#"{{"role":"not_tls","port":{KUBE}}}"#))
        .expect("not_tls plugin");
    let auth = format!("Bearer {TOKEN}");
    let r = host
        .http_request(
            api,
            "PUT",
            "/v1/routes",
            &[("authorization", &auth)],
            &table(1).to_json(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body_text());
    let worker = SocketAddr::new(WORKER_C1.parse().unwrap(), 40000);
    let local: SocketAddr = format!("192.0.2.4:{KUBE}").parse().unwrap();
    // The same worker without SNI is forwarded on the TLS chain...
    let tls = host.new_connection(kube, None, worker, local).unwrap();
    assert_eq!(tls.action, Action::Continue, "{tls:?}");
    // ...and refused on the chain Envoy gives to anything not TLS.
    let plain = host.new_connection(not_tls, None, worker, local).unwrap();
    assert_refused(&plain);
    assert_eq!(
        host.metrics()
            .get("oooi_sni_router_refuse_not_tls")
            .copied(),
        Some(1)
    );
    assert!(
        host.logs()
            .iter()
            .any(|(_, m)| m == &format!("refuse reason=not_tls source={WORKER_C1} port={KUBE}")),
        "{:?}",
        host.logs()
    );
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let mut w = Worker::new(SharedData::default());
    for (generation, scheme) in [(1, "bearer"), (2, "BEARER"), (3, "Bearer")] {
        let auth = format!("{scheme} {TOKEN}");
        let r = w.request(
            "PUT",
            "/v1/routes",
            &[("authorization", &auth)],
            &table(generation).to_json(),
        );
        assert_eq!(r.status, 200, "{scheme}: {}", r.body_text());
    }
    assert_eq!(w.counter("oooi_sni_router_push_unauthorized"), 0);
}

#[test]
fn bad_tokens_are_logged_with_the_source_and_counted_apart_from_bad_tables() {
    let mut w = Worker::new(SharedData::default());
    let client: SocketAddr = "10.128.0.7:51000".parse().unwrap();
    let body = table(1).to_json();
    for (headers, status, reason) in [
        (
            vec![("authorization", "Bearer wrong-token-wrong-token")],
            403,
            "bad_token",
        ),
        (vec![], 401, "no_token"),
        (
            vec![("authorization", "Basic dXNlcjpwYXNz")],
            401,
            "not_bearer",
        ),
    ] {
        let r = w
            .host
            .http_request_from(w.api, client, "PUT", "/v1/routes", &headers, &body)
            .unwrap()
            .unwrap();
        assert_eq!(r.status, status, "{}", r.body_text());
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        assert!(v["error"].is_string(), "{v}");
        assert!(
            w.host.logs().iter().any(|(_, m)| m.contains(&format!(
                "push unauthorized reason={reason} source=10.128.0.7"
            ))),
            "{:?}",
            w.host.logs()
        );
    }
    assert_eq!(w.counter("oooi_sni_router_push_unauthorized"), 3);
    assert_eq!(w.counter("oooi_sni_router_push_rejected"), 0);
    assert_eq!(w.push(b"{not json").status, 400);
    assert_eq!(w.counter("oooi_sni_router_push_rejected"), 1);
    assert_eq!(w.counter("oooi_sni_router_push_unauthorized"), 3);
    assert_eq!(w.routes()["generation"], 0);
}

/// The generation rule: 1..=2^53-1, compared in sequence space, so the
/// highest generation is followed by 1 and nothing locks later pushes out.
#[test]
fn a_generation_at_the_top_does_not_lock_out_later_pushes() {
    let mut w = Worker::new(SharedData::default());
    let r = w.push(&table(MAX_GENERATION).to_json());
    assert_eq!(r.status, 200, "{}", r.body_text());
    for beyond in [MAX_GENERATION + 1, u64::MAX] {
        let mut t = table(1);
        t.generation = beyond;
        let r = w.push(&t.to_json());
        assert_eq!(r.status, 400, "{}", r.body_text());
        assert!(r.body_text().contains("generation"), "{}", r.body_text());
    }
    // The same generation is still refused...
    assert_eq!(w.push(&table(MAX_GENERATION).to_json()).status, 409);
    // ...but the ones after it, wrapping to 1, are accepted.
    let mut next = table(1);
    next.routes[4].upstream = address("oauth-next.clusters-c1.svc", 6443);
    let r = w.push(&next.to_json());
    assert_eq!(r.status, 200, "{}", r.body_text());
    assert_eq!(w.routes()["generation"], 1);
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth-next.clusters-c1.svc:6443"
    );
    assert_eq!(w.push(&table(2).to_json()).status, 200);
    // An old generation from before the wrap is now behind.
    assert_eq!(w.push(&table(MAX_GENERATION).to_json()).status, 409);
}

#[test]
fn a_route_to_a_cluster_the_proxy_lacks_is_refused_at_push() {
    let mut w = Worker::new(SharedData::default());
    let mut t = table(1);
    t.routes[5].upstream = Upstream::Cluster("c9_missing".into());
    let r = w.push(&t.to_json());
    assert_eq!(r.status, 400, "{}", r.body_text());
    let text = r.body_text();
    assert!(text.contains("routes[5].upstream.cluster"), "{text}");
    assert!(text.contains("c9_missing"), "{text}");
    assert!(text.contains("c1_apps, c1_other"), "{text}");
    assert_eq!(w.routes()["generation"], 0, "nothing loaded");
    assert_refused(&w.connect(HTTPS, Some("x.apps.c1.example.com"), STRANGER));
}

#[test]
fn every_error_of_an_oversized_push_is_json() {
    let mut w = Worker::new(SharedData::default());
    let big = vec![b' '; MAX_DOCUMENT_BYTES + 1];
    let good = format!("Bearer {TOKEN}");
    for (auth, status) in [
        (Some(good.as_str()), 413),
        (Some("Bearer wrong-token-wrong-token"), 403),
        (None, 401),
    ] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let r = w.request("PUT", "/v1/routes", &headers, &big);
        assert_eq!(r.status, status, "{}", r.body_text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        assert!(v["error"].is_string(), "{v}");
    }
}

/// `alias_source` routes carry the Kubernetes-service aliases on 443 by
/// SNI and source; a connection without SNI does not match them.
#[test]
fn aliases_on_443_route_by_sni_and_source() {
    let mut w = Worker::new(SharedData::default());
    let mut t = table(1);
    t.routes.push(route(
        HTTPS,
        RouteMatch::AliasSource(WORKER_C1.parse().unwrap()),
        address("kube-apiserver.clusters-c1.svc", 6443),
    ));
    assert_eq!(w.push(&t.to_json()).status, 200);
    for alias in oooi_routes::KUBERNETES_ALIASES {
        assert_eq!(
            routed_to(HTTPS, &w.connect(HTTPS, Some(alias), WORKER_C1)),
            "kube-apiserver.clusters-c1.svc:6443",
            "{alias}"
        );
        assert_refused(&w.connect(HTTPS, Some(alias), STRANGER));
    }
    assert_refused(&w.connect(HTTPS, None, WORKER_C1));
    assert_eq!(w.counter("oooi_sni_router_forward_source_alias"), 4);
    assert_eq!(w.counter("oooi_sni_router_refuse_unknown_source"), 1);
}

/// A write without a valid token is answered from its headers: the module
/// never asks for the body, so Envoy buffers none of it.
#[test]
fn a_push_without_a_valid_token_is_answered_from_the_headers() {
    let mut w = Worker::new(SharedData::default());
    for path in ["/v1/routes", "/v1/routes/expected"] {
        for (auth, status) in [
            (None, 401),
            (Some("Basic dXNlcjpwYXNz"), 401),
            (Some("Bearer wrong-token-wrong-token"), 403),
        ] {
            let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
            let r = w
                .host
                .http_request_headers(w.api, "PUT", path, &headers, MAX_DOCUMENT_BYTES)
                .expect("no trap")
                .unwrap_or_else(|| panic!("{path} {auth:?}: not answered from the headers"));
            assert_eq!(r.status, status, "{path} {auth:?}: {}", r.body_text());
            assert_eq!(r.header("content-type"), Some("application/json"));
            let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
            assert!(v["error"].is_string(), "{v}");
        }
    }
    // With the token the body is awaited (no answer before it).
    let auth = format!("Bearer {TOKEN}");
    assert!(
        w.host
            .http_request_headers(w.api, "PUT", "/v1/routes", &[("authorization", &auth)], 100)
            .expect("no trap")
            .is_none()
    );
    assert_eq!(w.counter("oooi_sni_router_push_unauthorized"), 6);
}

/// Envoy hands over the ClientHello's server name as bytes; bytes that are
/// not UTF-8 are an invalid name on every port, never "no SNI" (which a
/// worker's source would route on 6443).
#[test]
fn a_server_name_that_is_not_utf8_is_refused_as_invalid_on_every_port() {
    let mut w = Worker::new(SharedData::default());
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    let source = SocketAddr::new(WORKER_C1.parse().unwrap(), 40000);
    let mut refused = 0;
    for (root, port) in [(w.kube, KUBE), (w.https, HTTPS)] {
        for sni in [&b"\xff.apps.c1.example.com"[..], b"api.c1.example.com\xc3"] {
            let local: SocketAddr = format!("192.0.2.4:{port}").parse().unwrap();
            let o = w
                .host
                .new_connection_raw(root, Some(sni), source, local)
                .expect("no trap");
            assert_refused(&o);
            refused += 1;
        }
    }
    assert_eq!(w.counter("oooi_sni_router_refuse_invalid_sni"), refused);
    assert_eq!(w.counter("oooi_sni_router_forward_source_no_sni"), 0);
    let line = w
        .host
        .logs()
        .iter()
        .map(|(_, m)| m.as_str())
        .find(|m| m.contains("refuse reason=invalid_sni"))
        .expect("refusal logged")
        .to_string();
    assert!(line.contains(r#"sni="\xff.apps.c1.example.com""#), "{line}");
    // The worker without SNI is still routed by its source.
    assert_eq!(
        routed_to(KUBE, &w.connect(KUBE, None, WORKER_C1)),
        "kube-apiserver.clusters-c1.svc:6443"
    );
}

/// The controller announces the table it holds current; a replica holding
/// an older one is not ready until it takes it.
#[test]
fn a_replica_behind_the_announced_table_is_not_ready_until_it_catches_up() {
    let mut w = Worker::new(SharedData::default());
    let auth = format!("Bearer {TOKEN}");
    let announce = |w: &mut Worker, body: &str| {
        w.request(
            "PUT",
            "/v1/routes/expected",
            &[("authorization", &auth)],
            body.as_bytes(),
        )
    };
    assert_eq!(w.push(&table(1).to_json()).status, 200);
    assert_eq!(w.request("GET", "/ready", &[], b"").status, 200);
    let t2 = table(2);
    let r = announce(
        &mut w,
        &format!(r#"{{"generation":2,"digest":"{}"}}"#, t2.digest()),
    );
    assert_eq!(r.status, 200, "{}", r.body_text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["ready"], false, "{v}");
    assert_eq!(v["reason"], "behind", "{v}");
    let ready = w.request("GET", "/ready", &[], b"");
    assert_eq!(ready.status, 503, "{}", ready.body_text());
    let v: serde_json::Value = serde_json::from_slice(&ready.body).unwrap();
    assert_eq!(v["reason"], "behind");
    assert_eq!(v["generation"], 1);
    assert_eq!(v["expected"]["generation"], 2);
    let routes = w.routes();
    assert_eq!(routes["ready"], false, "{routes}");
    assert_eq!(routes["expected"]["generation"], 2, "{routes}");
    // The old table keeps routing meanwhile.
    assert_eq!(
        routed_to(
            HTTPS,
            &w.connect(HTTPS, Some("oauth.c1.example.com"), STRANGER)
        ),
        "oauth.clusters-c1.svc:6443"
    );
    // A replica at the announced generation under another table is not ready.
    let mut other = table(2);
    other.routes.pop();
    assert_eq!(w.push(&other.to_json()).status, 200);
    let ready = w.request("GET", "/ready", &[], b"");
    assert_eq!(ready.status, 503);
    assert!(
        ready.body_text().contains("other_digest"),
        "{}",
        ready.body_text()
    );
    // Catching up makes it ready.
    assert_eq!(w.push(&table(3).to_json()).status, 200);
    let ready = w.request("GET", "/ready", &[], b"");
    assert_eq!(ready.status, 200, "{}", ready.body_text());
    // Bad announcements are refused and change nothing.
    for bad in [
        r#"{"generation":0}"#,
        r#"{"generation":5,"digest":"x"}"#,
        "[]",
    ] {
        assert_eq!(announce(&mut w, bad).status, 400, "{bad}");
    }
    assert_eq!(w.request("GET", "/ready", &[], b"").status, 200);
    let big = format!(r#"{{"generation":9,"pad":"{}"}}"#, " ".repeat(2000));
    assert_eq!(announce(&mut w, &big).status, 413);
    assert_eq!(
        w.request("DELETE", "/v1/routes/expected", &[], b"").status,
        405
    );
}

/// The announcement lives in shared data: every worker's readiness sees it.
#[test]
fn the_announced_table_is_shared_by_every_worker() {
    let shared = SharedData::default();
    let mut a = Worker::new(shared.clone());
    let mut b = Worker::new(shared);
    assert_eq!(a.push(&table(1).to_json()).status, 200);
    let auth = format!("Bearer {TOKEN}");
    let r = a.request(
        "PUT",
        "/v1/routes/expected",
        &[("authorization", &auth)],
        br#"{"generation":4}"#,
    );
    assert_eq!(r.status, 200);
    assert_eq!(b.request("GET", "/ready", &[], b"").status, 503);
    assert_eq!(b.push(&table(4).to_json()).status, 200);
    assert_eq!(a.request("GET", "/ready", &[], b"").status, 200);
}
