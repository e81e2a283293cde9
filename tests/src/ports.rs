//! Free TCP ports for the listeners a test starts.

use std::net::IpAddr;

/// A free TCP port on `ip`. The port is bound and released, and never handed
/// out twice in one process, so two listeners of a test cannot collide.
pub fn free_port(ip: IpAddr) -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut seen = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = std::net::TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
        if port != 0 && !seen.contains(&port) {
            seen.push(port);
            return port;
        }
    }
    0
}
