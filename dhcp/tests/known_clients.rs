//! KubeVirt workers known by MAC before their address is, with the real
//! `oooi-dhcp` binary and busybox `udhcpc` in network namespaces (root,
//! `ip`, busybox): a known client gets a pool address and its host name
//! (option 12) in its first lease; with `unknown_clients: ignore` any other
//! MAC gets no answer at all, while reserved and known ones still do.

mod lab;

use lab::{Lab, config, read_events};

fn bound(path: &std::path::Path) -> Option<lab::Event> {
    read_events(path)
        .into_iter()
        .rev()
        .find(|e| e.reason == "bound")
}

fn with_known(unknown: &str) -> String {
    format!(
        "{}known_clients:\n  - {{ mac: \"02:00:00:00:00:bb\", hostname: c1-workers-x7k2p }}\nunknown_clients: {unknown}\n",
        config(150, 50)
    )
}

#[test]
fn a_known_client_gets_its_vmi_name_as_hostname_in_its_first_lease() {
    let mut lab = Lab::new(&with_known("pool"));
    let known = lab.add_client("02:00:00:00:00:bb");
    let other = lab.add_client("02:00:00:00:00:01");
    lab.start_server();
    let (events, idx) = lab.udhcpc(&known, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 10), "udhcpc failed:\n{}", lab.log());
    let b = bound(&events).expect("bound");
    assert_eq!(b.get("hostname"), "c1-workers-x7k2p");
    let ip: std::net::Ipv4Addr = b.get("ip").parse().unwrap();
    assert!(
        (std::net::Ipv4Addr::new(192, 0, 2, 100)..=std::net::Ipv4Addr::new(192, 0, 2, 150))
            .contains(&ip),
        "{ip} is a pool address"
    );
    // Under `pool`, a MAC nobody knows still gets a lease, without a name.
    let (events, idx) = lab.udhcpc(&other, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 10), "udhcpc failed:\n{}", lab.log());
    assert_eq!(bound(&events).expect("bound").get("hostname"), "");
}

#[test]
fn ignore_leaves_unknown_macs_unanswered_and_serves_known_and_reserved_ones() {
    let mut lab = Lab::new(&with_known("ignore"));
    let stranger = lab.add_client("02:00:00:00:00:01");
    let known = lab.add_client("02:00:00:00:00:bb");
    let reserved = lab.add_client("02:00:00:00:00:aa");
    lab.start_server();
    // -n: give up after its 4 DISCOVERs, 1 s apart.
    let (events, idx) = lab.udhcpc(&stranger, &["-q", "-n"]);
    assert!(!lab.wait_child(idx, 15), "an unknown MAC got an address");
    assert!(bound(&events).is_none());
    assert!(
        lab.metric("oooi_dhcp_messages_received_total{type=\"discover\"}") >= 1.0,
        "the server heard the DISCOVERs"
    );
    assert_eq!(
        lab.metric("oooi_dhcp_messages_sent_total{type=\"offer\"}"),
        0.0,
        "no OFFER was sent"
    );

    let (events, idx) = lab.udhcpc(&known, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 10), "udhcpc failed:\n{}", lab.log());
    assert_eq!(
        bound(&events).expect("bound").get("hostname"),
        "c1-workers-x7k2p"
    );
    let (events, idx) = lab.udhcpc(&reserved, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 10), "udhcpc failed:\n{}", lab.log());
    let b = bound(&events).expect("bound");
    assert_eq!((b.get("ip"), b.get("hostname")), ("192.0.2.50", "worker-0"));
}
