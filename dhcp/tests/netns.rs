//! End-to-end tests: the real `oooi-dhcp` binary in a network namespace,
//! real DHCP clients (busybox `udhcpc`, ISC `dhclient`) and a relay-style
//! client in namespaces joined by veth pairs to a bridge. Needs root, `ip`,
//! busybox and isc-dhcp-client (installed by `tools/dev setup`).

mod lab;

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable};
use lab::{Event, Lab, config, read_events, spawn_in_netns};

fn last_event(path: &std::path::Path, reason: &str) -> Option<Event> {
    read_events(path)
        .into_iter()
        .rev()
        .find(|e| e.reason == reason)
}

fn count_events(path: &std::path::Path, reason: &str) -> usize {
    read_events(path)
        .iter()
        .filter(|e| e.reason == reason)
        .count()
}

#[test]
fn udhcpc_gets_lease_with_options_renews_same_address_and_release_frees_it() {
    let mut lab = Lab::new(&config(150, 50));
    let ns = lab.add_client("02:00:00:00:00:01");
    lab.start_server();
    let (events, idx) = lab.udhcpc(&ns, &[]);
    lab.wait_for(10, "udhcpc bound", || {
        last_event(&events, "bound").is_some()
    });
    let b = last_event(&events, "bound").expect("bound");
    let ip: Ipv4Addr = b.get("ip").parse().expect("ip");
    assert!(
        (Ipv4Addr::new(192, 0, 2, 100)..=Ipv4Addr::new(192, 0, 2, 150)).contains(&ip),
        "{ip} outside the pool"
    );
    assert_eq!(b.get("subnet"), "255.255.255.0");
    assert_eq!(b.get("router"), "192.0.2.1");
    assert_eq!(b.get("dns"), "192.0.2.3");
    assert_eq!(b.get("domain"), "cluster.example");
    assert_eq!(b.get("serverid"), "192.0.2.2");
    assert_eq!(b.get("lease"), "3600");
    assert_eq!(b.get("mtu"), "1450");
    assert_eq!(
        b.get("staticroutes"),
        "10.0.0.0/8 192.0.2.1 0.0.0.0/0 192.0.2.1"
    );
    assert!(
        lab.leases()
            .contains(&(ip, "02:00:00:00:00:01".into(), "active".into()))
    );
    // The OFFER/ACK went by broadcast (no broadcast flag set, yet no ARP
    // entry added: the server holds no capability for that).
    let neigh = std::process::Command::new("ip")
        .args(["-n", &lab.server_ns, "neigh", "show", &ip.to_string()])
        .output()
        .expect("ip neigh");
    assert!(
        !String::from_utf8_lossy(&neigh.stdout).contains("02:00:00:00:00:01"),
        "the server added an ARP entry for {ip}"
    );

    // Renewal (SIGUSR1: a unicast REQUEST from ciaddr) keeps the address.
    lab.signal(idx, libc::SIGUSR1);
    lab.wait_for(10, "udhcpc renew", || count_events(&events, "renew") >= 1);
    assert_eq!(
        last_event(&events, "renew").expect("renew").get("ip"),
        ip.to_string()
    );

    // Release (SIGUSR2) frees it: the store no longer holds it.
    lab.signal(idx, libc::SIGUSR2);
    lab.wait_for(10, "release recorded", || {
        !lab.leases().iter().any(|(a, _, _)| *a == ip)
    });
    lab.wait_for(5, "active gauge back to 0", || {
        lab.metric("oooi_dhcp_leases_active") == 0.0
    });
    assert!(lab.metric("oooi_dhcp_messages_received_total{type=\"release\"}") >= 1.0);
}

