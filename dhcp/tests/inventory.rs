//! The lease inventory API end to end: the real `oooi-dhcp` binary in a
//! network namespace, real clients (busybox `udhcpc`, ISC `dhclient`) and
//! crafted relayed requests (the relay-style client of the other suites),
//! asked over HTTP inside the server's namespace. Needs root, `ip`,
//! busybox and isc-dhcp-client.

mod lab;

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

use dhcproto::v4::{DhcpOption, Message, MessageType};
use dhcproto::{Decodable, Decoder, Encodable};
use lab::{Lab, allow_ping_sockets, config, in_netns, read_events, sh, spawn_in_netns};
use oooi_dhcp_inventory::{
    CLIENTS_REMEMBERED, LeasePage, LeaseRow, LeaseState, PoolReport, RefusalReason, ServerRole, Why,
};

const TOKEN: &str = "inventory-token-0123456789";
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const RELAY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);

/// A lab whose server serves the inventory on 127.0.0.1:9069.
fn lab_with_inventory(yaml: &str) -> Lab {
    let mut lab = Lab::new(yaml);
    let token = lab.dir.path().join("inventory-token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    lab.serve_args = vec![
        "--inventory-listen".into(),
        "127.0.0.1:9069,127.0.0.2:9069".into(),
        "--inventory-token-file".into(),
        token.display().to_string(),
    ];
    lab
}

/// GET `path` from the inventory API in the server's namespace with
/// `token` (none: no header); the status code and body.
fn get(lab: &Lab, path: &str, token: Option<&str>) -> (u16, String) {
    get_from(lab, [127, 0, 0, 1], path, token)
}

fn get_from(lab: &Lab, ip: [u8; 4], path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!("GET {path} HTTP/1.0\r\nHost: x\r\n{auth}\r\n");
    in_netns(&lab.server_ns, move || {
        let addr = std::net::SocketAddr::from((ip, 9069));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .expect("connect to the inventory API");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(req.as_bytes()).expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let (head, body) = out.split_once("\r\n\r\n").expect("a response");
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status");
        (code, body.to_string())
    })
}

fn json<T: serde::de::DeserializeOwned>(lab: &Lab, path: &str) -> T {
    let (code, body) = get(lab, path, Some(TOKEN));
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

fn leases(lab: &Lab, query: &str) -> Vec<LeaseRow> {
    json::<LeasePage>(lab, &format!("/inventory/v1/leases?{query}")).leases
}

fn why(lab: &Lab, mac: &str) -> Why {
    json(lab, &format!("/inventory/v1/why?mac={mac}"))
}

fn reasons(w: &Why) -> Vec<RefusalReason> {
    w.events.iter().map(|e| e.reason).collect()
}

fn refusals(lab: &Lab, r: RefusalReason) -> f64 {
    lab.metric(&format!(
        "oooi_dhcp_refusals_total{{reason=\"{}\"}}",
        r.as_str()
    ))
}

fn bound(events: &std::path::Path) -> Option<lab::Event> {
    read_events(events)
        .into_iter()
        .rev()
        .find(|e| e.reason == "bound")
}

/// `oooi-dhcp leases --data-dir --config -o json`.
fn offline_rows(lab: &Lab) -> Vec<LeaseRow> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oooi-dhcp"))
        .arg("leases")
        .arg("--data-dir")
        .arg(lab.data_dir())
        .arg("--config")
        .arg(lab.config_dir().join("config.yaml"))
        .args(["-o", "json"])
        .output()
        .expect("oooi-dhcp leases");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("rows as JSON")
}

// ---- crafted relayed requests ----

