//! The container images, run under podman as a cluster would run them: a
//! read-only root filesystem, the image's own non-root user, no shell; and
//! as OpenShift's restricted-v2 runs them: an arbitrary UID with GID 0, no
//! capability, no privilege escalation, low ports through the pod sysctl.
//! Also the OLM bundle image, built from the bundle the controller writes.
//!
//! `tools/dev test` builds the images (`tools/dev images`) and runs this
//! suite with `OOOI_IMAGE_VERSION` set to their tag and podman configured
//! through `CONTAINERS_CONF` and `CONTAINERS_STORAGE_CONF`. Needs root, `ip`,
//! `dig`, busybox and podman (`tools/dev setup`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use oooi_controller::testing::InfraBuilder;
use oooi_tests::fixture::TwoClusters;
use oooi_tests::{ConfigMapDir, free_port, http_blocking, tls_probe};

/// `localhost/oooi-<name>:<version>`, the tag `tools/dev images` gives.
fn image(name: &str) -> String {
    let Ok(version) = std::env::var("OOOI_IMAGE_VERSION") else {
        panic!("OOOI_IMAGE_VERSION is not set: run `tools/dev test` (it builds the images first)");
    };
    format!("localhost/oooi-{name}:{version}")
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run podman (tools/dev setup installs it): {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A detached container, removed on drop.
struct Container(String);

impl Container {
    /// `podman run -d` with the common hardening flags, then `args`.
    fn start(name: &str, args: &[&str]) -> Container {
        let name = format!("oooi-test-{name}-{}", std::process::id());
        let _ = podman(&["rm", "--force", "--time", "0", &name]);
        let mut all = vec!["run", "-d", "--name", &name, "--read-only"];
        all.extend_from_slice(args);
        let out = podman(&all);
        assert!(out.status.success(), "podman run: {}", text(&out));
        Container(name)
    }

    fn logs(&self) -> String {
        text(&podman(&["logs", &self.0]))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "0", &self.0]);
    }
}

fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool, log: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what}: not after {secs} s\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(out.status.success(), "{args:?}: {}", text(&out));
}

/// Network namespaces of one test, deleted on drop.
struct Netns(Vec<String>);

