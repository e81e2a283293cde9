//! Faults a production VLAN meets, with the real `oooi-dhcp` binary and
//! real clients in network namespaces: reservations that move, a reserved
//! address held by someone else, a released address coming back, relayed
//! requests with impossible relay addresses, a damaged lease log.

mod lab;

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use dhcproto::v4::{DhcpOption, Message, MessageType};
use dhcproto::{Decodable, Decoder, Encodable};
use lab::{Lab, config, read_events};

fn bound_ip(events: &std::path::Path) -> Option<String> {
    read_events(events)
        .into_iter()
        .rev()
        .find(|e| e.reason == "bound")
        .map(|e| e.get("ip").to_string())
}

/// Runs `udhcpc -q` (get a lease, then exit) in `ns`; the address it got.
fn lease_once(lab: &mut Lab, ns: &str) -> Option<String> {
    let (events, idx) = lab.udhcpc(ns, &["-q", "-n"]);
    lab.wait_child(idx, 15).then(|| bound_ip(&events)).flatten()
}

fn with_reservation(base: &str, mac: &str, ip: &str) -> String {
    format!("{base}  - {{ mac: \"{mac}\", ip: {ip} }}\n")
}

fn reload(lab: &Lab, yaml: &str, nth: f64) {
    lab.swap_config(yaml);
    lab.wait_for(5, "reload applied", || {
        lab.metric("oooi_dhcp_reloads_total{result=\"ok\"}") >= nth
    });
}

#[test]
fn a_moved_reservation_frees_the_old_address_for_its_next_owner_at_once() {
    let mut lab = Lab::new(&config(150, 50));
    let a = lab.add_client("02:00:00:00:00:aa");
    let b = lab.add_client("02:00:00:00:00:bb");
    lab.start_server();
    assert_eq!(lease_once(&mut lab, &a).as_deref(), Some("192.0.2.50"));

    // aa's reservation moves to .60 and .50 becomes bb's.
    reload(
        &lab,
        &with_reservation(&config(150, 60), "02:00:00:00:00:bb", "192.0.2.50"),
        1.0,
    );
    lab.wait_for(5, "the move counted", || {
        lab.metric("oooi_dhcp_reservation_moves_total") == 1.0
    });
    assert!(
        !lab.leases()
            .iter()
            .any(|(ip, _, _)| *ip == Ipv4Addr::new(192, 0, 2, 50)),
        "the old binding is released in the store: {:?}",
        lab.leases()
    );
    // The next owner gets it now, not when aa's lease (an hour) ends.
    assert_eq!(lease_once(&mut lab, &b).as_deref(), Some("192.0.2.50"));
    assert_eq!(lease_once(&mut lab, &a).as_deref(), Some("192.0.2.60"));
    assert_eq!(
        lab.metric("oooi_dhcp_reserved_address_conflicts_total"),
        0.0
    );
}

#[test]
fn a_reservation_for_a_client_with_a_dynamic_lease_releases_that_lease() {
    let mut lab = Lab::new(&config(150, 50));
    let c = lab.add_client("02:00:00:00:00:cc");
    let d = lab.add_client("02:00:00:00:00:dd");
    lab.start_server();
    assert_eq!(lease_once(&mut lab, &c).as_deref(), Some("192.0.2.100"));
    reload(
        &lab,
        &with_reservation(&config(150, 50), "02:00:00:00:00:cc", "192.0.2.70"),
        1.0,
    );
    lab.wait_for(5, "the move counted", || {
        lab.metric("oooi_dhcp_reservation_moves_total") == 1.0
    });
    // The pool address is free for the next client right away.
    assert_eq!(lease_once(&mut lab, &d).as_deref(), Some("192.0.2.100"));
    assert_eq!(lease_once(&mut lab, &c).as_deref(), Some("192.0.2.70"));
}

#[test]
fn a_reserved_address_held_by_another_client_is_refused_counted_and_logged_with_both_macs() {
    let mut lab = Lab::new(&config(150, 50));
    let holder = lab.add_client("02:00:00:00:00:cc");
    let owner = lab.add_client("02:00:00:00:00:dd");
    lab.start_server();
    assert_eq!(
        lease_once(&mut lab, &holder).as_deref(),
        Some("192.0.2.100")
    );
    // .100 is reserved for dd while cc still holds it.
    reload(
        &lab,
        &with_reservation(&config(150, 50), "02:00:00:00:00:dd", "192.0.2.100"),
        1.0,
    );
    assert_eq!(lease_once(&mut lab, &owner), None, "no offer while held");
    lab.wait_for(5, "conflict counted", || {
        lab.metric("oooi_dhcp_reserved_address_conflicts_total") >= 1.0
    });
    let log = lab.log();
    let line = log
        .lines()
        .find(|l| l.contains("reserved address is held by another client"))
        .unwrap_or_else(|| panic!("no conflict line in:\n{log}"));
    assert!(
        line.contains("02:00:00:00:00:dd") && line.contains("02:00:00:00:00:cc"),
        "{line}"
    );
}

