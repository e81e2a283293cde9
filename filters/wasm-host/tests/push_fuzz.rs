//! A time-bounded fuzzer for the table API of the real filter module
//! (`OOOI_FILTER_WASM`), driven through the wasmtime host: mutated
//! documents pushed with good, bad, missing and lower-case tokens.
//!
//! Every push must be answered (no trap), with a status the API documents;
//! every error answer is JSON with an `error` string; the module accepts a
//! document exactly when the routes crate parses it, the token is right, the
//! generation is newer and its clusters exist; and `GET /v1/routes` always
//! reports the last accepted table. Connections decided between pushes
//! never trap either.
//!
//! It runs `OOOI_FUZZ_SECONDS` seconds (default 15) and prints the number of
//! executions; `OOOI_FUZZ_SECONDS=600 cargo test --release -p oooi-wasm-host
//! --test push_fuzz -- --nocapture` is the long run.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use oooi_routes::{RouteTable, Upstream, generation_is_newer};
use oooi_wasm_host::{FilterHost, SharedData};

const TOKEN: &str = "TOKEN-0123456789abcdef";
const CLUSTERS: [&str; 2] = ["c1_apps", "c1_api"];

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

const BASE: &str = r#"{"generation": GEN, "routes": [
    {"port": 6443, "sni": "api.c1.example.com", "upstream": {"address": {"host": "kube-apiserver.clusters-c1.svc", "port": 6443}}},
    {"port": 443, "sni": "*.apps.c1.example.com", "upstream": {"cluster": "c1_apps"}},
    {"port": 443, "sni": "oauth.c1.example.com", "sources": ["192.0.2.10", "0.0.0.0/1"], "upstream": {"address": {"host": "10.0.0.7", "port": 443}}},
    {"port": 6443, "source": "192.0.2.10/32", "upstream": {"cluster": "c1_api"}},
    {"port": 443, "alias_source": "192.0.2.0/24", "upstream": {"cluster": "c9_missing"}}
]}"#;

const TOKENS: [&str; 16] = [
    "{",
    "}",
    "[",
    "]",
    ",",
    "\"",
    "null",
    "-1",
    "0",
    "18446744073709551615",
    "9007199254740991",
    "\"c1_api\"",
    "\"cluster\"",
    "\"sni\"",
    "\"*.\"",
    "\\u0000",
];

fn mutate(rng: &mut Rng, input: &str) -> Vec<u8> {
    let mut out = input.as_bytes().to_vec();
    for _ in 0..rng.below(4) {
        let len = out.len();
        match rng.below(4) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(len + 1);
                out.splice(i..i, t.iter().copied());
            }
            2 if len > 0 => {
                let i = rng.below(len);
                let j = (i + 1 + rng.below(24)).min(len);
                out.drain(i..j);
            }
            _ => out.truncate(rng.below(len + 1)),
        }
    }
    out
}

#[test]
fn the_push_api_holds_under_mutation() {
    let Ok(path) = std::env::var("OOOI_FILTER_WASM") else {
        panic!(
            "OOOI_FILTER_WASM is not set: run `tools/dev test` (it builds the filter module and sets it)"
        );
    };
    let module = std::fs::read(&path).unwrap();
    let seconds: u64 = std::env::var("OOOI_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut rng = Rng(seed);
    let mut host = FilterHost::load(&module, SharedData::default()).unwrap();
    host.set_log_level(4);
    let api = host
        .start_plugin(
            &serde_json::json!({"role": "api", "push_token": TOKEN, "clusters": CLUSTERS})
                .to_string(),
        )
        .unwrap();
    let net = host
        .start_plugin(r#"{"role":"network","port":443}"#)
        .unwrap();
    let (good, lower) = (format!("Bearer {TOKEN}"), format!("bearer {TOKEN}"));
    let mut loaded = 0u64;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut runs, mut accepted) = (0u64, 0u64);
    while Instant::now() < deadline {
        let generation = match rng.below(4) {
            0 => loaded,
            1 => rng.next() % (1 << 53),
            _ => loaded + 1 + rng.below(3) as u64,
        };
        let doc = BASE.replace("GEN", &generation.to_string());
        let doc = if rng.below(3) == 0 {
            // Drop the route to the missing cluster half the time.
            doc.replace(
                r#",
    {"port": 443, "alias_source": "192.0.2.0/24", "upstream": {"cluster": "c9_missing"}}"#,
                "",
            )
        } else {
            doc
        };
        let body = mutate(&mut rng, &doc);
        let (auth, authorised): (Option<&str>, bool) = match rng.below(8) {
            0 => (None, false),
            1 => (Some("Bearer wrong-token-wrong-token"), false),
            2 => (Some(lower.as_str()), true),
            _ => (Some(good.as_str()), true),
        };
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let r = host
            .http_request(api, "PUT", "/v1/routes", &headers, &body)
            .unwrap_or_else(|e| {
                panic!(
                    "seed {seed}: trap on {:?}: {e}",
                    String::from_utf8_lossy(&body)
                )
            })
            .expect("every push is answered");
        let parsed = RouteTable::from_json(&body);
        let expected = match (&parsed, authorised) {
            (_, false) => if auth.is_none() { 401 } else { 403 },
            (Err(_), true) => 400,
            (Ok(_), true) if body.is_empty() => 400,
            (Ok(t), true) if t.routes.iter().any(|r| matches!(&r.upstream, Upstream::Cluster(c) if !CLUSTERS.contains(&c.as_str()))) => 400,
            (Ok(t), true) if !generation_is_newer(t.generation, loaded) => 409,
            (Ok(_), true) => 200,
        };
        assert_eq!(
            r.status,
            expected,
            "seed {seed}: {:?} answered {}",
            String::from_utf8_lossy(&body),
            r.body_text()
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {}", r.body_text()));
        if r.status == 200 {
            let t = parsed.unwrap();
            loaded = t.generation;
            assert_eq!(v["digest"], t.digest());
            accepted += 1;
        } else {
            assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
            assert_eq!(r.header("content-type"), Some("application/json"));
        }
        if runs % 16 == 0 {
            let back = host
                .http_request(api, "GET", "/v1/routes", &[], b"")
                .unwrap()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&back.body).unwrap();
            assert_eq!(v["generation"], loaded, "seed {seed}");
            let source = SocketAddr::from(([192, 0, 2, (rng.next() % 256) as u8], 40000));
            let local = SocketAddr::from(([192, 0, 2, 4], 443));
            for sni in [Some("x.apps.c1.example.com"), Some("kubernetes"), None] {
                host.new_connection(net, sni, source, local)
                    .unwrap_or_else(|e| panic!("seed {seed}: trap deciding {sni:?}: {e}"));
            }
        }
        runs += 1;
    }
    eprintln!("push API: {runs} executions in {seconds} s ({accepted} accepted), seed {seed}");
    assert!(runs > 0);
}
