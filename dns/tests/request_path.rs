//! The UDP request path without sockets, on generated packets (bounded, runs
//! in CI; `dns/fuzz` runs the same checks unbounded under libFuzzer):
//! - well-formed queries of every shape: when the fast path answers, the
//!   hickory handler gives the same message;
//! - malformed packets (truncated headers, bad label lengths, compression
//!   loops, random bytes): no panic, and no answer or FORMERR.

use std::net::SocketAddr;

use hickory_proto::op::{Message, ResponseCode};
use hickory_server::net::xfer::Protocol;
use oooi_dns::config::Config;
use oooi_dns::engine::Engine;
use oooi_dns::fast::{Fast, MAX_REPLY};
use proptest::prelude::*;

/// Every kind of owned name: cluster names, the apps wildcard, aliases,
/// nested explicit zones with wildcards at several depths, AAAA records, a
/// name too big for 512 bytes, a view chosen by client subnet, and no
/// upstream (forwarded names get SERVFAIL without any traffic).
const CONFIG: &str = concat!(
    "clusters:\n",
    // c1: proxy 192.0.2.4, internal proxy 10.0.0.4, apps VIP 192.0.2.200.
    include_str!("fixtures/cluster-c1.yaml"),
    r#"  - name: c2
    base_domain: example.com
    proxy: 192.0.2.4
    names: [api, oauth, special.apps, deep.er.name]
views:
  - name: lab
    kind: vlan
    listen: ["127.0.0.2:53"]
    source_subnets: ["127.0.0.128/25"]
    zones:
      - origin: example.net
        records:
          - { name: "@", a: ["10.9.0.1"] }
          - { name: "*.a.b", a: ["10.9.0.2"], aaaa: ["2001:db8::2"], ttl: 5 }
          - { name: "*", aaaa: ["2001:db8::9"] }
      - origin: deep.example.net
        records:
          - { name: "x", a: ["10.9.1.1"] }
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:53"]
    zones:
      - origin: big.test
        records:
          - { name: many, a: ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6", "10.1.0.7", "10.1.0.8", "10.1.0.9", "10.1.0.10", "10.1.0.11", "10.1.0.12", "10.1.0.13", "10.1.0.14", "10.1.0.15", "10.1.0.16", "10.1.0.17", "10.1.0.18", "10.1.0.19", "10.1.0.20", "10.1.0.21", "10.1.0.22", "10.1.0.23", "10.1.0.24", "10.1.0.25", "10.1.0.26", "10.1.0.27", "10.1.0.28", "10.1.0.29", "10.1.0.30", "10.1.0.31", "10.1.0.32"] }
          - { name: six, aaaa: ["2001:db8::6", "2001:db8::7"] }
  - name: pods
    kind: pod
    listen: ["127.0.0.3:53"]
"#
);

const LABELS: &[&str] = &[
    "api",
    "api-int",
    "oauth",
    "ignition",
    "konnectivity",
    "special",
    "deep",
    "er",
    "name",
    "apps",
    "x",
    "a",
    "b",
    "*",
    "c1",
    "c2",
    "example",
    "com",
    "net",
    "big",
    "test",
    "many",
    "six",
    "kubernetes",
    "default",
    "svc",
    "cluster",
    "local",
];

struct Rig {
    engine: Engine,
    rt: tokio::runtime::Runtime,
}

impl Rig {
    fn new() -> Self {
        Rig {
            engine: Engine::new(Config::parse(CONFIG).expect("test config")),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        }
    }

    /// Runs both paths on `packet`; checks they agree; returns the reply.
    fn run(&self, local: &str, client: &str, packet: &[u8]) -> Option<Message> {
        let local: SocketAddr = local.parse().expect("local");
        let src: SocketAddr = client.parse().expect("client");
        let mut out = [0u8; MAX_REPLY];
        let fast = self.engine.fast(local, src.ip(), packet, &mut out);
        let slow = self
            .rt
            .block_on(self.engine.slow(local, src, packet.to_vec(), Protocol::Udp));
        let slow = slow.map(|b| {
            assert!(b.len() >= 12, "reply shorter than a header");
            assert_eq!(b[..2], packet[..2], "reply id differs");
            Message::from_vec(&b).expect("the handler's reply decodes")
        });
        match fast {
            Fast::Drop => {
                assert!(slow.is_none(), "fast path dropped what the handler answers");
                None
            }
            Fast::Slow => slow,
            Fast::Reply(n) => {
                let f = Message::from_vec(&out[..n]).expect("the fast reply decodes");
                let s = slow.expect("the handler answers what the fast path answers");
                assert_eq!(f, s, "fast path and handler differ for {packet:?}");
                Some(f)
            }
        }
    }
}

/// Suffixes the generated names end in: every apex, alias and wildcard
/// parent of [`CONFIG`], and forwarded ones.
const SUFFIXES: &[&[usize]] = &[
    &[14, 16, 17],         // c1.example.com
    &[15, 16, 17],         // c2.example.com
    &[9, 14, 16, 17],      // apps.c1.example.com
    &[9, 15, 16, 17],      // apps.c2.example.com
    &[16, 18],             // example.net
    &[11, 12, 16, 18],     // a.b.example.net
    &[6, 16, 18],          // deep.example.net
    &[19, 20],             // big.test
    &[23],                 // kubernetes
    &[23, 24, 25],         // kubernetes.default.svc
    &[23, 24, 25, 26, 27], // kubernetes.default.svc.cluster.local
    &[24, 25, 26, 27],     // default.svc.cluster.local
    &[16, 17],             // example.com
    &[],                   // the root
];

/// A name: a few labels from [`LABELS`] in front of one of [`SUFFIXES`],
/// each label in random case.
fn name_strategy() -> impl Strategy<Value = Vec<(usize, bool)>> {
    (
        prop::collection::vec(0usize..LABELS.len(), 0..4),
        prop::sample::select(SUFFIXES),
        prop::collection::vec(any::<bool>(), 9),
    )
        .prop_map(|(prefix, suffix, case)| {
            prefix
                .into_iter()
                .chain(suffix.iter().copied())
                .zip(case.into_iter().chain(std::iter::repeat(false)))
                .collect()
        })
}

fn name_wire(labels: &[(usize, bool)]) -> Vec<u8> {
    let mut w = Vec::new();
    for &(i, upper) in labels {
        let l = LABELS[i % LABELS.len()];
        w.push(l.len() as u8);
        if upper {
            w.extend(l.bytes().map(|b| b.to_ascii_uppercase()));
        } else {
            w.extend(l.bytes());
        }
    }
    w.push(0);
    w
}

#[allow(clippy::too_many_arguments)]
fn query(
    id: u16,
    flags: u16,
    name: &[u8],
    qtype: u16,
    qclass: u16,
    edns: Option<(u16, u8, Vec<u8>)>,
) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend(id.to_be_bytes());
    p.extend(flags.to_be_bytes());
    p.extend([0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    p.extend(name);
    p.extend(qtype.to_be_bytes());
    p.extend(qclass.to_be_bytes());
    if let Some((size, version, options)) = edns {
        p.push(0);
        p.extend(41u16.to_be_bytes());
        p.extend(size.to_be_bytes());
        p.extend([0, version, 0x80, 0]);
        p.extend((options.len() as u16).to_be_bytes());
        p.extend(options);
    }
    p
}

const QTYPES: &[u16] = &[1, 28, 2, 5, 6, 12, 15, 16, 33, 65, 255];
const CLIENTS: &[(&str, &str)] = &[
    ("127.0.0.2:53", "127.0.0.200:4000"),
    ("127.0.0.2:53", "127.0.0.200:4000"),
    ("127.0.0.2:53", "127.0.0.9:4000"),
    ("127.0.0.2:53", "127.0.0.9:4000"),
    ("127.0.0.3:53", "127.0.0.9:4000"),
    ("127.0.0.4:53", "127.0.0.9:4000"),
];

fn edns_strategy() -> impl Strategy<Value = Option<(u16, u8, Vec<u8>)>> {
    prop_oneof![
        Just(None),
        (
            prop_oneof![Just(512u16), Just(1232), Just(4096), any::<u16>()],
            prop_oneof![Just(0u8), Just(0), Just(1)],
            prop_oneof![
                Just(vec![]),
                // A cookie option, as dig sends.
                Just(vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]),
            ],
        )
            .prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, .. ProptestConfig::default() })]

    /// Well-formed queries: fast path and handler agree; owned names are
    /// answered authoritatively.
    #[test]
    fn fast_path_agrees_with_the_handler(
        labels in name_strategy(),
        qtype in prop_oneof![
            4 => prop_oneof![Just(1u16), Just(28)],
            1 => prop::sample::select(QTYPES),
        ],
        qclass in prop_oneof![8 => Just(1u16), 1 => Just(3), 1 => Just(255)],
        flags in prop_oneof![
            4 => prop_oneof![Just(0x0100u16), Just(0x0000), Just(0x0110), Just(0x0120)],
            1 => any::<u16>().prop_map(|f| f & 0x7fff),
        ],
        edns in edns_strategy(),
        client in prop::sample::select(CLIENTS),
        id in any::<u16>(),
    ) {
        let rig = RIG.with(|r| r.clone());
        let name = name_wire(&labels);
        let packet = query(id, flags, &name, qtype, qclass, edns.clone());
        if let Some(reply) = rig.run(client.0, client.1, &packet) {
            prop_assert_eq!(reply.metadata.id, id);
            let opcode = (flags >> 11) & 0x0f;
            let rcode = u16::from(reply.metadata.response_code);
            match (&edns, &reply.edns) {
                (Some(_), None) => prop_assert!(false, "no OPT in the reply to an EDNS query"),
                (None, Some(_)) => prop_assert!(false, "an OPT in the reply to a query without"),
                (Some((_, version, _)), Some(opt)) => {
                    // Version 0 answered, the query's DO bit (always set
                    // here) copied; a higher version gets BADVERS.
                    prop_assert_eq!(opt.version(), 0);
                    prop_assert!(opt.flags().dnssec_ok, "DO bit not copied");
                    if opcode == 0 {
                        prop_assert_eq!(rcode == 16, *version > 0, "rcode {}", rcode);
                    }
                }
                (None, None) => {}
            }
            let badvers = edns.as_ref().is_some_and(|(_, v, _)| *v > 0);
            if opcode == 0 && !badvers && qclass != 1 {
                // Only IN is answered or forwarded.
                prop_assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
                prop_assert!(reply.answers.is_empty());
            }
        }
    }

    /// Random mutations of valid queries: no panic, both paths agree.
    #[test]
    fn mutated_queries_do_not_break_the_request_path(
        labels in name_strategy(),
        edns in edns_strategy(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let rig = RIG.with(|r| r.clone());
        let mut packet = query(7, 0x0100, &name_wire(&labels), 1, 1, edns);
        for (at, b) in edits {
            let i = at % packet.len();
            packet[i] = b;
        }
        packet.truncate(12 + cut % (packet.len() - 11));
        if packet[2] & 0x80 == 0 {
            rig.run("127.0.0.2:53", "127.0.0.9:4000", &packet);
        }
    }

    /// Random bytes: no panic; a reply only when there is a header to echo.
    #[test]
    fn random_bytes_get_no_answer_or_a_reply_with_their_id(
        packet in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let rig = RIG.with(|r| r.clone());
        let reply = rig.run("127.0.0.2:53", "127.0.0.9:4000", &packet);
        if packet.len() < 12 || packet[2] & 0x80 != 0 {
            prop_assert!(reply.is_none());
        }
    }

    /// Truncated headers: silence.
    #[test]
    fn truncated_headers_get_no_answer(packet in prop::collection::vec(any::<u8>(), 0..12)) {
        let rig = RIG.with(|r| r.clone());
        prop_assert!(rig.run("127.0.0.2:53", "127.0.0.9:4000", &packet).is_none());
    }

    /// Label lengths beyond the packet or with the reserved 0x40/0x80 bits,
    /// and names longer than 255 bytes: FORMERR or nothing, never an answer.
    #[test]
    fn bad_label_lengths_get_formerr(
        prefix in prop::collection::vec((0usize..LABELS.len(), any::<bool>()), 0..3),
        bad in prop_oneof![64u8..=191, 20u8..=63],
        tail in prop::collection::vec(any::<u8>(), 0..8),
        long in any::<bool>(),
    ) {
        let rig = RIG.with(|r| r.clone());
        let mut name = name_wire(&prefix);
        name.pop();
        if long {
            // 5 × 63-byte labels: 320 bytes, over the 255 limit.
            for _ in 0..5 {
                name.push(63);
                name.extend([b'a'; 63]);
            }
            name.push(0);
            name.extend([0, 1, 0, 1]);
        } else {
            // A label longer than what is left (at most 8 + 4 bytes).
            name.push(bad);
            name.extend(&tail);
        }
        let mut packet = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        packet.extend(name);
        if let Some(reply) = rig.run("127.0.0.2:53", "127.0.0.9:4000", &packet) {
            prop_assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
        }
    }

    /// Compression pointers that loop (to themselves, to each other, or
    /// forward into the loop): FORMERR or nothing.
    #[test]
    fn compression_loops_get_formerr(
        prefix in prop::collection::vec((0usize..LABELS.len(), any::<bool>()), 0..3),
        kind in 0u8..3,
    ) {
        let rig = RIG.with(|r| r.clone());
        let mut name = name_wire(&prefix);
        name.pop();
        let here = 12 + name.len();
        match kind {
            // A pointer to itself.
            0 => name.extend([0xc0 | (here >> 8) as u8, here as u8]),
            // A pointer to the start of the name, which leads back here.
            1 => name.extend([0xc0, 12]),
            // Two pointers pointing at each other.
            _ => name.extend([0xc0 | ((here + 2) >> 8) as u8, (here + 2) as u8, 0xc0 | (here >> 8) as u8, here as u8]),
        }
        name.extend([0, 1, 0, 1]);
        let mut packet = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        packet.extend(name);
        if let Some(reply) = rig.run("127.0.0.2:53", "127.0.0.9:4000", &packet) {
            prop_assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
        }
    }
}

