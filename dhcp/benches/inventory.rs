//! What one inventory API question costs the decision loop, which answers
//! it between two datagrams: a page of rows, the pool figures and a lookup
//! by address over a table of 50,000 leases with metadata, no sockets:
//! `cargo bench -p oooi-dhcp --bench inventory`.

use std::time::{Duration, Instant};

use oooi_dhcp::config::Mac;
use oooi_dhcp::inventory::meta::{Meta, Sent};
use oooi_dhcp::inventory::{Question, answer};
use oooi_dhcp::leases::LeaseTable;
use oooi_dhcp::testing::{self, WIDE_NET};
use oooi_dhcp_inventory::{LeaseQuery, ServerRole};

/// The mean time of `runs` answers to `q`.
fn time(table: &LeaseTable, meta: &Meta, q: &Question, runs: u32) -> Duration {
    let started = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(answer(table, meta, q, 2000));
    }
    started.elapsed() / runs
}

fn main() {
    let mut table = testing::table(WIDE_NET, &[]);
    let mut meta = Meta::default();
    let n = 50_000u32;
    for i in 0..n {
        let b = i.to_be_bytes();
        let mac = Mac([2, 0, b[0], b[1], b[2], b[3]]);
        let ip = table.offer(mac, None, 1000).expect("offer");
        table.commit(mac, ip, 1000).expect("commit");
        let sent = Sent {
            client_id: Some([&[1u8][..], &mac.0[..]].concat()),
            hostname: Some(format!("worker-{i}")),
        };
        meta.transacted(ip, mac, &sent, ServerRole::Single, 1000);
    }
    let page = |limit| {
        Question::Leases(LeaseQuery {
            limit: Some(limit),
            ..LeaseQuery::default()
        })
    };
    let by_ip = Question::Leases(LeaseQuery {
        ip: Some("10.20.100.7".parse().expect("ip")),
        ..LeaseQuery::default()
    });
    let by_host = Question::Leases(LeaseQuery {
        hostname: Some("worker-4242".into()),
        ..LeaseQuery::default()
    });
    println!(
        "{n} leases: first page of 100 {:.2} ms, of 1000 {:.2} ms, by host name {:.2} ms, pools {:.2} ms, by address {:.1} µs",
        time(&table, &meta, &page(100), 20).as_secs_f64() * 1e3,
        time(&table, &meta, &page(1000), 20).as_secs_f64() * 1e3,
        time(&table, &meta, &by_host, 20).as_secs_f64() * 1e3,
        time(&table, &meta, &Question::Pools, 20).as_secs_f64() * 1e3,
        time(&table, &meta, &by_ip, 2000).as_secs_f64() * 1e6,
    );
}