fn mac_of(n: u16) -> [u8; 6] {
    let b = n.to_be_bytes();
    [2, 0, 0, 4, b[0], b[1]]
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn relayed_via(
    giaddr: Ipv4Addr,
    kind: MessageType,
    mac: [u8; 6],
    xid: u32,
    opts: Vec<DhcpOption>,
) -> Vec<u8> {
    let mut m = Message::default();
    m.set_xid(xid)
        .set_chaddr(&mac)
        .set_giaddr(giaddr)
        .set_hops(1);
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    for o in opts {
        m.opts_mut().insert(o);
    }
    m.to_vec().expect("encode")
}

/// A relay namespace holding [`RELAY`] that sends crafted requests and
/// reads the replies (on port 67, as a relay does).
struct Relay {
    ns: String,
}

impl Relay {
    fn new(lab: &mut Lab) -> Relay {
        let ns = lab.add_client("02:00:00:00:09:09");
        let addr = format!("{RELAY}/24");
        sh(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "c0"]);
        Relay { ns }
    }

    /// Sends each datagram and returns the replies that came within
    /// `wait` of the last one.
    fn exchange(&self, datagrams: Vec<Vec<u8>>, wait: Duration) -> Vec<Message> {
        in_netns(&self.ns, move || {
            let sock = UdpSocket::bind((RELAY, 67)).expect("bind relay port");
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            for (i, d) in datagrams.iter().enumerate() {
                // Paced: the server's socket never has to drop one.
                if i % 32 == 31 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                sock.send_to(d, (SERVER, 67)).expect("send");
            }
            let mut out = Vec::new();
            let deadline = std::time::Instant::now() + wait;
            let mut buf = [0u8; 1500];
            while std::time::Instant::now() < deadline {
                if let Ok((n, _)) = sock.recv_from(&mut buf)
                    && let Ok(m) = Message::decode(&mut Decoder::new(&buf[..n]))
                {
                    out.push(m);
                }
            }
            out
        })
    }

    /// DISCOVER then REQUEST for `mac`: the address ACKed, if any.
    fn dora(&self, mac: [u8; 6], xid: u32) -> Option<Ipv4Addr> {
        let offer = self
            .exchange(
                vec![relayed_via(RELAY, MessageType::Discover, mac, xid, vec![])],
                Duration::from_millis(1500),
            )
            .into_iter()
            .find(|m| m.opts().msg_type() == Some(MessageType::Offer))?;
        let ip = offer.yiaddr();
        let ack = self.exchange(
            vec![relayed_via(
                RELAY,
                MessageType::Request,
                mac,
                xid,
                vec![
                    DhcpOption::RequestedIpAddress(ip),
                    DhcpOption::ServerIdentifier(SERVER),
                ],
            )],
            Duration::from_millis(800),
        );
        ack.iter()
            .any(|m| m.opts().msg_type() == Some(MessageType::Ack))
            .then_some(ip)
    }

    /// An INIT-REBOOT REQUEST of `mac` for `ip`: whether it was NAKed.
    fn request_naked(&self, mac: [u8; 6], ip: Ipv4Addr) -> bool {
        self.exchange(
            vec![relayed_via(
                RELAY,
                MessageType::Request,
                mac,
                77,
                vec![DhcpOption::RequestedIpAddress(ip)],
            )],
            Duration::from_millis(800),
        )
        .iter()
        .any(|m| m.opts().msg_type() == Some(MessageType::Nak))
    }
}

