//! The pod subresources the mock serves: `log` and `proxy`.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use oooi_kube_mock::MockApi;
use serde_json::json;

fn pod(mock: &MockApi) {
    mock.insert(
        "/api/v1/namespaces/ns/pods/p",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
               "spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
    );
}

#[tokio::test]
async fn pod_logs_answer_per_container_current_and_previous() {
    let mock = MockApi::start();
    pod(&mock);
    mock.set_pod_log("ns", "p", "a", false, "a now\n");
    mock.set_pod_log("ns", "p", "a", true, "a before\n");
    let pods: Api<Pod> = Api::namespaced(mock.client.clone(), "ns");
    let lp = |c: &str, previous: bool| LogParams {
        container: Some(c.to_string()),
        previous,
        ..LogParams::default()
    };
    assert_eq!(pods.logs("p", &lp("a", false)).await.unwrap(), "a now\n");
    assert_eq!(pods.logs("p", &lp("a", true)).await.unwrap(), "a before\n");
    let limited = LogParams {
        limit_bytes: Some(3),
        ..lp("a", false)
    };
    assert_eq!(pods.logs("p", &limited).await.unwrap(), "a n");
    // A container with no log yet: empty; no previous instance: 400.
    assert_eq!(pods.logs("p", &lp("b", false)).await.unwrap(), "");
    let err = pods.logs("p", &lp("b", true)).await.unwrap_err();
    assert!(
        err.to_string().contains("previous terminated container"),
        "{err}"
    );
    let err = pods.logs("p", &lp("c", false)).await.unwrap_err();
    assert!(err.to_string().contains("not valid for pod p"), "{err}");
    let err = pods.logs("gone", &lp("a", false)).await.unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    // Two containers and none named: the API server asks for one.
    let err = pods.logs("p", &LogParams::default()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("a container name must be specified"),
        "{err}"
    );
}

#[tokio::test]
async fn pod_proxy_forwards_to_the_registered_endpoint_over_http() {
    let mock = MockApi::start();
    pod(&mock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route(
            "/v1/routes",
            axum::routing::get(|| async { "{\"generation\":7}" }),
        )
        .route(
            "/ready",
            axum::routing::get(|| async {
                (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not yet")
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    mock.set_pod_endpoint("ns", "p", 9445, target);

    // Over the mock's HTTP server, as a separate process would reach it.
    let api = mock.serve_http().await;
    let get = |path: String| async move {
        let stream = tokio::net::TcpStream::connect(api).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let response = send
            .send_request(
                http::Request::get(path)
                    .header("host", "mock")
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        let code = response.status().as_u16();
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    };
    assert_eq!(
        get("/api/v1/namespaces/ns/pods/p:9445/proxy/v1/routes".into()).await,
        (200, "{\"generation\":7}".to_string())
    );
    assert_eq!(
        get("/api/v1/namespaces/ns/pods/p:9445/proxy/ready".into()).await,
        (503, "not yet".to_string())
    );
    // No endpoint on that port: 503 as from a pod that does not answer.
    let (code, body) = get("/api/v1/namespaces/ns/pods/p:9102/proxy/metrics".into()).await;
    assert_eq!(code, 503);
    assert!(body.contains("connection refused"), "{body}");
    // No such pod: 404.
    let (code, _) = get("/api/v1/namespaces/ns/pods/q:9445/proxy/ready".into()).await;
    assert_eq!(code, 404);
}