#[test]
fn dhclient_gets_lease_with_options() {
    let mut lab = Lab::new(&config(150, 50));
    let ns = lab.add_client("02:00:00:00:00:02");
    lab.start_server();
    let events = lab.dhclient(&ns);
    let b = events
        .iter()
        .rev()
        .find(|e| e.reason == "BOUND")
        .unwrap_or_else(|| panic!("no BOUND in {events:?}"));
    let ip: Ipv4Addr = b.get("ip").parse().expect("ip");
    assert_eq!(ip, Ipv4Addr::new(192, 0, 2, 100));
    assert_eq!(b.get("subnet"), "255.255.255.0");
    assert_eq!(b.get("router"), "192.0.2.1");
    assert_eq!(b.get("dns"), "192.0.2.3");
    assert_eq!(b.get("domain"), "cluster.example");
    assert_eq!(b.get("mtu"), "1450");
    assert_eq!(b.get("serverid"), "192.0.2.2");
    assert_eq!(b.get("lease"), "3600");
    // RFC 3442 encoding: width, significant octets, gateway; default route added.
    assert_eq!(b.get("staticroutes"), "8 10 192 0 2 1 0 192 0 2 1");
    assert!(
        lab.leases()
            .contains(&(ip, "02:00:00:00:00:02".into(), "active".into()))
    );
}

#[test]
fn reserved_mac_gets_its_address_and_reservations_reload_without_restart() {
    let mut lab = Lab::new(&config(150, 50));
    let ns = lab.add_client("02:00:00:00:00:aa");
    lab.start_server();
    let (events, idx) = lab.udhcpc(&ns, &["-q"]);
    assert!(lab.wait_child(idx, 10), "udhcpc failed");
    let b = last_event(&events, "bound").expect("bound");
    assert_eq!(b.get("ip"), "192.0.2.50");
    assert_eq!(b.get("hostname"), "worker-0");

    // Kubernetes-style ..data swap moves the reservation.
    lab.swap_config(&config(150, 60));
    lab.wait_for(5, "reload applied", || {
        lab.metric("oooi_dhcp_reloads_total{result=\"ok\"}") >= 1.0
    });
    let (events, idx) = lab.udhcpc(&ns, &["-q"]);
    assert!(lab.wait_child(idx, 10), "udhcpc failed after reload");
    assert_eq!(
        last_event(&events, "bound").expect("bound").get("ip"),
        "192.0.2.60"
    );

    // A bad file is rejected; the last good config stays in force.
    lab.swap_config("server_ip: 192.0.2.2\nsubnet: nonsense\n");
    lab.wait_for(5, "rejection counted", || {
        lab.metric("oooi_dhcp_reloads_total{result=\"rejected\"}") >= 1.0
    });
    assert!(lab.log().contains("config rejected"));
    let (events, idx) = lab.udhcpc(&ns, &["-q"]);
    assert!(
        lab.wait_child(idx, 10),
        "udhcpc failed after a rejected reload"
    );
    assert_eq!(
        last_event(&events, "bound").expect("bound").get("ip"),
        "192.0.2.60"
    );
}

#[test]
fn two_clients_never_share_and_exhaustion_gives_no_offer() {
    // A pool of two addresses and three clients.
    let mut lab = Lab::new(&config(101, 50));
    let nss: Vec<String> = (1..=3)
        .map(|i| lab.add_client(&format!("02:00:00:00:01:0{i}")))
        .collect();
    lab.start_server();
    let runs: Vec<_> = nss.iter().map(|ns| lab.udhcpc(ns, &["-q", "-n"])).collect();
    let ok: Vec<bool> = runs.iter().map(|(_, i)| lab.wait_child(*i, 15)).collect();
    assert_eq!(ok.iter().filter(|b| **b).count(), 2, "{ok:?}");
    let ips: HashSet<String> = runs
        .iter()
        .filter_map(|(e, _)| last_event(e, "bound"))
        .map(|e| e.get("ip").to_string())
        .collect();
    assert_eq!(
        ips,
        HashSet::from(["192.0.2.100".to_string(), "192.0.2.101".to_string()])
    );
    assert!(lab.metric("oooi_dhcp_pool_exhausted_total") >= 1.0);
    assert!(lab.log().contains("no address to offer"));
    lab.wait_for(5, "utilisation gauge", || {
        lab.metric("oooi_dhcp_pool_utilisation_ratio") == 1.0
    });
}

