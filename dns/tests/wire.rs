//! Real queries over loopback with `dig` against the `oooi-dns` binary.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{dig, spawn_upstream, start, start_at, wait_for};

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
    // (request_path.rs checks that SERVFAIL then comes without waiting.)
    let pod = dig("127.0.0.3", PORT, &["other.example.org", "A"]);
    assert!(pod.contains("status: SERVFAIL"), "{pod}");
    // Local names still answer.
    assert_eq!(
        dig("127.0.0.2", PORT, &["+short", "api.c1.example.com"]).trim(),
        "192.0.2.4"
    );
}

#[test]
fn configmap_symlink_swap_reloads_and_bad_file_keeps_last_good() {
    let port = 25354;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Lay out the mount as kubelet does: config.yaml -> ..data/config.yaml,
    // ..data -> v1.
    std::fs::create_dir(d.join("v1")).expect("v1");
    let base = format!("http: 127.0.0.1:25364\n{}", config(port, 25398));
    std::fs::write(d.join("v1/config.yaml"), &base).expect("write");
    std::os::unix::fs::symlink("v1", d.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/config.yaml", d.join("config.yaml")).expect("symlink");
    let _s = start_at(&d.join("config.yaml"));
    assert_eq!(
        dig("127.0.0.2", port, &["+short", "api.c1.example.com"]).trim(),
        "192.0.2.4"
    );

    let swap = |name: &str, text: &str| {
        std::fs::create_dir(d.join(name)).expect("dir");
        std::fs::write(d.join(name).join("config.yaml"), text).expect("write");
        let tmp = d.join("..data_tmp");
        std::os::unix::fs::symlink(name, &tmp).expect("symlink");
        std::fs::rename(&tmp, d.join("..data")).expect("rename");
    };
    swap(
        "v2",
        &config(port, 25398).replace("192.0.2.4", "192.0.2.44"),
    );
    assert!(
        wait_for(
            || dig("127.0.0.2", port, &["+short", "api.c1.example.com"]).trim() == "192.0.2.44"
        ),
        "the ..data swap was not picked up"
    );

    let metrics = |port: u16| {
        Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{port}/metrics")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .expect("curl is required")
    };
    // A bad file is rejected; the last good config keeps answering.
    swap("v3", &base.replace("192.0.2.4", "not-an-ip"));
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        dig("127.0.0.2", port, &["+short", "api.c1.example.com"]).trim(),
        "192.0.2.44"
    );
    let m = metrics(25364);
    assert!(
        m.contains(r#"oooi_dns_reloads_total{result="ok"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"oooi_dns_reloads_total{result="rejected"} 1"#),
        "{m}"
    );
    assert!(m.contains("oooi_dns_queries_total{"), "{m}");
    let health = Command::new("curl")
        .args([
            "-s",
            "-w",
            " %{http_code}",
            "http://127.0.0.1:25364/healthz",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .expect("curl is required");
    assert_eq!(health, "ok 200");
}

#[test]
fn other_names_are_forwarded_to_the_upstream_and_local_names_stay_local() {
    let port = 25355;
    let count = spawn_upstream("127.0.0.5:25356");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = config(port, 25356).replace("127.0.0.1:25356", "127.0.0.5:25356");
    let _s = start(dir.path(), &text);
    assert_eq!(
        dig("127.0.0.3", port, &["+short", "www.example.org"]).trim(),
        "203.0.113.7"
    );
    // The pod view forwards cluster names too.
    assert_eq!(
        dig("127.0.0.3", port, &["+short", "api.c1.example.com"]).trim(),
        "203.0.113.7"
    );
    let before = count.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        dig("127.0.0.2", port, &["+short", "api.c1.example.com"]).trim(),
        "192.0.2.4"
    );
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), before);
    // Within the TTL the answer comes from the cache.
    assert_eq!(
        dig("127.0.0.3", port, &["+short", "www.example.org"]).trim(),
        "203.0.113.7"
    );
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), before);
}