thread_local! {
    static RIG: std::rc::Rc<Rig> = std::rc::Rc::new(Rig::new());
}

/// The shapes the fast path must take, so that the benchmark measures it.
#[test]
fn fast_path_takes_owned_a_and_aaaa_queries_with_and_without_edns() {
    let rig = Rig::new();
    let local: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let client = "127.0.0.9".parse().expect("ip");
    let mut out = [0u8; MAX_REPLY];
    let cases: &[(&[(usize, bool)], u16)] = &[
        (&[(0, false), (14, false), (16, false), (17, false)], 1), // api.c1.example.com A
        (&[(0, true), (14, false), (16, true), (17, false)], 28),  // API.c1.EXAMPLE.com AAAA
        (
            &[
                (10, false),
                (9, false),
                (14, false),
                (16, false),
                (17, false),
            ],
            1,
        ), // x.apps.c1...
        (
            &[
                (10, false),
                (10, false),
                (14, false),
                (16, false),
                (17, false),
            ],
            1,
        ), // x.x.c1... NX
        (&[(23, false), (24, false)], 1),                          // kubernetes.default
    ];
    for (labels, qtype) in cases {
        for edns in [
            None,
            Some((1232u16, 0u8, vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])),
        ] {
            let packet = query(9, 0x0100, &name_wire(labels), *qtype, 1, edns);
            let r = rig.engine.fast(local, client, &packet, &mut out);
            assert!(matches!(r, Fast::Reply(_)), "{labels:?} {qtype}: {r:?}");
            let m = rig
                .run("127.0.0.2:53", "127.0.0.9:4000", &packet)
                .expect("reply");
            assert!(m.metadata.authoritative);
        }
    }
    // Forwarded names, other types and truncation go to the handler.
    let fwd = query(
        9,
        0x0100,
        &name_wire(&[(16, false), (18, false)]),
        1,
        1,
        None,
    );
    assert_eq!(rig.engine.fast(local, client, &fwd, &mut out), Fast::Slow);
    let mx = query(
        9,
        0x0100,
        &name_wire(&[(0, false), (14, false), (16, false), (17, false)]),
        15,
        1,
        None,
    );
    assert_eq!(rig.engine.fast(local, client, &mx, &mut out), Fast::Slow);
    let many = query(
        9,
        0x0100,
        &name_wire(&[(21, false), (19, false), (20, false)]),
        1,
        1,
        None,
    );
    assert_eq!(rig.engine.fast(local, client, &many, &mut out), Fast::Slow);
    let m = rig
        .run("127.0.0.2:53", "127.0.0.9:4000", &many)
        .expect("reply");
    assert!(m.metadata.truncation);
}

