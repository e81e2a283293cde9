//! `oooi-kube-mock`: the stateful mocked Kubernetes API of this crate, served
//! over HTTP as a small server for labs that run real processes against it
//! (the address agents of the VLAN lab hold their Leases here).
//!
//! `oooi-kube-mock --listen IP:PORT [--stats FILE]` prints `listening on
//! ADDR` once it accepts connections, then serves until killed. With
//! `--stats`, it rewrites FILE about every 200 ms with the requests served so
//! far, counted per object path and verb
//! (`{"since_ms": .., "requests": {"GET /apis/..": n, ..}}`), so a lab can
//! measure the API load of its clients.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oooi_kube_mock::MockApi;

fn usage(problem: &str) -> ! {
    eprintln!("oooi-kube-mock: {problem}\nusage: oooi-kube-mock --listen IP:PORT [--stats FILE]");
    std::process::exit(2)
}

fn main() {
    let mut listen: Option<SocketAddr> = None;
    let mut stats: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                let v = args
                    .next()
                    .unwrap_or_else(|| usage("--listen needs a value"));
                listen = Some(v.parse().unwrap_or_else(|_| {
                    usage(&format!("--listen `{v}` is not an IP:PORT address"))
                }));
            }
            "--stats" => {
                stats = Some(PathBuf::from(
                    args.next()
                        .unwrap_or_else(|| usage("--stats needs a value")),
                ));
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    let Some(listen) = listen else {
        usage("--listen is required")
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oooi-kube-mock: cannot start the runtime: {e}");
            std::process::exit(1)
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("oooi-kube-mock: cannot listen on {listen}: {e}");
                std::process::exit(1)
            }
        };
        let mock = MockApi::start();
        let addr = mock.serve_http_on(listener);
        println!("listening on {addr}");
        let _ = std::io::stdout().flush();
        let since_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let Some(path) = &stats else { continue };
            for r in mock.take() {
                *counts
                    .entry(format!("{} {}", r.method, r.path()))
                    .or_default() += 1;
            }
            let doc = serde_json::json!({"since_ms": since_ms, "requests": counts});
            // Whole or not at all: a reader never sees a half-written file.
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, doc.to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
    });
}