#[test]
fn malformed_packets_do_not_crash_the_server() {
    let port = 25357;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = start(dir.path(), &config(port, 25397));
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let target = format!("127.0.0.2:{port}");
    // A valid query for api.c1.example.com A, mutated deterministically.
    let good: Vec<u8> = vec![
        0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'a', b'p', b'i', 2, b'c', b'1', 7,
        b'e', b'x', b'a', b'm', b'p', b'l', b'e', 3, b'c', b'o', b'm', 0, 0, 1, 0, 1,
    ];
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x12],
        good[..11].to_vec(),                                 // truncated header
        [&good[..12], &[63u8, b'a'][..]].concat(),           // label longer than the packet
        [&good[..12], &[0xc0, 12, 0, 1, 0, 1][..]].concat(), // compression loop
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..500 {
        let mut p = good.clone();
        for _ in 0..3 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed as usize) % p.len();
            p[i] = (seed >> 32) as u8;
        }
        p.truncate(12 + (seed as usize >> 8) % (p.len() - 11));
        cases.push(p);
    }
    let mut buf = [0u8; 1500];
    for c in &cases {
        sock.send_to(c, &target).expect("send");
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            assert!(n >= 12, "a reply must at least carry a header");
        }
    }
    assert!(s.0.try_wait().expect("wait").is_none(), "server exited");
    assert_eq!(
        dig("127.0.0.2", port, &["+short", "api.c1.example.com"]).trim(),
        "192.0.2.4"
    );
}

/// Rust client: one UDP exchange, optionally with EDNS.
fn rust_query(server: &str, name: &str, edns: bool, tcp: bool) -> hickory_proto::op::Message {
    rust_query_type(server, name, hickory_proto::rr::RecordType::A, edns, tcp)
}

/// Rust client: one exchange for `name`/`qtype`, over UDP or TCP.
fn rust_query_type(
    server: &str,
    name: &str,
    qtype: hickory_proto::rr::RecordType,
    edns: bool,
    tcp: bool,
) -> hickory_proto::op::Message {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::Name;
    use std::io::{Read, Write};
    use std::str::FromStr;
    let mut m = Message::query();
    m.metadata.id = 4242;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_str(name).expect("name"), qtype));
    if edns {
        let mut e = Edns::new();
        e.set_max_payload(4096);
        m.set_edns(e);
    }
    let bytes = m.to_vec().expect("encode");
    if tcp {
        let mut s = std::net::TcpStream::connect(server).expect("tcp connect");
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let len = u16::try_from(bytes.len()).expect("len").to_be_bytes();
        s.write_all(&len).expect("write");
        s.write_all(&bytes).expect("write");
        let mut lb = [0u8; 2];
        s.read_exact(&mut lb).expect("read len");
        let mut buf = vec![0u8; u16::from_be_bytes(lb) as usize];
        s.read_exact(&mut buf).expect("read");
        return Message::from_vec(&buf).expect("decode");
    }
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    sock.send_to(&bytes, server).expect("send");
    let mut buf = [0u8; 65535];
    let (n, _) = sock.recv_from(&mut buf).expect("no answer");
    Message::from_vec(&buf[..n]).expect("decode")
}

#[test]
fn rust_client_sees_aa_case_edns_and_udp_truncation_with_tcp_retry() {
    use hickory_proto::op::ResponseCode;
    let port = 25358;
    let dir = tempfile::tempdir().expect("tempdir");
    let addrs: Vec<String> = (1..=60).map(|i| format!("\"10.1.0.{i}\"")).collect();
    let text = format!(
        "{}    zones:\n      - origin: big.test\n        records:\n          - {{ name: many, a: [{}] }}\n",
        config(port, 25396),
        addrs.join(", ")
    );
    let _s = start(dir.path(), &text);
    let server = format!("127.0.0.3:{port}");

    let r = rust_query(
        &format!("127.0.0.2:{port}"),
        "Api.C1.EXAMPLE.com.",
        false,
        false,
    );
    assert!(r.metadata.authoritative);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert_eq!(r.answers.len(), 1);
    assert!(
        r.answers[0]
            .name
            .to_string()
            .eq_ignore_ascii_case("api.c1.example.com.")
    );

    // The zone is attached to the last view (pod, on 127.0.0.3).
    // 60 A records do not fit in 512 bytes: TC over UDP without EDNS.
    let udp = rust_query(&server, "many.big.test.", false, false);
    assert!(udp.metadata.truncation, "expected TC");
    assert!(udp.answers.len() < 60);
    // With EDNS (client buffer 4096, ours 1232) they fit, and OPT is echoed.
    let e = rust_query(&server, "many.big.test.", true, false);
    assert!(e.edns.is_some(), "EDNS not echoed");
    assert!(!e.metadata.truncation);
    assert_eq!(e.answers.len(), 60);
    // TCP carries all of them.
    let t = rust_query(&server, "many.big.test.", false, true);
    assert_eq!(t.answers.len(), 60);
    // dig falls back to TCP by itself on TC.
    let d = dig("127.0.0.3", port, &["+noedns", "+short", "many.big.test"]);
    assert_eq!(d.lines().count(), 60, "{d}");
}

