//! Config reloads of the running `oooi-dns` binary with a plain-file config
//! (not the ConfigMap `..data` layout): reading the file costs nothing, and
//! a write caught half-way is not a rejected config.

mod support;

use std::io::Write;
use std::time::Duration;

use support::{Server, dig, http_get, start, wait_for};

fn config(port: u16, http: u16, proxy: &str) -> String {
    format!(
        r#"
http: 127.0.0.1:{http}
clusters:
  - name: c1
    base_domain: example.com
    proxy: {proxy}
views:
  - name: vlan
    kind: vlan
    listen: ["127.0.0.2:{port}"]
"#
    )
}

/// CPU time the server uses over `window`.
fn cpu_over(s: &Server, window: Duration) -> Duration {
    let before = s.cpu_time();
    std::thread::sleep(window);
    s.cpu_time() - before
}

#[test]
fn reading_a_plain_file_config_does_not_make_the_server_spin() {
    let (port, http) = (25430, 25431);
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &config(port, http, "192.0.2.4"));
    let path = dir.path().join("config.yaml");
    for _ in 0..20 {
        let out = std::process::Command::new("cat")
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    // Idle after the reads: a watcher that re-triggers on its own reads
    // burns a whole core here.
    let used = cpu_over(&s, Duration::from_secs(3));
    assert!(
        used < Duration::from_millis(300),
        "the server used {used:?} of CPU in 3 s while idle"
    );
    let m = http_get(&format!("127.0.0.1:{http}"), "/metrics");
    assert!(
        m.contains(r#"oooi_dns_reloads_total{result="ok"} 0"#),
        "{m}"
    );
    // A real change is still applied.
    std::fs::write(&path, config(port, http, "192.0.2.44")).unwrap();
    assert!(wait_for(|| dig(
        "127.0.0.2",
        port,
        &["+short", "api.c1.example.com"]
    )
    .trim()
        == "192.0.2.44"));
    let used = cpu_over(&s, Duration::from_secs(2));
    assert!(used < Duration::from_millis(200), "{used:?} after a reload");
}

#[test]
fn a_half_written_in_place_write_is_not_counted_as_rejected() {
    let (port, http) = (25432, 25433);
    let dir = tempfile::tempdir().unwrap();
    let _s = start(dir.path(), &config(port, http, "192.0.2.4"));
    let path = dir.path().join("config.yaml");
    let text = config(port, http, "192.0.2.45");
    let (head, tail) = text.split_at(text.len() / 2);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all(head.as_bytes()).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    f.write_all(tail.as_bytes()).unwrap();
    drop(f);
    assert!(wait_for(|| dig(
        "127.0.0.2",
        port,
        &["+short", "api.c1.example.com"]
    )
    .trim()
        == "192.0.2.45"));
    let m = http_get(&format!("127.0.0.1:{http}"), "/metrics");
    assert!(
        m.contains(r#"oooi_dns_reloads_total{result="ok"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"oooi_dns_reloads_total{result="rejected"} 0"#),
        "{m}"
    );
}
