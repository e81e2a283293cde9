//! Bad input on the pair API over real HTTP (`curl` from the other
//! server's namespace, across the pod link), while real clients (busybox
//! `udhcpc`) hold leases from both servers: a wrong token, a stream header
//! of 2^64−1, replayed and reordered updates, records for addresses no
//! client may hold, a RELEASE with a wrong expiry, a conflicting commit and
//! 100,000 records in one body are refused or harmless, and no live
//! client's lease is lost (the clients keep renewing). Needs root.

mod lab;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use lab::pair::{PairLab, TOKEN, last, mac_for};
use lab::read_events;
use oooi_dhcp::config::Mac;
use oooi_dhcp::lease_store::{StoredLease, encode_leases, encode_releases};

const B_API: &str = "http://10.99.0.2:9068/pair/v1";

/// `curl` from server A's namespace to B's pair API: (status, body).
fn curl(
    p: &PairLab,
    method: &str,
    path: &str,
    token: &str,
    headers: &[&str],
    body: Option<&Path>,
) -> (u16, String) {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &p.lab.server_ns, "curl", "-sS", "-m", "10"])
        .args(["-o", "-", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", &format!("Authorization: Bearer {token}")]);
    for h in headers {
        c.args(["-H", h]);
    }
    if let Some(b) = body {
        c.args(["-H", "Content-Type: application/octet-stream"])
            .arg("--data-binary")
            .arg(format!("@{}", b.display()));
    }
    c.arg(format!("{B_API}{path}"));
    let out = c.output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn body_file(p: &PairLab, name: &str, bytes: &[u8]) -> PathBuf {
    let f = p.lab.dir.path().join(name);
    std::fs::write(&f, bytes).expect("body");
    f
}

fn lease(ip: [u8; 4], mac: u8, expires: u64) -> StoredLease {
    StoredLease {
        ip: Ipv4Addr::from(ip),
        mac: Mac([2, 0, 0, 0x0b, 0xad, mac]),
        expires_unix: expires,
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[test]
fn bad_pair_api_input_is_refused_or_harmless_and_no_live_client_loses_its_lease() {
    let mut p = PairLab::new();
    p.lab.start_server();
    p.start_b();
    p.both_balancing();
    // A live client of each server.
    let mut clients = Vec::new();
    for (primary, seed) in [(true, 31), (false, 32)] {
        let ns = p.lab.add_client(&mac_for(primary, seed, true));
        let (events, idx) = p.lab.udhcpc(&ns, &[]);
        let ip = p.wait_bound(20, "udhcpc bound", &events);
        clients.push((events, idx, ip));
    }
    let held = p.expiries(false);
    let t = now();

    // A wrong token: 401, counted and logged with the caller's address.
    let (status, _) = curl(&p, "GET", "/leases", "wrong-token-0123456789", &[], None);
    assert_eq!(status, 401);
    assert!(p.metric(false, "oooi_dhcp_pair_unauthorized_total") >= 1.0);
    assert!(
        p.b_log().contains("wrong or missing token") && p.b_log().contains("10.99.0.1"),
        "{}",
        p.b_log()
    );

    // A stream header of 2^64−1 (and junk): refused, the order of the real
    // stream is untouched.
    let free = body_file(
        &p,
        "free.bin",
        &encode_leases([&lease([192, 0, 2, 130], 1, t + 30)]),
    );
    let (status, _) = curl(
        &p,
        "POST",
        "/leases",
        TOKEN,
        &["X-Oooi-Stream: 18446744073709551615", "X-Oooi-Request: 1"],
        Some(&free),
    );
    assert_eq!(status, 400, "a stream header of 2^64-1");
    let (status, _) = curl(
        &p,
        "POST",
        "/leases",
        TOKEN,
        &[
            "X-Oooi-Stream: ffffffffffffffff-18446744073709551615",
            "X-Oooi-Request: 1",
        ],
        Some(&free),
    );
    assert_eq!(status, 412, "a stream this server did not issue");

    // Reordered: request 2 of a stream issued here, without request 1,
    // waits for 1 and is refused when it does not come within a second.
    let stream = || {
        let (status, stream) = curl(&p, "POST", "/streams", TOKEN, &[], None);
        assert_eq!(status, 200, "{stream}");
        serde_json::from_str::<serde_json::Value>(&stream)
            .ok()
            .and_then(|v| v["stream"].as_str().map(str::to_string))
            .expect("stream")
    };
    let reordered = stream();
    let second = body_file(
        &p,
        "second.bin",
        &encode_leases([&lease([192, 0, 2, 131], 2, t + 30)]),
    );
    let (status, _) = curl(
        &p,
        "POST",
        "/leases",
        TOKEN,
        &[&format!("X-Oooi-Stream: {reordered}"), "X-Oooi-Request: 2"],
        Some(&second),
    );
    assert_eq!(status, 412, "request 2 before request 1");
    assert!(
        !p.expiries(false)
            .contains_key(&Ipv4Addr::new(192, 0, 2, 131))
    );
    // Replayed: request 1 of a new stream, then the same again.
    let stream = stream();
    let (status, _) = curl(
        &p,
        "POST",
        "/leases",
        TOKEN,
        &[&format!("X-Oooi-Stream: {stream}"), "X-Oooi-Request: 1"],
        Some(&free),
    );
    assert_eq!(status, 204, "request 1");
    // Replayed: the same request again changes nothing.
    let (status, _) = curl(
        &p,
        "POST",
        "/leases",
        TOKEN,
        &[&format!("X-Oooi-Stream: {stream}"), "X-Oooi-Request: 1"],
        Some(&free),
    );
    assert!(matches!(status, 204 | 412), "replay: {status}");
    let b = p.expiries(false);
    assert_eq!(
        b.get(&Ipv4Addr::new(192, 0, 2, 130)).map(|(_, e)| *e),
        Some(t + 30),
        "stored once, as sent"
    );

    // Records no client may hold: each refused (409), counted.
    let refused_before = p.metric(
        false,
        "oooi_dhcp_pair_records_refused_total{reason=\"address_outside_the_subnet\"}",
    );
    for (name, l) in [
        ("outside the subnet", lease([10, 0, 0, 5], 3, t + 30)),
        ("the gateway", lease([192, 0, 2, 1], 4, t + 30)),
        ("server A", lease([192, 0, 2, 2], 5, t + 30)),
        ("server B", lease([192, 0, 2, 5], 6, t + 30)),
        ("an excluded address", lease([192, 0, 2, 3], 7, t + 30)),
        (
            "another MAC's reservation",
            lease([192, 0, 2, 50], 8, t + 30),
        ),
        (
            "an expiry a day away",
            lease([192, 0, 2, 132], 9, t + 86_400),
        ),
    ] {
        let f = body_file(&p, "bad.bin", &encode_leases([&l]));
        let (status, body) = curl(&p, "POST", "/leases", TOKEN, &[], Some(&f));
        assert_eq!(status, 409, "{name}: {body}");
        assert!(!p.expiries(false).contains_key(&l.ip), "{name} stored");
    }
    assert!(
        p.metric(
            false,
            "oooi_dhcp_pair_records_refused_total{reason=\"address_outside_the_subnet\"}"
        ) > refused_before
    );

    // A new binding in B's own half (B alone hands it out while both
    // serve): refused, counted.
    let f = body_file(
        &p,
        "b-half.bin",
        &encode_leases([&lease([192, 0, 2, 180], 11, t + 30)]),
    );
    let (status, body) = curl(&p, "POST", "/leases", TOKEN, &[], Some(&f));
    assert_eq!(status, 409, "{body}");
    assert!(
        p.metric(
            false,
            "oooi_dhcp_pair_records_refused_total{reason=\"a_new_binding_in_the_receiving_half_of_the_pool\"}"
        ) >= 1.0
    );
    // A forged commit of A's live client's address (A's half, so not B's
    // to judge by half) for another MAC: it contradicts B's live binding,
    // refused; B keeps the client.
    let (_, _, a_ip) = &clients[0];
    let f = body_file(
        &p,
        "forged.bin",
        &encode_leases([&lease(a_ip.octets(), 12, t + 60)]),
    );
    let (status, body) = curl(&p, "POST", "/leases", TOKEN, &[], Some(&f));
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        p.expiries(false).get(a_ip).map(|(m, _)| m.clone()),
        held.get(a_ip).map(|(m, _)| m.clone()),
        "B keeps A's client"
    );

    // A live client's address for another MAC: a conflict, refused.
    let (_, _, live_ip) = &clients[1];
    let f = body_file(
        &p,
        "conflict.bin",
        &encode_leases([&lease(live_ip.octets(), 10, t + 60)]),
    );
    let (status, body) = curl(&p, "POST", "/leases", TOKEN, &[], Some(&f));
    assert_eq!(status, 409, "{body}");
    // A RELEASE of a live client's lease with a wrong expiry: refused, the
    // lease stays.
    let (mac, expires) = held.get(live_ip).cloned().expect("held on B");
    let mac = Mac::parse(&mac).expect("mac");
    let wrong = StoredLease {
        ip: *live_ip,
        mac,
        expires_unix: expires + 1000,
    };
    let f = body_file(&p, "release.bin", &encode_releases([&wrong]));
    let (status, body) = curl(&p, "POST", "/leases", TOKEN, &[], Some(&f));
    assert_eq!(status, 409, "{body}");
    assert!(
        p.expiries(false).contains_key(live_ip),
        "the live lease was released"
    );

    // 100,000 records in one body: refused whole (413), nothing stored.
    let many: Vec<StoredLease> = (0..100_000u32)
        .map(|i| StoredLease {
            ip: Ipv4Addr::new(192, 0, 2, 100 + (i % 100) as u8),
            mac: Mac([2, 0xee, (i >> 16) as u8, (i >> 8) as u8, i as u8, 1]),
            expires_unix: t + 30,
        })
        .collect();
    let f = body_file(&p, "many.bin", &encode_leases(&many));
    let (status, _) = curl(&p, "POST", "/leases", TOKEN, &[], Some(&f));
    assert_eq!(status, 413);
    assert!(p.expiries(false).len() < 10, "{:?}", p.expiries(false));

    // The live clients keep renewing (forced now) with their addresses,
    // nobody was NAKed, and no address is held twice.
    for (events, idx, ip) in &clients {
        let before = read_events(events)
            .iter()
            .filter(|e| e.reason == "renew")
            .count();
        p.lab.signal(*idx, libc::SIGUSR1);
        p.wait(10, "a renewal", || {
            read_events(events)
                .iter()
                .filter(|e| e.reason == "renew")
                .count()
                > before
        });
        assert_eq!(
            last(events, "renew").expect("renew").get("ip"),
            ip.to_string()
        );
        assert!(!read_events(events).iter().any(|e| e.reason == "nak"));
    }
    assert_eq!(p.metric(true, "oooi_dhcp_naks_total"), 0.0);
    assert_eq!(p.metric(false, "oooi_dhcp_naks_total"), 0.0);
    p.duplicate_scan();
    assert_eq!(p.metric(true, "oooi_dhcp_pair_state"), 1.0);
    assert_eq!(p.metric(false, "oooi_dhcp_pair_state"), 1.0);
}
