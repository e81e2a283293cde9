//! A time-bounded mutation fuzzer for the table decoders: the pushed JSON
//! (`RouteTable::from_json`) and the compact encoding the filter keeps in
//! shared data (`compact::decode`), then the router built from whatever
//! they accept.
//!
//! Inputs start from valid tables (every match kind, both upstream kinds)
//! and are mutated byte-wise and structurally: bit flips, byte and range
//! overwrites, insertions of JSON tokens and of interesting numbers,
//! truncations, splices of two inputs. Each accepted input must keep the
//! decoders' promises: a document that parses is valid, round-trips through
//! JSON and the compact encoding unchanged, and keeps its digest; a router
//! built from it decides any connection without panicking.
//!
//! It runs `OOOI_FUZZ_SECONDS` seconds (default 15) and prints the number
//! of executions: `OOOI_FUZZ_SECONDS=600 cargo test --release -p oooi-routes
//! --test fuzz -- --nocapture` is the long run.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use oooi_routes::{RouteTable, Router, compact};

/// xorshift64*: small, fast and reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const SEEDS: [&str; 3] = [
    r#"{"generation": 7, "routes": [
        {"port": 6443, "sni": "api.c1.example.com", "upstream": {"address": {"host": "kube-apiserver.clusters-c1.svc", "port": 6443}}, "owner": "clusters/c1"},
        {"port": 443, "sni": "*.apps.c1.example.com", "upstream": {"cluster": "c1_apps"}},
        {"port": 443, "sni": "oauth.c1.example.com", "sources": ["192.0.2.10", "0.0.0.0/1", "2001:db8::/32"], "upstream": {"address": {"host": "10.0.0.7", "port": 443}}},
        {"port": 6443, "source": "192.0.2.10/32", "upstream": {"cluster": "c1_api"}},
        {"port": 443, "alias_source": "192.0.2.0/24", "upstream": {"cluster": "c1_api"}},
        {"port": 6443, "source": "2001:db8::/64", "upstream": {"address": {"host": "::1", "port": 6443}}}
    ]}"#,
    r#"{"generation": 9007199254740991, "routes": []}"#,
    r#"{"generation": 1, "routes": [{"port": 80, "sni": "*.apps.c2.example.com", "upstream": {"address": {"host": "192.0.2.200", "port": 80}}}]}"#,
];

const TOKENS: [&str; 24] = [
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "-1",
    "0",
    "1e999",
    "18446744073709551616",
    "9007199254740992",
    "65536",
    "\"sni\"",
    "\"source\"",
    "\"alias_source\"",
    "\"sources\"",
    "\"*.\"",
    "\"..\"",
    "\"/33\"",
    "\\u0000",
    "\u{e9}",
];

fn mutate(rng: &mut Rng, input: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next() as u8;
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(len + 1);
                out.splice(i..i, t.iter().copied());
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let j = (i + 1 + rng.below(16)).min(len);
                out.drain(i..j);
            }
            4 => out.truncate(rng.below(len + 1)),
            5 if !pool.is_empty() => {
                let other = &pool[rng.below(pool.len())];
                let i = rng.below(len + 1);
                let j = rng.below(other.len() + 1);
                out.truncate(i);
                out.extend_from_slice(&other[j..]);
            }
            _ if len > 1 => {
                // Duplicate a range: repeated routes, keys and fields.
                let i = rng.below(len);
                let j = (i + 1 + rng.below(64)).min(len);
                let piece = out[i..j].to_vec();
                out.splice(j..j, piece);
            }
            _ => {}
        }
    }
    out
}

fn probe(router: &Router, rng: &mut Rng) {
    let names = [
        "api.c1.example.com",
        "x.apps.c1.example.com",
        "kubernetes",
        "",
        "a..b",
        "*",
    ];
    for _ in 0..4 {
        let port = [443, 6443, 80, rng.next() as u16][rng.below(4)];
        let sni = names[rng.below(names.len())];
        let ip = if rng.below(2) == 0 {
            IpAddr::from((rng.next() as u32).to_be_bytes())
        } else {
            IpAddr::from(u128::from(rng.next()).to_be_bytes())
        };
        let _ = router.decide(port, Some(sni).filter(|_| rng.below(3) > 0), Some(ip));
        // The server name as raw bytes, as Envoy hands it over.
        let mut raw = sni.as_bytes().to_vec();
        if !raw.is_empty() && rng.below(2) == 0 {
            let at = rng.below(raw.len());
            raw[at] = rng.next() as u8;
        }
        let _ = router.decide_raw_with(port, &raw, || Some(ip));
    }
}

/// One input through every decoder, checking what each promises.
fn run_one(bytes: &[u8], rng: &mut Rng) -> bool {
    let mut accepted = false;
    if let Ok(table) = RouteTable::from_json(bytes) {
        accepted = true;
        table.validate().expect("a parsed table is valid");
        let again = RouteTable::from_json(&table.to_json()).expect("its JSON parses");
        assert_eq!(again, table, "JSON round trip");
        let digest = table.digest();
        assert_eq!(again.digest(), digest);
        let encoded = compact::encode(&table, &digest);
        let (back, d) = compact::decode(&encoded).expect("its compact form decodes");
        assert_eq!(
            (&back, d.as_str()),
            (&table, digest.as_str()),
            "compact round trip"
        );
        probe(&Router::new(table), rng);
    }
    // The same bytes, and a compact form mutated, through the binary decoder.
    if let Ok((table, digest)) = compact::decode(bytes) {
        probe(&Router::with_digest(digest, table), rng);
    }
    accepted
}

#[test]
fn table_decoders_hold_under_mutation() {
    let seconds: u64 = std::env::var("OOOI_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed = std::env::var("OOOI_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    let mut rng = Rng(seed);
    let mut pool: Vec<Vec<u8>> = SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    for s in SEEDS {
        let t = RouteTable::from_json(s.as_bytes()).expect("seed is valid");
        pool.push(compact::encode(&t, &t.digest()));
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut runs, mut accepted) = (0u64, 0u64);
    while Instant::now() < deadline {
        for _ in 0..256 {
            let base = pool[rng.below(pool.len())].clone();
            let input = mutate(&mut rng, &base, &pool);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_one(&input, &mut Rng(rng.next() | 1))
            }));
            match outcome {
                Ok(true) => {
                    accepted += 1;
                    // Keep accepted inputs (bounded) as new starting points.
                    if pool.len() < 512 {
                        pool.push(input);
                    }
                }
                Ok(false) => {}
                Err(_) => panic!(
                    "seed {seed}: failing input {:?}",
                    String::from_utf8_lossy(&input)
                ),
            }
            runs += 1;
        }
    }
    eprintln!(
        "table decoders: {runs} executions in {seconds} s ({accepted} accepted), seed {seed}"
    );
    assert!(runs > 0);
}
