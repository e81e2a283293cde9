//! The conflict probe before an offer, in network namespaces with real
//! clients: a host that already uses a pool address (and answers ping) is
//! never offered over; the server probes with an unprivileged ICMP echo
//! socket (the namespace's `net.ipv4.ping_group_range` set the way the pod
//! sets it), quarantines the address, counts and logs it, and offers
//! another. Needs root.

mod lab;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use lab::{Lab, allow_ping_sockets, read_events, sh};
use oooi_dhcp::probe::{Found, Prober};

fn config(probe_ms: u32) -> String {
    format!(
        r#"interface: br0
server_ip: 192.0.2.2
subnet: 192.0.2.0/24
gateway: 192.0.2.1
range: {{ start: 192.0.2.100, end: 192.0.2.109 }}
dns_servers: [192.0.2.3]
lease_seconds: 600
probe_timeout_ms: {probe_ms}
"#
    )
}

fn bound_ip(events: &std::path::Path) -> Option<String> {
    read_events(events)
        .into_iter()
        .find(|e| e.reason == "bound")
        .map(|e| e.get("ip").to_string())
}

#[test]
fn a_probe_is_answered_by_a_host_on_the_link_and_times_out_for_a_free_address() {
    let mut lab = Lab::new(&config(300));
    let ns = lab.server_ns.clone();
    lab.add_squatter("02:00:00:00:5a:01", "192.0.2.100");
    allow_ping_sockets(&ns);
    let (answered, free, free_after) = lab::in_netns(&ns, || {
        let mut p = Prober::start(Some("br0"), Duration::from_millis(300)).expect("ping socket");
        assert!(p.start_probe(Ipv4Addr::new(192, 0, 2, 100)).expect("send"));
        let answered = p
            .results
            .recv_timeout(Duration::from_secs(2))
            .expect("result");
        let t = Instant::now();
        assert!(p.start_probe(Ipv4Addr::new(192, 0, 2, 101)).expect("send"));
        // A second probe of an address being probed is not started. (Asked
        // of the free address, in flight for the whole 300 ms timeout: the
        // squatter's echo reply can end its probe before a second call.)
        assert!(!p.start_probe(Ipv4Addr::new(192, 0, 2, 101)).expect("send"));
        let free = p
            .results
            .recv_timeout(Duration::from_secs(2))
            .expect("result");
        (answered, free, t.elapsed())
    });
    assert_eq!(answered, (Ipv4Addr::new(192, 0, 2, 100), Found::Answered));
    assert_eq!(free, (Ipv4Addr::new(192, 0, 2, 101), Found::Nobody));
    assert!(free_after >= Duration::from_millis(300), "{free_after:?}");
}

#[test]
fn an_address_a_host_already_uses_is_not_offered_and_the_conflict_is_counted_and_logged_once() {
    // A long probe, so that the client's DISCOVER retransmissions (every
    // second) arrive while the probe of the free address runs.
    let mut lab = Lab::new(&config(2500));
    // A host configured by hand with the first pool address: this server
    // has no binding of it.
    lab.add_squatter("02:00:00:00:5a:01", "192.0.2.100");
    let client = lab.add_client("02:00:00:00:5a:02");
    allow_ping_sockets(&lab.server_ns);
    lab.start_server();
    assert!(lab.log().contains("conflict probe on"), "{}", lab.log());
    let t = Instant::now();
    let (events, idx) = lab.udhcpc(&client, &["-q", "-n", "-t", "8"]);
    assert!(lab.wait_child(idx, 30), "udhcpc failed\n{}", lab.log());
    let took = t.elapsed();
    let ip = bound_ip(&events).expect("bound");
    assert_ne!(ip, "192.0.2.100", "offered the address a host uses");
    assert_eq!(ip, "192.0.2.101");
    assert_eq!(lab.metric("oooi_dhcp_probe_conflicts_total"), 1.0);
    // .100 (answered) and .101 (silent): two probes, although the client
    // retransmitted its DISCOVER while the second ran.
    assert_eq!(lab.metric("oooi_dhcp_probes_total"), 2.0, "{}", lab.log());
    assert!(
        lab.metric("oooi_dhcp_messages_received_total{type=\"discover\"}") >= 2.0,
        "the client retransmitted while the probe ran"
    );
    assert!(took >= Duration::from_millis(2500), "{took:?}");
    // The address is held back (counted with the addresses whose binding
    // is unknown).
    lab.wait_for(5, "the address held back", || {
        lab.metric("oooi_dhcp_leases_lost") == 1.0
    });
    // A second client is not offered it either, and the conflict is not
    // probed again (quarantined) nor logged twice.
    let second = lab.add_client("02:00:00:00:5a:03");
    let (events, idx) = lab.udhcpc(&second, &["-q", "-n", "-t", "8"]);
    assert!(lab.wait_child(idx, 30), "udhcpc failed\n{}", lab.log());
    assert_eq!(bound_ip(&events).as_deref(), Some("192.0.2.102"));
    assert_eq!(lab.metric("oooi_dhcp_probe_conflicts_total"), 1.0);
    assert_eq!(
        lab.log().matches("conflict probe: a host answered").count(),
        1,
        "{}",
        lab.log()
    );
    assert!(lab.log().contains("192.0.2.100"));
}

