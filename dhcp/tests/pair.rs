//! A pair of `oooi-dhcp` servers on one VLAN (a bridge), joined by a
//! separate link standing in for the pod network that carries their lease
//! updates, with real clients (busybox `udhcpc`, ISC `dhclient`, `perfdhcp`)
//! in network namespaces: load balancing, `kill -9` of either server,
//! renewals and rebinding through the survivor, a new worker during the
//! outage, the return and resync, and a scan of both lease stores for an
//! address held twice. Needs root.

mod lab;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use lab::pair::{PairLab, TOKEN, last, mac_for};
use lab::{read_events, sh};

#[test]
fn a_pair_splits_clients_survives_kill_9_rebinds_through_the_survivor_and_resyncs() {
    let mut p = PairLab::new();
    let primaries: Vec<String> = (1..=3).map(|i| mac_for(true, i, true)).collect();
    let secondaries: Vec<String> = (1..=3).map(|i| mac_for(false, i, true)).collect();
    let p_ns: Vec<String> = primaries.iter().map(|m| p.lab.add_client(m)).collect();
    let s_ns: Vec<String> = secondaries.iter().map(|m| p.lab.add_client(m)).collect();
    let late = mac_for(true, 40, true);
    let late_ns = p.lab.add_client(&late);
    let dh = mac_for(false, 50, false);
    let dh_ns = p.lab.add_client(&dh);
    p.lab.start_server();
    p.start_b();
    p.both_balancing();

    // Normal leases split between the servers by the client's hash.
    let mut running = Vec::new();
    for (ns, want) in p_ns
        .iter()
        .map(|n| (n, "192.0.2.2"))
        .chain(s_ns.iter().map(|n| (n, "192.0.2.5")))
    {
        let (events, idx) = p.lab.udhcpc(ns, &[]);
        p.wait(15, "udhcpc bound", || last(&events, "bound").is_some());
        let b = last(&events, "bound").expect("bound");
        assert_eq!(b.get("serverid"), want, "{ns}");
        running.push((events, idx, b.get("ip").to_string(), want));
    }
    let got = p.lab.dhclient(&dh_ns);
    let bound = got
        .iter()
        .rev()
        .find(|e| e.reason == "BOUND")
        .expect("dhclient BOUND");
    assert_eq!(bound.get("serverid"), "192.0.2.5");
    let dh_ip = bound.get("ip").to_string();
    // The primary allocates from the lower half of the pool, the secondary
    // from the upper half.
    for (_, _, ip, server) in &running {
        let last_octet: u8 = ip
            .rsplit('.')
            .next()
            .and_then(|o| o.parse().ok())
            .expect("ip");
        assert_eq!(
            last_octet < 150,
            *server == "192.0.2.2",
            "{ip} from {server}"
        );
    }
    // Every ACKed lease is in both stores (sent to the other server before the ACK).
    for a in [true, false] {
        let have: HashSet<String> = p
            .leases(a)
            .into_iter()
            .map(|(ip, _, _)| ip.to_string())
            .collect();
        for (_, _, ip, _) in &running {
            assert!(
                have.contains(ip),
                "{ip} missing on {}",
                if a { "A" } else { "B" }
            );
        }
        assert!(have.contains(&dh_ip));
    }
    p.duplicate_scan();

    // kill -9 the secondary: its clients rebind through the primary at T2
    // and keep their addresses.
    p.kill9_b();
    // Silent on the pair link and on the VLAN: the primary takes over
    // within seconds.
    p.wait(10, "the primary takes over", || {
        p.metric(true, "oooi_dhcp_pair_state") == 2.0
    });
    for (events, _, ip, server) in running.iter().filter(|r| r.3 == "192.0.2.5") {
        p.wait(75, "rebind through the survivor", || {
            read_events(events)
                .iter()
                .any(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.2")
        });
        let e = read_events(events)
            .into_iter()
            .rev()
            .find(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.2")
            .expect("renew");
        assert_eq!(
            &e.get("ip").to_string(),
            ip,
            "{server} client kept its address"
        );
    }
    assert_eq!(p.metric(true, "oooi_dhcp_pair_state"), 2.0, "took over");
    assert!(
        p.lab
            .log()
            .contains("silent on the pair link and on the VLAN"),
        "{}",
        p.lab.log()
    );
    // The primary's own clients renew as usual meanwhile.
    for (events, _, ip, _) in running.iter().filter(|r| r.3 == "192.0.2.2") {
        p.wait(75, "renew", || {
            read_events(events).iter().any(|e| e.reason == "renew")
        });
        assert_eq!(
            &last(events, "renew").expect("renew").get("ip").to_string(),
            ip
        );
    }
    // A new worker boots during the outage (its hash is the primary's, but
    // any client is served now).
    let (events, _) = p.lab.udhcpc(&late_ns, &[]);
    p.wait(15, "new worker bound during the outage", || {
        last(&events, "bound").is_some()
    });
    let late_ip = last(&events, "bound").expect("bound").get("ip").to_string();
    p.duplicate_scan();

    // The secondary returns: it syncs before it answers, and the pair goes
    // back to load balancing.
    p.start_b();
    p.both_balancing();
    assert!(p.b_log().contains("leases exchanged"), "{}", p.b_log());
    let b_has: HashSet<String> = p
        .leases(false)
        .into_iter()
        .map(|(ip, _, _)| ip.to_string())
        .collect();
    assert!(
        b_has.contains(&late_ip),
        "the lease of the outage reached the returning server"
    );
    // The secondary answers its clients again.
    let fresh = mac_for(false, 60, true);
    let fresh_ns = p.lab.add_client(&fresh);
    let (events, idx) = p.lab.udhcpc(&fresh_ns, &["-q", "-n"]);
    assert!(p.lab.wait_child(idx, 15), "{}", p.logs());
    assert_eq!(
        last(&events, "bound").expect("bound").get("serverid"),
        "192.0.2.5"
    );
    p.duplicate_scan();

    // The same the other way round: kill -9 the primary.
    p.lab.kill9_server();
    p.wait(10, "the secondary takes over", || {
        p.metric(false, "oooi_dhcp_pair_state") == 2.0
    });
    for (events, _, ip, _) in running.iter().filter(|r| r.3 == "192.0.2.2") {
        p.wait(75, "rebind through the secondary", || {
            read_events(events)
                .iter()
                .any(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.5")
        });
        let e = read_events(events)
            .into_iter()
            .rev()
            .find(|e| e.reason == "renew" && e.get("serverid") == "192.0.2.5")
            .expect("renew");
        assert_eq!(&e.get("ip").to_string(), ip);
    }
    p.lab.start_server();
    p.both_balancing();
    p.duplicate_scan();
}

#[test]
fn the_pair_api_refuses_a_wrong_token() {
    let mut p = PairLab::new();
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    let ns = p.lab.server_ns.clone();
    let (status, ok) = lab::in_netns(&ns, || {
        let bad = oooi_dhcp::peer::Client::new(
            "10.99.0.2:9068",
            "wrong-token-0123456789",
            Duration::from_secs(2),
        );
        let good = oooi_dhcp::peer::Client::new("10.99.0.2:9068", TOKEN, Duration::from_secs(2));
        (
            bad.call("GET", "/pair/v1/leases", &[])
                .map(|r| r.0)
                .unwrap_or(0),
            good.call("GET", "/pair/v1/state", &[])
                .map(|r| r.0)
                .unwrap_or(0),
        )
    });
    assert_eq!((status, ok), (401, 200));
    assert!(p.metric(false, "oooi_dhcp_pair_unauthorized_total") >= 1.0);
}

/// perfdhcp (relay-style DORAs broadcast to both servers, the same 80
/// clients every round) against the pair, with one server killed with
/// `kill -9` mid-burst, three times (alternating): after each, no address
/// is held twice across both lease stores, and the killed server returns,
/// syncs and balancing resumes.
#[test]
fn perfdhcp_against_the_pair_with_kill_9_mid_burst_three_times_never_holds_an_address_twice() {
    let mut p = PairLab::new();
    let ns = p.lab.add_client("02:00:00:00:0f:01");
    sh(&["ip", "-n", &ns, "addr", "add", "192.0.2.9/24", "dev", "c0"]);
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    for round in 0..3 {
        let perf = Command::new("ip")
            .args([
                "netns", "exec", &ns, "perfdhcp", "-4", "-l", "c0", "-r", "300", "-R", "80",
            ])
            .args(["-p", "4", "-d", "1", "-b", "mac=02:0f:00:00:00:00"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("perfdhcp");
        std::thread::sleep(Duration::from_millis(1500));
        let kill_a = round % 2 == 1;
        if kill_a {
            p.lab.kill9_server();
        } else {
            p.kill9_b();
        }
        let out = perf.wait_with_output().expect("perfdhcp output");
        let text = String::from_utf8_lossy(&out.stdout);
        let rate = text
            .lines()
            .find(|l| l.trim_start().starts_with("Rate:"))
            .unwrap_or("no rate line")
            .trim()
            .to_string();
        eprintln!(
            "round {round}: killed {} mid-burst; perfdhcp {rate}",
            if kill_a { "A" } else { "B" }
        );
        let exchanges: f64 = rate
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(exchanges > 0.0, "round {round}: the burst ran: {text}");
        p.duplicate_scan();
        let acked: usize = p.leases(!kill_a).len();
        assert!(
            acked > 0,
            "the survivor holds leases after round {round}\n{text}"
        );
        if kill_a {
            p.lab.start_server();
        } else {
            p.start_b();
        }
        p.both_balancing();
        p.duplicate_scan();
    }
}