#[test]
fn leases_granted_renewed_released_declined_and_probe_conflicted_show_up_with_their_states() {
    // Probing on (300 ms); a host squats the pool's first address.
    let yaml = format!("{}probe_timeout_ms: 300\n", config(109, 50));
    let mut lab = lab_with_inventory(&yaml);
    allow_ping_sockets(&lab.server_ns.clone());
    lab.add_squatter("02:00:00:00:5a:01", "192.0.2.100");
    let a = lab.add_client("02:00:00:00:00:01");
    let d = lab.add_client("02:00:00:00:00:02");
    let relay = Relay::new(&mut lab);
    lab.start_server();

    // Granted: udhcpc sends its host name (option 12) and client id (61).
    let (events, idx) = lab.udhcpc(&a, &["-x", "hostname:vm-a"]);
    lab.wait_for(15, "udhcpc bound", || bound(&events).is_some());
    let ip: Ipv4Addr = bound(&events)
        .expect("bound")
        .get("ip")
        .parse()
        .expect("ip");
    assert_ne!(
        ip,
        Ipv4Addr::new(192, 0, 2, 100),
        "the squatted address was offered"
    );
    let rows = leases(&lab, "mac=02-00-00-00-00-01");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r.address, std::net::IpAddr::V4(ip));
    assert_eq!(r.state, LeaseState::Active);
    assert_eq!(r.hostname.as_deref(), Some("vm-a"));
    assert_eq!(r.client_id.as_deref(), Some("01020000000001"));
    assert_eq!(r.answered_by, Some(ServerRole::Single));
    assert!(!r.reserved);
    let first_cltt = r.cltt_unix.expect("cltt");
    assert!(r.expires_unix >= first_cltt + 3600);
    // The same row by address, by host name and by client id.
    for q in [
        format!("ip={ip}"),
        "hostname=VM-A".to_string(),
        "client_id=01:02:00:00:00:00:01".to_string(),
    ] {
        assert_eq!(leases(&lab, &q), rows, "{q}");
    }

    // The probe conflict: quarantined, no client, and the client's /why
    // tells it.
    let declined = leases(&lab, "state=declined");
    assert_eq!(declined.len(), 1, "{declined:?}");
    assert_eq!(declined[0].address.to_string(), "192.0.2.100");
    assert_eq!(declined[0].mac, None);
    let w = why(&lab, "02:00:00:00:00:01");
    assert!(reasons(&w).contains(&RefusalReason::ProbeConflict), "{w:?}");
    assert_eq!(w.lease.as_ref().map(|l| l.state), Some(LeaseState::Active));
    assert!(refusals(&lab, RefusalReason::ProbeConflict) >= 1.0);

    // Renewed: the last transaction moves on, the address stays.
    std::thread::sleep(Duration::from_millis(1100));
    lab.signal(idx, libc::SIGUSR1);
    lab.wait_for(10, "renewal seen by the inventory", || {
        leases(&lab, &format!("ip={ip}")).first().is_some_and(|r| {
            r.cltt_unix.is_some_and(|t| t > first_cltt) && r.state == LeaseState::Active
        })
    });

    // dhclient, with the client id it sends, on another address.
    let dh = lab.dhclient(&d);
    let dh_ip = dh
        .iter()
        .rev()
        .find(|e| e.reason == "BOUND")
        .map(|e| e.get("ip").to_string())
        .expect("dhclient bound");
    let row = leases(&lab, &format!("ip={dh_ip}"));
    assert_eq!(row[0].mac.as_deref(), Some("02:00:00:00:00:02"));
    assert_eq!(row[0].state, LeaseState::Active);

    // Declined: a crafted client takes an address and declines it.
    let m = mac_of(1);
    let dip = relay.dora(m, 1).expect("crafted client bound");
    relay.exchange(
        vec![relayed_via(
            RELAY,
            MessageType::Decline,
            m,
            2,
            vec![
                DhcpOption::RequestedIpAddress(dip),
                DhcpOption::ServerIdentifier(SERVER),
            ],
        )],
        Duration::from_millis(300),
    );
    lab.wait_for(5, "the decline in the inventory", || {
        leases(&lab, &format!("ip={dip}"))
            .first()
            .is_some_and(|r| r.state == LeaseState::Declined)
    });
    let row = &leases(&lab, &format!("ip={dip}"))[0];
    assert_eq!(row.mac.as_deref(), Some(mac_text(m).as_str()));

    // Released (SIGUSR2): the row stays, released.
    lab.signal(idx, libc::SIGUSR2);
    lab.wait_for(10, "the release in the inventory", || {
        leases(&lab, &format!("ip={ip}"))
            .first()
            .is_some_and(|r| r.state == LeaseState::Released)
    });

    // The figures: 10 addresses; dhclient's and the relay's first
    // lease... assigned 1 (dhclient), quarantined 2 (probe, decline).
    let report: PoolReport = json(&lab, "/inventory/v1/pools");
    let range = &report.pools[0];
    assert_eq!(range.range, "192.0.2.100-192.0.2.109");
    assert_eq!(range.total, 10);
    assert_eq!(range.assigned, 1, "{report:?}");
    assert_eq!(range.quarantined, 2, "{report:?}");
    assert_eq!(range.free, 7, "{report:?}");
    assert_eq!(report.pools[1].range, "reservations");
    assert_eq!((report.pools[1].total, report.pools[1].free), (1, 1));
    assert!(
        report
            .refusals
            .get(&RefusalReason::ProbeConflict)
            .is_some_and(|n| *n >= 1)
    );
    lab.wait_for(5, "the utilisation gauge", || {
        (lab.metric("oooi_dhcp_pool_utilisation_ratio") - range.utilisation()).abs() < 1e-9
    });

    // The offline command builds the same rows from the data directory
    // once the metadata file has been written (every 5 s at most).
    let api_row = leases(&lab, &format!("ip={dh_ip}")).remove(0);
    lab.wait_for(15, "the offline row equal to the API's", || {
        offline_rows(&lab).contains(&api_row)
    });
    let offline = offline_rows(&lab);
    let declined_offline = offline
        .iter()
        .find(|r| r.address == std::net::IpAddr::V4(dip))
        .expect("the declined address offline");
    assert_eq!(declined_offline.state, LeaseState::Declined);
    assert_eq!(declined_offline.mac.as_deref(), Some(mac_text(m).as_str()));

    // The second listen address serves the same.
    let (code, _) = get_from(&lab, [127, 0, 0, 2], "/inventory/v1/pools", Some(TOKEN));
    assert_eq!(code, 200);
}

