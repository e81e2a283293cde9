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

/// `table` with oauth.c1 pointed at c2's oauth backend (same generation).
fn oauth_c1_to_c2(table: &oooi_routes::RouteTable) -> oooi_routes::RouteTable {
    let mut t = table.clone();
    let c2_oauth = t
        .routes
        .iter()
        .find(|r| r.matches == RouteMatch::Sni("oauth.c2.example.com".into()))
        .unwrap()
        .upstream
        .clone();
    for r in t.routes.iter_mut() {
        if r.matches == RouteMatch::Sni("oauth.c1.example.com".into()) {
            r.upstream = c2_oauth.clone();
        }
    }
    t
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

/// The readiness listener answers `GET /ready` (the same verdict as the
/// table API) and nothing else: no table read, no push, whatever the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readiness_listener_answers_get_ready_alone() {
    let lab = lab(1).await;
    let ready = lab.envoy.config.ready.expect("a readiness listener");
    let (status, body) = http_blocking(ready, "GET", "/ready", &[], b"").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""reason":"no_table""#), "{body}");
    lab.envoy.push_table(&lab.table).unwrap();
    let (status, body) = http_blocking(ready, "GET", "/ready", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let auth = format!("Bearer {PUSH_TOKEN}");
    for (method, path, status) in [
        ("GET", "/v1/routes", 404),
        ("PUT", "/v1/routes", 404),
        ("PUT", "/v1/routes/expected", 404),
        ("PUT", "/ready", 405),
        ("GET", "/metrics", 404),
    ] {
        let (got, body) = http_blocking(
            ready,
            method,
            path,
            &[("authorization", &auth)],
            &lab.table.to_json(),
        )
        .unwrap();
        assert_eq!(got, status, "{method} {path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(v["error"].is_string(), "{v}");
    }
    // Nothing was pushed there.
    assert_eq!(
        lab.envoy.stat("wasmcustom.oooi_sni_router_push_accepted"),
        Some(1)
    );
}

/// The metrics listener under a flood of unfinished 58 KB heads (the
/// pattern that took Envoy past its memory limit): its own budget and head
/// bounds keep Envoy's memory in check and readiness answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_heads_on_the_metrics_port_leaves_memory_and_readiness_alone() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let lab = lab(2).await;
    lab.envoy.push_table(&lab.table).unwrap();
    let metrics = lab.envoy.config.metrics.expect("a metrics listener");
    let ready = lab.envoy.config.ready.expect("a readiness listener");
    let baseline = lab.envoy.rss_bytes().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..3000)
        .map(|_| {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut head = b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-pad: ".to_vec();
                head.extend(std::iter::repeat_n(b'a', 58 * 1024));
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) = tokio::net::TcpStream::connect(metrics).await
                        && s.write_all(&head).await.is_ok()
                    {
                        let mut buf = [0u8; 512];
                        let _ =
                            tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect();
    let mut peak = baseline;
    let (mut ready_ok, mut checks) = (0, 0);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        peak = peak.max(lab.envoy.rss_bytes().unwrap_or(0));
        checks += 1;
        let r =
            tokio::task::spawn_blocking(move || http_blocking(ready, "GET", "/ready", &[], b""))
                .await
                .unwrap();
        if matches!(r, Ok((200, _))) {
            ready_ok += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let overflow: u64 = lab
        .envoy
        .stats("downstream_cx_overflow")
        .iter()
        .filter(|(k, _)| k.contains(&metrics.port().to_string()))
        .map(|(_, v)| v)
        .sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "3,000 looping clients with unfinished 58 KB heads on the metrics port: RSS {:.0} -> peak \
         {:.0} MiB (limit {:.0} MiB); {overflow} connections over its budget closed; \
         {ready_ok}/{checks} GET /ready 200",
        mib(baseline),
        mib(peak),
        mib(oooi_envoy::PROXY_MEMORY_LIMIT_BYTES),
    );
    assert!(overflow > 0, "the flood went over the budget");
    assert!(
        peak < oooi_envoy::PROXY_MEMORY_LIMIT_BYTES / 2,
        "peak {:.0} MiB",
        mib(peak)
    );
    assert_eq!(ready_ok, checks, "readiness kept answering");
    // Prometheus is served again once it is over.
    let (status, _) =
        tokio::task::spawn_blocking(move || http_blocking(metrics, "GET", "/metrics", &[], b""))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(status, 200);
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

/// The filter leaves the port out when the upstream port is the listener's
/// (kube-apiserver's 6443 behind 6443, the apps VIP's 443 behind 443), and
/// sni_dynamic_forward_proxy's default port takes its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_on_the_listener_port_is_reached_by_the_default_port() {
    let lab = lab(1).await;
    // Envoy listens on 127.0.0.1:<kube>; this backend on 127.0.0.2:<kube>.
    let same_port = SocketAddr::new(ip("127.0.0.2"), lab.kube.port());
    let _backend = oooi_tests::Backend::start_on("c1-same-port", same_port)
        .await
        .expect("backend on the listener's port number");
    let mut table = lab.table.clone();
    table.routes.push(oooi_routes::Route {
        port: lab.kube.port(),
        matches: RouteMatch::Sni("same-port.c1.example.com".into()),
        upstream: oooi_routes::Upstream::Address {
            host: "127.0.0.2".into(),
            port: lab.kube.port(),
        },
        owner: Some("clusters/c1".into()),
    });
    lab.envoy.push_table(&table).expect("push");
    assert_eq!(
        lab.who(lab.kube, Some("same-port.c1.example.com"), STRANGER)
            .await,
        "c1-same-port"
    );
    // A route to another port on the same listener still names it.
    assert_eq!(
        lab.who(lab.kube, Some("api.c1.example.com"), STRANGER)
            .await,
        "c1-kube-apiserver"
    );
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
async fn aliases_on_443_route_by_sni_and_worker_source() {
    let lab = Lab::pushed(1).await;
    for alias in oooi_routes::KUBERNETES_ALIASES {
        assert_eq!(
            lab.who(lab.https, Some(alias), WORKER_C1).await,
            "c1-kube-apiserver",
            "{alias}"
        );
        assert_eq!(
            lab.who(lab.https, Some(alias), WORKER_C2).await,
            "c2-kube-apiserver",
            "{alias}"
        );
    }
    assert_eq!(
        lab.envoy
            .stat("wasmcustom.oooi_sni_router_forward_source_alias")
            .unwrap_or(0),
        8
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
        lab.who(lab.https, Some("kubernetes"), STRANGER)
            .await
            .starts_with("refused"),
        "aliases on 443 from a source no cluster owns"
    );
    assert!(
        lab.who(lab.https, None, WORKER_C1)
            .await
            .starts_with("refused"),
        "no SNI on 443 is not an alias, even from a worker"
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
    // Point oauth.c1 at c2's oauth: it must never take effect.
    let mut other = oauth_c1_to_c2(&lab.table);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_push_reaches_every_worker_within_a_tick() {
    let lab = Lab::pushed(2).await;
    // Both workers compile generation 1 first.
    for _ in 0..10 {
        assert_eq!(
            tls_probe(lab.https, Some("oauth.c1.example.com"), None)
                .await
                .unwrap(),
            "c1-oauth"
        );
    }
    let mut next = oauth_c1_to_c2(&lab.table);
    next.generation = 2;
    lab.envoy.push_table(&next).unwrap();
    // The worker that took the push switches at once, the other on its next
    // 50 ms tick.
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let target = lab.https;
        tasks.push(tokio::spawn(async move {
            tls_probe(target, Some("oauth.c1.example.com"), None).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().expect("routed"), "c2-oauth");
    }
    assert!(
        lab.envoy
            .log_text()
            .matches("routing table generation 2 loaded")
            .count()
            >= 2,
        "both workers loaded generation 2:\n{}",
        lab.envoy.log_text()
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

// ---- Port 80: plain HTTP routed by Host --------------------------------

mod http80 {
    use std::net::{IpAddr, SocketAddr};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use oooi_routes::{Route, RouteMatch, RouteTable, Upstream};
    use oooi_tests::{Backend, Envoy, EnvoyOptions, free_port, tls_probe};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A plain-HTTP backend standing in for a hosted cluster's ingress: it
    /// answers every request on a connection (pipelined ones included) with
    /// `backend=<name> path=<path>` and counts the connections it accepted.
    pub struct HttpBackend {
        pub addr: SocketAddr,
        pub accepted: Arc<AtomicU64>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for HttpBackend {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    impl HttpBackend {
        pub async fn start(name: &str) -> HttpBackend {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let accepted = Arc::new(AtomicU64::new(0));
            let (name, count) = (name.to_owned(), accepted.clone());
            let task = tokio::spawn(async move {
                while let Ok((mut s, _)) = listener.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    let name = name.clone();
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 4096];
                        loop {
                            // Answer every complete head in the buffer, in order.
                            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                                buf.drain(..end + 4);
                                let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
                                let body = format!("backend={name} path={path}\n");
                                let resp = format!(
                                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                                    body.len()
                                );
                                if s.write_all(resp.as_bytes()).await.is_err() {
                                    return;
                                }
                            }
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                    });
                }
            });
            HttpBackend {
                addr,
                accepted,
                task,
            }
        }
    }

    /// Envoy with the port-80 listener (and a TLS listener beside it) on an
    /// address of its own, so tests can bind port 80 side by side.
    pub struct Http80 {
        pub envoy: Envoy,
        pub http: SocketAddr,
        pub https: SocketAddr,
        pub c1: HttpBackend,
        pub c2: HttpBackend,
        _tls: Backend,
    }

    fn listen_ip() -> IpAddr {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        IpAddr::from([127, 80, (pid % 251) as u8, (n % 250) as u8 + 1])
    }

    impl Http80 {
        pub async fn start() -> Http80 {
            let (c1, c2) = (
                HttpBackend::start("c1-ingress").await,
                HttpBackend::start("c2-ingress").await,
            );
            let lo: IpAddr = "127.0.0.1".parse().unwrap();
            let tls = Backend::start("c1-oauth", lo).await.unwrap();
            let ip = listen_ip();
            let tls_port = free_port(ip);
            let up = |a: SocketAddr| Upstream::Address {
                host: "127.0.0.1".into(),
                port: a.port(),
            };
            let route = |port, name: &str, to: SocketAddr| Route {
                port,
                matches: RouteMatch::Sni(name.into()),
                upstream: up(to),
                owner: None,
            };
            let table = RouteTable {
                generation: 1,
                routes: vec![
                    route(80, "*.apps.c1.example.com", c1.addr),
                    route(80, "*.apps.c2.example.com", c2.addr),
                    // The most specific name wins on port 80 as with SNI.
                    route(80, "special.apps.c1.example.com", c2.addr),
                    route(tls_port, "oauth.c1.example.com", tls.addr),
                    route(tls_port, "*.apps.c1.example.com", tls.addr),
                ],
            };
            table.validate().unwrap();
            let envoy =
                tokio::task::spawn_blocking(move || EnvoyOptions::new(ip, &[80, tls_port]).start())
                    .await
                    .unwrap()
                    .expect("envoy starts with a port-80 listener");
            envoy.push_table(&table).unwrap();
            Http80 {
                envoy,
                http: SocketAddr::new(ip, 80),
                https: SocketAddr::new(ip, tls_port),
                c1,
                c2,
                _tls: tls,
            }
        }

        pub fn stat(&self, name: &str) -> u64 {
            self.envoy
                .stat(&format!("wasmcustom.oooi_sni_router_{name}"))
                .unwrap_or(0)
        }
    }

    /// Sends `parts` with a pause between them, then reads until the peer
    /// closes or `responses` bodies arrived. Returns the body lines, or
    /// `refused` when the proxy closed without a response.
    pub async fn exchange(to: SocketAddr, parts: &[&[u8]], responses: usize) -> Vec<String> {
        let mut s = TcpStream::connect(to).await.unwrap();
        s.set_nodelay(true).unwrap();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            if s.write_all(p).await.is_err() {
                break;
            }
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut lines = Vec::new();
        while lines.len() < responses && Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            }
            lines = String::from_utf8_lossy(&got)
                .lines()
                .filter(|l| l.starts_with("backend="))
                .map(str::to_owned)
                .collect();
        }
        if lines.is_empty() {
            vec!["refused".into()]
        } else {
            lines
        }
    }

    pub fn get(host: &str, path: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: oooi-test\r\n\r\n").into_bytes()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn port_80_routes_each_clusters_apps_by_host() {
        let lab = Http80::start().await;
        let cases = [
            (
                "console-openshift-console.apps.c1.example.com",
                "c1-ingress",
            ),
            ("Console.APPS.c1.example.com:80", "c1-ingress"),
            ("a.b.apps.c2.example.com", "c2-ingress"),
            ("a.apps.c2.example.com.", "c2-ingress"),
            ("special.apps.c1.example.com", "c2-ingress"),
        ];
        for (host, want) in cases {
            let got = exchange(lab.http, &[&get(host, "/x")], 1).await;
            assert_eq!(got, [format!("backend={want} path=/x")], "{host}");
        }
        assert!(lab.stat("forward_wildcard_host") >= 4);
        assert!(lab.stat("forward_exact_host") >= 1);
        // The TLS listener of the same Envoy still routes by SNI.
        assert_eq!(
            tls_probe(lab.https, Some("oauth.c1.example.com"), None)
                .await
                .unwrap(),
            "c1-oauth"
        );
        assert_eq!(
            tls_probe(lab.https, Some("x.apps.c1.example.com"), None)
                .await
                .unwrap(),
            "c1-oauth"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_in_pieces_and_pipelined_requests_reach_one_backend() {
        let lab = Http80::start().await;
        let first = get("shop.apps.c2.example.com", "/1");
        let second = get("shop.apps.c2.example.com", "/2");
        let (a, b) = first.split_at(7);
        let (b, c) = b.split_at(20);
        let mut rest = c.to_vec();
        rest.extend_from_slice(&second);
        let got = exchange(lab.http, &[a, b, &rest], 2).await;
        assert_eq!(
            got,
            ["backend=c2-ingress path=/1", "backend=c2-ingress path=/2"]
        );
        assert_eq!(lab.c2.accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_missing_bad_or_oversized_hosts_are_refused_before_any_upstream() {
        let lab = Http80::start().await;
        let refused = vec!["refused".to_owned()];
        let no_host = b"GET / HTTP/1.1\r\nUser-Agent: t\r\n\r\n".to_vec();
        let http10 = b"GET / HTTP/1.0\r\n\r\n".to_vec();
        let two_hosts =
            b"GET / HTTP/1.1\r\nHost: a.apps.c1.example.com\r\nHost: a.apps.c2.example.com\r\n\r\n"
                .to_vec();
        let bad_host = get("a.apps.c1.example.com:http", "/");
        let mut oversized = b"GET / HTTP/1.1\r\nHost: a.apps.c1.example.com\r\nX-Pad: ".to_vec();
        oversized.resize(9000, b'p');
        oversized.extend_from_slice(b"\r\n\r\n");
        let tls_hello = [
            0x16u8, 0x03, 0x01, 0x00, 0x40, 0x01, 0x00, 0x00, 0x3c, 0x03, 0x03,
        ];
        let cases: [(&str, &[u8], &str); 8] = [
            (
                "unknown host",
                &get("evil.example.org", "/"),
                "refuse_unknown_host",
            ),
            (
                "other domain",
                &get("apps.c1.example.com", "/"),
                "refuse_unknown_host",
            ),
            ("no host", &no_host, "refuse_no_host"),
            ("HTTP/1.0 without host", &http10, "refuse_no_host"),
            ("two hosts", &two_hosts, "refuse_malformed_head"),
            ("bad host", &bad_host, "refuse_bad_host"),
            ("oversized head", &oversized, "refuse_oversized_head"),
            ("TLS on port 80", &tls_hello, "refuse_malformed_head"),
        ];
        for (what, bytes, counter) in cases {
            let before = lab.stat(counter);
            assert_eq!(exchange(lab.http, &[bytes], 1).await, refused, "{what}");
            assert!(lab.stat(counter) > before, "{what}: {counter} counts it");
        }
        // Half a head, then the client gives up: refused as incomplete.
        let before = lab.stat("refuse_incomplete_head");
        {
            let mut s = TcpStream::connect(lab.http).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: a.apps.c1")
                .await
                .unwrap();
            s.shutdown().await.unwrap();
            let mut buf = [0u8; 64];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("closed by the proxy")
                .unwrap_or(0);
            assert_eq!(n, 0);
        }
        assert!(lab.stat("refuse_incomplete_head") > before);
        // No refused connection ever reached a backend.
        use std::sync::atomic::Ordering::SeqCst;
        assert_eq!(
            lab.c1.accepted.load(SeqCst) + lab.c2.accepted.load(SeqCst),
            0
        );
        let log = lab.envoy.log_text();
        assert!(
            log.contains("refuse reason=unknown_host host=\"evil.example.org\""),
            "{log}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_that_never_completes_is_closed_after_the_timeout() {
        let lab = Http80::start().await;
        let started = Instant::now();
        let mut s = TcpStream::connect(lab.http).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: slow.apps.c1.example.com\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(15), s.read(&mut buf))
            .await
            .expect("the proxy closes a slow head")
            .unwrap_or(0);
        let waited = started.elapsed();
        assert_eq!(n, 0);
        let limit = Duration::from_millis(oooi_envoy::HTTP_HEAD_TIMEOUT_MS);
        assert!(
            waited >= limit,
            "closed after {waited:?}, before the timeout"
        );
        assert!(
            waited < limit + Duration::from_secs(3),
            "closed after {waited:?}"
        );
        assert_eq!(lab.stat("refuse_head_timeout"), 1);
        assert_eq!(lab.c1.accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}

// ---- Hostile clients of the TLS listeners and the table API -------------

mod hardening {
    use std::io::{Read, Write};
    use std::net::{IpAddr, SocketAddr};
    use std::time::{Duration, Instant};

    use oooi_routes::MAX_DOCUMENT_BYTES;
    use oooi_tests::fixture::{STRANGER, WORKER_C1};
    use oooi_tests::{Envoy, EnvoyOptions, PUSH_TOKEN, http_blocking};

    use super::{Lab, Probe, ip};

    /// Connects from `source`, sends `bytes` (if any) and waits up to
    /// `wait` for the proxy to close. Returns what came back and how long
    /// the connection lived; `None` if it was still open after `wait`.
    async fn send_raw(
        target: SocketAddr,
        source: IpAddr,
        bytes: &[u8],
        wait: Duration,
    ) -> Option<(Vec<u8>, Duration)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(source, 0)).unwrap();
        let mut s = sock.connect(target).await.unwrap();
        let start = Instant::now();
        if !bytes.is_empty() {
            s.write_all(bytes).await.unwrap();
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout_at((start + wait).into(), s.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) => return Some((got, start.elapsed())),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Ok(Err(_)) => return Some((got, start.elapsed())),
            }
        }
    }

    /// A TLS 1.2 ClientHello carrying `sni` as its server name, byte for
    /// byte: clients refuse to send names such as `a..b`, hostile ones do.
    pub fn client_hello(sni: &[u8]) -> Vec<u8> {
        let mut name = vec![0u8];
        name.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        name.extend_from_slice(sni);
        let mut list = (name.len() as u16).to_be_bytes().to_vec();
        list.extend_from_slice(&name);
        let mut ext = vec![0, 0];
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 4, 0xc0, 0x2f, 0x00, 0x9c]); // cipher suites
        body.extend_from_slice(&[1, 0]); // compression
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut record = vec![0x16, 3, 1];
        record.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        record.extend_from_slice(&hs);
        record
    }

    fn upstream_connections(lab: &Lab) -> u64 {
        lab.envoy
            .stat("cluster.oooi_dynamic_forward_proxy.upstream_cx_total")
            .unwrap_or(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_without_sni_is_forwarded_only_over_tls() {
        let lab = Lab::pushed(1).await;
        // TLS without SNI from the worker: its API.
        assert_eq!(
            lab.who(lab.kube, None, WORKER_C1).await,
            "c1-kube-apiserver"
        );
        let before = upstream_connections(&lab);
        let sslv2_hello: &[u8] = &[
            0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10, 0x07, 0x00, 0xc0,
            0x05, 0x00, 0x80, 0x03, 0x00, 0x80, 0x01, 0x00, 0x80, 0x06, 0x00, 0x40, 0x04, 0x00,
            0x80, 0x02, 0x00, 0x80, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
            0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00,
        ];
        let kube = lab.kube;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "random bytes",
                (0..200u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect(),
            ),
            (
                "plain HTTP",
                b"GET /version HTTP/1.1\r\nHost: kubernetes\r\n\r\n".to_vec(),
            ),
            ("SSLv2 hello", sslv2_hello.to_vec()),
        ];
        for (what, bytes) in cases {
            let out = send_raw(kube, ip(WORKER_C1), &bytes, Duration::from_secs(10)).await;
            let (got, _) = out.unwrap_or_else(|| panic!("{what}: still open after 10 s"));
            assert!(got.is_empty(), "{what}: {got:?}");
        }
        // A worker that sends nothing is closed after the ClientHello timeout.
        let (got, lived) = send_raw(kube, ip(WORKER_C1), b"", Duration::from_secs(15))
            .await
            .expect("closed by the proxy");
        assert!(got.is_empty());
        let timeout = Duration::from_millis(oooi_envoy::CLIENT_HELLO_TIMEOUT_MS);
        assert!(
            lived >= timeout - Duration::from_millis(500)
                && lived < timeout + Duration::from_secs(3),
            "closed after {lived:?}"
        );
        assert_eq!(upstream_connections(&lab), before, "nothing was forwarded");
        assert_eq!(
            lab.envoy.stat("wasmcustom.oooi_sni_router_refuse_not_tls"),
            Some(4),
            "{:?}\n{}",
            lab.envoy.stats("listener"),
            lab.envoy.log_text()
        );
        let log = lab.envoy.log_text();
        assert!(
            log.contains(&format!(
                "refuse reason=not_tls source={WORKER_C1} port={}",
                kube.port()
            )),
            "{log}"
        );
        // TLS from the worker still works afterwards.
        assert_eq!(
            lab.who(lab.kube, None, WORKER_C1).await,
            "c1-kube-apiserver"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn invalid_sni_is_refused_never_matched_by_a_wildcard() {
        let lab = Lab::pushed(1).await;
        let https = lab.https;
        let before = upstream_connections(&lab);
        let long_label = format!("{}.apps.c1.example.com", "a".repeat(64));
        let snis: Vec<Vec<u8>> = vec![
            b"a..apps.c1.example.com".to_vec(),
            b"x y.apps.c1.example.com".to_vec(),
            b"*.apps.c1.example.com".to_vec(),
            long_label.into_bytes(),
        ];
        let n = snis.len() as u64;
        for sni in snis {
            let shown = String::from_utf8_lossy(&sni).into_owned();
            let out = send_raw(
                https,
                ip(STRANGER),
                &client_hello(&sni),
                Duration::from_secs(10),
            )
            .await;
            let (got, _) = out.unwrap_or_else(|| panic!("{shown}: still open"));
            assert!(got.is_empty(), "{shown}: {got:?}");
        }
        assert_eq!(upstream_connections(&lab), before, "nothing was forwarded");
        assert_eq!(
            lab.envoy
                .stat("wasmcustom.oooi_sni_router_refuse_invalid_sni"),
            Some(n)
        );
        // The hand-made ClientHello reaches the backend with a valid name.
        // (The backend ends the handshake it cannot complete; either way the
        // proxy forwarded it.)
        let _ = send_raw(
            https,
            ip(STRANGER),
            &client_hello(b"console.apps.c1.example.com"),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            upstream_connections(&lab),
            before + 1,
            "a valid name is forwarded"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_tokens_are_logged_and_counted_and_the_scheme_ignores_case() {
        let lab = super::lab(1).await;
        let body = lab.table.to_json();
        let (status, text) = http_blocking(
            lab.envoy.api,
            "PUT",
            "/v1/routes",
            &[("authorization", "Bearer wrong-token-wrong-token")],
            &body,
        )
        .unwrap();
        assert_eq!(status, 403, "{text}");
        let lower = format!("bearer {PUSH_TOKEN}");
        let (status, text) = http_blocking(
            lab.envoy.api,
            "PUT",
            "/v1/routes",
            &[("authorization", &lower)],
            &body,
        )
        .unwrap();
        assert_eq!(status, 200, "{text}");
        assert_eq!(lab.envoy.push(b"{not json").unwrap().0, 400);
        let stat = |name: &str| {
            lab.envoy
                .stat(&format!("wasmcustom.oooi_sni_router_{name}"))
                .unwrap_or(0)
        };
        assert_eq!(stat("push_unauthorized"), 1);
        assert_eq!(stat("push_rejected"), 1);
        assert_eq!(stat("push_accepted"), 1);
        let log = lab.envoy.log_text();
        assert!(
            log.contains("push unauthorized reason=bad_token source=127.0.0.1"),
            "{log}"
        );
    }

    /// An oversized push, answered while the client may still be sending:
    /// the client writes and reads at once, as a careful client does.
    /// A connection the listener turns away at once (its connection budget
    /// is full of earlier connections Envoy is still closing) is tried
    /// again; the answer to the request itself is never retried.
    fn oversized_push(
        api: SocketAddr,
        auth: Option<&str>,
        chunked: bool,
        size: usize,
    ) -> (u16, String, String) {
        for _ in 0..100 {
            if let Some(answer) = oversized_push_once(api, auth, chunked, size) {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the table API turned every connection away for 10 s");
    }

    /// One try of [`oversized_push`]; `None` when the connection was closed
    /// before a byte came back.
    fn oversized_push_once(
        api: SocketAddr,
        auth: Option<&str>,
        chunked: bool,
        size: usize,
    ) -> Option<(u16, String, String)> {
        let mut s = std::net::TcpStream::connect(api).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut head = "PUT /v1/routes HTTP/1.1\r\nhost: oooi\r\n".to_string();
        if let Some(a) = auth {
            head.push_str(&format!("authorization: {a}\r\n"));
        }
        if chunked {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
        } else {
            head.push_str(&format!("content-length: {size}\r\n\r\n"));
        }
        let mut writer = s.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let _ = writer.write_all(head.as_bytes());
            let piece = vec![b' '; 64 * 1024];
            let mut left = size;
            while left > 0 {
                let n = left.min(piece.len());
                let ok = if chunked {
                    writer
                        .write_all(format!("{n:x}\r\n").as_bytes())
                        .and_then(|_| writer.write_all(&piece[..n]))
                        .and_then(|_| writer.write_all(b"\r\n"))
                } else {
                    writer.write_all(&piece[..n])
                };
                if ok.is_err() {
                    return;
                }
                left -= n;
            }
            if chunked {
                let _ = writer.write_all(b"0\r\n\r\n");
            }
        });
        let mut out = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) if out.is_empty() => break,
                Err(e) => panic!("read failed after {} bytes: {e}", out.len()),
            }
            if let Some(pos) = out.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&out[..pos]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                let want = len.map(|l| pos + 4 + l);
                if want.is_some_and(|w| out.len() >= w) {
                    break;
                }
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Both);
        let _ = sender.join();
        if out.is_empty() {
            return None;
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let content_type = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-type:")
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_default();
        Some((status, content_type, body.to_string()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_error_of_an_oversized_push_is_json() {
        let lab = super::lab(1).await;
        let api = lab.envoy.api;
        let good = format!("Bearer {PUSH_TOKEN}");
        let rounds = 5;
        tokio::task::spawn_blocking(move || {
            for round in 0..rounds {
                for size in [MAX_DOCUMENT_BYTES + 1, MAX_DOCUMENT_BYTES + 1024 * 1024] {
                    for chunked in [false, true] {
                        for (auth, status) in [
                            (Some(good.as_str()), 413),
                            (Some("Bearer wrong-token-wrong-token"), 403),
                            (None, 401),
                        ] {
                            let (got, content_type, body) =
                                oversized_push(api, auth, chunked, size);
                            let case = format!(
                                "round {round}, {size} bytes, chunked {chunked}, auth {auth:?}"
                            );
                            assert_eq!(got, status, "{case}: {body}");
                            assert_eq!(content_type, "application/json", "{case}: {body}");
                            let v: serde_json::Value = serde_json::from_str(&body)
                                .unwrap_or_else(|e| panic!("{case}: {e}: {body:?}"));
                            assert!(v["error"].is_string(), "{case}: {v}");
                        }
                    }
                }
            }
        })
        .await
        .unwrap();
        // Nothing was loaded.
        let (status, body) = http_blocking(api, "GET", "/v1/routes", &[], b"").unwrap();
        assert_eq!(status, 200);
        assert!(body.contains(r#""generation":0"#), "{body}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_table_api_refuses_the_vlan() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let port = oooi_tests::free_port(lo);
        // 127.0.0.64/26 stands for the VLAN; the controller pushes from 127.0.0.1.
        let envoy = tokio::task::spawn_blocking(move || {
            EnvoyOptions {
                vlan: Some(oooi_envoy::VlanLeg {
                    address: "127.0.0.70".parse().unwrap(),
                    prefix_len: 26,
                }),
                ..EnvoyOptions::new(lo, &[port])
            }
            .start()
        })
        .await
        .unwrap()
        .expect("envoy starts");
        assert_guarded_from_the_vlan(&envoy, envoy.api, "/v1/routes", "table_api_vlan_guard").await;
        // The metrics listener is guarded the same way.
        let metrics = envoy
            .config
            .metrics
            .expect("the test Envoy has a metrics listener");
        assert_guarded_from_the_vlan(&envoy, metrics, "/metrics", "metrics_vlan_guard").await;
    }

    /// `GET path` on `listener` from a VLAN address (127.0.0.80) gets no
    /// answer, from the pod network it is served, and the guard `guard`
    /// counts the one denial.
    async fn assert_guarded_from_the_vlan(
        envoy: &Envoy,
        listener: SocketAddr,
        path: &str,
        guard: &str,
    ) {
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        let from_vlan = send_raw(
            listener,
            ip("127.0.0.80"),
            request.as_bytes(),
            Duration::from_secs(10),
        )
        .await
        .expect("closed");
        assert!(
            from_vlan.0.is_empty(),
            "no answer to the VLAN on {path}: {:?}",
            String::from_utf8_lossy(&from_vlan.0)
        );
        let (status, _) = http_blocking(listener, "GET", path, &[], b"").unwrap();
        assert_eq!(status, 200, "the pod network is served {path}");
        assert_eq!(envoy.stat(&format!("{guard}.rbac.denied")), Some(1));
    }
}

/// What Prometheus scrapes from the proxy pod: the filter's counters (under
/// the names the dashboard and alerts use) and nothing else of the admin
/// interface.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_serves_prometheus_stats_and_nothing_else_of_the_admin() {
    let mut lab = Lab::pushed(1).await;
    assert_eq!(
        lab.who(lab.kube, Some("api.c1.example.com"), STRANGER)
            .await,
        "c1-kube-apiserver"
    );
    assert!(
        lab.who(lab.https, Some("nobody.example.com"), STRANGER)
            .await
            .starts_with("refused")
    );
    let metrics = lab.envoy.config.metrics.expect("a metrics listener");
    let (status, body) = http_blocking(metrics, "GET", "/metrics", &[], b"").unwrap();
    assert_eq!(status, 200);
    let value = |name: &str| -> Option<f64> {
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| l.split([' ', '{']).next() == Some(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    assert_eq!(
        value("oooi_sni_router_forward_exact_sni"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value("oooi_sni_router_refuse_unknown_sni"),
        Some(1.0),
        "{body}"
    );
    // Envoy's own stats come along (connections per listener).
    assert!(
        body.contains("envoy_listener_downstream_cx_total"),
        "{body}"
    );
    for (method, path) in [
        ("GET", "/config_dump"),
        ("GET", "/stats/prometheus"),
        ("GET", "/stats"),
        ("POST", "/quitquitquit"),
        ("POST", "/metrics"),
        ("GET", "/metrics/../config_dump"),
    ] {
        let (status, body) = http_blocking(metrics, method, path, &[], b"").unwrap();
        assert_eq!(status, 404, "{method} {path}: {body}");
    }
    assert!(lab.envoy.running(), "Envoy still runs");
}

// ---- The table API under hostile clients: bounded by Envoy's own settings --

mod table_api_bounds {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use oooi_envoy::{
        API_IDLE_TIMEOUT_MS, API_REQUEST_HEADERS_TIMEOUT_MS, PROXY_MEMORY_LIMIT_BYTES,
    };
    use oooi_routes::MAX_DOCUMENT_BYTES;
    use oooi_tests::fixture::{STRANGER, WORKER_C1};
    use oooi_tests::{PUSH_TOKEN, http_blocking};

    use super::hardening::client_hello;
    use super::{Lab, Probe, ip};

    /// Reads what the server sends until it closes (or `wait` passes):
    /// (bytes, time to the first byte, time to the close; `None` if still open).
    fn read_until_close(
        s: &mut TcpStream,
        start: Instant,
        wait: Duration,
    ) -> (Vec<u8>, Option<Duration>, Option<Duration>) {
        let mut out = Vec::new();
        let mut first = None;
        let mut buf = [0u8; 4096];
        loop {
            let left = wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                return (out, first, None);
            }
            s.set_read_timeout(Some(left)).unwrap();
            match s.read(&mut buf) {
                Ok(0) => return (out, first, Some(start.elapsed())),
                Ok(n) => {
                    first.get_or_insert(start.elapsed());
                    out.extend_from_slice(&buf[..n]);
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return (out, first, None);
                }
                // A reset after the answer is a close too.
                Err(_) => return (out, first, Some(start.elapsed())),
            }
        }
    }

    fn status_and_json(answer: &[u8]) -> (u16, String, serde_json::Value) {
        let text = String::from_utf8_lossy(answer);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let content_type = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-type:")
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_default();
        let json = serde_json::from_str(body.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
        (status, content_type, json)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unauthenticated_push_is_answered_before_its_body_and_closed() {
        let lab = super::lab(1).await;
        let api = lab.envoy.api;
        tokio::task::spawn_blocking(move || {
            for (auth, status) in [
                (None, 401),
                (Some("Basic b29vaTpvb29p"), 401),
                (Some("Bearer wrong-token-wrong-token"), 403),
            ] {
                let mut s = TcpStream::connect(api).unwrap();
                let start = Instant::now();
                let mut head = format!(
                    "PUT /v1/routes HTTP/1.1\r\nhost: oooi\r\ncontent-length: {}\r\n",
                    MAX_DOCUMENT_BYTES
                );
                if let Some(a) = auth {
                    head.push_str(&format!("authorization: {a}\r\n"));
                }
                head.push_str("\r\n");
                // The head only: not one byte of the announced 8 MiB body.
                s.write_all(head.as_bytes()).unwrap();
                let (answer, first, closed) =
                    read_until_close(&mut s, start, Duration::from_secs(10));
                let (got, content_type, json) = status_and_json(&answer);
                assert_eq!(got, status, "{auth:?}");
                assert_eq!(content_type, "application/json");
                assert!(json["error"].is_string(), "{json}");
                let first = first.expect("answered");
                assert!(
                    first < Duration::from_secs(1),
                    "{auth:?}: answered after {first:?}, without a body byte"
                );
                let closed = closed.unwrap_or_else(|| panic!("{auth:?}: still open after 10 s"));
                assert!(
                    closed < Duration::from_secs(3),
                    "{auth:?}: closed after {closed:?}"
                );
            }
        })
        .await
        .unwrap();
        assert_eq!(
            lab.envoy
                .stat("wasmcustom.oooi_sni_router_push_unauthorized"),
            Some(3)
        );
        // Nothing was loaded, and the controller's push still works.
        lab.envoy.push_table(&lab.table).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slowloris_heads_and_silent_connections_are_closed_by_envoy_timeouts() {
        let lab = super::lab(1).await;
        let api = lab.envoy.api;
        let stop = Arc::new(AtomicBool::new(false));
        let header_timeout = Duration::from_millis(API_REQUEST_HEADERS_TIMEOUT_MS);
        let idle_timeout = Duration::from_millis(API_IDLE_TIMEOUT_MS);
        // A few of each: the timeouts are what this checks (the 2,000-head
        // flood is `pushes_and_readiness_hold_under_big_bodies_and_slowloris`).
        let drippers = 8;
        let handles: Vec<_> = (0..drippers + 2)
            .map(|i| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(api).unwrap();
                    let start = Instant::now();
                    let silent = i >= drippers;
                    if !silent {
                        // One byte of a never-ending head every 200 ms.
                        let head = b"GET /ready HTTP/1.1\r\nhost: oooi\r\nx-pad: ";
                        let mut sent = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let byte = head.get(sent).copied().unwrap_or(b'a');
                            if s.write_all(&[byte]).is_err() {
                                break;
                            }
                            sent += 1;
                            s.set_read_timeout(Some(Duration::from_millis(200)))
                                .unwrap();
                            let mut buf = [0u8; 1024];
                            match s.read(&mut buf) {
                                Ok(0) => return (silent, Vec::new(), Some(start.elapsed())),
                                Ok(n) => {
                                    let mut got = buf[..n].to_vec();
                                    let (rest, _, closed) =
                                        read_until_close(&mut s, start, Duration::from_secs(30));
                                    got.extend(rest);
                                    return (silent, got, closed);
                                }
                                Err(_) => {}
                            }
                            if start.elapsed() > Duration::from_secs(30) {
                                return (silent, Vec::new(), None);
                            }
                        }
                        (silent, Vec::new(), None)
                    } else {
                        let (got, _, closed) =
                            read_until_close(&mut s, start, Duration::from_secs(40));
                        (silent, got, closed)
                    }
                })
            })
            .collect();
        // While they hold their connections, the controller's push goes through.
        let table = lab.table.clone();
        let pushed = tokio::task::spawn_blocking({
            let envoy_api = api;
            move || {
                std::thread::sleep(Duration::from_secs(1));
                let auth = format!("Bearer {PUSH_TOKEN}");
                let t = Instant::now();
                let r = http_blocking(
                    envoy_api,
                    "PUT",
                    "/v1/routes",
                    &[("authorization", &auth)],
                    &table.to_json(),
                );
                (r, t.elapsed())
            }
        })
        .await
        .unwrap();
        let (status, body) = pushed.0.expect("push answered");
        assert_eq!(status, 200, "{body}");
        assert!(
            pushed.1 < Duration::from_secs(2),
            "push took {:?}",
            pushed.1
        );
        let mut results = Vec::new();
        for h in handles {
            results.push(h.join().unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        for (silent, got, closed) in results {
            let closed = closed.unwrap_or_else(|| panic!("silent={silent}: never closed"));
            if silent {
                assert!(
                    closed >= idle_timeout - Duration::from_millis(500)
                        && closed < idle_timeout + Duration::from_secs(3),
                    "a silent connection closed after {closed:?}"
                );
                assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
            } else {
                assert!(
                    closed < header_timeout + Duration::from_secs(3),
                    "a slowloris head closed after {closed:?}"
                );
                let (status, content_type, json) = status_and_json(&got);
                assert_eq!(status, 408, "{json}");
                assert_eq!(content_type, "application/json");
                assert_eq!(json["details"], "request_header_timeout", "{json}");
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn h2c_gets_a_json_error_over_http1_and_never_pushes() {
        let lab = super::lab(1).await;
        let api = lab.envoy.api;
        // Prior knowledge: the HTTP/2 preface and a SETTINGS frame.
        let (answer, _, closed) = tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(api).unwrap();
            let start = Instant::now();
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                .unwrap();
            read_until_close(&mut s, start, Duration::from_secs(10))
        })
        .await
        .unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 400 "), "{answer:?}");
        let (_, content_type, json) = status_and_json(&answer);
        assert_eq!(content_type, "application/json");
        assert!(json["error"].is_string(), "{json}");
        assert!(closed.is_some_and(|c| c < Duration::from_secs(3)));

        // curl, the real clients: an oversized push over h2c (upgrade and
        // prior knowledge) with the right token.
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; MAX_DOCUMENT_BYTES + 1]).unwrap();
        let url = format!("http://{api}/v1/routes");
        let auth = format!("authorization: Bearer {PUSH_TOKEN}");
        let curl = |mode: &str| {
            std::process::Command::new("curl")
                .args(["-sS", "-m", "20", mode, "-X", "PUT", "-H", &auth])
                .args(["-H", "content-type: application/json", "--data-binary"])
                .arg(format!("@{}", big.display()))
                .args(["-w", "\n%{http_code} %{http_version} %{content_type}", &url])
                .output()
                .expect("curl runs")
        };
        let upgrade = curl("--http2");
        let out = String::from_utf8_lossy(&upgrade.stdout).into_owned();
        let (body, meta) = out.rsplit_once('\n').unwrap();
        assert_eq!(meta, "413 1.1 application/json", "{out}");
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(
            json["error"].as_str().unwrap().contains("over the limit"),
            "{json}"
        );
        let prior = curl("--http2-prior-knowledge");
        assert!(
            !prior.status.success(),
            "an HTTP/2-only client is not served: {}",
            String::from_utf8_lossy(&prior.stdout)
        );
        let (status, body) = http_blocking(api, "GET", "/v1/routes", &[], b"").unwrap();
        assert_eq!(status, 200);
        assert!(body.contains(r#""generation":0"#), "nothing loaded: {body}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_name_that_is_not_utf8_is_refused_as_invalid_even_from_a_worker_on_6443() {
        let lab = Lab::pushed(1).await;
        let upstream = || {
            lab.envoy
                .stat("cluster.oooi_dynamic_forward_proxy.upstream_cx_total")
                .unwrap_or(0)
                + lab
                    .envoy
                    .stats("upstream_cx_total")
                    .iter()
                    .filter(|(k, _)| k.starts_with("cluster.c"))
                    .map(|(_, v)| v)
                    .sum::<u64>()
        };
        let before = upstream();
        let sni = b"\xff.apps.c1.example.com";
        // A worker on 6443 (which has a no-SNI route by its source) and a
        // stranger on 443.
        for (target, source) in [(lab.kube, WORKER_C1), (lab.https, STRANGER)] {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.bind(SocketAddr::new(ip(source), 0)).unwrap();
            let mut s = sock.connect(target).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(&client_hello(sni)).await.unwrap();
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .expect("closed by the proxy")
                .unwrap_or(0);
            assert_eq!(n, 0, "{source}: nothing comes back");
        }
        assert_eq!(upstream(), before, "nothing was forwarded");
        assert_eq!(
            lab.envoy
                .stat("wasmcustom.oooi_sni_router_refuse_invalid_sni"),
            Some(2)
        );
        let log = lab.envoy.log_text();
        for (source, port) in [(WORKER_C1, lab.kube.port()), (STRANGER, lab.https.port())] {
            let line = format!(
                r#"refuse reason=invalid_sni sni="\xff.apps.c1.example.com" source={source} port={port}"#
            );
            assert!(log.contains(&line), "{line}\n{log}");
        }
        // The worker without SNI is still routed by its source.
        assert_eq!(
            lab.who(lab.kube, None, WORKER_C1).await,
            "c1-kube-apiserver"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_behind_the_announced_table_is_not_ready_until_it_catches_up() {
        let lab = Lab::pushed(1).await;
        let api = lab.envoy.api;
        let auth = format!("Bearer {PUSH_TOKEN}");
        let mut next = lab.table.clone();
        next.generation = 2;
        let announce = format!(r#"{{"generation":2,"digest":"{}"}}"#, next.digest());
        let (status, body) = http_blocking(
            api,
            "PUT",
            "/v1/routes/expected",
            &[("authorization", &auth)],
            announce.as_bytes(),
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
        let (status, body) = http_blocking(api, "GET", "/ready", &[], b"").unwrap();
        assert_eq!(status, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["reason"], "behind", "{v}");
        assert_eq!(v["generation"], 1);
        assert_eq!(v["expected"]["generation"], 2);
        // It keeps routing by the table it holds meanwhile.
        assert_eq!(
            lab.who(lab.kube, Some("api.c1.example.com"), STRANGER)
                .await,
            "c1-kube-apiserver"
        );
        lab.envoy.push_table(&next).unwrap();
        let (status, body) = http_blocking(api, "GET", "/ready", &[], b"").unwrap();
        assert_eq!(status, 200, "{body}");
        // Without the token the announcement is refused from its headers.
        let (status, _) = http_blocking(
            api,
            "PUT",
            "/v1/routes/expected",
            &[],
            br#"{"generation":9}"#,
        )
        .unwrap();
        assert_eq!(status, 401);
        assert_eq!(
            http_blocking(api, "GET", "/ready", &[], b"").unwrap().0,
            200
        );
    }

    /// Unauthenticated 8 MiB bodies, slowloris heads and h2c, first far
    /// over the API's connection budget, then within it: Envoy's memory
    /// stays under the proxy's limit, the routing listeners keep routing,
    /// and the controller's pushes keep landing while the abuse stays
    /// within the budget.
    /// What the controller and the readiness checks saw during one abuse
    /// phase.
    #[derive(Debug, Default)]
    struct Served {
        pushes: usize,
        pushes_ok: usize,
        pushes_under_2s: usize,
        slowest_push: Duration,
        ready: usize,
        ready_ok: usize,
        slowest_ready: Duration,
    }

    /// 20 pushes from the controller (one every 300 ms, each a newer
    /// generation from `first`) and, beside them, `GET /ready` on the
    /// readiness listener every 100 ms.
    async fn serve_the_controller(lab: &Lab, first: u64) -> Served {
        let api = lab.envoy.api;
        let ready = lab
            .envoy
            .config
            .ready
            .expect("the test Envoy has a readiness listener");
        let table = lab.table.clone();
        let done = Arc::new(AtomicBool::new(false));
        let checks = tokio::task::spawn_blocking({
            let done = Arc::clone(&done);
            move || {
                let (mut n, mut ok, mut slowest) = (0, 0, Duration::ZERO);
                while !done.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let r = http_blocking(ready, "GET", "/ready", &[], b"");
                    let took = t.elapsed();
                    n += 1;
                    if matches!(r, Ok((200, _))) && took < Duration::from_secs(2) {
                        ok += 1;
                    }
                    slowest = slowest.max(took);
                    std::thread::sleep(Duration::from_millis(100));
                }
                (n, ok, slowest)
            }
        });
        let pushes = tokio::task::spawn_blocking(move || {
            let auth = format!("Bearer {PUSH_TOKEN}");
            let mut served = Served::default();
            for generation in first..first + 20 {
                let mut t = table.clone();
                t.generation = generation;
                let start = Instant::now();
                let r = http_blocking(
                    api,
                    "PUT",
                    "/v1/routes",
                    &[("authorization", &auth)],
                    &t.to_json(),
                );
                let took = start.elapsed();
                served.pushes += 1;
                match r {
                    Ok((200, _)) => {
                        served.pushes_ok += 1;
                        if took < Duration::from_secs(2) {
                            served.pushes_under_2s += 1;
                        }
                    }
                    other => println!("push of generation {generation}: {other:?} after {took:?}"),
                }
                served.slowest_push = served.slowest_push.max(took);
                std::thread::sleep(Duration::from_millis(300));
            }
            served
        })
        .await
        .unwrap();
        done.store(true, Ordering::Relaxed);
        let (ready, ready_ok, slowest_ready) = checks.await.unwrap();
        Served {
            ready,
            ready_ok,
            slowest_ready,
            ..pushes
        }
    }

    /// Samples Envoy's RSS every 50 ms into `peak` until `stop`.
    fn rss_sampler(
        pid: u32,
        peak: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    && let Some(kib) = s
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().strip_suffix("kB"))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                {
                    peak.fetch_max(kib * 1024, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    }

    /// An unauthenticated 8 MiB push, looped until `stop`.
    async fn big_bodies(api: SocketAddr, stop: Arc<AtomicBool>) {
        use tokio::io::AsyncWriteExt;
        let head = format!(
            "PUT /v1/routes HTTP/1.1\r\nhost: oooi\r\ncontent-length: {MAX_DOCUMENT_BYTES}\r\n\r\n"
        );
        let chunk = vec![b' '; 64 * 1024];
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut s) = tokio::net::TcpStream::connect(api).await
                && s.write_all(head.as_bytes()).await.is_ok()
            {
                for _ in 0..MAX_DOCUMENT_BYTES / chunk.len() {
                    if stop.load(Ordering::Relaxed) || s.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A slowloris client: a push head that never ends (a byte a second),
    /// reopened whenever Envoy closes it, until `stop`.
    async fn slowloris(api: SocketAddr, stop: Arc<AtomicBool>) {
        use tokio::io::AsyncWriteExt;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(mut s) = tokio::net::TcpStream::connect(api).await
                && s.write_all(b"PUT /v1/routes HTTP/1.1\r\nhost: oooi\r\nx-pad: ")
                    .await
                    .is_ok()
            {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if s.write_all(b"a").await.is_err() {
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The table API under the abuse anything its port admits can send:
    /// 70 parallel unauthenticated 8 MiB bodies, then 2,000 slowloris
    /// connections. Throughout, the controller's pushes land, readiness
    /// (on its own listener) answers, routing goes on, and Envoy stays
    /// under the proxy container's memory limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pushes_and_readiness_hold_under_big_bodies_and_slowloris() {
        let mut lab = Lab::pushed(2).await;
        let api = lab.envoy.api;
        let baseline = lab.envoy.rss_bytes().expect("Envoy runs");
        let peak = Arc::new(AtomicU64::new(baseline));
        let stop_sampler = Arc::new(AtomicBool::new(false));
        let sampler = rss_sampler(
            lab.envoy.pid(),
            Arc::clone(&peak),
            Arc::clone(&stop_sampler),
        );
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);

        // Phase 1: 70 parallel unauthenticated 8 MiB bodies.
        let stop = Arc::new(AtomicBool::new(false));
        let bodies: Vec<_> = (0..70)
            .map(|_| tokio::spawn(big_bodies(api, Arc::clone(&stop))))
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let phase1 = serve_the_controller(&lab, 2).await;
        let routed = lab
            .who(lab.kube, Some("api.c1.example.com"), STRANGER)
            .await;
        stop.store(true, Ordering::Relaxed);
        for b in bodies {
            b.await.unwrap();
        }
        let peak1 = peak.load(Ordering::Relaxed);
        let refused = lab
            .envoy
            .stat("wasmcustom.oooi_sni_router_push_unauthorized")
            .unwrap_or(0);
        println!(
            "70 x 8 MiB unauthenticated bodies: {}/{} pushes 200 ({} under 2 s, slowest {:?}); \
             {}/{} GET /ready 200 under 2 s (slowest {:?}); {refused} bodies refused from their head; \
             RSS {:.0} -> peak {:.0} MiB",
            phase1.pushes_ok,
            phase1.pushes,
            phase1.pushes_under_2s,
            phase1.slowest_push,
            phase1.ready_ok,
            phase1.ready,
            phase1.slowest_ready,
            mib(baseline),
            mib(peak1),
        );
        assert_eq!(routed, "c1-kube-apiserver", "routing goes on");
        assert!(refused > 70, "the bodies were sent and refused: {refused}");

        // Phase 2: 2,000 slowloris connections held open.
        let stop = Arc::new(AtomicBool::new(false));
        let heads: Vec<_> = (0..2000)
            .map(|_| tokio::spawn(slowloris(api, Arc::clone(&stop))))
            .collect();
        // Let them all connect.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let open = lab
            .envoy
            .stat("http.table_api.downstream_cx_active")
            .unwrap_or(0);
        let phase2 = serve_the_controller(&lab, 22).await;
        stop.store(true, Ordering::Relaxed);
        for h in heads {
            h.await.unwrap();
        }
        stop_sampler.store(true, Ordering::Relaxed);
        sampler.join().unwrap();
        let peak = peak.load(Ordering::Relaxed);
        println!(
            "2,000 slowloris connections ({open} open at Envoy): {}/{} pushes 200 ({} under 2 s, \
             slowest {:?}); {}/{} GET /ready 200 under 2 s (slowest {:?}); RSS peak {:.0} MiB \
             overall (limit {:.0} MiB)",
            phase2.pushes_ok,
            phase2.pushes,
            phase2.pushes_under_2s,
            phase2.slowest_push,
            phase2.ready_ok,
            phase2.ready,
            phase2.slowest_ready,
            mib(peak),
            mib(PROXY_MEMORY_LIMIT_BYTES),
        );
        assert!(open >= 1000, "the slowloris connections were held: {open}");
        for (phase, served) in [("bodies", &phase1), ("slowloris", &phase2)] {
            assert!(served.pushes_ok >= 19, "{phase}: {served:?}");
            // Generous: the machine is shared; the figures above are the measure.
            assert!(
                served.slowest_push < Duration::from_secs(10),
                "{phase}: {served:?}"
            );
            assert!(served.ready > 0, "{phase}: {served:?}");
            assert!(
                served.ready_ok * 10 >= served.ready * 9,
                "{phase}: readiness must keep answering: {served:?}"
            );
        }
        assert!(
            peak < PROXY_MEMORY_LIMIT_BYTES,
            "Envoy reached {:.0} MiB",
            mib(peak)
        );
        assert!(lab.envoy.running());
        let (status, body) = http_blocking(api, "GET", "/v1/routes", &[], b"").unwrap();
        assert_eq!(status, 200);
        assert!(body.contains(r#""generation":41"#), "{body}");
    }
}
