//! A flood on the pair API with a valid token costs the VLAN's clients
//! nothing: 100,000 records that contradict live bindings, posted to
//! server B in the largest bodies it takes, back to back, while 20 real
//! clients (busybox `udhcpc`, ISC `dhclient`) renew and a probe client
//! times DISCOVER → OFFER against B every 100 ms. Every body is refused
//! (409) and counted, B merges them in slices off its DHCP turns, no
//! client loses its address, and the times are printed (measured, not
//! asserted tightly: the machine is shared). Needs root.

mod lab;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dhcproto::v4::{DhcpOption, Flags, Message, MessageType};
use dhcproto::{Decodable, Decoder, Encodable};
use lab::pair::{PairLab, TOKEN, last, mac_for};
use lab::read_events;
use oooi_dhcp::config::Mac;
use oooi_dhcp::lease_store::{StoredLease, encode_leases};

/// DISCOVER → OFFER times (and the DISCOVERs left unanswered for 3 s) of
/// a client in `ns` with `mac`, every 100 ms until `stop`.
fn time_offers(
    ns: &str,
    mac: [u8; 6],
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<Duration>, usize)> {
    lab::spawn_in_netns(ns, move || {
        let s = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .expect("socket");
        s.set_reuse_address(true).expect("reuse");
        s.set_broadcast(true).expect("broadcast");
        s.bind_device(Some(b"c0")).expect("bind device");
        s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, 68)).into())
            .expect("bind 68");
        let sock: std::net::UdpSocket = s.into();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let (mut times, mut lost) = (Vec::new(), 0);
        let mut xid = 0x5100_0000u32;
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::Relaxed) {
            xid += 1;
            let mut m = Message::default();
            m.set_xid(xid)
                .set_chaddr(&mac)
                .set_flags(Flags::default().set_broadcast());
            m.opts_mut()
                .insert(DhcpOption::MessageType(MessageType::Discover));
            let sent = Instant::now();
            sock.send_to(&m.to_vec().expect("encode"), (Ipv4Addr::BROADCAST, 67))
                .expect("send");
            let got = loop {
                if sent.elapsed() > Duration::from_secs(3) {
                    break None;
                }
                let Ok((n, _)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                if let Ok(r) = Message::decode(&mut Decoder::new(&buf[..n]))
                    && r.xid() == xid
                    && r.opts().msg_type() == Some(MessageType::Offer)
                {
                    break Some(sent.elapsed());
                }
            };
            match got {
                Some(t) => times.push(t),
                None => lost += 1,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (times, lost)
    })
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn max(d: &[Duration]) -> Duration {
    d.iter().copied().max().unwrap_or_default()
}

#[test]
fn a_flood_of_100000_conflicting_records_with_a_valid_token_costs_the_clients_nothing() {
    let mut p = PairLab::new();
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    // 20 clients: 16 udhcpc (renewals forced during the flood) and 4
    // dhclient (renewing every 8 s by themselves), of both scopes.
    let mut udhcpc = Vec::new();
    for i in 0..16u8 {
        let ns = p.lab.add_client(&mac_for(i % 2 == 0, 20 + i, true));
        udhcpc.push(p.lab.udhcpc(&ns, &[]));
    }
    let mut live = Vec::new();
    for (events, idx) in &udhcpc {
        let ip = p.wait_bound(30, "udhcpc bound", events);
        live.push((events.clone(), *idx, ip));
    }
    let mut dhclient_events = Vec::new();
    for i in 0..4u8 {
        let ns = p.lab.add_client(&mac_for(i % 2 == 0, 50 + i, false));
        assert!(p.lab.dhclient(&ns).iter().any(|e| e.reason == "BOUND"));
        dhclient_events.push(p.lab.dir.path().join(format!("dhclient-{ns}.events")));
    }
    let dhclient_renewals = || {
        dhclient_events
            .iter()
            .flat_map(|f| read_events(f))
            .filter(|e| e.reason == "RENEW")
            .count()
    };
    // The probe client, of B's scope (hashed by MAC: no client id).
    let probe_mac = mac_for(false, 99, false);
    let probe_ns = p.lab.add_client(&probe_mac);
    let mac = Mac::parse(&probe_mac).expect("mac").0;
    let stop = Arc::new(AtomicBool::new(false));
    let before = time_offers(&probe_ns, mac, stop.clone());
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let (quiet, quiet_lost) = before.join().expect("probe");

    // 100,000 records, each giving a live client's address to another MAC,
    // in bodies of the most records B takes (4,096 here).
    let t = now();
    let per_body = 4096usize;
    let records: Vec<StoredLease> = (0..100_000u32)
        .map(|i| StoredLease {
            ip: live[i as usize % live.len()].2,
            mac: Mac([2, 0xfe, (i >> 16) as u8, (i >> 8) as u8, i as u8, 7]),
            expires_unix: t + 50,
        })
        .collect();
    let bodies: Vec<std::path::PathBuf> = records
        .chunks(per_body)
        .enumerate()
        .map(|(n, c)| {
            let f = p.lab.dir.path().join(format!("flood-{n}.bin"));
            std::fs::write(&f, encode_leases(c)).expect("body");
            f
        })
        .collect();
    // A record of an address of B's half is refused by the half rule first,
    // one of A's half for contradicting B's live binding.
    let refused = || {
        [
            "oooi_dhcp_pair_records_refused_total{reason=\"conflict\"}",
            "oooi_dhcp_pair_records_refused_total{reason=\"a_new_binding_in_the_receiving_half_of_the_pool\"}",
        ]
        .iter()
        .map(|m| p.metric(false, m).max(0.0))
        .sum::<f64>()
    };
    let refused_before = refused();
    let renewals_before = dhclient_renewals();
    let stop = Arc::new(AtomicBool::new(false));
    let during = time_offers(&probe_ns, mac, stop.clone());
    let flood = Instant::now();
    let mut posts = Vec::new();
    for (n, body) in bodies.iter().enumerate() {
        if n == bodies.len() / 2 {
            for (_, idx, _) in &live {
                p.lab.signal(*idx, libc::SIGUSR1);
            }
        }
        let started = Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", &p.lab.server_ns, "curl", "-sS", "-m", "60"])
            .args(["-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
            .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
            .args(["-H", "Content-Type: application/octet-stream"])
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .arg("http://10.99.0.2:9068/pair/v1/leases")
            .output()
            .expect("curl");
        let status = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(status, "409", "body {n}\n{}", p.logs());
        posts.push(started.elapsed());
        assert_eq!(
            p.b_healthy(),
            Some(true),
            "B's DHCP loop stalled\n{}",
            p.logs()
        );
    }
    let flood_time = flood.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (times, lost) = during.join().expect("probe");

    assert_eq!(
        refused() - refused_before,
        100_000.0,
        "every record refused and counted"
    );
    // Nothing of it stored, nothing of it spread to A.
    for a in [true, false] {
        let e = p.expiries(a);
        assert!(
            e.values().all(|(m, _)| !m.starts_with("02:fe:")),
            "a flood record stored on {}",
            if a { "A" } else { "B" }
        );
    }
    // Every udhcpc client renewed (forced mid-flood) with its address; the
    // dhclients kept renewing; no NAK; both servers still load balance.
    for (events, _, ip) in &live {
        p.wait(20, "a renewal", || {
            read_events(events).iter().any(|e| e.reason == "renew")
        });
        assert_eq!(
            last(events, "renew").expect("renew").get("ip"),
            ip.to_string()
        );
        assert!(!read_events(events).iter().any(|e| e.reason == "nak"));
    }
    assert!(dhclient_renewals() > renewals_before, "{}", p.logs());
    assert_eq!(p.metric(true, "oooi_dhcp_naks_total"), 0.0);
    assert_eq!(p.metric(false, "oooi_dhcp_naks_total"), 0.0);
    assert_eq!(p.metric(true, "oooi_dhcp_pair_state"), 1.0);
    assert_eq!(p.metric(false, "oooi_dhcp_pair_state"), 1.0);
    p.duplicate_scan();
    assert!(!times.is_empty());
    assert_eq!(lost, 0, "DISCOVERs unanswered for 3 s during the flood");
    let mut sorted = times.clone();
    sorted.sort();
    eprintln!(
        "flood: 100,000 records in {} bodies in {:.1} s (slowest POST {:.2} s); DISCOVER→OFFER quiet: max {:.1} ms over {} ({} lost); during: p50 {:.1} ms, max {:.1} ms over {} ({} lost)",
        bodies.len(),
        flood_time.as_secs_f64(),
        max(&posts).as_secs_f64(),
        max(&quiet).as_secs_f64() * 1000.0,
        quiet.len(),
        quiet_lost,
        sorted[sorted.len() / 2].as_secs_f64() * 1000.0,
        max(&times).as_secs_f64() * 1000.0,
        times.len(),
        lost
    );
}
