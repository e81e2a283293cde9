//! DNS protocol details over real sockets against the `oooi-dns` binary,
//! asked with `dig` and with raw packets: EDNS (BADVERS, the DO bit, UDP
//! size limits), query classes and CHAOS identity queries, the client's
//! spelling in cached forwarded answers, and the metrics that count them.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::Ordering;

use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use support::{dig, http_get, spawn_upstream, start, start_with, udp_exchange};

/// Owned names (one with 34 A and 24 AAAA records, too many for 512
/// bytes), a forwarded zone through `upstream`, and metrics on `http`.
fn config(port: u16, upstream: u16, http: u16) -> String {
    let a: Vec<String> = (1..=34).map(|i| format!("\"10.1.0.{i}\"")).collect();
    let aaaa: Vec<String> = (1..=24).map(|i| format!("\"2001:db8::{i:x}\"")).collect();
    format!(
        r#"
http: 127.0.0.1:{http}
upstreams:
  servers: ["127.0.0.7:{upstream}"]
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
    zones:
      - origin: big.test
        records:
          - {{ name: many, a: [{}], aaaa: [{}] }}
"#,
        a.join(", "),
        aaaa.join(", ")
    )
}

fn query(name: &str, qtype: RecordType, class: DNSClass, edns: Option<Edns>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 777;
    m.metadata.recursion_desired = true;
    let mut q = Query::query(Name::from_ascii(name).unwrap(), qtype);
    q.set_query_class(class);
    m.add_query(q);
    if let Some(e) = edns {
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

fn edns(size: u16, version: u8, dnssec_ok: bool) -> Edns {
    let mut e = Edns::new();
    e.set_max_payload(size);
    e.set_version(version);
    e.set_dnssec_ok(dnssec_ok);
    e
}

#[test]
fn edns_version_above_zero_gets_badvers_with_a_version_zero_opt() {
    let (port, up, http) = (25401, 25402, 25403);
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, up, http));
    for transport in ["+notcp", "+tcp"] {
        for name in ["api.c1.example.com", "www.example.org"] {
            let out = dig(
                "127.0.0.2",
                port,
                &[transport, "+edns=1", "+noednsnegotiation", name, "A"],
            );
            assert!(out.contains("status: BADVERS"), "{transport} {name}: {out}");
            assert!(
                out.contains("EDNS: version: 0"),
                "{transport} {name}: {out}"
            );
            assert!(out.contains("ANSWER: 0"), "{transport} {name}: {out}");
        }
    }
    // Version 0 is answered as usual.
    let out = dig("127.0.0.2", port, &["+edns=0", "api.c1.example.com", "A"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    let m = http_get(&format!("127.0.0.1:{http}"), "/metrics");
    assert!(
        m.contains(r#"oooi_dns_queries_total{view="vlan",qtype="A",rcode="BADVERS"} 4"#),
        "{m}"
    );
}

#[test]
fn the_do_bit_is_copied_into_the_answers_opt() {
    let (port, up, http) = (25404, 25405, 25406);
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, up, http));
    // A (the fast path), SOA and TCP (the handler).
    for args in [
        &["api.c1.example.com", "A"][..],
        &["c1.example.com", "SOA"][..],
        &["+tcp", "api.c1.example.com", "A"][..],
    ] {
        let with = dig("127.0.0.2", port, &[&["+dnssec"][..], args].concat());
        assert!(with.contains("flags: do;"), "{args:?}: {with}");
        let without = dig("127.0.0.2", port, args);
        assert!(
            without.contains("EDNS: version: 0, flags:;"),
            "{args:?}: {without}"
        );
    }
    // Raw: the OPT's DO flag, on the fast path and in the handler.
    for qtype in [RecordType::A, RecordType::MX] {
        let q = query(
            "api.c1.example.com.",
            qtype,
            DNSClass::IN,
            Some(edns(1232, 0, true)),
        );
        let r =
            Message::from_vec(&udp_exchange(&format!("127.0.0.2:{port}"), &q).unwrap()).unwrap();
        assert!(r.edns.unwrap().flags().dnssec_ok, "{qtype}");
    }
}

/// Where the last record of a reply ends, walking the counts of its header
/// (a well-formed reply ends there).
fn records_end(b: &[u8]) -> usize {
    let count = |at: usize| usize::from(u16::from_be_bytes([b[at], b[at + 1]]));
    let skip_name = |mut i: usize| loop {
        match b[i] {
            0 => return i + 1,
            l if l & 0xc0 == 0xc0 => return i + 2,
            l => i += 1 + usize::from(l),
        }
    };
    let mut i = 12;
    for _ in 0..count(4) {
        i = skip_name(i) + 4;
    }
    for _ in 0..count(6) + count(8) + count(10) {
        i = skip_name(i);
        i += 10 + count(i + 8);
    }
    i
}

/// The reply to a UDP query for the big name, checked to be well formed.
fn big_reply(port: u16, qtype: RecordType, edns: Option<Edns>) -> (usize, bool, Message) {
    let q = query("many.big.test.", qtype, DNSClass::IN, edns);
    let bytes = udp_exchange(&format!("127.0.0.2:{port}"), &q).unwrap();
    assert_eq!(
        records_end(&bytes),
        bytes.len(),
        "bytes after the last record"
    );
    let m = Message::from_vec(&bytes).unwrap();
    (bytes.len(), m.metadata.truncation, m)
}

#[test]
fn any_over_udp_respects_512_bytes_or_the_advertised_size_and_sets_tc() {
    let (port, up, http) = (25407, 25408, 25409);
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, up, http));
    // 34 A + 24 AAAA records: about 1250 bytes.
    for (qtype, records) in [
        (RecordType::ANY, 58),
        (RecordType::A, 34),
        (RecordType::AAAA, 24),
    ] {
        let (len, tc, m) = big_reply(port, qtype, None);
        assert!(len <= 512, "{qtype}: {len} bytes without EDNS");
        assert!(tc, "{qtype}: no TC without EDNS");
        assert!(m.edns.is_none(), "{qtype}");
        for size in [600, 700, 1000, 4096] {
            let (len, tc, m) = big_reply(port, qtype, Some(edns(size, 0, false)));
            // Our buffer is at most 1232 bytes, whatever the client's.
            assert!(
                len <= usize::from(size.min(1232)),
                "{qtype}: {len} bytes for {size}"
            );
            assert!(m.edns.is_some(), "{qtype}: the OPT record was dropped");
            if tc {
                assert!(m.answers.is_empty(), "{qtype}: records behind TC");
            } else {
                assert_eq!(m.answers.len(), records, "{qtype} for {size}");
            }
            // ANY needs about 1250 bytes: always truncated.
            assert!(tc || qtype != RecordType::ANY, "{qtype}: no TC for {size}");
        }
    }
    // Over TCP everything fits.
    let out = dig(
        "127.0.0.2",
        port,
        &["+tcp", "+short", "many.big.test", "ANY"],
    );
    assert_eq!(out.lines().count(), 58, "{out}");
    // dig sees TC and retries over TCP, where everything fits.
    let out = dig(
        "127.0.0.2",
        port,
        &["+noedns", "+ignore", "+notcp", "many.big.test", "ANY"],
    );
    assert!(out.contains("flags: qr aa tc rd ra;"), "{out}");
    assert!(!out.contains("WARNING: Message has"), "{out}");
    let out = dig(
        "127.0.0.2",
        port,
        &["+noedns", "+short", "many.big.test", "ANY"],
    );
    assert_eq!(out.lines().count(), 58, "{out}");
}

