//! Feeds arbitrary datagrams through every stage of the pipeline, against a
//! table that already holds an offer, a lease and a quarantine, so the
//! decision code sees every kind of state. Properties: no panic, and any
//! reply the server would send decodes again.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oooi_dhcp::config::Mac;
use oooi_dhcp::leases::LeaseTable;
use oooi_dhcp::pipeline::{handle, parse};
use oooi_dhcp::testing::{self, DOC_NET, WORKER_0};

fn seeded() -> &'static LeaseTable {
    static T: OnceLock<LeaseTable> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = testing::table(
            DOC_NET,
            &[
                "range: { start: 192.0.2.100, end: 192.0.2.104 }",
                "dns_servers: [192.0.2.3]",
                "domain: cluster.example",
                "mtu: 1450",
                "lease_seconds: 600",
                "classless_routes: [{ destination: 10.0.0.0/8, gateway: 192.0.2.1 }]",
                WORKER_0,
            ],
        );
        let a = t.offer(Mac([2, 0, 0, 0, 0, 1]), None, 100).expect("offer");
        t.commit(Mac([2, 0, 0, 0, 0, 1]), a, 100).expect("commit");
        let b = t.offer(Mac([2, 0, 0, 0, 0, 2]), None, 100).expect("offer");
        t.commit(Mac([2, 0, 0, 0, 0, 2]), b, 100).expect("commit");
        t.decline(Mac([2, 0, 0, 0, 0, 2]), b, 100);
        t.offer(Mac([2, 0, 0, 0, 0, 3]), None, 100).expect("offer");
        t
    })
}

fuzz_target!(|data: &[u8]| {
    let mut t = seeded().clone();
    // Two passes at different times: inside and after the holds.
    for now in [110, 10_000] {
        if let Ok(o) = handle(&mut t, data, now)
            && let Some((reply, _)) = o.reply
        {
            assert!(parse(&reply).is_ok(), "reply does not decode");
        }
    }
});
