//! What each view answers, asked with `dig` over real sockets against the
//! `oooi-dns` binary: the pod view answers a cluster's control-plane names
//! (and `*.apps` where published to pods) with the internal proxy and never
//! the `kubernetes` aliases; without an internal proxy it answers none of
//! them; the vlan view answers the aliases only while the cluster's
//! `aliases` switch is on (the controller's "a worker address is known").
#![allow(clippy::unwrap_used)]

mod support;

use support::{dig, spawn_upstream, start};

const ALIASES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// c1 has an internal proxy and publishes apps to pods; c2 has neither.
/// Both point at one upstream answering 203.0.113.7 for every name.
fn config(vlan: u16, pod: u16, upstream: u16, c1_aliases: bool) -> String {
    // c1: proxy 192.0.2.4, internal proxy 10.0.0.4, apps VIP 192.0.2.200.
    const C1: &str = include_str!("fixtures/cluster-c1.yaml");
    format!(
        r#"
upstreams:
  servers: ["127.0.0.7:{upstream}"]
  timeout_ms: 500
clusters:
{C1}    apps_to_pods: true
    aliases: {c1_aliases}
  - name: c2
    base_domain: example.com
    proxy: 192.0.2.4
    aliases: false
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:{vlan}"]
  - name: pod
    kind: pod
    listen: ["127.0.0.3:{pod}"]
"#
    )
}

fn a(server: &str, port: u16, name: &str) -> String {
    dig(server, port, &["+short", name, "A"]).trim().to_string()
}

#[test]
fn pod_view_answers_control_plane_names_with_the_internal_proxy_and_never_the_aliases() {
    let (vlan, pod, up) = (25441, 25442, 25443);
    let _up = spawn_upstream(&format!("127.0.0.7:{up}"));
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(vlan, pod, up, true));
    for n in ["api", "api-int", "oauth", "ignition", "konnectivity"] {
        let name = format!("{n}.c1.example.com");
        assert_eq!(a("127.0.0.3", pod, &name), "10.0.0.4", "pod view {name}");
        assert_eq!(a("127.0.0.2", vlan, &name), "192.0.2.4", "vlan view {name}");
    }
    assert_eq!(
        a("127.0.0.3", pod, "console.apps.c1.example.com"),
        "10.0.0.4"
    );
    // The rest of the cluster's zone forwards from the pods.
    assert_eq!(a("127.0.0.3", pod, "other.c1.example.com"), "203.0.113.7");
    for alias in ALIASES {
        assert_eq!(
            a("127.0.0.3", pod, alias),
            "203.0.113.7",
            "pod view {alias}"
        );
        assert_eq!(
            a("127.0.0.2", vlan, alias),
            "192.0.2.4",
            "vlan view {alias}"
        );
    }
    // No internal proxy for c2: the pod view forwards its names.
    assert_eq!(a("127.0.0.3", pod, "api.c2.example.com"), "203.0.113.7");
    assert_eq!(a("127.0.0.2", vlan, "api.c2.example.com"), "192.0.2.4");
}

#[test]
fn vlan_view_has_no_alias_answers_while_no_cluster_has_known_workers() {
    let (vlan, pod, up) = (25444, 25445, 25446);
    let _up = spawn_upstream(&format!("127.0.0.7:{up}"));
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(vlan, pod, up, false));
    for alias in ALIASES {
        assert_eq!(
            a("127.0.0.2", vlan, alias),
            "203.0.113.7",
            "vlan view {alias}"
        );
    }
    // The clusters' own names are unaffected.
    assert_eq!(a("127.0.0.2", vlan, "api.c1.example.com"), "192.0.2.4");
}

/// The pod view is written `$(POD_IP):port`: the server binds the pod's own
/// address (from `POD_IP`, as the pod's downward API sets it), so the view
/// does not answer on the pod's other addresses (its VLAN address), where
/// the port stays free for anyone else to bind. Without a pod address the
/// server refuses to start and names the field.
#[test]
fn the_pod_view_listens_on_the_pod_address_only() {
    let dir = tempfile::tempdir().unwrap();
    let text = config(25540, 25541, 25542, true)
        .replace("127.0.0.3:25541", "$(POD_IP):25541")
        .replace("127.0.0.2:25540", "127.0.0.36:25540");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, &text).unwrap();
    let _up = spawn_upstream("127.0.0.7:25542");
    let _s = support::start_env(&path, &[], &[("POD_IP", "127.0.0.37")]);
    // The pod view answers on the pod address.
    let got = dig("127.0.0.37", 25541, &["+short", "api.c1.example.com"]);
    assert_eq!(got.trim(), "10.0.0.4");
    // Nothing answers the pod view's port on the VLAN address, over UDP or
    // TCP, and that port is free there: nothing is bound to the wildcard.
    let vlan = dig("127.0.0.36", 25541, &["api.c1.example.com"]);
    assert!(
        !vlan.contains("status:"),
        "answered on the VLAN address: {vlan}"
    );
    let udp = std::net::UdpSocket::bind("127.0.0.36:25541");
    assert!(udp.is_ok(), "UDP port taken: {udp:?}");
    let tcp = std::net::TcpListener::bind("127.0.0.36:25541");
    assert!(tcp.is_ok(), "TCP port taken: {tcp:?}");
    // The VLAN view still answers on its own address.
    let got = dig("127.0.0.36", 25540, &["+short", "api.c1.example.com"]);
    assert_eq!(got.trim(), "192.0.2.4");

    // The same config without a pod address: refused at start.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oooi-dns"))
        .args(["serve", "--config"])
        .arg(&path)
        .env_remove("POD_IP")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("views[1].listen"), "{err}");
    assert!(err.contains("POD_IP"), "{err}");
}
