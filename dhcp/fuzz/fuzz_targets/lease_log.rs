//! Feeds arbitrary bytes to the lease-log reader. Properties: no panic; the
//! good records end where the reader says; every dropped record lies before
//! that end; and a log re-encoded from the leases read back reads back the
//! same (what recovery writes when it drops a record).
#![no_main]

use libfuzzer_sys::fuzz_target;
use oooi_dhcp::lease_store::{RECORD_LEN, encode_leases, inspect};

fuzz_target!(|data: &[u8]| {
    let r = inspect(data);
    assert!(r.valid <= data.len());
    assert_eq!(r.valid % RECORD_LEN, 0);
    assert!(r.records * RECORD_LEN <= r.valid);
    for d in &r.dropped {
        assert!((d.offset as usize) < r.valid);
    }
    let again = inspect(&encode_leases(&r.leases));
    assert_eq!(again.leases, r.leases);
    assert!(again.dropped.is_empty());
});