#[test]
fn each_refusal_a_client_can_hit_is_counted_and_shown_for_that_client() {
    // Known clients only; a pool of two addresses; no probing.
    let known: String = (1..=4u16)
        .map(|n| format!("  - {{ mac: \"{}\" }}\n", mac_text(mac_of(n))))
        .collect();
    let yaml = format!(
        "{}known_clients:\n{known}unknown_clients: ignore\nprobe_timeout_ms: 0\n",
        config(101, 50)
    );
    let mut lab = lab_with_inventory(&yaml);
    let relay = Relay::new(&mut lab);
    lab.start_server();
    let ip1 = relay.dora(mac_of(1), 1).expect("client 1 bound");
    let ip2 = relay.dora(mac_of(2), 2).expect("client 2 bound");

    // Unknown client: no answer at all.
    let stranger = [2, 0, 0, 5, 0, 1];
    let replies = relay.exchange(
        vec![relayed_via(
            RELAY,
            MessageType::Discover,
            stranger,
            9,
            vec![],
        )],
        Duration::from_millis(500),
    );
    assert!(replies.is_empty(), "{replies:?}");
    lab.wait_for(5, "unknown client counted", || {
        reasons(&why(&lab, &mac_text(stranger))).contains(&RefusalReason::UnknownClientIgnored)
    });

    // Pool exhausted: client 3 is known, but both addresses are taken.
    assert_eq!(relay.dora(mac_of(3), 3), None);
    assert!(reasons(&why(&lab, &mac_text(mac_of(3)))).contains(&RefusalReason::PoolExhausted));

    // In use: client 3 asks for client 1's address.
    assert!(relay.request_naked(mac_of(3), ip1));
    // Not allowed: an address outside the pool.
    assert!(relay.request_naked(mac_of(3), Ipv4Addr::new(192, 0, 2, 60)));
    // Reserved address: another client's reservation is not allowed either.
    assert!(relay.request_naked(mac_of(3), Ipv4Addr::new(192, 0, 2, 50)));
    // Quarantined: client 2 declines its address, client 4 asks for it.
    relay.exchange(
        vec![relayed_via(
            RELAY,
            MessageType::Decline,
            mac_of(2),
            5,
            vec![
                DhcpOption::RequestedIpAddress(ip2),
                DhcpOption::ServerIdentifier(SERVER),
            ],
        )],
        Duration::from_millis(300),
    );
    assert!(relay.request_naked(mac_of(4), ip2));
    // Relay refused: a giaddr outside the served subnet.
    let outside = Ipv4Addr::new(10, 9, 9, 9);
    let replies = relay.exchange(
        vec![relayed_via(
            outside,
            MessageType::Discover,
            mac_of(4),
            6,
            vec![],
        )],
        Duration::from_millis(500),
    );
    assert!(replies.is_empty(), "{replies:?}");

    let w3 = why(&lab, &mac_text(mac_of(3)));
    let r3 = reasons(&w3);
    for r in [
        RefusalReason::PoolExhausted,
        RefusalReason::InUse,
        RefusalReason::NotAllowed,
    ] {
        assert!(r3.contains(&r), "{r:?} missing for client 3: {w3:?}");
    }
    let in_use = w3
        .events
        .iter()
        .find(|e| e.reason == RefusalReason::InUse)
        .expect("in use");
    assert_eq!(in_use.message, "REQUEST");
    assert_eq!(in_use.address, Some(std::net::IpAddr::V4(ip1)));
    assert_eq!(w3.lease, None, "client 3 holds nothing");
    lab.wait_for(5, "client 4's refusals", || {
        let r4 = reasons(&why(&lab, &mac_text(mac_of(4))));
        r4.contains(&RefusalReason::Quarantined) && r4.contains(&RefusalReason::RelayRefused)
    });
    // Client 1's /why: its lease, no refusal.
    let w1 = why(&lab, &mac_text(mac_of(1)));
    assert!(w1.events.is_empty(), "{w1:?}");
    assert_eq!(w1.lease.map(|l| l.state), Some(LeaseState::Active));

    // Counted by reason in the metric and the pool report alike.
    let report: PoolReport = json(&lab, "/inventory/v1/pools");
    for r in [
        RefusalReason::UnknownClientIgnored,
        RefusalReason::PoolExhausted,
        RefusalReason::InUse,
        RefusalReason::NotAllowed,
        RefusalReason::Quarantined,
        RefusalReason::RelayRefused,
    ] {
        let n = report.refusals.get(&r).copied().unwrap_or(0);
        assert!(n >= 1, "{r:?} not counted: {report:?}");
        assert_eq!(refusals(&lab, r), n as f64, "{r:?}");
    }
    let range = &report.pools[0];
    assert_eq!(
        (range.total, range.assigned, range.quarantined, range.free),
        (2, 1, 1, 0)
    );
}