#[test]
fn check_prints_answers_and_names_the_bad_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, config(25359, 25395)).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_oooi-dns"))
        .arg("check")
        .arg(&good)
        .output()
        .expect("run check");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let has = |name: &str, qtype: &str, what: &str| {
        text.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 2 && f[0] == name && f[1] == qtype && l.contains(what)
        })
    };
    assert!(
        has("api.c1.example.com.", "A", "192.0.2.4 ttl 30"),
        "{text}"
    );
    assert!(has("api.c1.example.com.", "AAAA", "NODATA"), "{text}");
    assert!(has("*.apps.c1.example.com.", "A", "192.0.2.200"), "{text}");
    assert!(has("kubernetes.default.svc.", "A", "192.0.2.4"), "{text}");
    assert!(has("<other>.c1.example.com.", "A", "NXDOMAIN"), "{text}");
    assert!(text.contains("view default on 127.0.0.3:25359"), "{text}");
    assert!(text.contains("no static names"), "{text}");
    assert!(text.contains("forwarded to 127.0.0.1:25395"), "{text}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, config(25359, 25395).replace("192.0.2.200", "x")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_oooi-dns"))
        .arg("check")
        .arg(&bad)
        .output()
        .expect("run check");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("clusters[0].apps_vip"), "{err}");
}

