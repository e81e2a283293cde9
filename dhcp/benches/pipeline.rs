//! CPU cost of the pure pipeline for one DORA (DISCOVER then REQUEST), no
//! sockets or disk: `cargo bench -p oooi-dhcp --bench pipeline`.

use std::time::Instant;

use dhcproto::Encodable;
use dhcproto::v4::{DhcpOption, Message, MessageType};
use oooi_dhcp::pipeline::handle;
use oooi_dhcp::testing::{self, WIDE_NET};

fn packet(kind: MessageType, n: u32, opts: Vec<DhcpOption>) -> Vec<u8> {
    let b = n.to_be_bytes();
    let mut m = Message::default();
    m.set_xid(n)
        .set_chaddr(&[2, 0, b[0], b[1], b[2], b[3]])
        .set_giaddr([10, 20, 0, 2]);
    m.opts_mut().insert(DhcpOption::MessageType(kind));
    for o in opts {
        m.opts_mut().insert(o);
    }
    m.to_vec().expect("encode")
}

fn main() {
    let mut table = testing::table(WIDE_NET, &["domain: cluster.example"]);
    let n = 50_000u32;
    let discovers: Vec<Vec<u8>> = (0..n)
        .map(|i| packet(MessageType::Discover, i, vec![]))
        .collect();
    let started = Instant::now();
    let mut offers = Vec::with_capacity(n as usize);
    for (i, d) in discovers.iter().enumerate() {
        let o = handle(&mut table, d, 1000).expect("discover");
        if let oooi_dhcp::pipeline::Decision::Offer { ip, .. } = o.decision {
            offers.push((i as u32, ip));
        }
    }
    let t_offer = started.elapsed();
    let requests: Vec<Vec<u8>> = offers
        .iter()
        .map(|(i, ip)| {
            packet(
                MessageType::Request,
                *i,
                vec![
                    DhcpOption::RequestedIpAddress(*ip),
                    DhcpOption::ServerIdentifier([10, 20, 0, 1].into()),
                ],
            )
        })
        .collect();
    let started = Instant::now();
    for r in &requests {
        handle(&mut table, r, 1000).expect("request");
    }
    let t_ack = started.elapsed();
    println!(
        "{n} DORAs: discover→offer {:.2} µs, request→ack {:.2} µs, {:.0} DORA/s of one core",
        t_offer.as_secs_f64() * 1e6 / f64::from(n),
        t_ack.as_secs_f64() * 1e6 / f64::from(n),
        f64::from(n) / (t_offer + t_ack).as_secs_f64()
    );
}
