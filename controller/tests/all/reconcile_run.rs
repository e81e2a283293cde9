//! The real `oooi-controller run` process, wired end to end against the
//! mocked API served over HTTP (list and watch included) through a
//! kubeconfig: it takes the leader Lease, finds that the optional CRDs
//! (HyperShift, CAPI, KubeVirt) are missing and says so, reconciles an Infra
//! through its watches, and on SIGTERM stops reconciling, releases the Lease
//! and exits 0.

#![allow(clippy::unwrap_used)] // an unwrap that fails is the test's verdict

use crate::mock_api;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::reconcile_support::{REGISTRY_IMAGES, infra_builder};
use mock_api::{MockApi, assert_rbac};
use serde_json::{Value, json};

const G: &str = "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/oooi-system/leases/oooi-controller";

/// The reconciler tests' Infra with the chart's images.
fn infra() -> Value {
    let [dhcp, dns, proxy] = REGISTRY_IMAGES;
    infra_builder().images(dhcp, dns, proxy).json()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Polls `check` every 50 ms until it holds, for at most `secs`.
async fn until(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kills the process if the test fails before it exits.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_starts_without_optional_crds_reconciles_and_shuts_down_on_sigterm() {
    let mock = MockApi::start();
    mock.insert(&format!("{G}/infras/vlan200"), infra());
    let api = mock.serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        oooi_kube_mock::kubeconfig(api, "default", None),
    )
    .unwrap();
    let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_oooi-controller"))
        .args([
            "run",
            &format!("--http-addr={http}"),
            "--leader-election=true",
            "--lease-namespace=oooi-system",
            "--identity=oooi-controller-test",
            "--log-format=text",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info")
        .env_remove("OOOI_WATCH_NAMESPACE")
        .env_remove("OOOI_OPENSHIFT_SCC")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("oooi-controller runs");
    let pid = child.id();
    let mut guard = Guard(Some(child));

    // Leader, ready, and reconciling through the watches: the Infra gets
    // its finalizer (a watch event brings it back), then its derived
    // objects, whose own watch events drive the DHCP reconciler.
    until(30, "the Lease", || {
        mock.get(LEASE)
            .is_some_and(|l| l["spec"]["holderIdentity"] == "oooi-controller-test")
    })
    .await;
    until(30, "the Infra's status", || {
        mock.get(&format!("{G}/infras/vlan200")).is_some_and(|i| {
            i["metadata"]["finalizers"] == json!(["hostedcluster.densityops.com/cleanup"])
                && i["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "WorkersObserved"))
        })
    })
    .await;
    until(30, "the DHCP Deployment", || {
        mock.get("/apis/apps/v1/namespaces/oooi/deployments/vlan200-dhcp")
            .is_some()
    })
    .await;
    let infra = mock.get(&format!("{G}/infras/vlan200")).unwrap();
    let workers = infra["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "WorkersObserved")
        .unwrap()
        .clone();
    assert_eq!(workers["status"], "False", "{workers}");
    assert_eq!(workers["reason"], "OptionalAPIsMissing");
    assert!(
        workers["message"]
            .as_str()
            .unwrap()
            .contains("machines.cluster.x-k8s.io"),
        "{workers}"
    );
    let (status, _) = http_get(http, "/readyz").await.expect("readyz");
    assert_eq!(status, 200);
    let (_, metrics) = http_get(http, "/metrics").await.expect("metrics");
    assert!(metrics.contains("oooi_controller_leader 1"), "{metrics}");
    for crd in [
        "hostedclusters.hypershift.openshift.io",
        "nodepools.hypershift.openshift.io",
        "machines.cluster.x-k8s.io",
        "virtualmachineinstances.kubevirt.io",
    ] {
        assert!(
            metrics.contains(&format!(
                "oooi_controller_optional_api_present{{api=\"{crd}\"}} 0"
            )),
            "{crd}: {metrics}"
        );
    }
    // Never a watch on a type the cluster does not serve.
    let log = mock.log();
    assert!(
        !log.iter()
            .any(|r| r.path().contains("/apis/cluster.x-k8s.io/")
                || r.path().contains("/apis/kubevirt.io/")
                || r.path().contains("/apis/hypershift.openshift.io/")),
        "requests to a missing API"
    );
    assert_rbac(&log);

    // SIGTERM: in-flight work finishes, the Lease is released, exit 0.
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let mut child = guard.0.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit within 20 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "exit {status}:\n{out}");
    assert!(
        out.contains("optional APIs not served")
            && out.contains("no worker addresses are observed"),
        "the missing CRDs are logged:\n{out}"
    );
    for line in ["SIGTERM: shutting down", "leader lease released", "stopped"] {
        assert!(out.contains(line), "`{line}` not logged:\n{out}");
    }
    let lease = mock.get(LEASE).unwrap();
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "released: {lease}"
    );
    // Nothing is written after the Lease is released.
    let log = mock.log();
    let release = log
        .iter()
        .rposition(|r| r.is_write() && r.path() == LEASE)
        .expect("a Lease write");
    let after: Vec<String> = log[release + 1..]
        .iter()
        .filter(|r| r.is_write())
        .map(|r| r.line())
        .collect();
    assert!(after.is_empty(), "writes after the release: {after:#?}");
    assert_rbac(&log);
}