#[test]
fn a_released_address_comes_back_to_its_client_while_never_used_ones_remain() {
    let mut lab = Lab::new(&config(150, 50));
    let a = lab.add_client("02:00:00:00:05:01");
    let b = lab.add_client("02:00:00:00:05:02");
    lab.start_server();
    let (events, idx) = lab.udhcpc(&a, &[]);
    lab.wait_for(10, "bound", || bound_ip(&events).is_some());
    let first = bound_ip(&events).expect("bound");
    assert_eq!(first, "192.0.2.100");
    // RELEASE (SIGUSR2), then the client goes away.
    lab.signal(idx, libc::SIGUSR2);
    lab.wait_for(10, "release counted", || {
        lab.metric("oooi_dhcp_messages_received_total{type=\"release\"}") >= 1.0
    });
    lab.signal(idx, libc::SIGTERM);
    // Another client comes: it gets a never-used address, not the released one.
    assert_eq!(lease_once(&mut lab, &b).as_deref(), Some("192.0.2.101"));
    // The VM that released returns and gets its address back.
    assert_eq!(lease_once(&mut lab, &a).as_deref(), Some(first.as_str()));
}

/// A relayed DISCOVER from the relay namespace with `giaddr`; the reply
/// seen on port 67 of 192.0.2.9, if any.
fn relayed_discover(ns: &str, giaddr: Ipv4Addr, n: u8) -> Option<Message> {
    lab::in_netns(ns, move || {
        let sock = UdpSocket::bind((Ipv4Addr::new(192, 0, 2, 9), 67)).expect("bind relay port");
        sock.set_read_timeout(Some(Duration::from_millis(700)))
            .expect("timeout");
        let mut m = Message::default();
        m.set_xid(u32::from(n))
            .set_chaddr(&[2, 0, 0, 0, 6, n])
            .set_giaddr(giaddr)
            .set_hops(1);
        m.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        sock.send_to(
            &m.to_vec().expect("encode"),
            (Ipv4Addr::new(192, 0, 2, 2), 67),
        )
        .expect("send");
        let mut buf = [0u8; 1500];
        let (len, _) = sock.recv_from(&mut buf).ok()?;
        Message::decode(&mut Decoder::new(&buf[..len])).ok()
    })
}

#[test]
fn relayed_requests_through_impossible_relays_get_no_answer() {
    let mut lab = Lab::new(&config(150, 50));
    let relay = lab.add_client("02:00:00:00:06:ff");
    lab::sh(&[
        "ip",
        "-n",
        &relay,
        "addr",
        "add",
        "192.0.2.9/24",
        "dev",
        "c0",
    ]);
    lab.start_server();
    // A relay on the subnet is answered.
    let ok = relayed_discover(&relay, Ipv4Addr::new(192, 0, 2, 9), 1).expect("an offer");
    assert_eq!(ok.opts().msg_type(), Some(MessageType::Offer));

    // A relay of another network: no answer (this server serves 192.0.2.0/24 only).
    assert!(relayed_discover(&relay, Ipv4Addr::new(198, 51, 100, 9), 2).is_none());
    lab.wait_for(5, "counted", || {
        lab.metric("oooi_dhcp_packets_dropped_total{reason=\"relay_outside_subnet\"}") == 1.0
    });
    // Addresses no relay can have are never used as a destination: the
    // server's own address (it would answer itself), loopback, 0.0.0.x,
    // broadcast.
    let bad = [
        Ipv4Addr::new(192, 0, 2, 2),
        Ipv4Addr::LOCALHOST,
        Ipv4Addr::new(0, 0, 0, 7),
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(192, 0, 2, 255),
    ];
    for (i, g) in bad.iter().enumerate() {
        assert!(relayed_discover(&relay, *g, 10 + i as u8).is_none(), "{g}");
    }
    lab.wait_for(5, "counted", || {
        lab.metric("oooi_dhcp_packets_dropped_total{reason=\"bad_relay_address\"}")
            == bad.len() as f64
    });
    // Nothing of ours came back to the server itself.
    assert_eq!(
        lab.metric("oooi_dhcp_packets_dropped_total{reason=\"not_a_request\"}"),
        0.0
    );
    lab.wait_for(3, "only the on-subnet offer held", || {
        lab.metric("oooi_dhcp_leases_offered") == 1.0
    });
}

