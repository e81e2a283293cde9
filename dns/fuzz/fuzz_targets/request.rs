//! Fuzzes the UDP request path: the fast path and the hickory handler on the
//! same packet. Neither may panic; whenever the fast path answers, the
//! handler must give the same message; a reply always carries the query id;
//! nothing answers a packet shorter than a header or a response.
#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;

use hickory_proto::op::Message;
use hickory_server::net::xfer::Protocol;
use libfuzzer_sys::fuzz_target;
use oooi_dns::config::Config;
use oooi_dns::fast::{Fast, MAX_REPLY};
use oooi_dns::engine::Engine;

/// Owned names of every kind, and no upstream: forwarded names get SERVFAIL
/// without network traffic.
const CONFIG: &str = concat!(
    "clusters:\n",
    // c1: proxy 192.0.2.4, internal proxy 10.0.0.4, apps VIP 192.0.2.200.
    include_str!("../../tests/fixtures/cluster-c1.yaml"),
    r#"views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:53"]
    zones:
      - origin: example.net
        records:
          - { name: "@", a: ["10.9.0.1"] }
          - { name: "*.a.b", a: ["10.9.0.2"], aaaa: ["2001:db8::2"], ttl: 5 }
      - origin: deep.example.net
        records:
          - { name: "x", aaaa: ["2001:db8::1", "2001:db8::3"] }
  - name: pods
    kind: pod
    listen: ["127.0.0.3:53"]
"#
);

struct Rig {
    engine: Engine,
    rt: tokio::runtime::Runtime,
}

fn rig() -> &'static Rig {
    static RIG: OnceLock<Rig> = OnceLock::new();
    RIG.get_or_init(|| Rig {
        engine: Engine::new(Config::parse(CONFIG).expect("fuzz config")),
        rt: tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime"),
    })
}

fuzz_target!(|data: &[u8]| {
    let rig = rig();
    // The first byte picks the listener, so both views are reached.
    let (local, packet) = match data.split_first() {
        Some((b, rest)) if b & 1 == 1 => ("127.0.0.3:53", rest),
        Some((_, rest)) => ("127.0.0.2:53", rest),
        None => return,
    };
    let local: SocketAddr = local.parse().expect("addr");
    let src: SocketAddr = "127.0.0.9:4000".parse().expect("addr");
    let mut out = [0u8; MAX_REPLY];
    let fast = rig.engine.fast(local, src.ip(), packet, &mut out);
    let slow = rig
        .rt
        .block_on(rig.engine.slow(local, src, packet.to_vec(), Protocol::Udp));
    if packet.len() < 12 || packet[2] & 0x80 != 0 {
        assert_eq!(fast, Fast::Drop);
        assert!(slow.is_none());
        return;
    }
    if let Some(s) = &slow {
        assert!(s.len() >= 12 && s[..2] == packet[..2], "reply without the query id");
    }
    if let Fast::Reply(n) = fast {
        let f = Message::from_vec(&out[..n]).expect("fast reply decodes");
        let s = Message::from_vec(&slow.expect("handler answers too")).expect("reply decodes");
        assert_eq!(f, s);
    }
});