#[test]
fn reload_opens_new_listeners_and_closes_removed_ones() {
    let port = 25360;
    let dir = tempfile::tempdir().expect("tempdir");
    let base = format!("http: 127.0.0.1:25366\n{}", config(port, 25394));
    let _s = start(dir.path(), &base);
    assert_eq!(
        dig("127.0.0.2", port, &["+short", "api.c1.example.com"]).trim(),
        "192.0.2.4"
    );
    // The VLAN view moves from 127.0.0.2 to 127.0.0.6, and to an address
    // this host does not have (it cannot be bound: counted, the rest works).
    let moved = base.replace(
        &format!("\"127.0.0.2:{port}\""),
        &format!("\"127.0.0.6:{port}\", \"192.0.2.1:{port}\""),
    );
    std::fs::write(dir.path().join("config.yaml"), moved).expect("write");
    assert!(
        wait_for(
            || dig("127.0.0.6", port, &["+short", "api.c1.example.com"]).trim() == "192.0.2.4"
        ),
        "the new listener did not open"
    );
    assert_eq!(
        dig("127.0.0.6", port, &["+tcp", "+short", "api.c1.example.com"]).trim(),
        "192.0.2.4",
        "the new listener serves TCP too"
    );
    for tcp in ["+notcp", "+tcp"] {
        let gone = dig("127.0.0.2", port, &[tcp, "api.c1.example.com"]);
        assert!(!gone.contains("status:"), "{tcp}: still answering: {gone}");
    }
    // The listener that stayed keeps working.
    let pod = dig("127.0.0.3", port, &["api.c1.example.com"]);
    assert!(pod.contains("status: SERVFAIL"), "{pod}");
    let m = Command::new("curl")
        .args(["-s", "http://127.0.0.1:25366/metrics"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .expect("curl is required");
    let failed = format!("oooi_dns_listen_failures_total{{address=\"192.0.2.1:{port}\"}} 1");
    assert!(m.contains(&failed), "{m}");
}

/// Every record kind, per view, asked with dig and with the Rust client (UDP
/// and TCP): control-plane names (proxy in the VLAN view, internal proxy in
/// the pod view), the apps wildcard at any depth, the kubernetes aliases
/// (proxy in the VLAN view, forwarded from the pod view), an explicit AAAA
/// record, NODATA, NXDOMAIN, and forwarding.
#[test]
fn each_record_kind_per_view_with_dig_and_a_rust_client() {
    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::{RData, RecordType};
    let port = 25361;
    let _upstream = spawn_upstream("127.0.0.5:25362");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "{}    zones:\n      - origin: lab.test\n        records:\n          - {{ name: host, aaaa: [\"2001:db8::1\"] }}\n",
        config(port, 25362)
            .replace("127.0.0.1:25362", "127.0.0.5:25362")
            .replace("apps_vip:", "internal_proxy: 10.0.0.4\n    apps_vip:")
    );
    let _s = start(dir.path(), &text);
    let (vlan, pod) = ("127.0.0.2", "127.0.0.3");
    /// (listener, name, type, rcode, addresses, authoritative)
    type Case<'a> = (
        &'a str,
        &'a str,
        RecordType,
        ResponseCode,
        &'a [&'a str],
        bool,
    );
    let cases: &[Case] = &[
        (
            vlan,
            "api.c1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &["192.0.2.4"],
            true,
        ),
        (
            vlan,
            "Ignition.C1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &["192.0.2.4"],
            true,
        ),
        (
            vlan,
            "konnectivity.c1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &["192.0.2.4"],
            true,
        ),
        (
            vlan,
            "x.y.apps.c1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &["192.0.2.200"],
            true,
        ),
        (
            vlan,
            "kubernetes.",
            RecordType::A,
            ResponseCode::NoError,
            &["192.0.2.4"],
            true,
        ),
        (
            vlan,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            ResponseCode::NoError,
            &["192.0.2.4"],
            true,
        ),
        (
            vlan,
            "api.c1.example.com.",
            RecordType::AAAA,
            ResponseCode::NoError,
            &[],
            true,
        ),
        (
            vlan,
            "apps.c1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &[],
            true,
        ),
        (
            vlan,
            "nope.c1.example.com.",
            RecordType::A,
            ResponseCode::NXDomain,
            &[],
            true,
        ),
        (
            vlan,
            "www.example.org.",
            RecordType::A,
            ResponseCode::NoError,
            &["203.0.113.7"],
            false,
        ),
        // The pod view answers the control-plane names with the internal
        // proxy, forwards the rest of the cluster (apps not published to
        // pods here), and never answers the kubernetes aliases.
        (
            pod,
            "api.c1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &["10.0.0.4"],
            true,
        ),
        (
            pod,
            "x.apps.c1.example.com.",
            RecordType::A,
            ResponseCode::NoError,
            &["203.0.113.7"],
            false,
        ),
        (
            pod,
            "kubernetes.default.",
            RecordType::A,
            ResponseCode::NoError,
            &["203.0.113.7"],
            false,
        ),
        (
            pod,
            "host.lab.test.",
            RecordType::AAAA,
            ResponseCode::NoError,
            &["2001:db8::1"],
            true,
        ),
        (
            pod,
            "host.lab.test.",
            RecordType::A,
            ResponseCode::NoError,
            &[],
            true,
        ),
        (
            pod,
            "other.lab.test.",
            RecordType::AAAA,
            ResponseCode::NXDomain,
            &[],
            true,
        ),
    ];
    for &(server, name, qtype, rcode, addrs, aa) in cases {
        let what = format!("{server} {name} {qtype}");
        for tcp in [false, true] {
            let m = rust_query_type(&format!("{server}:{port}"), name, qtype, true, tcp);
            assert_eq!(m.metadata.response_code, rcode, "{what} tcp={tcp}");
            assert_eq!(m.metadata.authoritative, aa, "{what} tcp={tcp}");
            let got: Vec<String> = m
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(a.0.to_string()),
                    RData::AAAA(a) => Some(a.0.to_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(got, addrs, "{what} tcp={tcp}");
            if addrs.is_empty() {
                // NODATA and NXDOMAIN carry the SOA for negative caching.
                assert!(
                    m.authorities
                        .iter()
                        .any(|r| r.record_type() == RecordType::SOA),
                    "{what}: no SOA"
                );
            }
        }
        let out = dig(server, port, &[name, &qtype.to_string()]);
        let status = match rcode {
            ResponseCode::NXDomain => "status: NXDOMAIN",
            _ => "status: NOERROR",
        };
        assert!(out.contains(status), "{what}: {out}");
        assert_eq!(out.contains(" aa"), aa, "{what}: {out}");
        let short = dig(server, port, &["+short", name, &qtype.to_string()]);
        let got: Vec<&str> = short.lines().collect();
        assert_eq!(got, addrs, "{what}: {short}");
    }
}