#[test]
fn server_restart_keeps_every_lease_and_renewal_still_acks() {
    let mut lab = Lab::new(&config(150, 50));
    let ns1 = lab.add_client("02:00:00:00:02:01");
    let ns2 = lab.add_client("02:00:00:00:02:02");
    lab.start_server();
    let (events, idx) = lab.udhcpc(&ns1, &[]);
    lab.wait_for(10, "bound", || last_event(&events, "bound").is_some());
    let ip = last_event(&events, "bound")
        .expect("bound")
        .get("ip")
        .to_string();

    lab.kill9_server();
    lab.start_server();
    assert!(
        lab.leases()
            .iter()
            .any(|(a, m, s)| a.to_string() == ip && m == "02:00:00:00:02:01" && s == "active")
    );
    lab.signal(idx, libc::SIGUSR1);
    lab.wait_for(10, "renew after restart", || {
        count_events(&events, "renew") >= 1
    });
    assert_eq!(last_event(&events, "renew").expect("renew").get("ip"), ip);

    // Another client never gets the restored address.
    let (ev2, idx2) = lab.udhcpc(&ns2, &["-q"]);
    assert!(lab.wait_child(idx2, 10));
    assert_ne!(last_event(&ev2, "bound").expect("bound").get("ip"), ip);
}

/// SIGTERM (a pod deletion) stops the server at once with status 0; every
/// acknowledged lease is still there after the restart. Before the server
/// handled it, SIGTERM was ignored (PID 1 in its container) until SIGKILL
/// at the end of the grace period.
#[test]
fn sigterm_stops_the_server_at_once_and_keeps_every_lease() {
    let mut lab = Lab::new(&config(150, 50));
    let ns1 = lab.add_client("02:00:00:00:02:11");
    lab.start_server();
    let (events, idx) = lab.udhcpc(&ns1, &[]);
    lab.wait_for(10, "bound", || last_event(&events, "bound").is_some());
    let ip = last_event(&events, "bound")
        .expect("bound")
        .get("ip")
        .to_string();

    let (status, took) = lab
        .terminate_server(5)
        .expect("still running 5 s after SIGTERM");
    println!("exited {took:?} after SIGTERM: {status}");
    assert!(status.success(), "{status}\n{}", lab.log());
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(lab.log().contains("stopping"), "{}", lab.log());

    lab.start_server();
    assert!(
        lab.leases()
            .iter()
            .any(|(a, m, s)| a.to_string() == ip && m == "02:00:00:00:02:11" && s == "active")
    );
    lab.signal(idx, libc::SIGUSR1);
    lab.wait_for(10, "renew after restart", || {
        count_events(&events, "renew") >= 1
    });
    assert_eq!(last_event(&events, "renew").expect("renew").get("ip"), ip);
}

// ---- relay-style client (the path perfdhcp uses) ----

const RELAY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);

/// A client namespace with MAC `mac` that also holds [`RELAY`], to send
/// relayed (giaddr) requests from; returns its name.
fn add_relay(lab: &mut Lab, mac: &str) -> String {
    let ns = lab.add_client(mac);
    let addr = format!("{RELAY}/24");
    lab::sh(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "c0"]);
    ns
}
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

