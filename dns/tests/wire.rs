//! Real queries over loopback with `dig` against the `oooi-dns` binary.

use std::process::{Child, Command};
use std::time::Duration;

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &std::path::Path, yaml: &str) -> Server {
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let child = Command::new(env!("CARGO_BIN_EXE_oooi-dns"))
        .args(["serve", "--config"])
        .arg(&path)
        .spawn()
        .expect("start oooi-dns");
    std::thread::sleep(Duration::from_millis(500));
    Server(child)
}

fn dig(server: &str, port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{server}"))
        .args(["-p", &port.to_string(), "+time=2", "+tries=1"])
        .args(args)
        .output()
        .expect("dig is required: install dnsutils (tools/dev does)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PORT: u16 = 25353;

fn config(port: u16, upstream: u16) -> String {
    format!(
        r#"
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
    listen: ["127.0.0.2:{port}"]
  - name: default
    kind: pod
    listen: ["127.0.0.3:{port}"]
"#
    )
}

#[test]
fn dig_sees_views_records_nodata_nxdomain_and_servfail() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Upstream port with nothing listening: forwarding fails fast.
    let _s = start(dir.path(), &config(PORT, 25399));

    let a = dig("127.0.0.2", PORT, &["+short", "API.c1.example.com", "A"]);
    assert_eq!(a.trim(), "192.0.2.4");
    let w = dig(
        "127.0.0.2",
        PORT,
        &["+short", "a.b.apps.c1.example.com", "A"],
    );
    assert_eq!(w.trim(), "192.0.2.200");
    let k = dig(
        "127.0.0.2",
        PORT,
        &["+short", "kubernetes.default.svc", "A"],
    );
    assert_eq!(k.trim(), "192.0.2.4");

    let nodata = dig("127.0.0.2", PORT, &["api.c1.example.com", "AAAA"]);
    assert!(nodata.contains("status: NOERROR"), "{nodata}");
    assert!(nodata.contains("ANSWER: 0"), "{nodata}");
    assert!(nodata.contains("SOA"), "{nodata}");
    assert!(nodata.contains(" aa"), "{nodata}");

    let nx = dig("127.0.0.2", PORT, &["nope.c1.example.com", "A"]);
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");

    let tcp = dig(
        "127.0.0.2",
        PORT,
        &["+tcp", "+short", "oauth.c1.example.com"],
    );
    assert_eq!(tcp.trim(), "192.0.2.4");

    // The pod view does not learn VLAN addresses: it forwards, and the
    // upstream is down, so SERVFAIL.
    let pod = dig("127.0.0.3", PORT, &["api.c1.example.com", "A"]);
    assert!(pod.contains("status: SERVFAIL"), "{pod}");
}