/// A small upstream on loopback: every A/AAAA query gets two answers, an NS
/// authority and an additional record; names under `nx.` get NXDOMAIN.
fn spawn_upstream() -> SocketAddr {
    use hickory_proto::rr::rdata::{A, AAAA, NS, SOA};
    use hickory_proto::rr::{Name, RData, Record, RecordType};
    use std::str::FromStr;
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind upstream");
    let addr = sock.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut r = Message::response(q.metadata.id, q.metadata.op_code);
            r.metadata.recursion_available = true;
            let ns = Name::from_str("ns.example.org.").expect("name");
            for query in &q.queries {
                r.add_query(query.clone());
                let name = query.name().clone();
                if name.to_string().starts_with("nx.") {
                    r.metadata.response_code = ResponseCode::NXDomain;
                    r.add_authority(Record::from_rdata(
                        Name::from_str("example.org.").expect("name"),
                        90,
                        RData::SOA(SOA::new(ns.clone(), ns.clone(), 1, 2, 3, 4, 90)),
                    ));
                    continue;
                }
                for i in 1..=2u8 {
                    let data = if query.query_type() == RecordType::AAAA {
                        RData::AAAA(AAAA::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(i)))
                    } else {
                        RData::A(A::new(203, 0, 113, i))
                    };
                    r.add_answer(Record::from_rdata(name.clone(), 60 * u32::from(i), data));
                }
                r.add_authority(Record::from_rdata(
                    Name::from_str("example.org.").expect("name"),
                    300,
                    RData::NS(NS(ns.clone())),
                ));
                r.add_additional(Record::from_rdata(
                    ns.clone(),
                    300,
                    RData::A(A::new(203, 0, 113, 53)),
                ));
            }
            if let Ok(bytes) = r.to_vec() {
                let _ = sock.send_to(&bytes, from);
            }
        }
    });
    addr
}