#[test]
fn the_api_needs_the_token_refuses_bad_queries_and_pages_over_many_leases() {
    let mut lab = lab_with_inventory(&format!("{}probe_timeout_ms: 0\n", config(200, 50)));
    let relay = Relay::new(&mut lab);
    lab.start_server();

    for path in [
        "/inventory/v1/leases",
        "/inventory/v1/pools",
        "/inventory/v1/why?mac=02:00:00:00:00:01",
    ] {
        assert_eq!(get(&lab, path, None).0, 401, "{path} without a token");
        assert_eq!(
            get(&lab, path, Some("wrong-token-0123456789")).0,
            401,
            "{path}"
        );
    }
    assert!(lab.metric("oooi_dhcp_inventory_unauthorized_total") >= 6.0);
    for (q, word) in [
        ("ip=192.0.2.300", "ip="),
        ("mac=zz:00", "mac="),
        ("state=bound", "state="),
        ("limit=many", "limit="),
    ] {
        let (code, body) = get(&lab, &format!("/inventory/v1/leases?{q}"), Some(TOKEN));
        assert_eq!(code, 400, "{q}: {body}");
        assert!(body.contains(word), "{q}: {body}");
    }
    assert_eq!(get(&lab, "/inventory/v1/why", Some(TOKEN)).0, 400);
    assert_eq!(get(&lab, "/inventory/v1/why?mac=nope", Some(TOKEN)).0, 400);

    // 60 leases by crafted DORAs in one burst.
    let n = 60u16;
    let discovers = (1..=n)
        .map(|i| {
            relayed_via(
                RELAY,
                MessageType::Discover,
                mac_of(i),
                u32::from(i),
                vec![],
            )
        })
        .collect();
    let offers = relay.exchange(discovers, Duration::from_millis(1500));
    let requests = offers
        .iter()
        .filter(|m| m.opts().msg_type() == Some(MessageType::Offer))
        .map(|m| {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&m.chaddr()[..6]);
            relayed_via(
                RELAY,
                MessageType::Request,
                mac,
                m.xid(),
                vec![
                    DhcpOption::RequestedIpAddress(m.yiaddr()),
                    DhcpOption::ServerIdentifier(SERVER),
                ],
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(requests.len(), usize::from(n), "every client got an offer");
    relay.exchange(requests, Duration::from_millis(1500));
    let mut seen = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let q = match after {
            Some(a) => format!("state=active&limit=7&after={a}"),
            None => "state=active&limit=7".to_string(),
        };
        let page: LeasePage = json(&lab, &format!("/inventory/v1/leases?{q}"));
        assert!(page.leases.len() <= 7);
        pages += 1;
        seen.extend(page.leases.iter().map(|r| r.address));
        match page.next {
            Some(a) => after = Some(a),
            None => break,
        }
    }
    assert_eq!(seen.len(), usize::from(n), "{seen:?}");
    assert_eq!(pages, usize::from(n).div_ceil(7));
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "address order, each once");
}