#[test]
fn a_returning_client_is_not_probed_again_for_its_own_address() {
    let mut lab = Lab::new(&config(300));
    let client = lab.add_client("02:00:00:00:5a:04");
    allow_ping_sockets(&lab.server_ns);
    lab.start_server();
    let (events, idx) = lab.udhcpc(&client, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 15), "{}", lab.log());
    let first = bound_ip(&events).expect("bound");
    assert_eq!(lab.metric("oooi_dhcp_probes_total"), 1.0);
    // The client comes back (a reboot: DISCOVER again) and gets its address
    // without a second probe: this server holds its binding.
    let (events, idx) = lab.udhcpc(&client, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 15), "{}", lab.log());
    assert_eq!(bound_ip(&events), Some(first));
    assert_eq!(lab.metric("oooi_dhcp_probes_total"), 1.0);
    assert_eq!(lab.metric("oooi_dhcp_probe_conflicts_total"), 0.0);
}

#[test]
fn with_probing_off_an_address_is_offered_without_a_probe() {
    let mut lab = Lab::new(&config(0));
    let client = lab.add_client("02:00:00:00:5a:05");
    allow_ping_sockets(&lab.server_ns);
    lab.start_server();
    assert!(lab.log().contains("conflict probe off"), "{}", lab.log());
    let (events, idx) = lab.udhcpc(&client, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 15), "{}", lab.log());
    assert!(bound_ip(&events).is_some());
    assert_eq!(lab.metric("oooi_dhcp_probes_total"), 0.0);
}

#[test]
fn without_the_ping_sysctl_the_server_says_probing_is_unavailable_and_still_serves() {
    let mut lab = Lab::new(&config(300));
    let client = lab.add_client("02:00:00:00:5a:06");
    lab.start_server();
    assert!(
        lab.log().contains("conflict probe unavailable"),
        "{}",
        lab.log()
    );
    assert_eq!(lab.metric("oooi_dhcp_probe_unavailable"), 1.0);
    let (events, idx) = lab.udhcpc(&client, &["-q", "-n"]);
    assert!(lab.wait_child(idx, 15), "{}", lab.log());
    assert!(bound_ip(&events).is_some());
}

#[test]
fn a_host_answering_ping_for_every_pool_address_cannot_empty_the_pool() {
    let mut lab = Lab::new(&config(300));
    let ns = lab.server_ns.clone();
    allow_ping_sockets(&ns);
    // One host holds (and answers ping for) all ten pool addresses.
    let squatter = lab.add_client("02:00:00:00:66:66");
    for n in 100..=109 {
        // The first with the subnet's prefix: its route carries the answers.
        let prefix = if n == 100 { 24 } else { 32 };
        sh(&[
            "ip",
            "-n",
            &squatter,
            "addr",
            "add",
            &format!("192.0.2.{n}/{prefix}"),
            "dev",
            "c0",
        ]);
    }
    lab.start_server();
    // Eight clients, one after the other: the squatter's answers hold back
    // at most four addresses, the six others are offered anyway, and once
    // those are spent the address with the oldest conflict is.
    let mut got = std::collections::BTreeSet::new();
    let started = Instant::now();
    for i in 1..=8 {
        let client = lab.add_client(&format!("02:00:00:00:67:{i:02x}"));
        let (events, idx) = lab.udhcpc(&client, &["-q", "-n", "-t", "5", "-T", "2"]);
        assert!(
            lab.wait_child(idx, 30),
            "client {i} got no address\n{}",
            lab.log()
        );
        let ip = bound_ip(&events).expect("bound");
        assert!(got.insert(ip.clone()), "{ip} given twice");
    }
    let log = lab.log();
    for m in [
        "oooi_dhcp_probe_answers_ignored_total",
        "oooi_dhcp_offers_of_quarantined_addresses_total",
    ] {
        assert!(lab.metric(m) >= 1.0, "{m}: {}\n{log}", lab.metric(m));
    }
    assert!(log.contains("answers for many addresses"), "{log}");
    assert!(log.contains("02:00:00:00:66:66"), "{log}");
    assert!(log.contains("free pool spent"), "{log}");
    eprintln!(
        "a host answering for every pool address: 8 clients bound in {:.1} s, {} answers ignored, {} quarantined addresses offered",
        started.elapsed().as_secs_f64(),
        lab.metric("oooi_dhcp_probe_answers_ignored_total"),
        lab.metric("oooi_dhcp_offers_of_quarantined_addresses_total")
    );
}