/// Forwarded answers in the cache are served by the fast path, exactly as
/// the handler serves them (TTLs capped to the time left, within a second).
#[test]
fn warm_forwarded_names_are_answered_by_the_fast_path_like_the_handler() {
    let upstream = spawn_upstream();
    let text = format!(
        "upstreams:\n  servers: [\"{upstream}\"]\n  max_cache_ttl: 100\nviews:\n  - name: v\n    listen: [\"127.0.0.2:53\"]\n"
    );
    let engine = Engine::new(Config::parse(&text).expect("config"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let src: SocketAddr = "127.0.0.9:4000".parse().expect("addr");
    let mut out = [0u8; MAX_REPLY];
    let ttls = |m: &Message| -> Vec<u32> {
        m.answers
            .iter()
            .chain(&m.authorities)
            .map(|r| r.ttl)
            .collect()
    };
    for (name, qtype) in [
        (name_wire(&[(0, false), (16, false), (18, false)]), 1u16), // api.example.net
        (name_wire(&[(0, true), (16, false), (18, false)]), 28),    // API.example.net AAAA
        (b"\x02nx\x07example\x03org\x00".to_vec(), 1),
    ] {
        for edns in [None, Some((1232u16, 0u8, vec![]))] {
            let packet = query(77, 0x0100, &name, qtype, 1, edns.clone());
            // Cold (first time only): the handler asks the upstream and
            // fills the cache.
            if edns.is_none() {
                assert_eq!(engine.fast(local, src.ip(), &packet, &mut out), Fast::Slow);
            }
            let cold = rt
                .block_on(engine.slow(local, src, packet.clone(), Protocol::Udp))
                .expect("cold reply");
            let cold = Message::from_vec(&cold).expect("decode");
            // Warm: the fast path answers.
            let Fast::Reply(n) = engine.fast(local, src.ip(), &packet, &mut out) else {
                panic!("a warm forwarded name must take the fast path");
            };
            let fast = Message::from_vec(&out[..n]).expect("decode fast");
            let slow = rt
                .block_on(engine.slow(local, src, packet.clone(), Protocol::Udp))
                .expect("warm reply");
            let mut slow = Message::from_vec(&slow).expect("decode");
            for (f, s) in ttls(&fast).iter().zip(ttls(&slow)) {
                assert!(f.abs_diff(s) <= 1 && *f <= 100, "ttl {f} vs {s}");
            }
            for (f, s) in fast
                .answers
                .iter()
                .chain(&fast.authorities)
                .zip(slow.answers.iter_mut().chain(slow.authorities.iter_mut()))
            {
                s.ttl = f.ttl;
            }
            assert_eq!(fast, slow);
            assert_eq!(fast.metadata.response_code, cold.metadata.response_code);
            assert!(!fast.metadata.authoritative);
            assert_eq!(fast.answers.len(), cold.answers.len());
            assert_eq!(fast.additionals.len(), cold.additionals.len());
        }
    }
}

/// An upstream that sets TC on every UDP answer and answers in full over
/// TCP, on the same loopback port.
fn spawn_tcp_only_upstream() -> SocketAddr {
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{RData, Record};
    use std::io::{Read, Write};
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let addr = udp.local_addr().expect("addr");
    let tcp = std::net::TcpListener::bind(addr).expect("bind tcp");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut r = Message::response(q.metadata.id, q.metadata.op_code);
            r.metadata.truncation = true;
            r.add_queries(q.queries.iter().cloned());
            if let Ok(bytes) = r.to_vec() {
                let _ = udp.send_to(&bytes, from);
            }
        }
    });
    std::thread::spawn(move || {
        for mut s in tcp.incoming().flatten() {
            let mut len = [0u8; 2];
            if s.read_exact(&mut len).is_err() {
                continue;
            }
            let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if s.read_exact(&mut buf).is_err() {
                continue;
            }
            let Ok(q) = Message::from_vec(&buf) else {
                continue;
            };
            let mut r = Message::response(q.metadata.id, q.metadata.op_code);
            for query in &q.queries {
                r.add_query(query.clone());
                r.add_answer(Record::from_rdata(
                    query.name().clone(),
                    60,
                    RData::A(A::new(198, 51, 100, 9)),
                ));
            }
            if let Ok(bytes) = r.to_vec() {
                let _ = s.write_all(&(bytes.len() as u16).to_be_bytes());
                let _ = s.write_all(&bytes);
            }
        }
    });
    addr
}