#[test]
fn a_flood_of_made_up_macs_keeps_the_remembered_clients_bounded() {
    let yaml = format!(
        "{}known_clients: []\nunknown_clients: ignore\nprobe_timeout_ms: 0\n",
        config(110, 50)
    );
    let mut lab = lab_with_inventory(&yaml);
    let relay = Relay::new(&mut lab);
    lab.start_server();
    let n = CLIENTS_REMEMBERED + 200;
    let flood: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let b = (i as u32).to_be_bytes();
            relayed_via(
                RELAY,
                MessageType::Discover,
                [2, 0xf1, b[0], b[1], b[2], b[3]],
                i as u32,
                vec![],
            )
        })
        .collect();
    let ns = relay.ns.clone();
    // Sent from a thread in the relay's namespace; replies are not awaited.
    spawn_in_netns(&ns, move || {
        let sock = UdpSocket::bind((RELAY, 67)).expect("bind");
        for (i, d) in flood.iter().enumerate() {
            if i % 32 == 31 {
                std::thread::sleep(Duration::from_millis(2));
            }
            sock.send_to(d, (SERVER, 67)).expect("send");
        }
    })
    .join()
    .expect("flood");
    let reason = RefusalReason::UnknownClientIgnored;
    lab.wait_for(20, "the flood counted", || {
        refusals(&lab, reason) >= n as f64
    });
    assert_eq!(
        refusals(&lab, reason),
        n as f64,
        "every DISCOVER counted once"
    );
    // The first 200 were forgotten, the last ones remembered.
    let first = mac_text([2, 0xf1, 0, 0, 0, 0]);
    let b = ((n - 1) as u32).to_be_bytes();
    let last = mac_text([2, 0xf1, b[0], b[1], b[2], b[3]]);
    assert!(why(&lab, &first).events.is_empty());
    assert_eq!(why(&lab, &last).events.len(), 1);
    let b = 200u32.to_be_bytes();
    assert_eq!(
        why(&lab, &mac_text([2, 0xf1, b[0], b[1], b[2], b[3]]))
            .events
            .len(),
        1
    );
}

#[test]
fn in_a_pair_the_other_halfs_client_is_shown_as_not_this_servers_half_and_its_lease_as_learned() {
    use lab::pair::{PairLab, mac_for};
    let mut p = PairLab::new();
    let token = p.lab.dir.path().join("inventory-token");
    std::fs::write(&token, TOKEN).expect("token");
    p.lab.serve_args = vec![
        "--inventory-listen".into(),
        "127.0.0.1:9069".into(),
        "--inventory-token-file".into(),
        token.display().to_string(),
    ];
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    // A client of the secondary's scope: server B answers it.
    let theirs = mac_for(false, 1, true);
    let ns = p.lab.add_client(&theirs);
    let (events, _) = p.lab.udhcpc(&ns, &[]);
    let ip = p.wait_bound(20, "udhcpc bound by B", &events);
    // A stayed silent, and says why.
    let w = why(&p.lab, &theirs);
    assert!(
        reasons(&w).contains(&RefusalReason::NotThisServersHalf),
        "{w:?}"
    );
    assert_eq!(w.server.role, ServerRole::Primary);
    assert_eq!(w.server.pair_state.as_deref(), Some("load-balancing"));
    // A learned the lease from B: answered by the secondary, its client's
    // own expiry (not the lead the other server adds).
    p.wait(10, "the lease replicated to A", || {
        leases(&p.lab, &format!("ip={ip}"))
            .first()
            .is_some_and(|r| r.answered_by == Some(ServerRole::Secondary))
    });
    let r = &leases(&p.lab, &format!("ip={ip}"))[0];
    assert_eq!(r.state, LeaseState::Active);
    assert_eq!(r.mac.as_deref(), Some(theirs.as_str()));
    let cltt = r.cltt_unix.expect("cltt estimated from the record");
    let now = w.server.now_unix;
    assert!(r.expires_unix <= now + 61, "{r:?}: the client's expiry");
    assert!(cltt + 62 >= r.expires_unix && cltt <= now + 1, "{r:?}");
    assert!(refusals(&p.lab, RefusalReason::NotThisServersHalf) >= 1.0);
}
