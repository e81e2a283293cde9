//! Arguments for Envoy's `set_envoy_filter_state` foreign function, encoded
//! once per upstream when a table is compiled.
//!
//! The argument is the protobuf `SetEnvoyFilterStateArguments { string path = 1;
//! string value = 2; LifeSpan span = 3 }`; span 2 is `DownstreamConnection`.

use oooi_routes::{DYNAMIC_CLUSTER, Upstream};

const SPAN_DOWNSTREAM_CONNECTION: u8 = 2;

/// The encoded foreign-function calls that send a connection to `up`.
///
/// For an address the port call comes last: `sni_dynamic_forward_proxy` is
/// rendered with the listener's port as its default (`port_value`), so a
/// connection whose listener port equals the upstream port can skip it (see
/// [`Calls::for_port`]). That is the common case (6443 to kube-apiserver's
/// 6443, 443 to the ignition proxy and the apps VIP, 80 to the VIP's 80) and
/// saves one host call per connection.
pub fn calls_for(up: &Upstream) -> Calls {
    let (calls, port) = match up {
        // An empty dynamic host makes sni_dynamic_forward_proxy step aside, so
        // it does not try to resolve the SNI for a connection routed by name.
        Upstream::Cluster(name) => (
            vec![
                encode("envoy.tcp_proxy.cluster", name),
                encode("envoy.upstream.dynamic_host", ""),
            ],
            None,
        ),
        Upstream::Address { host, port } => (
            vec![
                encode("envoy.tcp_proxy.cluster", DYNAMIC_CLUSTER),
                encode("envoy.upstream.dynamic_host", host),
                encode("envoy.upstream.dynamic_port", &port.to_string()),
            ],
            Some(*port),
        ),
    };
    Calls { calls, port }
}

/// The calls that select one upstream.
pub struct Calls {
    calls: Vec<Vec<u8>>,
    /// The upstream port, for an address (its call is the last one).
    port: Option<u16>,
}

impl Calls {
    /// The calls for a connection on `listener_port`: all of them, or all
    /// but the port call when the listener port is the upstream port.
    pub fn for_port(&self, listener_port: u16) -> &[Vec<u8>] {
        match self.port {
            Some(p) if p == listener_port => &self.calls[..self.calls.len() - 1],
            _ => &self.calls,
        }
    }
}

fn encode(path: &str, value: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + value.len() + 8);
    field(&mut out, 1, path.as_bytes());
    field(&mut out, 2, value.as_bytes());
    out.push(3 << 3);
    out.push(SPAN_DOWNSTREAM_CONNECTION);
    out
}

fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
    out.push((number << 3) | 2);
    let mut len = bytes.len();
    loop {
        let b = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(bytes);
}