/// The first upstream is down (nothing listens: refused at once), the second
/// truncates over UDP: the answer comes from the second, over TCP.
#[test]
fn forwarding_fails_over_to_the_next_upstream_and_retries_truncated_answers_over_tcp() {
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    let upstream = spawn_tcp_only_upstream();
    let text = format!(
        "upstreams:\n  servers: [\"{dead_addr}\", \"{upstream}\"]\nviews:\n  - name: v\n    listen: [\"127.0.0.2:53\"]\n"
    );
    let engine = Engine::new(Config::parse(&text).expect("config"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let src: SocketAddr = "127.0.0.9:4000".parse().expect("addr");
    let packet = query(5, 0x0100, b"\x03www\x07example\x03org\x00", 1, 1, None);
    let reply = rt
        .block_on(engine.slow(local, src, packet, Protocol::Udp))
        .expect("reply");
    let m = Message::from_vec(&reply).expect("decode");
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 1);
    assert_eq!(m.answers[0].data.to_string(), "198.51.100.9");
}

/// The only upstream never answers: queries for names of three unrelated
/// zones wait for the timeout and get SERVFAIL, which marks it down; as the
/// only upstream it is still asked (a wrong verdict must not fail names it
/// would answer), so the next query waits for the timeout too, and owned
/// names answer at once throughout.
#[test]
fn a_silent_only_upstream_is_still_asked_and_owned_names_answer_at_once() {
    use std::time::{Duration, Instant};
    // Bound and kept open, never read: queries to it time out.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let text = format!(
        "upstreams:\n  servers: [\"{addr}\"]\n  timeout_ms: 1000\n  down_backoff_ms: 60000\nclusters:\n  - {{name: c1, base_domain: example.com, proxy: 192.0.2.4}}\nviews:\n  - name: v\n    kind: vlan\n    listen: [\"127.0.0.2:53\"]\n"
    );
    let engine = Engine::new(Config::parse(&text).expect("config"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let src: SocketAddr = "127.0.0.9:4000".parse().expect("addr");
    let ask = |name: &'static [u8]| {
        let packet = query(5, 0x0100, name, 1, 1, None);
        let engine = &engine;
        async move {
            let started = Instant::now();
            let reply = engine
                .slow(local, src, packet, Protocol::Udp)
                .await
                .expect("reply");
            let m = Message::from_vec(&reply).expect("decode");
            (m.metadata.response_code, started.elapsed())
        }
    };
    // Names of three unrelated zones time out together.
    let (a, b, c) = rt.block_on(async {
        tokio::join!(
            ask(b"\x03www\x07example\x03org\x00"),
            ask(b"\x03www\x07example\x03net\x00"),
            ask(b"\x03www\x05other\x03org\x00"),
        )
    });
    for (rc, waited) in [a, b, c] {
        assert_eq!(rc, ResponseCode::ServFail);
        assert!(waited >= Duration::from_millis(1000), "{waited:?}");
    }
    let (rc, waited) = rt.block_on(ask(b"\x05other\x07example\x03org\x00"));
    assert_eq!(rc, ResponseCode::ServFail);
    assert!(
        waited >= Duration::from_millis(1000),
        "the only upstream was not asked: {waited:?}"
    );
    let started = Instant::now();
    let (rc, _) = rt.block_on(ask(b"\x03api\x02c1\x07example\x03com\x00"));
    assert_eq!(rc, ResponseCode::NoError);
    assert!(started.elapsed() < Duration::from_millis(500));
    drop(silent);
}

/// One name that never gets an answer, asked again and again, does not make
/// the upstream count as down: the next other name is still asked (and
/// waits for the timeout rather than getting SERVFAIL at once).
#[test]
fn one_name_timing_out_again_and_again_does_not_stop_forwarding() {
    use std::time::{Duration, Instant};
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let text = format!(
        "upstreams:\n  servers: [\"{addr}\"]\n  timeout_ms: 200\n  down_backoff_ms: 60000\nviews:\n  - name: v\n    listen: [\"127.0.0.2:53\"]\n"
    );
    let engine = Engine::new(Config::parse(&text).expect("config"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let src: SocketAddr = "127.0.0.9:4000".parse().expect("addr");
    let ask = |name: &[u8]| {
        let packet = query(5, 0x0100, name, 1, 1, None);
        let started = Instant::now();
        rt.block_on(engine.slow(local, src, packet, Protocol::Udp))
            .expect("reply");
        started.elapsed()
    };
    for _ in 0..5 {
        assert!(ask(b"\x04slow\x07example\x03org\x00") >= Duration::from_millis(200));
    }
    let waited = ask(b"\x05other\x07example\x03org\x00");
    assert!(
        waited >= Duration::from_millis(200),
        "the other name was not sent upstream: {waited:?}"
    );
    drop(silent);
}
