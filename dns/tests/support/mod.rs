//! Running the `oooi-dns` binary and asking it things, for the tests that
//! talk to it over real sockets.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A running server, killed when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// CPU time (user + system) the process has used so far, from
    /// `/proc/<pid>/stat`.
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap();
        // Fields after the command name (which may hold spaces): state is
        // field 3, utime and stime are fields 14 and 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        Duration::from_millis(ticks * 1000 / hz)
    }
}

/// Writes `yaml` to `dir/config.yaml` and serves it.
pub fn start(dir: &Path, yaml: &str) -> Server {
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).expect("write config");
    start_at(&path)
}

/// Serves the config at `path`.
pub fn start_at(path: &Path) -> Server {
    start_with(path, &[])
}

/// Serves the config at `path` with extra `serve` arguments.
pub fn start_with(path: &Path, args: &[&str]) -> Server {
    start_env(path, args, &[])
}

/// Serves the config at `path` with extra `serve` arguments and
/// environment variables.
pub fn start_env(path: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_oooi-dns"))
        .args(["serve", "--config"])
        .arg(path)
        .args(args)
        .env_remove("POD_IP")
        .envs(env.iter().copied())
        .spawn()
        .expect("start oooi-dns");
    std::thread::sleep(Duration::from_millis(500));
    Server(child)
}

/// The value of the metric line starting with `series` (name and labels)
/// in the server's `/metrics` at `addr`.
pub fn metric(addr: &str, series: &str) -> Option<f64> {
    http_get(addr, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// `dig @server -p port ARGS`, its standard output.
pub fn dig(server: &str, port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{server}"))
        .args(["-p", &port.to_string(), "+time=2", "+tries=1"])
        .args(args)
        .output()
        .expect("dig is required: install dnsutils (tools/dev does)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of `GET http://addr/path`.
pub fn http_get(addr: &str, path: &str) -> String {
    Command::new("curl")
        .args(["-s", &format!("http://{addr}{path}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .expect("curl is required")
}

/// Polls `f` for up to 4 s.
pub fn wait_for(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..40 {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A tiny upstream on loopback: answers every A query with 203.0.113.7,
/// owner name as asked. Returns the number of queries it got.
pub fn spawn_upstream(addr: &str) -> Arc<AtomicUsize> {
    use hickory_proto::op::Message;
    use hickory_proto::rr::{RData, Record, rdata::A};
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let sock = std::net::UdpSocket::bind(addr).expect("bind upstream");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            c.fetch_add(1, Ordering::SeqCst);
            let mut r = Message::response(q.metadata.id, q.metadata.op_code);
            r.metadata.recursion_available = true;
            for query in &q.queries {
                r.add_query(query.clone());
                r.add_answer(Record::from_rdata(
                    query.name().clone(),
                    60,
                    RData::A(A::new(203, 0, 113, 7)),
                ));
            }
            if let Ok(bytes) = r.to_vec() {
                let _ = sock.send_to(&bytes, from);
            }
        }
    });
    count
}

/// Sends `packet` over UDP to `server` and returns the raw reply, if any
/// came within 2 s.
pub fn udp_exchange(server: &str, packet: &[u8]) -> Option<Vec<u8>> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    sock.send_to(packet, server).expect("send");
    let mut buf = [0u8; 65535];
    let (n, _) = sock.recv_from(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}