#[test]
fn other_classes_are_refused_and_chaos_identity_is_never_forwarded() {
    let (port, up, http) = (25410, 25411, 25412);
    let count = spawn_upstream(&format!("127.0.0.7:{up}"));
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, up, http));
    // An owned name in another class is not answered as IN.
    for class in ["CH", "HS"] {
        for t in ["+notcp", "+tcp"] {
            let out = dig("127.0.0.2", port, &[t, "api.c1.example.com", "A", class]);
            assert!(out.contains("status: REFUSED"), "{class} {t}: {out}");
            assert!(out.contains("ANSWER: 0"), "{class} {t}: {out}");
        }
    }
    for name in [
        "version.bind",
        "hostname.bind",
        "id.server",
        "version.server",
    ] {
        let out = dig("127.0.0.2", port, &[name, "TXT", "CH"]);
        assert!(out.contains("status: REFUSED"), "{name}: {out}");
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "a non-IN query was forwarded"
    );
    // IN is still forwarded.
    let out = dig("127.0.0.2", port, &["+short", "www.example.org"]);
    assert_eq!(out.trim(), "203.0.113.7");
    let m = http_get(&format!("127.0.0.1:{http}"), "/metrics");
    assert!(
        m.contains(r#"oooi_dns_queries_total{view="vlan",qtype="TXT",rcode="REFUSED"} 4"#),
        "{m}"
    );
}

#[test]
fn chaos_identity_answers_the_configured_strings() {
    let (port, up, http) = (25413, 25414, 25415);
    let count = spawn_upstream(&format!("127.0.0.7:{up}"));
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "chaos:\n  version: oooi-dns test\n  hostname: dns-a\n{}",
        config(port, up, http)
    );
    let _s = start(dir.path(), &text);
    for (name, want) in [
        ("version.bind", "\"oooi-dns test\""),
        ("version.server", "\"oooi-dns test\""),
        ("hostname.bind", "\"dns-a\""),
        ("id.server", "\"dns-a\""),
    ] {
        for t in ["+notcp", "+tcp"] {
            let out = dig("127.0.0.2", port, &[t, "+short", name, "TXT", "CH"]);
            assert_eq!(out.trim(), want, "{name} {t}");
        }
    }
    let out = dig("127.0.0.2", port, &["version.bind", "TXT", "CH"]);
    assert!(out.contains("version.bind.\t\t0\tCH\tTXT"), "{out}");
    // Other CHAOS names are refused, never forwarded.
    let out = dig("127.0.0.2", port, &["authors.bind", "TXT", "CH"]);
    assert!(out.contains("status: REFUSED"), "{out}");
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