#[test]
fn a_flipped_bit_mid_log_loses_only_that_lease_and_the_server_says_so() {
    let mut lab = Lab::new(&config(150, 50));
    let nss: Vec<String> = (1..=4)
        .map(|i| lab.add_client(&format!("02:00:00:00:07:0{i}")))
        .collect();
    lab.start_server();
    let mut got = Vec::new();
    for ns in &nss {
        got.push(lease_once(&mut lab, ns).expect("lease"));
    }
    lab.kill9_server();
    // One bit of the second record (the second client's lease) flips on disk.
    let log = lab.data_dir().join("leases.log");
    let mut bytes = std::fs::read(&log).expect("log");
    bytes[27 + 14] ^= 0x10;
    std::fs::write(&log, &bytes).expect("write");
    lab.start_server();
    let leases: Vec<String> = lab
        .leases()
        .iter()
        .map(|(ip, _, _)| ip.to_string())
        .collect();
    assert_eq!(
        leases,
        vec![got[0].clone(), got[2].clone(), got[3].clone()],
        "every good record, also after the damaged one"
    );
    assert_eq!(lab.metric("oooi_dhcp_store_dropped_records_total"), 1.0);
    let text = lab.log();
    assert!(text.contains("lease log record damaged"), "{text}");
    assert!(
        text.contains(&got[1]),
        "the log names what was dropped:\n{text}"
    );
    let aside: Vec<_> = std::fs::read_dir(lab.data_dir())
        .expect("data dir")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("leases.log.damaged-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the file as found is kept aside");
    assert_eq!(
        std::fs::read(aside[0].path()).expect("aside")[..bytes.len()],
        bytes[..]
    );
}

#[test]
fn a_damaged_records_address_stays_held_back_across_a_second_restart_within_its_lease() {
    // Four pool addresses (.100-.103), an hour's lease.
    let mut lab = Lab::new(&config(103, 50));
    let holder = lab.add_client("02:00:00:00:08:01");
    let filler = lab.add_client("02:00:00:00:08:05");
    let others: Vec<String> = (2..=4)
        .map(|i| lab.add_client(&format!("02:00:00:00:08:0{i}")))
        .collect();
    lab.start_server();
    let held = lease_once(&mut lab, &holder).expect("lease");
    let filled = lease_once(&mut lab, &filler).expect("lease");
    lab.kill9_server();
    // One bit of the holder's record (the first; its MAC) flips on disk:
    // the record is dropped at start and its address held back.
    let log = lab.data_dir().join("leases.log");
    let mut bytes = std::fs::read(&log).expect("log");
    bytes[14] ^= 0x10;
    std::fs::write(&log, &bytes).expect("write");
    lab.start_server();
    lab.wait_for(5, "the address held back", || {
        lab.metric("oooi_dhcp_leases_lost") == 1.0
    });
    let file = std::fs::read_to_string(lab.data_dir().join("held-back")).expect("held-back file");
    assert!(file.starts_with(&format!("{held} ")), "{file}");
    // A second restart, within the lease: the damaged record may be gone
    // from the log by now; the hold-back is not.
    lab.kill9_server();
    lab.start_server();
    lab.wait_for(5, "the address held back again", || {
        lab.metric("oooi_dhcp_leases_lost") == 1.0
    });
    // Three new clients for the two free addresses: the held one is never
    // offered, the third client gets nothing.
    let mut got = vec![filled];
    for ns in &others[..2] {
        got.push(lease_once(&mut lab, ns).expect("lease"));
    }
    assert!(
        !got.contains(&held),
        "{held} offered: {got:?}\n{}",
        lab.log()
    );
    let (events, idx) = lab.udhcpc(&others[2], &["-q", "-n", "-t", "3", "-T", "1"]);
    assert!(!lab.wait_child(idx, 15), "the third client got an address");
    assert_eq!(bound_ip(&events), None, "{}", lab.log());
    assert!(
        lab.leases().iter().all(|(ip, _, _)| ip.to_string() != held),
        "{:?}",
        lab.leases()
    );
}