fn mac_of(n: u16) -> [u8; 6] {
    let b = n.to_be_bytes();
    [2, 0, 0, 3, b[0], b[1]]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn relayed(kind: MessageType, n: u16, xid: u32, opts: Vec<DhcpOption>) -> Vec<u8> {
    let mut m = Message::default();
    m.set_xid(xid)
        .set_chaddr(&mac_of(n))
        .set_giaddr(RELAY)
        .set_hops(1);
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    for o in opts {
        m.opts_mut().insert(o);
    }
    m.to_vec().expect("encode")
}

fn recv(sock: &UdpSocket) -> Option<Message> {
    let mut buf = [0u8; 1500];
    let (n, _) = sock.recv_from(&mut buf).ok()?;
    Message::decode(&mut Decoder::new(&buf[..n])).ok()
}

/// DORA for clients `ids` in rounds of 16, recording each ACK the moment
/// it arrives; stops early when `stop` is set.
fn burst(ids: Vec<u16>, acked: Arc<Mutex<Vec<(u16, Ipv4Addr)>>>, stop: Arc<AtomicBool>) {
    let sock = UdpSocket::bind((RELAY, 67)).expect("bind relay port");
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    for round in ids.chunks(16) {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        for &n in round {
            let _ = sock.send_to(
                &relayed(MessageType::Discover, n, u32::from(n), vec![]),
                (SERVER, 67),
            );
        }
        let mut offers = HashMap::new();
        let deadline = Instant::now() + Duration::from_millis(400);
        while offers.len() < round.len() && Instant::now() < deadline {
            if let Some(m) = recv(&sock)
                && m.opts().msg_type() == Some(MessageType::Offer)
            {
                offers.insert(m.xid() as u16, m.yiaddr());
            }
        }
        for (&n, &ip) in &offers {
            let _ = sock.send_to(
                &relayed(
                    MessageType::Request,
                    n,
                    u32::from(n),
                    vec![
                        DhcpOption::RequestedIpAddress(ip),
                        DhcpOption::ServerIdentifier(SERVER),
                    ],
                ),
                (SERVER, 67),
            );
        }
        let mut answered = 0;
        let deadline = Instant::now() + Duration::from_millis(400);
        while answered < offers.len() && Instant::now() < deadline {
            if let Some(m) = recv(&sock) {
                if m.opts().msg_type() == Some(MessageType::Ack) {
                    acked
                        .lock()
                        .expect("acked")
                        .push((m.xid() as u16, m.yiaddr()));
                }
                answered += 1;
            }
        }
    }
}

fn junk() -> Vec<Vec<u8>> {
    let base = relayed(
        MessageType::Discover,
        9999,
        7,
        vec![DhcpOption::ParameterRequestList(vec![
            OptionCode::SubnetMask,
            OptionCode::ClasslessStaticRoute,
        ])],
    );
    let mut out = Vec::new();
    let mut seed = 0x2545_f491_u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for i in 0..300usize {
        let mut b = base.clone();
        match i % 5 {
            0 => b.truncate(rnd() as usize % b.len()),
            1 => b[0] = 2, // wrong op
            2 => b[1] = 6, // wrong htype
            3 => {
                // bad option lengths
                let at = 240 + rnd() as usize % (b.len() - 240);
                b[at] = rnd() as u8;
            }
            _ => b = (0..rnd() % 600).map(|_| rnd() as u8).collect(),
        }
        out.push(b);
    }
    out
}

#[test]
fn malformed_packets_never_crash_and_kill_9_during_a_burst_loses_no_committed_lease() {
    let mut lab = Lab::new(&config(250, 50));
    let relay_ns = add_relay(&mut lab, "02:00:00:00:03:ff");
    lab.start_server();

    // Malformed datagrams first: the server keeps serving.
    lab::in_netns(&relay_ns, || {
        let s = UdpSocket::bind((RELAY, 0)).expect("bind");
        for b in junk() {
            let _ = s.send_to(&b, (SERVER, 67));
        }
    });
    lab.wait_for(5, "drops counted", || {
        lab.metric("oooi_dhcp_packets_dropped_total{reason=\"malformed\"}") >= 1.0
    });
    assert!(lab.server_alive(), "server died on malformed input");

    // A burst of relayed DORAs; kill -9 the server in the middle of it.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (a, s) = (acked.clone(), stop.clone());
    let t = spawn_in_netns(&relay_ns, move || burst((1..=110).collect(), a, s));
    lab.wait_for(20, "40 ACKs", || acked.lock().expect("acked").len() >= 40);
    lab.kill9_server();
    stop.store(true, Ordering::SeqCst);
    t.join().expect("burst thread");
    let before = acked.lock().expect("acked").clone();
    let ips: HashSet<Ipv4Addr> = before.iter().map(|(_, ip)| *ip).collect();
    assert_eq!(
        ips.len(),
        before.len(),
        "an address was ACKed twice: {before:?}"
    );

    // Every ACKed lease is in the store after the crash.
    lab.start_server();
    let stored: HashSet<(Ipv4Addr, String)> = lab
        .leases()
        .into_iter()
        .map(|(ip, mac, _)| (ip, mac))
        .collect();
    for (n, ip) in &before {
        assert!(
            stored.contains(&(*ip, mac_text(mac_of(*n)))),
            "ACKed lease {ip} of client {n} lost; store: {stored:?}"
        );
    }

    // New clients after the restart never get an address ACKed before it.
    let after = Arc::new(Mutex::new(Vec::new()));
    let a = after.clone();
    spawn_in_netns(&relay_ns, move || {
        burst((500..530).collect(), a, Arc::new(AtomicBool::new(false)))
    })
    .join()
    .expect("second burst");
    let after = after.lock().expect("after").clone();
    assert_eq!(after.len(), 30, "every new client gets a lease");
    for (_, ip) in &after {
        assert!(!ips.contains(ip), "{ip} handed out twice across the crash");
    }
    let all: HashSet<Ipv4Addr> = after.iter().map(|(_, ip)| *ip).collect();
    assert_eq!(all.len(), after.len());
}

/// A flood of relayed DORAs with no rounds: DISCOVERs go out in waves, and
/// each OFFER is answered with a REQUEST the moment it arrives, so many
/// batches and several fdatasyncs are in flight at once. Sends `true` on
/// `forty` once 40 ACKs arrived, and returns every ACK seen (client,
/// address) when 500 ms pass without a reply.
fn flood(ids: Vec<u16>, forty: std::sync::mpsc::Sender<bool>) -> Vec<(u16, Ipv4Addr)> {
    let sock = Arc::new(UdpSocket::bind((RELAY, 67)).expect("bind relay port"));
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let tx = sock.clone();
    let sender = std::thread::spawn(move || {
        for wave in ids.chunks(10) {
            for &n in wave {
                let _ = tx.send_to(
                    &relayed(MessageType::Discover, n, u32::from(n), vec![]),
                    (SERVER, 67),
                );
            }
            std::thread::sleep(Duration::from_millis(4));
        }
    });
    let mut acked = Vec::new();
    let mut signalled = false;
    while let Some(m) = recv(&sock) {
        let n = m.xid() as u16;
        match m.opts().msg_type() {
            Some(MessageType::Offer) => {
                let _ = sock.send_to(
                    &relayed(
                        MessageType::Request,
                        n,
                        m.xid(),
                        vec![
                            DhcpOption::RequestedIpAddress(m.yiaddr()),
                            DhcpOption::ServerIdentifier(SERVER),
                        ],
                    ),
                    (SERVER, 67),
                );
            }
            Some(MessageType::Ack) => {
                acked.push((n, m.yiaddr()));
                if acked.len() >= 40 && !signalled {
                    signalled = true;
                    let _ = forty.send(true);
                }
            }
            _ => {}
        }
    }
    sender.join().expect("flood sender");
    acked
}

/// kill -9 in the middle of a pipelined flood: every ACK that left the
/// server is in the store afterwards, and no address was ACKed twice.
fn kill_9_during_a_flood_loses_no_acked_lease(durability: &str) {
    let mut lab = Lab::new(&config(250, 50));
    lab.serve_args = vec!["--durability".into(), durability.into()];
    let relay_ns = add_relay(&mut lab, "02:00:00:00:03:fe");
    lab.start_server();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = spawn_in_netns(&relay_ns, move || flood((1..=140).collect(), tx));
    rx.recv_timeout(Duration::from_secs(20))
        .expect("40 ACKs during the flood");
    lab.kill9_server();
    let acked = t.join().expect("flood thread");
    assert!(acked.len() >= 40);
    assert!(
        acked.len() < 140,
        "the kill came after the flood ended ({} ACKs): nothing was in flight",
        acked.len()
    );
    let ips: HashSet<Ipv4Addr> = acked.iter().map(|(_, ip)| *ip).collect();
    assert_eq!(ips.len(), acked.len(), "an address was ACKed twice");
    lab.start_server();
    let stored: HashSet<(Ipv4Addr, String)> = lab
        .leases()
        .into_iter()
        .map(|(ip, mac, _)| (ip, mac))
        .collect();
    for (n, ip) in &acked {
        assert!(
            stored.contains(&(*ip, mac_text(mac_of(*n)))),
            "ACKed lease {ip} of client {n} lost ({durability}); store: {stored:?}"
        );
    }
}

#[test]
fn kill_9_during_a_pipelined_flood_loses_no_acked_lease_fsync() {
    kill_9_during_a_flood_loses_no_acked_lease("fsync");
}

#[test]
fn kill_9_during_a_pipelined_flood_loses_no_acked_lease_write() {
    kill_9_during_a_flood_loses_no_acked_lease("write");
}

/// Rounds of the same 140 clients renewing pile up records until the log is
/// compacted beside the decision loop; a kill -9 during the next flood then
/// loses no ACKed lease, and the compacted log replays cleanly.
#[test]
fn compaction_beside_traffic_then_kill_9_loses_no_acked_lease() {
    let mut lab = Lab::new(&config(250, 50));
    let relay_ns = add_relay(&mut lab, "02:00:00:00:03:fd");
    lab.start_server();
    let mut acked: HashMap<u16, Ipv4Addr> = HashMap::new();
    for _ in 0..14 {
        if lab.metric("oooi_dhcp_store_compactions_total") >= 1.0 {
            break;
        }
        let (tx, _rx) = std::sync::mpsc::channel();
        let got = spawn_in_netns(&relay_ns, move || flood((1..=140).collect(), tx))
            .join()
            .expect("flood");
        acked.extend(got);
    }
    assert!(
        lab.metric("oooi_dhcp_store_compactions_total") >= 1.0,
        "no compaction after 14 rounds"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let t = spawn_in_netns(&relay_ns, move || flood((1..=140).collect(), tx));
    rx.recv_timeout(Duration::from_secs(20))
        .expect("40 ACKs during the flood");
    lab.kill9_server();
    acked.extend(t.join().expect("flood thread"));
    lab.start_server();
    assert!(
        !lab.log().contains("torn or corrupt"),
        "the compacted log did not replay cleanly:\n{}",
        lab.log()
    );
    let stored: HashSet<(Ipv4Addr, String)> = lab
        .leases()
        .into_iter()
        .map(|(ip, mac, _)| (ip, mac))
        .collect();
    for (n, ip) in &acked {
        assert!(
            stored.contains(&(*ip, mac_text(mac_of(*n)))),
            "ACKed lease {ip} of client {n} lost; store: {stored:?}"
        );
    }
}

#[test]
fn dhcpcd_gets_lease_with_options() {
    // dhcpcd's third client implementation: it must bind from a reply sent
    // by broadcast (no ARP entry on the server), like udhcpc and dhclient.
    let mut lab = Lab::new(&config(150, 50));
    let ns = lab.add_client("02:00:00:00:00:05");
    lab.start_server();
    let out = std::process::Command::new("timeout")
        .args(["30", "ip", "netns", "exec", &ns, "dhcpcd"])
        // One shot, IPv4 only, wait for the lease, no link-local fallback,
        // no hook scripts (nothing written outside the namespace).
        .args(["-4", "-1", "-w", "-L", "-c", "/bin/true", "-f", "/dev/null"])
        .args(["--noipv4ll", "-t", "20", "c0"])
        .output()
        .expect("dhcpcd runs");
    assert!(
        out.status.success(),
        "dhcpcd: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let addrs = std::process::Command::new("ip")
        .args(["-n", &ns, "-4", "-o", "addr", "show", "dev", "c0"])
        .output()
        .expect("ip addr");
    let addrs = String::from_utf8_lossy(&addrs.stdout);
    assert!(addrs.contains("192.0.2.100/24"), "{addrs}");
    let routes = std::process::Command::new("ip")
        .args(["-n", &ns, "-4", "route"])
        .output()
        .expect("ip route");
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(routes.contains("default via 192.0.2.1"), "{routes}");
    assert!(lab.leases().contains(&(
        Ipv4Addr::new(192, 0, 2, 100),
        "02:00:00:00:00:05".into(),
        "active".into()
    )));
    // dhcpcd left running by an early exit would keep the lease: stop it.
    let _ = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "dhcpcd", "-x", "c0"])
        .output();
}