/// The owner name of the single answer to `name` over UDP or TCP.
fn owner(port: u16, name: &str, tcp: bool) -> String {
    let out = dig(
        "127.0.0.2",
        port,
        &[
            if tcp { "+tcp" } else { "+notcp" },
            "+noall",
            "+answer",
            name,
            "A",
        ],
    );
    out.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn cached_forwarded_answers_carry_the_askers_spelling() {
    let (port, up, http) = (25416, 25417, 25418);
    let count = spawn_upstream(&format!("127.0.0.7:{up}"));
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, up, http));
    assert_eq!(owner(port, "WwW.ExAmPlE.oRg", false), "WwW.ExAmPlE.oRg.");
    assert_eq!(count.load(Ordering::SeqCst), 1);
    // From the cache, over UDP (the fast path) and TCP (the handler).
    for (name, tcp) in [
        ("www.example.org", false),
        ("WWW.EXAMPLE.ORG", false),
        ("www.EXAMPLE.org", true),
        ("Www.Example.Org", true),
    ] {
        assert_eq!(owner(port, name, tcp), format!("{name}."), "tcp {tcp}");
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "not answered from the cache"
    );
}

#[test]
fn metrics_start_at_zero_use_rcode_mnemonics_and_count_formerr() {
    let (port, up, http) = (25419, 25420, 25421);
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, up, http));
    let addr = format!("127.0.0.1:{http}");
    let m = http_get(&addr, "/metrics");
    for series in [
        r#"oooi_dns_queries_total{view="vlan",qtype="A",rcode="NOERROR"} 0"#,
        r#"oooi_dns_queries_total{view="vlan",qtype="A",rcode="NXDOMAIN"} 0"#,
        r#"oooi_dns_queries_total{view="vlan",qtype="AAAA",rcode="SERVFAIL"} 0"#,
        r#"oooi_dns_queries_total{view="none",qtype="A",rcode="REFUSED"} 0"#,
        r#"oooi_dns_queries_total{view="vlan",qtype="unknown",rcode="FORMERR"} 0"#,
        r#"oooi_dns_reloads_total{result="ok"} 0"#,
        r#"oooi_dns_reloads_total{result="rejected"} 0"#,
        r#"oooi_dns_upstream_failures_total{upstream="127.0.0.7:25420"} 0"#,
        r#"oooi_dns_listen_failures_total{address="127.0.0.2:25419"} 0"#,
        "oooi_dns_dropped_queries_total 0",
    ] {
        assert!(m.contains(series), "{series} missing from:\n{m}");
    }
    dig("127.0.0.2", port, &["nope.c1.example.com", "A"]);
    dig("127.0.0.2", port, &["+tcp", "nope.c1.example.com", "A"]);
    dig("127.0.0.2", port, &["c1.example.com", "SOA"]);
    // A header followed by a question that does not decode.
    let bad = [
        0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'a', b'p', b'i', 0xc0, 0xff, 0, 1,
    ];
    let r = udp_exchange(&format!("127.0.0.2:{port}"), &bad).expect("an answer");
    assert_eq!(r[..2], [0x12, 0x34]);
    assert_eq!(r[3] & 0x0f, ResponseCode::FormErr.low());
    let m = http_get(&addr, "/metrics");
    for series in [
        r#"oooi_dns_queries_total{view="vlan",qtype="A",rcode="NXDOMAIN"} 2"#,
        r#"oooi_dns_queries_total{view="vlan",qtype="SOA",rcode="NOERROR"} 1"#,
        r#"oooi_dns_queries_total{view="vlan",qtype="unknown",rcode="FORMERR"} 1"#,
    ] {
        assert!(m.contains(series), "{series} missing from:\n{m}");
    }
    assert!(!m.contains("NXDomain") && !m.contains("No Error"), "{m}");
}

#[test]
fn the_metrics_address_flag_wins_over_the_config() {
    let (port, up, http) = (25422, 25423, 25424);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config(port, up, http)).unwrap();
    let _s = start_with(&path, &["--metrics-addr", "127.0.0.8:25425"]);
    assert_eq!(http_get("127.0.0.8:25425", "/healthz"), "ok");
    assert_eq!(http_get(&format!("127.0.0.1:{http}"), "/healthz"), "");
}
