//! Arguments for Envoy's `set_envoy_filter_state` foreign function, encoded
//! once per upstream when a table is compiled.
//!
//! The argument is the protobuf `SetEnvoyFilterStateArguments { string path = 1;
//! string value = 2; LifeSpan span = 3 }`; span 2 is `DownstreamConnection`.

use oooi_routes::{DYNAMIC_CLUSTER, Upstream};

const SPAN_DOWNSTREAM_CONNECTION: u8 = 2;

/// The encoded foreign-function calls that send a connection to `up`.
pub fn calls_for(up: &Upstream) -> Vec<Vec<u8>> {
    match up {
        // An empty dynamic host makes sni_dynamic_forward_proxy step aside, so
        // it does not try to resolve the SNI for a connection routed by name.
        Upstream::Cluster(name) => vec![
            encode("envoy.tcp_proxy.cluster", name),
            encode("envoy.upstream.dynamic_host", ""),
        ],
        Upstream::Address { host, port } => vec![
            encode("envoy.tcp_proxy.cluster", DYNAMIC_CLUSTER),
            encode("envoy.upstream.dynamic_host", host),
            encode("envoy.upstream.dynamic_port", &port.to_string()),
        ],
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