impl Netns {
    fn add(&mut self, name: &str) -> String {
        let ns = format!("oim{}{name}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(Stdio::null())
            .status();
        sh(&["ip", "netns", "add", &ns]);
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        self.0.push(ns.clone());
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Metric names (`prefix...`) the chart's alert rules and Grafana dashboard
/// query. A name ending in `_` stands for a `__name__=~"<name>.+"` matcher.
fn queried_metrics(prefix: &str) -> Vec<String> {
    let monitoring = repo().join("charts/oooi/monitoring");
    let mut names = Vec::new();
    for file in ["alerts.yaml", "dashboard.json"] {
        let text = std::fs::read_to_string(monitoring.join(file)).expect("monitoring file");
        let mut rest = text.as_str();
        while let Some(at) = rest.find(prefix) {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Metric names in a Prometheus text exposition.
fn exported_metrics(scrape: &str) -> Vec<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `prefix` metric the alerts and the dashboard query is in `scrape`.
fn assert_queries_name_exported_metrics(prefix: &str, scrape: &str) {
    let queried = queried_metrics(prefix);
    assert!(!queried.is_empty(), "no alert or panel queries {prefix}*");
    let exported = exported_metrics(scrape);
    for name in queried {
        let found = if name.ends_with('_') {
            exported
                .iter()
                .any(|e| e.starts_with(&name) && e.len() > name.len())
        } else {
            exported.contains(&name)
        };
        assert!(
            found,
            "alerts or dashboard query {name}, which is not exported:\n{}",
            exported.join("\n")
        );
    }
}

#[test]
fn images_carry_labels_run_as_non_root_and_fit_their_size_budgets() {
    // Uncompressed sizes the images must stay under (None: no budget).
    let budgets = [
        // 44.2 MB at 0.1.0: the kube client, the planners, wasmtime for
        // the pre-rollout check of the filter, and the lease inventory's
        // client (port-forward over WebSocket for `oooi-controller leases`).
        ("controller", Some(48_000_000u64)),
        // oooi-dns (7.1 MB) and the address agent (4.0 MB; no kube client
        // since it judges liveness on the VLAN).
        ("dns", Some(15_000_000)),
        ("dhcp", Some(15_000_000)),
        ("proxy", None),
    ];
    for (name, budget) in budgets {
        let image = image(name);
        let out = podman(&["image", "inspect", &image]);
        assert!(out.status.success(), "{image}: {}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect JSON");
        let v = &v[0];
        let labels = &v["Config"]["Labels"];
        assert_eq!(
            labels["org.opencontainers.image.version"],
            env!("CARGO_PKG_VERSION"),
            "{image}"
        );
        for key in ["source", "revision", "licenses"] {
            let value = labels[format!("org.opencontainers.image.{key}")]
                .as_str()
                .unwrap_or_default();
            assert!(!value.is_empty(), "{image}: label {key} missing");
        }
        assert_eq!(v["Config"]["User"], "65532:65532", "{image}");
        let size = v["Size"].as_u64().expect("size");
        if let Some(budget) = budget {
            assert!(size <= budget, "{image}: {size} bytes > {budget}");
        }
        // No shell: a distroless image has nothing to exec but its program.
        let out = podman(&[
            "run",
            "--rm",
            "--entrypoint",
            "/bin/sh",
            &image,
            "-c",
            "true",
        ]);
        assert!(!out.status.success(), "{image} has a shell");
    }
}

#[test]
fn controller_image_renders_an_example_manifest() {
    let wasm = oooi_tests::filter_wasm().expect("filter module");
    let module = std::fs::read(&wasm).expect("read module");
    let examples = format!("{}:/examples:ro", repo().join("examples").display());
    let filter = format!("{}:/filter/oooi_sni_router.wasm:ro", wasm.display());
    let image = image("controller");
    let out = podman(&[
        "run",
        "--rm",
        "--read-only",
        "--network",
        "none",
        "-v",
        &examples,
        "-v",
        &filter,
        &image,
        "render",
        "-f",
        "/examples/single-cluster.yaml",
        "--filter-wasm",
        "/filter/oooi_sni_router.wasm",
    ]);
    assert!(out.status.success(), "render: {}", text(&out));
    let yaml = String::from_utf8_lossy(&out.stdout).into_owned();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML documents");
    let kinds: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_string(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let deployments: Vec<&serde_json::Value> =
        docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert_eq!(deployments.len(), 3, "one per component: {kinds:?}");
    for kind in ["DHCPServer", "DNSServer", "ProxyServer"] {
        assert!(
            kinds.iter().any(|(k, _)| k == kind),
            "no {kind} in {kinds:?}"
        );
    }
    // The module passed the wasmtime check inside the image and sits in the
    // proxy's filter ConfigMap under its versioned key.
    let key = oooi_envoy::module_file_name(&module);
    let filter_cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && !d["binaryData"][&key].is_null())
        .unwrap_or_else(|| panic!("no ConfigMap holds {key}: {kinds:?}"));
    assert!(
        filter_cm["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .ends_with("-filter"),
        "{filter_cm}"
    );
}

#[test]
fn dns_image_answers_dig_on_a_loopback_port() {
    let port = free_port("127.0.0.1".parse().expect("ip"));
    let http = free_port("127.0.0.1".parse().expect("ip"));
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing listens on the upstream: forwarded names fail fast.
    let upstream = free_port("127.0.0.1".parse().expect("ip"));
    // A ConfigMap-style mount, as the pod has, so a reload can be swapped in.
    let mut mount = ConfigMapDir::new(&dir.path().join("config")).expect("mount");
    let config = format!(
        r#"http: "127.0.0.1:{http}"
upstreams:
  servers: ["127.0.0.1:{upstream}"]
  timeout_ms: 300
clusters:
  - name: c1
    base_domain: example.com
    proxy: 192.0.2.4
    apps_vip: 192.0.2.200
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.1:{port}"]
"#
    );
    mount
        .publish(&[("config.yaml".to_string(), config.into_bytes())])
        .expect("publish");
    let volume = format!("{}:/etc/oooi-dns:ro", mount.path().display());
    let c = Container::start(
        "dns",
        &[
            "--network",
            "host",
            "-v",
            &volume,
            &image("dns"),
            "serve",
            "--config",
            "/etc/oooi-dns/config.yaml",
        ],
    );
    let health: SocketAddr = format!("127.0.0.1:{http}").parse().expect("addr");
    wait_for(
        20,
        "oooi-dns /healthz",
        || {
            matches!(
                http_blocking(health, "GET", "/healthz", &[], b""),
                Ok((200, _))
            )
        },
        || c.logs(),
    );
    let dig = |args: &[&str]| {
        let out = Command::new("dig")
            .args(["@127.0.0.1", "-p", &port.to_string(), "+time=2", "+tries=2"])
            .args(args)
            .output()
            .expect("dig (dnsutils)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(dig(&["+short", "api.c1.example.com", "A"]), "192.0.2.4");
    assert_eq!(
        dig(&["+short", "+tcp", "x.apps.c1.example.com", "A"]),
        "192.0.2.200"
    );
    let nx = dig(&["nope.c1.example.com", "A"]);
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
    // Not ours: forwarded to the dead upstream.
    let fwd = dig(&["other.example.org", "A"]);
    assert!(fwd.contains("status: SERVFAIL"), "{fwd}");
    // A broken config is refused and the old one keeps serving.
    mount
        .publish(&[("config.yaml".to_string(), b"views: 7\n".to_vec())])
        .expect("publish");
    let metrics = || {
        http_blocking(health, "GET", "/metrics", &[], b"")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    wait_for(
        10,
        "the broken config is rejected",
        || metrics().contains("oooi_dns_reloads_total{result=\"rejected\"}"),
        || format!("{}\n{}", metrics(), c.logs()),
    );
    assert_eq!(dig(&["+short", "api.c1.example.com", "A"]), "192.0.2.4");
    assert_queries_name_exported_metrics("oooi_dns_", &metrics());
}

/// A DHCP server's namespace and a client's, `<server>` and `<client>`,
/// joined by a veth pair: `s0` at 192.0.2.2/24 in the server's, `c0` with
/// MAC `mac` in the client's. Returns the two namespaces' names.
fn dhcp_veth(netns: &mut Netns, server: &str, client: &str, mac: &str) -> (String, String) {
    let server = netns.add(server);
    let client = netns.add(client);
    sh(&[
        "ip", "-n", &server, "link", "add", "s0", "type", "veth", "peer", "name", "c0", "netns",
        &client,
    ]);
    sh(&[
        "ip",
        "-n",
        &server,
        "addr",
        "add",
        "192.0.2.2/24",
        "dev",
        "s0",
    ]);
    sh(&["ip", "-n", &server, "link", "set", "s0", "up"]);
    sh(&["ip", "-n", &client, "link", "set", "c0", "address", mac]);
    sh(&["ip", "-n", &client, "link", "set", "c0", "up"]);
    (server, client)
}

/// The DHCP server's config on `s0` (192.0.2.2, the pool from .100 to
/// `range_end`, `extra` lines before the lease time) in a ConfigMap-style
/// mount under `dir`.
fn dhcp_config(dir: &Path, range_end: &str, extra: &str) -> ConfigMapDir {
    let mut config = ConfigMapDir::new(&dir.join("config")).expect("mount");
    let text = format!(
        "interface: s0\nserver_ip: 192.0.2.2\nsubnet: 192.0.2.0/24\ngateway: 192.0.2.1\n\
         range: {{ start: 192.0.2.100, end: {range_end} }}\ndns_servers: [192.0.2.3]\n\
         {extra}lease_seconds: 3600\n"
    );
    config
        .publish(&[("config.yaml".to_string(), text.into_bytes())])
        .expect("publish");
    config
}

/// busybox udhcpc on `c0` in `client`: one lease and out, `tries`
/// discovers a second apart.
fn udhcpc(client: &str, tries: u32) -> Output {
    Command::new("ip")
        .args(["netns", "exec", client, "busybox", "udhcpc"])
        .args(["-i", "c0", "-f", "-q", "-n", "-t"])
        .arg(tries.to_string())
        .args(["-T", "1", "-s", "/bin/true"])
        .output()
        .expect("busybox udhcpc")
}

#[test]
fn dhcp_image_leases_to_udhcpc_across_a_veth() {
    let mut netns = Netns(Vec::new());
    let (server, client) = dhcp_veth(&mut netns, "s", "c", "02:00:00:00:01:01");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    // The image's user owns the lease store, as fsGroup arranges in a pod.
    sh(&["chown", "65532:65532", data.to_str().expect("utf-8 path")]);
    // One address in the pool: the second client finds it exhausted.
    let mut config = dhcp_config(dir.path(), "192.0.2.100", "domain: cluster.example\n");
    let config_mount = format!("{}:/etc/oooi-dhcp:ro", config.path().display());
    let data_mount = format!("{}:/var/lib/oooi-dhcp", data.display());
    let netns_arg = format!("ns:/run/netns/{server}");
    let c = Container::start(
        "dhcp",
        &[
            "--network",
            &netns_arg,
            "--cap-add",
            "NET_BIND_SERVICE,NET_RAW,NET_ADMIN",
            "-v",
            &config_mount,
            "-v",
            &data_mount,
            &image("dhcp"),
            "serve",
            "--config",
            "/etc/oooi-dhcp/config.yaml",
            "--data-dir",
            "/var/lib/oooi-dhcp",
            "--metrics-addr",
            "127.0.0.1:9067",
        ],
    );
    let get = |path: &str| -> Option<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &server, "busybox", "wget", "-q", "-O-"])
            .arg(format!("http://127.0.0.1:9067{path}"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    wait_for(
        20,
        "oooi-dhcp /healthz",
        || get("/healthz").is_some(),
        || c.logs(),
    );
    let out = udhcpc(&client, 3);
    let said = text(&out);
    assert!(out.status.success(), "udhcpc: {said}\n{}", c.logs());
    assert!(
        said.contains("lease of 192.0.2.100 obtained from 192.0.2.2"),
        "{said}"
    );
    // The lease is in the store the image wrote, as the image reads it.
    let leases = podman(&[
        "run",
        "--rm",
        "--read-only",
        "--network",
        "none",
        "-v",
        &data_mount,
        &image("dhcp"),
        "leases",
        "--data-dir",
        "/var/lib/oooi-dhcp",
    ]);
    let listed = text(&leases);
    assert!(leases.status.success(), "{listed}");
    assert!(
        listed.contains("192.0.2.100") && listed.contains("02:00:00:00:01:01"),
        "{listed}"
    );
    // Another machine: the pool is exhausted, no offer.
    sh(&[
        "ip",
        "-n",
        &client,
        "link",
        "set",
        "c0",
        "address",
        "02:00:00:00:01:02",
    ]);
    let out = udhcpc(&client, 3);
    assert!(
        !out.status.success(),
        "a lease from an exhausted pool: {}",
        text(&out)
    );
    // A broken config is refused, the old one stays.
    config
        .publish(&[("config.yaml".to_string(), b"subnet: nonsense\n".to_vec())])
        .expect("publish");
    let metrics = || get("/metrics").unwrap_or_default();
    wait_for(
        10,
        "the broken config is rejected",
        || metrics().contains("oooi_dhcp_reloads_total{result=\"rejected\"}"),
        || format!("{}\n{}", metrics(), c.logs()),
    );
    let scrape = metrics();
    assert!(
        scrape.contains("oooi_dhcp_pool_utilisation_ratio 1"),
        "{scrape}"
    );
    assert_queries_name_exported_metrics("oooi_dhcp_", &scrape);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_image_routes_tls_by_sni_after_a_table_push_behind_its_gate() {
    // As a pod runs it: the image's oooi-envoy-gate in front of its Envoy.
    let lab = TwoClusters::start_gated(std::path::PathBuf::new(), Some(image("proxy")))
        .await
        .expect("proxy image starts");
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // No table yet: the routing port is closed, so the connect is refused.
    let connect = std::net::TcpStream::connect(lab.https);
    assert!(
        matches!(&connect, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
        "443 before the table: {connect:?}"
    );
    lab.envoy.push_table(&lab.table).expect("push");
    // The gate opens the routing listeners once the replica is ready.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while tls_probe(lab.https, Some("oauth.c1.example.com"), Some(lo))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "443 not serving 20 s after the push:\n{}",
            lab.envoy.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (sni, backend) in [
        ("oauth.c1.example.com", "c1-oauth"),
        ("oauth.c2.example.com", "c2-oauth"),
        ("x.apps.c1.example.com", "c1-apps"),
    ] {
        let got = tls_probe(lab.https, Some(sni), Some(lo))
            .await
            .unwrap_or_else(|e| format!("refused ({e})"));
        assert_eq!(got, backend, "{sni}\n{}", lab.envoy.log_text());
    }
    assert!(
        tls_probe(lab.https, Some("unknown.example.com"), Some(lo))
            .await
            .is_err(),
        "an unknown name is refused"
    );
    let (status, scrape) =
        http_blocking(lab.envoy.admin, "GET", "/stats/prometheus", &[], b"").expect("stats");
    assert_eq!(status, 200);
    assert_queries_name_exported_metrics("oooi_sni_router_", &scrape);
}

// Under any UID: the pod shape OpenShift's restricted-v2 SCC admits. The
// namespace's arbitrary UID (here 1000770000) with GID 0, every capability
// dropped, no privilege escalation, a read-only root, and low ports only
// through the pod sysctl `net.ipv4.ip_unprivileged_port_start=0` (podman
// sets it in the network namespace the container joins, as the kubelet
// sets a pod's). Each image still binds its port below 1024 and serves.

/// The UID and GID OpenShift assigns from a namespace's range.
const ANY_UID: &str = "1000770000:0";

/// podman flags of a restricted pod's container in network namespace `ns`.
fn restricted(ns: &str) -> Vec<String> {
    [
        "--network",
        &format!("ns:/run/netns/{ns}"),
        "--user",
        ANY_UID,
        "--cap-drop=ALL",
        "--security-opt",
        "no-new-privileges",
        "--sysctl",
        "net.ipv4.ip_unprivileged_port_start=0",
        "--sysctl",
        "net.ipv4.ping_group_range=0 2147483647",
    ]
    .map(String::from)
    .to_vec()
}

/// Container `name` started in namespace `ns` as [`restricted`] runs it,
/// `args` after its flags, once `health` (a URL inside `ns`) answers, and
/// checked to run restricted.
fn start_restricted(name: &str, ns: &str, args: &[&str], health: &str) -> Container {
    let mut all = restricted(ns);
    all.extend(args.iter().map(|a| a.to_string()));
    let c = Container::start(name, &all.iter().map(String::as_str).collect::<Vec<_>>());
    wait_for(
        20,
        &format!("{name}: {health}"),
        || get_in(ns, health).is_some(),
        || c.logs(),
    );
    assert_runs_restricted(&c);
    c
}

/// The running container's main process as the kernel sees it: its UID,
/// effective capabilities and no_new_privs, from /proc/<pid>/status.
fn assert_runs_restricted(c: &Container) {
    let out = podman(&["inspect", "--format", "{{.State.Pid}}", &c.0]);
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}\n{}", c.logs()));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(
        field("Uid"),
        "1000770000 1000770000 1000770000 1000770000",
        "{status}"
    );
    assert_eq!(field("Gid"), "0 0 0 0", "{status}");
    assert_eq!(field("CapEff"), "0000000000000000", "{status}");
    assert_eq!(field("CapPrm"), "0000000000000000", "{status}");
    assert_eq!(field("NoNewPrivs"), "1", "{status}");
}

/// `busybox wget -O-` inside network namespace `ns`.
fn get_in(ns: &str, url: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "busybox", "wget", "-q", "-O-", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn dns_image_serves_port_53_under_any_uid_without_capabilities() {
    let mut netns = Netns(Vec::new());
    let ns = netns.add("dns");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut mount = ConfigMapDir::new(&dir.path().join("config")).expect("mount");
    // Nothing listens on the upstream: forwarded names fail fast.
    let config = r#"http: "127.0.0.1:8053"
upstreams:
  servers: ["127.0.0.1:5399"]
  timeout_ms: 300
clusters:
  - name: c1
    base_domain: example.com
    proxy: 192.0.2.4
    apps_vip: 192.0.2.200
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.1:53"]
"#;
    mount
        .publish(&[("config.yaml".to_string(), config.as_bytes().to_vec())])
        .expect("publish");
    let volume = format!("{}:/etc/oooi-dns:ro", mount.path().display());
    let c = start_restricted(
        "dns-any-uid",
        &ns,
        &[
            "-v",
            &volume,
            &image("dns"),
            "serve",
            "--config",
            "/etc/oooi-dns/config.yaml",
        ],
        "http://127.0.0.1:8053/healthz",
    );
    let dig = |extra: &[&str]| {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "dig",
                "@127.0.0.1",
                "-p",
                "53",
                "+time=2",
                "+tries=2",
            ])
            .args(extra)
            .output()
            .expect("dig (dnsutils)");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        dig(&["+short", "api.c1.example.com", "A"]),
        "192.0.2.4",
        "{}",
        c.logs()
    );
    assert_eq!(
        dig(&["+short", "+tcp", "x.apps.c1.example.com", "A"]),
        "192.0.2.200"
    );
}

#[test]
fn dhcp_image_leases_on_port_67_under_any_uid_without_capabilities() {
    let mut netns = Netns(Vec::new());
    let (server, client) = dhcp_veth(&mut netns, "us", "uc", "02:00:00:00:02:01");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    // Writable by group 0, as OpenShift images and fsGroup arrange it: the
    // UID is not known in advance.
    sh(&["chown", "0:0", data.to_str().expect("utf-8 path")]);
    sh(&["chmod", "0770", data.to_str().expect("utf-8 path")]);
    let config = dhcp_config(dir.path(), "192.0.2.110", "");
    let config_mount = format!("{}:/etc/oooi-dhcp:ro", config.path().display());
    let data_mount = format!("{}:/var/lib/oooi-dhcp", data.display());
    let c = start_restricted(
        "dhcp-any-uid",
        &server,
        &[
            "-v",
            &config_mount,
            "-v",
            &data_mount,
            &image("dhcp"),
            "serve",
            "--config",
            "/etc/oooi-dhcp/config.yaml",
            "--data-dir",
            "/var/lib/oooi-dhcp",
            "--metrics-addr",
            "127.0.0.1:9067",
        ],
        "http://127.0.0.1:9067/healthz",
    );
    let out = udhcpc(&client, 5);
    let said = text(&out);
    assert!(out.status.success(), "udhcpc: {said}\n{}", c.logs());
    assert!(said.contains("obtained from 192.0.2.2"), "{said}");
    // The lease reached the store the arbitrary UID writes.
    let entries = std::fs::read_dir(&data).expect("data dir").count();
    assert!(
        entries > 0,
        "nothing written to the lease store\n{}",
        c.logs()
    );
}

/// Moves the calling thread (only it) into network namespace `ns`: the
/// sockets it opens from then on, and the processes it starts, live there.
fn enter_netns(ns: &str) {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // SAFETY: setns(2) on this thread only, with a valid namespace fd.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
}

#[test]
fn proxy_image_routes_tls_on_port_443_under_any_uid_without_capabilities() {
    use oooi_routes::{Route, RouteMatch, RouteTable, Upstream};
    let mut netns = Netns(Vec::new());
    let ns = netns.add("px");
    let inner = ns.clone();
    // One thread in the namespace runs the backend, starts the proxy pod
    // and dials 443, all on the namespace's loopback.
    let run = std::thread::spawn(move || {
        enter_netns(&inner);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let backend = rt
            .block_on(oooi_tests::Backend::start("c1-oauth", lo))
            .expect("backend");
        let table = RouteTable {
            generation: 1,
            routes: vec![Route {
                port: 443,
                matches: RouteMatch::Sni("oauth.c1.example.com".into()),
                upstream: Upstream::Address {
                    host: "127.0.0.1".into(),
                    port: backend.addr.port(),
                },
                owner: Some("clusters/c1".into()),
            }],
        };
        table.validate().expect("table");
        // Envoy behind the image's gate, as the pod runs it.
        let envoy = oooi_tests::EnvoyOptions {
            image: Some(image("proxy")),
            gate: Some(PathBuf::new()),
            container_args: Some(restricted(&inner)),
            // podman starts from the test process's own namespace.
            podman: Some(vec![
                "nsenter".into(),
                format!("--net=/proc/{}/ns/net", std::process::id()),
                "podman".into(),
            ]),
            ..oooi_tests::EnvoyOptions::new(lo, &[443])
        }
        .start()
        .expect("the proxy image starts");
        let container = Container(format!(
            "oooi-test-envoy-{}-{}",
            std::process::id(),
            envoy.admin.port()
        ));
        assert_runs_restricted(&container);
        // Not ours to remove: the Envoy handle removes it.
        std::mem::forget(container);
        envoy.push_table(&table).expect("push");
        let https = SocketAddr::new(lo, 443);
        rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match tls_probe(https, Some("oauth.c1.example.com"), Some(lo)).await {
                    Ok(got) => {
                        assert_eq!(got, "c1-oauth");
                        break;
                    }
                    Err(e) => assert!(
                        Instant::now() < deadline,
                        "443 not routing 20 s after the push ({e}):\n{}",
                        envoy.log_text()
                    ),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(
                tls_probe(https, Some("unknown.example.com"), Some(lo))
                    .await
                    .is_err(),
                "an unknown name is refused"
            );
        });
        drop(envoy);
        drop(backend);
    });
    if let Err(panic) = run.join() {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn bundle_image_carries_the_olm_labels_and_only_the_bundle() {
    use oooi_controller::olm;
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let entries: Vec<String> = olm::BundleImage::ALL
        .iter()
        .map(|i| {
            format!(
                "{}=registry.example.com/oooi/{}@{digest}",
                i.name(),
                i.repository()
            )
        })
        .collect();
    let input = olm::BundleInput {
        version: env!("CARGO_PKG_VERSION").to_string(),
        images: olm::BundleImages::parse(entries.iter().map(String::as_str)).expect("images"),
        edge: olm::csv::UpgradeEdge::default(),
        filter_wasm: std::fs::read(oooi_tests::filter_wasm().expect("filter module"))
            .expect("read module"),
    };
    let bundle = olm::bundle(&input).expect("bundle");
    let dir = tempfile::tempdir().expect("tempdir");
    olm::write(&bundle, dir.path()).expect("write bundle");
    // As `tools/dev bundle` builds it.
    let tag = format!("localhost/oooi-bundle-test:{}", std::process::id());
    let containerfile = dir.path().join("bundle.Containerfile");
    let out = podman(&[
        "build",
        "--quiet",
        "--no-cache",
        "-f",
        containerfile.to_str().expect("utf-8 path"),
        "-t",
        &tag,
        dir.path().to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "podman build: {}", text(&out));
    let inspect = podman(&["image", "inspect", &tag]);
    let exported = {
        let name = format!("oooi-bundle-test-{}", std::process::id());
        let created = podman(&["create", "--name", &name, &tag, "none"]);
        assert!(
            created.status.success(),
            "podman create: {}",
            text(&created)
        );
        let tar = dir.path().join("rootfs.tar");
        let out = podman(&["export", "-o", tar.to_str().expect("utf-8 path"), &name]);
        let _ = podman(&["rm", "--force", &name]);
        let _ = podman(&["rmi", "--force", &tag]);
        assert!(out.status.success(), "podman export: {}", text(&out));
        let list = Command::new("tar")
            .arg("-tf")
            .arg(&tar)
            .output()
            .expect("tar");
        String::from_utf8_lossy(&list.stdout).into_owned()
    };
    let v: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("inspect JSON");
    let labels = &v[0]["Config"]["Labels"];
    for (key, value) in olm::bundle_annotations() {
        assert_eq!(labels[key], serde_json::Value::String(value), "label {key}");
    }
    let mut files: Vec<&str> = exported
        .lines()
        .map(|l| l.trim_start_matches("./"))
        .filter(|l| !l.ends_with('/') && !l.is_empty())
        .collect();
    files.sort();
    let mut want: Vec<String> = bundle
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .filter(|p| p.starts_with("manifests/") || p.starts_with("metadata/"))
        .collect();
    want.sort();
    // The image holds the two folders and nothing else.
    assert_eq!(files, want, "{exported}");
}

/// The must-gather image as `oc adm must-gather` runs it: the gather
/// container's command through `/bin/bash -c` with a disk-usage watcher
/// beside `/usr/bin/gather` (du, df, awk, sed, sleep), as the image's user,
/// read-only root, the destination a volume; then the copy container's
/// `sleep` and `tar`. The API is the stateful mock on loopback (the
/// container shares the host's network namespace, nothing leaves it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn must_gather_image_gathers_from_a_loopback_api_as_oc_runs_it() {
    use serde_json::json;
    const TOKEN: &str = "image-test-push-token-6e1f0c";
    let image = image("must-gather");
    let out = podman(&["image", "inspect", &image]);
    assert!(out.status.success(), "{image}: {}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect JSON");
    let config = &v[0]["Config"];
    assert_eq!(config["User"], "65532:65532");
    assert_eq!(config["Entrypoint"], json!(["/usr/bin/gather"]));
    // gather (about 10 MB) and BusyBox (about 2 MB).
    let size = v[0]["Size"].as_u64().expect("size");
    assert!(size <= 20_000_000, "{image}: {size} bytes > 20 MB");
    let labels = &config["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "oooi-must-gather");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        labels["org.opencontainers.image.licenses"]
            .as_str()
            .is_some_and(|l| l.contains("Apache-2.0") && l.contains("GPL-2.0"))
    );

    let mock = oooi_kube_mock::MockApi::start();
    mock.insert(
        "/apis/hostedcluster.densityops.com/v1alpha1/namespaces/oooi-infra/infras/vlan100",
        InfraBuilder::new()
            .named("oooi-infra", "vlan100")
            .remove("/metadata/uid")
            .remove("/metadata/generation")
            .merge(json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "AllComponentsReady"}
            ]}}))
            .json(),
    );
    mock.insert(
        "/api/v1/namespaces/oooi-infra/secrets/vlan100-proxy-push-token",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "vlan100-proxy-push-token", "namespace": "oooi-infra"},
               "data": {"token": "aW1hZ2UtdGVzdC1wdXNoLXRva2VuLTZlMWYwYw=="}}),
    );
    mock.insert(
        "/api/v1/namespaces/oooi-infra/pods/vlan100-dns-7c9d-q2w3e",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vlan100-dns-7c9d-q2w3e", "namespace": "oooi-infra",
                            "labels": {"app.kubernetes.io/name": "oooi", "app.kubernetes.io/component": "dns",
                                       "app.kubernetes.io/instance": "vlan100"}},
               "spec": {"containers": [{"name": "dns", "env": [{"name": "PUSH_TOKEN", "value": TOKEN}]}]},
               "status": {"phase": "Pending"}}),
    );
    mock.set_pod_log(
        "oooi-infra",
        "vlan100-dns-7c9d-q2w3e",
        "dns",
        false,
        &format!("serving; token {TOKEN}\n"),
    );
    let api = mock.serve_http().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The API is plain HTTP, but kube's TLS setup still wants a CA when
    // the kubeconfig names none (a pod has its service account's).
    let kube_dir = dir.path().join("kube");
    std::fs::create_dir(&kube_dir).expect("kube dir");
    let ca = rcgen::generate_simple_self_signed(vec!["mock".to_string()]).expect("CA");
    std::fs::write(kube_dir.join("ca.crt"), ca.cert.pem()).expect("ca.crt");
    std::fs::write(
        kube_dir.join("config"),
        oooi_kube_mock::kubeconfig(api, "default", Some("/kube/ca.crt")),
    )
    .expect("kubeconfig");
    let dest = dir.path().join("must-gather");
    std::fs::create_dir(&dest).expect("dest");
    // The pod's emptyDir: writable by whatever user the image runs as.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    std::fs::set_permissions(&kube_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let volumes = [
        format!("{}:/must-gather", dest.display()),
        format!("{}:/kube:ro", kube_dir.display()),
    ];
    // What oc writes: a watcher of the volume's use in the background, the
    // gather, then sync.
    let command = "while true; do used=$(df -P /must-gather | awk 'NR==2 {print $5}' | sed 's/%//'); \
                   du -s /must-gather | awk '{print $1}' >/dev/null; \
                   [ \"$used\" -gt 99 ] && kill 0; sleep 5; done & /usr/bin/gather; sync";
    let run = {
        let (image, volumes) = (image.clone(), volumes.clone());
        tokio::task::spawn_blocking(move || {
            podman(&[
                "run",
                "--rm",
                "--read-only",
                "--network",
                "host",
                "-v",
                &volumes[0],
                "-v",
                &volumes[1],
                "-e",
                "KUBECONFIG=/kube/config",
                "--entrypoint",
                "/bin/bash",
                &image,
                "-c",
                command,
            ])
        })
    };
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("the gather container ends")
        .expect("podman");
    assert!(out.status.success(), "gather container: {}", text(&out));
    let root = dest.join("oooi");
    let gathered = text(&out);
    let infra = std::fs::read_to_string(root.join("namespaces/oooi-infra/infras/vlan100.yaml"))
        .unwrap_or_else(|e| panic!("the Infra in the tree: {e}; the gather said:\n{gathered}"));
    assert!(infra.contains("AllComponentsReady"), "{infra}");
    let summary = std::fs::read_to_string(root.join("summary.txt")).expect("summary");
    assert!(
        summary.contains("oooi-infra/vlan100  Ready=True(AllComponentsReady)"),
        "{summary}"
    );
    let log = std::fs::read_to_string(
        root.join("namespaces/oooi-infra/logs/vlan100-dns-7c9d-q2w3e/dns.log"),
    )
    .expect("the pod's log");
    assert!(log.starts_with("serving; token <redacted"), "{log}");
    // The copy container: oc keeps it alive with sleep and reads the tree with tar.
    let out = podman(&[
        "run",
        "--rm",
        "--read-only",
        "-v",
        &volumes[0],
        "--entrypoint",
        "/bin/bash",
        &image,
        "-c",
        "trap : TERM INT; sleep 0.2 & wait; tar -C /must-gather -cf - . | tar -tf -",
    ]);
    assert!(out.status.success(), "copy container: {}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("./oooi/summary.txt"), "{listed}");
    // No secret byte in what oc would copy.
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let body = String::from_utf8_lossy(&std::fs::read(&p).expect("read")).into_owned();
                assert!(
                    !body.contains(TOKEN),
                    "{} holds the token:\n{body}",
                    p.display()
                );
                assert!(
                    !body.contains("aW1hZ2UtdGVzdC1wdXNoLXRva2Vu"),
                    "{} holds the Secret's data",
                    p.display()
                );
            }
        }
    }
}
